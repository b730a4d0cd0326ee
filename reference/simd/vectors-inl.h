// The loops' shared per-target pieces (reference/simd): partial-vector loads and stores, exp,
// the blocked sum and the row loops built on them. Each file that Highway compiles once per
// instruction set includes this after highway.h, and it is compiled once for each (the toggle
// below is Highway's convention for per-target headers).
#if defined(PARITY_SIMD_VECTORS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef PARITY_SIMD_VECTORS_INL_H_
#undef PARITY_SIMD_VECTORS_INL_H_
#else
#define PARITY_SIMD_VECTORS_INL_H_
#endif

#include <hwy/cache_control.h>
#include <hwy/highway.h>
#include <hwy/contrib/math/math-inl.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <limits>
#include <type_traits>

HWY_BEFORE_NAMESPACE();
namespace parity::simd::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Runs body(offset, count) over whole vectors, then once over the tail as a part of a vector
// (load and store below), so that every element takes the same arithmetic whatever n is.
template <class D, class Body> HWY_INLINE void over_vectors(D d, std::size_t n, const Body& body) {
  const std::size_t lanes = hn::Lanes(d);
  std::size_t i = 0;
  for (; i + lanes <= n; i += lanes) body(i, lanes);
  if (i < n) body(i, n - i);
}

// A vector of lanes from p (count < Lanes: the rest zero) and its store back. AVX-512 loads and
// stores a part of a vector under a mask, touching only its lanes; elsewhere the part goes
// through a buffer.
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
constexpr bool kMaskedMemory = true;
#else
constexpr bool kMaskedMemory = false;
#endif
template <class D, typename T> HWY_INLINE hn::Vec<D> load(D d, const T* p, std::size_t count) {
  if (count == hn::Lanes(d)) return hn::LoadU(d, p);
  if constexpr (kMaskedMemory) return hn::MaskedLoad(hn::FirstN(d, count), d, p);
  constexpr std::size_t kMax = HWY_MAX_BYTES / sizeof(T);
  HWY_ALIGN T buffer[kMax] = {};
  std::memcpy(buffer, p, std::min(count, kMax) * sizeof(T));
  return hn::Load(d, buffer);
}
template <class D, typename T> HWY_INLINE void store(D d, hn::Vec<D> v, T* p, std::size_t count) {
  if (count == hn::Lanes(d)) return hn::StoreU(v, d, p);
  if constexpr (kMaskedMemory) return hn::BlendedStore(v, hn::FirstN(d, count), d, p);
  constexpr std::size_t kMax = HWY_MAX_BYTES / sizeof(T);
  HWY_ALIGN T buffer[kMax];
  hn::Store(v, d, buffer);
  std::memcpy(p, buffer, std::min(count, kMax) * sizeof(T));
}

// exp for float32 (parity's own; Highway's serves float64): x = n ln2 + r with n an integer and
// |r| <= ln2 / 2 (ln2 in two parts, so n ln2 is exact), exp(r) by a degree-6 polynomial fitted
// for relative error (7.4e-9 on that range) and evaluated by Horner's rule with fused
// multiply-adds, then times 2^n. Within 1 ulp of the exact value for every float32 with FMA,
// 1.01 without (correctness/test_simd.cpp samples 2^24 of them on every instruction set); x
// above 88.72 gives inf, below -103.97 0 (subnormals between, rounded once), a NaN quiet. The
// argument is clamped to [-104, 89] first, where n fits in a float's exponent twice over.
// AVX-512 scales by 2^n in one instruction (vscalefps); elsewhere 2^n is applied as two powers
// of two built from bits, 2^(n >> 1) exactly and then the rest, so that the one rounding is the
// same and every instruction set with FMA gives the same bits.
template <class D> HWY_INLINE hn::Vec<D> exp_f32(D d, hn::Vec<D> x) {
  static_assert(std::is_same_v<hn::TFromD<D>, float>);
  const auto lowest = hn::Set(d, -104.0f), highest = hn::Set(d, 89.0f);
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  constexpr bool kScalef = std::is_same_v<hn::Vec<D>, hn::Vec512<float>>;
#else
  constexpr bool kScalef = false;
#endif
  hn::Vec<D> clamped;
  if constexpr (kScalef)  // maxps and minps return their second operand where either is NaN: NaN stays
    clamped = hn::Vec<D>{_mm512_min_ps(highest.raw, _mm512_max_ps(lowest.raw, x.raw))};
  else
    clamped = hn::Min(hn::Max(x, lowest), highest);
  const auto n = hn::Round(hn::Mul(clamped, hn::Set(d, 1.44269504088896341f)));
  auto r = hn::MulAdd(n, hn::Set(d, -0.693145751953125f), clamped);  // ln2's top 16 bits: n ln2 exact
  r = hn::MulAdd(n, hn::Set(d, -1.428606765330187045e-6f), r);        // the rest of ln2
  auto p = hn::Set(d, 0.001390352612361312f);
  for (const float c : {0.008366251364350319f, 0.04166676849126816f, 0.1666654348373413f, 0.5f})
    p = hn::MulAdd(p, r, hn::Set(d, c));
#if HWY_NATIVE_FMA
  p = hn::MulAdd(hn::MulAdd(p, r, hn::Set(d, 1.0f)), r, hn::Set(d, 1.0f));
#else  // unfused: 1 + (r + r^2 p) rounds less than 1 + r (1 + r p)
  p = hn::Add(hn::Set(d, 1.0f), hn::Add(r, hn::Mul(hn::Mul(r, r), p)));
#endif
  if constexpr (kScalef) {
    return hn::Vec<D>{_mm512_scalef_ps(p.raw, n.raw)};
  } else {
    const hn::RebindToSigned<D> di;
    const auto whole = hn::ConvertTo(di, n), half = hn::ShiftRight<1>(whole), bias = hn::Set(di, 127);
    const auto first = hn::BitCast(d, hn::ShiftLeft<23>(hn::Add(half, bias)));
    const auto second = hn::BitCast(d, hn::ShiftLeft<23>(hn::Add(hn::Sub(whole, half), bias)));
    // A NaN comes out quiet (x + x), as vscalefps gives it: the same bits for NaNs too.
    return hn::IfThenElse(hn::IsNaN(x), hn::Add(x, x), hn::Mul(hn::Mul(p, first), second));
  }
}

// exp of either type: float32 by exp_f32; float64 by Highway's, whose valid range ends at 706,
// above which it is taken as inf (libm's is from 709.78: what it gives between is below 1e-305
// of a sum or quotient it enters).
template <class D> HWY_INLINE hn::Vec<D> exp_any(D d, hn::Vec<D> x) {
  if constexpr (std::is_same_v<hn::TFromD<D>, float>) {
    return exp_f32(d, x);
  } else {
    const auto limit = hn::Set(d, 706.0);
    return hn::IfThenElse(hn::Gt(x, limit), hn::Inf(d), hn::Exp(d, hn::Min(x, limit)));
  }
}

// ---- Rows: the blocked sum (simd.hpp): 16 partial sums, element j into partial j mod 16, held
// as 16 / Lanes vectors of at most 16 lanes; the partials then added pairwise.
constexpr std::size_t kPartials = 16;

// sum of term(d, i, count) over the row's vectors (count < Lanes only at the end; its lanes past
// count are not added).
template <typename T, class Term> HWY_INLINE T blocked_sum(std::size_t n, const Term& term) {
  const hn::CappedTag<T, kPartials> d;
  const std::size_t lanes = hn::Lanes(d), vectors = kPartials / lanes;
  HWY_ALIGN T partial[kPartials];
#if HWY_HAVE_SCALABLE  // sizeless vectors (SVE, RVV) cannot be held in an array: the partials in memory
  for (std::size_t k = 0; k < vectors; ++k) hn::Store(hn::Zero(d), d, partial + k * lanes);
  const auto add = [&](std::size_t k, hn::Vec<decltype(d)> v) HWY_ATTR {
    hn::Store(hn::Add(hn::Load(d, partial + k * lanes), v), d, partial + k * lanes);
  };
#else
  hn::Vec<decltype(d)> acc[kPartials];
  for (std::size_t k = 0; k < vectors; ++k) acc[k] = hn::Zero(d);
  const auto add = [&](std::size_t k, hn::Vec<decltype(d)> v) HWY_ATTR { acc[k] = hn::Add(acc[k], v); };
#endif
  std::size_t i = 0;
  for (; i + kPartials <= n; i += kPartials)
    for (std::size_t k = 0; k < vectors; ++k) add(k, term(d, i + k * lanes, lanes));
  for (std::size_t k = 0; k < vectors && i + k * lanes < n; ++k) {
    const std::size_t count = std::min(lanes, n - (i + k * lanes));
    add(k, hn::IfThenElseZero(hn::FirstN(d, count), term(d, i + k * lanes, count)));
  }
#if !HWY_HAVE_SCALABLE
  for (std::size_t k = 0; k < vectors; ++k) hn::Store(acc[k], d, partial + k * lanes);
#endif
  // The pairwise tree written out, so that its 15 additions stay in registers (a loop over the
  // array stores and reloads each level, which costs short rows more than their elements).
  static_assert(kPartials == 16);
  T pairs[8], fours[4];
  for (std::size_t j = 0; j < 8; ++j) pairs[j] = partial[2 * j] + partial[2 * j + 1];
  for (std::size_t j = 0; j < 4; ++j) fours[j] = pairs[2 * j] + pairs[2 * j + 1];
  return (fours[0] + fours[1]) + (fours[2] + fours[3]);
}

// Four running maxima over whole vectors (independent chains, so the loop runs at the loads'
// rate), the tail's lanes past n taken as -inf.
template <typename T> T RowMax(const T* x, std::size_t n) {
  const hn::ScalableTag<T> d;
  const std::size_t lanes = hn::Lanes(d);
  const auto lowest = hn::Set(d, -std::numeric_limits<T>::infinity());
  auto a0 = lowest, a1 = lowest, a2 = lowest, a3 = lowest;
  std::size_t i = 0;
  for (; i + 4 * lanes <= n; i += 4 * lanes) {
    a0 = hn::Max(a0, hn::LoadU(d, x + i));
    a1 = hn::Max(a1, hn::LoadU(d, x + i + lanes));
    a2 = hn::Max(a2, hn::LoadU(d, x + i + 2 * lanes));
    a3 = hn::Max(a3, hn::LoadU(d, x + i + 3 * lanes));
  }
  for (; i < n; i += lanes) {
    const std::size_t count = std::min(lanes, n - i);
    a0 = hn::Max(a0, hn::IfThenElse(hn::FirstN(d, count), load(d, x + i, count), lowest));
  }
  // The lanes' maximum by the target's reduction tree (one lane after another made a chain of
  // dependent steps that cost a short row more than its loads). A maximum is exact in any order
  // for numbers; a NaN may come out or be passed over, and +0 or -0 of a row of zeros, by where
  // they stand and the instruction set: a softmax or log-sum-exp of the row is NaN either way,
  // and x - (+0) equals x - (-0) (the callers').
  return hn::GetLane(hn::MaxOfLanes(d, hn::Max(hn::Max(a0, a1), hn::Max(a2, a3))));
}

template <typename T> T ExpSum(const T* x, std::size_t n, T shift, T* out, const T* next = nullptr) {
  return blocked_sum<T>(n, [&](auto d, std::size_t i, std::size_t count) {
    if (next) hwy::Prefetch(next + i);  // a vector's worth: at most a cache line
    const auto e = exp_any(d, hn::Sub(load(d, x + i, count), hn::Set(d, shift)));
    if (out) store(d, e, out + i, count);
    return e;
  });
}

template <typename T> T RowSum(const T* x, std::size_t n) {
  return blocked_sum<T>(n, [&](auto d, std::size_t i, std::size_t count) { return load(d, x + i, count); });
}

template <typename T> T RowDot(const T* a, const T* b, std::size_t n) {
  return blocked_sum<T>(n, [&](auto d, std::size_t i, std::size_t count) {
    return hn::Mul(load(d, a + i, count), load(d, b + i, count));
  });
}

template <typename T> void Scale(T* x, std::size_t n, T s) {
  const hn::ScalableTag<T> d;
  over_vectors(d, n, [&](std::size_t i, std::size_t count) {
    store(d, hn::Mul(load(d, x + i, count), hn::Set(d, s)), x + i, count);
  });
}

template <typename T> void SoftmaxBackwardApply(const T* dy, const T* y, T* dx, std::size_t n, T dot) {
  const hn::ScalableTag<T> d;
  over_vectors(d, n, [&](std::size_t i, std::size_t count) {
    store(d, hn::Mul(load(d, y + i, count), hn::Sub(load(d, dy + i, count), hn::Set(d, dot))), dx + i, count);
  });
}

}  // namespace parity::simd::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // PARITY_SIMD_VECTORS_INL_H_
