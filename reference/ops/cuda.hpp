// CUDA versions of the CPU ops (reference/ops/cpu.hpp) with the same signatures, shape and type
// checks and numerics (arithmetic in the storage type for float32/float64, in float32 for 16-bit
// storage), and of the optimizers' element updates (reference/model/optimizer.hpp).
//
// Dispatch: each CPU op and optimizer update begins with `if (on_device(t)) return cuda::op(...)`
// on its first tensor, so callers use parity::ops::* for tensors in either memory space. The
// functions here require every tensor they touch to be on the device and refuse host tensors
// with a parity::Error ("op: NAME [shape] type is in host memory; ..."). Work goes on the
// process's stream (parity::cuda::stream()) in order; only the losses, which return a double,
// and the index checks of embedding and cross-entropy wait for the device.
//
// Matrix multiplies use cuBLAS, float32 ones in full float32 unless set_tf32(true).
#pragma once

#include <cstdint>

#include "reference/ops/cpu.hpp"
#include "reference/tensor/tensor.hpp"

namespace parity::ops {

// True when t lives on the CUDA device.
inline bool on_device(const Tensor& t) { return t.space() == MemorySpace::cuda; }

namespace cuda {

// Lets float32 matrix multiplies use TF32 tensor cores (inputs rounded to 10-bit mantissas).
// Off by default, so float32 results are float32 accurate; the setting is per process.
void set_tf32(bool allow);
bool tf32();

void matmul(const Tensor& a, bool transpose_a, const Tensor& b, bool transpose_b, Tensor& c, bool accumulate);
void linear_forward(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& y);
void linear_backward(const Tensor& dy, const Tensor& x, const Tensor& w, Tensor& dx, Tensor& dw, Tensor& dbias);

void gelu_forward(const Tensor& x, Tensor& y);
void gelu_backward(const Tensor& dy, const Tensor& x, Tensor& dx);
void add_forward(const Tensor& a, const Tensor& b, Tensor& y);
void accumulate(Tensor& y, const Tensor& x);

void layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& y, Tensor& mean,
                       Tensor& rstd);
void layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                        const Tensor& rstd, Tensor& dx, Tensor& dgamma, Tensor& dbeta);

void softmax_forward(const Tensor& x, Tensor& y);
void softmax_backward(const Tensor& dy, const Tensor& y, Tensor& dx);

void attention_forward(const Tensor& qkv, int heads, bool causal, Tensor& out, Tensor& probs);
void attention_backward(const Tensor& dout, const Tensor& qkv, const Tensor& probs, int heads, Tensor& dqkv);

void embedding_forward(const Tensor& tokens, const Tensor& wte, const Tensor& wpe, Tensor& y);
void embedding_backward(const Tensor& dy, const Tensor& tokens, Tensor& dwte, Tensor& dwpe);

// The loss is summed in float64 on the device and copied to the host (these wait).
double cross_entropy_forward(const Tensor& logits, const Tensor& targets, double normalizer);
double cross_entropy_backward(const Tensor& logits, const Tensor& targets, double normalizer, Tensor& dlogits);

void embedding_shard_forward(const Tensor& tokens, const Tensor& wte_shard, std::int64_t first_token,
                             std::int64_t vocabulary, Tensor& y);
void embedding_shard_backward(const Tensor& dy, const Tensor& tokens, std::int64_t first_token, Tensor& dwte_shard);
void cross_entropy_shard_max(const Tensor& logits_shard, Tensor& row_max);
void cross_entropy_shard_sums(const Tensor& logits_shard, const Tensor& targets, std::int64_t first_class,
                              std::int64_t vocabulary, const Tensor& row_max, Tensor& sum_exp, Tensor& target_logit);
void cross_entropy_shard_backward(const Tensor& logits_shard, const Tensor& targets, std::int64_t first_class,
                                  const Tensor& row_max, const Tensor& sum_exp, double normalizer,
                                  Tensor& dlogits_shard);

double mse_forward(const Tensor& prediction, const Tensor& target, double normalizer);
void mse_backward(const Tensor& prediction, const Tensor& target, double normalizer, Tensor& dprediction);

// The same mask as the CPU's: element i kept when uniform(seed, stream, first_element + i) >= p.
void dropout_forward(const Tensor& x, double p, DropoutKey key, Tensor& y);
void dropout_backward(const Tensor& dy, double p, DropoutKey key, Tensor& dx);

// The optimizers' element updates (Sgd::update and AdamW::update on device tensors), with the
// CPU loops' arithmetic: in the state type (float32 or float64) whatever the value's storage.
// SGD: d = g + wd p; with a momentum buffer (not null) d = buffer = momentum buffer + d; p -= lr d.
void sgd_update(Tensor& value, const Tensor& grad, Tensor* momentum_buffer, DataType state_dtype,
                double learning_rate, double momentum, double weight_decay);
// AdamW at 1-based step `step`: p -= lr wd p; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
// p -= lr (m / (1 - b1^step)) / (sqrt(v / (1 - b2^step)) + eps).
void adamw_update(Tensor& value, const Tensor& grad, Tensor& m, Tensor& v, double learning_rate, double beta1,
                  double beta2, double epsilon, double weight_decay, std::int64_t step);

void gather_rows_forward(const Tensor& x, const RowMap& map, Tensor& y);
void gather_rows_backward(const Tensor& dy, const RowMap& map, Tensor& dx);
void combine_rows_forward(const Tensor& rows, const Tensor& gates, const RowMap& map, Tensor& y);
void combine_rows_backward(const Tensor& dy, const Tensor& rows, const Tensor& gates, const RowMap& map,
                           Tensor& drows, Tensor& dgates);

}  // namespace cuda
}  // namespace parity::ops
