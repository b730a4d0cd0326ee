// Saving the training state from any layout and restoring it into any other (held.hpp says what
// a rank holds). The format: a directory per save, `<root>/step-<8 digits>/`, holding one HDF5
// file per rank (`rank-<5 digits>.h5`: the pieces that rank writes, each its data, its runs in
// the whole tensor, its name and a CRC-32) and `index.h5` (the save's step, optimizer step
// count, loss-scaler state, layout and world size; every tensor's name, type and whole shape;
// every piece's rank, element count, range and CRC-32). A file per rank plus an index, rather
// than one parallel-HDF5 file: every rank writes its own file with plain POSIX I/O, so no
// rank waits on another's writes or on MPI-IO collective buffering, a damaged or missing rank
// file is named as such, and the files are readable anywhere h5py is (docs/training-state.md).
//
// Nothing lost: a save is written into `step-N.partial/`; the index is written last, after
// every rank's file is complete and on disk, and the directory is then renamed to `step-N`. A
// save cut short (a rank or the job killed) leaves `step-N.partial` without an index: it is
// refused when named and skipped when the newest save is looked for.
//
// Restore: every rank of the new layout reads the index, finds the pieces that overlap what it
// holds, reads each such piece (checking its CRC-32) and copies the overlap into place, so it
// reads only pieces it needs. Everything is read and checked before anything is written into
// the trainer; a refusal on any rank (UsageError: a state saved from a different model,
// optimizer or precision, a layout its tensors cannot be cut into, a missing or corrupt file)
// is raised on every rank with that rank's line, and the trainer is left as it was.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "reference/comm/communicator.hpp"
#include "reference/parallel/state/files.hpp"
#include "reference/parallel/trainer.hpp"
#include "reference/theory/model_config.hpp"

namespace parity::parallel {

struct StateSave {
  std::string layout;  // words naming the layout, kept in the index ("dp 2, zero 1, tp 2")
  // The GPT the trainer trains, kept in the index for readers that build it (state export).
  std::optional<model::GptConfig> model;
  // Tests: "stop_before_index" leaves what a job killed during the save leaves (every rank's
  // file, no index, the directory still `.partial`).
  std::string fault;
};

struct SavedState {
  std::filesystem::path directory;  // step-N (or step-N.partial, when stopped before the index)
  std::int64_t pieces = 0;          // written by this rank
  std::uint64_t bytes = 0;          // tensor bytes written by this rank
  std::uint64_t total_bytes = 0;    // by all ranks
  double seconds = 0;               // the whole save, as this rank saw it
};

// Saves the trainer's state after `next_step` steps (the step training goes on with) under
// `root` (made when missing). Collective over `comm`, the ranks that train. Refuses (UsageError)
// a step saved completely under root; replaces a step-N that was never committed
// (save_refused in files.hpp says which).
SavedState save_training_state(Communicator& comm, Trainer& trainer, const std::filesystem::path& root,
                               std::uint64_t next_step, const StateSave& options = {});

struct SavePlan;

// A save whose files are written while training goes on: the constructor (collective) decides
// who writes what, makes the directory and copies this rank's pieces off the trainer, then a
// thread of this rank writes its file; finish() (collective, called from the training thread
// between steps) waits for every rank's file and writes the index. Destroyed unfinished, the
// save stays `.partial` (refused when named, skipped when the newest is looked for). The
// writer thread calls HDF5, which Debian builds without thread safety: the training thread must
// not read or write an HDF5 file (a result file's journal) until finish() returns.
class AsyncStateSave {
 public:
  AsyncStateSave(Communicator& comm, Trainer& trainer, const std::filesystem::path& root, std::uint64_t next_step,
                 const StateSave& options = {});
  ~AsyncStateSave();
  AsyncStateSave(const AsyncStateSave&) = delete;
  AsyncStateSave& operator=(const AsyncStateSave&) = delete;
  // Seconds the constructor held training up: deciding the pieces and copying them.
  double staged_seconds() const { return staged_seconds_; }
  SavedState finish();

 private:
  Communicator& comm_;
  std::chrono::steady_clock::time_point start_;
  std::unique_ptr<SavePlan> plan_;
  std::thread writer_;
  std::string written_, error_;
  std::uint64_t bytes_ = 0;
  double staged_seconds_ = 0;
};

struct StateLoad {
  // Tests: deliberate mistakes a restore can make, for the checks to catch. "other_step": rank
  // 0's first tensor read from the save at `other` instead; "wrong_offset": rank 0's first
  // tensor one element off; "missing_moment": the optimizer's last state tensor (AdamW's
  // exp_avg_sq) left as it was; "loss_scale": the loss scaler's state not restored;
  // "routing_state": the MoE layers' routing state (aux-free bias and load) not restored.
  std::string fault;
  std::filesystem::path other;
};

struct LoadedState {
  std::filesystem::path directory;
  std::uint64_t next_step = 0;
  std::string layout;     // as saved
  int world_size = 0;     // as saved
  std::uint64_t bytes = 0;  // tensor bytes this rank read
  double seconds = 0;
};

// Restores the trainer from `path`: a save's directory, or a root whose newest complete save
// is taken. Collective over `comm`. Returns the step to go on with.
LoadedState load_training_state(Communicator& comm, Trainer& trainer, const std::filesystem::path& path,
                                const StateLoad& options = {});


}  // namespace parity::parallel
