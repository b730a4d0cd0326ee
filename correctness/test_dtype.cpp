// float16/bfloat16 conversions against known bit patterns, and type names.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "reference/core/error.hpp"
#include "reference/core/dtype.hpp"

namespace parity {
namespace {

std::uint16_t half_bits(float f) { return float_to_half(f).bits; }
std::uint16_t bf16_bits(float f) { return float_to_bf16(f).bits; }

TEST(Half, KnownBitPatterns) {
  EXPECT_EQ(half_bits(1.0f), 0x3C00);
  EXPECT_EQ(half_bits(-2.0f), 0xC000);
  EXPECT_EQ(half_bits(65504.0f), 0x7BFF);            // largest finite
  EXPECT_EQ(half_bits(65519.0f), 0x7BFF);            // rounds down to it
  EXPECT_EQ(half_bits(65520.0f), 0x7C00);            // halfway to 2^16: ties to even = inf
  EXPECT_EQ(half_bits(std::numeric_limits<float>::infinity()), 0x7C00);
  EXPECT_EQ(half_bits(-std::numeric_limits<float>::infinity()), 0xFC00);
  EXPECT_EQ(half_bits(0x1p-14f), 0x0400);            // smallest normal
  EXPECT_EQ(half_bits(0x1p-24f), 0x0001);            // smallest subnormal
  EXPECT_EQ(half_bits(0x1p-25f), 0x0000);            // tie between 0 and 2^-24: even is 0
  EXPECT_EQ(half_bits(0x3p-25f), 0x0002);            // tie between 1 and 2 units: even is 2
  EXPECT_EQ(half_bits(0x1.8p-24f), 0x0002);          // 1.5 units rounds to 2
  EXPECT_EQ(half_bits(-0.0f), 0x8000);
  EXPECT_EQ(half_bits(2049.0f), 0x6800);             // tie between 2048 and 2050: even mantissa
  EXPECT_EQ(half_bits(2051.0f), 0x6802);             // tie between 2050 and 2052: 2052
  EXPECT_EQ(half_bits(0x1.ffcp-15f), 0x0400);        // subnormal rounding up into the normals
  EXPECT_EQ(half_bits(std::nanf("")) & 0x7C00, 0x7C00);
  EXPECT_NE(half_bits(std::nanf("")) & 0x03FF, 0);
}

TEST(Bfloat16, KnownBitPatterns) {
  EXPECT_EQ(bf16_bits(1.0f), 0x3F80);
  EXPECT_EQ(bf16_bits(-1.0f), 0xBF80);
  EXPECT_EQ(bf16_bits(1.0f + 0x1p-8f), 0x3F80);      // tie: stays at the even 1.0
  EXPECT_EQ(bf16_bits(1.0f + 0x3p-8f), 0x3F82);      // tie: rounds up to the even 1 + 2^-6
  EXPECT_EQ(bf16_bits(1.0f + 0x1p-7f), 0x3F81);      // exact
  EXPECT_EQ(bf16_bits(std::numeric_limits<float>::max()), 0x7F80);  // overflows to inf
  EXPECT_EQ(bf16_bits(0x1p-133f), 0x0001);           // subnormal
  const std::uint16_t nan = bf16_bits(std::nanf(""));
  EXPECT_EQ(nan & 0x7F80, 0x7F80);
  EXPECT_NE(nan & 0x007F, 0);
  // A NaN whose payload lives only in the low bits must not become infinity.
  EXPECT_NE(bf16_bits(std::bit_cast<float>(0x7F800001u)) & 0x007F, 0);
}

TEST(Half, EveryPatternRoundTrips) {
  for (std::uint32_t bits = 0; bits < 0x10000; ++bits) {
    const float16_t h{static_cast<std::uint16_t>(bits)};
    const float f = half_to_float(h);
    if (std::isnan(f)) continue;
    ASSERT_EQ(float_to_half(f).bits, bits) << std::hex << bits;
  }
}

TEST(Bfloat16, EveryPatternRoundTrips) {
  for (std::uint32_t bits = 0; bits < 0x10000; ++bits) {
    const bfloat16_t b{static_cast<std::uint16_t>(bits)};
    const float f = bf16_to_float(b);
    if (std::isnan(f)) continue;
    ASSERT_EQ(float_to_bf16(f).bits, bits) << std::hex << bits;
  }
}

TEST(Half, MatchesCorrectRoundingOnAGrid) {
  // The nearest half, found by search over neighbours, for many floats.
  for (int i = -190000; i <= 190000; i += 7) {  // |f| < 65504: all finite
    const float f = static_cast<float>(i) * 0.3337f;
    const std::uint16_t got = half_bits(f);
    const double exact = f;
    const double chosen = half_to_float({got});
    for (int d : {-1, 1}) {
      const double neighbour = half_to_float({static_cast<std::uint16_t>(got + d)});
      if (std::isfinite(neighbour)) {
        ASSERT_LE(std::fabs(chosen - exact), std::fabs(neighbour - exact)) << f;
      }
    }
  }
}

TEST(DataTypes, NamesSizesAndErrors) {
  for (DataType t : kAllDataTypes) EXPECT_EQ(parse_data_type(name_of(t)), t);
  EXPECT_EQ(parse_data_type("bf16"), DataType::bfloat16);
  EXPECT_EQ(size_of(DataType::bfloat16), 2u);
  EXPECT_EQ(size_of(DataType::int64), 8u);
  EXPECT_THROW(parse_data_type("float8"), UsageError);
  EXPECT_THROW(parse_reduce_op("mean"), UsageError);
  try {
    parse_data_type("float8");
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("bfloat16"), std::string::npos);  // lists the known ones
  }
  EXPECT_EQ(exact_integer_limit(DataType::bfloat16), 256);
  EXPECT_EQ(unit_roundoff(DataType::float32), std::ldexp(1.0, -24));
}

}  // namespace
}  // namespace parity
