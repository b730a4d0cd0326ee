// Mixture-of-experts formulas (see moe.hpp).
#include "reference/theory/moe.hpp"

namespace parity::theory {

double moe_dispatch_bytes(const std::vector<std::int64_t>& admitted, int ep, int rank, std::int64_t hidden,
                          double element_bytes) {
  const std::int64_t experts = static_cast<std::int64_t>(admitted.size()), per_rank = experts / ep;
  std::int64_t rows = 0;
  for (std::int64_t e = 0; e < experts; ++e)
    if (e / per_rank != rank) rows += admitted[static_cast<std::size_t>(e)];
  return static_cast<double>(rows * hidden) * element_bytes;
}

double moe_combine_bytes(std::int64_t received_from_others, std::int64_t hidden, double element_bytes) {
  return static_cast<double>(received_from_others * hidden) * element_bytes;
}

std::int64_t moe_expert_parameters_per_rank(std::int64_t hidden, std::int64_t ffn, int experts, int ep, int tp) {
  return experts / ep * ((2 * hidden * ffn + ffn) / tp + hidden);
}

}  // namespace parity::theory
