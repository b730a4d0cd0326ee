// Mixture-of-experts routing (Shazeer et al. 2017; GShard, Lepikhin et al. 2020; Switch,
// Fedus et al. 2021; expert choice, Zhou et al. 2022; auxiliary-loss-free balancing,
// DeepSeek-V3 2024): which expert each token's row goes to, with what gate, and the balancing
// losses with their gradients.
//
// The decisions are integers every rank must agree on, made from the router probabilities of
// one routing group (the tokens of one forward pass on one rank, GShard's "group"): N tokens
// by E experts, row-major, as float64 values of the router's softmax (computed in the routing
// precision by the softmax op, copied to the host: N x E numbers, whatever the device).
// Everything here is host arithmetic in float64 on those values.
//
// Token choice (top_k, aux_free): each token picks its k experts of largest score (probability,
// plus the per-expert bias for aux_free), ties to the lowest expert index. Each expert takes at
// most C = ceil(k cf N / E) rows (cf = infinity: no limit). Rows are admitted in priority order:
// every token's first choice in token order, then every second choice, ...; a choice arriving
// at a full expert is dropped, and a token whose choices are all dropped passes unchanged
// through the residual connection around the layer. Gates are the probabilities of the k chosen
// experts renormalised over the k (so with k = 1 the gate is 1); a dropped choice keeps its
// share of the denominator.
//
// Expert choice: each expert takes its c = min(N, ceil(cf N / E)) tokens of largest probability,
// ties to the lowest token index; the gate is the probability itself. A token may go to several
// experts or none.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "reference/ops/ops.hpp"

namespace parity::ops {

enum class RouterKind { top_k, expert_choice, aux_free };
std::string_view name_of(RouterKind kind);
RouterKind parse_router(std::string_view text);  // throws UsageError naming the known routers

inline constexpr double kDropless = std::numeric_limits<double>::infinity();

struct RoutingRule {
  RouterKind kind = RouterKind::top_k;
  int k = 2;                        // choices per token (token choice)
  double capacity_factor = kDropless;
};

// Rows per expert: ceil(k cf N / E) for token choice, min(N, ceil(cf N / E)) for expert choice;
// -1 when cf is infinite (token choice: no limit; expert choice: every token).
std::int64_t expert_capacity(const RoutingRule& rule, std::int64_t tokens, std::int64_t experts);

// One routing group's decisions. Assignments (a token's row sent to an expert) are listed
// expert-major, in each expert's admission order: what the experts' inputs are, in order.
struct Routing {
  std::int64_t tokens = 0, experts = 0, k = 0;
  std::int64_t capacity = -1;          // expert_capacity
  std::vector<std::int64_t> token;     // [A] the token of each assignment
  std::vector<std::int32_t> expert;    // [A] its expert (non-decreasing)
  std::vector<std::int32_t> choice;    // [A] token choice: which of the token's k choices; expert choice: 0
  std::vector<std::int64_t> per_expert;  // [E] assignments each expert takes
  // Token choice: each token's k choices [N k] in order of score, and whether each was admitted.
  std::vector<std::int32_t> chosen;
  std::vector<std::uint8_t> admitted;
  // Rows each expert was chosen for before capacity (token choice; its admitted rows for expert
  // choice): the load that balancing acts on.
  std::vector<std::int64_t> load;
  std::int64_t dropped = 0;            // token choice: choices dropped; expert choice: tokens no expert took
  std::int64_t assignments() const { return static_cast<std::int64_t>(token.size()); }
  // Per token, whether any expert takes its row; the count of those no expert takes (they pass
  // through the residual only).
  std::vector<std::uint8_t> routed_tokens() const;
  std::int64_t unrouted_tokens() const;
};

// Decides a group's routing from its probabilities [N E] (and, for aux_free, the per-expert
// bias added to the scores for the choice only; empty otherwise). Throws UsageError for k
// outside [1, E], cf <= 0 or NaN, or probabilities of the wrong size.
Routing route(const std::vector<double>& probabilities, std::int64_t tokens, std::int64_t experts,
              const RoutingRule& rule, const std::vector<double>& bias = {});

// The row map (ops.hpp) of a routing's assignments, its tensors in `space`.
RowMap row_map(const Routing& routing, MemorySpace space);

// Each assignment's gate [A]: token choice p_e / sum over the token's k choices of p (or p_e
// itself when `renormalise` is false: only to show the renormalisation is checked);
// expert choice p_e.
std::vector<double> routing_gates(const std::vector<double>& probabilities, const Routing& routing,
                                  bool renormalise = true);
// Adds d(sum_a dgates_a gate_a) / dp to dprobabilities [N E]: with S the sum of a token's k
// chosen probabilities and g_j = p_j / S, dp_i = (dg_i - sum_j dg_j g_j) / S over its choices
// (dg_j = 0 for a dropped choice); expert choice dp_e = dg.
void routing_gates_backward(const std::vector<double>& dgates, const std::vector<double>& probabilities,
                            const Routing& routing, std::vector<double>& dprobabilities, bool renormalise = true);

// Switch's load-balancing loss, alpha E sum_i f_i P_i with f_i the fraction of the N k choices
// made for expert i (before capacity) and P_i the mean probability of expert i; equal to alpha
// when routing is uniform. Returns it times `weight`; adds its gradient (f_i held constant, as
// the counts are) alpha E f_i / N times `weight` to column i of dprobabilities when given.
double balancing_loss(const std::vector<double>& probabilities, const Routing& routing, double alpha, double weight,
                      std::vector<double>* dprobabilities);

// The router z-loss (ST-MoE, Zoph et al. 2022): coefficient times the mean over the N tokens of
// logsumexp(logits_n)^2, times `weight`. Its gradient, 2 coefficient lse_n softmax(logits_n) /
// N times `weight`, is added to dlogits [N E] when given.
double router_z_loss(const std::vector<double>& logits, std::int64_t tokens, std::int64_t experts,
                     double coefficient, double weight, std::vector<double>* dlogits);

// Auxiliary-loss-free balancing: after a step, each expert's bias moves by `rate` towards
// balance, up when its load is below the mean load and down when above (sign(mean - load_i)).
void update_routing_bias(std::vector<double>& bias, const std::vector<double>& load, double rate);

}  // namespace parity::ops
