// The HDF5 side of result files, for this folder's writers (results_file.cpp, partial.cpp): a
// file being written under its temporary name, with the schema's root attributes, tables as
// groups of column datasets and attributes on groups; closed and renamed into place when done.
// The reading functions (inspect, has_table, read_table) are declared in reading.hpp.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include "reference/record/table.hpp"

namespace parity::record::h5 {

class Writer {
 public:
  // Creates `temporary` (remembered for discard_temporary_file) with the schema's root
  // attributes; on failure removes whatever HDF5 made and throws Error.
  explicit Writer(std::filesystem::path temporary);
  // Closes the file if still open and, unless committed, removes it.
  ~Writer();
  Writer(const Writer&) = delete;
  Writer& operator=(const Writer&) = delete;

  // Attributes on a group (created with its parents when missing); "/" is the root.
  void set_attribute(const std::string& group, const std::string& name, const Attribute& value);
  // A table as a group of column datasets at `group`; refuses a group that holds one already.
  void write_table(const std::string& group, const Table& table);
  // Closes the file and renames it to `path` (refused when `path` exists, unless force).
  void commit_as(const std::filesystem::path& path, bool force);
  bool open() const { return file_ >= 0; }

 private:
  std::filesystem::path temporary_;
  std::int64_t file_ = -1;  // hid_t
  bool committed_ = false;
};

}  // namespace parity::record::h5
