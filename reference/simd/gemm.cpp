// Products of small float32 matrices on the CPU (see simd.hpp: small_gemm). A BLAS library packs
// both operands into its own layout on every call and zeroes the output before a product that
// overwrites it; for the matrices of a small model (a few hundred rows, K up to 512) that is a
// tenth of the product's time, which these loops do not spend: the right operand's rows are read
// where they lie (copied once, transposed, when the product takes its transpose) and the left
// operand's elements are broadcast from where they lie, a tile of rows against up to four vectors
// of columns at a time, every output element one lane of one fused multiply-add chain.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "reference/simd/gemm.cpp"
#include <hwy/foreach_target.h>  // must come before highway.h

#include "reference/simd/simd.hpp"

#include <hwy/highway.h>

#include <algorithm>
#include <cstddef>
#include <vector>

HWY_BEFORE_NAMESPACE();
namespace parity::simd::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// The tiles below hold up to 24 accumulators beside their panel's vectors: AVX-512's 32
// registers (with AVX2's 16 they spill, and a BLAS library's kernels are faster). Other targets
// decline every product.
#if HWY_ARCH_X86 && HWY_MAX_BYTES >= 64

// R rows of the product against V vectors of columns: row r's a elements are a[r * row + k * step]
// (row-major a: row = lda, step = 1; a transposed: row = 1, step = lda), b's rows ldb apart. Each
// output element is its products summed in order of k by fused multiply-adds from zero, then
// added to what c held when accumulating (c + sum, as a BLAS library's kernel adds its sum), or
// to its column's bias where bias is not null.
template <int R, int V, class D>
HWY_INLINE void tile(D d, std::size_t depth, const float* a, std::size_t row, std::size_t step, const float* b,
                     std::size_t ldb, float* c, std::size_t ldc, bool accumulate, const float* bias) {
  const std::size_t lanes = hn::Lanes(d);
  hn::Vec<D> acc[R][V];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) acc[r][v] = hn::Zero(d);
  for (std::size_t k = 0; k < depth; ++k) {
    hn::Vec<D> x[V];
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) x[v] = hn::LoadU(d, b + k * ldb + v * lanes);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const auto w = hn::Set(d, a[r * row + k * step]);
#pragma GCC unroll 4
      for (int v = 0; v < V; ++v) acc[r][v] = hn::MulAdd(w, x[v], acc[r][v]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) {
      float* out = c + r * ldc + v * lanes;
      hn::StoreU(accumulate ? hn::Add(hn::LoadU(d, out), acc[r][v])
                 : bias     ? hn::Add(hn::LoadU(d, bias + v * lanes), acc[r][v])
                            : acc[r][v],
                 d, out);
    }
}

// Every row of the product against one panel of V vectors of columns: tiles of kRows rows (as
// many as AVX-512's registers hold beside the panel's vectors), then the rows left one at a time.
template <int V, class D>
void panel(D d, std::size_t m, std::size_t depth, const float* a, std::size_t row, std::size_t step, const float* b,
           std::size_t ldb, float* c, std::size_t ldc, bool accumulate, const float* bias) {
  constexpr int kRows = V == 4 ? 6 : 8;
  std::size_t i = 0;
  for (; i + kRows <= m; i += kRows)
    tile<kRows, V>(d, depth, a + i * row, row, step, b, ldb, c + i * ldc, ldc, accumulate, bias);
  for (; i < m; ++i) tile<1, V>(d, depth, a + i * row, row, step, b, ldb, c + i * ldc, ldc, accumulate, bias);
}

// The float32 lanes of a vector where tiles of them are made for it (16), else 0.
std::size_t SmallGemmLanes() {
  const hn::ScalableTag<float> d;
  return hn::Lanes(d) >= 16 ? hn::Lanes(d) : 0;
}

bool SmallGemmF32(bool transpose_a, bool transpose_b, std::size_t m, std::size_t n, std::size_t k, const float* a,
                  std::size_t lda, const float* b, std::size_t ldb, bool accumulate, float* c, std::size_t ldc,
                  const float* bias) {
  const hn::ScalableTag<float> d;
  const std::size_t lanes = hn::Lanes(d);
  if (lanes < 16 || n % lanes != 0) return false;
  // op(b) as k rows of n: b itself, or b transposed into a buffer kept for the thread's life
  // (outside the memory tracker's categories, as a BLAS library's packing buffers are).
  const float* rows = b;
  std::size_t ld = ldb;
  if (transpose_b) {
    thread_local std::vector<float> transposed;
    if (transposed.size() < k * n) transposed.resize(k * n);
    // In blocks of 16 x 16, so that the lines read and the lines written both stay in cache.
    float* HWY_RESTRICT to = transposed.data();
    for (std::size_t j0 = 0; j0 < n; j0 += 16)
      for (std::size_t p0 = 0; p0 < k; p0 += 16)
        for (std::size_t p = p0; p < std::min(k, p0 + 16); ++p)
          for (std::size_t j = j0; j < std::min(n, j0 + 16); ++j) to[p * n + j] = b[j * ldb + p];
    rows = to;
    ld = n;
  }
  const std::size_t row = transpose_a ? 1 : lda, step = transpose_a ? lda : 1;
  for (std::size_t j = 0; j < n; j += 4 * lanes) {
    const float* columns_bias = bias ? bias + j : nullptr;
    switch (std::min<std::size_t>(4, (n - j) / lanes)) {
      case 4: panel<4>(d, m, k, a, row, step, rows + j, ld, c + j, ldc, accumulate, columns_bias); break;
      case 3: panel<3>(d, m, k, a, row, step, rows + j, ld, c + j, ldc, accumulate, columns_bias); break;
      case 2: panel<2>(d, m, k, a, row, step, rows + j, ld, c + j, ldc, accumulate, columns_bias); break;
      default: panel<1>(d, m, k, a, row, step, rows + j, ld, c + j, ldc, accumulate, columns_bias); break;
    }
  }
  return true;
}

#else

std::size_t SmallGemmLanes() { return 0; }
bool SmallGemmF32(bool, bool, std::size_t, std::size_t, std::size_t, const float*, std::size_t, const float*, std::size_t,
                  bool, float*, std::size_t, const float*) {
  return false;
}

#endif

}  // namespace parity::simd::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE

namespace parity::simd {

HWY_EXPORT(SmallGemmLanes);
HWY_EXPORT(SmallGemmF32);

bool small_gemm_takes(std::size_t m, std::size_t n, std::size_t k) {
  // What stays in a core's own caches: the left operand (re-read once per panel of columns) and
  // a panel of the right one; past that a BLAS library's blocking wins.
  if (m == 0 || n == 0 || k == 0 || k > kSmallGemmDepth || m * k > kSmallGemmLeft || n > kSmallGemmColumns) return false;
  const std::size_t lanes = HWY_DYNAMIC_DISPATCH(SmallGemmLanes)();
  return lanes != 0 && n % lanes == 0;
}

bool small_gemm(bool transpose_a, bool transpose_b, std::size_t m, std::size_t n, std::size_t k, const float* a,
                std::size_t lda, const float* b, std::size_t ldb, bool accumulate, float* c, std::size_t ldc,
                const float* bias) {
  return small_gemm_takes(m, n, k) && HWY_DYNAMIC_DISPATCH(SmallGemmF32)(transpose_a, transpose_b, m, n, k, a, lda, b, ldb,
                                                                         accumulate && !bias, c, ldc, bias);
}

}  // namespace parity::simd
#endif
