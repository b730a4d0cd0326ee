// The ops: forward/backward pairs (llm.c style) on tensors of float64 or float32, and on
// float16/bfloat16 storage with float32 arithmetic where noted, in host memory or on the CUDA
// device behind one signature. Sizes: N rows (batch times sequence, every leading dimension
// flattened), C channels, B batch, T sequence, H heads, V vocabulary. Backward functions that
// produce parameter gradients accumulate into them (+=), so micro-batches add up; input
// gradients are overwritten.
//
// An op runs where its first tensor is: every other tensor it touches must be in the same
// memory space. Every op checks its tensors' shapes, types and placement first, with one check
// for both devices, and throws parity::Error naming the tensors and shapes. On the device, work
// goes on the process's stream (parity::cuda::stream()) in order; only the losses, which return
// a double, and the index checks of embedding and cross-entropy wait for the device.
//
// Each pair is one unit, reference/ops/units/<pair>.cpp: its check, its CPU body, the dispatch,
// and its CUDA kernels with their launchers (reference/ops/unit.hpp says how one file holds
// both). Adding a pair: declare it here and write its unit; CMake finds the unit.
#pragma once

#include <cstdint>

#include "reference/tensor/tensor.hpp"

namespace parity::ops {

// Uses one BLAS thread per process: ranks are the parallelism (called once by every op).
void configure_blas_once();
// Name of the BLAS library in use (for provenance).
const char* blas_name();
// The BLAS library, its build and the kernels it runs, for provenance: "OpenBLAS 0.3.21
// DYNAMIC_ARCH NO_AFFINITY Haswell MAX_THREADS=64; kernels Haswell (OPENBLAS_CORETYPE)", the
// last where the environment named the kernels rather than the library choosing them from the
// CPU (on an AVX-512 CPU the two can differ by half the products' speed).
std::string blas_description();

// Lets float32 matrix multiplies on the device use TF32 tensor cores (inputs rounded to 10-bit
// mantissas). Off by default, so float32 results are float32 accurate; the setting is per
// process. The CPU's float32 products are full float32 always.
void set_tf32(bool allow);
bool tf32();

// c (+)= op(a) op(b): op(a) [m, k], op(b) [k, n], c [m, n] (2-D). float32/float64 through BLAS;
// 16-bit tensors are widened to float32, multiplied, and the result rounded once (cuBLAS on the
// device, with float32 accumulation).
void matmul(const Tensor& a, bool transpose_a, const Tensor& b, bool transpose_b, Tensor& c, bool accumulate);

// y[N, out] = x[N, in] w[in, out] + bias[out] (bias may be undefined).
void linear_forward(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& y);
// dx = dy w^T; dw += x^T dy; dbias += column sums of dy. Each is skipped when its tensor is
// undefined (a split backward computes dx first and the weight gradients later).
void linear_backward(const Tensor& dy, const Tensor& x, const Tensor& w, Tensor& dx, Tensor& dw, Tensor& dbias);

// GeLU, tanh form: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) (Hendrycks and Gimpel 2016).
void gelu_forward(const Tensor& x, Tensor& y);
void gelu_backward(const Tensor& dy, const Tensor& x, Tensor& dx);

// y = a + b (residual connections); its backward passes dy to both.
void add_forward(const Tensor& a, const Tensor& b, Tensor& y);
// y += x (gradient accumulation along a residual stream).
void accumulate(Tensor& y, const Tensor& x);

// LayerNorm over the last dimension C with eps = 1e-5: y = (x - mean) * rstd * gamma + beta.
// mean and rstd [N] are saved for backward (float64 for float64 x, else float32).
void layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& y, Tensor& mean,
                       Tensor& rstd);
// dx, or dgamma and dbeta (accumulated), may be undefined: that part is skipped.
void layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                        const Tensor& rstd, Tensor& dx, Tensor& dgamma, Tensor& dbeta);
inline constexpr double kLayerNormEps = 1e-5;

// Softmax over the last dimension.
void softmax_forward(const Tensor& x, Tensor& y);
void softmax_backward(const Tensor& dy, const Tensor& y, Tensor& dx);

// Multi-head self-attention core on a fused projection qkv [B, T, 3C] (q, k, v each C = H*hs
// columns, head h at columns h*hs of each): out [B, T, C] = softmax(q k^T / sqrt(hs) + mask) v
// per head; probs [B, H, T, T] saved for backward. causal masks j > i. float32/float64, or
// 16-bit storage computed in float32 (on either device) with each result rounded once.
void attention_forward(const Tensor& qkv, int heads, bool causal, Tensor& out, Tensor& probs);
void attention_backward(const Tensor& dout, const Tensor& qkv, const Tensor& probs, int heads, Tensor& dqkv);

// Attention over one block of keys, the piece context parallelism assembles attention from:
// queries q [B, Tq, C] and keys and values k, v [B, Tk, C] of `heads` heads (C / heads columns
// each), with every row's position in the whole sequence (q_positions [Tq], k_positions [Tk]); a
// query attends to the keys at or before its position. Forward writes each query row's output
// over this block, normalised within it, into out [B, Tq, C], and the block's log-sum-exp of the
// scaled scores into lse [B, heads, Tq] (-inf for a row that sees no key of the block).
// attention_merge folds a block's (out_b, lse_b) into (out, lse), the online softmax's rescale:
// lse' = log(e^lse + e^lse_b), out' = e^(lse - lse') out + e^(lse_b - lse') out_b. The backward
// of a block, given the whole attention's output and log-sum-exp and dout, adds the block's
// part of the gradients into dq (of q) and dk, dv (of this block's k, v): P = exp(S - lse),
// dV += P^T dO, dS = P (dO V^T - rowsum(dO * O)), dQ += dS K / sqrt(hs), dK += dS^T Q / sqrt(hs).
// float32 and float64 on the CPU.
void attention_block_forward(const Tensor& q, const Tensor& k, const Tensor& v, const std::vector<std::int64_t>& q_positions,
                             const std::vector<std::int64_t>& k_positions, int heads, Tensor& out, Tensor& lse);
void attention_merge(Tensor& out, Tensor& lse, const Tensor& out_b, const Tensor& lse_b);
void attention_block_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                              const Tensor& lse, const std::vector<std::int64_t>& q_positions,
                              const std::vector<std::int64_t>& k_positions, int heads, Tensor& dq, Tensor& dk, Tensor& dv);

// y[B, T, C] = wte[tokens] + wpe[t] (wpe may be undefined); tokens [B, T] int32 or int64.
void embedding_forward(const Tensor& tokens, const Tensor& wte, const Tensor& wpe, Tensor& y);
void embedding_backward(const Tensor& dy, const Tensor& tokens, Tensor& dwte, Tensor& dwpe);

// Cross-entropy of logits [N, V] against targets [N] (int32/int64): returns
// sum_n -log softmax(logits_n)[target_n] / normalizer. normalizer is N for a mean over this
// batch; data parallelism passes the global count so that shards add up to the whole.
double cross_entropy_forward(const Tensor& logits, const Tensor& targets, double normalizer);
// dlogits = (softmax(logits) - onehot(targets)) / normalizer; returns the loss as well (the
// same value as cross_entropy_forward, from the same pass over the logits). On the device the
// per-row losses are summed in float64 there, in a fixed order, and copied back (these wait).
double cross_entropy_backward(const Tensor& logits, const Tensor& targets, double normalizer, Tensor& dlogits);

// Vocabulary-parallel forms (Megatron's VocabParallelEmbedding and vocab-parallel
// cross-entropy): a shard holds classes (token-table rows) [first, first + V_shard) of the whole
// vocabulary, and tokens or targets are ids in the whole vocabulary.
//
// y[b, t] = wte_shard[tokens[b, t] - first_token], or zeros when the token is outside the shard;
// tokens must lie in [0, vocabulary). Summing y over the shards gives the whole lookup.
void embedding_shard_forward(const Tensor& tokens, const Tensor& wte_shard, std::int64_t first_token,
                             std::int64_t vocabulary, Tensor& y);
// dwte_shard[tokens - first_token] += dy for the tokens inside the shard.
void embedding_shard_backward(const Tensor& dy, const Tensor& tokens, std::int64_t first_token, Tensor& dwte_shard);
// Cross-entropy over shards of the logits [N, V_shard]: each shard's row maxima; with the
// global maxima m (the max over shards), each shard's sum_j exp(l_j - m) and the target's logit
// (0 where the target is in another shard). Summed over shards: s and z, and the loss is
// sum_n (log s_n + m_n - z_n) / normalizer. Statistics are float64 for float64 logits, else
// float32. Targets must lie in [0, vocabulary).
void cross_entropy_shard_max(const Tensor& logits_shard, Tensor& row_max);
void cross_entropy_shard_sums(const Tensor& logits_shard, const Tensor& targets, std::int64_t first_class,
                              std::int64_t vocabulary, const Tensor& row_max, Tensor& sum_exp, Tensor& target_logit);
// dlogits_shard = (exp(l - m) / s - [class = target]) / normalizer, from the global m and s.
void cross_entropy_shard_backward(const Tensor& logits_shard, const Tensor& targets, std::int64_t first_class,
                                  const Tensor& row_max, const Tensor& sum_exp, double normalizer,
                                  Tensor& dlogits_shard);

// Mean squared error: sum (prediction - target)^2 / normalizer; backward 2 (p - t) / normalizer.
double mse_forward(const Tensor& prediction, const Tensor& target, double normalizer);
void mse_backward(const Tensor& prediction, const Tensor& target, double normalizer, Tensor& dprediction);

// Inverted dropout with a replayable mask: element i is kept when
// uniform(seed, stream, first_element + i) >= p, and scaled by 1/(1-p). The mask is a pure
// function of (seed, stream, global element index), so backward, a recomputed forward
// (activation checkpointing) and a shard of the batch (first_element = its offset in the whole)
// regenerate it instead of storing or communicating it.
struct DropoutKey {
  std::uint64_t seed = 0;
  std::uint64_t stream = 0;
  std::uint64_t first_element = 0;
};
void dropout_forward(const Tensor& x, double p, DropoutKey key, Tensor& y);
void dropout_backward(const Tensor& dy, double p, DropoutKey key, Tensor& dx);

// Mixture-of-experts row movement (which rows go where is decided by ops/routing.hpp). A row
// map sends the N rows of x [N, C] to A assignment rows: row_token [A] (int64) is the token of
// each assignment; token_offsets [N + 1] and token_rows [A] (int64) list each token's
// assignments in order, so a sum over a token's assignments runs in one fixed order on every
// device (no atomics): the results do not depend on the device or on thread timing.
struct RowMap {
  Tensor row_token, token_offsets, token_rows;
};
// y[a] = x[row_token[a]] (y [A, C]); backward dx[n] = sum over n's assignments of dy[a]
// (overwritten; zero for a token with none).
void gather_rows_forward(const Tensor& x, const RowMap& map, Tensor& y);
void gather_rows_backward(const Tensor& dy, const RowMap& map, Tensor& dx);
// y[n] = sum over n's assignments of gates[a] rows[a] (y [N, C], overwritten; zero for a token
// with none); backward drows[a] = gates[a] dy[row_token[a]] and dgates[a] = dy[row_token[a]] .
// rows[a] (both overwritten). gates [A] in the rows' type.
void combine_rows_forward(const Tensor& rows, const Tensor& gates, const RowMap& map, Tensor& y);
void combine_rows_backward(const Tensor& dy, const Tensor& rows, const Tensor& gates, const RowMap& map,
                           Tensor& drows, Tensor& dgates);

// The optimizers' element updates (model::Sgd::update and model::AdamW::update), arithmetic in
// the state type (float32 or float64) whatever the value's storage; 16-bit values are read
// and written through float64 (parity::to_double, from_double).
// SGD: d = g + wd p; with a momentum buffer (not null) d = buffer = momentum buffer + d; p -= lr d.
void sgd_update(Tensor& value, const Tensor& grad, Tensor* momentum_buffer, DataType state_dtype,
                double learning_rate, double momentum, double weight_decay);
// AdamW at 1-based step `step`: p -= lr wd p; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
// p -= lr (m / (1 - b1^step)) / (sqrt(v / (1 - b2^step)) + eps). m and v in the state type.
void adamw_update(Tensor& value, const Tensor& grad, Tensor& m, Tensor& v, double learning_rate, double beta1,
                  double beta2, double epsilon, double weight_decay, std::int64_t step);

}  // namespace parity::ops
