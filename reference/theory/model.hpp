// Analytic models of a model's size, work and memory: parameter counts, matmul FLOPs per layer
// and per training step, and activation bytes per transformer layer. The ops' FLOP counter and
// the memory tracker are checked against these (correctness/test_model.cpp); derivations in
// docs/model-accounting.md.
#pragma once

#include <cstdint>

#include "reference/theory/model_config.hpp"

namespace parity::theory {

// GPT: V h (token table) + s h (positions) + L (12 h^2 + 13 h) + 2 h (final LayerNorm)
// + V h when the head is untied. Per block: qkv 3h^2+3h, proj h^2+h, fc 4h^2+4h, fc2 4h^2+h,
// two LayerNorms 4h.
std::int64_t gpt_parameters(const model::GptConfig& config);
std::int64_t gpt_block_parameters(std::int64_t hidden);
// MLP: sum over layers of in*out + out.
std::int64_t mlp_parameters(const model::MlpConfig& config);

// Matmul FLOPs of one transformer block's forward on B sequences of s tokens
// (Narayanan et al. 2021): QKV 6Bsh^2 + scores and weighted sum 4Bs^2h
// + output projection 2Bsh^2 + FFN 16Bsh^2 = 24Bsh^2 + 4Bs^2h.
std::int64_t gpt_block_forward_flops(std::int64_t batch, std::int64_t sequence, std::int64_t hidden);
// The LM head's forward: 2BshV.
std::int64_t gpt_head_forward_flops(std::int64_t batch, std::int64_t sequence, std::int64_t hidden,
                                    std::int64_t vocabulary);
// One training step (forward + backward = 3x forward, no recomputation):
// 72BsLh^2 (1 + s/(6h) + V/(12hL)) (Megatron-LM, Narayanan et al. 2021, eq. 3).
std::int64_t gpt_step_flops(const model::GptConfig& config, std::int64_t batch);
// The same written as Megatron's closed form, in floating point (for the report).
double megatron_step_flops(const model::GptConfig& config, std::int64_t batch);
// MLP: forward sum 2B in out; a step 3x that.
std::int64_t mlp_forward_flops(const model::MlpConfig& config, std::int64_t batch);

// Activation bytes of one transformer layer held for backward, Korthikanti et al. (2022), with
// 16-bit activations and 1-byte dropout masks, no parallelism: sbh (34 + 5 a s / h).
double korthikanti_layer_activation_bytes(std::int64_t sequence, std::int64_t batch, std::int64_t hidden,
                                          std::int64_t heads);
// Bytes of one statistic (LayerNorm mean and 1/std, the loss's row maxima and sums): float64 in
// a float64 model, float32 otherwise (16-bit models keep their statistics in float32).
inline std::int64_t statistic_bytes(DataType model_type) { return model_type == DataType::float64 ? 8 : 4; }

// What parity's block keeps after its forward, at the model's element size e: per token 16h
// values (LayerNorm outputs 2h, qkv 3h, attention core h, first residual h, FFN 4h + GeLU 4h,
// block output h) and a s^2 probabilities per sequence, plus 4 LayerNorm statistics per token
// of r bytes; dropout masks are regenerated, not stored, and dropout outputs are consumed by
// the residual adds, so dropout adds nothing. e (B s 16h + B a s^2) + r 4 B s.
std::int64_t parity_block_activation_bytes(std::int64_t sequence, std::int64_t batch, std::int64_t hidden,
                                           std::int64_t heads, std::int64_t element_bytes,
                                           std::int64_t statistic_bytes);
// The same for a config's block (its type's e and r) on `rows` sequences.
std::int64_t parity_block_activation_bytes(const model::GptConfig& config, std::int64_t rows);

}  // namespace parity::theory
