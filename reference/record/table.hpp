// The in-memory table every result is built in: named, typed columns with units, in the order
// first named; and the attribute values a result file's groups carry. No file format here: the
// HDF5 file (results_file.hpp) and the journal (journal.hpp) both write these.
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

namespace parity::record {

// One column of a table: a name, a unit and values of one type.
struct Column {
  std::string name;
  std::string unit;
  std::variant<std::vector<double>, std::vector<std::int64_t>, std::vector<std::string>> values;
  std::size_t size() const;
};

// A column-oriented table; columns keep the order in which they were first named.
class Table {
 public:
  explicit Table(std::string description = "") : description_(std::move(description)) {}
  // Returns the column's values, creating the column on first use. Asking for an existing
  // column with another type throws.
  std::vector<double>& f64(const std::string& name, const std::string& unit = "");
  std::vector<std::int64_t>& i64(const std::string& name, const std::string& unit = "");
  std::vector<std::string>& str(const std::string& name);
  // An existing column's values; throws Error when it is missing or of another type.
  const std::vector<double>& get_f64(const std::string& name) const;
  const std::vector<std::int64_t>& get_i64(const std::string& name) const;
  const std::vector<std::string>& get_str(const std::string& name) const;
  const std::vector<Column>& columns() const { return columns_; }
  const std::string& description() const { return description_; }
  // Number of rows; throws when the columns have different lengths.
  std::size_t rows() const;

 private:
  Column& column(const std::string& name, const std::string& unit, std::size_t type_index);
  std::string description_;
  std::vector<Column> columns_;
};

// Appends rows [first, last) of `from` to `to`, column by column (columns created as needed,
// in `from`'s order). Throws Error when a column's type differs.
void append_rows(Table& to, const Table& from, std::size_t first, std::size_t last);

using Attribute = std::variant<std::string, double, std::int64_t, std::vector<std::string>,
                               std::vector<double>, std::vector<std::int64_t>>;

}  // namespace parity::record
