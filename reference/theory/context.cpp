// Context parallelism's bytes (see context.hpp).
#include "reference/theory/context.hpp"

#include "reference/core/error.hpp"

namespace parity::theory {

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
