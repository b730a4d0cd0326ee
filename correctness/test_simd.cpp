// The vectorised CPU loops (reference/simd) against their scalar references: the 16-bit
// conversions bit for bit over every 16-bit pattern and a sweep of float32 patterns with the
// rounding ties, subnormals, overflows and NaNs spelled out; GeLU the same at every array length
// (tails take the vectors' path) and equal to the scalar code within the two exps' error; Philox,
// dropout's mask and the initialisers equal to the scalar generator.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numbers>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "reference/core/half.hpp"
#include "reference/core/tolerance.hpp"
#include "reference/simd/simd.hpp"
#include "reference/tensor/random.hpp"
#include "reference/tensor/tensor.hpp"

#include <hwy/targets.h>

using namespace parity;

namespace {

// Float32 patterns: a stride through all 2^32, and the cases a rounding can get wrong.
std::vector<float> float_patterns() {
  std::vector<std::uint32_t> bits;
  for (std::uint64_t u = 0; u < (1ull << 32); u += 4099) bits.push_back(static_cast<std::uint32_t>(u));
  for (std::uint32_t sign : {0u, 0x80000000u})
    for (std::uint32_t u : {0u, 1u, 0x00800000u, 0x007fffffu, 0x33000000u, 0x33000001u, 0x337fffffu, 0x38800000u,
                            0x387fffffu, 0x38801000u, 0x38802000u, 0x3f801000u, 0x3f803000u, 0x3f808000u, 0x3f818000u,
                            0x3f80ffffu, 0x477fe000u, 0x477fefffu, 0x477ff000u, 0x7f7f8000u, 0x7f7fffffu, 0x7f800000u,
                            0x7f800001u, 0x7fc00000u, 0x7fa00000u, 0x7fffffffu, 0x7f802000u})
      bits.push_back(sign | u);
  std::vector<float> out;
  for (std::uint32_t u : bits) out.push_back(std::bit_cast<float>(u));
  return out;
}

TEST(Simd, SixteenBitPatternsWidenBitForBit) {
  std::vector<std::uint16_t> all(65536);
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = static_cast<std::uint16_t>(i);
  std::vector<float> half(all.size()), bf16(all.size());
  simd::half_to_float(all.data(), half.data(), all.size());
  simd::bf16_to_float(all.data(), bf16.data(), all.size());
  for (std::size_t i = 0; i < all.size(); ++i) {
    ASSERT_EQ(std::bit_cast<std::uint32_t>(half[i]), std::bit_cast<std::uint32_t>(half_to_float(float16_t{all[i]}))) << i;
    ASSERT_EQ(std::bit_cast<std::uint32_t>(bf16[i]), std::bit_cast<std::uint32_t>(bf16_to_float(bfloat16_t{all[i]}))) << i;
  }
}

// The 16-bit sums (a collective's native sum of 16-bit buffers) equal the scalar rule, widen both,
// add in float32, round once, bit for bit: every pattern a against partners b that hold each
// kind of value (zeros, subnormals, normals, the largest, infinities, quiet and signalling NaNs
// with payloads), in both orders, in place too. Which operand's payload a NaN sum carries is the
// hardware's and the compiler's choice (C++ may commute the addition), so a NaN sum is held to
// being a quiet NaN.
bool same_sum(std::uint16_t got, std::uint16_t want, bool bfloat) {
  const std::uint16_t exponent = bfloat ? 0x7f80 : 0x7c00, quiet = bfloat ? 0x0040 : 0x0200;
  const auto nan = [&](std::uint16_t v) { return (v & exponent) == exponent && (v & (exponent ^ 0x7fff)) != 0; };
  if (nan(want)) return nan(got) && (got & quiet) != 0;
  return got == want;
}

TEST(Simd, SixteenBitSumsAreTheScalarSumBitForBit) {
  const std::vector<std::uint16_t> partners = {0x0000, 0x8000, 0x0001, 0x03ff, 0x0400, 0x3c00, 0xbc00, 0x3c01, 0x7bff,
                                               0xfbff, 0x7c00, 0xfc00, 0x7e00, 0x7c01, 0xfd55, 0x7f80, 0x7f81, 0xffc1,
                                               0x4000, 0x1234, 0xc321};
  std::vector<std::uint16_t> all(65536);
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = static_cast<std::uint16_t>(i);
  for (std::uint16_t partner : partners) {
    const std::vector<std::uint16_t> b(all.size(), partner);
    std::vector<std::uint16_t> half_ab(all.size()), half_ba(all.size()), bf16_ab(all.size()), in_place(all);
    simd::half_add(all.data(), b.data(), half_ab.data(), all.size());
    simd::half_add(b.data(), all.data(), half_ba.data(), all.size());
    simd::bf16_add(all.data(), b.data(), bf16_ab.data(), all.size());
    simd::half_add(in_place.data(), b.data(), in_place.data(), all.size());
    for (std::size_t i = 0; i < all.size(); ++i) {
      const float x = half_to_float(float16_t{all[i]}), y = half_to_float(float16_t{partner});
      ASSERT_TRUE(same_sum(half_ab[i], float_to_half(x + y).bits, false)) << std::hex << all[i] << " + " << partner;
      ASSERT_TRUE(same_sum(half_ba[i], float_to_half(y + x).bits, false)) << std::hex << partner << " + " << all[i];
      ASSERT_EQ(in_place[i], half_ab[i]) << std::hex << all[i];
      const float u = bf16_to_float(bfloat16_t{all[i]}), w = bf16_to_float(bfloat16_t{partner});
      ASSERT_TRUE(same_sum(bf16_ab[i], float_to_bf16(u + w).bits, true)) << std::hex << all[i] << " + " << partner << " (bfloat16)";
    }
  }
}

// Past 8 MiB of output the widening copies store around the cache when the output is vector
// aligned: both paths, every pattern, a partial vector at the end.
TEST(Simd, LargeWideningCopiesAreBitForBit) {
  constexpr std::size_t kRepeats = 40, kTail = 3;  // 40 x 65,536 floats: 10 MiB
  std::vector<std::uint16_t> in(kRepeats * 65536 + kTail);
  for (std::size_t i = 0; i < in.size(); ++i) in[i] = static_cast<std::uint16_t>(i * 7);  // 7 is odd: all 2^16
  std::vector<float> out(in.size() + 64);
  float* aligned = out.data();
  while (reinterpret_cast<std::uintptr_t>(aligned) % 64 != 0) ++aligned;
  for (float* start : {aligned, aligned + 1}) {
    simd::half_to_float(in.data(), start, in.size());
    for (std::size_t i = 0; i < in.size(); ++i)
      ASSERT_EQ(std::bit_cast<std::uint32_t>(start[i]), std::bit_cast<std::uint32_t>(half_to_float(float16_t{in[i]})))
          << i;
    simd::bf16_to_float(in.data(), start, in.size());
    for (std::size_t i = 0; i < in.size(); ++i)
      ASSERT_EQ(std::bit_cast<std::uint32_t>(start[i]), std::bit_cast<std::uint32_t>(bf16_to_float(bfloat16_t{in[i]})))
          << i;
  }
}

TEST(Simd, Float32NarrowsBitForBit) {
  const std::vector<float> in = float_patterns();
  std::vector<std::uint16_t> half(in.size()), bf16(in.size());
  simd::float_to_half(in.data(), half.data(), in.size());
  simd::float_to_bf16(in.data(), bf16.data(), in.size());
  for (std::size_t i = 0; i < in.size(); ++i) {
    const std::uint32_t u = std::bit_cast<std::uint32_t>(in[i]);
    ASSERT_EQ(half[i], float_to_half(in[i]).bits) << std::hex << u;
    ASSERT_EQ(bf16[i], float_to_bf16(in[i]).bits) << std::hex << u;
  }
}

// Every length from 1 to 70 (past two AVX-512 vectors of float32) gives each element what the
// longest array gives it: tails are computed as whole vectors.
TEST(Simd, EveryLengthGivesEachElementTheSameResult) {
  std::vector<float> x(70), dy(70);
  for (std::size_t i = 0; i < x.size(); ++i) {
    x[i] = -6.0f + 0.173f * static_cast<float>(i);
    dy[i] = 0.5f - 0.031f * static_cast<float>(i);
  }
  std::vector<float> y(x.size()), dx(x.size());
  simd::gelu_forward(x.data(), y.data(), x.size());
  simd::gelu_backward(dy.data(), x.data(), dx.data(), x.size());
  std::vector<std::uint16_t> h(x.size()), b(x.size());
  simd::float_to_half(x.data(), h.data(), x.size());
  simd::float_to_bf16(x.data(), b.data(), x.size());
  for (std::size_t n = 1; n < x.size(); ++n) {
    std::vector<float> yn(n + 1, 7.0f), dxn(n + 1, 7.0f);
    std::vector<std::uint16_t> hn(n + 1, 7), bn(n + 1, 7);
    simd::gelu_forward(x.data(), yn.data(), n);
    simd::gelu_backward(dy.data(), x.data(), dxn.data(), n);
    simd::float_to_half(x.data(), hn.data(), n);
    simd::float_to_bf16(x.data(), bn.data(), n);
    for (std::size_t i = 0; i < n; ++i) {
      ASSERT_EQ(std::bit_cast<std::uint32_t>(yn[i]), std::bit_cast<std::uint32_t>(y[i])) << n << " " << i;
      ASSERT_EQ(std::bit_cast<std::uint32_t>(dxn[i]), std::bit_cast<std::uint32_t>(dx[i])) << n << " " << i;
      ASSERT_EQ(hn[i], h[i]);
      ASSERT_EQ(bn[i], b[i]);
    }
    // Nothing past the end is written.
    EXPECT_EQ(yn[n], 7.0f);
    EXPECT_EQ(dxn[n], 7.0f);
    EXPECT_EQ(hn[n], 7);
    EXPECT_EQ(bn[n], 7);
  }
}

// The instruction sets this CPU runs, each made the one dispatch chooses while f runs.
template <class F> void on_every_instruction_set(const F& f) {
  for (const std::int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    const std::string name = simd::target();
    EXPECT_EQ(name, hwy::TargetName(target));
    f(name, target);
    hwy::SetSupportedTargetsForTest(0);
  }
}

// Whether an instruction set has fused multiply-add (Highway's numbers order x86 sets best first).
bool has_fma(std::int64_t target) {
#if HWY_ARCH_X86
  return target <= HWY_AVX2;
#elif HWY_ARCH_ARM_A64
  return target != HWY_SCALAR && target != HWY_EMU128;
#else
  (void)target;
  return false;  // Armv7 NEON may lack it, WebAssembly does: held to the unfused bound
#endif
}

// simd::exp against exp taken in float64 (exact to far below a float32 ulp) over a stride of
// 2^24 float32 patterns and the edges, on every instruction set: within simd.hpp's bound of the
// exact value (1 ulp with FMA, 1.01 without), an ulp being the spacing of float32 at the
// correctly rounded result (2^-149 among subnormals and where it is 0); inf where the correctly
// rounded result is, 0 for -inf, a quiet NaN for a NaN.
TEST(Simd, Float32ExpIsWithinOneUlpOfExact) {
  std::vector<float> x;
  for (std::uint64_t u = 0; u < (1ull << 32); u += 256) x.push_back(std::bit_cast<float>(static_cast<std::uint32_t>(u + 17)));
  const float inf = std::numeric_limits<float>::infinity();
  for (float v : {0.0f, -0.0f, 1e-30f, -1e-30f, 1.0f, -1.0f, 88.72283f, 88.72284f, 88.7228394f, 89.0f, 100.0f, -87.33654f,
                  -87.3365479f, -103.972076f, -103.972084f, -104.0f, -150.0f, -1e30f, 1e30f, inf,
                  std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::max(),
                  std::numeric_limits<float>::lowest(), std::numeric_limits<float>::denorm_min(), -inf})
    x.push_back(v);
  std::vector<double> exact(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) exact[i] = std::exp(static_cast<double>(x[i]));
  on_every_instruction_set([&](const std::string& name, std::int64_t target) {
    const double bound = has_fma(target) ? 1.0 : 1.01;
    std::vector<float> y(x.size());
    simd::exp(x.data(), y.data(), x.size());
    double worst = 0;
    for (std::size_t i = 0; i < x.size(); ++i) {
      if (std::isnan(x[i])) {  // quiet, signalling ones too
        EXPECT_TRUE(std::isnan(y[i]) && (std::bit_cast<std::uint32_t>(y[i]) & 0x00400000u)) << name << " " << x[i];
        continue;
      }
      const float rounded = static_cast<float>(exact[i]);
      if (std::isinf(rounded)) {
        EXPECT_EQ(y[i], inf) << name << " " << x[i];
        continue;
      }
      // frexp gives 0 an exponent of 0: a result that rounds to 0 takes the subnormals' spacing.
      int exponent = std::numeric_limits<float>::min_exponent;
      if (rounded != 0) std::frexp(rounded, &exponent);
      const double ulp = std::ldexp(1.0, std::max(exponent, std::numeric_limits<float>::min_exponent) - 24);
      const double error = std::abs(static_cast<double>(y[i]) - exact[i]) / ulp;
      worst = std::max(worst, error);
      ASSERT_LE(error, bound) << name << ": exp(" << x[i] << ") = " << y[i] << ", exact " << exact[i];
    }
    EXPECT_EQ(y.back(), 0.0f) << name << ": exp(-inf)";
    EXPECT_GT(worst, 0.5) << "the sample reaches the rounding the bound is about";
    std::printf("simd::exp on %s: worst %.3f ulp over %zu float32 values\n", name.c_str(), worst, x.size());
  });
}

// simd::exp, GeLU and a softmax row give the same bits on every instruction set with fused
// multiply-add this CPU runs (AVX-512 scales by 2^n in one instruction, the others by two powers
// built from bits). Without FMA (x86 before AVX2) the polynomial rounds twice a step: within the
// bound above, not the same bits.
TEST(Simd, Float32ExpIsTheSameOnEveryInstructionSetWithFma) {
  std::vector<float> x;
  for (std::uint64_t u = 0; u < (1ull << 32); u += 65537) x.push_back(std::bit_cast<float>(static_cast<std::uint32_t>(u)));
  std::vector<float> row(1000);
  for (std::size_t i = 0; i < row.size(); ++i) row[i] = std::sin(0.37f * static_cast<float>(i)) * 30.0f;
  const auto run = [&] {
    std::vector<float> out(x.size() * 2 + row.size() + 1);
    simd::exp(x.data(), out.data(), x.size());
    simd::gelu_forward(x.data(), out.data() + x.size(), x.size());
    out.back() = simd::softmax_row(row.data(), out.data() + 2 * x.size(), row.size());
    return out;
  };
  const std::vector<float> best = run();
  std::size_t compared = 0;
  on_every_instruction_set([&](const std::string& name, std::int64_t target) {
    if (!has_fma(target)) return;
    ++compared;
    const std::vector<float> out = run();
    for (std::size_t i = 0; i < out.size(); ++i)  // NaNs too: signalling ones come out quiet on each
      ASSERT_EQ(std::bit_cast<std::uint32_t>(out[i]), std::bit_cast<std::uint32_t>(best[i])) << name << " element " << i;
  });
  if (compared < 2) GTEST_SKIP() << "one instruction set with FMA here: nothing to compare it with";
  std::printf("simd::exp: the same bits on %zu instruction sets with FMA\n", compared);
}

// GeLU against the scalar code it replaced (the same operations in the same order in T, libm's
// exp). The two may round exp's argument a = -2u differently (the vector code's multiplies and
// adds may be fused), each within 5 ulp of a (the constant's rounding, the cubic's two products,
// the sum and the two scales), and exp turns an error of r |a| in a into r |a| of its result:
// so within (4 + 10 |a|) ulp of T, 4 for the two exps (at most 1 ulp each, simd::exp or
// Highway's, and glibc's) and the division and products after them, or 4 ulp of T's smallest normal below that;
// the far left exactly 0, NaN kept, +inf kept.
template <typename T> T scalar_one_plus_exp(T x) {
  const T k = static_cast<T>(std::sqrt(2.0 / std::numbers::pi));
  return T(1) + std::exp(T(-2) * (k * (x + T(0.044715) * x * x * x)));
}

template <typename T> void expect_gelu_as_scalar() {
  const std::array far{T(-9), T(-12), T(-60), T(-1e4), T(12), T(60)};
  constexpr std::size_t kCount = 8001 + far.size();
  std::vector<T> x(kCount);
  for (std::size_t i = 0; i < 8001; ++i) x[i] = static_cast<T>(static_cast<int>(i) - 4000) * T(0.0025) + T(0.00031);
  std::copy(far.begin(), far.end(), x.begin() + 8001);
  std::vector<T> y(kCount), dx(kCount), dy(kCount, T(0.75));
  simd::gelu_forward(x.data(), y.data(), x.size());
  simd::gelu_backward(dy.data(), x.data(), dx.data(), x.size());
  const T k = static_cast<T>(std::sqrt(2.0 / std::numbers::pi)), ulp = std::numeric_limits<T>::epsilon();
  const T floor = 4 * ulp * std::numeric_limits<T>::min();
  for (std::size_t i = 0; i < x.size(); ++i) {
    const T v = x[i], s = T(1) / scalar_one_plus_exp(v);
    const T value = v / scalar_one_plus_exp(v);
    const T term = T(2) * v * s * (T(1) - s) * k * (T(1) + static_cast<T>(3 * 0.044715) * v * v);
    const T slope = T(0.75) * (s + term);
    const T a = std::abs(T(2) * k * (v + T(0.044715) * v * v * v)), bound = (4 + 10 * a) * ulp;
    EXPECT_LE(std::abs(y[i] - value), bound * std::abs(value) + floor) << v;
    // The slope's two terms cancel near its zero (x = -0.75): bounded by their magnitudes.
    EXPECT_LE(std::abs(dx[i] - slope), bound * T(0.75) * (std::abs(s) + std::abs(term)) + floor) << v;
    if (v <= -60) {
      EXPECT_EQ(y[i], T(0)) << v;
    }
  }
  const T special[] = {std::numeric_limits<T>::quiet_NaN(), std::numeric_limits<T>::infinity()};
  T out[2];
  simd::gelu_forward(special, out, 2);
  EXPECT_TRUE(std::isnan(out[0]));
  EXPECT_EQ(out[1], std::numeric_limits<T>::infinity());
}

TEST(Simd, GeluFloat32AsTheScalarCode) { expect_gelu_as_scalar<float>(); }
TEST(Simd, GeluFloat64AsTheScalarCode) { expect_gelu_as_scalar<double>(); }

// Column sums take each column's rows in order: bit for bit the scalar loop, at widths that end
// in a partial vector.
TEST(Simd, ColumnSumsAreTheScalarLoops) {
  for (std::size_t columns : {1, 7, 16, 37}) {
    const std::size_t rows = 23;
    std::vector<float> x(rows * columns);
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = std::sin(static_cast<float>(i) * 0.7f) * static_cast<float>(1 + i % 5);
    std::vector<float> acc(columns, 0.5f), want(columns, 0.5f);
    simd::accumulate_rows(x.data(), rows, columns, acc.data());
    for (std::size_t r = 0; r < rows; ++r)
      for (std::size_t j = 0; j < columns; ++j) want[j] += x[r * columns + j];
    for (std::size_t j = 0; j < columns; ++j) EXPECT_EQ(std::bit_cast<std::uint32_t>(acc[j]), std::bit_cast<std::uint32_t>(want[j]));
  }
}

// The blocked sum (simd.hpp) bit for bit against the order it states, written out here: element j
// into partial j mod 16, the partials added pairwise; at lengths below, at and above 16.
TEST(Simd, RowSumsTakeTheStatedBlockedOrder) {
  for (std::size_t n : {1, 5, 16, 17, 40, 100}) {
    std::vector<float> x(n);
    for (std::size_t i = 0; i < n; ++i) x[i] = 1.0f / static_cast<float>(3 + i) + static_cast<float>(i % 7) * 1e3f;
    float partial[16] = {};
    for (std::size_t i = 0; i < n; ++i) partial[i % 16] += x[i];
    for (std::size_t width = 16; width > 1; width /= 2)
      for (std::size_t j = 0; j < width / 2; ++j) partial[j] = partial[2 * j] + partial[2 * j + 1];
    EXPECT_EQ(std::bit_cast<std::uint32_t>(simd::row_sum(x.data(), n)), std::bit_cast<std::uint32_t>(partial[0])) << n;
    EXPECT_EQ(simd::row_max(x.data(), n), *std::max_element(x.begin(), x.end())) << n;
  }
}

// row_max finds the maximum wherever it stands: at every position of rows whose lengths end in
// each part of the vector loop (four vectors at a time, one at a time, a part of one), among
// negative values and -inf; a row of -inf (or none) gives -inf.
TEST(Simd, RowMaxFindsTheMaximumAtEveryPosition) {
  const float inf = std::numeric_limits<float>::infinity();
  for (std::size_t n : {1, 7, 16, 17, 63, 64, 65, 100, 130, 200}) {
    std::vector<float> x(n);
    for (std::size_t p = 0; p < n; ++p) {
      for (std::size_t i = 0; i < n; ++i) x[i] = i % 5 == 3 ? -inf : -1.0f - static_cast<float>(i % 11);
      x[p] = 0.5f;
      ASSERT_EQ(simd::row_max(x.data(), n), 0.5f) << "length " << n << ", maximum at " << p;
      std::vector<double> wide(x.begin(), x.end());
      ASSERT_EQ(simd::row_max(wide.data(), n), 0.5) << "length " << n << ", maximum at " << p;
    }
    std::fill(x.begin(), x.end(), -inf);
    EXPECT_EQ(simd::row_max(x.data(), n), -inf);
  }
  EXPECT_EQ(simd::row_max(static_cast<const float*>(nullptr), 0), -inf);
}

// scale_twice is two scale passes in one, bit for bit (each product rounded, never fused); the
// softmax of a row into another array is the in-place one, its log-sum-exp too. Lengths ending in
// a partial vector; nothing past the end written.
TEST(Simd, ScaleTwiceAndSoftmaxIntoAnotherRowAreTheTwoPassVersions) {
  for (std::size_t n : {1, 7, 16, 37, 100}) {
    std::vector<float> x(n + 1, 7.0f);
    for (std::size_t i = 0; i < n; ++i) x[i] = std::sin(static_cast<float>(i) * 1.3f) * 3.0f + 0.1f * static_cast<float>(i % 4);
    std::vector<float> once = x, twice = x;
    const float a = 1.0f / 3.0f, b = 1.0f / 7.0f;
    simd::scale_twice(once.data(), n, a, b);
    simd::scale(twice.data(), n, a);
    simd::scale(twice.data(), n, b);
    for (std::size_t i = 0; i <= n; ++i)
      EXPECT_EQ(std::bit_cast<std::uint32_t>(once[i]), std::bit_cast<std::uint32_t>(twice[i])) << n << " " << i;
    std::vector<float> in_place = x, into(n + 1, 7.0f);
    const float lse_in_place = simd::softmax_row(in_place.data(), in_place.data(), n);
    const float lse_into = simd::softmax_row(x.data(), into.data(), n);
    EXPECT_EQ(std::bit_cast<std::uint32_t>(lse_in_place), std::bit_cast<std::uint32_t>(lse_into)) << n;
    for (std::size_t i = 0; i <= n; ++i)
      EXPECT_EQ(std::bit_cast<std::uint32_t>(in_place[i]), std::bit_cast<std::uint32_t>(into[i])) << n << " " << i;
    EXPECT_EQ(x[1 % n], std::sin(static_cast<float>(1 % n) * 1.3f) * 3.0f + 0.1f * static_cast<float>((1 % n) % 4))
        << "the input is left as it was";
  }
}

// Philox word for word against reference/tensor/random.cpp's scalar rounds, counters crossing a
// 32-bit boundary, lengths ending in a partial vector.
TEST(Simd, PhiloxIsTheScalarGenerator) {
  for (std::uint64_t seed : {0ull, 2024ull, 0xFEDCBA9876543210ull})
    for (std::uint64_t stream : {0ull, 7ull, 0x123456789ABCDEFull})
      for (std::uint64_t first : {0ull, 1000ull, 0xFFFFFFFFull - 5}) {
        const std::size_t n = 21;
        std::vector<std::uint64_t> b01(n), b23(n);
        simd::philox_bits(seed, stream, first, n, b01.data(), b23.data());
        for (std::size_t j = 0; j < n; ++j) {
          const PhiloxCounter w = element_words(seed, stream, first + j);
          ASSERT_EQ(b01[j], (std::uint64_t{w[0]} << 32) | w[1]) << seed << " " << stream << " " << first + j;
          ASSERT_EQ(b23[j], (std::uint64_t{w[2]} << 32) | w[3]);
        }
      }
}

// uniform_open >= p exactly from the threshold on: the draw just below it is below p.
TEST(Simd, UniformThresholdIsExact) {
  for (double p : {1e-300, 1e-17, 0x1p-53, 0x1p-52, 0.1, 1.0 / 3, 0.5, 0.9, 1 - 0x1p-52, 1 - 0x1p-53}) {
    const std::uint64_t k = uniform_open_threshold(p);
    const auto draw = [](std::uint64_t m) { return (static_cast<double>(m) + 0.5) * 0x1p-52; };
    if (k < (std::uint64_t{1} << 52)) {
      EXPECT_GE(draw(k), p) << p;
    }
    if (k > 0) {
      EXPECT_LT(draw(k - 1), p) << p;
    }
  }
  EXPECT_EQ(uniform_open_threshold(0), 0u);
  EXPECT_EQ(uniform_open_threshold(1.5), std::uint64_t{1} << 52);
}

// Dropout's vectorised mask and scale against the scalar definition: uniform_open(seed, stream,
// first + i) >= p keeps x_i * scale (the product in the type), else 0.
template <typename T> void expect_dropout_as_scalar() {
  for (double p : {0.0, 0.1, 0.5, 0.9}) {
    const std::size_t n = 37;
    std::vector<T> x(n), y(n);
    for (std::size_t i = 0; i < n; ++i) x[i] = static_cast<T>(std::sin(0.3 * static_cast<double>(i)) * 3);
    const T scale = static_cast<T>(1.0 / (1.0 - p));
    simd::dropout(x.data(), y.data(), n, 99, 5, 123456789, uniform_open_threshold(p), scale);
    for (std::size_t i = 0; i < n; ++i) {
      const bool keep = p == 0 || uniform_open(99, 5, 123456789 + i) >= p;
      EXPECT_EQ(y[i], keep ? static_cast<T>(x[i] * scale) : T(0)) << p << " " << i;
    }
  }
}
TEST(Simd, DropoutIsTheScalarMask) {
  expect_dropout_as_scalar<float>();
  expect_dropout_as_scalar<double>();
}

// The mask keeps an element exactly when its 52 draw bits m (the top 52 of the first two Philox
// words, uniform_open = (m + 0.5) / 2^52) are at least keep_from: a draw equal to the threshold is
// kept, since uniform_open_threshold(p) is the first m whose draw is >= p. With the threshold set
// to one element's own m that element is kept, and with m + 1 it is dropped.
TEST(Simd, DropoutKeepsTheDrawEqualToTheThreshold) {
  const std::uint64_t seed = 7, stream = 3, first = 5000;
  const std::size_t n = 19;
  std::vector<std::uint64_t> m(n);
  for (std::size_t j = 0; j < n; ++j) {
    const PhiloxCounter w = element_words(seed, stream, first + j);
    m[j] = ((std::uint64_t{w[0]} << 32) | w[1]) >> 12;
  }
  std::vector<double> x(n), y(n);
  for (std::size_t j = 0; j < n; ++j) x[j] = 1.0 + static_cast<double>(j);
  std::vector<float> xf(x.begin(), x.end()), yf(n);
  for (std::size_t i : {0u, 6u, 18u}) {
    for (std::uint64_t keep_from : {m[i], m[i] + 1}) {
      simd::dropout(x.data(), y.data(), n, seed, stream, first, keep_from, 2.0);
      simd::dropout(xf.data(), yf.data(), n, seed, stream, first, keep_from, 2.0f);
      for (std::size_t j = 0; j < n; ++j) {
        const bool keep = m[j] >= keep_from;
        EXPECT_EQ(y[j], keep ? 2.0 * x[j] : 0.0) << "threshold of element " << i << ", element " << j;
        EXPECT_EQ(yf[j], keep ? 2.0f * xf[j] : 0.0f) << "threshold of element " << i << ", element " << j;
      }
      EXPECT_EQ(y[i] != 0, keep_from == m[i]) << i;
    }
  }
}

// softmax_row returns the row's log-sum-exp, log(sum_j exp(x_j)), the max added back to the
// shifted sum's log. Rows of one value v repeated n times: the shifted terms are exactly 1, their
// sum exactly n, so the result is v + log(n), two roundings (the log and the addition) away.
template <typename T> void expect_log_sum_exp_of_constant_rows() {
  const double u = std::numeric_limits<T>::epsilon() / 2;
  for (std::size_t n : {1, 4, 20, 37})
    for (double v : {0.0, 50.0, 1000.0, -300.0}) {
      std::vector<T> x(n, static_cast<T>(v)), y(n);
      const T lse = simd::softmax_row(x.data(), y.data(), n);
      const double want = v + std::log(static_cast<double>(n));
      EXPECT_LE(std::abs(static_cast<double>(lse) - want), tolerance::gamma(2, u) * std::abs(want) + 2 * u)
          << "n " << n << ", value " << v;
      for (std::size_t j = 0; j < n; ++j) EXPECT_EQ(y[j], T(1) / static_cast<T>(n)) << n;
    }
}
TEST(Simd, SoftmaxRowReturnsTheLogSumExp) {
  expect_log_sum_exp_of_constant_rows<float>();
  expect_log_sum_exp_of_constant_rows<double>();
}

// initialize and initialize_shard (vectorised draws) give every element Init::value's value.
TEST(Simd, InitialisationIsEveryElementsValue) {
  for (const Init& init : {Init::normal(0.5, 2), Init::uniform(-1, 3), Init::tokens(50)})
    for (DataType type : {DataType::float64, DataType::float32, DataType::bfloat16, DataType::int64}) {
      if ((init.kind == Init::Kind::token_ids) != (type == DataType::int64)) continue;
      Tensor t = Tensor::empty("init.check", {3, 700}, type, MemoryCategory::workspace);
      initialize(t, init, 31);
      const std::uint64_t id = tensor_id("init.check");
      for (std::int64_t i = 0; i < t.numel(); ++i) {
        Tensor one = Tensor::empty("one", {1}, type, MemoryCategory::workspace);
        one.set(0, init.value(31, id, static_cast<std::uint64_t>(i)));
        ASSERT_EQ(t.at(i), one.at(0)) << i;
      }
      // Columns 100 to 399 of rows 0 and 2: runs of consecutive global indices.
      ShardSpec spec({3, 700});
      spec.indices(0, {0, 2}).range(1, 100, 400);
      Tensor shard = Tensor::empty("init.shard", spec.shape(), type, MemoryCategory::workspace);
      initialize_shard(shard, init, 31, "init.check", spec);
      const Tensor want = slice(t, spec, "init.slice", MemoryCategory::workspace);
      for (std::int64_t i = 0; i < shard.numel(); ++i) ASSERT_EQ(shard.at(i), want.at(i)) << i;
    }
}

TEST(Simd, NamesTheInstructionSetItRuns) { EXPECT_FALSE(std::string(simd::target()).empty()); }

}  // namespace

namespace {

// One attention head written out in the order simd.hpp states, by std::fma: the scalar
// reference for attention_head_forward and attention_head_backward. q, k, v are rows `ld` apart
// (a fused projection's columns), out and g rows `ldo` apart.
template <typename T> struct Head {
  std::size_t t, hs, ld, ldo;
  std::vector<T> qkv, g;
  T scale;
  const T* q() const { return qkv.data(); }
  const T* k() const { return qkv.data() + hs; }
  const T* v() const { return qkv.data() + 2 * hs; }
};

template <typename T> Head<T> random_head(std::size_t t, std::size_t hs, std::uint64_t seed) {
  Head<T> h{t, hs, 3 * hs + 5, hs + 3, {}, {}, static_cast<T>(1.0 / std::sqrt(static_cast<double>(hs)))};
  h.qkv.resize(t * h.ld);
  h.g.resize(t * h.ldo);
  std::uint64_t state = seed;
  const auto next = [&] {  // a fixed sequence of values in [-2, 2)
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<T>(static_cast<double>(state >> 11) / 9007199254740992.0 * 4.0 - 2.0);
  };
  for (T& x : h.qkv) x = next();
  for (T& x : h.g) x = next();
  return h;
}

template <typename T> void forward_written_out(const Head<T>& h, bool causal, std::vector<T>& p, std::vector<T>& out) {
  p.assign(h.t * h.t, T(0));
  out.assign(h.t * h.ldo, T(-7));
  for (std::size_t i = 0; i < h.t; ++i) {
    const std::size_t n = causal ? i + 1 : h.t;
    T* row = p.data() + i * h.t;
    for (std::size_t j = 0; j < n; ++j) {
      T acc = 0;
      for (std::size_t c = 0; c < h.hs; ++c) acc = std::fma(h.q()[i * h.ld + c], h.k()[j * h.ld + c], acc);
      row[j] = acc * h.scale;
    }
    simd::softmax_row(row, row, n);
    for (std::size_t c = 0; c < h.hs; ++c) {  // over every key: a masked one adds an exact zero
      T acc = 0;
      for (std::size_t j = 0; j < h.t; ++j) acc = std::fma(row[j], h.v()[j * h.ld + c], acc);
      out[i * h.ldo + c] = acc;
    }
  }
}

// dq, dk, dv in one buffer laid out as qkv, every product's sum over the whole square: a term of
// zero probability adds an exact zero (the kernel skips it), so the bits are the kernel's but for
// the sign of a zero. The row dot product is row_dot's blocked sum over the row's live keys, up
// to its last non-zero probability, as the kernel states it (where its last partial vector ends
// moves its roundings).
template <typename T> std::vector<T> backward_written_out(const Head<T>& h, const std::vector<T>& p) {
  const std::size_t t = h.t;
  std::vector<T> ds(t * t);
  for (std::size_t i = 0; i < t; ++i) {
    T* row = ds.data() + i * t;
    for (std::size_t j = 0; j < t; ++j) {
      T acc = 0;
      for (std::size_t c = 0; c < h.hs; ++c) acc = std::fma(h.g[i * h.ldo + c], h.v()[j * h.ld + c], acc);
      row[j] = acc;
    }
    std::size_t live = t;
    while (live > 0 && p[i * t + live - 1] == T(0)) --live;
    const T dot = simd::row_dot(row, p.data() + i * t, live);
    for (std::size_t j = 0; j < t; ++j) row[j] = (p[i * t + j] * (row[j] - dot)) * h.scale;
  }
  std::vector<T> d(t * h.ld, std::numeric_limits<T>::quiet_NaN());
  for (std::size_t c = 0; c < h.hs; ++c)
    for (std::size_t r = 0; r < t; ++r) {
      T dq = 0, dk = 0, dv = 0;
      for (std::size_t j = 0; j < t; ++j) dq = std::fma(ds[r * t + j], h.k()[j * h.ld + c], dq);
      for (std::size_t i = 0; i < t; ++i) {
        dk = std::fma(ds[i * t + r], h.q()[i * h.ld + c], dk);
        dv = std::fma(p[i * t + r], h.g[i * h.ldo + c], dv);
      }
      d[r * h.ld + c] = dq;
      d[r * h.ld + h.hs + c] = dk;
      d[r * h.ld + 2 * h.hs + c] = dv;
    }
  return d;
}

// The same bits (NaN where a NaN is wanted, a zero of either sign for a zero) with fused
// multiply-add; without it (each product rounded before its sum) within `unfused` of the largest
// wanted magnitude.
template <typename T>
void expect_as_written_out(const std::vector<T>& got, const std::vector<T>& want, bool fma, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  const double unfused = std::is_same_v<T, float> ? 1e-4 : 1e-12;
  double largest = 0;
  for (const T w : want)
    if (!std::isnan(w)) largest = std::max(largest, std::abs(static_cast<double>(w)));
  std::size_t differ = 0, first = got.size();
  for (std::size_t i = 0; i < got.size(); ++i) {
    const bool same = std::isnan(want[i]) ? std::isnan(got[i])
                      : fma ? (std::memcmp(&got[i], &want[i], sizeof(T)) == 0 || (got[i] == 0 && want[i] == 0))
                            : std::abs(static_cast<double>(got[i]) - want[i]) <= unfused * largest;
    if (!same && differ++ == 0) first = i;
  }
  EXPECT_EQ(differ, 0u) << what << ": first at " << first << " (" << got[first] << " against " << want[first] << ")";
}

// Sizes at, below and above a vector, four rows and two vectors (the kernels' blocks), head
// sizes that leave a part of a vector; causal and not; on every instruction set (the same bits
// on those with FMA).
template <typename T> void expect_head_as_written_out() {
  on_every_instruction_set([&](const std::string& name, std::int64_t target) {
    const bool fma = has_fma(target);
    for (const auto& [t, hs] : std::vector<std::pair<std::size_t, std::size_t>>{
             {1, 1}, {3, 5}, {5, 16}, {17, 3}, {33, 7}, {64, 16}, {70, 24}}) {
      const Head<T> h = random_head<T>(t, hs, 11 * t + hs);
      for (const bool causal : {true, false}) {
        const std::string what = name + " T=" + std::to_string(t) + " hs=" + std::to_string(hs) +
                                 (causal ? " causal" : " full");
        std::vector<T> want_p, want_out, p(t * t, T(-7)), out(t * h.ldo, T(-7));
        forward_written_out(h, causal, want_p, want_out);
        simd::attention_head_forward(h.q(), h.k(), h.v(), h.ld, p.data(), out.data(), h.ldo, t, hs, h.scale, causal);
        expect_as_written_out(p, want_p, fma, what + " probabilities");
        expect_as_written_out(out, want_out, fma, what + " output");  // the -7s between rows unwritten
        // Backward from these probabilities, and from ones with zeros scattered at the ends of
        // rows and one row all zeros (a row's live keys then end early, or there are none, and
        // the keys' first live queries move).
        std::vector<T> holes = want_p;
        for (std::size_t i = 0; i < t; ++i)
          for (std::size_t j = t - (i * 7) % (t / 2 + 1); j < t; ++j) holes[i * t + j] = T(0);
        std::fill(holes.begin() + static_cast<std::ptrdiff_t>(t / 2 * t), holes.begin() + static_cast<std::ptrdiff_t>(t / 2 * t + t), T(0));
        for (const std::vector<T>* probs : {&want_p, &holes}) {
          std::vector<T> d(t * h.ld, std::numeric_limits<T>::quiet_NaN());  // the NaNs between rows unwritten
          simd::attention_head_backward(h.q(), h.k(), h.v(), h.ld, probs->data(), h.g.data(), h.ldo, d.data(),
                                        d.data() + hs, d.data() + 2 * hs, t, hs, h.scale);
          expect_as_written_out(d, backward_written_out(h, *probs), fma,
                                what + (probs == &holes ? " gradients, zeros at rows' ends" : " gradients"));
        }
      }
    }
  });
}

}  // namespace

TEST(Simd, AttentionHeadFloat32IsItsStatedOrder) { expect_head_as_written_out<float>(); }
TEST(Simd, AttentionHeadFloat64IsItsStatedOrder) { expect_head_as_written_out<double>(); }

// A small product as simd.hpp writes it out: each element its k products in order of the index
// by fused multiply-adds from zero (a product then a sum where the instruction set has no FMA),
// then added to c's value when accumulating, or to its column's bias; either operand transposed,
// rows and lengths that leave a tile of rows or a panel of columns part-filled, on every
// instruction set (the same bits on those with FMA). An x86 set with AVX-512 computes every one;
// the others decline, as do shapes past the stated sizes, leaving c as it was.
TEST(Simd, SmallProductsAreTheirStatedOrder) {
  struct Shape {
    std::size_t m, n, k;
  };
  std::uint64_t state = 5;
  const auto next = [&] {  // a fixed sequence of values in [-2, 2)
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<float>(static_cast<double>(state >> 11) / 9007199254740992.0 * 4.0 - 2.0);
  };
  on_every_instruction_set([&](const std::string& name, std::int64_t target) {
    const bool fma = has_fma(target);
    const bool wide = HWY_ARCH_X86 && name.rfind("AVX3", 0) == 0;  // AVX3, AVX3_DL, AVX3_ZEN4, ...
    for (const Shape& s : {Shape{1, 16, 1}, Shape{7, 48, 5}, Shape{13, 64, 64}, Shape{6, 80, 33}, Shape{50, 192, 17},
                           Shape{9, 256, 512}, Shape{256, 32, 512}})
      for (const bool ta : {false, true})
        for (const bool tb : {false, true})
          for (const int mode : {0, 1, 2}) {  // overwrite, accumulate, add a bias row
            const bool accumulate = mode == 1;
            // Stored with rows 3 longer than the matrix's, c with 5: the gaps are not read or written.
            const std::size_t lda = (ta ? s.m : s.k) + 3, ldb = (tb ? s.k : s.n) + 3, ldc = s.n + 5;
            std::vector<float> a((ta ? s.k : s.m) * lda), b((tb ? s.n : s.k) * ldb), c(s.m * ldc), bias(s.n);
            for (float& x : a) x = next();
            for (float& x : b) x = next();
            for (float& x : c) x = next();
            for (float& x : bias) x = next();
            std::vector<float> want = c;
            for (std::size_t i = 0; i < s.m; ++i)
              for (std::size_t j = 0; j < s.n; ++j) {
                float sum = 0;
                for (std::size_t p = 0; p < s.k; ++p) {
                  const float x = ta ? a[p * lda + i] : a[i * lda + p], y = tb ? b[j * ldb + p] : b[p * ldb + j];
                  sum = fma ? std::fma(x, y, sum) : x * y + sum;
                }
                want[i * ldc + j] = mode == 1 ? want[i * ldc + j] + sum : mode == 2 ? bias[j] + sum : sum;
              }
            std::vector<float> got = c;
            const std::string what = name + " " + std::to_string(s.m) + "x" + std::to_string(s.n) + "x" +
                                     std::to_string(s.k) + (ta ? " a^T" : "") + (tb ? " b^T" : "") +
                                     (mode == 1 ? " accumulating" : mode == 2 ? " with a bias" : "");
            const bool computed = simd::small_gemm(ta, tb, s.m, s.n, s.k, a.data(), lda, b.data(), ldb, accumulate,
                                                   got.data(), ldc, mode == 2 ? bias.data() : nullptr);
            EXPECT_EQ(computed, wide) << what;
            if (computed)
              expect_as_written_out(got, want, fma, what);
            else
              EXPECT_EQ(got, c) << what << ": declined, yet c changed";
          }
    // Past its sizes: declined, c untouched.
    for (const Shape& s : {Shape{4, 20, 8}, Shape{4, 64, simd::kSmallGemmDepth + 1},
                           Shape{simd::kSmallGemmLeft / 64 + 1, 64, 64}, Shape{4, simd::kSmallGemmColumns + 16, 8}}) {
      std::vector<float> big_a(s.m * s.k, 1.f), big_b(s.k * s.n, 1.f), out(s.m * s.n, 3.f);
      EXPECT_FALSE(simd::small_gemm(false, false, s.m, s.n, s.k, big_a.data(), s.k, big_b.data(), s.n, false, out.data(), s.n))
          << name << " " << s.m << "x" << s.n << "x" << s.k;
      EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](float x) { return x == 3.f; })) << name;
    }
  });
}
