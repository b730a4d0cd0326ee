// The files of a training-state save (store.hpp describes the format): their names, the CRC-32
// of a piece, the index written last and read first, finding a save by its path, and reading
// the pieces of a save back. Shared by the collective save and restore (store.cpp) and by the
// whole-state reader and writer that run in one process (whole.hpp).
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "reference/parallel/state/held.hpp"
#include "reference/record/arrays.hpp"
#include "reference/theory/model_config.hpp"

namespace parity::parallel {

inline constexpr const char* kTrainingStateSchema = "parity-training-state";
inline constexpr std::int64_t kTrainingStateVersion = 1;

// The newest complete save under `root`, if any.
std::optional<std::filesystem::path> latest_training_state(const std::filesystem::path& root);

// Why a save of step `next_step` cannot be made under `root`, if it cannot (a UsageError's line).
// The rule: index.h5 is a save's commit marker, so a `step-N` holding one is a complete save and
// is never overwritten; a `step-N` directory without one was never committed (the files of a save
// cut short) and the save of step N replaces it. A `step-N` that is not a directory (a link, a
// file) or holds a file no save writes is refused too: nothing but a save's own files is removed.
std::optional<std::string> save_refused(const std::filesystem::path& root, std::uint64_t next_step);

}  // namespace parity::parallel

namespace parity::parallel::state_files {

std::string step_name(std::uint64_t step);  // "step-00000003"
std::string rank_file(int rank);            // "rank-00002.h5"
std::string piece_group(std::int64_t piece);  // "/pieces/7"
std::uint32_t crc_of(const void* data, std::size_t bytes);

// What the index holds: the save's scalars, the model it was saved from (when the saver named
// it), every tensor's type and whole shape, and every rank's pieces as its file lists them (a
// line each: "name\tpiece\telements\tfirst\tend\tcrc").
struct IndexContents {
  std::string save_id, optimizer, layout;
  std::uint64_t next_step = 0;
  std::int64_t optimizer_steps = 0, clean_steps = 0;
  int world_size = 0;
  double loss_scale = 1;
  std::optional<model::GptConfig> model;
  std::map<std::string, std::pair<std::string, Shape>> catalog;
  std::vector<std::string> written;  // by rank
};
// Writes `partial`/index.h5 (through a temporary name, forced to disk).
void write_index(const std::filesystem::path& partial, const IndexContents& index);

// A save's directory from a path naming it or a root holding saves; UsageError for a path that
// is missing, not a directory, a save cut short, or holds no complete save.
std::filesystem::path resolve(const std::filesystem::path& path);

// One save, opened for reading: its index and, as pieces are needed, its rank files.
class SaveReader {
 public:
  explicit SaveReader(std::filesystem::path directory);
  const std::filesystem::path& directory() const { return directory_; }
  const record::ArrayReader& index() const { return index_; }
  std::int64_t integer(const std::string& name) const;
  double number(const std::string& name) const;
  // The model the saver named, if it did.
  std::optional<model::GptConfig> model() const;
  // name -> (dtype, shape as to_string writes it)
  const std::map<std::string, std::pair<std::string, std::string>>& tensors() const { return tensors_; }
  // Copies into `staged` (the held tensor's bytes) every overlap of the saved pieces of h's
  // name with what h holds, checking each piece's CRC-32; returns the elements copied and adds
  // the bytes read to `bytes`.
  std::int64_t stage(const HeldTensor& h, std::vector<char>& staged, std::uint64_t& bytes);

 private:
  const record::ArrayReader& rank_reader(int rank);
  std::filesystem::path directory_;
  record::ArrayReader index_;
  std::string save_id_;
  std::map<std::string, std::pair<std::string, std::string>> tensors_;
  record::Table pieces_;
  std::map<int, std::unique_ptr<record::ArrayReader>> ranks_;
};

}  // namespace parity::parallel::state_files
