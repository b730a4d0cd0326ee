// The loops' shared per-target pieces (reference/simd): each file that Highway compiles once
// per instruction set includes this after highway.h, and it is compiled once for each (the
// toggle below is Highway's convention for per-target headers).
#if defined(PARITY_SIMD_VECTORS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef PARITY_SIMD_VECTORS_INL_H_
#undef PARITY_SIMD_VECTORS_INL_H_
#else
#define PARITY_SIMD_VECTORS_INL_H_
#endif

#include <hwy/highway.h>

#include <algorithm>
#include <cstddef>
#include <cstring>

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

}  // namespace parity::simd::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // PARITY_SIMD_VECTORS_INL_H_
