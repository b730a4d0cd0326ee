// The CUDA ops' launch functions: plain C++17 on raw device pointers and sizes, so that nvcc
// compiles their implementation (cuda_kernels.cu) without parity's C++20 headers. The typed
// front end with the shape and placement checks is reference/ops/cuda.hpp; without CUDA,
// cuda_stub.cpp defines these functions to throw.
//
// Data types are the integer values of parity::DataType (float64 = 0, float32 = 1, float16 = 2,
// bfloat16 = 3, int32 = 4, int64 = 5; checked by static_asserts in cuda.cpp). Every launch goes
// on the process's stream (parity::cuda::stream()) and returns without waiting, except those
// that return a value to the host (first_invalid_index, cross_entropy, mse_forward), which wait
// for the stream. Arithmetic is done as on the CPU: in the storage type for float32/float64, in
// float32 for 16-bit storage, rounding the result once.
//
// The dropout mask's random numbers (Philox 4x32-10, as reference/tensor/random.cpp) are defined
// here as host-and-device functions, so the host can check them against the CPU generator.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define PARITY_HOST_DEVICE __host__ __device__
#else
#define PARITY_HOST_DEVICE
#endif

namespace parity::ops::kernels {

enum DataTypeCode : int { kFloat64 = 0, kFloat32 = 1, kFloat16 = 2, kBFloat16 = 3, kInt32 = 4, kInt64 = 5 };

// --- Dropout's random numbers -----------------------------------------------------------------

struct PhiloxWords {
  std::uint32_t w[4];
};

// Ten rounds of Philox 4x32 on counter c under key (k0, k1) (the Random123 constants).
PARITY_HOST_DEVICE inline PhiloxWords philox4x32_10(PhiloxWords c, std::uint32_t k0, std::uint32_t k1) {
  for (int round = 0; round < 10; ++round) {
    const std::uint64_t p0 = static_cast<std::uint64_t>(0xD2511F53u) * c.w[0];
    const std::uint64_t p1 = static_cast<std::uint64_t>(0xCD9E8D57u) * c.w[2];
    const auto hi0 = static_cast<std::uint32_t>(p0 >> 32), lo0 = static_cast<std::uint32_t>(p0);
    const auto hi1 = static_cast<std::uint32_t>(p1 >> 32), lo1 = static_cast<std::uint32_t>(p1);
    const PhiloxWords next = {{hi1 ^ c.w[1] ^ k0, lo1, hi0 ^ c.w[3] ^ k1, lo0}};
    c = next;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return c;
}

// Uniform in (0, 1) for element i of stream `stream` under `seed`: counter (i, stream), key
// seed, the first two words' top 52 bits as (m + 0.5) / 2^52 (parity::uniform_open exactly).
PARITY_HOST_DEVICE inline double philox_uniform_open(std::uint64_t seed, std::uint64_t stream, std::uint64_t i) {
  const PhiloxWords counter = {{static_cast<std::uint32_t>(i), static_cast<std::uint32_t>(i >> 32),
                                static_cast<std::uint32_t>(stream), static_cast<std::uint32_t>(stream >> 32)}};
  const PhiloxWords w =
      philox4x32_10(counter, static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32));
  const std::uint64_t bits = ((static_cast<std::uint64_t>(w.w[0]) << 32) | w.w[1]) >> 12;
  return (static_cast<double>(bits) + 0.5) * (1.0 / 4503599627370496.0);  // 2^-52
}

// Whether dropout with probability p keeps element `index` (a global element index).
PARITY_HOST_DEVICE inline bool dropout_keeps(double p, std::uint64_t seed, std::uint64_t stream, std::uint64_t index) {
  return p == 0 || philox_uniform_open(seed, stream, index) >= p;
}

// --- Launch functions ---------------------------------------------------------------------------

// Row-major c[m, n] (+)= op(a) op(b) by cuBLAS; lda, ldb, ldc are the row lengths of a, b, c as
// stored. float32/float64, or float16/bfloat16 with float32 accumulation and one rounding of
// the result. allow_tf32 lets float32 products use TF32 tensor cores (10-bit mantissas).
void matmul(int dtype, bool transpose_a, bool transpose_b, int m, int n, int k, const void* a, int lda, const void* b,
            int ldb, void* c, int ldc, bool accumulate, bool allow_tf32);

// out[r, :] = row for every r < rows (the bias before a linear layer's accumulating matmul).
void broadcast_rows(int dtype, const void* row, void* out, std::int64_t rows, std::int64_t cols);
// sum[j] += sum over r of x[r, j] (a bias gradient), summed in the arithmetic type, rounded once.
void column_sum_accumulate(int dtype, const void* x, std::int64_t rows, std::int64_t cols, void* sum);

void gelu_forward(int dtype, const void* x, void* y, std::int64_t count);
void gelu_backward(int dtype, const void* dy, const void* x, void* dx, std::int64_t count);
// y = a + b element-wise; y may be a (accumulate).
void add(int dtype, const void* a, const void* b, void* y, std::int64_t count);

// mean and rstd are float64 for float64 x, else float32.
void layernorm_forward(int dtype, const void* x, const void* gamma, const void* beta, void* y, void* mean, void* rstd,
                       std::int64_t rows, std::int64_t cols, double eps);
// dx overwritten; dgamma, dbeta accumulated (+=).
void layernorm_backward(int dtype, const void* dy, const void* x, const void* gamma, const void* mean,
                        const void* rstd, void* dx, void* dgamma, void* dbeta, std::int64_t rows, std::int64_t cols);

void softmax_forward(int dtype, const void* x, void* y, std::int64_t rows, std::int64_t cols);
void softmax_backward(int dtype, const void* dy, const void* y, void* dx, std::int64_t rows, std::int64_t cols);

// Fused qkv [B, T, 3C] with H heads of C / H columns; probs [B, H, T, T]. float32/float64.
void attention_forward(int dtype, const void* qkv, void* out, void* probs, int B, int T, int C, int H, bool causal);
// scratch: B*H*T*T elements of dtype (the score gradients).
void attention_backward(int dtype, const void* dout, const void* qkv, const void* probs, void* dqkv, void* scratch,
                        int B, int T, int C, int H);

// Position of the first index outside [0, limit), or -1; scratch is one device int64. Waits.
std::int64_t first_invalid_index(const void* indices, int index_dtype, std::int64_t count, std::int64_t limit,
                                 void* scratch);

// y[b, t, :] = wte[tokens[b, t], :] (+ wpe[t, :] when wpe is not null).
void embedding_forward(int dtype, const void* tokens, int index_dtype, const void* wte, const void* wpe, void* y,
                       std::int64_t B, std::int64_t T, std::int64_t C);
// dwte[tokens[b, t], :] += dy[b, t, :] (atomic adds; for 16-bit types through wte_scratch, V*C
// float32 values, so each element is rounded once); dwpe[t, :] += sum over b of dy[b, t, :]
// when dwpe is not null (no atomics).
void embedding_backward(int dtype, const void* dy, const void* tokens, int index_dtype, void* dwte, void* dwpe,
                        float* wte_scratch, std::int64_t B, std::int64_t T, std::int64_t C, std::int64_t V);

// Sum over rows of -log softmax(logits_n)[target_n], divided by normalizer, reduced in float64
// on the device in a fixed order and returned (waits). When dlogits is not null it is set to
// (softmax - onehot) / normalizer. scratch: rows + 1 doubles.
double cross_entropy(int dtype, const void* logits, const void* targets, int index_dtype, std::int64_t rows,
                     std::int64_t classes, double normalizer, void* dlogits, double* scratch);

// Vocabulary shards (ops/cpu.hpp): y[row] = wte_shard[tokens[row] - first] or zeros outside
// [first, first + V_shard); dwte_shard[tokens - first] += dy (atomic adds; 16-bit types through
// wte_scratch as in embedding_backward).
void embedding_shard_forward(int dtype, const void* tokens, int index_dtype, const void* wte_shard, void* y,
                             std::int64_t rows, std::int64_t C, std::int64_t first, std::int64_t shard_rows);
void embedding_shard_backward(int dtype, const void* dy, const void* tokens, int index_dtype, void* dwte_shard,
                              float* wte_scratch, std::int64_t rows, std::int64_t C, std::int64_t first,
                              std::int64_t shard_rows);
// Per row of logits [rows, classes] (statistics in the accumulation type: double for float64,
// else float): the maximum; the sum of exp(l - max) and the logit of target - first (0 outside
// the shard); the gradient (exp(l - max) / sum - [j = target - first]) / normalizer.
void cross_entropy_shard_max(int dtype, const void* logits, std::int64_t rows, std::int64_t classes, void* row_max);
void cross_entropy_shard_sums(int dtype, const void* logits, const void* targets, int index_dtype, std::int64_t rows,
                              std::int64_t classes, std::int64_t first, const void* row_max, void* sum_exp,
                              void* target_logit);
void cross_entropy_shard_backward(int dtype, const void* logits, const void* targets, int index_dtype,
                                  std::int64_t rows, std::int64_t classes, std::int64_t first, const void* row_max,
                                  const void* sum_exp, double normalizer, void* dlogits);

// Number of doubles mse_forward needs as scratch.
inline constexpr std::int64_t kMseScratch = 1025;
// sum (p - t)^2 / normalizer, the squares summed in float64 in a fixed order (waits).
double mse_forward(int dtype, const void* prediction, const void* target, std::int64_t count, double normalizer,
                   double* scratch);
// dp = scale (p - t).
void mse_backward(int dtype, const void* prediction, const void* target, void* dprediction, std::int64_t count,
                  double scale);

// out[i] = keep(first + i) ? in[i] / (1 - p) : 0.
void dropout(int dtype, const void* in, void* out, std::int64_t count, double p, std::uint64_t seed,
             std::uint64_t stream, std::uint64_t first);

// SGD: d = g + wd p; with momentum (buffer not null) d = buffer = mu buffer + d; p -= lr d.
// Arithmetic in the state type (float32 or float64).
void sgd_update(int value_dtype, int state_dtype, void* value, const void* grad, void* buffer, std::int64_t count,
                double learning_rate, double momentum, double weight_decay);
// AdamW with the bias corrections 1 - beta^t given.
void adamw_update(int value_dtype, int state_dtype, void* value, const void* grad, void* m, void* v,
                  std::int64_t count, double learning_rate, double beta1, double beta2, double epsilon,
                  double weight_decay, double correction1, double correction2);

// Mixture-of-experts row movement (ops/cpu.hpp's RowMap: int64 device vectors).
// y[a] = x[row_token[a]] for a < A.
void gather_rows(int dtype, const void* x, const std::int64_t* row_token, void* y, std::int64_t A, std::int64_t C);
// y[n] = sum over i in [offsets[n], offsets[n+1]) of (gates ? gates[a] : 1) rows[a], a = token_rows[i],
// in that order (gather_rows' backward without gates, the combine with them).
void sum_token_rows(int dtype, const void* rows, const void* gates, const std::int64_t* offsets,
                    const std::int64_t* token_rows, void* y, std::int64_t N, std::int64_t C);
// drows[a] = gates[a] dy[row_token[a]]; dgates[a] = dy[row_token[a]] . rows[a].
void combine_rows_backward(int dtype, const void* dy, const void* rows, const void* gates,
                           const std::int64_t* row_token, void* drows, void* dgates, std::int64_t A, std::int64_t C);

}  // namespace parity::ops::kernels
