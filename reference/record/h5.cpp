// The HDF5 side of result files (h5.hpp) on the HDF5 C API, and reading them back
// (reading.hpp: inspect, has_table, read_table).
#include "reference/record/h5.hpp"

#include "reference/record/h5_detail.hpp"
#include "reference/record/reading.hpp"

namespace parity::record {

static_assert(std::is_same_v<hid_t, std::int64_t>, "h5::Writer stores hid_t as int64_t");

using namespace detail;

namespace {
// ---- writing helpers ----------------------------------------------------------------------------

// Creates the HDF5 file `temporary` (remembered for discard_temporary_file) with the schema's
// root attributes; on failure removes whatever HDF5 made and throws.
hid_t create_results_file(const std::filesystem::path& temporary) {
  silence_hdf5();
  remember_temporary(temporary);
  Handle access_list = own(H5Pcreate(H5P_FILE_ACCESS), H5Pclose, "cannot create file access list", "H5Pcreate");
  // The 1.8 format allows attributes over 64 KiB (e.g. `hosts` at large world sizes) while
  // staying readable by any HDF5 from 1.8 on.
  check(H5Pset_libver_bounds(access_list.get(), H5F_LIBVER_V18, H5F_LIBVER_V18),
        "cannot set HDF5 format version", "H5Pset_libver_bounds");
  // Closing the file then closes whatever is still open, so commit() renames a complete file.
  check(H5Pset_fclose_degree(access_list.get(), H5F_CLOSE_STRONG), "cannot set file close degree",
        "H5Pset_fclose_degree");
  errno = 0;
  const hid_t file = H5Fcreate(temporary.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, access_list.get());
  if (file < 0) {
    // errno is what open(2) said, when it got that far; it is the useful part of the message.
    const std::string reason = errno != 0 ? std::string(": ") + std::strerror(errno) : "";
    std::error_code ec;
    std::filesystem::remove(temporary, ec);  // HDF5 may have created it before failing
    forget_temporary();
    throw Error("cannot create " + temporary.string() + reason + full_disk_hint(temporary), "H5Fcreate");
  }
  try {
    Handle root = open_or_create_group(file, "/", temporary.string());
    write_attribute(root.get(), "schema", std::string(kSchemaName), "/ in " + temporary.string());
    write_attribute(root.get(), "schema_version", kSchemaVersion, "/ in " + temporary.string());
  } catch (...) {
    H5Fclose(file);
    std::error_code ec;
    std::filesystem::remove(temporary, ec);
    forget_temporary();
    throw;
  }
  return file;
}

void set_attribute_in(hid_t file, const std::filesystem::path& name, const std::string& group,
                      const std::string& attribute, const Attribute& value) {
  if (attribute.empty()) throw Error("empty attribute name on group " + group);
  const std::string where = join_group(split_group(group)) + " in " + name.string();
  Handle object = open_or_create_group(file, group, name.string());
  write_attribute(object.get(), attribute, value, where);
}

// Closes `file` (the temporary sibling of `path`) and renames it to `path`.
void close_and_rename(hid_t file, const std::filesystem::path& temporary, const std::filesystem::path& path, bool force) {
  const std::lock_guard<std::timed_mutex> committing(commit_mutex());
  if (H5Fclose(file) < 0) throw Error("cannot close " + temporary.string() + full_disk_hint(temporary), "H5Fclose");
  // Another run may have written PATH since the start; never overwrite it silently.
  check_output_path(path, force);
  std::error_code ec;
  std::filesystem::rename(temporary, path, ec);
  if (ec) throw Error("cannot rename " + temporary.string() + " to " + path.string() + ": " + ec.message(), "rename");
  forget_temporary();
}

}  // namespace

namespace detail {

void write_table_in(hid_t file, const std::filesystem::path& name, const std::string& group, const Table& table) {
  const std::size_t rows = table.rows();
  const std::string group_name = join_group(split_group(group));
  if (group_name == "/") throw Error("a table cannot be written at the root group");
  const std::string where = group_name + " in " + name.string();
  // The group may exist already when its own attributes (e.g. alpha_us) were set first.
  Handle object = open_or_create_group(file, group, name.string());
  if (check_tri(H5Aexists(object.get(), "kind"), "cannot look up attribute kind of " + where, "H5Aexists")) {
    throw Error("group " + where + " already holds a table");
  }

  std::vector<std::string> names;
  for (const auto& column : table.columns()) names.push_back(column.name);
  write_attribute(object.get(), "kind", std::string("table"), where);
  write_attribute(object.get(), "description", table.description(), where);
  write_attribute(object.get(), "columns", names, where);
  write_attribute(object.get(), "rows", static_cast<std::int64_t>(rows), where);

  Handle space = vector_space(rows);
  Handle string_type = vlen_utf8_type();
  for (const auto& column : table.columns()) {
    const std::string what = "cannot write column " + column.name + " of " + where;
    if (check_tri(H5Lexists(object.get(), column.name.c_str(), H5P_DEFAULT), what, "H5Lexists")) {
      throw Error("group " + where + " already has a member named " + column.name);
    }
    auto create = [&](hid_t file_type) {
      return own(H5Dcreate2(object.get(), column.name.c_str(), file_type, space.get(), H5P_DEFAULT,
                            H5P_DEFAULT, H5P_DEFAULT),
                 H5Dclose, what, "H5Dcreate2");
    };
    auto write = [&](const Handle& dataset, hid_t memory_type, const void* data) {
      check(H5Dwrite(dataset.get(), memory_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data), what, "H5Dwrite");
    };
    Handle dataset;
    if (const auto* doubles = std::get_if<std::vector<double>>(&column.values)) {
      dataset = create(H5T_IEEE_F64LE);
      write(dataset, H5T_NATIVE_DOUBLE, buffer_of(*doubles));
    } else if (const auto* ints = std::get_if<std::vector<std::int64_t>>(&column.values)) {
      dataset = create(H5T_STD_I64LE);
      write(dataset, H5T_NATIVE_INT64, buffer_of(*ints));
    } else {
      const auto& strings = std::get<std::vector<std::string>>(column.values);
      dataset = create(string_type.get());
      const auto pointers = c_strings(strings);
      write(dataset, string_type.get(), buffer_of(pointers));
    }
    write_attribute(dataset.get(), "unit", column.unit, column.name + " of " + where);
  }
}

Table read_table_in(hid_t file, const std::filesystem::path& path, const std::string& group) {
  const std::string group_name = join_group(split_group(group));
  const std::string where = group_name + " in " + path.string();
  Handle object = open_object(file, split_group(group), path.string());
  if (object.get() < 0) throw UsageError(path.string() + " has no table " + group_name);
  if (H5Iget_type(object.get()) != H5I_GROUP ||
      read_string_attribute(object.get(), "kind", where).value_or("") != "table") {
    throw UsageError(group_name + " in " + path.string() + " is not a table");
  }
  const auto damaged = [&](const std::string& why) {
    return UsageError("table " + where + " is damaged: " + why);
  };
  Handle columns_attribute = open_attribute(object.get(), "columns", where);
  if (columns_attribute.get() < 0) throw damaged("no columns attribute");
  const auto names = read_strings(Source{columns_attribute.get(), true, "columns of " + where});
  if (!names) throw damaged("columns attribute is not a string array");
  const auto rows = read_int_attribute(object.get(), "rows", where);
  if (!rows || *rows < 0) throw damaged("no valid rows attribute");

  Table table(read_string_attribute(object.get(), "description", where).value_or(""));
  for (const auto& name : *names) {
    const std::string column_where = name + " of " + where;
    Handle dataset = open_object(object.get(), split_group(name), where);
    if (dataset.get() < 0 || H5Iget_type(dataset.get()) != H5I_DATASET) {
      throw damaged("column " + name + " is missing");
    }
    const Source source{dataset.get(), false, column_where};
    const auto length = source.length();
    if (!length || *length != static_cast<std::size_t>(*rows)) {
      throw damaged("column " + name + " is not a 1-D dataset of " + std::to_string(*rows) + " rows");
    }
    const std::string unit = read_string_attribute(dataset.get(), "unit", column_where).value_or("");
    switch (source.type_class()) {
      case H5T_FLOAT:
        table.f64(name, unit) = *read_numbers<double>(source);
        break;
      case H5T_INTEGER:
        table.i64(name, unit) = *read_numbers<std::int64_t>(source);
        break;
      case H5T_STRING:
        // String columns are unitless in Table (str() takes none), so a stored unit is dropped.
        table.str(name) = *read_strings(source);
        break;
      default:
        throw damaged("column " + name + " is neither float, integer nor string");
    }
  }
  return table;
}

}  // namespace detail

// ---- writing ------------------------------------------------------------------------------------

namespace h5 {

Writer::Writer(std::filesystem::path temporary) : temporary_(std::move(temporary)) {
  file_ = create_results_file(temporary_);
}

Writer::~Writer() {
  if (file_ >= 0) H5Fclose(file_);
  if (committed_) return;
  std::error_code ec;
  std::filesystem::remove(temporary_, ec);
  forget_temporary();
}

void Writer::set_attribute(const std::string& group, const std::string& name, const Attribute& value) {
  set_attribute_in(file_, temporary_, group, name, value);
}

void Writer::write_table(const std::string& group, const Table& table) {
  write_table_in(file_, temporary_, group, table);
}

void Writer::commit_as(const std::filesystem::path& path, bool force) {
  close_and_rename(std::exchange(file_, -1), temporary_, path, force);
  committed_ = true;
}

}  // namespace h5

// ---- reading ------------------------------------------------------------------------------------

FileInfo inspect(const std::filesystem::path& path) {
  return read_file(path, [&](hid_t file) {
    const std::string where = path.string();
    Handle root = own(H5Oopen(file, "/", H5P_DEFAULT), H5Oclose, "cannot open / in " + where, "H5Oopen");
    const auto schema = read_string_attribute(root.get(), "schema", where);
    if (!schema || *schema != kSchemaName) throw UsageError(where + " is not a parity result file");
    const auto version = read_int_attribute(root.get(), "schema_version", where);
    if (!version) throw UsageError(where + " is not a parity result file (no integer schema_version)");
    if (*version < 1 || *version > kSchemaVersion) {
      throw UsageError(where + " has schema version " + std::to_string(*version) +
                       "; this parity reads version " + std::to_string(kSchemaVersion));
    }
    FileInfo info;
    info.schema_version = *version;
    info.subcommand = read_string_attribute(root.get(), "subcommand", where).value_or("");
    info.world_size = read_int_attribute(root.get(), "world_size", where).value_or(0);
    info.device = read_string_attribute(root.get(), "device", where).value_or("");
    info.half_accumulate = read_string_attribute(root.get(), "half_accumulate", where).value_or("");
    info.complete = read_int_attribute(root.get(), "complete", where).value_or(1) != 0;
    info.incomplete_reason = read_string_attribute(root.get(), "incomplete_reason", where).value_or("");
    info.options = read_string_attribute(root.get(), "options", where).value_or("");
    return info;
  });
}

bool has_table(const std::filesystem::path& path, const std::string& group) {
  return read_file(path, [&](hid_t file) {
    const std::string where = join_group(split_group(group)) + " in " + path.string();
    Handle object = open_object(file, split_group(group), path.string());
    return object.get() >= 0 && H5Iget_type(object.get()) == H5I_GROUP &&
           read_string_attribute(object.get(), "kind", where).value_or("") == "table";
  });
}

Table read_table(const std::filesystem::path& path, const std::string& group) {
  return read_file(path, [&](hid_t file) { return read_table_in(file, path, group); });
}

}  // namespace parity::record
