// One attention head on the CPU, vectorised (see simd.hpp: attention_head_forward and
// attention_head_backward). Every product is a sum in a fixed order by fused multiply-adds, each
// lane of a vector computing one output element alone, so that no result depends on the vector
// width. Highway compiles the per-target part once for each instruction set it targets
// (foreach_target.h re-includes this file), and the dispatch part once.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "reference/simd/attention.cpp"
#include <hwy/foreach_target.h>  // must come before highway.h

#include "reference/simd/simd.hpp"

#include <hwy/highway.h>

#include "reference/simd/vectors-inl.h"

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <vector>

HWY_BEFORE_NAMESPACE();
namespace parity::simd::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// A per-thread buffer of at least n elements (the transposed keys or values, the score
// gradients), kept between calls so that a step allocates nothing here: it holds the largest
// head's T^2 + hs T elements a thread has met for the thread's life, outside the memory
// tracker's categories (as a BLAS library's packing buffers are). It starts on a 64-byte
// boundary, as tensors do, so that whole vectors of its rows never straddle two cache lines
// (where a buffer happened to start moved a step's time by several per cent from run to run).
template <typename T> T* buffer(std::size_t n, int which) {
  constexpr std::size_t kAlign = 64 / sizeof(T);
  thread_local std::vector<T> buffers[2];
  std::vector<T>& b = buffers[which];
  if (b.size() < n + kAlign) b.resize(n + kAlign);
  const std::size_t address = reinterpret_cast<std::uintptr_t>(b.data()) / sizeof(T);
  return b.data() + (kAlign - address % kAlign) % kAlign;
}

// to[c * tp + r] = from[r * ld + c] for r < rows, c < cols, each row of `to` padded with zeros
// up to tp, so that whole vectors of it can be read; row by row, so that each source row's
// piece is read once, in order.
template <typename T>
void transpose_padded(const T* from, std::size_t ld, std::size_t rows, std::size_t cols, T* to, std::size_t tp) {
  for (std::size_t r = 0; r < rows; ++r) {
    const T* row = from + r * ld;
    for (std::size_t c = 0; c < cols; ++c) to[c * tp + r] = row[c];
  }
  for (std::size_t c = 0; c < cols; ++c) std::fill(to + c * tp + rows, to + (c + 1) * tp, T(0));
}

// The last vector of rows_times_transposed's outputs [j, n) (n - j <= lanes), in one pass.
template <int R, class D, typename T>
HWY_INLINE void row_times_transposed_once(D d, const T* a, std::size_t lda, const T* bt, std::size_t tp,
                                          std::size_t cols, std::size_t n, T scale, T* out, std::size_t ldo,
                                          std::size_t j) {
  auto a0 = hn::Zero(d), a1 = hn::Zero(d), a2 = hn::Zero(d), a3 = hn::Zero(d);
  for (std::size_t c = 0; c < cols; ++c) {
    const auto x = hn::LoadU(d, bt + c * tp + j);
    a0 = hn::MulAdd(hn::Set(d, a[c]), x, a0);
    if constexpr (R > 1) a1 = hn::MulAdd(hn::Set(d, a[lda + c]), x, a1);
    if constexpr (R > 2) a2 = hn::MulAdd(hn::Set(d, a[2 * lda + c]), x, a2);
    if constexpr (R > 3) a3 = hn::MulAdd(hn::Set(d, a[3 * lda + c]), x, a3);
  }
  const auto s = hn::Set(d, scale);
  const std::size_t count = n - j;
  store(d, hn::Mul(a0, s), out + j, count);
  if constexpr (R > 1) store(d, hn::Mul(a1, s), out + ldo + j, count);
  if constexpr (R > 2) store(d, hn::Mul(a2, s), out + 2 * ldo + j, count);
  if constexpr (R > 3) store(d, hn::Mul(a3, s), out + 3 * ldo + j, count);
}

// out[r, j] = scale * sum_{c < cols} a[r, c] bt[c, j] for j < n and R rows of a (lda apart) at
// once, each sum in order of c; bt's rows tp apart (a multiple of the lanes, zero-padded): rows
// times a transposed matrix, two vectors of each row a pass (2R independent chains).
template <int R, class D, typename T>
HWY_INLINE void rows_times_transposed(D d, const T* a, std::size_t lda, const T* bt, std::size_t tp, std::size_t cols,
                                      std::size_t n, T scale, T* out, std::size_t ldo) {
  static_assert(R >= 1 && R <= 4);
  const std::size_t lanes = hn::Lanes(d);
  const auto s = hn::Set(d, scale);
  for (std::size_t j = 0; j < n; j += 2 * lanes) {
    if (j + lanes >= n) return row_times_transposed_once<R>(d, a, lda, bt, tp, cols, n, scale, out, ldo, j);
    auto a0 = hn::Zero(d), a1 = hn::Zero(d), a2 = hn::Zero(d), a3 = hn::Zero(d);
    auto b0 = hn::Zero(d), b1 = hn::Zero(d), b2 = hn::Zero(d), b3 = hn::Zero(d);
    for (std::size_t c = 0; c < cols; ++c) {
      const T* b = bt + c * tp + j;
      const auto x = hn::LoadU(d, b);
      const auto y = hn::LoadU(d, b + lanes);
      const auto w0 = hn::Set(d, a[c]);
      a0 = hn::MulAdd(w0, x, a0);
      b0 = hn::MulAdd(w0, y, b0);
      if constexpr (R > 1) {
        const auto w1 = hn::Set(d, a[lda + c]);
        a1 = hn::MulAdd(w1, x, a1);
        b1 = hn::MulAdd(w1, y, b1);
      }
      if constexpr (R > 2) {
        const auto w2 = hn::Set(d, a[2 * lda + c]);
        a2 = hn::MulAdd(w2, x, a2);
        b2 = hn::MulAdd(w2, y, b2);
      }
      if constexpr (R > 3) {
        const auto w3 = hn::Set(d, a[3 * lda + c]);
        a3 = hn::MulAdd(w3, x, a3);
        b3 = hn::MulAdd(w3, y, b3);
      }
    }
    const std::size_t second = std::min(lanes, n - j - lanes);  // the first vector is whole
    const auto put = [&](std::size_t r, hn::Vec<D> lo, hn::Vec<D> hi) HWY_ATTR {
      hn::StoreU(hn::Mul(lo, s), d, out + r * ldo + j);
      store(d, hn::Mul(hi, s), out + r * ldo + j + lanes, second);
    };
    put(0, a0, b0);
    if constexpr (R > 1) put(1, a1, b1);
    if constexpr (R > 2) put(2, a2, b2);
    if constexpr (R > 3) put(3, a3, b3);
  }
}

// rows_times_transposed over `rows` rows, four at a time; row r's outputs j < n[r] are wanted
// (those up to the block's largest n are written, within ldo).
template <class D, typename T>
void all_rows_times_transposed(D d, std::size_t rows, const T* a, std::size_t lda, const T* bt, std::size_t tp,
                               std::size_t cols, const std::size_t* n, T scale, T* out, std::size_t ldo) {
  std::size_t r = 0;
  for (; r + 4 <= rows; r += 4) {
    const std::size_t most = std::max(std::max(n[r], n[r + 1]), std::max(n[r + 2], n[r + 3]));
    rows_times_transposed<4>(d, a + r * lda, lda, bt, tp, cols, most, scale, out + r * ldo, ldo);
  }
  for (; r < rows; ++r) rows_times_transposed<1>(d, a + r * lda, lda, bt, tp, cols, n[r], scale, out + r * ldo, ldo);
}

// Weighted sums of rows, R output rows at once (independent chains of fused multiply-adds):
// out_r = sum_{i in [lo_r, hi_r)} w[r * wr + i * wi] b_i in order of i, b's rows ldb apart with
// `cols` columns, out's rows ldo apart. wr = T, wi = 1 reads w's rows; wr = 1, wi = T its columns.
template <int R, class D, typename T>
HWY_INLINE void weighted_rows(D d, const T* w, std::size_t wr, std::size_t wi, const std::size_t* lo,
                              const std::size_t* hi, const T* b, std::size_t ldb, std::size_t cols, T* out,
                              std::size_t ldo) {
  static_assert(R >= 1 && R <= 4);
  std::size_t first = lo[0], common_from = lo[0], common_to = hi[0], last = hi[0];
  for (int r = 1; r < R; ++r) {
    first = std::min(first, lo[r]);
    common_from = std::max(common_from, lo[r]);
    common_to = std::min(common_to, hi[r]);
    last = std::max(last, hi[r]);
  }
  common_to = std::max(common_to, common_from);
  const std::size_t lanes = hn::Lanes(d);
  for (std::size_t c = 0; c < cols; c += lanes) {
    const std::size_t count = std::min(lanes, cols - c);
    auto acc0 = hn::Zero(d), acc1 = hn::Zero(d), acc2 = hn::Zero(d), acc3 = hn::Zero(d);
    // Row r takes term i when lo_r <= i < hi_r; outside [common_from, common_to) each row asks.
    const auto term = [&](std::size_t i, bool ask) HWY_ATTR {
      const auto x = load(d, b + i * ldb + c, count);
      const T* wv = w + i * wi;
      if (!ask || (lo[0] <= i && i < hi[0])) acc0 = hn::MulAdd(hn::Set(d, wv[0]), x, acc0);
      if constexpr (R > 1)
        if (!ask || (lo[1] <= i && i < hi[1])) acc1 = hn::MulAdd(hn::Set(d, wv[wr]), x, acc1);
      if constexpr (R > 2)
        if (!ask || (lo[2] <= i && i < hi[2])) acc2 = hn::MulAdd(hn::Set(d, wv[2 * wr]), x, acc2);
      if constexpr (R > 3)
        if (!ask || (lo[3] <= i && i < hi[3])) acc3 = hn::MulAdd(hn::Set(d, wv[3 * wr]), x, acc3);
    };
    for (std::size_t i = first; i < common_from; ++i) term(i, true);
    for (std::size_t i = common_from; i < common_to; ++i) term(i, false);
    for (std::size_t i = std::max(common_to, first); i < last; ++i) term(i, true);
    store(d, acc0, out + c, count);
    if constexpr (R > 1) store(d, acc1, out + ldo + c, count);
    if constexpr (R > 2) store(d, acc2, out + 2 * ldo + c, count);
    if constexpr (R > 3) store(d, acc3, out + 3 * ldo + c, count);
  }
}

// Every output row of weighted_rows, four at a time; lo and hi hold each row's term range.
template <class D, typename T>
void all_weighted_rows(D d, std::size_t rows, const T* w, std::size_t wr, std::size_t wi, const std::size_t* lo,
                       const std::size_t* hi, const T* b, std::size_t ldb, std::size_t cols, T* out, std::size_t ldo) {
  std::size_t r = 0;
  for (; r + 4 <= rows; r += 4)
    weighted_rows<4>(d, w + r * wr, wr, wi, lo + r, hi + r, b, ldb, cols, out + r * ldo, ldo);
  for (; r < rows; ++r) weighted_rows<1>(d, w + r * wr, wr, wi, lo + r, hi + r, b, ldb, cols, out + r * ldo, ldo);
}

// 1 + the index of the last non-zero of x[0, n) (0 when all are zero).
template <class D, typename T> std::size_t live_length(D d, const T* x, std::size_t n) {
  const std::size_t lanes = hn::Lanes(d);
  std::size_t end = n;
  for (; end >= lanes; end -= lanes) {  // whole vectors from the end: the last non-zero lane's bit
    std::uint8_t bits[(HWY_MAX_BYTES / sizeof(T) + 7) / 8] = {};
    hn::StoreMaskBits(d, hn::Ne(hn::LoadU(d, x + end - lanes), hn::Zero(d)), bits);
    for (std::size_t byte = (lanes + 7) / 8; byte-- > 0;)
      if (bits[byte] != 0) return end - lanes + 8 * byte + static_cast<std::size_t>(std::bit_width(bits[byte]));
  }
  while (end > 0 && x[end - 1] == T(0)) --end;  // the part of a vector at the start
  return end;
}

template <typename T>
void HeadForward(const T* q, const T* k, const T* v, std::size_t ld, T* p, T* out, std::size_t ldo, std::size_t t,
                 std::size_t hs, T scale, bool causal) {
  const hn::ScalableTag<T> d;
  const std::size_t lanes = hn::Lanes(d), tp = (t + lanes - 1) / lanes * lanes;
  T* kt = buffer<T>(hs * tp, 0);
  transpose_padded(k, ld, t, hs, kt, tp);
  std::size_t* lo = buffer<std::size_t>(2 * t, 0);
  std::size_t* hi = lo + t;
  for (std::size_t i = 0; i < t; ++i) {
    lo[i] = 0;
    hi[i] = causal ? i + 1 : t;
  }
  all_rows_times_transposed(d, t, q, ld, kt, tp, hs, hi, scale, p, t);
  // softmax_row's operations without its log-sum-exp, a pass over all rows at a time so that
  // the rows' exps and sums overlap: each row's maximum, the exps in place, their blocked sums
  // (exp_sum's, over the same values), the scaling.
  T* shift = buffer<T>(t, 1);
  for (std::size_t i = 0; i < t; ++i) shift[i] = RowMax(p + i * t, hi[i]);
  for (std::size_t i = 0; i < t; ++i) {
    T* row = p + i * t;
    const auto m = hn::Set(d, shift[i]);
    over_vectors(d, hi[i], [&](std::size_t j, std::size_t count) HWY_ATTR {
      store(d, exp_any(d, hn::Sub(load(d, row + j, count), m)), row + j, count);
    });
  }
  for (std::size_t i = 0; i < t; ++i) shift[i] = T(1) / RowSum(p + i * t, hi[i]);
  for (std::size_t i = 0; i < t; ++i) {
    T* row = p + i * t;
    Scale(row, hi[i], shift[i]);
    std::fill(row + hi[i], row + t, T(0));
  }
  all_weighted_rows(d, t, p, t, 1, lo, hi, v, ld, hs, out, ldo);
}

template <typename T>
void HeadBackward(const T* q, const T* k, const T* v, std::size_t ld, const T* p, const T* g, std::size_t ldg, T* dq,
                  T* dk, T* dv, std::size_t t, std::size_t hs, T scale) {
  const hn::ScalableTag<T> d;
  const std::size_t lanes = hn::Lanes(d), tp = (t + lanes - 1) / lanes * lanes;
  T* vt = buffer<T>(hs * tp + t * t, 0);
  T* ds = vt + hs * tp;
  transpose_padded(v, ld, t, hs, vt, tp);
  // Row i's live keys: j < n_i, up to its last non-zero probability (the rest add exact zeros);
  // key j's live queries: i >= lo_j, the first row whose live keys reach j.
  std::size_t* n = buffer<std::size_t>(3 * t, 1);
  std::size_t* lo = n + t;
  std::size_t* zero = lo + t;
  std::size_t reached = 0;
  for (std::size_t i = 0; i < t; ++i) {
    if (i + 1 < t)  // the probabilities come from memory: the next row is fetched during this one
      for (std::size_t j = 0; j < t; j += 64 / sizeof(T)) hwy::Prefetch(p + (i + 1) * t + j);
    n[i] = live_length(d, p + i * t, t);
    for (; reached < n[i]; ++reached) lo[reached] = i;
    zero[i] = 0;
  }
  for (; reached < t; ++reached) lo[reached] = t;
  std::size_t* end = buffer<std::size_t>(t, 0);
  std::fill(end, end + t, t);
  // dS_i = P_i * (dP_i - dP_i . P_i) * scale over the live keys, dP_i = g_i V^T.
  all_rows_times_transposed(d, t, g, ldg, vt, tp, hs, n, T(1), ds, t);
  T* dots = buffer<T>(t, 1);  // every row's first, so that the rows' sums overlap
  for (std::size_t i = 0; i < t; ++i) dots[i] = RowDot(ds + i * t, p + i * t, n[i]);
  for (std::size_t i = 0; i < t; ++i) {
    T* row = ds + i * t;
    const T* prow = p + i * t;
    const auto dot = hn::Set(d, dots[i]), s = hn::Set(d, scale);
    // SoftmaxBackwardApply and then Scale, their operations in one pass over the row (the two
    // calls made backward about a tenth slower at the tiny GPT's shape).
    over_vectors(d, n[i], [&](std::size_t j, std::size_t count) HWY_ATTR {
      store(d, hn::Mul(hn::Mul(load(d, prow + j, count), hn::Sub(load(d, row + j, count), dot)), s), row + j, count);
    });
    std::fill(row + n[i], row + t, T(0));
  }
  all_weighted_rows(d, t, p, 1, t, lo, end, g, ldg, hs, dv, ld);   // dV_j = sum_i P_ij g_i
  all_weighted_rows(d, t, ds, t, 1, zero, n, k, ld, hs, dq, ld);   // dQ_i = sum_j dS_ij K_j
  all_weighted_rows(d, t, ds, 1, t, lo, end, q, ld, hs, dk, ld);   // dK_j = sum_i dS_ij Q_i
}

void HeadForwardF32(const float* q, const float* k, const float* v, std::size_t ld, float* p, float* out,
                    std::size_t ldo, std::size_t t, std::size_t hs, float scale, bool causal) {
  HeadForward(q, k, v, ld, p, out, ldo, t, hs, scale, causal);
}
void HeadForwardF64(const double* q, const double* k, const double* v, std::size_t ld, double* p, double* out,
                    std::size_t ldo, std::size_t t, std::size_t hs, double scale, bool causal) {
  HeadForward(q, k, v, ld, p, out, ldo, t, hs, scale, causal);
}
void HeadBackwardF32(const float* q, const float* k, const float* v, std::size_t ld, const float* p, const float* g,
                     std::size_t ldg, float* dq, float* dk, float* dv, std::size_t t, std::size_t hs, float scale) {
  HeadBackward(q, k, v, ld, p, g, ldg, dq, dk, dv, t, hs, scale);
}
void HeadBackwardF64(const double* q, const double* k, const double* v, std::size_t ld, const double* p,
                     const double* g, std::size_t ldg, double* dq, double* dk, double* dv, std::size_t t,
                     std::size_t hs, double scale) {
  HeadBackward(q, k, v, ld, p, g, ldg, dq, dk, dv, t, hs, scale);
}

}  // namespace parity::simd::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE

namespace parity::simd {

HWY_EXPORT(HeadForwardF32);
HWY_EXPORT(HeadForwardF64);
HWY_EXPORT(HeadBackwardF32);
HWY_EXPORT(HeadBackwardF64);

void attention_head_forward(const float* q, const float* k, const float* v, std::size_t ld, float* p, float* out,
                            std::size_t ldo, std::size_t t, std::size_t hs, float scale, bool causal) {
  HWY_DYNAMIC_DISPATCH(HeadForwardF32)(q, k, v, ld, p, out, ldo, t, hs, scale, causal);
}
void attention_head_forward(const double* q, const double* k, const double* v, std::size_t ld, double* p,
                            double* out, std::size_t ldo, std::size_t t, std::size_t hs, double scale, bool causal) {
  HWY_DYNAMIC_DISPATCH(HeadForwardF64)(q, k, v, ld, p, out, ldo, t, hs, scale, causal);
}
void attention_head_backward(const float* q, const float* k, const float* v, std::size_t ld, const float* p,
                             const float* g, std::size_t ldg, float* dq, float* dk, float* dv, std::size_t t,
                             std::size_t hs, float scale) {
  HWY_DYNAMIC_DISPATCH(HeadBackwardF32)(q, k, v, ld, p, g, ldg, dq, dk, dv, t, hs, scale);
}
void attention_head_backward(const double* q, const double* k, const double* v, std::size_t ld, const double* p,
                             const double* g, std::size_t ldg, double* dq, double* dk, double* dv, std::size_t t,
                             std::size_t hs, double scale) {
  HWY_DYNAMIC_DISPATCH(HeadBackwardF64)(q, k, v, ld, p, g, ldg, dq, dk, dv, t, hs, scale);
}

}  // namespace parity::simd
#endif
