// float16 and bfloat16 storage types with conversions from float that round to nearest,
// ties to even, and keep NaN, infinity and subnormals (IEEE 754-2008 binary16; bfloat16 is
// the top half of a binary32).
#pragma once

#include <bit>
#include <cstdint>

namespace parity {

struct float16_t {
  std::uint16_t bits = 0;
};
struct bfloat16_t {
  std::uint16_t bits = 0;
};

inline float bf16_to_float(bfloat16_t v) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(v.bits) << 16);
}

inline bfloat16_t float_to_bf16(float f) {
  std::uint32_t u = std::bit_cast<std::uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) {  // NaN: keep sign, force a quiet mantissa bit
    return {static_cast<std::uint16_t>((u >> 16) | 0x0040u)};
  }
  // Round to nearest even: add 0x7fff plus the lowest kept bit, then truncate.
  u += 0x7fffu + ((u >> 16) & 1u);
  return {static_cast<std::uint16_t>(u >> 16)};
}

inline float half_to_float(float16_t v) {
  const std::uint32_t sign = static_cast<std::uint32_t>(v.bits & 0x8000u) << 16;
  const std::uint32_t exponent = (v.bits >> 10) & 0x1fu;
  std::uint32_t mantissa = v.bits & 0x3ffu;
  if (exponent == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
  if (exponent == 0) {
    if (mantissa == 0) return std::bit_cast<float>(sign);
    // Subnormal half: value = mantissa * 2^-24, exact in float.
    float magnitude = static_cast<float>(mantissa) * 0x1p-24f;
    return sign ? -magnitude : magnitude;
  }
  return std::bit_cast<float>(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

inline float16_t float_to_half(float f) {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(f);
  const std::uint16_t sign = static_cast<std::uint16_t>((u >> 16) & 0x8000u);
  const std::uint32_t magnitude = u & 0x7fffffffu;
  if (magnitude > 0x7f800000u) return {static_cast<std::uint16_t>(sign | 0x7e00u | ((magnitude >> 13) & 0x3ffu))};
  if (magnitude >= 0x477ff000u) return {static_cast<std::uint16_t>(sign | 0x7c00u)};  // rounds to inf
  if (magnitude < 0x38800000u) {
    // Result is subnormal or zero: scale so the half's last place is the float's unit,
    // and let the float addition round to nearest even.
    const float scaled = std::bit_cast<float>(magnitude) + 0.5f;  // 0.5 = 2^-1 aligns 2^-24 units
    return {static_cast<std::uint16_t>(sign | (std::bit_cast<std::uint32_t>(scaled) - 0x3f000000u))};
  }
  // Normal: rebias the exponent, round the 13 dropped mantissa bits to nearest even.
  std::uint32_t rebased = magnitude - (112u << 23);
  rebased += 0xfffu + ((rebased >> 13) & 1u);
  return {static_cast<std::uint16_t>(sign | (rebased >> 13))};
}

}  // namespace parity
