// Files of typed arrays (the training state's shards and index, parallel/state/): a schema name
// and version as root attributes, 1-D datasets of any parity data type (float16 and bfloat16
// stored as their bits, unsigned 16-bit, with the type named in the dataset's `dtype`
// attribute; every dataset has one), attributes on groups and datasets, and tables. Written
// under a temporary name, flushed to disk and renamed into place when complete; read back with
// one clear line (UsageError) for a missing, damaged or foreign file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "reference/core/dtype.hpp"
#include "reference/record/table.hpp"

namespace parity::record {

class ArrayWriter {
 public:
  // Creates `temporary` with the root attributes schema = `schema`, schema_version = `version`.
  ArrayWriter(std::filesystem::path temporary, const std::string& schema, std::int64_t version);
  // Closes the file if still open and, unless committed, removes it.
  ~ArrayWriter();
  ArrayWriter(const ArrayWriter&) = delete;
  ArrayWriter& operator=(const ArrayWriter&) = delete;

  // A 1-D dataset of `count` elements of `type` at `path` ("/pieces/3/data"; groups made).
  void write(const std::string& path, DataType type, const void* data, std::size_t count);
  // An attribute on the group or dataset at `path` (a missing group is made).
  void set_attribute(const std::string& path, const std::string& name, const Attribute& value);
  void write_table(const std::string& group, const Table& table);
  // Closes the file, forces it to disk, renames it to `path` (refused when `path` exists) and
  // forces the directory entry to disk: once this returns, a crash leaves the whole file.
  void commit_as(const std::filesystem::path& path);

 private:
  std::filesystem::path temporary_;
  std::int64_t file_ = -1;  // hid_t
  bool committed_ = false;
};

// Forces a directory's entries (a rename into it) to disk.
void sync_directory(const std::filesystem::path& directory);

class ArrayReader {
 public:
  // Opens `path` read-only; refuses (UsageError) a missing, non-HDF5 or damaged file, another
  // schema, or a version outside [1, version].
  ArrayReader(std::filesystem::path path, const std::string& schema, std::int64_t version);
  ~ArrayReader();
  ArrayReader(const ArrayReader&) = delete;
  ArrayReader& operator=(const ArrayReader&) = delete;

  const std::filesystem::path& path() const { return path_; }
  std::int64_t version() const { return version_; }
  bool has(const std::string& path) const;
  // Whether `path` is a group (false for a dataset or nothing), and the names of a group's
  // members in name order (empty for anything else).
  bool is_group(const std::string& path) const;
  std::vector<std::string> members(const std::string& group) const;
  // Attributes of the group or dataset at `path`; nullopt when absent or of another kind.
  std::optional<std::string> string_attribute(const std::string& path, const std::string& name) const;
  std::optional<std::int64_t> int_attribute(const std::string& path, const std::string& name) const;
  std::optional<double> float_attribute(const std::string& path, const std::string& name) const;
  // A 1-D dataset's element count and type (its `dtype` attribute).
  std::size_t length(const std::string& path) const;
  DataType dtype(const std::string& path) const;
  // Elements [first, first + count) of the dataset at `path` into `out` (count elements of the
  // dataset's own type, which must be `type`).
  void read(const std::string& path, DataType type, std::size_t first, std::size_t count, void* out) const;
  // Every element of the dataset at `path` (of type `type`), as bytes; refused (UsageError) when
  // it holds more than at_most, before anything is read.
  std::vector<std::byte> read_whole(const std::string& path, DataType type, std::size_t at_most) const;
  Table read_table(const std::string& group) const;

 private:
  std::filesystem::path path_;
  std::int64_t file_ = -1;  // hid_t
  std::int64_t version_ = 0;
};

}  // namespace parity::record
