// Context parallelism's attention (parallel/context): the bytes one rank sends per attention
// layer, for `rows` sequences of which a rank holds `local` tokens (T / cp), queries and
// outputs `width` wide and keys and values `kv_width` wide (the hidden size, or the key/value
// heads' width with grouped-query attention), `heads` heads, elements of `element_bytes` and the
// log-sum-exp of `statistic_bytes`. With a block = rows local kv_width element_bytes:
//   ring       forward: K and V passed cp - 1 times, 2 (cp - 1) blocks; backward: K and V again,
//              and dK, dV passed cp times (the last pass takes them home), 2 (cp - 1) + 2 cp blocks;
//   allgather  forward: the all-gather of K and V, 2 (cp - 1) blocks; backward: again, and the
//              reduce-scatter of dK and dV, 4 (cp - 1) blocks;
//   ulysses    each all-to-all sends (cp - 1) / cp of a tensor: forward Q, O (width) and K, V
//              (kv_width) and the log-sum-exp; backward dO, Q, O, dQ and K, V, dK, dV, and the
//              log-sum-exp.
// The planner's cp axis prices the ring with it (planner.cpp).
#pragma once

#include <cstdint>
#include <string>

namespace parity::theory {

struct ContextBytes {
  double forward = 0;
  double backward = 0;
};

// Activation bytes one block of the context-parallel GPT keeps for backward on a rank holding
// local = sequence / cp tokens of each of `rows` sequences: the single-device block's 16h values
// per token at element size e (the two LayerNorms' inputs and outputs 4h, attention's q, k, v 3h
// and output h, MLP 4h + GeLU 4h) and its 4 LayerNorm statistics of r bytes, with attention's
// s x s probabilities replaced by one log-sum-exp per head and token (backward recomputes the
// probabilities block by block). Attention works in w bytes (e, or float32 for 16-bit storage),
// so q, k, v, its output and the log-sum-exps are w wide, and a 16-bit model keeps its output
// rounded to e as well (the projection's input):
//   rows local (e (12h + [w != e] h) + w (4h + heads) + 4 r).
// With t-way tensor parallelism beside cp (Megatron's splits, heads / t heads a rank) the
// LayerNorms' 4h stay whole and the rest is split:
//   rows local (e (4h + (8h + [w != e] h) / t) + w (4h + heads) / t + 4 r),
// and with its sequence parallelism the LayerNorm regions' tokens split over t too: the whole
// formula divided by t, rows (local / t) (e (12h + [w != e] h) + w (4h + heads) + 4 r).
// UsageError when cp does not divide the sequence, t the hidden size or the heads (or, with
// sequence parallelism, the local tokens), or a size is below 1.
std::int64_t context_block_activation_bytes(std::int64_t sequence, std::int64_t rows, std::int64_t hidden,
                                            std::int64_t heads, int cp, std::int64_t element_bytes,
                                            std::int64_t work_bytes, std::int64_t statistic_bytes, int t = 1,
                                            bool sequence_parallel = false);

// UsageError for an unknown variant or sizes below 1.
ContextBytes context_attention_bytes(const std::string& variant, double rows, double local, double width, double kv_width,
                                     double heads, int cp, double element_bytes, double statistic_bytes);

}  // namespace parity::theory
