// Vectorised CPU loops (see simd.hpp). Highway compiles the per-target part below once for each
// instruction set it targets (foreach_target.h re-includes this file), and the dispatch part
// once, choosing the best the CPU has at the first call.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "reference/simd/simd.cpp"
#include <hwy/foreach_target.h>  // must come before highway.h

#include "reference/simd/simd.hpp"

#include <hwy/highway.h>

#include "reference/simd/vectors-inl.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numbers>
#include <type_traits>

HWY_BEFORE_NAMESPACE();
namespace parity::simd::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

void ExpF32(const float* x, float* y, std::size_t n) {
  const hn::ScalableTag<float> d;
  over_vectors(d, n, [&](std::size_t i, std::size_t count) { store(d, exp_f32(d, load(d, x + i, count)), y + i, count); });
}

// 1 + exp(-2u) for GeLU, the scalar code's operations in its order: u = k (x + ((c x) x) x).
template <class D> HWY_INLINE hn::Vec<D> one_plus_exp(D d, hn::Vec<D> x) {
  using T = hn::TFromD<D>;
  const auto k = hn::Set(d, static_cast<T>(std::sqrt(2.0 / std::numbers::pi)));
  const auto cube = hn::Mul(hn::Mul(hn::Mul(hn::Set(d, T(0.044715)), x), x), x);
  const auto u = hn::Mul(k, hn::Add(x, cube));
  return hn::Add(hn::Set(d, T(1)), exp_any(d, hn::Mul(hn::Set(d, T(-2)), u)));
}

template <typename T> void GeluForward(const T* x, T* y, std::size_t n) {
  const hn::ScalableTag<T> d;
  over_vectors(d, n, [&](std::size_t i, std::size_t count) {
    const auto v = load(d, x + i, count);
    store(d, hn::Div(v, one_plus_exp(d, v)), y + i, count);
  });
}

template <typename T> void GeluBackward(const T* dy, const T* x, T* dx, std::size_t n) {
  const hn::ScalableTag<T> d;
  const auto one = hn::Set(d, T(1));
  const auto k = hn::Set(d, static_cast<T>(std::sqrt(2.0 / std::numbers::pi)));
  const auto c3 = hn::Set(d, static_cast<T>(3 * 0.044715));
  over_vectors(d, n, [&](std::size_t i, std::size_t count) {
    const auto v = load(d, x + i, count);
    const auto s = hn::Div(one, one_plus_exp(d, v));
    // s + 2 x s (1 - s) k (1 + 3c x x), products left to right as the scalar code writes them.
    const auto slope = hn::Mul(hn::Mul(hn::Mul(hn::Mul(hn::Mul(hn::Set(d, T(2)), v), s), hn::Sub(one, s)), k),
                               hn::Add(one, hn::Mul(hn::Mul(c3, v), v)));
    store(d, hn::Mul(load(d, dy + i, count), hn::Add(s, slope)), dx + i, count);
  });
}

void GeluForwardF32(const float* x, float* y, std::size_t n) { GeluForward(x, y, n); }
void GeluForwardF64(const double* x, double* y, std::size_t n) { GeluForward(x, y, n); }
void GeluBackwardF32(const float* dy, const float* x, float* dx, std::size_t n) { GeluBackward(dy, x, dx, n); }
void GeluBackwardF64(const double* dy, const double* x, double* dx, std::size_t n) { GeluBackward(dy, x, dx, n); }

template <typename T> T SoftmaxRow(const T* x, T* y, std::size_t n) {
  const T m = RowMax(x, n);
  const T sum = ExpSum(x, n, m, y);
  Scale(y, n, T(1) / sum);
  return m + std::log(sum);
}

template <typename T> void AccumulateRows(const T* x, std::size_t rows, std::size_t columns, T* acc) {
  const hn::ScalableTag<T> d;
  over_vectors(d, columns, [&](std::size_t j, std::size_t count) {
    auto sum = load(d, acc + j, count);
    for (std::size_t r = 0; r < rows; ++r) sum = hn::Add(sum, load(d, x + r * columns + j, count));
    store(d, sum, acc + j, count);
  });
}

template <typename T> void AddScaled(T* acc, const T* x, std::size_t n, T w) {
  const hn::ScalableTag<T> d;
  over_vectors(d, n, [&](std::size_t j, std::size_t count) {
    store(d, hn::Add(load(d, acc + j, count), hn::Mul(hn::Set(d, w), load(d, x + j, count))), acc + j, count);
  });
}

template <typename T> T SquaredDeviationSum(const T* x, std::size_t n, T c) {
  return blocked_sum<T>(n, [&](auto d, std::size_t i, std::size_t count) {
    const auto deviation = hn::Sub(load(d, x + i, count), hn::Set(d, c));
    return hn::Mul(deviation, deviation);
  });
}

template <typename T> void ScaleTwice(T* x, std::size_t n, T a, T b) {
  const hn::ScalableTag<T> d;
  over_vectors(d, n, [&](std::size_t i, std::size_t count) {
    store(d, hn::Mul(hn::Mul(load(d, x + i, count), hn::Set(d, a)), hn::Set(d, b)), x + i, count);
  });
}

template <typename T>
void LayerNormApply(const T* x, const T* gamma, const T* beta, T* y, std::size_t n, T mean, T rstd) {
  const hn::ScalableTag<T> d;
  over_vectors(d, n, [&](std::size_t i, std::size_t count) {
    const auto xhat_scaled = hn::Mul(hn::Mul(hn::Sub(load(d, x + i, count), hn::Set(d, mean)), hn::Set(d, rstd)),
                                     load(d, gamma + i, count));
    store(d, hn::Add(xhat_scaled, load(d, beta + i, count)), y + i, count);
  });
}

template <class D, typename T> HWY_INLINE hn::Vec<D> xhat_of(D d, const T* x, std::size_t i, std::size_t count, T mean, T rstd) {
  return hn::Mul(hn::Sub(load(d, x + i, count), hn::Set(d, mean)), hn::Set(d, rstd));
}

template <typename T>
void LayerNormBackwardSums(const T* dy, const T* x, const T* gamma, std::size_t n, T mean, T rstd, T* sums, T* dgamma,
                           T* dbeta) {
  if (sums) {
    sums[0] = blocked_sum<T>(n, [&](auto d, std::size_t i, std::size_t count) {
      return hn::Mul(load(d, dy + i, count), load(d, gamma + i, count));
    });
    sums[1] = blocked_sum<T>(n, [&](auto d, std::size_t i, std::size_t count) {
      return hn::Mul(hn::Mul(load(d, dy + i, count), load(d, gamma + i, count)), xhat_of(d, x, i, count, mean, rstd));
    });
  }
  if (!dgamma || !dbeta) return;
  const hn::ScalableTag<T> d;
  over_vectors(d, n, [&](std::size_t i, std::size_t count) {
    const auto g = load(d, dy + i, count);
    store(d, hn::Add(load(d, dgamma + i, count), hn::Mul(g, xhat_of(d, x, i, count, mean, rstd))), dgamma + i, count);
    store(d, hn::Add(load(d, dbeta + i, count), g), dbeta + i, count);
  });
}

template <typename T>
void LayerNormBackwardDx(const T* dy, const T* x, const T* gamma, T* dx, std::size_t n, T mean, T rstd, T a, T b) {
  const hn::ScalableTag<T> d;
  over_vectors(d, n, [&](std::size_t i, std::size_t count) {
    const auto dxhat = hn::Mul(load(d, dy + i, count), load(d, gamma + i, count));
    const auto inner = hn::Sub(hn::Sub(dxhat, hn::Set(d, a)), hn::Mul(xhat_of(d, x, i, count, mean, rstd), hn::Set(d, b)));
    store(d, hn::Mul(hn::Set(d, rstd), inner), dx + i, count);
  });
}

template <typename T> void AdamWUpdate(T* p, const T* g, T* m, T* v, std::size_t n, const AdamW<T>& h) {
  const hn::ScalableTag<T> d;
  const auto lr = hn::Set(d, h.lr), wd = hn::Set(d, h.wd), b1 = hn::Set(d, h.b1), b2 = hn::Set(d, h.b2);
  const auto ob1 = hn::Set(d, h.one_minus_b1), ob2 = hn::Set(d, h.one_minus_b2), c1 = hn::Set(d, h.c1),
             c2 = hn::Set(d, h.c2), eps = hn::Set(d, h.eps), lr_wd = hn::Mul(lr, wd);
  over_vectors(d, n, [&](std::size_t i, std::size_t count) {
    auto pi = load(d, p + i, count);
    const auto gi = load(d, g + i, count);
    pi = hn::Sub(pi, hn::Mul(lr_wd, pi));
    const auto mi = hn::Add(hn::Mul(b1, load(d, m + i, count)), hn::Mul(ob1, gi));
    const auto vi = hn::Add(hn::Mul(b2, load(d, v + i, count)), hn::Mul(hn::Mul(ob2, gi), gi));
    pi = hn::Sub(pi, hn::Div(hn::Mul(lr, hn::Div(mi, c1)), hn::Add(hn::Sqrt(hn::Div(vi, c2)), eps)));
    store(d, mi, m + i, count);
    store(d, vi, v + i, count);
    store(d, pi, p + i, count);
  });
}

#define PARITY_SIMD_BOTH(name, float_args, double_args, call)  \
  auto name##F32 float_args { return call; }                  \
  auto name##F64 double_args { return call; }
PARITY_SIMD_BOTH(RowMax, (const float* x, std::size_t n), (const double* x, std::size_t n), RowMax(x, n))
PARITY_SIMD_BOTH(ExpSum, (const float* x, std::size_t n, float s, float* o, const float* next),
                 (const double* x, std::size_t n, double s, double* o, const double* next), ExpSum(x, n, s, o, next))
PARITY_SIMD_BOTH(RowSum, (const float* x, std::size_t n), (const double* x, std::size_t n), RowSum(x, n))
PARITY_SIMD_BOTH(RowDot, (const float* a, const float* b, std::size_t n), (const double* a, const double* b, std::size_t n),
                 RowDot(a, b, n))
PARITY_SIMD_BOTH(SquaredDeviationSum, (const float* x, std::size_t n, float c), (const double* x, std::size_t n, double c),
                 SquaredDeviationSum(x, n, c))
PARITY_SIMD_BOTH(Scale, (float* x, std::size_t n, float s), (double* x, std::size_t n, double s), Scale(x, n, s))
PARITY_SIMD_BOTH(ScaleTwice, (float* x, std::size_t n, float a, float b), (double* x, std::size_t n, double a, double b),
                 ScaleTwice(x, n, a, b))
PARITY_SIMD_BOTH(SoftmaxRow, (const float* x, float* y, std::size_t n), (const double* x, double* y, std::size_t n),
                 SoftmaxRow(x, y, n))
PARITY_SIMD_BOTH(AddScaled, (float* acc, const float* x, std::size_t n, float w),
                 (double* acc, const double* x, std::size_t n, double w), AddScaled(acc, x, n, w))
PARITY_SIMD_BOTH(AccumulateRows, (const float* x, std::size_t rows, std::size_t columns, float* acc),
                 (const double* x, std::size_t rows, std::size_t columns, double* acc), AccumulateRows(x, rows, columns, acc))
PARITY_SIMD_BOTH(LayerNormApply,
                 (const float* x, const float* g, const float* b, float* y, std::size_t n, float mean, float rstd),
                 (const double* x, const double* g, const double* b, double* y, std::size_t n, double mean, double rstd),
                 LayerNormApply(x, g, b, y, n, mean, rstd))
PARITY_SIMD_BOTH(LayerNormBackwardSums,
                 (const float* dy, const float* x, const float* g, std::size_t n, float mean, float rstd, float* sums,
                  float* dg, float* db),
                 (const double* dy, const double* x, const double* g, std::size_t n, double mean, double rstd, double* sums,
                  double* dg, double* db),
                 LayerNormBackwardSums(dy, x, g, n, mean, rstd, sums, dg, db))
PARITY_SIMD_BOTH(LayerNormBackwardDx,
                 (const float* dy, const float* x, const float* g, float* dx, std::size_t n, float mean, float rstd,
                  float a, float b),
                 (const double* dy, const double* x, const double* g, double* dx, std::size_t n, double mean,
                  double rstd, double a, double b),
                 LayerNormBackwardDx(dy, x, g, dx, n, mean, rstd, a, b))
PARITY_SIMD_BOTH(SoftmaxBackwardApply, (const float* dy, const float* y, float* dx, std::size_t n, float dot),
                 (const double* dy, const double* y, double* dx, std::size_t n, double dot),
                 SoftmaxBackwardApply(dy, y, dx, n, dot))
PARITY_SIMD_BOTH(AdamW, (float* p, const float* g, float* m, float* v, std::size_t n, const AdamW<float>& h),
                 (double* p, const double* g, double* m, double* v, std::size_t n, const AdamW<double>& h),
                 AdamWUpdate(p, g, m, v, n, h))
#undef PARITY_SIMD_BOTH

// ---- 16-bit storage. A vector of float32 lanes (tag D) from as many 16-bit patterns, and back.

// binary16 -> float32, exact; infinities and NaNs (exponent all ones) by their bits, so that a
// signalling NaN stays signalling as half.hpp's half_to_float keeps it (the hardware's
// conversion would quiet it).
template <class D> HWY_INLINE hn::Vec<D> widen_half(D d, const std::uint16_t* p, std::size_t count) {
  const hn::Rebind<hwy::float16_t, D> dh;
  const hn::RebindToUnsigned<D> du;
  const hn::Rebind<std::uint16_t, D> du16;
  const auto widened = hn::PromoteTo(d, load(dh, reinterpret_cast<const hwy::float16_t*>(p), count));
  const auto all_ones = hn::Not(hn::IsFinite(widened));
  if (HWY_LIKELY(hn::AllFalse(d, all_ones))) return widened;
  const auto bits = hn::PromoteTo(du, load(du16, p, count));
  const auto special = hn::Or(hn::ShiftLeft<16>(hn::And(bits, hn::Set(du, 0x8000u))),
                              hn::Or(hn::Set(du, 0x7f800000u), hn::ShiftLeft<13>(hn::And(bits, hn::Set(du, 0x3ffu)))));
  return hn::IfThenElse(all_ones, hn::BitCast(d, special), widened);
}

// float32 -> binary16, rounding to nearest even; NaNs keep their sign and the top of their
// payload with the quiet bit set (half.hpp's float_to_half).
template <class D> HWY_INLINE void narrow_half(D, hn::Vec<D> v, std::uint16_t* p, std::size_t count) {
  const hn::Rebind<hwy::float16_t, D> dh;
  const hn::RebindToUnsigned<D> du;
  const hn::RebindToSigned<D> di;
  const hn::Rebind<std::uint16_t, D> du16;
  const auto halves = hn::DemoteTo(dh, v);
  const auto nan = hn::IsNaN(v);
  if (HWY_LIKELY(hn::AllFalse(D(), nan))) return store(dh, halves, reinterpret_cast<hwy::float16_t*>(p), count);
  const auto bits = hn::BitCast(du, v);
  const auto quiet = hn::Or(hn::And(hn::ShiftRight<16>(bits), hn::Set(du, 0x8000u)),
                            hn::Or(hn::Set(du, 0x7e00u), hn::And(hn::ShiftRight<13>(bits), hn::Set(du, 0x3ffu))));
  const auto result = hn::IfThenElse(hn::RebindMask(du, nan), quiet, hn::PromoteTo(du, hn::BitCast(du16, halves)));
  store(du16, hn::DemoteTo(du16, hn::BitCast(di, result)), p, count);
}

template <class D> HWY_INLINE hn::Vec<D> widen_bf16(D d, const std::uint16_t* p, std::size_t count) {
  const hn::RebindToUnsigned<D> du;
  const hn::Rebind<std::uint16_t, D> du16;
  return hn::BitCast(d, hn::ShiftLeft<16>(hn::PromoteTo(du, load(du16, p, count))));
}

// float32 -> bfloat16, rounding to nearest even (add 0x7fff and the lowest kept bit); NaNs keep
// their sign and top bits with the quiet bit set (half.hpp's float_to_bf16).
template <class D> HWY_INLINE void narrow_bf16(D, hn::Vec<D> v, std::uint16_t* p, std::size_t count) {
  const hn::RebindToUnsigned<D> du;
  const hn::Rebind<std::uint16_t, D> du16;
  const auto bits = hn::BitCast(du, v);
  const auto lowest_kept = hn::And(hn::ShiftRight<16>(bits), hn::Set(du, 1u));
  const auto rounded = hn::ShiftRight<16>(hn::Add(bits, hn::Add(hn::Set(du, 0x7fffu), lowest_kept)));
  const auto nan = hn::Or(hn::ShiftRight<16>(bits), hn::Set(du, 0x40u));
  const auto result = hn::IfThenElse(hn::RebindMask(du, hn::IsNaN(v)), nan, rounded);
  store(du16, hn::TruncateTo(du16, result), p, count);  // every lane below 2^16: the low halves
}

// A widening copy at least this large goes to memory with non-temporal stores: its output is
// twice its input and far larger than a core's L2, so fetching each line before overwriting it
// (a normal store's read for ownership) would add half again to the traffic.
constexpr std::size_t kStreamBytes = std::size_t{8} << 20;

// out[i] = widen(offset, count) over n floats, streamed when large and vector-aligned.
template <class D, class Widen> HWY_INLINE void widen_into(D d, float* out, std::size_t n, const Widen& widen) {
  const bool stream = n * sizeof(float) >= kStreamBytes &&
                      reinterpret_cast<std::uintptr_t>(out) % (hn::Lanes(d) * sizeof(float)) == 0;
  if (!stream) {
    over_vectors(d, n, [&](std::size_t i, std::size_t count) { store(d, widen(i, count), out + i, count); });
    return;
  }
  over_vectors(d, n, [&](std::size_t i, std::size_t count) {
    if (count == hn::Lanes(d)) {
      hn::Stream(widen(i, count), d, out + i);
    } else {
      store(d, widen(i, count), out + i, count);
    }
  });
  hwy::FlushStream();
}

void HalfToFloat(const std::uint16_t* in, float* out, std::size_t n) {
  const hn::ScalableTag<float> d;
  widen_into(d, out, n, [&](std::size_t i, std::size_t count) { return widen_half(d, in + i, count); });
}
void FloatToHalf(const float* in, std::uint16_t* out, std::size_t n) {
  const hn::ScalableTag<float> d;
  over_vectors(d, n, [&](std::size_t i, std::size_t count) { narrow_half(d, load(d, in + i, count), out + i, count); });
}
void Bf16ToFloat(const std::uint16_t* in, float* out, std::size_t n) {
  const hn::ScalableTag<float> d;
  widen_into(d, out, n, [&](std::size_t i, std::size_t count) { return widen_bf16(d, in + i, count); });
}
void FloatToBf16(const float* in, std::uint16_t* out, std::size_t n) {
  const hn::ScalableTag<float> d;
  over_vectors(d, n, [&](std::size_t i, std::size_t count) { narrow_bf16(d, load(d, in + i, count), out + i, count); });
}

// out = a + b in float32, rounded once to 16 bits (out may be a or b). The operands widen by the
// plain conversion, without widen_half's care for signalling NaNs: the addition quiets a NaN
// either way, keeping the same payload, so the sum's bits are the same and each vector skips two
// tests for infinities and NaNs.
void HalfAdd(const std::uint16_t* a, const std::uint16_t* b, std::uint16_t* out, std::size_t n) {
  const hn::ScalableTag<float> d;
  const hn::Rebind<hwy::float16_t, decltype(d)> dh;
  const auto widen = [&](const std::uint16_t* p, std::size_t count) {
    return hn::PromoteTo(d, load(dh, reinterpret_cast<const hwy::float16_t*>(p), count));
  };
  over_vectors(d, n, [&](std::size_t i, std::size_t count) {
    narrow_half(d, hn::Add(widen(a + i, count), widen(b + i, count)), out + i, count);
  });
}
void Bf16Add(const std::uint16_t* a, const std::uint16_t* b, std::uint16_t* out, std::size_t n) {
  const hn::ScalableTag<float> d;
  over_vectors(d, n, [&](std::size_t i, std::size_t count) {
    narrow_bf16(d, hn::Add(widen_bf16(d, a + i, count), widen_bf16(d, b + i, count)), out + i, count);
  });
}

const char* Target() { return hwy::TargetName(HWY_TARGET); }

}  // namespace parity::simd::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE

namespace parity::simd {

HWY_EXPORT(ExpF32);
HWY_EXPORT(GeluForwardF32);
HWY_EXPORT(GeluForwardF64);
HWY_EXPORT(GeluBackwardF32);
HWY_EXPORT(GeluBackwardF64);
HWY_EXPORT(HalfToFloat);
HWY_EXPORT(FloatToHalf);
HWY_EXPORT(Bf16ToFloat);
HWY_EXPORT(FloatToBf16);
HWY_EXPORT(HalfAdd);
HWY_EXPORT(Bf16Add);
HWY_EXPORT(Target);
HWY_EXPORT(RowMaxF32);
HWY_EXPORT(RowMaxF64);
HWY_EXPORT(ExpSumF32);
HWY_EXPORT(ExpSumF64);
HWY_EXPORT(RowSumF32);
HWY_EXPORT(RowSumF64);
HWY_EXPORT(RowDotF32);
HWY_EXPORT(RowDotF64);
HWY_EXPORT(SquaredDeviationSumF32);
HWY_EXPORT(SquaredDeviationSumF64);
HWY_EXPORT(ScaleF32);
HWY_EXPORT(ScaleF64);
HWY_EXPORT(ScaleTwiceF32);
HWY_EXPORT(ScaleTwiceF64);
HWY_EXPORT(SoftmaxRowF32);
HWY_EXPORT(SoftmaxRowF64);
HWY_EXPORT(AddScaledF32);
HWY_EXPORT(AddScaledF64);
HWY_EXPORT(AccumulateRowsF32);
HWY_EXPORT(AccumulateRowsF64);
HWY_EXPORT(LayerNormApplyF32);
HWY_EXPORT(LayerNormApplyF64);
HWY_EXPORT(LayerNormBackwardSumsF32);
HWY_EXPORT(LayerNormBackwardSumsF64);
HWY_EXPORT(LayerNormBackwardDxF32);
HWY_EXPORT(LayerNormBackwardDxF64);
HWY_EXPORT(SoftmaxBackwardApplyF32);
HWY_EXPORT(SoftmaxBackwardApplyF64);
HWY_EXPORT(AdamWF32);
HWY_EXPORT(AdamWF64);

void exp(const float* x, float* y, std::size_t n) { HWY_DYNAMIC_DISPATCH(ExpF32)(x, y, n); }
void gelu_forward(const float* x, float* y, std::size_t n) { HWY_DYNAMIC_DISPATCH(GeluForwardF32)(x, y, n); }
void gelu_forward(const double* x, double* y, std::size_t n) { HWY_DYNAMIC_DISPATCH(GeluForwardF64)(x, y, n); }
void gelu_backward(const float* dy, const float* x, float* dx, std::size_t n) {
  HWY_DYNAMIC_DISPATCH(GeluBackwardF32)(dy, x, dx, n);
}
void gelu_backward(const double* dy, const double* x, double* dx, std::size_t n) {
  HWY_DYNAMIC_DISPATCH(GeluBackwardF64)(dy, x, dx, n);
}
void half_to_float(const std::uint16_t* in, float* out, std::size_t n) { HWY_DYNAMIC_DISPATCH(HalfToFloat)(in, out, n); }
void float_to_half(const float* in, std::uint16_t* out, std::size_t n) { HWY_DYNAMIC_DISPATCH(FloatToHalf)(in, out, n); }
void bf16_to_float(const std::uint16_t* in, float* out, std::size_t n) { HWY_DYNAMIC_DISPATCH(Bf16ToFloat)(in, out, n); }
void float_to_bf16(const float* in, std::uint16_t* out, std::size_t n) { HWY_DYNAMIC_DISPATCH(FloatToBf16)(in, out, n); }
void half_add(const std::uint16_t* a, const std::uint16_t* b, std::uint16_t* out, std::size_t n) {
  HWY_DYNAMIC_DISPATCH(HalfAdd)(a, b, out, n);
}
void bf16_add(const std::uint16_t* a, const std::uint16_t* b, std::uint16_t* out, std::size_t n) {
  HWY_DYNAMIC_DISPATCH(Bf16Add)(a, b, out, n);
}
const char* target() { return HWY_DYNAMIC_DISPATCH(Target)(); }

float row_max(const float* x, std::size_t n) { return HWY_DYNAMIC_DISPATCH(RowMaxF32)(x, n); }
double row_max(const double* x, std::size_t n) { return HWY_DYNAMIC_DISPATCH(RowMaxF64)(x, n); }
float exp_sum(const float* x, std::size_t n, float shift, float* out, const float* next) {
  return HWY_DYNAMIC_DISPATCH(ExpSumF32)(x, n, shift, out, next);
}
double exp_sum(const double* x, std::size_t n, double shift, double* out, const double* next) {
  return HWY_DYNAMIC_DISPATCH(ExpSumF64)(x, n, shift, out, next);
}
float row_sum(const float* x, std::size_t n) { return HWY_DYNAMIC_DISPATCH(RowSumF32)(x, n); }
double row_sum(const double* x, std::size_t n) { return HWY_DYNAMIC_DISPATCH(RowSumF64)(x, n); }
float row_dot(const float* a, const float* b, std::size_t n) { return HWY_DYNAMIC_DISPATCH(RowDotF32)(a, b, n); }
double row_dot(const double* a, const double* b, std::size_t n) { return HWY_DYNAMIC_DISPATCH(RowDotF64)(a, b, n); }
float squared_deviation_sum(const float* x, std::size_t n, float c) {
  return HWY_DYNAMIC_DISPATCH(SquaredDeviationSumF32)(x, n, c);
}
double squared_deviation_sum(const double* x, std::size_t n, double c) {
  return HWY_DYNAMIC_DISPATCH(SquaredDeviationSumF64)(x, n, c);
}
float softmax_row(const float* x, float* y, std::size_t n) { return HWY_DYNAMIC_DISPATCH(SoftmaxRowF32)(x, y, n); }
double softmax_row(const double* x, double* y, std::size_t n) { return HWY_DYNAMIC_DISPATCH(SoftmaxRowF64)(x, y, n); }
void accumulate_rows(const float* x, std::size_t rows, std::size_t columns, float* acc) {
  HWY_DYNAMIC_DISPATCH(AccumulateRowsF32)(x, rows, columns, acc);
}
void accumulate_rows(const double* x, std::size_t rows, std::size_t columns, double* acc) {
  HWY_DYNAMIC_DISPATCH(AccumulateRowsF64)(x, rows, columns, acc);
}
void add_scaled(float* acc, const float* x, std::size_t n, float w) { HWY_DYNAMIC_DISPATCH(AddScaledF32)(acc, x, n, w); }
void add_scaled(double* acc, const double* x, std::size_t n, double w) {
  HWY_DYNAMIC_DISPATCH(AddScaledF64)(acc, x, n, w);
}
void scale(float* x, std::size_t n, float s) { HWY_DYNAMIC_DISPATCH(ScaleF32)(x, n, s); }
void scale(double* x, std::size_t n, double s) { HWY_DYNAMIC_DISPATCH(ScaleF64)(x, n, s); }
void scale_twice(float* x, std::size_t n, float a, float b) { HWY_DYNAMIC_DISPATCH(ScaleTwiceF32)(x, n, a, b); }
void scale_twice(double* x, std::size_t n, double a, double b) { HWY_DYNAMIC_DISPATCH(ScaleTwiceF64)(x, n, a, b); }
void layernorm_apply(const float* x, const float* gamma, const float* beta, float* y, std::size_t n, float mean, float rstd) {
  HWY_DYNAMIC_DISPATCH(LayerNormApplyF32)(x, gamma, beta, y, n, mean, rstd);
}
void layernorm_apply(const double* x, const double* gamma, const double* beta, double* y, std::size_t n, double mean,
                     double rstd) {
  HWY_DYNAMIC_DISPATCH(LayerNormApplyF64)(x, gamma, beta, y, n, mean, rstd);
}
void layernorm_backward_sums(const float* dy, const float* x, const float* gamma, std::size_t n, float mean, float rstd,
                             float* sums, float* dgamma, float* dbeta) {
  HWY_DYNAMIC_DISPATCH(LayerNormBackwardSumsF32)(dy, x, gamma, n, mean, rstd, sums, dgamma, dbeta);
}
void layernorm_backward_sums(const double* dy, const double* x, const double* gamma, std::size_t n, double mean,
                             double rstd, double* sums, double* dgamma, double* dbeta) {
  HWY_DYNAMIC_DISPATCH(LayerNormBackwardSumsF64)(dy, x, gamma, n, mean, rstd, sums, dgamma, dbeta);
}
void layernorm_backward_dx(const float* dy, const float* x, const float* gamma, float* dx, std::size_t n, float mean,
                           float rstd, float a, float b) {
  HWY_DYNAMIC_DISPATCH(LayerNormBackwardDxF32)(dy, x, gamma, dx, n, mean, rstd, a, b);
}
void layernorm_backward_dx(const double* dy, const double* x, const double* gamma, double* dx, std::size_t n, double mean,
                           double rstd, double a, double b) {
  HWY_DYNAMIC_DISPATCH(LayerNormBackwardDxF64)(dy, x, gamma, dx, n, mean, rstd, a, b);
}
void softmax_backward_apply(const float* dy, const float* y, float* dx, std::size_t n, float dot) {
  HWY_DYNAMIC_DISPATCH(SoftmaxBackwardApplyF32)(dy, y, dx, n, dot);
}
void softmax_backward_apply(const double* dy, const double* y, double* dx, std::size_t n, double dot) {
  HWY_DYNAMIC_DISPATCH(SoftmaxBackwardApplyF64)(dy, y, dx, n, dot);
}
void adamw(float* p, const float* g, float* m, float* v, std::size_t n, const AdamW<float>& h) {
  HWY_DYNAMIC_DISPATCH(AdamWF32)(p, g, m, v, n, h);
}
void adamw(double* p, const double* g, double* m, double* v, std::size_t n, const AdamW<double>& h) {
  HWY_DYNAMIC_DISPATCH(AdamWF64)(p, g, m, v, n, h);
}

}  // namespace parity::simd
#endif
