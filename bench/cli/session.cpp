// Session set-up and the result file's provenance.
#include "bench/cli/session.hpp"

#include <H5public.h>

#include <chrono>
#include <cstdio>
#include <thread>

#include "reference/core/error.hpp"
#include "reference/core/provenance.hpp"
#include "reference/cuda/device.hpp"

namespace parity::cli {

std::string default_output_path(const std::string& what) {
  std::string stamp = utc_now_iso8601();
  for (char& c : stamp)
    if (c == ':') c = '-';
  return "parity-" + what + "-" + stamp + ".h5";
}

Session::Session(int* argc, char*** argv, const CommonOptions& options, std::string subcommand,
                 std::vector<std::string> command_line)
    : options_(options), subcommand_(std::move(subcommand)), command_line_(std::move(command_line)),
      start_time_(utc_now_iso8601()), half_(parse_half_accumulate(options.half_accumulate)) {
  mpi_ = std::make_unique<MpiRuntime>(argc, argv);
  world_ = mpi_->world(options_.timeout_seconds);
  hosts_ = world_->all_gather_strings(process_host());
  if (options_.np > 1 && options_.np != world_->size()) {
    const std::string message = "--np " + std::to_string(options_.np) + " but the launcher started " +
                                std::to_string(world_->size()) + " ranks; drop --np under mpirun or srun";
    agree_on_root([&] { throw UsageError(message); });
  }
  if (options_.out.empty()) options_.out = default_output_path(subcommand_ == "bench collectives" ? "bench" : subcommand_);
  agree_on_root([&] { record::check_output_path(options_.out, options_.force); });
}

Session::~Session() = default;

void Session::agree_on_root(const std::function<void()>& check) {
  std::int64_t failed = 0;
  if (is_root()) {
    try {
      check();
    } catch (const UsageError& e) {
      std::fprintf(stderr, "parity: %s\n", e.what());
      std::fflush(stderr);
      failed = 1;
    }
  }
  world_->broadcast({&failed, 1, DataType::int64, MemorySpace::host}, {&failed, 1, DataType::int64, MemorySpace::host}, 0);
  if (failed) throw Refused{};
}

void Session::check_memory(std::size_t bytes_per_rank, const std::string& what) {
  auto local = world_->split_by_host();
  std::string message;
  if (local->rank() == 0) {
    const unsigned long long available = available_memory_bytes();
    const unsigned long long needed = static_cast<unsigned long long>(bytes_per_rank) * static_cast<unsigned long long>(local->size());
    if (available != 0 && needed > available) {
      char text[256];
      std::snprintf(text, sizeof(text), "%s needs %.2f GiB on %s (%d ranks x %.2f GiB) but only %.2f GiB is available; lower -e or the rank count",
                    what.c_str(), needed / 1073741824.0, process_host().c_str(), local->size(),
                    bytes_per_rank / 1073741824.0, available / 1073741824.0);
      message = text;
    }
  }
  std::string first;
  for (const auto& m : world_->all_gather_strings(message))
    if (!m.empty()) { first = m; break; }
  if (!first.empty()) agree_on_root([&] { throw UsageError(first); });
}

void Session::maybe_inject_stall() {
  if (options_.inject_stall_rank != world_->rank()) return;
  // Sleep through the others' timeout; their watchdog ends the job.
  for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
}

record::ResultsFile& Session::results() {
  require(is_root(), "only rank 0 writes the result file");
  if (!results_) results_ = std::make_unique<record::ResultsFile>(options_.out, options_.force);
  return *results_;
}

void Session::commit_results() {
  if (!is_root()) return;
  auto& file = results();
  auto devices = cuda::device_names();
  const std::vector<std::pair<std::string, record::Attribute>> attributes = {
      {"parity_version", parity_version()},
      {"git_commit", git_commit()},
      {"command_line", quote_command_line(command_line_)},
      {"subcommand", subcommand_},
      {"start_time_utc", start_time_},
      {"end_time_utc", utc_now_iso8601()},
      {"world_size", static_cast<std::int64_t>(world_->size())},
      {"hosts", hosts_},
      {"backend", std::string(world_->backend())},
      {"device", std::string("cpu")},
      {"cuda_compiled", static_cast<std::int64_t>(cuda::compiled_with_cuda() ? 1 : 0)},
      {"cuda_devices_visible", devices},
      {"mpi_library", MpiRuntime::library_version()},
      {"hdf5_version", std::to_string(H5_VERS_MAJOR) + "." + std::to_string(H5_VERS_MINOR) + "." + std::to_string(H5_VERS_RELEASE)},
      {"compiler", compiler_description()},
      {"cpu_model", cpu_model()},
      {"half_accumulate", std::string(name_of(half_))},
      {"timeout_seconds", options_.timeout_seconds},
  };
  for (const auto& [name, value] : attributes) file.set_attribute("/", name, value);
  file.commit();
  if (!options_.quiet) std::fprintf(stderr, "[%s] results written to %s\n", subcommand_.c_str(), options_.out.c_str());
}

}  // namespace parity::cli
