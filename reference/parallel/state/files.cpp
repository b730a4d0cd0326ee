// The files of a training-state save (see files.hpp).
#include "reference/parallel/state/files.hpp"

#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <sstream>

#include "reference/core/error.hpp"
#include "reference/core/text.hpp"

namespace parity::parallel {

namespace fs = std::filesystem;

std::optional<fs::path> latest_training_state(const fs::path& root) {
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return std::nullopt;
  std::optional<fs::path> best;
  std::string best_name;
  for (const fs::directory_entry& entry : fs::directory_iterator(root, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.size() != 13 || name.rfind("step-", 0) != 0 ||
        !std::all_of(name.begin() + 5, name.end(), [](char c) { return c >= '0' && c <= '9'; }))
      continue;
    if (!fs::exists(entry.path() / "index.h5", ec)) continue;
    if (!best || name > best_name) {
      best = entry.path();
      best_name = name;
    }
  }
  return best;
}

std::optional<std::string> save_refused(const fs::path& root, std::uint64_t next_step) {
  const fs::path dir = root / state_files::step_name(next_step);
  std::error_code ec;
  const fs::file_status status = fs::symlink_status(dir, ec);
  if (!fs::exists(status)) return std::nullopt;
  const std::string where = dir.string() + ", where the save of step " + std::to_string(next_step) + " goes,";
  if (!fs::is_directory(status)) return where + " is not a directory; move it away";
  if (fs::exists(fs::symlink_status(dir / "index.h5", ec)))
    return "a training state for step " + std::to_string(next_step) + " exists already at " + dir.string();
  // A save's own files: rank-<digits>.h5 and index.h5, each possibly under its temporary name.
  const auto saves_file = [](const fs::directory_entry& entry) {
    std::error_code failed;
    if (!entry.is_regular_file(failed) || entry.is_symlink(failed)) return false;
    std::string name = entry.path().filename().string();
    if (name.ends_with(".tmp")) name.resize(name.size() - 4);
    if (name == "index.h5") return true;
    if (!name.starts_with("rank-") || !name.ends_with(".h5") || name.size() <= 8) return false;
    return std::all_of(name.begin() + 5, name.end() - 3, [](char c) { return c >= '0' && c <= '9'; });
  };
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    if (!saves_file(*it))
      return where + " holds " + quoted_input(it->path().filename().string(), 200) +
             ", which no save writes: not a save cut short; move it away";
  if (ec) return where + " cannot be read: " + ec.message();
  return std::nullopt;
}

namespace state_files {

std::string step_name(std::uint64_t step) {
  char text[32];
  std::snprintf(text, sizeof text, "step-%08llu", static_cast<unsigned long long>(step));
  return text;
}

std::string rank_file(int rank) {
  char text[32];
  std::snprintf(text, sizeof text, "rank-%05d.h5", rank);
  return text;
}

std::string piece_group(std::int64_t piece) { return "/pieces/" + std::to_string(piece); }

std::uint32_t crc_of(const void* data, std::size_t bytes) {
  uLong crc = crc32(0L, Z_NULL, 0);
  const auto* p = static_cast<const Bytef*>(data);
  while (bytes > 0) {  // zlib takes at most a uInt per call
    const auto n = static_cast<uInt>(std::min<std::size_t>(bytes, 1u << 30));
    crc = crc32(crc, p, n);
    p += n;
    bytes -= n;
  }
  return static_cast<std::uint32_t>(crc);
}


void write_index(const fs::path& partial, const IndexContents& c) {
  record::Table tensors("every tensor of the training state: its name, type and whole shape");
  for (const auto& [name, entry] : c.catalog) {
    tensors.str("name").push_back(name);
    tensors.str("dtype").push_back(entry.first);
    tensors.str("shape").push_back(to_string(entry.second));
  }
  record::Table table("every piece: the rank file holding it, its elements, the range of the whole it lies in, CRC-32");
  for (std::size_t r = 0; r < c.written.size(); ++r) {
    std::istringstream lines(c.written[r]);
    for (std::string line; std::getline(lines, line);) {
      std::istringstream f(line);
      std::string name, piece, elements, first, end, crc;
      std::getline(f, name, '\t');
      std::getline(f, piece, '\t');
      std::getline(f, elements, '\t');
      std::getline(f, first, '\t');
      std::getline(f, end, '\t');
      std::getline(f, crc, '\t');
      table.str("name").push_back(name);
      table.i64("rank").push_back(static_cast<std::int64_t>(r));
      table.i64("piece").push_back(std::stoll(piece));
      table.i64("elements").push_back(std::stoll(elements));
      table.i64("first").push_back(std::stoll(first));
      table.i64("end").push_back(std::stoll(end));
      table.i64("crc32").push_back(std::stoll(crc));
    }
  }
  record::ArrayWriter index(partial / "index.h5.tmp", kTrainingStateSchema, kTrainingStateVersion);
  index.set_attribute("/", "save_id", c.save_id);
  index.set_attribute("/", "next_step", static_cast<std::int64_t>(c.next_step));
  index.set_attribute("/", "optimizer_steps", c.optimizer_steps);
  index.set_attribute("/", "optimizer", c.optimizer);
  index.set_attribute("/", "loss_scale", c.loss_scale);
  index.set_attribute("/", "clean_steps", c.clean_steps);
  index.set_attribute("/", "world_size", static_cast<std::int64_t>(c.world_size));
  index.set_attribute("/", "layout", c.layout);
  if (c.model) {
    // The GPT the state trains, for a reader that builds it (state export's logits).
    const model::GptConfig& g = *c.model;
    index.set_attribute("/model", "vocabulary", g.vocabulary);
    index.set_attribute("/model", "layers", static_cast<std::int64_t>(g.layers));
    index.set_attribute("/model", "hidden", g.hidden);
    index.set_attribute("/model", "heads", static_cast<std::int64_t>(g.heads));
    index.set_attribute("/model", "sequence", g.sequence);
    index.set_attribute("/model", "tied_embeddings", static_cast<std::int64_t>(g.tied_embeddings ? 1 : 0));
    index.set_attribute("/model", "dropout", g.dropout);
    index.set_attribute("/model", "seed", static_cast<std::int64_t>(g.seed));
    index.set_attribute("/model", "dtype", std::string(name_of(g.dtype)));
    index.set_attribute("/model", "moe", g.moe.describe());
  }
  index.write_table("/tensors", tensors);
  index.write_table("/pieces", table);
  index.commit_as(partial / "index.h5");
}

fs::path resolve(const fs::path& path) {
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  if (ec && ec != std::errc::no_such_file_or_directory && ec != std::errc::not_a_directory)
    throw UsageError(path.string() + " cannot be read: " + ec.message());  // a loop of links, a name too long
  if (!fs::exists(status)) throw UsageError(path.string() + " does not exist");
  if (!fs::is_directory(status)) throw UsageError(path.string() + " is not a directory (a training state is one)");
  if (fs::exists(path / "index.h5", ec)) return path;
  const bool partial = path.filename().string().ends_with(".partial") || fs::exists(path / rank_file(0), ec);
  if (partial) {
    const auto previous = latest_training_state(path.parent_path());
    throw UsageError(path.string() + " is a save that was cut short (it has no index.h5) and cannot be restored" +
                     (previous ? "; the newest complete one is " + previous->string() : ""));
  }
  if (const auto newest = latest_training_state(path)) return *newest;
  throw UsageError("no complete training state in " + path.string() + " (looked for step-NNNNNNNN/index.h5)");
}


SaveReader::SaveReader(fs::path directory)
    : directory_(std::move(directory)),
      index_(directory_ / "index.h5", kTrainingStateSchema, kTrainingStateVersion) {
  save_id_ = index_.string_attribute("/", "save_id").value_or("");
  if (save_id_.empty()) throw UsageError(index_.path().string() + " has no save_id: not a complete index");
  const record::Table tensors = index_.read_table("/tensors");
  for (std::size_t i = 0; i < tensors.rows(); ++i)
    tensors_[tensors.get_str("name")[i]] = {tensors.get_str("dtype")[i], tensors.get_str("shape")[i]};
  pieces_ = index_.read_table("/pieces");
}

std::int64_t SaveReader::integer(const std::string& name) const {
  const auto v = index_.int_attribute("/", name);
  if (!v) throw UsageError(index_.path().string() + " has no integer attribute " + name);
  return *v;
}
double SaveReader::number(const std::string& name) const {
  const auto v = index_.float_attribute("/", name);
  if (!v) throw UsageError(index_.path().string() + " has no number attribute " + name);
  return *v;
}

std::optional<model::GptConfig> SaveReader::model() const {
  if (!index_.has("/model")) return std::nullopt;
  auto integer_of = [&](const char* name) {
    const auto v = index_.int_attribute("/model", name);
    if (!v) throw UsageError(index_.path().string() + ": /model has no integer " + name);
    return *v;
  };
  model::GptConfig g;
  g.vocabulary = integer_of("vocabulary");
  g.layers = static_cast<int>(integer_of("layers"));
  g.hidden = integer_of("hidden");
  g.heads = static_cast<int>(integer_of("heads"));
  g.sequence = integer_of("sequence");
  g.tied_embeddings = integer_of("tied_embeddings") != 0;
  g.dropout = index_.float_attribute("/model", "dropout").value_or(0);
  g.seed = static_cast<std::uint64_t>(integer_of("seed"));
  g.dtype = parse_data_type(index_.string_attribute("/model", "dtype").value_or("float32"));
  if (!index_.string_attribute("/model", "moe").value_or("").empty())
    throw UsageError(index_.path().string() + ": the model has MoE layers (" +
                     *index_.string_attribute("/model", "moe") + "), which this reader does not build");
  return g;
}

std::int64_t SaveReader::stage(const HeldTensor& h, std::vector<char>& staged, std::uint64_t& bytes) {
  const std::size_t element = size_of(h.dtype);
  std::int64_t lo = h.runs.empty() ? 0 : h.runs.front().first, hi = 0;
  for (const Run& r : h.runs) {
    lo = std::min(lo, r.first);
    hi = std::max(hi, r.first + r.length);
  }
  std::int64_t copied = 0;
  const auto& names = pieces_.get_str("name");
  for (std::size_t row = 0; row < names.size(); ++row) {
    if (names[row] != h.name || pieces_.get_i64("end")[row] <= lo || pieces_.get_i64("first")[row] >= hi) continue;
    const int rank = static_cast<int>(pieces_.get_i64("rank")[row]);
    const std::int64_t piece = pieces_.get_i64("piece")[row];
    const auto count = static_cast<std::size_t>(pieces_.get_i64("elements")[row]);
    const record::ArrayReader& file = rank_reader(rank);
    const std::string group = piece_group(piece);
    if (file.string_attribute(group, "name").value_or("") != h.name)
      throw UsageError(file.path().string() + ": piece " + std::to_string(piece) + " is not " + h.name +
                       " as the index says");
    const std::vector<std::byte> stored_runs = file.read_whole(group + "/runs", DataType::int64, 2 * count);
    std::vector<std::int64_t> flat(stored_runs.size() / sizeof(std::int64_t));
    std::memcpy(flat.data(), stored_runs.data(), flat.size() * sizeof(std::int64_t));
    std::vector<Run> runs;
    for (std::size_t i = 0; i + 1 < flat.size(); i += 2) runs.push_back({flat[i], flat[i + 1]});
    const std::vector<std::byte> data = file.read_whole(group + "/data", h.dtype, count);
    if (data.size() != count * element || run_elements(runs) != static_cast<std::int64_t>(count))
      throw UsageError(file.path().string() + ": piece " + std::to_string(piece) + " of " + h.name + " holds " +
                       std::to_string(data.size() / element) + " elements, the index says " + std::to_string(count));
    bytes += data.size();
    if (crc_of(data.data(), data.size()) != static_cast<std::uint32_t>(pieces_.get_i64("crc32")[row]))
      throw UsageError(file.path().string() + ": piece " + std::to_string(piece) + " of " + h.name +
                       " fails its CRC-32 check: the file is corrupt");
    for (const RunCopy& c : overlaps(runs, h.runs)) {
      std::memcpy(staged.data() + static_cast<std::size_t>(c.to_offset) * element,
                  data.data() + static_cast<std::size_t>(c.from_offset) * element,
                  static_cast<std::size_t>(c.count) * element);
      copied += c.count;
    }
  }
  return copied;
}


const record::ArrayReader& SaveReader::rank_reader(int rank) {
  auto it = ranks_.find(rank);
  if (it != ranks_.end()) return *it->second;
  const fs::path path = directory_ / rank_file(rank);
  if (!fs::exists(path)) throw UsageError(path.string() + " is missing: the save lacks rank " + std::to_string(rank) + "'s file");
  auto reader = std::make_unique<record::ArrayReader>(path, kTrainingStateSchema, kTrainingStateVersion);
  if (reader->string_attribute("/", "save_id").value_or("") != save_id_)
    throw UsageError(path.string() + " belongs to another save (its save_id differs from " +
                     index_.path().string() + "'s)");
  return *ranks_.emplace(rank, std::move(reader)).first->second;
}


}  // namespace state_files
}  // namespace parity::parallel
