// Context parallelism's bytes (see context.hpp).
#include "reference/theory/context.hpp"

#include <string>

#include "reference/core/error.hpp"

namespace parity::theory {

std::int64_t context_block_activation_bytes(std::int64_t sequence, std::int64_t rows, std::int64_t h, std::int64_t heads,
                                            int cp, std::int64_t e, std::int64_t w, std::int64_t r, int t,
                                            bool sequence_parallel) {
  if (cp < 1 || t < 1 || sequence < 1 || rows < 1 || h < 1 || heads < 1 || e < 1 || w < 1 || r < 1)
    throw UsageError("context_block_activation_bytes: every size must be at least 1");
  if (sequence % cp != 0)
    throw UsageError("context_block_activation_bytes: cp = " + std::to_string(cp) + " does not divide the sequence of " +
                     std::to_string(sequence));
  const std::int64_t local = sequence / cp;
  if (h % t != 0 || heads % t != 0 || (sequence_parallel && local % t != 0))
    throw UsageError("context_block_activation_bytes: tp = " + std::to_string(t) + " does not divide the hidden size " +
                     std::to_string(h) + ", the " + std::to_string(heads) + " heads" +
                     (sequence_parallel ? " or the " + std::to_string(local) + " tokens a cp rank holds" : ""));
  const std::int64_t rounded = w != e ? h : 0;
  if (sequence_parallel) return rows * (local / t) * (e * (12 * h + rounded) + w * (4 * h + heads) + 4 * r);
  return rows * local * (e * (4 * h + (8 * h + rounded) / t) + w * (4 * h + heads) / t + 4 * r);
}

ContextBytes context_attention_bytes(const std::string& variant, double rows, double local, double width, double kv_width,
                                     double heads, int cp, double element_bytes, double statistic_bytes) {
  if (cp < 1 || rows < 0 || local < 0) throw UsageError("context_attention_bytes: cp must be at least 1");
  const double n = cp, block = rows * local * kv_width * element_bytes;
  if (variant == "ring") return {2 * (n - 1) * block, 2 * (n - 1) * block + 2 * n * block};
  if (variant == "allgather") return {2 * (n - 1) * block, 4 * (n - 1) * block};
  if (variant == "ulysses") {
    const double kept = (n - 1) / n;
    const double q = kept * rows * local * width * element_bytes, kv = kept * block;
    const double stats = kept * rows * heads * local * statistic_bytes;
    return {2 * q + 2 * kv + stats, 4 * q + 4 * kv + stats};
  }
  throw UsageError("context parallelism: unknown variant '" + variant + "' (ring, allgather, ulysses)");
}

}  // namespace parity::theory
