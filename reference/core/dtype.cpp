// Names, sizes and precision facts of the data types.
#include "reference/core/dtype.hpp"

#include <algorithm>
#include <cmath>

#include "reference/core/error.hpp"

namespace parity {

std::string_view name_of(DataType type) {
  switch (type) {
    case DataType::float64: return "float64";
    case DataType::float32: return "float32";
    case DataType::float16: return "float16";
    case DataType::bfloat16: return "bfloat16";
    case DataType::int32: return "int32";
    case DataType::int64: return "int64";
  }
  return "?";
}

std::string_view name_of(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return "sum";
    case ReduceOp::prod: return "prod";
    case ReduceOp::max: return "max";
    case ReduceOp::min: return "min";
    case ReduceOp::avg: return "avg";
  }
  return "?";
}

double unit_roundoff(DataType type) {
  switch (type) {
    case DataType::float64: return std::ldexp(1.0, -53);
    case DataType::float32: return std::ldexp(1.0, -24);
    case DataType::float16: return std::ldexp(1.0, -11);
    case DataType::bfloat16: return std::ldexp(1.0, -8);
    default: return 0.0;
  }
}

std::int64_t exact_integer_limit(DataType type) {
  switch (type) {
    case DataType::float64: return std::int64_t{1} << 53;
    case DataType::float32: return std::int64_t{1} << 24;
    case DataType::float16: return std::int64_t{1} << 11;
    case DataType::bfloat16: return std::int64_t{1} << 8;
    case DataType::int32: return (std::int64_t{1} << 31) - 1;
    case DataType::int64: break;
  }
  return (std::int64_t{1} << 62);
}

namespace {
std::string join(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}
}  // namespace

std::vector<std::string> data_type_names() {
  std::vector<std::string> names;
  for (auto t : kAllDataTypes) names.emplace_back(name_of(t));
  return names;
}
std::vector<std::string> reduce_op_names() {
  std::vector<std::string> names;
  for (auto o : kAllReduceOps) names.emplace_back(name_of(o));
  return names;
}

DataType parse_data_type(std::string_view text) {
  struct Alias { std::string_view name; DataType type; };
  static constexpr Alias aliases[] = {
      {"float64", DataType::float64}, {"double", DataType::float64}, {"f64", DataType::float64},
      {"float32", DataType::float32}, {"float", DataType::float32},  {"f32", DataType::float32},
      {"float16", DataType::float16}, {"half", DataType::float16},   {"f16", DataType::float16},
      {"bfloat16", DataType::bfloat16}, {"bf16", DataType::bfloat16},
      {"int32", DataType::int32},     {"int", DataType::int32},      {"i32", DataType::int32},
      {"int64", DataType::int64},     {"i64", DataType::int64}};
  for (const auto& a : aliases)
    if (a.name == text) return a.type;
  throw UsageError("unknown data type '" + std::string(text) + "' (known: " + join(data_type_names()) + ")");
}

ReduceOp parse_reduce_op(std::string_view text) {
  for (auto o : kAllReduceOps)
    if (name_of(o) == text) return o;
  throw UsageError("unknown reduction '" + std::string(text) + "' (known: " + join(reduce_op_names()) + ")");
}

}  // namespace parity
