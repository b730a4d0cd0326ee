// Multi-head self-attention on a fused projection (ops.hpp: attention_forward,
// attention_backward): per head, softmax(q k^T / sqrt(hs) + mask) v with the probabilities
// saved for backward. float32/float64 on either device; 16-bit storage is widened to float32,
// computed, and each result rounded once.
#include "reference/ops/unit.hpp"

namespace parity::ops::device {
// Fused qkv [B, T, 3C] with H heads of C / H columns; probs [B, H, T, T]. float32/float64.
void attention_forward(int dtype, const void* qkv, void* out, void* probs, int B, int T, int C, int H, bool causal);
// scratch: B*H*T*T elements of dtype (the score gradients).
void attention_backward(int dtype, const void* dout, const void* qkv, const void* probs, void* dqkv, void* scratch,
                        int B, int T, int C, int H);
}  // namespace parity::ops::device

#ifndef __CUDACC__

namespace parity::ops {

namespace {
struct AttentionSizes {
  int B, T, C, H, hs;
};
// qkv [B, T, 3C] with `heads` dividing C, the attention output (or its gradient) rows [B, T, C]
// and the probabilities [B, H, T, T], all of qkv's type.
AttentionSizes attention_sizes(const char* op, const Tensor& qkv, int heads, const Tensor& rows, const Tensor& probs) {
  require_floating(op, qkv);
  if (qkv.rank() != 3 || qkv.dim(2) % 3 != 0) fail(op, "qkv " + qkv.describe() + " must be [B, T, 3C]");
  const std::int64_t c = qkv.dim(2) / 3;
  if (heads <= 0 || c % heads != 0)
    fail(op, std::to_string(heads) + " heads do not divide the hidden size " + std::to_string(c) + " of " + qkv.describe());
  const AttentionSizes s{blas_int(op, qkv.dim(0)), blas_int(op, qkv.dim(1)), blas_int(op, c), heads,
                         blas_int(op, c / heads)};
  same_type(op, qkv, rows);
  same_type(op, qkv, probs);
  require_shape(op, rows, {s.B, s.T, s.C});
  require_shape(op, probs, {s.B, s.H, s.T, s.T});
  return s;
}

// Score and weighted-sum products, as the CPU's matrix multiplies count them: 2 T^2 hs each.
std::int64_t attention_products_flops(const AttentionSizes& s) {
  return 2LL * s.B * s.H * static_cast<std::int64_t>(s.T) * s.T * s.hs;
}

// One head at a time (reference/simd/attention.cpp): scores, softmax and the weighted sum of
// values, the head's T x T probabilities written for backward, the keys above the diagonal of a
// causal head skipped. The FLOP counter takes the products of the whole T x T square (2 T^2 hs
// each, the FLOP formulas' convention), as a product of matrices would count them.
template <typename T>
void attention_forward_on_cpu(const AttentionSizes& s, bool causal, const T* qkv, T* out, T* probs) {
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(s.hs)));
  const std::size_t ld = 3 * static_cast<std::size_t>(s.C), t = static_cast<std::size_t>(s.T);
  for (int b = 0; b < s.B; ++b) {
    for (int h = 0; h < s.H; ++h) {
      const T* q = qkv + static_cast<std::int64_t>(b) * s.T * 3 * s.C + h * s.hs;
      T* p = probs + (static_cast<std::int64_t>(b) * s.H + h) * s.T * s.T;
      simd::attention_head_forward(q, q + s.C, q + 2 * s.C, ld, p, out + static_cast<std::int64_t>(b) * s.T * s.C + h * s.hs,
                                   static_cast<std::size_t>(s.C), t, static_cast<std::size_t>(s.hs), scale, causal);
    }
  }
  flop_counter().matmul += 2 * attention_products_flops(s);
}

// dS = P * (dP - rowsum(dP * P)) * scale with dP = dO V^T; dV = P^T dO, dQ = dS K, dK = dS^T Q.
template <typename T>
void attention_backward_on_cpu(const AttentionSizes& s, const T* dout, const T* qkv, const T* probs, T* dqkv) {
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(s.hs)));
  const std::size_t ld = 3 * static_cast<std::size_t>(s.C), t = static_cast<std::size_t>(s.T);
  for (int b = 0; b < s.B; ++b) {
    for (int h = 0; h < s.H; ++h) {
      const std::int64_t base = static_cast<std::int64_t>(b) * s.T * 3 * s.C + h * s.hs;
      const T* q = qkv + base;
      T* dq = dqkv + base;
      const T* p = probs + (static_cast<std::int64_t>(b) * s.H + h) * s.T * s.T;
      const T* g = dout + static_cast<std::int64_t>(b) * s.T * s.C + h * s.hs;
      simd::attention_head_backward(q, q + s.C, q + 2 * s.C, ld, p, g, static_cast<std::size_t>(s.C), dq, dq + s.C,
                                    dq + 2 * s.C, t, static_cast<std::size_t>(s.hs), scale);
    }
  }
  flop_counter().matmul += 4 * attention_products_flops(s);
}

// float32/float64 tensors (checked), on either device.
void run_attention_forward(const AttentionSizes& s, bool causal, const Tensor& qkv, Tensor& out, Tensor& probs) {
  if constexpr (kCudaBuilt) {
    if (on_device(qkv)) {
      device::attention_forward(code(qkv), qkv.raw(), out.raw(), probs.raw(), s.B, s.T, s.C, s.H, causal);
      flop_counter().matmul += 2 * attention_products_flops(s);
      return;
    }
  }
  if (qkv.dtype() == DataType::float64)
    attention_forward_on_cpu(s, causal, qkv.data<double>(), out.data<double>(), probs.data<double>());
  else
    attention_forward_on_cpu(s, causal, qkv.data<float>(), out.data<float>(), probs.data<float>());
}

void run_attention_backward(const AttentionSizes& s, const Tensor& dout, const Tensor& qkv, const Tensor& probs,
                            Tensor& dqkv) {
  if constexpr (kCudaBuilt) {
    if (on_device(dout)) {
      Tensor dscores = device_scratch("attention.dscores", {s.B, s.H, s.T, s.T}, qkv.dtype());
      device::attention_backward(code(qkv), dout.raw(), qkv.raw(), probs.raw(), dqkv.raw(), dscores.raw(), s.B, s.T,
                                 s.C, s.H);
      flop_counter().matmul += 4 * attention_products_flops(s);
      return;
    }
  }
  if (qkv.dtype() == DataType::float64)
    attention_backward_on_cpu(s, dout.data<double>(), qkv.data<double>(), probs.data<double>(), dqkv.data<double>());
  else
    attention_backward_on_cpu(s, dout.data<float>(), qkv.data<float>(), probs.data<float>(), dqkv.data<float>());
}

// 16-bit storage, on either device: the inputs widened to float32 workspace, the attention
// computed in float32, each result rounded to 16 bits once. Backward reads the probabilities
// as a 16-bit model stores them, rounded.
Tensor widened(const Tensor& t) { return cast(t, DataType::float32, t.name() + ".float32", MemoryCategory::workspace); }
Tensor wide_like(const Tensor& t) {
  return Tensor::empty(t.name() + ".float32", t.shape(), DataType::float32, MemoryCategory::workspace, t.space());
}
}  // namespace

void attention_forward(const Tensor& qkv, int heads, bool causal, Tensor& out, Tensor& probs) {
  const char* op = "attention_forward";
  const AttentionSizes s = attention_sizes(op, qkv, heads, out, probs);
  require_same_space(op, {&qkv, &out, &probs});
  if (!is_half(qkv.dtype())) return run_attention_forward(s, causal, qkv, out, probs);
  Tensor out32 = wide_like(out), probs32 = wide_like(probs);
  run_attention_forward(s, causal, widened(qkv), out32, probs32);
  copy_into(out, out32);
  copy_into(probs, probs32);
}

void attention_backward(const Tensor& dout, const Tensor& qkv, const Tensor& probs, int heads, Tensor& dqkv) {
  const char* op = "attention_backward";
  const AttentionSizes s = attention_sizes(op, qkv, heads, dout, probs);
  same_shape(op, qkv, dqkv);
  require_same_space(op, {&dout, &qkv, &probs, &dqkv});
  if (!is_half(qkv.dtype())) return run_attention_backward(s, dout, qkv, probs, dqkv);
  Tensor dqkv32 = wide_like(dqkv);
  run_attention_backward(s, widened(dout), widened(qkv), widened(probs), dqkv32);
  copy_into(dqkv, dqkv32);
}

}  // namespace parity::ops

#else  // the device part

#include <cmath>

namespace parity::ops::device {
namespace {

struct Heads {
  int B, T, C, H, hs;
};

// Block (b, h, i) for a flat block index: i fastest.
struct HeadRow {
  int b, h, i;
};
__device__ inline HeadRow head_row(int64_t block, const Heads& s) {
  const int i = static_cast<int>(block % s.T);
  const int64_t bh = block / s.T;
  return {static_cast<int>(bh / s.H), static_cast<int>(bh % s.H), i};
}

// Row i of head (b, h): scores q_i k_j scale for the live j (j <= i when causal), their softmax
// into probs (zeros for masked j), then out_i = sum_j p_ij v_j.
template <typename C>
__global__ void attention_forward_kernel(const C* qkv, C* out, C* probs, Heads s, C scale, bool causal) {
  const HeadRow r = head_row(blockIdx.x, s);
  const int64_t ld = 3 * static_cast<int64_t>(s.C);
  const C* base = qkv + static_cast<int64_t>(r.b) * s.T * ld + static_cast<int64_t>(r.h) * s.hs;
  const C* q = base + r.i * ld;
  C* p = probs + ((static_cast<int64_t>(r.b) * s.H + r.h) * s.T + r.i) * s.T;
  const int valid = causal ? r.i + 1 : s.T;
  C m = negative_infinity<C>();
  for (int j = threadIdx.x; j < valid; j += blockDim.x) {
    const C* k = base + j * ld + s.C;
    C dot = 0;
    for (int d = 0; d < s.hs; ++d) dot += q[d] * k[d];
    const C score = dot * scale;
    p[j] = score;
    m = score > m ? score : m;
  }
  m = block_max(m);
  C sum = 0;
  for (int j = threadIdx.x; j < valid; j += blockDim.x) {
    const C e = dexp(p[j] - m);
    p[j] = e;
    sum += e;
  }
  const C inv = C(1) / block_sum(sum);
  for (int j = threadIdx.x; j < s.T; j += blockDim.x) p[j] = j < valid ? p[j] * inv : C(0);
  __syncthreads();  // the whole row of p is written before any thread reads it
  C* o = out + (static_cast<int64_t>(r.b) * s.T + r.i) * s.C + static_cast<int64_t>(r.h) * s.hs;
  for (int d = threadIdx.x; d < s.hs; d += blockDim.x) {
    C acc = 0;
    for (int j = 0; j < valid; ++j) acc += p[j] * base[j * ld + 2 * s.C + d];
    o[d] = acc;
  }
}

// Row i of head (b, h): dP_ij = dO_i v_j; dS_ij = P_ij (dP_ij - sum_j dP_ij P_ij) scale into
// scratch; dQ_i = sum_j dS_ij k_j.
template <typename C>
__global__ void attention_backward_rows_kernel(const C* dout, const C* qkv, const C* probs, C* dqkv, C* dscores,
                                               Heads s, C scale) {
  const HeadRow r = head_row(blockIdx.x, s);
  const int64_t ld = 3 * static_cast<int64_t>(s.C);
  const int64_t head = static_cast<int64_t>(r.b) * s.T * ld + static_cast<int64_t>(r.h) * s.hs;
  const C* base = qkv + head;
  const C* g = dout + (static_cast<int64_t>(r.b) * s.T + r.i) * s.C + static_cast<int64_t>(r.h) * s.hs;
  const int64_t row = ((static_cast<int64_t>(r.b) * s.H + r.h) * s.T + r.i) * s.T;
  const C* p = probs + row;
  C* ds = dscores + row;
  C partial = 0;
  for (int j = threadIdx.x; j < s.T; j += blockDim.x) {
    const C* v = base + j * ld + 2 * s.C;
    C dp = 0;
    for (int d = 0; d < s.hs; ++d) dp += g[d] * v[d];
    ds[j] = dp;
    partial += dp * p[j];
  }
  const C dot = block_sum(partial);
  for (int j = threadIdx.x; j < s.T; j += blockDim.x) ds[j] = p[j] * (ds[j] - dot) * scale;
  __syncthreads();  // the whole row of dS is written before any thread reads it
  C* dq = dqkv + head + r.i * ld;
  for (int d = threadIdx.x; d < s.hs; d += blockDim.x) {
    C acc = 0;
    for (int j = 0; j < s.T; ++j) acc += ds[j] * base[j * ld + s.C + d];
    dq[d] = acc;
  }
}

// Column j of head (b, h): dK_j = sum_i dS_ij q_i, dV_j = sum_i P_ij dO_i.
template <typename C>
__global__ void attention_backward_columns_kernel(const C* dout, const C* qkv, const C* probs, C* dqkv,
                                                  const C* dscores, Heads s) {
  const HeadRow r = head_row(blockIdx.x, s);
  const int j = r.i;
  const int64_t ld = 3 * static_cast<int64_t>(s.C);
  const int64_t head = static_cast<int64_t>(r.b) * s.T * ld + static_cast<int64_t>(r.h) * s.hs;
  const int64_t matrix = (static_cast<int64_t>(r.b) * s.H + r.h) * s.T * s.T;
  const C* g = dout + static_cast<int64_t>(r.b) * s.T * s.C + static_cast<int64_t>(r.h) * s.hs;
  for (int d = threadIdx.x; d < s.hs; d += blockDim.x) {
    C dk = 0, dv = 0;
    for (int i = 0; i < s.T; ++i) {
      const int64_t ij = matrix + static_cast<int64_t>(i) * s.T + j;
      dk += dscores[ij] * qkv[head + i * ld + d];
      dv += probs[ij] * g[static_cast<int64_t>(i) * s.C + d];
    }
    dqkv[head + j * ld + s.C + d] = dk;
    dqkv[head + j * ld + 2 * s.C + d] = dv;
  }
}

// One block per (b, h, row): B*H*T blocks, 128 threads (rows of T scores, hs outputs).
constexpr int kAttentionThreads = 128;
unsigned attention_blocks(const Heads& s) {
  const int64_t blocks = static_cast<int64_t>(s.B) * s.H * s.T;
  if (blocks > 0x7fffffff) raise_error("attention: B * H * T exceeds the CUDA grid");
  return static_cast<unsigned>(blocks);
}
}  // namespace

void attention_forward(int dtype, const void* qkv, void* out, void* probs, int B, int T, int C, int H, bool causal) {
  const Heads s{B, T, C, H, C / H};
  const double scale = 1.0 / std::sqrt(static_cast<double>(s.hs));
  visit_wide(dtype, "attention_forward", [&](auto tag) {
    using F = decltype(tag);
    attention_forward_kernel<F><<<attention_blocks(s), kAttentionThreads, 0, stream()>>>(
        static_cast<const F*>(qkv), static_cast<F*>(out), static_cast<F*>(probs), s, static_cast<F>(scale), causal);
  });
  check_launch("attention_forward_kernel");
}

void attention_backward(int dtype, const void* dout, const void* qkv, const void* probs, void* dqkv, void* scratch,
                        int B, int T, int C, int H) {
  const Heads s{B, T, C, H, C / H};
  const double scale = 1.0 / std::sqrt(static_cast<double>(s.hs));
  visit_wide(dtype, "attention_backward", [&](auto tag) {
    using F = decltype(tag);
    attention_backward_rows_kernel<F><<<attention_blocks(s), kAttentionThreads, 0, stream()>>>(
        static_cast<const F*>(dout), static_cast<const F*>(qkv), static_cast<const F*>(probs), static_cast<F*>(dqkv),
        static_cast<F*>(scratch), s, static_cast<F>(scale));
    check_launch("attention_backward_rows_kernel");
    attention_backward_columns_kernel<F><<<attention_blocks(s), kAttentionThreads, 0, stream()>>>(
        static_cast<const F*>(dout), static_cast<const F*>(qkv), static_cast<const F*>(probs), static_cast<F*>(dqkv),
        static_cast<const F*>(scratch), s);
    check_launch("attention_backward_columns_kernel");
  });
}

}  // namespace parity::ops::device

#endif
