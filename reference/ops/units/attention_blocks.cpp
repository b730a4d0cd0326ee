// Attention over blocks of keys (ops.hpp: attention_block_forward, attention_merge,
// attention_block_backward): what context parallelism assembles a sequence's attention from,
// each rank's queries against one block of keys at a time. Per (b, h): the scores of the block
// by one matrix product (BLAS), the causal mask by the rows' positions in the whole sequence,
// the row's log-sum-exp, and the rows normalised within the block; the merge rescales two
// blocks' results by their log-sum-exps; the backward recomputes the probabilities from the
// whole attention's log-sum-exp. CPU only: a device tensor is refused in one line.
#include "reference/ops/unit.hpp"

#ifndef __CUDACC__

#include <cmath>
#include <limits>
#include <vector>

namespace parity::ops {

namespace {

struct BlockSizes {
  int B, Tq, Tk, C, H, hs;
};

BlockSizes block_sizes(const char* op, const Tensor& q, const Tensor& k, const Tensor& v,
                       const std::vector<std::int64_t>& q_positions, const std::vector<std::int64_t>& k_positions,
                       int heads) {
  require_floating(op, q);
  same_type(op, q, k);
  same_type(op, q, v);
  if (q.dtype() != DataType::float32 && q.dtype() != DataType::float64)
    fail(op, q.describe() + ": float32 or float64 (16-bit storage is not taken here)");
  if (on_device(q) || on_device(k) || on_device(v)) fail(op, "runs on the CPU only; " + q.describe() + " is on a device");
  if (q.rank() != 3 || k.rank() != 3) fail(op, "q " + q.describe() + " and k " + k.describe() + " must be [B, T, C]");
  const std::int64_t c = q.dim(2);
  if (heads <= 0 || c % heads != 0)
    fail(op, std::to_string(heads) + " heads do not divide the hidden size " + std::to_string(c));
  const BlockSizes s{blas_int(op, q.dim(0)), blas_int(op, q.dim(1)), blas_int(op, k.dim(1)), blas_int(op, c), heads,
                     blas_int(op, c / heads)};
  require_shape(op, k, {s.B, s.Tk, s.C});
  require_shape(op, v, {s.B, s.Tk, s.C});
  if (static_cast<std::int64_t>(q_positions.size()) != s.Tq || static_cast<std::int64_t>(k_positions.size()) != s.Tk)
    fail(op, std::to_string(q_positions.size()) + " query and " + std::to_string(k_positions.size()) +
                 " key positions for " + std::to_string(s.Tq) + " queries and " + std::to_string(s.Tk) + " keys");
  return s;
}

template <typename T>
T negative_infinity() {
  return -std::numeric_limits<T>::infinity();
}

// scores[i, j] = q_i . k_j / sqrt(hs) for head (b, h), masked to -inf where k_j is after q_i.
template <typename T>
void block_scores(const BlockSizes& s, int b, int h, const T* q, const T* k, const std::vector<std::int64_t>& qp,
                  const std::vector<std::int64_t>& kp, T* scores) {
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(s.hs)));
  const T* qb = q + static_cast<std::int64_t>(b) * s.Tq * s.C + h * s.hs;
  const T* kb = k + static_cast<std::int64_t>(b) * s.Tk * s.C + h * s.hs;
  gemm(false, true, s.Tq, s.Tk, s.hs, scale, qb, s.C, kb, s.C, T(0), scores, s.Tk);
  for (int i = 0; i < s.Tq; ++i)
    for (int j = 0; j < s.Tk; ++j)
      if (kp[static_cast<std::size_t>(j)] > qp[static_cast<std::size_t>(i)])
        scores[static_cast<std::int64_t>(i) * s.Tk + j] = negative_infinity<T>();
}

template <typename T>
void forward_on_cpu(const BlockSizes& s, const T* q, const T* k, const T* v, const std::vector<std::int64_t>& qp,
                    const std::vector<std::int64_t>& kp, T* out, T* lse) {
  std::vector<T> p(static_cast<std::size_t>(s.Tq) * static_cast<std::size_t>(s.Tk));
  for (int b = 0; b < s.B; ++b) {
    for (int h = 0; h < s.H; ++h) {
      block_scores(s, b, h, q, k, qp, kp, p.data());
      T* l = lse + (static_cast<std::int64_t>(b) * s.H + h) * s.Tq;
      for (int i = 0; i < s.Tq; ++i) {
        T* row = p.data() + static_cast<std::int64_t>(i) * s.Tk;
        T m = negative_infinity<T>();
        for (int j = 0; j < s.Tk; ++j) m = row[j] > m ? row[j] : m;
        if (m == negative_infinity<T>()) {  // no key of this block is visible
          for (int j = 0; j < s.Tk; ++j) row[j] = 0;
          l[i] = m;
          continue;
        }
        T sum = 0;
        for (int j = 0; j < s.Tk; ++j) sum += row[j] = std::exp(row[j] - m);
        const T inv = T(1) / sum;
        for (int j = 0; j < s.Tk; ++j) row[j] *= inv;
        l[i] = m + std::log(sum);
      }
      gemm(false, false, s.Tq, s.hs, s.Tk, T(1), p.data(), s.Tk, v + static_cast<std::int64_t>(b) * s.Tk * s.C + h * s.hs,
           s.C, T(0), out + static_cast<std::int64_t>(b) * s.Tq * s.C + h * s.hs, s.C);
    }
  }
}

template <typename T>
void backward_on_cpu(const BlockSizes& s, const T* dout, const T* q, const T* k, const T* v, const T* out, const T* lse,
                     const std::vector<std::int64_t>& qp, const std::vector<std::int64_t>& kp, T* dq, T* dk, T* dv) {
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(s.hs)));
  std::vector<T> p(static_cast<std::size_t>(s.Tq) * static_cast<std::size_t>(s.Tk)), dp(p.size());
  for (int b = 0; b < s.B; ++b) {
    for (int h = 0; h < s.H; ++h) {
      const std::int64_t qo = static_cast<std::int64_t>(b) * s.Tq * s.C + h * s.hs;
      const std::int64_t ko = static_cast<std::int64_t>(b) * s.Tk * s.C + h * s.hs;
      const T* l = lse + (static_cast<std::int64_t>(b) * s.H + h) * s.Tq;
      block_scores(s, b, h, q, k, qp, kp, p.data());
      for (int i = 0; i < s.Tq; ++i) {  // P = exp(S - lse) with the whole attention's lse
        T* row = p.data() + static_cast<std::int64_t>(i) * s.Tk;
        for (int j = 0; j < s.Tk; ++j) row[j] = row[j] == negative_infinity<T>() ? T(0) : std::exp(row[j] - l[i]);
      }
      gemm(true, false, s.Tk, s.hs, s.Tq, T(1), p.data(), s.Tk, dout + qo, s.C, T(1), dv + ko, s.C);  // dV += P^T dO
      gemm(false, true, s.Tq, s.Tk, s.hs, T(1), dout + qo, s.C, v + ko, s.C, T(0), dp.data(), s.Tk);  // dP = dO V^T
      for (int i = 0; i < s.Tq; ++i) {  // dS = P (dP - D), D = rowsum(dO * O)
        T d = 0;
        for (int c = 0; c < s.hs; ++c) d += dout[qo + static_cast<std::int64_t>(i) * s.C + c] * out[qo + static_cast<std::int64_t>(i) * s.C + c];
        T* row = dp.data() + static_cast<std::int64_t>(i) * s.Tk;
        const T* prow = p.data() + static_cast<std::int64_t>(i) * s.Tk;
        for (int j = 0; j < s.Tk; ++j) row[j] = prow[j] * (row[j] - d);
      }
      gemm(false, false, s.Tq, s.hs, s.Tk, scale, dp.data(), s.Tk, k + ko, s.C, T(1), dq + qo, s.C);  // dQ += dS K
      gemm(true, false, s.Tk, s.hs, s.Tq, scale, dp.data(), s.Tk, q + qo, s.C, T(1), dk + ko, s.C);   // dK += dS^T Q
    }
  }
}

}  // namespace

void attention_block_forward(const Tensor& q, const Tensor& k, const Tensor& v, const std::vector<std::int64_t>& q_positions,
                             const std::vector<std::int64_t>& k_positions, int heads, Tensor& out, Tensor& lse) {
  const char* op = "attention_block_forward";
  const BlockSizes s = block_sizes(op, q, k, v, q_positions, k_positions, heads);
  same_type(op, q, out);
  same_type(op, q, lse);
  require_shape(op, out, {s.B, s.Tq, s.C});
  require_shape(op, lse, {s.B, s.H, s.Tq});
  configure_blas_once();
  if (q.dtype() == DataType::float64)
    forward_on_cpu(s, q.data<double>(), k.data<double>(), v.data<double>(), q_positions, k_positions, out.data<double>(),
                   lse.data<double>());
  else
    forward_on_cpu(s, q.data<float>(), k.data<float>(), v.data<float>(), q_positions, k_positions, out.data<float>(),
                   lse.data<float>());
}

void attention_merge(Tensor& out, Tensor& lse, const Tensor& out_b, const Tensor& lse_b) {
  const char* op = "attention_merge";
  require_floating(op, out);
  same_type(op, out, out_b);
  same_type(op, out, lse);
  same_type(op, out, lse_b);
  if (out.rank() != 3 || lse.rank() != 3) fail(op, "out " + out.describe() + " and lse " + lse.describe() + " must be [B, T, C] and [B, H, T]");
  require_shape(op, out_b, out.shape());
  require_shape(op, lse_b, lse.shape());
  if (lse.dim(0) != out.dim(0) || lse.dim(2) != out.dim(1) || out.dim(2) % lse.dim(1) != 0)
    fail(op, "lse " + lse.describe() + " does not fit out " + out.describe());
  if (on_device(out)) fail(op, "runs on the CPU only; " + out.describe() + " is on a device");
  auto merge = [&](auto tag) {
    using T = decltype(tag);
    const std::int64_t B = out.dim(0), Tq = out.dim(1), C = out.dim(2), H = lse.dim(1), hs = C / H;
    T* o = out.data<T>();
    T* l = lse.data<T>();
    const T* ob = out_b.data<T>();
    const T* lb = lse_b.data<T>();
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t h = 0; h < H; ++h)
        for (std::int64_t i = 0; i < Tq; ++i) {
          T& la = l[(b * H + h) * Tq + i];
          const T lbi = lb[(b * H + h) * Tq + i];
          if (lbi == negative_infinity<T>()) continue;  // the block adds nothing to this row
          const T m = la > lbi ? la : lbi;
          const T wa = la == negative_infinity<T>() ? T(0) : std::exp(la - m), wb = std::exp(lbi - m);
          const T merged = m + std::log(wa + wb);
          const T fa = la == negative_infinity<T>() ? T(0) : std::exp(la - merged), fb = std::exp(lbi - merged);
          T* row = o + (b * Tq + i) * C + h * hs;
          const T* rb = ob + (b * Tq + i) * C + h * hs;
          for (std::int64_t c = 0; c < hs; ++c) row[c] = fa * row[c] + fb * rb[c];
          la = merged;
        }
  };
  if (out.dtype() == DataType::float64)
    merge(double{});
  else if (out.dtype() == DataType::float32)
    merge(float{});
  else
    fail(op, out.describe() + ": float32 or float64");
}

void attention_block_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                              const Tensor& lse, const std::vector<std::int64_t>& q_positions,
                              const std::vector<std::int64_t>& k_positions, int heads, Tensor& dq, Tensor& dk, Tensor& dv) {
  const char* op = "attention_block_backward";
  const BlockSizes s = block_sizes(op, q, k, v, q_positions, k_positions, heads);
  for (const Tensor* t : {&dout, &out, static_cast<const Tensor*>(&dq)}) {
    same_type(op, q, *t);
    require_shape(op, *t, {s.B, s.Tq, s.C});
  }
  for (const Tensor* t : {static_cast<const Tensor*>(&dk), static_cast<const Tensor*>(&dv)}) {
    same_type(op, q, *t);
    require_shape(op, *t, {s.B, s.Tk, s.C});
  }
  same_type(op, q, lse);
  require_shape(op, lse, {s.B, s.H, s.Tq});
  configure_blas_once();
  if (q.dtype() == DataType::float64)
    backward_on_cpu(s, dout.data<double>(), q.data<double>(), k.data<double>(), v.data<double>(), out.data<double>(),
                    lse.data<double>(), q_positions, k_positions, dq.data<double>(), dk.data<double>(), dv.data<double>());
  else
    backward_on_cpu(s, dout.data<float>(), q.data<float>(), k.data<float>(), v.data<float>(), out.data<float>(),
                    lse.data<float>(), q_positions, k_positions, dq.data<float>(), dk.data<float>(), dv.data<float>());
}

}  // namespace parity::ops

#endif
