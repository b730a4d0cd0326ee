// Philox 4x32-10 and dropout's mask, vectorised (see simd.hpp). Highway compiles the per-target
// part once for each instruction set it targets (foreach_target.h re-includes this file), and the
// dispatch part once.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "reference/simd/random.cpp"
#include <hwy/foreach_target.h>  // must come before highway.h

#include "reference/simd/simd.hpp"

#include <hwy/highway.h>

#include "reference/simd/vectors-inl.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>

HWY_BEFORE_NAMESPACE();
namespace parity::simd::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// ---- Philox 4x32-10, a counter per 64-bit lane, each 32-bit word in the low half of a lane.
struct PhiloxKeys {
  std::uint32_t k0[10], k1[10];  // the key at each round (the Weyl sequence)
};
inline PhiloxKeys philox_keys(std::uint64_t seed) {
  PhiloxKeys k{};
  k.k0[0] = static_cast<std::uint32_t>(seed);
  k.k1[0] = static_cast<std::uint32_t>(seed >> 32);
  for (int r = 1; r < 10; ++r) {
    k.k0[r] = k.k0[r - 1] + 0x9E3779B9u;
    k.k1[r] = k.k1[r - 1] + 0xBB67AE85u;
  }
  return k;
}

// The four words of counters first + i + lane (lanes of d), as (w0 << 32 | w1, w2 << 32 | w3).
#if HWY_TARGET == HWY_SCALAR
// One lane: the scalar rounds (64-bit lanes do not split into 32-bit ones here).
template <class D>
HWY_INLINE void philox_lanes(D d, const PhiloxKeys& k, std::uint64_t stream, std::uint64_t counter, hn::Vec<D>& bits01,
                             hn::Vec<D>& bits23) {
  std::uint32_t c[4] = {static_cast<std::uint32_t>(counter), static_cast<std::uint32_t>(counter >> 32),
                        static_cast<std::uint32_t>(stream), static_cast<std::uint32_t>(stream >> 32)};
  for (int r = 0; r < 10; ++r) {
    const std::uint64_t p0 = std::uint64_t{0xD2511F53u} * c[0], p1 = std::uint64_t{0xCD9E8D57u} * c[2];
    const std::uint32_t next[4] = {static_cast<std::uint32_t>(p1 >> 32) ^ c[1] ^ k.k0[r], static_cast<std::uint32_t>(p1),
                                   static_cast<std::uint32_t>(p0 >> 32) ^ c[3] ^ k.k1[r], static_cast<std::uint32_t>(p0)};
    std::copy(next, next + 4, c);
  }
  bits01 = hn::Set(d, (std::uint64_t{c[0]} << 32) | c[1]);
  bits23 = hn::Set(d, (std::uint64_t{c[2]} << 32) | c[3]);
}
#else
template <class D>
HWY_INLINE void philox_lanes(D d, const PhiloxKeys& k, std::uint64_t stream, std::uint64_t counter, hn::Vec<D>& bits01,
                             hn::Vec<D>& bits23) {
  const hn::Repartition<std::uint32_t, D> d32;
  const auto low = hn::Set(d, 0xFFFFFFFFull);
  const auto m0 = hn::BitCast(d32, hn::Set(d, 0xD2511F53ull)), m1 = hn::BitCast(d32, hn::Set(d, 0xCD9E8D57ull));
  const auto index = hn::Add(hn::Set(d, counter), hn::Iota(d, 0));
  auto c0 = hn::And(index, low), c1 = hn::ShiftRight<32>(index);
  auto c2 = hn::Set(d, stream & 0xFFFFFFFFull), c3 = hn::Set(d, stream >> 32);
  for (int r = 0; r < 10; ++r) {
    const auto p0 = hn::MulEven(hn::BitCast(d32, c0), m0), p1 = hn::MulEven(hn::BitCast(d32, c2), m1);
    const auto n0 = hn::Xor(hn::Xor(hn::ShiftRight<32>(p1), c1), hn::Set(d, std::uint64_t{k.k0[r]}));
    const auto n2 = hn::Xor(hn::Xor(hn::ShiftRight<32>(p0), c3), hn::Set(d, std::uint64_t{k.k1[r]}));
    c1 = hn::And(p1, low);
    c3 = hn::And(p0, low);
    c0 = n0;
    c2 = n2;
  }
  bits01 = hn::Or(hn::ShiftLeft<32>(c0), c1);
  bits23 = hn::Or(hn::ShiftLeft<32>(c2), c3);
}
#endif

void PhiloxBits(std::uint64_t seed, std::uint64_t stream, std::uint64_t first, std::size_t n, std::uint64_t* bits01,
                std::uint64_t* bits23) {
  const hn::ScalableTag<std::uint64_t> d;
  const PhiloxKeys k = philox_keys(seed);
  over_vectors(d, n, [&](std::size_t i, std::size_t count) {
    hn::Vec<decltype(d)> b01, b23;
    philox_lanes(d, k, stream, first + i, b01, b23);
    store(d, b01, bits01 + i, count);
    if (bits23) store(d, b23, bits23 + i, count);
  });
}

// Dropout a vector of 64-bit lanes at a time; float32 data through float64 lanes (the product of
// two float32 values is exact in float64, so rounding it to float32 gives the float32 product).
template <typename T>
void Dropout(const T* in, T* out, std::size_t n, std::uint64_t seed, std::uint64_t stream, std::uint64_t first,
             std::uint64_t keep_from, T scale) {
  const hn::ScalableTag<std::uint64_t> du;
  const hn::Rebind<double, decltype(du)> dd;
  const hn::Rebind<std::int64_t, decltype(du)> di;
  const hn::Rebind<T, decltype(du)> dt;
  const PhiloxKeys k = philox_keys(seed);
  const auto threshold = hn::Set(di, static_cast<std::int64_t>(keep_from));
  const auto factor = hn::Set(dd, static_cast<double>(scale));
  over_vectors(du, n, [&](std::size_t i, std::size_t count) {
    hn::Vec<decltype(du)> b01, b23;
    philox_lanes(du, k, stream, first + i, b01, b23);
    // Both sides below 2^53: a signed comparison is the unsigned one.
    const auto keep = hn::RebindMask(dd, hn::Not(hn::Lt(hn::BitCast(di, hn::ShiftRight<12>(b01)), threshold)));
    const auto x = load(dt, in + i, count);
    if constexpr (sizeof(T) == 8) {
      store(dt, hn::IfThenElseZero(keep, hn::Mul(x, factor)), out + i, count);
    } else {
      const auto product = hn::Mul(hn::PromoteTo(dd, x), factor);
      store(dt, hn::DemoteTo(dt, hn::IfThenElseZero(keep, product)), out + i, count);
    }
  });
}
void DropoutF32(const float* in, float* out, std::size_t n, std::uint64_t seed, std::uint64_t stream, std::uint64_t first,
                std::uint64_t keep_from, float scale) {
  Dropout(in, out, n, seed, stream, first, keep_from, scale);
}
void DropoutF64(const double* in, double* out, std::size_t n, std::uint64_t seed, std::uint64_t stream,
                std::uint64_t first, std::uint64_t keep_from, double scale) {
  Dropout(in, out, n, seed, stream, first, keep_from, scale);
}

}  // namespace parity::simd::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE

namespace parity::simd {

HWY_EXPORT(PhiloxBits);
HWY_EXPORT(DropoutF32);
HWY_EXPORT(DropoutF64);

void philox_bits(std::uint64_t seed, std::uint64_t stream, std::uint64_t first, std::size_t n, std::uint64_t* bits01,
                 std::uint64_t* bits23) {
  HWY_DYNAMIC_DISPATCH(PhiloxBits)(seed, stream, first, n, bits01, bits23);
}
void dropout(const float* in, float* out, std::size_t n, std::uint64_t seed, std::uint64_t stream, std::uint64_t first,
             std::uint64_t keep_from, float scale) {
  HWY_DYNAMIC_DISPATCH(DropoutF32)(in, out, n, seed, stream, first, keep_from, scale);
}
void dropout(const double* in, double* out, std::size_t n, std::uint64_t seed, std::uint64_t stream,
             std::uint64_t first, std::uint64_t keep_from, double scale) {
  HWY_DYNAMIC_DISPATCH(DropoutF64)(in, out, n, seed, stream, first, keep_from, scale);
}

}  // namespace parity::simd
#endif
