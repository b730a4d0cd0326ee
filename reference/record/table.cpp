// The in-memory table (table.hpp).
#include "reference/record/table.hpp"

#include <type_traits>

#include "reference/core/error.hpp"

namespace parity::record {

std::size_t Column::size() const {
  return std::visit([](const auto& v) { return v.size(); }, values);
}

std::string_view name_of(ColumnType type) {
  switch (type) {
    case ColumnType::float64: return "float64";
    case ColumnType::int64: return "int64";
    case ColumnType::string: return "string";
  }
  return "?";
}

Table::Table(const TableSpec& spec) : description_(spec.description) {
  for (const ColumnSpec& c : spec.columns) column(c.name, c.unit, static_cast<std::size_t>(c.type));
  spec_ = &spec;  // closed from here on
}

std::size_t Table::checked(const std::string& name, const std::string& unit, std::size_t type_index) const {
  static constexpr const char* kTypeNames[] = {"float64", "int64", "string"};
  for (std::size_t i = 0; i < columns_.size(); ++i) {
    const Column& column = columns_[i];
    if (column.name != name) continue;
    if (column.values.index() != type_index) {
      throw Error("table column " + name + " holds " + kTypeNames[column.values.index()] +
                  ", not " + kTypeNames[type_index]);
    }
    // An empty unit means "as before", so callers need not repeat it on every use.
    if (!unit.empty() && unit != column.unit) {
      throw Error("table column " + name + " has unit '" + column.unit + "', not '" + unit + "'");
    }
    return i;
  }
  if (spec_ != nullptr)
    throw Error("column " + name + " is not in the schema of " + spec_->group + " (declared beside its writer; "
                "docs/results-schema.md)");
  if (name.empty() || name == "." || name.find('/') != std::string::npos) {
    throw Error("invalid table column name '" + name + "' (must be non-empty, not '.', without '/')");
  }
  return columns_.size();
}

Column& Table::column(const std::string& name, const std::string& unit, std::size_t type_index) {
  if (const std::size_t i = checked(name, unit, type_index); i < columns_.size()) return columns_[i];
  Column column{name, unit, {}};
  switch (type_index) {
    case 0: column.values.emplace<0>(); break;
    case 1: column.values.emplace<1>(); break;
    default: column.values.emplace<2>(); break;
  }
  columns_.push_back(std::move(column));
  return columns_.back();
}

std::vector<double>& Table::f64(const std::string& name, const std::string& unit) {
  return std::get<0>(column(name, unit, 0).values);
}

std::vector<std::int64_t>& Table::i64(const std::string& name, const std::string& unit) {
  return std::get<1>(column(name, unit, 1).values);
}

std::vector<std::string>& Table::str(const std::string& name) {
  return std::get<2>(column(name, "", 2).values);
}

void Table::put(std::initializer_list<Field> fields) {
  // The whole row is checked before any value goes in: a refused row leaves the table as it was.
  std::vector<std::size_t> types;
  for (auto it = fields.begin(); it != fields.end(); ++it) {
    const Field& field = *it;
    for (auto before = fields.begin(); before != it; ++before)
      if (before->name == field.name) throw Error("column " + field.name + " given twice in one row");
    std::size_t type = field.value.index();
    for (const Column& c : columns_)
      if (c.name == field.name && c.values.index() == 0 && type == 1) type = 0;  // a whole number for reals
    checked(field.name, "", type);  // throws for any other mismatch
    types.push_back(type);
  }
  const std::size_t* type = types.data();
  for (const Field& field : fields) {
    Column& column = this->column(field.name, "", *type);
    if (*type++ != field.value.index()) {
      std::get<0>(column.values).push_back(static_cast<double>(std::get<1>(field.value)));
      continue;
    }
    std::visit([&](const auto& v) { std::get<std::vector<std::decay_t<decltype(v)>>>(column.values).push_back(v); },
               field.value);
  }
}

namespace {
template <typename T>
const std::vector<T>& existing_column(const std::vector<Column>& columns, const std::string& name) {
  for (const auto& column : columns)
    if (column.name == name) {
      if (const auto* values = std::get_if<std::vector<T>>(&column.values)) return *values;
      throw Error("column " + name + " has another type");
    }
  throw Error("no column " + name);
}
}  // namespace

const std::vector<double>& Table::get_f64(const std::string& name) const { return existing_column<double>(columns_, name); }
const std::vector<std::int64_t>& Table::get_i64(const std::string& name) const {
  return existing_column<std::int64_t>(columns_, name);
}
const std::vector<std::string>& Table::get_str(const std::string& name) const {
  return existing_column<std::string>(columns_, name);
}

std::size_t Table::rows() const {
  if (columns_.empty()) return 0;
  const std::size_t rows = columns_.front().size();
  for (const auto& column : columns_) {
    if (column.size() != rows) {
      throw Error("ragged table '" + description_ + "': column " + columns_.front().name + " has " +
                  std::to_string(rows) + " rows but column " + column.name + " has " +
                  std::to_string(column.size()));
    }
  }
  return rows;
}

// ---- output path --------------------------------------------------------------------------------

void append_rows(Table& to, const Table& from, std::size_t first, std::size_t last) {
  for (const auto& column : from.columns()) {
    std::visit(
        [&](const auto& values) {
          using V = typename std::decay_t<decltype(values)>::value_type;
          std::vector<V>* into = nullptr;
          if constexpr (std::is_same_v<V, double>) into = &to.f64(column.name, column.unit);
          else if constexpr (std::is_same_v<V, std::int64_t>) into = &to.i64(column.name, column.unit);
          else into = &to.str(column.name);
          into->insert(into->end(), values.begin() + static_cast<std::ptrdiff_t>(first),
                       values.begin() + static_cast<std::ptrdiff_t>(last));
        },
        column.values);
  }
}

}  // namespace parity::record
