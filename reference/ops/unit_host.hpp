// What the host parts of the op units use (see unit.hpp): the dispatch test, the data type
// codes the launchers take, device scratch tensors, the CPU bodies' arithmetic types, the
// element-wise check and loop and the row softmax that several units share, the BLAS product
// (units/matmul.cpp) and the index check of the embeddings and cross-entropies
// (units/indices.cpp).
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <tuple>
#include <type_traits>

#include "reference/ops/checks.hpp"
#include "reference/ops/flops.hpp"
#include "reference/ops/ops.hpp"
#include "reference/simd/simd.hpp"
#include "reference/tensor/tensor.hpp"

#ifndef PARITY_HAVE_CUDA
#error "the op units are compiled within parity_reference, whose target defines PARITY_HAVE_CUDA (0 or 1)"
#endif

namespace parity::ops {

// Whether this build has the units' device parts (unit.hpp explains the dispatch).
inline constexpr bool kCudaBuilt = PARITY_HAVE_CUDA != 0;

inline bool on_device(const Tensor& t) { return t.space() == MemorySpace::cuda; }

// The launchers take parity::DataType as its integer value (unit_device.hpp's DataTypeCode).
static_assert(static_cast<int>(DataType::float64) == 0 && static_cast<int>(DataType::float32) == 1 &&
              static_cast<int>(DataType::float16) == 2 && static_cast<int>(DataType::bfloat16) == 3 &&
              static_cast<int>(DataType::int32) == 4 && static_cast<int>(DataType::int64) == 5);
inline int code(DataType t) { return static_cast<int>(t); }
inline int code(const Tensor& t) { return code(t.dtype()); }

// A scratch tensor on the device, charged to workspace.
inline Tensor device_scratch(const std::string& name, Shape shape, DataType dtype) {
  return Tensor::empty(name, std::move(shape), dtype, MemoryCategory::workspace, MemorySpace::cuda);
}

// ---- The CPU bodies' arithmetic: templates over the storage type T, computing in Acc<T> (T
// itself for float32/float64, float32 for float16/bfloat16 storage), each result rounded once.

template <typename T> struct AccOf { using type = T; };
template <> struct AccOf<float16_t> { using type = float; };
template <> struct AccOf<bfloat16_t> { using type = float; };
template <typename T> using Acc = typename AccOf<T>::type;

template <typename T> inline Acc<T> load(T v) { return v; }
template <> inline float load(float16_t v) { return half_to_float(v); }
template <> inline float load(bfloat16_t v) { return bf16_to_float(v); }
template <typename T> inline T store(Acc<T> v) { return v; }
template <> inline float16_t store<float16_t>(float v) { return float_to_half(v); }
template <> inline bfloat16_t store<bfloat16_t>(float v) { return float_to_bf16(v); }

// Calls f(T{}) for a floating storage type; refuses integer tensors.
template <typename F> decltype(auto) visit_floating(const char* op, const Tensor& t, F&& f) {
  require_floating(op, t);
  switch (t.dtype()) {
    case DataType::float64: return f(double{});
    case DataType::float16: return f(float16_t{});
    case DataType::bfloat16: return f(bfloat16_t{});
    default: break;
  }
  return f(float{});
}

// Element i of a host index tensor (int32 or int64).
inline std::int64_t index_at(const Tensor& t, std::int64_t i) {
  return t.dtype() == DataType::int32 ? t.data<std::int32_t>()[i] : t.data<std::int64_t>()[i];
}

// The check of the element-wise ops y = f(first, rest...): every tensor of first's shape and
// type and in its memory space, floating-point.
template <typename... Rest>
void check_elementwise(const char* op, const Tensor& y, const Tensor& first, const Rest&... rest) {
  require_defined(op, first, "input");
  (same_shape(op, first, rest), ...);
  same_shape(op, first, y);
  require_same_space(op, {&first, &rest..., &y});
  require_floating(op, first);
}

// The CPU body of an element-wise op (checked by check_elementwise): y[i] = f(first[i],
// rest[i]...) computed in Acc<T>; f is generic over the arithmetic type.
template <typename F, typename... Rest>
void elementwise_on_cpu(const char* op, Tensor& y, F f, const Tensor& first, const Rest&... rest) {
  visit_floating(op, first, [&](auto tag) {
    using T = decltype(tag);
    T* out = y.data<T>();
    const T* in = first.data<T>();
    const std::array<const T*, sizeof...(Rest)> more{rest.template data<T>()...};
    for (std::int64_t i = 0; i < first.numel(); ++i)
      out[i] = store<T>(std::apply([&](auto*... p) { return f(load(in[i]), load(p[i])...); }, more));
  });
}

// Softmax of one row of length c into `out` (which may be `in`), with the first `valid` entries
// live and the rest zero (vectorised, its sum in reference/simd's blocked order). Returns
// log(sum_j exp(in_j)) over the live entries (the cross-entropy needs it).
template <typename C> C softmax_row(const C* in, C* out, std::int64_t c, std::int64_t valid) {
  const C log_sum_exp = simd::softmax_row(in, out, static_cast<std::size_t>(valid));
  std::fill(out + valid, out + c, C(0));
  return log_sum_exp;
}

// Widens 16-bit storage to float32 (or copies float32 and float64) into `to`; narrows back.
template <typename T> void widen(const T* from, Acc<T>* to, std::int64_t n) {
  if constexpr (std::is_same_v<T, Acc<T>>)
    std::copy(from, from + n, to);
  else
    simd::widen(from, to, static_cast<std::size_t>(n));
}
template <typename T> void narrow(const Acc<T>* from, T* to, std::int64_t n) {
  if constexpr (std::is_same_v<T, Acc<T>>)
    std::copy(from, from + n, to);
  else
    simd::narrow(from, to, static_cast<std::size_t>(n));
}

// Row-major GEMM C = alpha op(A) op(B) + beta C with leading dimensions, through BLAS (small
// float32 products with alpha 1 and beta 0 or 1 through simd::small_gemm); counts 2mnk FLOPs
// (units/matmul.cpp).
void gemm(bool ta, bool tb, int m, int n, int k, double alpha, const double* a, int lda, const double* b, int ldb,
          double beta, double* c, int ldc);
void gemm(bool ta, bool tb, int m, int n, int k, float alpha, const float* a, int lda, const float* b, int ldb,
          float beta, float* c, int ldc);
// c = bias (in every row) + a b for float32 host matrices a [m, k], b [k, n], the product small
// enough for simd::small_gemm, in one pass (the bits of copying the bias and accumulating the
// product onto it); false, computing nothing, for any other (units/matmul.cpp).
bool small_product_with_bias(const Tensor& a, const Tensor& b, const Tensor& bias, Tensor& c);

// The first index outside [0, limit) of an int32/int64 tensor on either device: its position
// (-1 where there is none) and its value. A loop reads a host tensor, a kernel a device tensor,
// and the host waits for its result (units/indices.cpp).
struct IndexOutside {
  std::int64_t position = -1;
  std::int64_t value = 0;
};
IndexOutside first_index_outside(const Tensor& indices, std::int64_t limit);

}  // namespace parity::ops
