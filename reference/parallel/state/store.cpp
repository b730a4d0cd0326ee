// Saving and restoring the training state (see store.hpp).
#include "reference/parallel/state/store.hpp"

#include <zlib.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <thread>

#include "reference/core/error.hpp"
#include "reference/parallel/state/files.hpp"
#include "reference/parallel/state/held.hpp"
#include "reference/record/arrays.hpp"

namespace parity::parallel {

namespace fs = std::filesystem;
using namespace state_files;

namespace {

// ---- agreement: a failure on one rank is raised on every rank, so that none waits forever ----

// Runs `body` on every rank; if it threw anywhere, every rank throws the first failing rank's
// message (UsageError when that was one).
template <typename Body>
void on_every_rank(Communicator& comm, Body body) {
  std::string mine;
  try {
    body();
  } catch (const UsageError& e) {
    mine = std::string("U") + e.what();
  } catch (const std::exception& e) {
    mine = std::string("E") + e.what();
  }
  const std::vector<std::string> all = comm.all_gather_strings(mine);
  for (std::size_t r = 0; r < all.size(); ++r) {
    if (all[r].empty()) continue;
    const std::string message = all[r].substr(1) + (all.size() > 1 && static_cast<int>(r) != comm.rank()
                                                        ? " (on rank " + std::to_string(r) + ")"
                                                        : "");
    if (all[r][0] == 'U') throw UsageError(message);
    throw Error(message);
  }
}

// What other ranks need to know of a held tensor: name, type, whole shape and runs, one line.
std::string describe_held(const HeldTensor& h) {
  std::ostringstream out;
  out << h.name << '\t' << name_of(h.dtype) << '\t';
  for (std::size_t d = 0; d < h.whole.size(); ++d) out << (d ? "," : "") << h.whole[d];
  out << '\t';
  for (std::size_t i = 0; i < h.runs.size(); ++i) out << (i ? "," : "") << h.runs[i].first << ':' << h.runs[i].length;
  out << '\n';
  return out.str();
}

struct HeldInfo {
  std::string name, dtype;
  Shape whole;
  std::vector<Run> runs;
};

std::vector<HeldInfo> parse_held(const std::string& text) {
  std::vector<HeldInfo> out;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream fields(line);
    HeldInfo h;
    std::string shape, runs;
    std::getline(fields, h.name, '\t');
    std::getline(fields, h.dtype, '\t');
    std::getline(fields, shape, '\t');
    std::getline(fields, runs, '\t');
    std::istringstream dims(shape);
    for (std::string d; std::getline(dims, d, ',');) h.whole.push_back(std::stoll(d));
    std::istringstream items(runs);
    for (std::string r; std::getline(items, r, ',');) {
      const auto colon = r.find(':');
      h.runs.push_back({std::stoll(r.substr(0, colon)), std::stoll(r.substr(colon + 1))});
    }
    out.push_back(std::move(h));
  }
  return out;
}

// A piece this rank writes: elements [begin, end) of held tensor `held`.
struct Piece {
  std::size_t held = 0;
  std::int64_t begin = 0, end = 0;
};

// Host bytes of a held tensor (copied off a device when it lives there).
Tensor on_host(const Tensor& t) {
  return t.space() == MemorySpace::host ? t : t.to(MemorySpace::host, t.name(), MemoryCategory::workspace);
}

std::string random_id() {
  std::random_device device;
  const std::uint64_t id = (static_cast<std::uint64_t>(device()) << 32) ^ device();
  char text[24];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(id));
  return text;
}

double seconds_from(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

std::string layout_words(const Trainer& trainer, const std::string& layout) {
  std::string parts;
  const StepParts& p = trainer.parts();
  parts += p.schedule->describe();
  for (const auto& s : p.syncs) parts += "; " + s->describe();
  parts += "; " + p.optimizer->describe();
  return layout.empty() ? parts : layout + " (" + parts + ")";
}

}  // namespace

// ---- saving ----

// A save planned on every rank: where it goes, who writes what, this rank's pieces copied off
// the trainer (so training may go on while they are written), and the scalars as they were.
struct SavePlan {
  fs::path root, final_dir, partial;
  // What the index will hold, less the rank files' pieces (finish_save adds them).
  IndexContents index;
  struct PieceData {
    std::string name;
    DataType dtype = DataType::float32;
    std::vector<char> data;
    std::vector<Run> runs;
  };
  std::vector<PieceData> pieces;
  std::string fault;
};

namespace {

// Collective: who writes what (every rank learns what every rank holds), the directory (made by
// rank 0), the save's id, and this rank's pieces copied to host memory.
SavePlan plan_save(Communicator& comm, Trainer& trainer, const fs::path& root, std::uint64_t next_step,
                   const StateSave& options) {
  SavePlan plan;
  plan.root = root;
  plan.index.next_step = next_step;
  plan.final_dir = root / step_name(next_step);
  plan.partial = root / (step_name(next_step) + ".partial");
  plan.fault = options.fault;
  require(plan.fault.empty() || plan.fault == "stop_before_index",
          "unknown training-state save fault '" + plan.fault + "'");
  const std::vector<HeldTensor> held = held_tensors(trainer, true);
  std::string mine;
  for (const HeldTensor& h : held) mine += describe_held(h);
  const std::vector<std::string> everyone = comm.all_gather_strings(mine);
  std::vector<Piece> pieces;
  on_every_rank(comm, [&] {
    std::map<std::string, std::vector<std::pair<int, std::size_t>>> holders;  // name -> (rank, held index)
    std::vector<std::vector<HeldInfo>> infos;
    for (int r = 0; r < comm.size(); ++r) {
      infos.push_back(parse_held(everyone[static_cast<std::size_t>(r)]));
      for (std::size_t i = 0; i < infos.back().size(); ++i) {
        const HeldInfo& h = infos.back()[i];
        holders[h.name].push_back({r, i});
        auto [it, fresh] = plan.index.catalog.try_emplace(h.name, h.dtype, h.whole);
        if (!fresh && (it->second.first != h.dtype || it->second.second != h.whole))
          throw Error("training state: ranks hold " + h.name + " as " + it->second.first + " " +
                      to_string(it->second.second) + " and as " + h.dtype + " " + to_string(h.whole));
      }
    }
    for (const auto& [name, list] : holders) {
      std::vector<std::vector<Run>> runs;
      for (const auto& [r, i] : list) runs.push_back(infos[static_cast<std::size_t>(r)][i].runs);
      const auto ranges = assign_writers(name, element_count(plan.index.catalog.at(name).second), runs);
      for (std::size_t k = 0; k < list.size(); ++k)
        if (list[k].first == comm.rank())
          for (const WriteRange& w : ranges[k]) pieces.push_back({list[k].second, w.begin, w.end});
    }
  });
  on_every_rank(comm, [&] {
    if (comm.rank() != 0) return;
    if (fs::exists(root) && !fs::is_directory(root)) throw UsageError(root.string() + " is not a directory");
    // A complete save of this step is refused; an uncommitted step-N (no index) is replaced.
    if (const auto refused = save_refused(root, next_step)) throw UsageError(*refused);
    fs::remove_all(plan.final_dir);
    fs::remove_all(plan.partial);
    fs::create_directories(plan.partial);
  });
  plan.index.save_id = comm.all_gather_strings(comm.rank() == 0 ? random_id() : "").front();
  plan.index.layout = layout_words(trainer, options.layout);
  plan.index.model = options.model;
  plan.index.optimizer = trainer.parts().optimizer->optimizer().name();
  plan.index.optimizer_steps = trainer.parts().optimizer->steps_taken();
  plan.index.loss_scale = trainer.scaler().scale();
  plan.index.clean_steps = trainer.scaler().clean_steps();
  for (const Piece& piece : pieces) {
    const HeldTensor& h = held[piece.held];
    const Tensor host = on_host(h.tensor);
    const std::size_t element = size_of(h.dtype);
    const auto* data = static_cast<const char*>(host.raw()) + static_cast<std::size_t>(piece.begin) * element;
    plan.pieces.push_back({h.name, h.dtype,
                           std::vector<char>(data, data + static_cast<std::size_t>(piece.end - piece.begin) * element),
                           sub_runs(h.runs, piece.begin, piece.end)});
  }
  return plan;
}

// This rank's file, complete and on disk; returns its pieces for the index, a line each:
// "name\tpiece\telements\tfirst\tend\tcrc".
std::string write_rank_file(const SavePlan& plan, int rank, std::uint64_t& bytes) {
  std::string written;
  record::ArrayWriter file(plan.partial / (rank_file(rank) + ".tmp"), kTrainingStateSchema, kTrainingStateVersion);
  file.set_attribute("/", "save_id", plan.index.save_id);
  file.set_attribute("/", "rank", static_cast<std::int64_t>(rank));
  file.set_attribute("/", "next_step", static_cast<std::int64_t>(plan.index.next_step));
  for (std::size_t j = 0; j < plan.pieces.size(); ++j) {
    const SavePlan::PieceData& piece = plan.pieces[j];
    const std::size_t count = piece.data.size() / size_of(piece.dtype);
    std::vector<std::int64_t> flat;
    std::int64_t lo = piece.runs.front().first, hi = 0;
    for (const Run& r : piece.runs) {
      flat.push_back(r.first);
      flat.push_back(r.length);
      lo = std::min(lo, r.first);
      hi = std::max(hi, r.first + r.length);
    }
    const std::uint32_t crc = crc_of(piece.data.data(), piece.data.size());
    const std::string group = piece_group(static_cast<std::int64_t>(j));
    file.write(group + "/data", piece.dtype, piece.data.data(), count);
    file.write(group + "/runs", DataType::int64, flat.data(), flat.size());
    file.set_attribute(group, "name", piece.name);
    file.set_attribute(group, "crc32", static_cast<std::int64_t>(crc));
    written += piece.name + '\t' + std::to_string(j) + '\t' + std::to_string(count) + '\t' + std::to_string(lo) +
               '\t' + std::to_string(hi) + '\t' + std::to_string(crc) + '\n';
    bytes += piece.data.size();
  }
  file.commit_as(plan.partial / rank_file(rank));
  return written;
}

// Collective, once every rank's file is written (`error`: this rank's failure, if any): the
// index last, then the directory's final name.
SavedState finish_save(Communicator& comm, const SavePlan& plan, const std::string& written, std::uint64_t bytes,
                       const std::string& error) {
  on_every_rank(comm, [&] {
    if (!error.empty()) throw Error(error);
  });
  SavedState saved;
  saved.pieces = static_cast<std::int64_t>(plan.pieces.size());
  saved.bytes = bytes;
  const std::vector<std::string> all_written = comm.all_gather_strings(written);
  for (const std::string& t : comm.all_gather_strings(std::to_string(bytes))) saved.total_bytes += std::stoull(t);
  if (plan.fault == "stop_before_index") {
    saved.directory = plan.partial;
    return saved;
  }
  on_every_rank(comm, [&] {
    if (comm.rank() != 0) return;
    IndexContents index = plan.index;
    index.world_size = comm.size();
    index.written = all_written;
    write_index(plan.partial, index);
    fs::rename(plan.partial, plan.final_dir);
    record::sync_directory(plan.root);
  });
  saved.directory = plan.final_dir;
  return saved;
}

}  // namespace

SavedState save_training_state(Communicator& comm, Trainer& trainer, const fs::path& root, std::uint64_t next_step,
                               const StateSave& options) {
  const auto start = std::chrono::steady_clock::now();
  const SavePlan plan = plan_save(comm, trainer, root, next_step, options);
  std::string written, error;
  std::uint64_t bytes = 0;
  try {
    written = write_rank_file(plan, comm.rank(), bytes);
  } catch (const std::exception& e) {
    error = e.what();
  }
  SavedState saved = finish_save(comm, plan, written, bytes, error);
  saved.seconds = seconds_from(start);
  return saved;
}

AsyncStateSave::AsyncStateSave(Communicator& comm, Trainer& trainer, const fs::path& root, std::uint64_t next_step,
                               const StateSave& options)
    : comm_(comm), start_(std::chrono::steady_clock::now()) {
  plan_ = std::make_unique<SavePlan>(plan_save(comm, trainer, root, next_step, options));
  staged_seconds_ = seconds_from(start_);
  writer_ = std::thread([this] {
    try {
      written_ = write_rank_file(*plan_, comm_.rank(), bytes_);
    } catch (const std::exception& e) {
      error_ = e.what();
    }
  });
}

AsyncStateSave::~AsyncStateSave() {
  if (writer_.joinable()) writer_.join();
}

SavedState AsyncStateSave::finish() {
  require(writer_.joinable(), "AsyncStateSave: finished twice");
  writer_.join();
  SavedState saved = finish_save(comm_, *plan_, written_, bytes_, error_);
  saved.seconds = seconds_from(start_);
  return saved;
}


// ---- restoring ----

using state_files::SaveReader;
using state_files::resolve;

LoadedState load_training_state(Communicator& comm, Trainer& trainer, const fs::path& path, const StateLoad& options) {
  const auto start = std::chrono::steady_clock::now();
  require(options.fault.empty() || options.fault == "other_step" || options.fault == "wrong_offset" ||
              options.fault == "missing_moment" || options.fault == "loss_scale" || options.fault == "routing_state",
          "unknown training-state load fault '" + options.fault + "'");
  LoadedState loaded;
  const std::vector<HeldTensor> held = held_tensors(trainer, false);
  std::vector<std::vector<char>> staged(held.size());
  std::unique_ptr<SaveReader> save;
  std::string held_names;
  on_every_rank(comm, [&] {
    save = std::make_unique<SaveReader>(resolve(path));
    std::unique_ptr<SaveReader> other;
    if (options.fault == "other_step") other = std::make_unique<SaveReader>(resolve(options.other));
    const std::string where = save->directory().string();
    for (std::size_t i = 0; i < held.size(); ++i) {
      const HeldTensor& h = held[i];
      held_names += h.name + '\n';
      const auto it = save->tensors().find(h.name);
      if (it == save->tensors().end())
        throw UsageError(where + " has no tensor " + h.name + " (saved from a different model or optimizer?)");
      if (it->second.second != to_string(h.whole))
        throw UsageError(h.name + " is " + it->second.second + " in " + where + " but " + to_string(h.whole) +
                         " in this model: saved from a different model");
      if (it->second.first != name_of(h.dtype))
        throw UsageError(h.name + " was saved as " + it->second.first + "; this run holds it as " +
                         std::string(name_of(h.dtype)) + " (a restore keeps the precision)");
      staged[i].assign(static_cast<std::size_t>(h.tensor.numel()) * size_of(h.dtype), 0);
      SaveReader& from = (other && i == 0 && comm.rank() == 0) ? *other : *save;
      const std::int64_t copied = from.stage(h, staged[i], loaded.bytes);
      if (copied != h.tensor.numel())
        throw UsageError(where + ": the saved pieces of " + h.name + " cover " + std::to_string(copied) + " of the " +
                         std::to_string(h.tensor.numel()) + " elements this rank holds (a missing or mismatched piece)");
    }
  });
  // Every saved tensor has a place in this run: nothing saved is silently dropped.
  on_every_rank(comm, [&] {
    std::map<std::string, bool> placed;
    for (const auto& [name, entry] : save->tensors()) placed[name] = false;
    for (const std::string& names : comm.all_gather_strings(held_names)) {
      std::istringstream lines(names);
      for (std::string line; std::getline(lines, line);) placed[line] = true;
    }
    for (const auto& [name, found] : placed)
      if (!found)
        throw UsageError(save->directory().string() + " holds " + name +
                         ", which nothing in this run holds (a different model or optimizer?)");
  });
  const std::int64_t optimizer_steps = save->integer("optimizer_steps");
  const double loss_scale = save->number("loss_scale");
  const auto clean_steps = static_cast<int>(save->integer("clean_steps"));
  loaded.directory = save->directory();
  loaded.next_step = static_cast<std::uint64_t>(save->integer("next_step"));
  loaded.world_size = static_cast<int>(save->integer("world_size"));
  loaded.layout = save->index().string_attribute("/", "layout").value_or("");
  // The scaler's state is checked before anything is written.
  on_every_rank(comm, [&] {
    LossScaler check = trainer.scaler();
    check.restore(loss_scale, clean_steps);
  });

  // Everything read and checked on every rank: now into the trainer.
  const std::string last_state = [&] {
    const auto names = trainer.parts().optimizer->optimizer().state_names();
    return names.empty() ? std::string() : "/" + names.back();
  }();
  for (std::size_t i = 0; i < held.size(); ++i) {
    const HeldTensor& h = held[i];
    if (options.fault == "missing_moment" && !last_state.empty() && h.name.ends_with(last_state)) continue;
    if (options.fault == "wrong_offset" && i == 0 && comm.rank() == 0 && h.tensor.numel() > 1) {
      const std::size_t e = size_of(h.dtype);
      std::rotate(staged[i].begin(), staged[i].begin() + static_cast<std::ptrdiff_t>(e), staged[i].end());
    }
    Tensor host = Tensor::empty(h.name, {h.tensor.numel()}, h.dtype, MemoryCategory::workspace, MemorySpace::host);
    std::memcpy(host.raw(), staged[i].data(), staged[i].size());
    Tensor target = h.tensor;
    copy_into(target, host);
    if (h.restore && options.fault != "routing_state") h.restore(target);
  }
  trainer.parts().optimizer->restore_steps(optimizer_steps);
  if (options.fault != "loss_scale") trainer.scaler().restore(loss_scale, clean_steps);
  loaded.seconds = seconds_from(start);
  return loaded;
}

}  // namespace parity::parallel
