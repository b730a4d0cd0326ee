// parity bench calibrate: measures the primitives on every rank at once (Job::calibration,
// bench/commands/calibration.hpp), an all-reduce against the ring on the ping-pong's link, and
// writes the cluster description `parity plan --cluster FILE` reads.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <cmath>
#include <fstream>
#include <stdexcept>
#include <sstream>
#include <tuple>

#include "bench/cli/shared.hpp"
#include "bench/commands/calibration.hpp"
#include "bench/commands/command.hpp"
#include "reference/core/error.hpp"
#include "reference/core/json.hpp"
#include "reference/core/text.hpp"
#include "reference/record/output.hpp"
#include "reference/cuda/device.hpp"
#include "reference/theory/planner.hpp"

namespace parity::cli {
namespace {

using Clock = std::chrono::steady_clock;

struct CalibrateOptions {
  std::string dtype = "float32";
  std::string cluster_out;  // default: the result file's name with .cluster.json
};

// The median over ranks of each sample: the cluster's figure (slow ranks show in the table).
theory::Calibration median_over_ranks(const record::Table& t, const std::string& type, int ranks) {
  theory::Calibration out;
  std::vector<theory::Calibration> each;
  for (int r = 0; r < ranks; ++r) each.push_back(calibration_of_rank(t, type, r));
  out = each.front();
  // Each sample's seconds: the median over the ranks' same sample.
  const auto median_of = [&](auto& samples, const auto& of_rank) {
    for (std::size_t i = 0; i < samples.size(); ++i) {
      std::vector<double> s;
      for (const auto& c : each) s.push_back(of_rank(c)[i].seconds);
      samples[i].seconds = percentile(s, 0.5);
    }
  };
  median_of(out.gemm, [](const theory::Calibration& c) -> const auto& { return c.gemm; });
  median_of(out.ops, [](const theory::Calibration& c) -> const auto& { return c.ops; });
  median_of(out.stream, [](const theory::Calibration& c) -> const auto& { return c.stream; });
  return out;
}

// A JSON number: a figure that is not finite is a fault here (JSON has no inf or nan).
std::string number(double x) {
  if (!std::isfinite(x)) throw std::runtime_error("the cluster description came to a figure that is not finite (" + std::to_string(x) + ")");
  std::ostringstream s;
  s.precision(6);
  s << x;
  return s.str();
}

class BenchCalibrate final : public CommandWith<CalibrateOptions> {
 public:
  BenchCalibrate()
      : CommandWith({.name = "bench calibrate",
                     .help = "Measure the primitives on every rank at once (matrix products over a grid of shapes, the ops a "
                             "training step is made of, an add streaming from each level of memory, the point-to-point link "
                             "within a host and across hosts, the collectives swept as bench collectives times them: their "
                             "efficiency by size and alpha-beta, over every rank and, on several hosts, within a host and "
                             "across hosts) and write them as a cluster "
                             "description that `parity plan --cluster FILE` reads; the benchmarks predict their step times "
                             "from the same measurement",
                     .order = 25,
                     .in_run = true,
                     .tables = {&kCalibrateTable, &kCalibrateLinksTable, &kCalibrateCollectivesTable, &kPointToPointTable, &kCalibrateLevelsTable},
                     .parent_help = "Benchmarks",
                     .no_probe_reason = "its rows are one block (every rank's measurement of a type, journaled together): "
                                        "a resumed run takes the block whole or measures it again (bench_calibrate.sh)"}) {}

  void declare(CommandOptions& o) override {
    o.add("--dtype", options_.dtype, "float32 or float64: the type the products and ops are measured in");
    o.add("--cluster-out", options_.cluster_out,
          "Cluster description to write (JSON; an existing one only with --force) [default: the result file's name with .cluster.json]");
  }

  std::optional<int> prepare(std::optional<int>) override {
    const DataType dtype = parse_data_type(options_.dtype);
    if (dtype != DataType::float32 && dtype != DataType::float64)
      throw UsageError("--dtype " + options_.dtype + ": calibration runs in float32 or float64");
    // Before any rank runs: the description must be writable where it is to go.
    // (Without --out the result file's name is made later, in the working directory.)
    const std::string path = cluster_path(common().out.empty() ? "parity-bench-calibrate.h5" : common().out);
    namespace fs = std::filesystem;
    const fs::path where = fs::path(path).parent_path().empty() ? fs::path(".") : fs::path(path).parent_path();
    const fs::file_status status = user_path_status("--cluster-out", path);
    if (fs::is_directory(status)) throw UsageError("--cluster-out " + quoted_input(path) + " is a directory");
    if (fs::exists(status) && !fs::is_regular_file(status))
      throw UsageError("--cluster-out " + quoted_input(path) + " is not a regular file");
    // An existing description is replaced with --force only, or by the resumed run that wrote it
    // (its default name, beside the result file); without --out (the result file's name is
    // made later, and in `parity run`) there is none to name yet.
    const bool resumed_own = !common().resume.empty() && options_.cluster_out.empty();
    if (!common().out.empty() && fs::exists(status) && !common().force && !resumed_own)
      throw UsageError("--cluster-out " + quoted_input(path) + " exists; pass --force to overwrite");
    if (!fs::is_directory(user_path_status("--cluster-out", where.string())) || access(where.c_str(), W_OK) != 0)
      throw UsageError("--cluster-out " + quoted_input(path) + ": cannot write in " + quoted_input(where.string()));
    if (!common().out.empty() && same_path(path, common().out))
      throw UsageError("--cluster-out " + quoted_input(path) + " is the result file itself");
    refuse_output_onto("--cluster-out", path, {{"--hostfile", common().hostfile}});
    try {  // the rest of what a result file's path must be (not on /proc, a name the system takes)
      record::check_output_path(path, true, "--cluster-out");
    } catch (const UsageError& e) {
      throw UsageError(std::string("--cluster-out: ") + e.what());
    }
    return std::nullopt;
  }

  // Rank 0's link to the first rank on its host and to the first rank on another host (-1: none).
  struct Levels {
    int node_peer = -1, network_peer = -1;
    theory::AlphaBeta node, network;
  };

  int execute(Job& job) override {
    Session& s = job.session;
    const DataType dtype = parse_data_type(options_.dtype);
    // The ops' operands at the largest count (five arrays and a product's three), then the
    // stream's three arrays at its largest.
    const auto largest = [](const auto& counts) { return static_cast<std::size_t>(counts[std::size(counts) - 1]); };
    const std::size_t ops = 5 * largest(theory::kOpElements) + 3 * (std::size_t{1} << 20);
    const std::size_t stream = 3 * largest(theory::kStreamElements);
    s.admit((ops + stream) * size_of(dtype), "the calibration");
    job.calibration(dtype);
    Communicator& world = s.world();
    double efficiency = 1;
    CollectiveEfficiency by_size;  // each collective's efficiency by message size
    if (world.size() >= 2) {
      job.point_to_point(4 << 20);  // ranks 0 and 1, the model the collectives' efficiencies are taken against
      by_size = job.collective_efficiency();
      efficiency = by_size.at("all_reduce").back().second;  // the largest all-reduce: the bandwidth term's fraction
    }
    // Per level: rank 0's ping-pong with the first rank on its host and with the first rank on
    // another host. A level without such a rank takes the other's figures (one host: the
    // network is the node's; a rank a host: the node is the network's).
    Levels levels;
    const std::vector<std::string>& hosts = s.hosts();
    for (int r = 1; r < world.size(); ++r) {
      int& peer = hosts[static_cast<std::size_t>(r)] == hosts[0] ? levels.node_peer : levels.network_peer;
      if (peer < 0) peer = r;
    }
    // Rank 1 is one of them: its ping-pong (the same sizes) is the job's, measured above.
    const auto link_to = [&](int peer) {
      return peer == 1 ? job.point_to_point(4 << 20).model : measure_ping_pong(s, peer, 4 << 20);
    };
    if (levels.node_peer > 0) levels.node = link_to(levels.node_peer);
    if (levels.network_peer > 0) levels.network = link_to(levels.network_peer);
    if (levels.node_peer < 0) levels.node = levels.network;
    if (levels.network_peer < 0) levels.network = levels.node;
    // Ranks on several hosts, two or more on rank 0's: the collectives again within each host
    // (node) against the node's link, and over one rank a host (network: the ranks of each
    // index within their hosts) against the network's, every group at once.
    if (levels.node_peer > 0 && levels.network_peer > 0) {
      int index = 0;  // this rank's place among the ranks of its host
      for (int r = 0; r < world.rank(); ++r) index += hosts[static_cast<std::size_t>(r)] == hosts[static_cast<std::size_t>(world.rank())];
      const std::unique_ptr<Communicator> node = world.split_by_host(), network = world.split(index, world.rank());
      for (auto& [key, points] : job.collective_efficiency_at("node", *node, levels.node)) by_size[key] = points;
      for (auto& [key, points] : job.collective_efficiency_at("network", *network, levels.network)) by_size[key] = points;
    }
    if (!s.is_root()) return kExitOk;
    record::Table level_rows{kCalibrateLevelsTable};
    for (const auto& [name, peer, fit] : {std::tuple{"node", levels.node_peer, levels.node},
                                          std::tuple{"network", levels.network_peer, levels.network}}) {
      if (peer < 0) continue;
      level_rows.put({{"level", name}, {"peer", peer}, {"peer_host", hosts[static_cast<std::size_t>(peer)]},
                      {"alpha_us", fit.alpha_seconds * 1e6}, {"beta_us_per_byte", fit.beta_seconds_per_byte * 1e6},
                      {"bandwidth_GBps", 1e-9 / fit.beta_seconds_per_byte}});
    }
    if (level_rows.rows() > 0) s.results().write_table(level_rows);
    auto& file = s.results();
    const theory::Calibration median = median_over_ranks(job.calibration_rows(), std::string(name_of(dtype)), world.size());
    const std::string path = cluster_path(s.options().out);
    write_cluster(path, s, median, levels, efficiency, by_size, dtype);
    file.set_attribute("/bench/calibrate", "cluster_file", path);
    if (!s.options().quiet) {
      double add_GBps = 0;
      for (const auto& o : median.ops)
        if (o.op == "add") add_GBps = 3.0 * static_cast<double>(o.elements * size_of(dtype)) / o.seconds / 1e9;
      std::fprintf(stderr, "[bench calibrate] %s: products up to %.1f GFLOP/s, add %.1f GB/s a rank", std::string(name_of(dtype)).c_str(),
                   median.best_gemm_GFLOPs(), add_GBps);
      for (const auto& [name, peer, fit] : {std::tuple{"node", levels.node_peer, levels.node},
                                            std::tuple{"network", levels.network_peer, levels.network}})
        if (peer > 0)
          std::fprintf(stderr, ", %s link (rank %d) %.2f us + %.2f GB/s", name, peer, fit.alpha_seconds * 1e6,
                       1e-9 / fit.beta_seconds_per_byte);
      if (world.size() >= 2) std::fprintf(stderr, ", all-reduce at %.2f of the ring model", efficiency);
      std::fprintf(stderr, "\n[bench calibrate] cluster description: %s\n", path.c_str());
    }
    return kExitOk;
  }

 private:
  // --cluster-out, or the result file's name with .cluster.json for .h5.
  std::string cluster_path(std::string out) const {
    if (!options_.cluster_out.empty()) return options_.cluster_out;
    if (out.size() > 3 && out.substr(out.size() - 3) == ".h5") out.resize(out.size() - 3);
    return out + ".cluster.json";
  }

  static void write_cluster(const std::string& path, Session& s, const theory::Calibration& c, const Levels& levels,
                            double efficiency, const CollectiveEfficiency& by_size, DataType dtype) {
    double add_GBps = 0, elementwise = 1;
    for (const auto& o : c.ops)
      if (o.op == "add" && o.elements == theory::kOpElements[std::size(theory::kOpElements) - 1])
        add_GBps = 3.0 * static_cast<double>(o.elements) * static_cast<double>(size_of(dtype)) / o.seconds / 1e9;
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    const double host_GB = static_cast<double>(pages) * static_cast<double>(page) / 1e9;
    // A GPU's own memory and multiprocessors (the planner's tile waves); a CPU core counts as one.
    double memory_GB = host_GB / static_cast<double>(std::max<std::int64_t>(1, s.ranks_per_host()));
    int multiprocessors = 1;
    if (s.on_gpu()) {
      // A copy: devices() returns its list by value, which is gone at the end of this statement.
      const cuda::DeviceInfo gpu = cuda::devices().at(static_cast<std::size_t>(cuda::selected_device()));
      memory_GB = static_cast<double>(gpu.total_bytes) / 1e9;
      multiprocessors = gpu.multiprocessors;
    }
    const bool linked = s.world().size() >= 2;
    const auto GBps = [&](const theory::AlphaBeta& m) { return linked ? 1e-9 / m.beta_seconds_per_byte : add_GBps; };
    const auto us = [&](const theory::AlphaBeta& m) { return linked ? m.alpha_seconds * 1e6 : 0.0; };
    std::ostringstream j;
    j << "{\n  \"gpu\": " << json_quoted(std::string(s.on_gpu() ? "GPU" : "CPU core") + " of " + s.hosts()[0] + " (" + std::string(name_of(dtype)) + ")")
      << ",\n  \"note\": "
      << json_quoted("parity bench calibrate: medians over " + std::to_string(s.world().size()) + " ranks measured at once (" +
                     std::to_string(s.ranks_per_host()) + " a host); peak is the fastest product measured; memory_GBps an add's "
                     "bytes read and written; " +
                     (!linked ? std::string("one rank: no link, the add's bandwidth stands in")
                              : "the node link rank 0's ping-pong with " +
                                    (levels.node_peer > 0 ? "rank " + std::to_string(levels.node_peer) + " on its host"
                                                          : std::string("no rank on its host: the network's figures")) +
                                    ", the network link with " +
                                    (levels.network_peer > 0 ? "rank " + std::to_string(levels.network_peer) + " on " +
                                                                   s.hosts()[static_cast<std::size_t>(levels.network_peer)]
                                                             : std::string("no rank on another host: the node's figures"))))
      << ",\n  \"dtype\": " << json_quoted(std::string(name_of(dtype))) << ",\n  \"peak_TFLOPs\": " << number(c.best_gemm_GFLOPs() / 1e3)
      << ",\n  \"gemm_efficiency\": 1,\n  \"multiprocessors\": " << multiprocessors
      << ",\n  \"memory_GB\": " << number(memory_GB)
      << ",\n  \"runtime_reserve_GB\": " << number(s.on_gpu() ? theory::kRuntimeReserveGB : 0.0)
      << ",\n  \"memory_GBps\": " << number(add_GBps) << ",\n  \"elementwise_efficiency\": " << number(elementwise)
      << ",\n  \"gpus_per_node\": " << s.ranks_per_host() << ",\n  \"node_GBps\": " << number(GBps(levels.node))
      << ",\n  \"node_latency_us\": " << number(us(levels.node)) << ",\n  \"network_GBps\": " << number(GBps(levels.network))
      << ",\n  \"network_latency_us\": " << number(us(levels.network)) << ",\n  \"collective_efficiency\": " << number(efficiency)
      << ",\n  \"gemm_rates\": [";
    for (std::size_t i = 0; i < c.gemm.size(); ++i)
      j << (i ? ", " : "") << "\n    [" << c.gemm[i].m << ", " << c.gemm[i].n << ", " << c.gemm[i].k << ", "
        << number(c.gemm[i].seconds) << "]";
    j << "],\n  \"op_rates\": [";
    for (std::size_t i = 0; i < c.ops.size(); ++i)
      j << (i ? ", " : "") << "\n    [" << json_quoted(c.ops[i].op) << ", " << c.ops[i].elements << ", "
        << number(c.ops[i].seconds) << "]";
    j << "],\n  \"stream_rates\": [";
    for (std::size_t i = 0; i < c.stream.size(); ++i)
      j << (i ? ", " : "") << "[" << c.stream[i].elements << ", " << number(c.stream[i].seconds) << "]";
    j << "]";
    if (!by_size.empty()) {
      j << ",\n  \"collective_rates\": {";
      bool first = true;
      for (const auto& [collective, points] : by_size) {
        j << (first ? "" : ",") << "\n    " << json_quoted(collective) << ": [";
        first = false;
        for (std::size_t i = 0; i < points.size(); ++i)
          j << (i ? ", " : "") << "[" << static_cast<std::int64_t>(points[i].first) << ", " << number(points[i].second) << "]";
        j << "]";
      }
      j << "}";
    }
    j << "\n}\n";
    // Written whole under a temporary name, then renamed: never a half-written description.
    const std::string temporary = path + ".partial";
    {
      std::ofstream f(temporary);
      if (!(f << j.str()) || !f.flush()) {
        std::remove(temporary.c_str());
        throw UsageError("cannot write the cluster description " + quoted_input(path));
      }
    }
    if (std::rename(temporary.c_str(), path.c_str()) != 0) {
      std::remove(temporary.c_str());
      throw UsageError("cannot write the cluster description " + quoted_input(path));
    }
  }
};

const RegisteredCommand<BenchCalibrate> kBenchCalibrate;

}  // namespace
}  // namespace parity::cli
