// Mixture-of-experts routing decisions, gates and balancing losses (see routing.hpp).
#include "reference/ops/routing.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "reference/core/error.hpp"

namespace parity::ops {

std::string_view name_of(RouterKind kind) {
  switch (kind) {
    case RouterKind::top_k: return "top_k";
    case RouterKind::expert_choice: return "expert_choice";
    case RouterKind::aux_free: return "aux_free";
  }
  return "?";
}

RouterKind parse_router(std::string_view text) {
  for (RouterKind kind : {RouterKind::top_k, RouterKind::expert_choice, RouterKind::aux_free})
    if (text == name_of(kind)) return kind;
  throw UsageError("unknown router '" + std::string(text) + "' (known: top_k, expert_choice, aux_free)");
}

std::int64_t expert_capacity(const RoutingRule& rule, std::int64_t tokens, std::int64_t experts) {
  if (std::isinf(rule.capacity_factor)) return -1;
  const double rows = rule.kind == RouterKind::expert_choice ? rule.capacity_factor * static_cast<double>(tokens)
                                                             : rule.k * rule.capacity_factor * static_cast<double>(tokens);
  // ceil of a quotient of exact small numbers: nudged down by a few ulps first, so that
  // 1.25 * 8 / 4 is 2.5 -> 3 but 2 * 1.0 * 8 / 4 stays 4 even if the product rounds up.
  const double quotient = rows / static_cast<double>(experts);
  const auto capacity = static_cast<std::int64_t>(std::ceil(quotient * (1 - 4 * 0x1p-53)));
  return rule.kind == RouterKind::expert_choice ? std::min(capacity, tokens) : capacity;
}

std::vector<std::uint8_t> Routing::routed_tokens() const {
  std::vector<std::uint8_t> routed(static_cast<std::size_t>(tokens), 0);
  for (std::int64_t t : token) routed[static_cast<std::size_t>(t)] = 1;
  return routed;
}

std::int64_t Routing::unrouted_tokens() const {
  const std::vector<std::uint8_t> routed = routed_tokens();
  return tokens - std::count(routed.begin(), routed.end(), std::uint8_t{1});
}

namespace {

void check_rule(const RoutingRule& rule, std::int64_t experts) {
  if (experts < 1) throw UsageError("routing needs at least one expert");
  if (rule.kind != RouterKind::expert_choice && (rule.k < 1 || rule.k > experts))
    throw UsageError("top-k routing with k = " + std::to_string(rule.k) + " needs 1 <= k <= the " +
                     std::to_string(experts) + " experts");
  if (!(rule.capacity_factor > 0))
    throw UsageError("capacity factor " + std::to_string(rule.capacity_factor) + " must be above 0 (inf: dropless)");
}

// Token choice: every token's k best experts by score, then admission in priority order.
void route_token_choice(const std::vector<double>& p, const std::vector<double>& bias,
                        Routing& r) {
  const std::int64_t N = r.tokens, E = r.experts, k = r.k;
  r.chosen.assign(static_cast<std::size_t>(N * k), 0);
  std::vector<std::int32_t> order(static_cast<std::size_t>(E));
  for (std::int64_t n = 0; n < N; ++n) {
    const auto score = [&](std::int32_t e) {
      return p[static_cast<std::size_t>(n * E + e)] + (bias.empty() ? 0.0 : bias[static_cast<std::size_t>(e)]);
    };
    std::iota(order.begin(), order.end(), 0);
    // Largest score first; equal scores by the lower expert index.
    std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](std::int32_t a, std::int32_t b) {
      const double sa = score(a), sb = score(b);
      return sa > sb || (sa == sb && a < b);
    });
    std::copy(order.begin(), order.begin() + k, r.chosen.begin() + n * k);
  }
  // Admission: choice rank j outer, token inner; an expert admits while below capacity.
  r.admitted.assign(r.chosen.size(), 0);
  std::vector<std::vector<std::pair<std::int64_t, std::int32_t>>> queue(static_cast<std::size_t>(E));
  for (std::int64_t j = 0; j < k; ++j)
    for (std::int64_t n = 0; n < N; ++n) {
      const std::size_t at = static_cast<std::size_t>(n * k + j);
      const std::int32_t e = r.chosen[at];
      ++r.load[static_cast<std::size_t>(e)];
      auto& q = queue[static_cast<std::size_t>(e)];
      if (r.capacity >= 0 && static_cast<std::int64_t>(q.size()) >= r.capacity) {
        ++r.dropped;
        continue;
      }
      r.admitted[at] = 1;
      q.emplace_back(n, static_cast<std::int32_t>(j));
    }
  for (std::int32_t e = 0; e < E; ++e)
    for (const auto& [n, j] : queue[static_cast<std::size_t>(e)]) {
      r.token.push_back(n);
      r.expert.push_back(e);
      r.choice.push_back(j);
    }
}

// Expert choice: each expert its c best tokens by probability.
void route_expert_choice(const std::vector<double>& p, Routing& r) {
  const std::int64_t N = r.tokens, E = r.experts;
  const std::int64_t c = r.capacity < 0 ? N : r.capacity;
  std::vector<std::int64_t> order(static_cast<std::size_t>(N));
  for (std::int32_t e = 0; e < E; ++e) {
    std::iota(order.begin(), order.end(), 0);
    const auto prob = [&](std::int64_t n) { return p[static_cast<std::size_t>(n * E + e)]; };
    std::partial_sort(order.begin(), order.begin() + c, order.end(), [&](std::int64_t a, std::int64_t b) {
      return prob(a) > prob(b) || (prob(a) == prob(b) && a < b);
    });
    // Admission order within the expert: token order (what its input rows are).
    std::sort(order.begin(), order.begin() + c);
    for (std::int64_t i = 0; i < c; ++i) {
      r.token.push_back(order[static_cast<std::size_t>(i)]);
      r.expert.push_back(e);
      r.choice.push_back(0);
    }
    r.load[static_cast<std::size_t>(e)] = c;
  }
  r.dropped = r.unrouted_tokens();
}

}  // namespace

Routing route(const std::vector<double>& probabilities, std::int64_t tokens, std::int64_t experts,
              const RoutingRule& rule, const std::vector<double>& bias) {
  check_rule(rule, experts);
  if (static_cast<std::int64_t>(probabilities.size()) != tokens * experts)
    throw Error("route: " + std::to_string(probabilities.size()) + " probabilities for " + std::to_string(tokens) +
                " tokens x " + std::to_string(experts) + " experts");
  if (!bias.empty() && static_cast<std::int64_t>(bias.size()) != experts)
    throw Error("route: a bias of " + std::to_string(bias.size()) + " for " + std::to_string(experts) + " experts");
  Routing r;
  r.tokens = tokens;
  r.experts = experts;
  r.k = rule.kind == RouterKind::expert_choice ? 0 : rule.k;
  r.capacity = expert_capacity(rule, tokens, experts);
  r.load.assign(static_cast<std::size_t>(experts), 0);
  if (rule.kind == RouterKind::expert_choice)
    route_expert_choice(probabilities, r);
  else
    route_token_choice(probabilities, rule.kind == RouterKind::aux_free ? bias : std::vector<double>{}, r);
  r.per_expert.assign(static_cast<std::size_t>(experts), 0);
  for (std::int32_t e : r.expert) ++r.per_expert[static_cast<std::size_t>(e)];
  return r;
}

RowMap row_map(const Routing& routing, MemorySpace space) {
  const std::int64_t N = routing.tokens, A = routing.assignments();
  // Tensors have positive sizes: an empty list is one unused element (no op reads it, and the
  // ops refuse a map whose sizes do not fit their rows).
  auto vector = [&](const std::string& name, const std::vector<std::int64_t>& values) {
    Tensor t = Tensor::empty("routing." + name, {static_cast<std::int64_t>(std::max<std::size_t>(values.size(), 1))},
                             DataType::int64, MemoryCategory::activations);
    std::fill_n(t.data<std::int64_t>(), t.numel(), 0);
    std::copy(values.begin(), values.end(), t.data<std::int64_t>());
    return space == MemorySpace::host ? t : t.to(space, t.name(), MemoryCategory::activations);
  };
  std::vector<std::int64_t> offsets(static_cast<std::size_t>(N + 1), 0), rows(static_cast<std::size_t>(A));
  for (std::int64_t t : routing.token) ++offsets[static_cast<std::size_t>(t + 1)];
  for (std::int64_t n = 0; n < N; ++n) offsets[static_cast<std::size_t>(n + 1)] += offsets[static_cast<std::size_t>(n)];
  std::vector<std::int64_t> next(offsets.begin(), offsets.end() - 1);
  for (std::int64_t a = 0; a < A; ++a) rows[static_cast<std::size_t>(next[static_cast<std::size_t>(routing.token[static_cast<std::size_t>(a)])]++)] = a;
  return {vector("row_token", routing.token), vector("token_offsets", offsets), vector("token_rows", rows)};
}

namespace {
// Sum of the probabilities of token n's k chosen experts (the renormalisation's denominator).
double chosen_sum(const std::vector<double>& p, const Routing& r, std::int64_t n) {
  double s = 0;
  for (std::int64_t j = 0; j < r.k; ++j)
    s += p[static_cast<std::size_t>(n * r.experts + r.chosen[static_cast<std::size_t>(n * r.k + j)])];
  return s;
}
bool token_choice(const Routing& r) { return r.k > 0; }
}  // namespace

std::vector<double> routing_gates(const std::vector<double>& probabilities, const Routing& routing, bool renormalise) {
  std::vector<double> gates(routing.token.size());
  for (std::size_t a = 0; a < gates.size(); ++a) {
    const std::int64_t n = routing.token[a];
    const double p = probabilities[static_cast<std::size_t>(n * routing.experts + routing.expert[a])];
    gates[a] = token_choice(routing) && renormalise ? p / chosen_sum(probabilities, routing, n) : p;
  }
  return gates;
}

void routing_gates_backward(const std::vector<double>& dgates, const std::vector<double>& probabilities,
                            const Routing& routing, std::vector<double>& dprobabilities, bool renormalise) {
  const std::int64_t E = routing.experts;
  if (dgates.size() != routing.token.size() || dprobabilities.size() != probabilities.size())
    throw Error("routing_gates_backward: sizes do not match the routing");
  if (!token_choice(routing) || !renormalise) {
    for (std::size_t a = 0; a < dgates.size(); ++a)
      dprobabilities[static_cast<std::size_t>(routing.token[a] * E + routing.expert[a])] += dgates[a];
    return;
  }
  // Per token: dg over its k choices (0 for dropped ones), then dp_i = (dg_i - sum_j dg_j g_j) / S.
  const std::int64_t k = routing.k;
  std::vector<double> dg(static_cast<std::size_t>(routing.tokens * k), 0.0);
  for (std::size_t a = 0; a < dgates.size(); ++a)
    dg[static_cast<std::size_t>(routing.token[a] * k + routing.choice[a])] = dgates[a];
  for (std::int64_t n = 0; n < routing.tokens; ++n) {
    const double s = chosen_sum(probabilities, routing, n);
    double weighted = 0;
    for (std::int64_t j = 0; j < k; ++j) {
      const std::int32_t e = routing.chosen[static_cast<std::size_t>(n * k + j)];
      weighted += dg[static_cast<std::size_t>(n * k + j)] * probabilities[static_cast<std::size_t>(n * E + e)] / s;
    }
    for (std::int64_t j = 0; j < k; ++j) {
      const std::int32_t e = routing.chosen[static_cast<std::size_t>(n * k + j)];
      dprobabilities[static_cast<std::size_t>(n * E + e)] += (dg[static_cast<std::size_t>(n * k + j)] - weighted) / s;
    }
  }
}

double balancing_loss(const std::vector<double>& probabilities, const Routing& routing, double alpha, double weight,
                      std::vector<double>* dprobabilities) {
  const std::int64_t N = routing.tokens, E = routing.experts;
  if (N == 0 || alpha == 0) return 0;
  const double choices = static_cast<double>(N * std::max<std::int64_t>(routing.k, 1));
  double loss = 0;
  for (std::int64_t e = 0; e < E; ++e) {
    const double f = static_cast<double>(routing.load[static_cast<std::size_t>(e)]) / choices;
    double mean_p = 0;
    for (std::int64_t n = 0; n < N; ++n) mean_p += probabilities[static_cast<std::size_t>(n * E + e)];
    mean_p /= static_cast<double>(N);
    loss += f * mean_p;
    if (dprobabilities)
      for (std::int64_t n = 0; n < N; ++n)
        (*dprobabilities)[static_cast<std::size_t>(n * E + e)] += alpha * static_cast<double>(E) * f / N * weight;
  }
  return alpha * static_cast<double>(E) * loss * weight;
}

double router_z_loss(const std::vector<double>& logits, std::int64_t tokens, std::int64_t experts,
                     double coefficient, double weight, std::vector<double>* dlogits) {
  if (tokens == 0 || coefficient == 0) return 0;
  double sum = 0;
  for (std::int64_t n = 0; n < tokens; ++n) {
    const double* row = logits.data() + n * experts;
    const double m = *std::max_element(row, row + experts);
    double s = 0;
    for (std::int64_t e = 0; e < experts; ++e) s += std::exp(row[e] - m);
    const double lse = m + std::log(s);
    sum += lse * lse;
    if (dlogits)
      for (std::int64_t e = 0; e < experts; ++e)
        (*dlogits)[static_cast<std::size_t>(n * experts + e)] +=
            2 * coefficient * lse * std::exp(row[e] - lse) / static_cast<double>(tokens) * weight;
  }
  return coefficient * sum / static_cast<double>(tokens) * weight;
}

void update_routing_bias(std::vector<double>& bias, const std::vector<double>& load, double rate) {
  if (bias.size() != load.size()) throw Error("update_routing_bias: bias and load differ in size");
  if (load.empty()) return;
  const double mean = std::accumulate(load.begin(), load.end(), 0.0) / static_cast<double>(load.size());
  for (std::size_t e = 0; e < bias.size(); ++e)
    bias[e] += rate * (load[e] < mean ? 1.0 : load[e] > mean ? -1.0 : 0.0);
}

}  // namespace parity::ops
