// The fast path's ops: 16-bit storage (bfloat16 or float16) with float32 accumulation, on
// device pointers, each launched on the process's stream (reference/cuda/device.hpp) without
// waiting. They are the parts of the fast GPT step (gpt.hpp) and are tested one by one against
// the CPU float64 ops (correctness/test_fast_ops.cpp). Without CUDA every call throws.
//
// Layouts are row-major. Activations are [M, n] with M = B T rows; the fused projection qkv is
// [B, T, 3C] with columns [q | k | v], head h taking columns h D .. (h + 1) D of each (D = C / H),
// as in the reference attention (reference/ops/units/attention.cpp). A Linear weight is [in, out]
// (y = x W + b), as the reference Linear.
//
// Kept to C++17 and the standard library: nvcc compiles the implementation.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace parity::fast {

enum class Storage { bfloat16, float16 };
const char* name_of(Storage storage);
std::size_t bytes_of(Storage storage);  // 2

bool compiled();  // false without CUDA: every op then throws

// --- Matrix multiplies (cuBLASLt, float32 accumulation) -----------------------------------------
// The epilogue fused into the product's output:
//   none:       C = A B                   (or C += A B with accumulate)
//   bias:       C = A B + bias[col]
//   bias_gelu:  pre = A B + bias[col] written to `aux`; C = gelu_tanh(pre)
//   dgelu:      C = (A B) * gelu_tanh'(aux)   (aux: the pre-activation saved in forward)
enum class Epilogue { none, bias, bias_gelu, dgelu };

// y[M, N] = x[M, K] w[K, N] with the epilogue (bias [N], aux [M, N] in the storage type).
void linear_forward(Storage s, const void* x, const void* w, const void* bias, void* y, void* aux, std::int64_t M,
                    std::int64_t K, std::int64_t N, Epilogue epilogue);
// dx[M, K] = dy[M, N] w[K, N]^T, times gelu'(aux[M, K]) with Epilogue::dgelu.
void linear_backward_input(Storage s, const void* dy, const void* w, void* dx, const void* aux, std::int64_t M,
                           std::int64_t K, std::int64_t N, Epilogue epilogue);
// dw[K, N] (+)= x[M, K]^T dy[M, N]; db[N] = sum over rows of dy when db is not null (written,
// not accumulated). dw in the storage type.
void linear_backward_weight(Storage s, const void* x, const void* dy, void* dw, void* db, std::int64_t M,
                            std::int64_t K, std::int64_t N, bool accumulate);
// The tied LM head: logits[M, V] = x[M, h] table[V, h]^T; dx = dlogits table; dtable32[V, h] =
// dlogits^T x in float32 (written).
void head_forward(Storage s, const void* x, const void* table, void* logits, std::int64_t M, std::int64_t h,
                  std::int64_t V);
void head_backward_input(Storage s, const void* dlogits, const void* table, void* dx, std::int64_t M, std::int64_t h,
                         std::int64_t V);
void head_backward_table(Storage s, const void* dlogits, const void* x, float* dtable32, std::int64_t M,
                         std::int64_t h, std::int64_t V);
// Floating-point operations of every product issued since the process started (2 M N K each).
std::int64_t matmul_flops_issued();
// Products whose epilogue cuBLASLt had no fused kernel for (done as a product and a separate
// kernel instead), since the process started.
std::int64_t epilogue_fallbacks();

// --- Attention (FlashAttention-2's tiling: the T x T scores never reach memory) ------------------
// The kernels' tiles: a block takes kAttentionForwardRows queries (forward) or kAttentionRows rows
// (queries in dQ, keys in dK/dV), a warp 16 of them, and steps over the other side kAttentionKeyTile
// keys (forward, dQ) or kAttentionQueryTile queries (dK/dV) at a time. A warp skips the tiles the
// causal mask hides from all its rows, and masks element by element only the tiles that cross the
// diagonal or the sequence's end.
inline constexpr int kAttentionForwardRows = 128;
inline constexpr int kAttentionRows = 64;
inline constexpr int kAttentionKeyTile = 64;
inline constexpr int kAttentionQueryTile = 32;
// The warpgroup kernels (attention_wgmma.cu): a warpgroup's products take kAttentionGroupRows rows
// (queries in forward and dQ, keys in dK/dV) and step over kAttentionGroupStep of the other side.
inline constexpr int kAttentionGroupRows = 64;
inline constexpr int kAttentionGroupStep = 64;
// out[B, T, C] = softmax(q k^T / sqrt(D) + causal mask) v per head; lse[B, H, T] (float32) keeps
// each row's log-sum-exp (base 2, of the scores times log2(e) / sqrt(D)) for backward. Head
// sizes D: 16, 32, 64, 80, 96, 128. Causal only.
void attention_forward(Storage s, const void* qkv, void* out, float* lse, int B, int T, int C, int H);
// dqkv[B, T, 3C] (written) from dout, qkv, out and lse; delta[B, H, T] (float32) is scratch.
// Deterministic: no atomics, every gradient element summed in a fixed order.
void attention_backward(Storage s, const void* dout, const void* qkv, const void* out, const float* lse, float* delta,
                        void* dqkv, int B, int T, int C, int H);
// The kernels that run attention on this process's GPU for a head size: wgmma, Hopper's
// warpgroup products (attention_wgmma.cu: head sizes 64 and 128 at compute capability 9.0,
// tiles of 64 rows a warpgroup and steps of 64), or mma, the m16n8k16 kernels above (any head
// size the fast path takes, any GPU). PARITY_FAST_ATTENTION=mma keeps mma everywhere, =wgmma
// refuses a GPU or head size it cannot run on; mma in a build without CUDA.
enum class AttentionKernels { mma, wgmma };
AttentionKernels attention_kernels(int head_size);
const char* name_of(AttentionKernels kernels);
// The multiply-adds the kernels execute for one forward and one backward (recomputation and the
// masked halves of diagonal tiles included), in FLOPs: the hardware FLOPs of HFU. Without the
// kernels named, those attention_kernels() chooses.
std::int64_t attention_forward_flops_executed(int B, int T, int C, int H, AttentionKernels kernels);
std::int64_t attention_backward_flops_executed(int B, int T, int C, int H, AttentionKernels kernels);
std::int64_t attention_forward_flops_executed(int B, int T, int C, int H);
std::int64_t attention_backward_flops_executed(int B, int T, int C, int H);
// attention_forward and attention_backward on the kernels named (a test runs both families on
// one GPU); wgmma where it cannot run is refused.
void attention_forward(Storage s, const void* qkv, void* out, float* lse, int B, int T, int C, int H,
                       AttentionKernels kernels);
void attention_backward(Storage s, const void* dout, const void* qkv, const void* out, const float* lse, float* delta,
                        void* dqkv, int B, int T, int C, int H, AttentionKernels kernels);
bool attention_head_size_supported(int D);

// --- Row ops (float32 residual stream, 16-bit outputs) -----------------------------------------
// resid[M, C] (float32) = wte[tokens] + wpe[position] (tokens [B, T] int32, position = row % T).
void embedding_forward(Storage s, const std::int32_t* tokens, const void* wte, const void* wpe, float* resid,
                       std::int64_t B, std::int64_t T, std::int64_t C);
// x = resid + add (the residual connection, float32 + 16-bit; add may be null), written to
// resid_out when add is given; then y = LayerNorm(x) gamma + beta in the storage type, with mean
// and rstd [M] kept (eps 1e-5, as the reference LayerNorm). No two buffers may overlap.
void residual_layernorm_forward(Storage s, const float* resid, const void* add, float* resid_out, const void* gamma,
                                const void* beta, void* y, float* mean, float* rstd, std::int64_t M, std::int64_t C);
// dresid[M, C] (float32) += LayerNorm's input gradient from dy; dresid16 = the sum in the
// storage type (the next product's input). Per-block partial sums of dgamma, dbeta go to
// partial[blocks, 2C] (float32, at least layernorm_partial_rows(M) rows); layernorm_param_grads
// then sums them in a fixed order into dgamma, dbeta (storage type). No two buffers may overlap.
void layernorm_backward(Storage s, const float* resid, const float* mean, const float* rstd, const void* gamma,
                        const void* dy, float* dresid, void* dresid16, float* partial, std::int64_t M, std::int64_t C);
std::int64_t layernorm_partial_rows(std::int64_t M);  // min(M, kLayerNormBlocks)
// The blocks of a LayerNorm: enough for several per multiprocessor on any GPU, so that many rows
// are in flight (a block takes one row at a time); fixed, so that the parameter gradients' sums
// are grouped the same way on every device.
inline constexpr std::int64_t kLayerNormBlocks = 1056;
void layernorm_param_grads(Storage s, const float* partial, void* dgamma, void* dbeta, std::int64_t M, std::int64_t C);
// dwpe[T, C] = sum over the batch of dresid (storage type, written); dwte32[V, C] += the rows of
// dresid whose token is v, summed in row order: `order` lists the rows sorted by token and
// `starts[u]..starts[u+1]` the rows of the u-th distinct token `unique[u]` (made on the host,
// where the tokens are: embedding_gradient_plan). Deterministic, no atomics.
void embedding_backward(Storage s, const float* dresid, const std::int32_t* order, const std::int32_t* starts,
                        const std::int32_t* unique, std::int64_t distinct, void* dwpe, float* dwte32, std::int64_t B,
                        std::int64_t T, std::int64_t C);
// Cross-entropy of logits [M, V] against targets [M] (int32): row_loss[M] (float32) gets each
// row's -log softmax[target] / normalizer, and the logits are overwritten by their gradient
// (softmax - onehot) * grad_scale / normalizer in the storage type. Only the first `valid`
// columns take part (the rest, vocabulary padding, get gradient 0).
void cross_entropy(Storage s, void* logits, const std::int32_t* targets, float* row_loss, std::int64_t M,
                   std::int64_t V, std::int64_t valid, float normalizer, float grad_scale);
// out[0] = sum of x[0..n) (float32, fixed order).
void sum(const float* x, float* out, std::int64_t n);

// --- Optimizer -----------------------------------------------------------------------------------
// One AdamW step over a flat parameter buffer (Loshchilov and Hutter, with bias correction,
// decoupled weight decay on every element, as reference/model/optimizer.hpp): masters, m, v
// float32; params16 receives the rounded masters. Gradients are grad16 (storage type), except
// the first n32 elements, which come from grad32 (float32). Every gradient is divided by
// loss_scale first. When `nonfinite` is not null and *nonfinite != 0 the step is skipped (a
// float16 overflow); `step` counts updates done (1 on the first). Every buffer starts on 16 bytes
// (as cuda::allocate's and the fast GPT's arena's do).
struct AdamWHyper {
  float learning_rate = 1e-3f, beta1 = 0.9f, beta2 = 0.999f, epsilon = 1e-8f, weight_decay = 0.01f;
};
void adamw(Storage s, void* params16, float* masters, float* m, float* v, const void* grad16, const float* grad32,
           std::int64_t n, std::int64_t n32, const AdamWHyper& hyper, int step, float loss_scale,
           const int* nonfinite);
// *flag = 1 when any of grad16[0..n) or grad32[0..n32) is inf or NaN (else left as it is).
void find_nonfinite(Storage s, const void* grad16, std::int64_t n, const float* grad32, std::int64_t n32, int* flag);

// Conversions and fills on device buffers.
void to_storage(Storage s, const float* x, void* y, std::int64_t n);
void from_storage(Storage s, const void* x, float* y, std::int64_t n);
// x[i] = N(0, std) drawn from (seed, i) by a counter-based generator; in the storage type and
// float32 (either may be null).
void normal_init(Storage s, void* x16, float* x32, std::int64_t n, float std, std::uint64_t seed);
// x[0..n) *= factor (the storage type, or float32 when `float32`), rounded once, on the CUDA stream
// `stream` (null: the process's).
void multiply(Storage s, void* x, std::int64_t n, bool float32, float factor, void* stream);
void fill(Storage s, void* x16, float* x32, std::int64_t n, float value);

}  // namespace parity::fast
