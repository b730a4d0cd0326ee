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

// UsageError for an unknown variant or sizes below 1.
ContextBytes context_attention_bytes(const std::string& variant, double rows, double local, double width, double kv_width,
                                     double heads, int cp, double element_bytes, double statistic_bytes);

}  // namespace parity::theory
