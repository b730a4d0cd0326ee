// Files of typed arrays (see arrays.hpp), on the helpers result files share (h5_detail.hpp).
#include "reference/record/arrays.hpp"

#include <fcntl.h>
#include <unistd.h>

#include "reference/record/h5_detail.hpp"

namespace parity::record {

using namespace detail;

namespace {

// The type a dataset of `type` has in the file, and in memory.
struct StoredType {
  hid_t file, memory;
};
StoredType stored_type(DataType type) {
  switch (type) {
    case DataType::float64: return {H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE};
    case DataType::float32: return {H5T_IEEE_F32LE, H5T_NATIVE_FLOAT};
    case DataType::float16:
    case DataType::bfloat16: return {H5T_STD_U16LE, H5T_NATIVE_UINT16};
    case DataType::int32: return {H5T_STD_I32LE, H5T_NATIVE_INT32};
    case DataType::int64: return {H5T_STD_I64LE, H5T_NATIVE_INT64};
  }
  throw Error("arrays: unknown data type");
}

// Forces a file's (or a directory's) data to disk.
void sync_path(const std::filesystem::path& path, bool directory) {
  const int fd = ::open(path.c_str(), directory ? O_RDONLY | O_DIRECTORY : O_RDONLY);
  if (fd < 0) throw Error("cannot open " + path.string() + " to sync it: " + std::strerror(errno), "open");
  const int status = ::fsync(fd);
  const int error = errno;
  ::close(fd);
  if (status != 0) throw Error("cannot sync " + path.string() + ": " + std::strerror(error) + full_disk_hint(path), "fsync");
}

// The parent group of "/a/b/c" ("/a/b") and its last component ("c").
std::pair<std::string, std::string> parent_and_name(const std::string& path) {
  std::vector<std::string> parts = split_group(path);
  if (parts.empty()) throw Error("arrays: no dataset name in '" + path + "'");
  std::string name = parts.back();
  parts.pop_back();
  return {join_group(parts), name};
}

}  // namespace

ArrayWriter::ArrayWriter(std::filesystem::path temporary, const std::string& schema, std::int64_t version)
    : temporary_(std::move(temporary)) {
  silence_hdf5();
  Handle access = own(H5Pcreate(H5P_FILE_ACCESS), H5Pclose, "cannot create file access list", "H5Pcreate");
  check(H5Pset_libver_bounds(access.get(), H5F_LIBVER_V18, H5F_LIBVER_V18), "cannot set HDF5 format version",
        "H5Pset_libver_bounds");
  check(H5Pset_fclose_degree(access.get(), H5F_CLOSE_STRONG), "cannot set file close degree", "H5Pset_fclose_degree");
  errno = 0;
  file_ = H5Fcreate(temporary_.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, access.get());
  if (file_ < 0) {
    const std::string reason = errno != 0 ? std::string(": ") + std::strerror(errno) : "";
    std::error_code ec;
    std::filesystem::remove(temporary_, ec);
    throw Error("cannot create " + temporary_.string() + reason + full_disk_hint(temporary_), "H5Fcreate");
  }
  set_attribute("/", "schema", schema);
  set_attribute("/", "schema_version", version);
}

ArrayWriter::~ArrayWriter() {
  if (file_ >= 0) H5Fclose(file_);
  if (committed_) return;
  std::error_code ec;
  std::filesystem::remove(temporary_, ec);
}

void ArrayWriter::write(const std::string& path, DataType type, const void* data, std::size_t count) {
  const auto [parent, name] = parent_and_name(path);
  const std::string where = path + " in " + temporary_.string();
  Handle group = open_or_create_group(file_, parent, temporary_.string());
  const StoredType t = stored_type(type);
  Handle space = vector_space(count);
  Handle dataset = own(H5Dcreate2(group.get(), name.c_str(), t.file, space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                       H5Dclose, "cannot create " + where, "H5Dcreate2");
  static const std::uint64_t nothing = 0;  // H5Dwrite refuses a null buffer, even for no elements
  check(H5Dwrite(dataset.get(), t.memory, H5S_ALL, H5S_ALL, H5P_DEFAULT, count == 0 ? &nothing : data),
        "cannot write " + where, "H5Dwrite");
  write_attribute(dataset.get(), "dtype", std::string(name_of(type)), where);
}

void ArrayWriter::set_attribute(const std::string& path, const std::string& name, const Attribute& value) {
  const std::string where = join_group(split_group(path)) + " in " + temporary_.string();
  Handle object = open_object(file_, split_group(path), temporary_.string());
  if (object.get() < 0) object = open_or_create_group(file_, path, temporary_.string());
  write_attribute(object.get(), name, value, where);
}

void ArrayWriter::write_table(const std::string& group, const Table& table) {
  write_table_in(file_, temporary_, group, table);
}

void ArrayWriter::commit_as(const std::filesystem::path& path) {
  const hid_t file = std::exchange(file_, -1);
  if (H5Fclose(file) < 0) throw Error("cannot close " + temporary_.string() + full_disk_hint(temporary_), "H5Fclose");
  sync_path(temporary_, false);
  if (std::filesystem::exists(path)) throw Error(path.string() + " exists already; not overwritten");
  std::error_code ec;
  std::filesystem::rename(temporary_, path, ec);
  if (ec) throw Error("cannot rename " + temporary_.string() + " to " + path.string() + ": " + ec.message(), "rename");
  committed_ = true;
  sync_path(path.parent_path().empty() ? std::filesystem::path(".") : path.parent_path(), true);
}

void sync_directory(const std::filesystem::path& directory) { sync_path(directory, true); }

// ---- reading --------------------------------------------------------------------------------------

ArrayReader::ArrayReader(std::filesystem::path path, const std::string& schema, std::int64_t version)
    : path_(std::move(path)) {
  silence_hdf5();
  std::error_code ec;
  if (std::filesystem::is_directory(path_, ec)) throw UsageError(path_.string() + " is a directory, not a " + schema + " file");
  Handle file = open_for_reading(path_);
  const std::string where = path_.string();
  try {
    Handle root = own(H5Oopen(file.get(), "/", H5P_DEFAULT), H5Oclose, "cannot open / in " + where, "H5Oopen");
    const auto name = read_string_attribute(root.get(), "schema", where);
    if (!name || *name != schema) throw UsageError(where + " is not a " + schema + " file");
    const auto stored = read_int_attribute(root.get(), "schema_version", where);
    if (!stored || *stored < 1 || *stored > version)
      throw UsageError(where + " has " + schema + " version " + (stored ? std::to_string(*stored) : "(none)") +
                       "; this parity reads versions 1 to " + std::to_string(version));
    version_ = *stored;
  } catch (const UsageError&) {
    throw;
  } catch (const Error&) {
    throw UsageError(where + " cannot be read (truncated or damaged HDF5 file?)");
  }
  file_ = file.release();
}

ArrayReader::~ArrayReader() {
  if (file_ >= 0) H5Fclose(file_);
}

namespace {
// Runs `body`, turning HDF5 failures into one line naming the file.
template <typename Body>
auto damaged_as_usage(const std::filesystem::path& path, const std::string& what, Body body) {
  try {
    return body();
  } catch (const UsageError&) {
    throw;
  } catch (const Error&) {
    throw UsageError(path.string() + ": cannot read " + what + " (truncated or damaged HDF5 file?)");
  }
}
}  // namespace

bool ArrayReader::has(const std::string& path) const {
  return damaged_as_usage(path_, path, [&] { return open_object(file_, split_group(path), path_.string()).get() >= 0; });
}

bool ArrayReader::is_group(const std::string& path) const {
  return damaged_as_usage(path_, path, [&] {
    Handle object = open_object(file_, split_group(path), path_.string());
    return object.get() >= 0 && H5Iget_type(object.get()) == H5I_GROUP;
  });
}

std::vector<std::string> ArrayReader::members(const std::string& group) const {
  return damaged_as_usage(path_, group, [&] {
    std::vector<std::string> names;
    Handle object = open_object(file_, split_group(group), path_.string());
    if (object.get() < 0 || H5Iget_type(object.get()) != H5I_GROUP) return names;
    H5G_info_t info;
    check(H5Gget_info(object.get(), &info), "cannot list " + group + " in " + path_.string(), "H5Gget_info");
    for (hsize_t i = 0; i < info.nlinks; ++i) {
      const ssize_t length = H5Lget_name_by_idx(object.get(), ".", H5_INDEX_NAME, H5_ITER_INC, i, nullptr, 0, H5P_DEFAULT);
      if (length < 0) throw UsageError("cannot list " + group + " in " + path_.string() + ": the file is damaged");
      std::string name(static_cast<std::size_t>(length), '\0');
      H5Lget_name_by_idx(object.get(), ".", H5_INDEX_NAME, H5_ITER_INC, i, name.data(), name.size() + 1, H5P_DEFAULT);
      names.push_back(name);
    }
    return names;
  });
}

std::optional<std::string> ArrayReader::string_attribute(const std::string& path, const std::string& name) const {
  return damaged_as_usage(path_, path, [&]() -> std::optional<std::string> {
    Handle object = open_object(file_, split_group(path), path_.string());
    if (object.get() < 0) return std::nullopt;
    return read_string_attribute(object.get(), name, path + " in " + path_.string());
  });
}

std::optional<std::int64_t> ArrayReader::int_attribute(const std::string& path, const std::string& name) const {
  return damaged_as_usage(path_, path, [&]() -> std::optional<std::int64_t> {
    Handle object = open_object(file_, split_group(path), path_.string());
    if (object.get() < 0) return std::nullopt;
    return read_int_attribute(object.get(), name, path + " in " + path_.string());
  });
}

std::optional<double> ArrayReader::float_attribute(const std::string& path, const std::string& name) const {
  return damaged_as_usage(path_, path, [&]() -> std::optional<double> {
    Handle object = open_object(file_, split_group(path), path_.string());
    if (object.get() < 0) return std::nullopt;
    Handle attribute = open_attribute(object.get(), name, path);
    if (attribute.get() < 0) return std::nullopt;
    const Source source{attribute.get(), true, name + " of " + path};
    if (source.type_class() != H5T_FLOAT) return std::nullopt;
    const auto values = read_numbers<double>(source);
    if (!values || values->size() != 1) return std::nullopt;
    return values->front();
  });
}

namespace {

// The 1-D dataset at `path` (named with the file `where` in messages), refused when absent.
Handle open_dataset(hid_t file, const std::filesystem::path& where, const std::string& path) {
  Handle dataset = open_object(file, split_group(path), where.string());
  if (dataset.get() < 0 || H5Iget_type(dataset.get()) != H5I_DATASET)
    throw UsageError(where.string() + " has no dataset " + path);
  return dataset;
}

std::size_t dataset_length(hid_t dataset, const std::filesystem::path& where, const std::string& path) {
  const auto n = Source{dataset, false, path}.length();
  if (!n) throw UsageError(where.string() + ": " + path + " is not a 1-D dataset");
  return *n;
}

// The type a dataset's dtype attribute (`name`, nullopt when absent) names.
DataType stored_dtype(const std::optional<std::string>& name, const std::filesystem::path& where,
                      const std::string& path) {
  if (!name) throw UsageError(where.string() + ": " + path + " has no dtype attribute");
  try {
    return parse_data_type(*name);
  } catch (const Error&) {
    throw UsageError(where.string() + ": " + path + " has an unknown dtype '" + *name + "'");
  }
}

// The dataset at `path`, opened once, and its length; refused unless its type is `type`.
std::pair<Handle, std::size_t> open_typed(hid_t file, const std::filesystem::path& where, const std::string& path,
                                          DataType type) {
  Handle dataset = open_dataset(file, where, path);
  const DataType stored =
      stored_dtype(read_string_attribute(dataset.get(), "dtype", path + " in " + where.string()), where, path);
  if (stored != type)
    throw UsageError(where.string() + ": " + path + " holds " + std::string(name_of(stored)) + ", not " +
                     std::string(name_of(type)));
  // Its elements must be numbers for the attribute to describe them (strings under a float64
  // attribute were read as a damaged file).
  Handle file_type = own(H5Dget_type(dataset.get()), H5Tclose, "cannot read the type of " + path, "H5Dget_type");
  const H5T_class_t kind = H5Tget_class(file_type.get());
  if (kind != H5T_INTEGER && kind != H5T_FLOAT)
    throw UsageError(where.string() + ": " + path + " holds no numbers, though its dtype attribute says " +
                     std::string(name_of(stored)));
  const std::size_t n = dataset_length(dataset.get(), where, path);
  return {std::move(dataset), n};
}

void read_range(hid_t dataset, const std::string& path, DataType type, std::size_t first, std::size_t count, void* out) {
  if (count == 0) return;
  Handle space = own(H5Dget_space(dataset), H5Sclose, "cannot read shape of " + path, "H5Dget_space");
  const hsize_t offset[1] = {first}, size[1] = {count};
  check(H5Sselect_hyperslab(space.get(), H5S_SELECT_SET, offset, nullptr, size, nullptr), "cannot select " + path,
        "H5Sselect_hyperslab");
  Handle memory = own(H5Screate_simple(1, size, nullptr), H5Sclose, "cannot create dataspace", "H5Screate_simple");
  check(H5Dread(dataset, stored_type(type).memory, memory.get(), space.get(), H5P_DEFAULT, out), "cannot read " + path,
        "H5Dread");
}

}  // namespace

std::size_t ArrayReader::length(const std::string& path) const {
  return damaged_as_usage(path_, path, [&] {
    const Handle dataset = open_dataset(file_, path_, path);
    return dataset_length(dataset.get(), path_, path);
  });
}

DataType ArrayReader::dtype(const std::string& path) const {
  return stored_dtype(string_attribute(path, "dtype"), path_, path);
}

// One open of the dataset for its type, its length and the read (a save's reader reads many).
void ArrayReader::read(const std::string& path, DataType type, std::size_t first, std::size_t count, void* out) const {
  damaged_as_usage(path_, path, [&] {
    const auto [dataset, n] = open_typed(file_, path_, path, type);
    if (first > n || count > n - first)
      throw UsageError(path_.string() + ": " + path + " has " + std::to_string(n) + " elements, not [" +
                       std::to_string(first) + ", " + std::to_string(first + count) + ")");
    read_range(dataset.get(), path, type, first, count, out);
    return 0;
  });
}

std::vector<std::byte> ArrayReader::read_whole(const std::string& path, DataType type, std::size_t at_most) const {
  return damaged_as_usage(path_, path, [&] {
    const auto [dataset, n] = open_typed(file_, path_, path, type);
    if (n > at_most)
      throw UsageError(path_.string() + ": " + path + " holds " + std::to_string(n) + " elements, more than the " +
                       std::to_string(at_most) + " expected");
    std::vector<std::byte> out(n * size_of(type));
    read_range(dataset.get(), path, type, 0, n, out.data());
    return out;
  });
}

Table ArrayReader::read_table(const std::string& group) const {
  return damaged_as_usage(path_, group, [&] { return read_table_in(file_, path_, group); });
}

}  // namespace parity::record
