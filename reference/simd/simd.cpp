// Vectorised CPU loops (see simd.hpp). Highway compiles the per-target part below once for each
// instruction set it targets (foreach_target.h re-includes this file), and the dispatch part
// once, choosing the best the CPU has at the first call.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "reference/simd/simd.cpp"
#include <hwy/foreach_target.h>  // must come before highway.h

#include <hwy/highway.h>
#include <hwy/contrib/math/math-inl.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <numbers>

HWY_BEFORE_NAMESPACE();
namespace parity::simd::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Runs body(d, offset) over whole vectors, then once over the tail through a vector-sized
// buffer per array (loaded, computed and stored as a whole vector), so that every element takes
// the same path whatever n is.
template <class D, class Body> HWY_INLINE void over_vectors(D d, std::size_t n, const Body& body) {
  const std::size_t lanes = hn::Lanes(d);
  std::size_t i = 0;
  for (; i + lanes <= n; i += lanes) body(i, lanes);
  if (i < n) body(i, n - i);
}

// A vector of lanes from p (count < Lanes: the rest zero) and its store back.
template <class D, typename T> HWY_INLINE hn::Vec<D> load(D d, const T* p, std::size_t count) {
  if (count == hn::Lanes(d)) return hn::LoadU(d, p);
  constexpr std::size_t kMax = HWY_MAX_BYTES / sizeof(T);
  HWY_ALIGN T buffer[kMax] = {};
  std::memcpy(buffer, p, std::min(count, kMax) * sizeof(T));
  return hn::Load(d, buffer);
}
template <class D, typename T> HWY_INLINE void store(D d, hn::Vec<D> v, T* p, std::size_t count) {
  if (count == hn::Lanes(d)) return hn::StoreU(v, d, p);
  constexpr std::size_t kMax = HWY_MAX_BYTES / sizeof(T);
  HWY_ALIGN T buffer[kMax];
  hn::Store(v, d, buffer);
  std::memcpy(p, buffer, std::min(count, kMax) * sizeof(T));
}

// 1 + exp(-2u) for GeLU, the scalar code's operations in its order: u = k (x + ((c x) x) x).
// Above an argument of 88 (float32) or 706 (float64: the top of Highway's valid range) exp is
// taken as inf, as libm's is from 88.72 and 709.78: GeLU's value there is x e^-2u, below
// 1e-37 and 1e-305 of x, and it becomes 0 a little sooner.
template <class D> HWY_INLINE hn::Vec<D> one_plus_exp(D d, hn::Vec<D> x) {
  using T = hn::TFromD<D>;
  const auto k = hn::Set(d, static_cast<T>(std::sqrt(2.0 / std::numbers::pi)));
  const auto cube = hn::Mul(hn::Mul(hn::Mul(hn::Set(d, T(0.044715)), x), x), x);
  const auto u = hn::Mul(k, hn::Add(x, cube));
  const auto argument = hn::Mul(hn::Set(d, T(-2)), u);
  const auto limit = hn::Set(d, sizeof(T) == 4 ? T(88) : T(706));
  const auto e = hn::IfThenElse(hn::Gt(argument, limit), hn::Inf(d), hn::Exp(d, hn::Min(argument, limit)));
  return hn::Add(hn::Set(d, T(1)), e);
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

// binary16 -> float32, exact; infinities and NaNs (exponent all ones) by their bits, so that a
// signalling NaN stays signalling as half.hpp's half_to_float keeps it (the hardware's
// conversion would quiet it).
void HalfToFloat(const std::uint16_t* in, float* out, std::size_t n) {
  const hn::ScalableTag<float> d;
  const hn::Rebind<hwy::float16_t, decltype(d)> dh;
  const hn::RebindToUnsigned<decltype(d)> du;
  const hn::Rebind<std::uint16_t, decltype(d)> du16;
  const auto* from = reinterpret_cast<const hwy::float16_t*>(in);
  over_vectors(d, n, [&](std::size_t i, std::size_t count) {
    const auto bits = hn::PromoteTo(du, load(du16, in + i, count));
    const auto exponent = hn::And(bits, hn::Set(du, 0x7c00u));
    const auto special = hn::Or(hn::ShiftLeft<16>(hn::And(bits, hn::Set(du, 0x8000u))),
                                hn::Or(hn::Set(du, 0x7f800000u), hn::ShiftLeft<13>(hn::And(bits, hn::Set(du, 0x3ffu)))));
    const auto widened = hn::PromoteTo(d, load(dh, from + i, count));
    store(d, hn::IfThenElse(hn::RebindMask(d, hn::Eq(exponent, hn::Set(du, 0x7c00u))), hn::BitCast(d, special), widened),
          out + i, count);
  });
}

// float32 -> binary16, rounding to nearest even; NaNs keep their sign and the top of their
// payload with the quiet bit set (half.hpp's float_to_half).
void FloatToHalf(const float* in, std::uint16_t* out, std::size_t n) {
  const hn::ScalableTag<float> d;
  const hn::Rebind<hwy::float16_t, decltype(d)> dh;
  const hn::RebindToUnsigned<decltype(d)> du;
  const hn::Rebind<std::uint16_t, decltype(d)> du16;
  const hn::RebindToSigned<decltype(d)> di;
  over_vectors(d, n, [&](std::size_t i, std::size_t count) {
    const auto v = load(d, in + i, count);
    const auto bits = hn::BitCast(du, v);
    const auto quiet = hn::Or(hn::And(hn::ShiftRight<16>(bits), hn::Set(du, 0x8000u)),
                              hn::Or(hn::Set(du, 0x7e00u), hn::And(hn::ShiftRight<13>(bits), hn::Set(du, 0x3ffu))));
    const auto halves = hn::PromoteTo(du, hn::BitCast(du16, hn::DemoteTo(dh, v)));
    const auto result = hn::IfThenElse(hn::RebindMask(du, hn::IsNaN(v)), quiet, halves);
    store(du16, hn::DemoteTo(du16, hn::BitCast(di, result)), out + i, count);
  });
}

void Bf16ToFloat(const std::uint16_t* in, float* out, std::size_t n) {
  const hn::ScalableTag<float> d;
  const hn::RebindToUnsigned<decltype(d)> du;
  const hn::Rebind<std::uint16_t, decltype(d)> du16;
  over_vectors(d, n, [&](std::size_t i, std::size_t count) {
    store(d, hn::BitCast(d, hn::ShiftLeft<16>(hn::PromoteTo(du, load(du16, in + i, count)))), out + i, count);
  });
}

// float32 -> bfloat16, rounding to nearest even (add 0x7fff and the lowest kept bit); NaNs keep
// their sign and top bits with the quiet bit set (half.hpp's float_to_bf16).
void FloatToBf16(const float* in, std::uint16_t* out, std::size_t n) {
  const hn::ScalableTag<float> d;
  const hn::RebindToUnsigned<decltype(d)> du;
  const hn::RebindToSigned<decltype(d)> di;
  const hn::Rebind<std::uint16_t, decltype(d)> du16;
  over_vectors(d, n, [&](std::size_t i, std::size_t count) {
    const auto v = load(d, in + i, count);
    const auto bits = hn::BitCast(du, v);
    const auto lowest_kept = hn::And(hn::ShiftRight<16>(bits), hn::Set(du, 1u));
    const auto rounded = hn::ShiftRight<16>(hn::Add(bits, hn::Add(hn::Set(du, 0x7fffu), lowest_kept)));
    const auto nan = hn::Or(hn::ShiftRight<16>(bits), hn::Set(du, 0x40u));
    const auto result = hn::IfThenElse(hn::RebindMask(du, hn::IsNaN(v)), nan, rounded);
    store(du16, hn::DemoteTo(du16, hn::BitCast(di, result)), out + i, count);
  });
}

const char* Target() { return hwy::TargetName(HWY_TARGET); }

}  // namespace parity::simd::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "reference/simd/simd.hpp"

namespace parity::simd {

HWY_EXPORT(GeluForwardF32);
HWY_EXPORT(GeluForwardF64);
HWY_EXPORT(GeluBackwardF32);
HWY_EXPORT(GeluBackwardF64);
HWY_EXPORT(HalfToFloat);
HWY_EXPORT(FloatToHalf);
HWY_EXPORT(Bf16ToFloat);
HWY_EXPORT(FloatToBf16);
HWY_EXPORT(Target);

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
const char* target() { return HWY_DYNAMIC_DISPATCH(Target)(); }

}  // namespace parity::simd
#endif
