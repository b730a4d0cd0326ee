// Vectorised CPU loops (Google Highway), compiled for every x86 and Arm instruction set Highway
// targets and chosen at run time for the CPU at hand, so one build runs everywhere at its best.
// Each function equals its scalar reference (reference/ops, reference/core/half.hpp,
// reference/tensor/random.cpp) in what it promises: the 16-bit conversions and Philox bit for
// bit; GeLU and the exponentials within 1 ulp of exact as libm's (float32 by exp below,
// float64 by Highway's), the rest of each formula in the scalar code's order of operations. Sums are taken in one blocked order (below),
// so no result depends on the vector width. correctness/test_simd.cpp holds them to it.
#pragma once

#include <cstddef>
#include <cstdint>

#include "reference/core/half.hpp"

namespace parity::simd {

// y_j = exp(x_j) in float32, within 1 ulp of the exact value for every x where the CPU has
// fused multiply-add (x86 from AVX2, 64-bit Arm), the same bits on each of those; without FMA
// within 1.01 ulp (x86 before AVX2). inf above 88.72, 0 below -103.97, a quiet NaN for a NaN.
// y may be x.
void exp(const float* x, float* y, std::size_t n);

// GeLU in its tanh form written with exp: y = x / (1 + exp(-2u)), u = sqrt(2/pi) (x + 0.044715
// x^3); dx = dy (s + 2 x s (1 - s) sqrt(2/pi) (1 + 3 0.044715 x^2)), s = 1 / (1 + exp(-2u)).
void gelu_forward(const float* x, float* y, std::size_t n);
void gelu_forward(const double* x, double* y, std::size_t n);
void gelu_backward(const float* dy, const float* x, float* dx, std::size_t n);
void gelu_backward(const double* dy, const double* x, double* dx, std::size_t n);

// ---- Rows (float32 and float64). Every sum below is taken in one blocked order, the same for
// every instruction set: element j is added into partial sum j mod 16 in order of j, and the 16
// partials are then added pairwise (0+1, 2+3, ..., then the pairs' sums pairwise, to one). Its
// error is that of a sum of n terms in some order, gamma_{n-1} at most (tolerance.hpp); it does
// not depend on how many ranks share the rows.
// max_j x_j (-inf for n = 0).
float row_max(const float* x, std::size_t n);
double row_max(const double* x, std::size_t n);
// sum_j exp(x_j - shift) in the blocked order; each exp(x_j - shift) also stored to out[j]
// when out is not null (out may be x). next, when not null, is n elements a loop reads after
// this (its next row): they are fetched into cache while the exps are computed, so that a
// row-by-row loop's memory reads overlap its arithmetic instead of alternating with it.
float exp_sum(const float* x, std::size_t n, float shift, float* out, const float* next = nullptr);
double exp_sum(const double* x, std::size_t n, double shift, double* out, const double* next = nullptr);
// sum_j x_j, sum_j a_j b_j and sum_j (x_j - c)^2, blocked.
float row_sum(const float* x, std::size_t n);
double row_sum(const double* x, std::size_t n);
float row_dot(const float* a, const float* b, std::size_t n);
double row_dot(const double* a, const double* b, std::size_t n);
float squared_deviation_sum(const float* x, std::size_t n, float c);
double squared_deviation_sum(const double* x, std::size_t n, double c);
// Softmax of x[0, n) into y (y may be x): m = row_max, each y_j = exp(x_j - m) with their sum s
// (exp_sum's order), then each times 1 / s; returns m + log(s), the row's log-sum-exp.
float softmax_row(const float* x, float* y, std::size_t n);
double softmax_row(const double* x, double* y, std::size_t n);
// acc_j += x_{r, j} for r = 0, 1, ..., rows - 1 in order (column sums onto acc; a row-major x of
// `columns` per row): each column summed in the scalar loop's order.
void accumulate_rows(const float* x, std::size_t rows, std::size_t columns, float* acc);
void accumulate_rows(const double* x, std::size_t rows, std::size_t columns, double* acc);
// acc_j += w x_j (a gate-weighted row added onto a sum).
void add_scaled(float* acc, const float* x, std::size_t n, float w);
void add_scaled(double* acc, const double* x, std::size_t n, double w);
// x_j *= s.
void scale(float* x, std::size_t n, float s);
void scale(double* x, std::size_t n, double s);
// x_j = (x_j a) b, rounded after each product: two scale passes in one.
void scale_twice(float* x, std::size_t n, float a, float b);
void scale_twice(double* x, std::size_t n, double a, double b);
// y_j = (x_j - mean) * rstd * gamma_j + beta_j (LayerNorm's output).
void layernorm_apply(const float* x, const float* gamma, const float* beta, float* y, std::size_t n, float mean, float rstd);
void layernorm_apply(const double* x, const double* gamma, const double* beta, double* y, std::size_t n, double mean,
                     double rstd);
// LayerNorm's backward over one row, xhat_j = (x_j - mean) rstd and dxhat_j = dy_j gamma_j:
// with sums not null, sums[0] = sum_j dxhat_j and sums[1] = sum_j dxhat_j xhat_j (blocked);
// with dgamma and dbeta not null, dgamma_j += dy_j xhat_j and dbeta_j += dy_j.
void layernorm_backward_sums(const float* dy, const float* x, const float* gamma, std::size_t n, float mean, float rstd,
                             float* sums, float* dgamma, float* dbeta);
void layernorm_backward_sums(const double* dy, const double* x, const double* gamma, std::size_t n, double mean,
                             double rstd, double* sums, double* dgamma, double* dbeta);
// dx_j = rstd (dxhat_j - a - xhat_j b) (a, b: the means of dxhat and dxhat xhat).
void layernorm_backward_dx(const float* dy, const float* x, const float* gamma, float* dx, std::size_t n, float mean,
                           float rstd, float a, float b);
void layernorm_backward_dx(const double* dy, const double* x, const double* gamma, double* dx, std::size_t n, double mean,
                           double rstd, double a, double b);
// dx_j = y_j (dy_j - dot) (softmax's backward, dot = sum_j dy_j y_j).
void softmax_backward_apply(const float* dy, const float* y, float* dx, std::size_t n, float dot);
void softmax_backward_apply(const double* dy, const double* y, double* dx, std::size_t n, double dot);

// ---- One attention head (reference/simd/attention.cpp), T query and key rows of hs columns:
// q, k, v rows ld apart, the probabilities p [T, T] dense, out and g rows ldo (ldg) apart; the
// outputs overlap no input. Each product's sum below runs in order of its index by fused
// multiply-adds, one output element per lane; the softmax's sum and the row dot product are the
// blocked sums above. A masked key, or one of zero probability, is skipped, not multiplied by
// zero: a NaN or infinity in it does not reach the rows that do not see it (as it would through
// a product of matrices, 0 x inf being NaN).
// Forward: s_ij = scale (sum_c q_ic k_jc) for the live keys j < n_i (n_i = i + 1 when causal,
// else T); p_i = softmax_row of them, the rest of the row 0; out_i = sum_{j < n_i} p_ij v_j.
void attention_head_forward(const float* q, const float* k, const float* v, std::size_t ld, float* p, float* out,
                            std::size_t ldo, std::size_t t, std::size_t hs, float scale, bool causal);
void attention_head_forward(const double* q, const double* k, const double* v, std::size_t ld, double* p,
                            double* out, std::size_t ldo, std::size_t t, std::size_t hs, double scale, bool causal);
// Backward from g = dL/dout: row i's live keys are j < n_i, n_i one past its last non-zero
// probability (a zero probability adds exact zeros), key j's live queries i >= lo_j, the first
// row whose live keys reach it. dp_ij = sum_c g_ic v_jc, ds_i = softmax_backward_apply(dp_i,
// p_i, row_dot(dp_i, p_i)) times scale; dq_i = sum_{j < n_i} ds_ij k_j, dk_j = sum_{i >= lo_j}
// ds_ij q_i, dv_j = sum_{i >= lo_j} p_ij g_i, written (not added) at dq, dk, dv, rows ld apart.
void attention_head_backward(const float* q, const float* k, const float* v, std::size_t ld, const float* p,
                             const float* g, std::size_t ldg, float* dq, float* dk, float* dv, std::size_t t,
                             std::size_t hs, float scale);
void attention_head_backward(const double* q, const double* k, const double* v, std::size_t ld, const double* p,
                             const double* g, std::size_t ldg, double* dq, double* dk, double* dv, std::size_t t,
                             std::size_t hs, double scale);

// ---- Products of small float32 matrices (reference/simd/gemm.cpp), row-major as BLAS's
// RowMajor: c[m, n] = op(a) op(b), or c += it when accumulating, op(a) [m, k] being a (rows lda
// apart) or a's transpose, op(b) [k, n] b (rows ldb apart) or its transpose. Each output element
// is its k products summed in order of the index by fused multiply-adds from zero, then added to
// c's value when accumulating: one lane's chain, so no element depends on m, on the tile it fell
// in or on the vector width (the same order as OpenBLAS's kernels take on x86, whose results it
// equals where they do not split k). With `bias` [n] not null, each element is bias_j + the sum
// instead (c unread: what a copy of the bias into every row and an accumulating product give).
// Returns false, computing nothing, outside what it is made for (the caller then calls BLAS):
// an x86 CPU with AVX-512 (its 32 registers hold the tiles), n a multiple of 16, k <=
// kSmallGemmDepth, m k <= kSmallGemmLeft elements, n <= kSmallGemmColumns. c overlaps neither
// input nor the bias.
inline constexpr std::size_t kSmallGemmDepth = 512, kSmallGemmLeft = std::size_t{1} << 17, kSmallGemmColumns = 1024;
bool small_gemm(bool transpose_a, bool transpose_b, std::size_t m, std::size_t n, std::size_t k, const float* a,
                std::size_t lda, const float* b, std::size_t ldb, bool accumulate, float* c, std::size_t ldc,
                const float* bias = nullptr);
// Whether small_gemm computes a product of these sizes on this CPU (rather than declining).
bool small_gemm_takes(std::size_t m, std::size_t n, std::size_t k);

// AdamW on n parameters with float32 or float64 values and state alike (ops.hpp's adamw_update,
// its operations in its order): p -= lr wd p; m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g g;
// p -= lr (m / c1) / (sqrt(v / c2) + eps). one_minus_b1 and one_minus_b2 come rounded from
// float64.
template <typename T> struct AdamW {
  T lr, b1, b2, eps, wd, one_minus_b1, one_minus_b2, c1, c2;
};
void adamw(float* p, const float* g, float* m, float* v, std::size_t n, const AdamW<float>& h);
void adamw(double* p, const double* g, double* m, double* v, std::size_t n, const AdamW<double>& h);

// ---- Counter-based random numbers: Philox 4x32-10 (Salmon et al. 2011; reference/tensor/
// random.cpp's philox4x32_10 is the scalar reference, equal word for word) on the counters
// (i, stream) for i = first, ..., first + n - 1 under the key `seed`: bits01[j] = (w0 << 32) | w1
// and, where bits23 is not null, bits23[j] = (w2 << 32) | w3 of counter first + j.
void philox_bits(std::uint64_t seed, std::uint64_t stream, std::uint64_t first, std::size_t n, std::uint64_t* bits01,
                 std::uint64_t* bits23);
// Dropout's map (ops::dropout_forward): out_j = in_j * scale where element first + j is kept,
// else 0; kept when (bits01 >> 12) >= keep_from, the 52 bits uniform_open turns into
// (m + 0.5) / 2^52 (the caller turns "uniform >= p" into that integer). out may be in.
void dropout(const float* in, float* out, std::size_t n, std::uint64_t seed, std::uint64_t stream, std::uint64_t first,
             std::uint64_t keep_from, float scale);
void dropout(const double* in, double* out, std::size_t n, std::uint64_t seed, std::uint64_t stream,
             std::uint64_t first, std::uint64_t keep_from, double scale);

// 16-bit storage (IEEE binary16 and bfloat16 as their bit patterns) to and from float32.
void half_to_float(const std::uint16_t* in, float* out, std::size_t n);
void float_to_half(const float* in, std::uint16_t* out, std::size_t n);
void bf16_to_float(const std::uint16_t* in, float* out, std::size_t n);
void float_to_bf16(const float* in, std::uint16_t* out, std::size_t n);
// The same for parity's 16-bit storage types (reference/core/half.hpp).
inline void widen(const float16_t* in, float* out, std::size_t n) {
  half_to_float(reinterpret_cast<const std::uint16_t*>(in), out, n);
}
inline void widen(const bfloat16_t* in, float* out, std::size_t n) {
  bf16_to_float(reinterpret_cast<const std::uint16_t*>(in), out, n);
}
inline void narrow(const float* in, float16_t* out, std::size_t n) {
  float_to_half(in, reinterpret_cast<std::uint16_t*>(out), n);
}
inline void narrow(const float* in, bfloat16_t* out, std::size_t n) {
  float_to_bf16(in, reinterpret_cast<std::uint16_t*>(out), n);
}
// out = a + b computed in float32 and rounded once to 16 bits, as the conversions above round
// (a collective's "native" 16-bit sum); out may be a or b.
void half_add(const std::uint16_t* a, const std::uint16_t* b, std::uint16_t* out, std::size_t n);
void bf16_add(const std::uint16_t* a, const std::uint16_t* b, std::uint16_t* out, std::size_t n);

// The instruction set the functions run with on this CPU (e.g. "AVX3", "AVX2", "SSE4").
const char* target();

}  // namespace parity::simd
