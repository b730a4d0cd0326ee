// Mixture-of-experts formulas: the bytes of expert parallelism's all-to-alls, from the routing
// counts (reference/parallel/expert/ records the measured bytes beside them), and the experts'
// parameters per rank.
#pragma once

#include <cstdint>
#include <vector>

namespace parity::theory {

// Bytes rank `rank` of an ep group sends in one MoE layer's forward dispatch: the rows its
// routing admitted for experts held by other ranks (expert e lives on rank e / (E / ep)),
// each `hidden` elements of `element_bytes`. `admitted` [E] are the rank's rows per expert.
double moe_dispatch_bytes(const std::vector<std::int64_t>& admitted, int ep, int rank, std::int64_t hidden,
                          double element_bytes);
// Bytes it sends in the forward combine: the rows its experts received from the other ranks
// (`received_from_others`), whose outputs go back. The backward sends both again, the other
// way round: dispatch + combine.
double moe_combine_bytes(std::int64_t received_from_others, std::int64_t hidden, double element_bytes);

// Parameters of the experts one rank holds in one MoE layer: E / ep experts, each h -> f -> h
// with biases, split over tp as the dense FFN is (fc by columns, proj by rows; proj's bias whole):
// E/ep ((2 h f + f) / tp + h).
std::int64_t moe_expert_parameters_per_rank(std::int64_t hidden, std::int64_t ffn, int experts, int ep, int tp);

}  // namespace parity::theory
