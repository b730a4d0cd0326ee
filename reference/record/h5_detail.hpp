// The HDF5 C API helpers the record folder's files share (h5.cpp: result files; arrays.cpp:
// files of typed arrays): owned identifiers, checked calls, groups by path, attributes, and
// reading strings and numbers back. Internal to reference/record.
#pragma once

#include <hdf5.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <optional>
#include <source_location>
#include <string>
#include <system_error>
#include <type_traits>
#include <utility>
#include <vector>

#include "reference/core/error.hpp"
#include "reference/record/output.hpp"
#include "reference/record/table.hpp"

namespace parity::record::detail {
// HDF5 prints its error stack to stderr by default; every failure here becomes an exception
// with its own message instead, so the stack would only be noise (and garbles a report's output).
inline void silence_hdf5() { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); }

// Owns one hid_t and closes it with the matching H5?close; every identifier opened here lives in
// one of these, so no early return or exception leaks a handle (a leaked handle keeps the file
// open, which would block the rename in commit()).
class Handle {
 public:
  using Closer = herr_t (*)(hid_t);
  Handle() = default;
  Handle(hid_t id, Closer close) : id_(id), close_(close) {}
  Handle(Handle&& other) noexcept : id_(std::exchange(other.id_, H5I_INVALID_HID)), close_(other.close_) {}
  Handle& operator=(Handle&& other) noexcept {
    if (this != &other) {
      reset();
      id_ = std::exchange(other.id_, H5I_INVALID_HID);
      close_ = other.close_;
    }
    return *this;
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  ~Handle() { reset(); }
  hid_t get() const { return id_; }
  // Gives the identifier up to the caller, who closes it.
  hid_t release() { return std::exchange(id_, H5I_INVALID_HID); }
  void reset() {
    if (id_ >= 0 && close_ != nullptr) close_(id_);
    id_ = H5I_INVALID_HID;
  }

 private:
  hid_t id_ = H5I_INVALID_HID;
  Closer close_ = nullptr;
};


// Wraps a freshly returned identifier, throwing Error when the call failed.
inline Handle own(hid_t id, Handle::Closer close, const std::string& message, const char* call,
           std::source_location where = std::source_location::current()) {
  if (id < 0) throw Error(message + full_disk_hint(), call, where);
  return Handle(id, close);
}

inline void check(herr_t status, const std::string& message, const char* call,
           std::source_location where = std::source_location::current()) {
  if (status < 0) throw Error(message + full_disk_hint(), call, where);
}

inline bool check_tri(htri_t status, const std::string& message, const char* call,
               std::source_location where = std::source_location::current()) {
  if (status < 0) throw Error(message, call, where);
  return status > 0;
}

// Variable-length UTF-8 string type, used for every string this file writes.
inline Handle vlen_utf8_type() {
  Handle type = own(H5Tcopy(H5T_C_S1), H5Tclose, "cannot create string type", "H5Tcopy");
  check(H5Tset_size(type.get(), H5T_VARIABLE), "cannot create string type", "H5Tset_size");
  check(H5Tset_cset(type.get(), H5T_CSET_UTF8), "cannot create string type", "H5Tset_cset");
  return type;
}

inline Handle scalar_space() {
  return own(H5Screate(H5S_SCALAR), H5Sclose, "cannot create dataspace", "H5Screate");
}

inline Handle vector_space(std::size_t n) {
  const hsize_t dims[1] = {static_cast<hsize_t>(n)};
  return own(H5Screate_simple(1, dims, nullptr), H5Sclose, "cannot create dataspace",
             "H5Screate_simple");
}

// H5Awrite/H5Dwrite refuse a null buffer even for zero elements, and an empty vector's data()
// may be null.
template <typename T>
inline const void* buffer_of(const std::vector<T>& values) {
  static const T dummy{};
  return values.empty() ? static_cast<const void*>(&dummy) : static_cast<const void*>(values.data());
}

inline std::vector<const char*> c_strings(const std::vector<std::string>& values) {
  std::vector<const char*> pointers;
  pointers.reserve(values.size());
  for (const auto& value : values) pointers.push_back(value.c_str());
  return pointers;
}

// Splits "/a/b/c" (or "a/b/c") into its components; "/" and "" name the root.
inline std::vector<std::string> split_group(const std::string& group) {
  std::vector<std::string> parts;
  std::size_t start = 0;
  while (start <= group.size()) {
    std::size_t end = group.find('/', start);
    if (end == std::string::npos) end = group.size();
    std::string part = group.substr(start, end - start);
    if (!part.empty() && part != ".") parts.push_back(std::move(part));
    start = end + 1;
  }
  return parts;
}

inline std::string join_group(const std::vector<std::string>& parts) {
  std::string path;
  for (const auto& part : parts) path += "/" + part;
  return path.empty() ? "/" : path;
}

// Opens the object at `parts` below the group `start`, walking component by component so that a
// missing intermediate group reads as "absent" rather than as an HDF5 failure. Returns an invalid
// handle when any component is missing.
inline Handle open_object(hid_t start, const std::vector<std::string>& parts, const std::string& where) {
  Handle current = own(H5Oopen(start, ".", H5P_DEFAULT), H5Oclose, "cannot open a group in " + where, "H5Oopen");
  for (const auto& part : parts) {
    if (H5Iget_type(current.get()) != H5I_GROUP) return Handle();
    const bool exists = check_tri(H5Lexists(current.get(), part.c_str(), H5P_DEFAULT),
                                  "cannot look up " + part + " in " + where, "H5Lexists");
    if (!exists) return Handle();
    current = own(H5Oopen(current.get(), part.c_str(), H5P_DEFAULT), H5Oclose,
                  "cannot open " + part + " in " + where, "H5Oopen");
  }
  return current;
}

// Opens the group at `group`, creating it and any missing parents.
inline Handle open_or_create_group(hid_t file, const std::string& group, const std::string& where) {
  Handle current = own(H5Gopen2(file, "/", H5P_DEFAULT), H5Gclose, "cannot open / in " + where, "H5Gopen2");
  std::string walked;
  for (const auto& part : split_group(group)) {
    walked += "/" + part;
    const bool exists = check_tri(H5Lexists(current.get(), part.c_str(), H5P_DEFAULT),
                                  "cannot look up " + walked + " in " + where, "H5Lexists");
    if (exists) {
      current = own(H5Gopen2(current.get(), part.c_str(), H5P_DEFAULT), H5Gclose,
                    walked + " in " + where + " exists and is not a group", "H5Gopen2");
    } else {
      current = own(H5Gcreate2(current.get(), part.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                    H5Gclose, "cannot create group " + walked + " in " + where, "H5Gcreate2");
    }
  }
  return current;
}

// Writes (replacing any earlier value) one attribute on an open object.
inline void write_attribute(hid_t object, const std::string& name, const Attribute& value,
                     const std::string& where) {
  const std::string what = "cannot write attribute " + name + " of " + where;
  if (check_tri(H5Aexists(object, name.c_str()), what, "H5Aexists")) {
    check(H5Adelete(object, name.c_str()), what, "H5Adelete");
  }
  auto create_and_write = [&](hid_t file_type, hid_t memory_type, hid_t space, const void* data) {
    Handle attribute = own(H5Acreate2(object, name.c_str(), file_type, space, H5P_DEFAULT, H5P_DEFAULT),
                           H5Aclose, what, "H5Acreate2");
    check(H5Awrite(attribute.get(), memory_type, data), what, "H5Awrite");
  };
  std::visit(
      [&](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, std::string>) {
          Handle type = vlen_utf8_type();
          Handle space = scalar_space();
          const char* pointer = v.c_str();
          create_and_write(type.get(), type.get(), space.get(), &pointer);
        } else if constexpr (std::is_same_v<T, double>) {
          Handle space = scalar_space();
          create_and_write(H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, space.get(), &v);
        } else if constexpr (std::is_same_v<T, std::int64_t>) {
          Handle space = scalar_space();
          create_and_write(H5T_STD_I64LE, H5T_NATIVE_INT64, space.get(), &v);
        } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
          Handle type = vlen_utf8_type();
          Handle space = vector_space(v.size());
          const auto pointers = c_strings(v);
          create_and_write(type.get(), type.get(), space.get(), buffer_of(pointers));
        } else if constexpr (std::is_same_v<T, std::vector<double>>) {
          Handle space = vector_space(v.size());
          create_and_write(H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, space.get(), buffer_of(v));
        } else {
          static_assert(std::is_same_v<T, std::vector<std::int64_t>>);
          Handle space = vector_space(v.size());
          create_and_write(H5T_STD_I64LE, H5T_NATIVE_INT64, space.get(), buffer_of(v));
        }
      },
      value);
}

// ---- reading helpers ----------------------------------------------------------------------------

// An attribute or a dataset: both are read the same way, through different calls.
struct Source {
  hid_t id;
  bool attribute;
  std::string where;  // for messages

  Handle type() const {
    return attribute ? own(H5Aget_type(id), H5Tclose, "cannot read type of " + where, "H5Aget_type")
                     : own(H5Dget_type(id), H5Tclose, "cannot read type of " + where, "H5Dget_type");
  }
  Handle space() const {
    return attribute ? own(H5Aget_space(id), H5Sclose, "cannot read shape of " + where, "H5Aget_space")
                     : own(H5Dget_space(id), H5Sclose, "cannot read shape of " + where, "H5Dget_space");
  }
  void read(hid_t memory_type, void* buffer) const {
    if (attribute) {
      check(H5Aread(id, memory_type, buffer), "cannot read " + where, "H5Aread");
    } else {
      check(H5Dread(id, memory_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, buffer), "cannot read " + where, "H5Dread");
    }
  }
  // Number of elements; scalars count as one. Only scalar and 1-D shapes are meaningful here.
  std::optional<std::size_t> length() const {
    Handle s = space();
    const int rank = H5Sget_simple_extent_ndims(s.get());
    if (rank < 0) throw Error("cannot read shape of " + where, "H5Sget_simple_extent_ndims");
    if (rank == 0) return H5Sget_simple_extent_type(s.get()) == H5S_SCALAR ? std::optional<std::size_t>(1) : std::optional<std::size_t>(0);
    if (rank != 1) return std::nullopt;
    hsize_t dims[1] = {0};
    if (H5Sget_simple_extent_dims(s.get(), dims, nullptr) < 0) {
      throw Error("cannot read shape of " + where, "H5Sget_simple_extent_dims");
    }
    return static_cast<std::size_t>(dims[0]);
  }
  H5T_class_t type_class() const {
    Handle t = type();
    return H5Tget_class(t.get());
  }
  // A dataset of n > 0 values with no storage at all was never written: it holds fill values
  // where a file of results holds data (this file and the tools that feed it write every value).
  // Refused before it is read, so that a file declaring a billion rows and storing none costs no
  // memory. (Partly allocated passes: HDF5 before 1.10.9 reports compressed and edge-chunked
  // data so.)
  void require_written(std::size_t n) const {
    if (attribute || n == 0) return;
    H5D_space_status_t status{};
    check(H5Dget_space_status(id, &status), "cannot read " + where, "H5Dget_space_status");
    if (status == H5D_SPACE_STATUS_NOT_ALLOCATED)
      throw UsageError(where + " declares " + std::to_string(n) + " values but its data was never written (a damaged file)");
  }
};

// Reads strings stored either as variable-length (what this file writes) or fixed-length strings
// (what other tools may write). Returns nullopt when the source does not hold strings.
inline std::optional<std::vector<std::string>> read_strings(const Source& source) {
  Handle file_type = source.type();
  if (H5Tget_class(file_type.get()) != H5T_STRING) return std::nullopt;
  const auto n = source.length();
  if (!n) return std::nullopt;
  source.require_written(*n);
  // The memory type keeps the file's character set: HDF5 does not convert between ASCII and UTF-8.
  const H5T_cset_t cset = H5Tget_cset(file_type.get());
  std::vector<std::string> values;
  values.reserve(*n);
  const htri_t variable = H5Tis_variable_str(file_type.get());
  if (variable < 0) throw Error("cannot read type of " + source.where, "H5Tis_variable_str");
  if (variable > 0) {
    Handle memory_type = vlen_utf8_type();
    check(H5Tset_cset(memory_type.get(), cset), "cannot read " + source.where, "H5Tset_cset");
    std::vector<char*> pointers(std::max<std::size_t>(*n, 1), nullptr);
    source.read(memory_type.get(), pointers.data());
    for (std::size_t i = 0; i < *n; ++i) values.emplace_back(pointers[i] != nullptr ? pointers[i] : "");
    // The library allocated every string; hand them back the way it allocated them.
    Handle space = source.space();
    H5Dvlen_reclaim(memory_type.get(), space.get(), H5P_DEFAULT, pointers.data());
  } else {
    const std::size_t width = H5Tget_size(file_type.get());
    if (width == 0) throw Error("cannot read type of " + source.where, "H5Tget_size");
    Handle memory_type = own(H5Tcopy(H5T_C_S1), H5Tclose, "cannot read " + source.where, "H5Tcopy");
    check(H5Tset_size(memory_type.get(), width), "cannot read " + source.where, "H5Tset_size");
    check(H5Tset_cset(memory_type.get(), cset), "cannot read " + source.where, "H5Tset_cset");
    check(H5Tset_strpad(memory_type.get(), H5T_STR_NULLPAD), "cannot read " + source.where, "H5Tset_strpad");
    std::vector<char> buffer(std::max<std::size_t>(*n, 1) * width, '\0');
    source.read(memory_type.get(), buffer.data());
    for (std::size_t i = 0; i < *n; ++i) {
      const char* start = buffer.data() + i * width;
      values.emplace_back(start, strnlen(start, width));
    }
  }
  return values;
}

// Reads numbers of any integer or float type, converted by HDF5 to T's native type.
template <typename T>
inline std::optional<std::vector<T>> read_numbers(const Source& source) {
  const H5T_class_t type_class = source.type_class();
  if (type_class != H5T_INTEGER && type_class != H5T_FLOAT) return std::nullopt;
  const auto n = source.length();
  if (!n) return std::nullopt;
  source.require_written(*n);
  std::vector<T> values(std::max<std::size_t>(*n, 1));
  source.read(std::is_same_v<T, double> ? H5T_NATIVE_DOUBLE : H5T_NATIVE_INT64, values.data());
  values.resize(*n);
  return values;
}

// An open attribute, or an invalid handle when the object has no attribute of that name.
inline Handle open_attribute(hid_t object, const std::string& name, const std::string& where) {
  if (!check_tri(H5Aexists(object, name.c_str()), "cannot look up attribute " + name + " of " + where,
                 "H5Aexists")) {
    return Handle();
  }
  return own(H5Aopen(object, name.c_str(), H5P_DEFAULT), H5Aclose,
             "cannot open attribute " + name + " of " + where, "H5Aopen");
}

// A scalar (or one-element) string attribute; nullopt when absent or not a string.
inline std::optional<std::string> read_string_attribute(hid_t object, const std::string& name,
                                                 const std::string& where) {
  Handle attribute = open_attribute(object, name, where);
  if (attribute.get() < 0) return std::nullopt;
  const auto values = read_strings(Source{attribute.get(), true, name + " of " + where});
  if (!values || values->size() != 1) return std::nullopt;
  return values->front();
}

// A scalar (or one-element) integer attribute; nullopt when absent or not an integer.
inline std::optional<std::int64_t> read_int_attribute(hid_t object, const std::string& name,
                                               const std::string& where) {
  Handle attribute = open_attribute(object, name, where);
  if (attribute.get() < 0) return std::nullopt;
  const Source source{attribute.get(), true, name + " of " + where};
  if (source.type_class() != H5T_INTEGER) return std::nullopt;
  const auto values = read_numbers<std::int64_t>(source);
  if (!values || values->size() != 1) return std::nullopt;
  return values->front();
}

// Opens a file for reading, refusing with one line what is not there or not HDF5.
inline Handle open_for_reading(const std::filesystem::path& path) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (!std::filesystem::exists(status)) throw UsageError(path.string() + " does not exist");
  if (std::filesystem::is_directory(status)) throw UsageError(path.string() + " is a directory, not a result file");
  // A pipe would hold the open until something writes to it; HDF5 needs a file it can seek in.
  if (std::filesystem::is_fifo(status) || std::filesystem::is_socket(status))
    throw UsageError(path.string() + " is a pipe or socket, not an HDF5 file");
  if (H5Fis_hdf5(path.c_str()) <= 0) throw UsageError(path.string() + " is not an HDF5 file");
  const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  // Truncation is the likely cause: HDF5 checks the stored end of file against the real one.
  if (file < 0) throw UsageError(path.string() + " cannot be opened as HDF5 (truncated or damaged?)");
  return Handle(file, H5Fclose);
}

// Runs `body` on the file, turning HDF5 failures inside it into one user-facing line: the file is
// user input, and a damaged file is the user's problem to hear about, not a parity fault.
template <typename Body>
inline auto read_file(const std::filesystem::path& path, Body body) {
  silence_hdf5();
  Handle file = open_for_reading(path);
  try {
    return body(file.get());
  } catch (const Error&) {
    throw UsageError(path.string() + " cannot be read (truncated or damaged HDF5 file?)");
  }
}



// A table as a group of column datasets at `group` of an open file (`name`: the file, for
// messages); refuses a group that holds one already.
void write_table_in(hid_t file, const std::filesystem::path& name, const std::string& group, const Table& table);
// The table at `group` of an open file; UsageError naming `path` when it is missing or damaged.
Table read_table_in(hid_t file, const std::filesystem::path& path, const std::string& group);

}  // namespace parity::record::detail
