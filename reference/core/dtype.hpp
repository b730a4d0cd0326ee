// Data types and reduction operations shared by tensors and communicators.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "reference/core/half.hpp"

namespace parity {

enum class DataType { float64, float32, float16, bfloat16, int32, int64 };
enum class ReduceOp { sum, prod, max, min, avg };

inline constexpr DataType kAllDataTypes[] = {DataType::float64, DataType::float32,
                                             DataType::float16, DataType::bfloat16,
                                             DataType::int32,   DataType::int64};
inline constexpr ReduceOp kAllReduceOps[] = {ReduceOp::sum, ReduceOp::prod, ReduceOp::max,
                                             ReduceOp::min, ReduceOp::avg};

// Inline: buffer sizes and these tests run on every communicator call.
constexpr std::size_t size_of(DataType type) {
  switch (type) {
    case DataType::float64: case DataType::int64: return 8;
    case DataType::float32: case DataType::int32: return 4;
    case DataType::float16: case DataType::bfloat16: return 2;
  }
  return 0;
}
constexpr bool is_floating(DataType type) { return type != DataType::int32 && type != DataType::int64; }
constexpr bool is_half(DataType type) { return type == DataType::float16 || type == DataType::bfloat16; }
std::string_view name_of(DataType type);
std::string_view name_of(ReduceOp op);
// Unit roundoff u = 2^-p of a floating type (0 for integers).
double unit_roundoff(DataType type);
// Largest integer m such that every integer in [-m, m] is exact in the type.
std::int64_t exact_integer_limit(DataType type);

// Parse a name ("float32", "bf16", "f32", ...); throws UsageError listing the known names.
DataType parse_data_type(std::string_view text);
ReduceOp parse_reduce_op(std::string_view text);
std::vector<std::string> data_type_names();
std::vector<std::string> reduce_op_names();

// Maps a C++ element type to its DataType.
template <typename T> struct data_type_of;
template <> struct data_type_of<double> { static constexpr DataType value = DataType::float64; };
template <> struct data_type_of<float> { static constexpr DataType value = DataType::float32; };
template <> struct data_type_of<float16_t> { static constexpr DataType value = DataType::float16; };
template <> struct data_type_of<bfloat16_t> { static constexpr DataType value = DataType::bfloat16; };
template <> struct data_type_of<std::int32_t> { static constexpr DataType value = DataType::int32; };
template <> struct data_type_of<std::int64_t> { static constexpr DataType value = DataType::int64; };

// Calls f(T{}) with the C++ type of `type`.
template <typename F>
decltype(auto) visit_data_type(DataType type, F&& f) {
  switch (type) {
    case DataType::float64: return f(double{});
    case DataType::float32: return f(float{});
    case DataType::float16: return f(float16_t{});
    case DataType::bfloat16: return f(bfloat16_t{});
    case DataType::int32: return f(std::int32_t{});
    case DataType::int64: break;
  }
  return f(std::int64_t{});
}

// Element conversions to and from double (half types round to nearest even).
template <typename T> inline double to_double(T v) { return static_cast<double>(v); }
template <> inline double to_double(float16_t v) { return half_to_float(v); }
template <> inline double to_double(bfloat16_t v) { return bf16_to_float(v); }
template <typename T> inline T from_double(double v) { return static_cast<T>(v); }
template <> inline float16_t from_double(double v) { return float_to_half(static_cast<float>(v)); }
template <> inline bfloat16_t from_double(double v) { return float_to_bf16(static_cast<float>(v)); }

}  // namespace parity
