// The in-memory table every result is built in: named, typed columns with units; the schema of a
// result group (its columns declared once: name, type, unit, whether every file has it); and
// the attribute values a result file's groups carry. No file format here: the HDF5 file
// (results_file.hpp) and the journal (journal.hpp) both write these.
#pragma once

#include <concepts>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace parity::record {

enum class ColumnType { float64, int64, string };
std::string_view name_of(ColumnType type);

// A column of a result group's schema (docs/results-schema.md).
struct ColumnSpec {
  std::string name;
  ColumnType type;
  std::string unit = "";
  // Every file of this schema version that has the table has the column; false for a column
  // added to the table later within the version (older files lack it: readers must not rely on it).
  bool required = true;
};
// A result group's schema: where it goes, its description and its columns in order. Declared
// once, beside the code that writes it; a table made from it takes no other column.
struct TableSpec {
  std::string group;  // "/bench/precision"
  std::string description;
  std::vector<ColumnSpec> columns;
};

// One column of a table: a name, a unit and values of one type.
struct Column {
  std::string name;
  std::string unit;
  std::variant<std::vector<double>, std::vector<std::int64_t>, std::vector<std::string>> values;
  std::size_t size() const;
};

// One named value of a row, for Table::put: a whole number (bool and every integer type), a
// real number or a text.
struct Field {
  template <typename T>
    requires std::integral<T> || std::floating_point<T>
  Field(std::string n, T v) : name(std::move(n)) {
    if constexpr (std::floating_point<T>) value = static_cast<double>(v);
    else value = static_cast<std::int64_t>(v);
  }
  Field(std::string n, std::string v) : name(std::move(n)), value(std::move(v)) {}
  Field(std::string n, const char* v) : name(std::move(n)), value(std::string(v)) {}
  Field(std::string n, std::string_view v) : name(std::move(n)), value(std::string(v)) {}
  std::string name;
  std::variant<double, std::int64_t, std::string> value;  // the index of Column::values' type
};

// A column-oriented table. Made from a TableSpec, it holds the spec's columns in its order and
// refuses any other (a writer that drifts from its declared schema fails at its first row);
// made from a description alone, columns keep the order in which they were first named.
class Table {
 public:
  explicit Table(std::string description = "") : description_(std::move(description)) {}
  explicit Table(const TableSpec& spec);
  // Returns the column's values, creating the column on first use. Asking for an existing
  // column with another type throws.
  std::vector<double>& f64(const std::string& name, const std::string& unit = "");
  std::vector<std::int64_t>& i64(const std::string& name, const std::string& unit = "");
  std::vector<std::string>& str(const std::string& name);
  // Appends each value to its column: a row's cells written together. An existing column keeps
  // its type and unit (those of the schema, on a table made from one), and a whole number goes
  // into a float64 column as a real; a real for an int64 column, or a text for a number column
  // (or the reverse), throws, as does a name given twice; a refused row appends nothing. A new
  // column of a free table takes the value's type and no unit.
  void put(std::initializer_list<Field> fields);
  // An existing column's values; throws Error when it is missing or of another type.
  const std::vector<double>& get_f64(const std::string& name) const;
  const std::vector<std::int64_t>& get_i64(const std::string& name) const;
  const std::vector<std::string>& get_str(const std::string& name) const;
  const std::vector<Column>& columns() const { return columns_; }
  const std::string& description() const { return description_; }
  // The schema the table was made from; null for a table of free columns.
  const TableSpec* spec() const { return spec_; }
  // Number of rows; throws when the columns have different lengths.
  std::size_t rows() const;

 private:
  // The index of the existing column `name` after checking its type and unit, or the number of
  // columns for one that may be made. Throws Error for a mismatch, a name outside the schema or
  // an invalid name.
  std::size_t checked(const std::string& name, const std::string& unit, std::size_t type_index) const;
  Column& column(const std::string& name, const std::string& unit, std::size_t type_index);
  std::string description_;
  std::vector<Column> columns_;
  const TableSpec* spec_ = nullptr;
};

// Appends rows [first, last) of `from` to `to`, column by column (columns created as needed,
// in `from`'s order). Throws Error when a column's type differs.
void append_rows(Table& to, const Table& from, std::size_t first, std::size_t last);

// Rows [first, table->rows()) of the table at `group`: one part of rows journaled together.
// `taken`: the rows of the resumed file's table at `group` (--resume) that these rows took back,
// journaled in the same record, so that a cut run keeps each such row once, as one or the other.
struct RowsOf {
  std::string group;
  const Table* table;
  std::size_t first;
  std::vector<std::size_t> taken = {};
};

using Attribute = std::variant<std::string, double, std::int64_t, std::vector<std::string>,
                               std::vector<double>, std::vector<std::int64_t>>;

}  // namespace parity::record

namespace parity {
// Every schema names its columns' types: ColumnType::int64 wherever a schema is declared.
using record::ColumnType;
}  // namespace parity
