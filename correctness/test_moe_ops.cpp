// Mixture of experts on one device: the routing decisions on crafted probabilities (top-k ties,
// capacity and the admission order, expert choice, the aux-free bias), the gates and balancing
// losses with their gradients against central differences, the row movement ops, the whole MoE
// layer's backward against central differences away from routing ties, loss scaling applied to
// the balancing losses, one expert equal to the dense FFN bit for bit, the faults shown to
// change the result, and bad configurations refused.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <numeric>

#include "correctness/op_testing.hpp"
#include "reference/model/model.hpp"
#include "reference/model/moe.hpp"
#include "reference/model/optimizer.hpp"
#include "reference/core/tolerance.hpp"
#include "reference/ops/routing.hpp"

using namespace parity;
using namespace parity::op_testing;

namespace {

using ops::Routing;
using ops::RouterKind;
using ops::RoutingRule;

RoutingRule rule(RouterKind kind, int k, double cf) { return {kind, k, cf}; }

std::vector<double> as_vector(const Tensor& t) { return t.to_vector(); }

// Probabilities [N E] from a float64 tensor of logits (softmax per row).
std::vector<double> softmax_rows(const std::vector<double>& logits, std::int64_t E) {
  std::vector<double> p(logits.size());
  for (std::size_t n = 0; n < logits.size() / static_cast<std::size_t>(E); ++n) {
    double m = -INFINITY, s = 0;
    for (std::int64_t e = 0; e < E; ++e) m = std::max(m, logits[n * E + e]);
    for (std::int64_t e = 0; e < E; ++e) s += std::exp(logits[n * E + e] - m);
    for (std::int64_t e = 0; e < E; ++e) p[n * E + e] = std::exp(logits[n * E + e] - m) / s;
  }
  return p;
}

std::vector<double> random_values(const std::string& name, std::int64_t count, double stddev = 1) {
  return random_tensor(name, {count}, 0, stddev).to_vector();
}

}  // namespace

// ---- decisions ----------------------------------------------------------------------------

TEST(MoeRouting, TopKBreaksTiesByTheLowestExpert) {
  // Token 0: all equal; token 1: experts 1 and 3 tie for first.
  const std::vector<double> p = {0.25, 0.25, 0.25, 0.25, 0.1, 0.35, 0.2, 0.35};
  const Routing r = ops::route(p, 2, 4, rule(RouterKind::top_k, 2, ops::kDropless));
  EXPECT_EQ(r.chosen, (std::vector<std::int32_t>{0, 1, 1, 3}));
  EXPECT_EQ(r.dropped, 0);
  // Expert-major assignments in admission order: expert 0 <- token 0; expert 1 <- token 1 (a
  // first choice) before token 0 (a second choice); expert 3 <- token 1.
  EXPECT_EQ(r.token, (std::vector<std::int64_t>{0, 1, 0, 1}));
  EXPECT_EQ(r.expert, (std::vector<std::int32_t>{0, 1, 1, 3}));
  EXPECT_EQ(r.per_expert, (std::vector<std::int64_t>{1, 2, 0, 1}));
}

TEST(MoeRouting, CapacityFormula) {
  EXPECT_EQ(ops::expert_capacity(rule(RouterKind::top_k, 2, 1.25), 10, 4), 7);   // 6.25
  EXPECT_EQ(ops::expert_capacity(rule(RouterKind::top_k, 2, 1.0), 8, 4), 4);     // exactly 4
  EXPECT_EQ(ops::expert_capacity(rule(RouterKind::top_k, 1, 1.1), 10, 1), 11);   // 1.1 * 10 rounds above 11
  EXPECT_EQ(ops::expert_capacity(rule(RouterKind::top_k, 1, 1.1), 50, 5), 11);   // computes to 11.000000000000002
  EXPECT_EQ(ops::expert_capacity(rule(RouterKind::top_k, 1, 2.2), 45, 9), 11);   // so does 2.2 * 45 / 9
  EXPECT_EQ(ops::expert_capacity(rule(RouterKind::top_k, 2, ops::kDropless), 10, 4), -1);
  EXPECT_EQ(ops::expert_capacity(rule(RouterKind::expert_choice, 0, 2.0), 6, 4), 3);
  EXPECT_EQ(ops::expert_capacity(rule(RouterKind::expert_choice, 0, 100.0), 6, 4), 6);  // at most every token
}

TEST(MoeRouting, FirstChoicesAreAdmittedBeforeSecondChoices) {
  // 4 tokens, 2 experts, k = 2, cf = 0.5: capacity ceil(2 * 0.5 * 4 / 2) = 2. Every token
  // prefers expert 0; its first choices fill expert 0 with tokens 0 and 1, tokens 2 and 3's
  // first choices are dropped; the second choices (expert 1) of tokens 0 and 1 fill expert 1.
  const std::vector<double> p = {0.9, 0.1, 0.8, 0.2, 0.7, 0.3, 0.6, 0.4};
  const Routing r = ops::route(p, 4, 2, rule(RouterKind::top_k, 2, 0.5));
  EXPECT_EQ(r.capacity, 2);
  EXPECT_EQ(r.token, (std::vector<std::int64_t>{0, 1, 0, 1}));
  EXPECT_EQ(r.expert, (std::vector<std::int32_t>{0, 0, 1, 1}));
  EXPECT_EQ(r.choice, (std::vector<std::int32_t>{0, 0, 1, 1}));
  EXPECT_EQ(r.dropped, 4);
  EXPECT_EQ(r.load, (std::vector<std::int64_t>{4, 4}));
  EXPECT_EQ(r.unrouted_tokens(), 2);  // tokens 2 and 3 pass through the residual
  // A dropped choice keeps its share of the denominator: token 0's gates are 0.9 and 0.1.
  const std::vector<double> g = ops::routing_gates(p, r);
  EXPECT_DOUBLE_EQ(g[0], 0.9);
  EXPECT_DOUBLE_EQ(g[2], 0.1);
}

TEST(MoeRouting, DroplessKeepsEveryChoice) {
  const std::vector<double> p = softmax_rows(random_values("dropless.logits", 40 * 4), 4);
  const Routing r = ops::route(p, 40, 4, rule(RouterKind::top_k, 2, ops::kDropless));
  EXPECT_EQ(r.dropped, 0);
  EXPECT_EQ(r.assignments(), 80);
  EXPECT_EQ(std::accumulate(r.load.begin(), r.load.end(), std::int64_t{0}), 80);
  // Renormalised gates of a token's two choices add up to 1.
  const std::vector<double> g = ops::routing_gates(p, r);
  std::vector<double> per_token(40, 0.0);
  for (std::size_t a = 0; a < g.size(); ++a) per_token[static_cast<std::size_t>(r.token[a])] += g[a];
  for (double s : per_token) EXPECT_NEAR(s, 1.0, 1e-15);
}

TEST(MoeRouting, ExpertChoiceTakesEachExpertsBestTokens) {
  // 4 tokens, 2 experts, cf = 1: each expert takes ceil(4 / 2) = 2 tokens.
  const std::vector<double> p = {0.9, 0.1, 0.6, 0.4, 0.6, 0.4, 0.2, 0.8};
  const Routing r = ops::route(p, 4, 2, rule(RouterKind::expert_choice, 0, 1.0));
  // Expert 0: tokens 0 (0.9), then 1 and 2 tie at 0.6 -> token 1. Expert 1: tokens 3 (0.8), then 1 and 2 tie -> 1.
  EXPECT_EQ(r.token, (std::vector<std::int64_t>{0, 1, 1, 3}));
  EXPECT_EQ(r.expert, (std::vector<std::int32_t>{0, 0, 1, 1}));
  EXPECT_EQ(r.unrouted_tokens(), 1);  // token 2
  const std::vector<double> g = ops::routing_gates(p, r);
  EXPECT_EQ(g, (std::vector<double>{0.9, 0.6, 0.4, 0.8}));
}

TEST(MoeRouting, AuxFreeBiasSteersTheChoiceButNotTheGate) {
  const std::vector<double> p = {0.5, 0.3, 0.2};
  const Routing plain = ops::route(p, 1, 3, rule(RouterKind::aux_free, 1, ops::kDropless), {0, 0, 0});
  EXPECT_EQ(plain.chosen, (std::vector<std::int32_t>{0}));
  const Routing biased = ops::route(p, 1, 3, rule(RouterKind::aux_free, 2, ops::kDropless), {-0.4, 0.0, 0.05});
  EXPECT_EQ(biased.chosen, (std::vector<std::int32_t>{1, 2}));  // scores 0.1, 0.3, 0.25
  const std::vector<double> g = ops::routing_gates(p, biased);
  EXPECT_DOUBLE_EQ(g[0], 0.3 / 0.5);  // the unbiased probabilities, renormalised
  // The bias update moves towards balance: loads 6, 1, 1 (mean 8/3).
  std::vector<double> bias = {0, 0, 0};
  ops::update_routing_bias(bias, {6, 1, 1}, 0.01);
  EXPECT_EQ(bias, (std::vector<double>{-0.01, 0.01, 0.01}));
  // An expert at the mean load keeps its bias (sign(mean - load) is 0); equal loads move none.
  bias = {0, 0, 0};
  ops::update_routing_bias(bias, {3, 2, 1}, 0.01);
  EXPECT_EQ(bias, (std::vector<double>{-0.01, 0, 0.01}));
  ops::update_routing_bias(bias, {2, 2, 2}, 0.01);
  EXPECT_EQ(bias, (std::vector<double>{-0.01, 0, 0.01}));
}

TEST(MoeRouting, BalancingLossIsAlphaUnderUniformRouting) {
  // Every token's probabilities are a cyclic shift of one vector, and token n prefers expert
  // n mod E: over a multiple of E tokens each f_i and P_i is 1/E, so the loss is alpha.
  const std::int64_t E = 4, N = 12;
  const std::vector<double> v = {0.4, 0.3, 0.2, 0.1};
  std::vector<double> p(static_cast<std::size_t>(N * E));
  for (std::int64_t n = 0; n < N; ++n)
    for (std::int64_t e = 0; e < E; ++e) p[static_cast<std::size_t>(n * E + e)] = v[static_cast<std::size_t>((e - n % E + E) % E)];
  const double alpha = 0.01;
  for (int k : {1, 2, 3}) {
    const Routing r = ops::route(p, N, E, rule(RouterKind::top_k, k, ops::kDropless));
    EXPECT_NEAR(ops::balancing_loss(p, r, alpha, 1.0, nullptr), alpha, 1e-16) << "k = " << k;
  }
  // Skewed routing (every token's first choice expert 0) costs more than alpha.
  std::vector<double> skewed(static_cast<std::size_t>(N * E));
  for (std::int64_t n = 0; n < N; ++n)
    for (std::int64_t e = 0; e < E; ++e) skewed[static_cast<std::size_t>(n * E + e)] = v[static_cast<std::size_t>(e)];
  const Routing r = ops::route(skewed, N, E, rule(RouterKind::top_k, 1, ops::kDropless));
  EXPECT_NEAR(ops::balancing_loss(skewed, r, alpha, 1.0, nullptr), alpha * E * 0.4, 1e-15);
}

// The auxiliary losses against their published definitions on inputs worked by hand (the
// gradient tests below compare each loss only with itself).
TEST(MoeRouting, BalancingLossIsSwitchsDefinitionByHand) {
  // Two tokens, three experts: p = [.5 .3 .2; .1 .6 .3], mean probabilities P = (.3, .45, .25).
  const std::vector<double> p = {0.5, 0.3, 0.2, 0.1, 0.6, 0.3};
  const double alpha = 0.01, weight = 0.75;
  // k = 1: token 0 chooses expert 0, token 1 expert 1: f = (1/2, 1/2, 0);
  // alpha E sum f P = 0.01 * 3 * (0.15 + 0.225) = 0.01125.
  const Routing one = ops::route(p, 2, 3, rule(RouterKind::top_k, 1, ops::kDropless));
  std::vector<double> dp(6, 0.0);
  EXPECT_NEAR(ops::balancing_loss(p, one, alpha, weight, &dp), weight * 0.01125, 1e-17);
  // d/dp_{n,i} = weight alpha E f_i / N: 0.75 * 0.01 * 3 * (1/2) / 2 for experts 0 and 1, 0 for 2.
  const std::vector<double> expected_dp = {0.005625, 0.005625, 0.0, 0.005625, 0.005625, 0.0};
  for (std::size_t i = 0; i < dp.size(); ++i) EXPECT_NEAR(dp[i], expected_dp[i], 1e-18) << i;
  // k = 2: choices {0, 1} and {1, 2} of the N k = 4: f = (1/4, 2/4, 1/4);
  // sum f P = 0.075 + 0.225 + 0.0625 = 0.3625; times alpha E = 0.010875.
  const Routing two = ops::route(p, 2, 3, rule(RouterKind::top_k, 2, ops::kDropless));
  EXPECT_NEAR(ops::balancing_loss(p, two, alpha, 1.0, nullptr), 0.010875, 1e-17);
}

TEST(MoeRouting, RouterZLossIsTheMeanSquaredLogsumexp) {
  // ST-MoE: coefficient / N sum_n logsumexp(x_n)^2. Rows: zeros (lse ln 3), 1 2 3 (lse
  // 3 + ln(1 + e^-1 + e^-2)), and 1000 three times (lse 1000 + ln 3: no overflow allowed).
  const std::vector<double> logits = {0, 0, 0, 1, 2, 3, 1000, 1000, 1000};
  const double lse[3] = {std::log(3.0), 3 + std::log(1 + std::exp(-1.0) + std::exp(-2.0)), 1000 + std::log(3.0)};
  const double coefficient = 1e-3, weight = 0.5;
  const double expected = coefficient * weight * (lse[0] * lse[0] + lse[1] * lse[1] + lse[2] * lse[2]) / 3;
  std::vector<double> dl(9, 0.0);
  EXPECT_NEAR(ops::router_z_loss(logits, 3, 3, coefficient, weight, &dl), expected, 1e-15 * expected);
  // Gradient 2 c w lse_n softmax(x_n) / N: for a uniform row softmax is 1/3.
  const auto near = [](double got, double want, double largest) {
    return std::abs(got - want) <= tolerance::shifted_exp_relative_bound(largest, 8) * std::abs(want);
  };
  for (int n : {0, 2})
    for (int e = 0; e < 3; ++e)
      EXPECT_PRED3(near, dl[static_cast<std::size_t>(3 * n + e)], 2 * coefficient * weight * lse[n] / 3 / 3, n == 2 ? 1000 : 0);
  const double z = std::exp(1.0) + std::exp(2.0) + std::exp(3.0);
  EXPECT_PRED3(near, dl[5], 2 * coefficient * weight * lse[1] * std::exp(3.0) / z / 3, 3.0);
}

TEST(MoeRouting, BadRulesAreRefused) {
  const std::vector<double> p(8, 0.25);
  EXPECT_THROW(ops::route(p, 2, 4, rule(RouterKind::top_k, 5, 1.0)), UsageError);
  EXPECT_THROW(ops::route(p, 2, 4, rule(RouterKind::top_k, 0, 1.0)), UsageError);
  EXPECT_THROW(ops::route(p, 2, 4, rule(RouterKind::top_k, 2, 0.0)), UsageError);
  EXPECT_THROW(ops::route(p, 2, 4, rule(RouterKind::top_k, 2, -1.0)), UsageError);
  EXPECT_THROW(ops::route(p, 2, 4, rule(RouterKind::top_k, 2, NAN)), UsageError);
  EXPECT_THROW(ops::parse_router("softmax"), UsageError);
}

// ---- gradients of the routing arithmetic (decisions held fixed) -------------------------

TEST(MoeGradient, RenormalisedGates) {
  const std::int64_t N = 6, E = 5;
  Tensor probs = random_tensor("gates.p", {N * E}, 0.5, 0.1);  // away from ties with this seed
  const std::vector<double> r_proj = random_values("gates.r", 64);
  for (double cf : {ops::kDropless, 0.5}) {
    const Routing routing = ops::route(as_vector(probs), N, E, rule(RouterKind::top_k, 2, cf));
    const auto loss = [&] {
      const Routing again = ops::route(as_vector(probs), N, E, rule(RouterKind::top_k, 2, cf));
      EXPECT_EQ(again.token, routing.token) << "a perturbation changed the routing: a tie";
      const std::vector<double> g = ops::routing_gates(as_vector(probs), routing);
      double l = 0;
      for (std::size_t a = 0; a < g.size(); ++a) l += g[a] * r_proj[a];
      return l;
    };
    std::vector<double> dg(static_cast<std::size_t>(routing.assignments()));
    std::copy_n(r_proj.begin(), dg.size(), dg.begin());
    std::vector<double> dp(static_cast<std::size_t>(N * E), 0.0);
    ops::routing_gates_backward(dg, as_vector(probs), routing, dp);
    Tensor analytic = zeros("gates.dp", {N * E});
    for (std::size_t i = 0; i < dp.size(); ++i) analytic.set(static_cast<std::int64_t>(i), dp[i]);
    expect_gradient(analytic, probs, loss, cf > 1 ? "renormalised gates (dropless)" : "renormalised gates (drops)");
  }
}

TEST(MoeGradient, BalancingAndZLoss) {
  const std::int64_t N = 7, E = 4;
  Tensor logits = random_tensor("aux.logits", {N * E});
  const RoutingRule top2 = rule(RouterKind::top_k, 2, 1.0);
  const Routing routing = ops::route(softmax_rows(as_vector(logits), E), N, E, top2);
  // Balancing loss as a function of the probabilities, the counts fixed by the routing.
  Tensor probs = zeros("aux.p", {N * E});
  const std::vector<double> p0 = softmax_rows(as_vector(logits), E);
  for (std::size_t i = 0; i < p0.size(); ++i) probs.set(static_cast<std::int64_t>(i), p0[i]);
  std::vector<double> dp(p0.size(), 0.0);
  ops::balancing_loss(p0, routing, 0.01, 0.75, &dp);
  Tensor analytic = zeros("aux.dp", {N * E});
  for (std::size_t i = 0; i < dp.size(); ++i) analytic.set(static_cast<std::int64_t>(i), dp[i]);
  expect_gradient(analytic, probs, [&] { return ops::balancing_loss(as_vector(probs), routing, 0.01, 0.75, nullptr); },
                  "balancing loss");
  // z-loss of the logits.
  std::vector<double> dl(p0.size(), 0.0);
  ops::router_z_loss(as_vector(logits), N, E, 1e-3, 0.75, &dl);
  Tensor analytic_z = zeros("aux.dl", {N * E});
  for (std::size_t i = 0; i < dl.size(); ++i) analytic_z.set(static_cast<std::int64_t>(i), dl[i]);
  expect_gradient(analytic_z, logits, [&] { return ops::router_z_loss(as_vector(logits), N, E, 1e-3, 0.75, nullptr); },
                  "router z-loss");
}

// 16-bit rows go through float32: drows = gate times the dy of the row's token, dgates = that dy
// dotted with the row. Inputs are small multiples of 1/4 and 1/2, so every product and the
// four-term dots are exact in bfloat16 and float16: the results compare exactly.
TEST(MoeGradient, CombineRowsBackwardInSixteenBitsIsExact) {
  const std::int64_t N = 5, E = 3, C = 4;
  const std::vector<double> p = softmax_rows(random_values("rows16.logits", N * E), E);
  const Routing routing = ops::route(p, N, E, rule(RouterKind::top_k, 2, 1.0));
  const std::int64_t A = routing.assignments();
  const ops::RowMap map = ops::row_map(routing, MemorySpace::host);
  for (DataType type : {DataType::bfloat16, DataType::float16}) {
    Tensor rows = Tensor::empty("rows16.rows", {A, C}, type, MemoryCategory::workspace);
    Tensor gates = Tensor::empty("rows16.gates", {A}, type, MemoryCategory::workspace);
    Tensor dy = Tensor::empty("rows16.dy", {N, C}, type, MemoryCategory::workspace);
    Tensor drows = Tensor::empty("rows16.drows", {A, C}, type, MemoryCategory::workspace);
    Tensor dgates = Tensor::empty("rows16.dgates", {A}, type, MemoryCategory::workspace);
    for (std::int64_t a = 0; a < A; ++a) {
      gates.set(a, 0.25 * static_cast<double>(1 + a % 3));
      for (std::int64_t c = 0; c < C; ++c) rows.set(a * C + c, static_cast<double>((a + 2 * c) % 5 - 2));
    }
    for (std::int64_t n = 0; n < N; ++n)
      for (std::int64_t c = 0; c < C; ++c) dy.set(n * C + c, 0.5 * static_cast<double>((3 * n + c) % 7 - 3));
    ops::combine_rows_backward(dy, rows, gates, map, drows, dgates);
    for (std::int64_t a = 0; a < A; ++a) {
      const std::int64_t n = routing.token[static_cast<std::size_t>(a)];
      const double gate = 0.25 * static_cast<double>(1 + a % 3);
      double dot = 0;
      for (std::int64_t c = 0; c < C; ++c) {
        const double g = 0.5 * static_cast<double>((3 * n + c) % 7 - 3);
        dot += g * static_cast<double>((a + 2 * c) % 5 - 2);
        EXPECT_EQ(drows.at(a * C + c), gate * g) << name_of(type) << " row " << a << ", column " << c;
      }
      EXPECT_EQ(dgates.at(a), dot) << name_of(type) << " row " << a;
    }
  }
}

TEST(MoeGradient, GatherAndCombineRows) {
  const std::int64_t N = 5, E = 3, C = 4;
  const std::vector<double> p = softmax_rows(random_values("rows.logits", N * E), E);
  const Routing routing = ops::route(p, N, E, rule(RouterKind::top_k, 2, 0.7));  // some dropped
  ASSERT_GT(routing.dropped, 0);
  const std::int64_t A = routing.assignments();
  const ops::RowMap map = ops::row_map(routing, MemorySpace::host);
  Tensor x = random_tensor("rows.x", {N, C}), rows = random_tensor("rows.rows", {A, C});
  Tensor gates = random_tensor("rows.gates", {A});
  const Tensor r_rows = random_tensor("rows.r_rows", {A, C}), r_y = random_tensor("rows.r_y", {N, C});
  // gather
  const auto gather_loss = [&] {
    Tensor y = nans("rows.gathered", {A, C});
    ops::gather_rows_forward(x, map, y);
    return project(y, r_rows);
  };
  Tensor dx = nans("rows.dx", {N, C});
  ops::gather_rows_backward(r_rows, map, dx);
  expect_gradient(dx, x, gather_loss, "gather_rows");
  // combine
  const auto combine_loss = [&] {
    Tensor y = nans("rows.combined", {N, C});
    ops::combine_rows_forward(rows, gates, map, y);
    return project(y, r_y);
  };
  Tensor drows = nans("rows.drows", {A, C}), dgates = nans("rows.dgates", {A});
  ops::combine_rows_backward(r_y, rows, gates, map, drows, dgates);
  expect_gradient(drows, rows, combine_loss, "combine_rows (rows)");
  expect_gradient(dgates, gates, combine_loss, "combine_rows (gates)");
  // A token no expert took gets exactly zero.
  Tensor y = nans("rows.y", {N, C});
  ops::combine_rows_forward(rows, gates, map, y);
  for (std::int64_t n = 0; n < N; ++n) {
    bool routed = false;
    for (std::int64_t t : routing.token) routed |= t == n;
    if (!routed) {
      for (std::int64_t c = 0; c < C; ++c) EXPECT_EQ(y.at(n * C + c), 0.0) << "token " << n;
    }
  }
}

TEST(MoeBadInput, RowOpsRefuseMapsThatDoNotFit) {
  const std::vector<double> p = softmax_rows(random_values("bad.logits", 3 * 2), 2);
  const ops::RowMap map = ops::row_map(ops::route(p, 3, 2, rule(RouterKind::top_k, 1, ops::kDropless)), MemorySpace::host);
  Tensor x = random_tensor("bad.x", {4, 2}), y = zeros("bad.y", {3, 2});
  expect_refused([&] { ops::gather_rows_forward(x, map, y); }, {"gather_rows_forward", "4 tokens", "3 assignments"});
  Tensor rows = zeros("bad.rows", {3, 2}), gates = zeros("bad.gates", {2}), out = zeros("bad.out", {3, 2});
  expect_refused([&] { ops::combine_rows_forward(rows, gates, map, out); }, {"combine_rows_forward", "bad.gates"});
}

// ---- the layer --------------------------------------------------------------------------

namespace {

model::MoeConfig moe_config(const std::string& router, int experts, int k, double cf, bool shared = false) {
  return {.layers = {0}, .experts = experts, .top_k = k, .capacity_factor = cf, .router = router,
          .balance_coefficient = 0.05, .z_loss_coefficient = 0.01, .shared_expert = shared, .expert_hidden = 6};
}

// L = sum(y R) + the layer's own losses, for the MoE layer on x [B, T, C].
struct LayerProbe {
  model::MixtureOfExperts& layer;
  Tensor x, r;
  std::vector<std::int64_t> decisions;  // the base pass's assignment tokens and experts
  double loss(bool check_decisions) {
    const model::PassContext context{0, 0, true, 0};
    const Tensor y = layer.forward(x, context);
    const double l = project(y, r) + layer.take_auxiliary_loss(context);
    layer.release_saved(context);
    const model::MoePassStats& s = layer.statistics().back();
    std::vector<std::int64_t> now = s.token;
    now.insert(now.end(), s.expert.begin(), s.expert.end());
    if (check_decisions && now != decisions) ADD_FAILURE() << "a perturbation changed the routing (a tie)";
    layer.clear_statistics();
    return l;
  }
};

void check_layer_gradients(const model::MoeConfig& config, const std::string& what) {
  const std::int64_t B = 2, T = 5, C = 4;
  model::MixtureOfExperts layer("mlp", C, config, 0.0, DataType::float64, 0.5, 0.5, 99);
  LayerProbe probe{layer, random_tensor(what + ".x", {B, T, C}), random_tensor(what + ".r", {B, T, C}), {}};
  const model::PassContext context{0, 0, true, 0};
  layer.forward(probe.x, context);
  (void)layer.take_auxiliary_loss(context);
  {
    const model::MoePassStats& s = layer.statistics().back();
    probe.decisions = s.token;
    probe.decisions.insert(probe.decisions.end(), s.expert.begin(), s.expert.end());
    layer.clear_statistics();
  }
  const Tensor dx = layer.backward(probe.r, context);
  expect_gradient(dx, probe.x, [&] { return probe.loss(true); }, what + ": input");
  for (model::Parameter* p : layer.parameters())
    expect_gradient(p->gradient(), p->value, [&] { return probe.loss(true); }, what + ": " + p->name);
}

}  // namespace

TEST(MoeLayerGradient, TopKWithDrops) { check_layer_gradients(moe_config("top_k", 4, 2, 1.0), "top2 cf1"); }
TEST(MoeLayerGradient, TopOneDropless) { check_layer_gradients(moe_config("top_k", 3, 1, ops::kDropless), "top1"); }
TEST(MoeLayerGradient, SharedExpert) { check_layer_gradients(moe_config("top_k", 4, 2, 1.25, true), "shared"); }
TEST(MoeLayerGradient, ExpertChoice) { check_layer_gradients(moe_config("expert_choice", 4, 0, 1.0), "expert choice"); }
TEST(MoeLayerGradient, AuxFree) { check_layer_gradients(moe_config("aux_free", 4, 2, 1.0), "aux free"); }

TEST(MoeLayer, OneExpertEqualsTheDenseFeedForwardExactly) {
  for (DataType dtype : {DataType::float64, DataType::float32}) {
    const std::int64_t B = 3, T = 4, C = 8;
    model::MoeConfig config = moe_config("top_k", 1, 1, ops::kDropless);
    config.expert_hidden = 4 * C;
    config.z_loss_coefficient = 0;  // with one expert the z-loss still pulls on the router
    model::MixtureOfExperts moe("mlp", C, config, 0.2, dtype, 0.02, 0.01, 5);
    model::FeedForward dense("mlp", C, 4 * C, 0.2, dtype, 0.02, 0.01, 5);
    // The expert takes the dense layer's weights.
    const auto expert = moe.local_experts().at(0)->parameters();
    const auto whole = dense.parameters();
    ASSERT_EQ(expert.size(), whole.size());
    for (std::size_t i = 0; i < whole.size(); ++i) copy_into(expert[i]->value, whole[i]->value);
    const Tensor x = to_type(random_tensor("dense.x", {B, T, C}), dtype), dy = to_type(random_tensor("dense.dy", {B, T, C}), dtype);
    const model::PassContext context{3, 0, true, 7};
    const Tensor y_moe = moe.forward(x, context), y_dense = dense.forward(x, context);
    EXPECT_DOUBLE_EQ(moe.take_auxiliary_loss(context), config.balance_coefficient);  // f = P = 1
    EXPECT_EQ(y_moe.to_vector(), y_dense.to_vector()) << name_of(dtype);
    const Tensor dx_moe = moe.backward(dy, context), dx_dense = dense.backward(dy, context);
    EXPECT_EQ(dx_moe.to_vector(), dx_dense.to_vector()) << name_of(dtype);
    for (std::size_t i = 0; i < whole.size(); ++i)
      EXPECT_EQ(expert[i]->gradient().to_vector(), whole[i]->gradient().to_vector()) << whole[i]->name;
  }
}

TEST(MoeLayer, FaultsChangeTheResult) {
  const std::int64_t B = 2, T = 6, C = 4;
  const model::MoeConfig config = moe_config("top_k", 4, 2, 0.5);  // tokens dropped
  const Tensor x = random_tensor("faults.x", {B, T, C});
  const model::PassContext context{0, 0, false, 0};
  model::MixtureOfExperts clean("mlp", C, config, 0.0, DataType::float64, 0.5, 0.5, 3);
  const std::vector<double> y = clean.forward(x, context).to_vector();
  for (const char* fault : {"no_renormalise", "drop_residual"}) {
    model::MixtureOfExperts broken("mlp", C, config, 0.0, DataType::float64, 0.5, 0.5, 3, {},
                                   model::parse_moe_fault(fault));
    EXPECT_NE(broken.forward(x, context).to_vector(), y) << fault;
  }
  EXPECT_THROW(model::parse_moe_fault("wrong"), UsageError);
}

namespace {
// A float64 GPT of two blocks with MoE layers (4 experts, top-2) in `moe_layers`.
model::GptConfig small_moe_gpt(std::vector<int> moe_layers) {
  model::GptConfig g{.vocabulary = 32, .layers = 2, .hidden = 16, .heads = 2, .sequence = 8, .dtype = DataType::float64};
  g.moe.layers = std::move(moe_layers);
  g.moe.experts = 4;
  g.moe.top_k = 2;
  g.moe.capacity_factor = 1.25;
  return g;
}
}  // namespace

TEST(MoeModel, GptWithMoeLayersTrainsAndReportsItsBalancingLoss) {
  const model::GptConfig g = small_moe_gpt(model::every_kth_block(2, 2));  // block 1
  auto m = model::build_gpt(g);
  ASSERT_EQ(model::moe_layers(*m).size(), 1u);
  EXPECT_EQ(model::moe_layers(*m)[0]->name(), "blocks.1.mlp");
  model::AdamW optimizer({1e-2, 0.9, 0.999, 1e-8, 0.0}, DataType::float64);
  const auto batch = [&](int step) { return model::gpt_batch(g, static_cast<std::uint64_t>(step), 0, 8, 8); };
  // The loss includes the balancing losses: it exceeds the cross-entropy alone by them.
  {
    const model::Batch b = batch(0);
    const model::PassContext eval{0, 0, true, 0};
    const Tensor out = m->forward(b.inputs, eval);
    const double ce = m->loss(out, b.targets, b.normalizer, nullptr);
    const double aux = m->take_auxiliary_loss(eval);
    EXPECT_GT(aux, 0.0);
    EXPECT_NEAR(aux, model::moe_layers(*m)[0]->statistics().back().balancing_loss +
                         model::moe_layers(*m)[0]->statistics().back().z_loss, 1e-15);
    for (model::Layer* l : m->layers()) l->release_saved(eval);
    EXPECT_GT(ce, 0.0);
  }
  double first = 0, last = 0;
  for (int step = 0; step < 30; ++step) {
    const double loss = model::train_step(*m, optimizer, batch(step), static_cast<std::uint64_t>(step));
    if (step == 0) first = loss;
    last = loss;
  }
  EXPECT_LT(last, 0.7 * first);
}

// A pass's balancing and z-losses weigh its share of the global batch's sequences
// (PassContext::global_rows counts sequences, as the model's loss weighs its rows through
// Batch::normalizer): a pass of 8 sequences of 8 tokens in a batch of 16 adds half its losses.
TEST(MoeModel, BalancingLossesWeighThePassesShareOfSequences) {
  const model::GptConfig g = small_moe_gpt(model::every_kth_block(2, 2));
  auto m = model::build_gpt(g);
  const model::Batch b = model::gpt_batch(g, 0, 0, 8, 8);
  model::PassContext half{0, 0, true, 0};
  half.global_rows = 16;
  m->forward(b.inputs, half);
  const model::MoePassStats& s = model::moe_layers(*m)[0]->statistics().back();
  EXPECT_GT(s.balancing_loss + s.z_loss, 0.0);
  EXPECT_NEAR(m->take_auxiliary_loss(half), (s.balancing_loss + s.z_loss) * 8 / 16, 1e-15);
  for (model::Layer* l : m->layers()) l->release_saved(half);
}

// Loss scaling multiplies the balancing and z-losses as it does the model's loss: with the loss
// scaled by S = 2^10 (Batch::normalizer / S, PassContext::loss_scale = S) every gradient is S
// times the unscaled one, exactly (a power of two commutes with rounding in float64). A layer
// that left its own losses unscaled would give the router a gradient off by their share.
TEST(MoeModel, LossScalingScalesTheBalancingLosses) {
  model::GptConfig g = small_moe_gpt({0, 1});
  g.moe.balance_coefficient = 0.05;
  g.moe.z_loss_coefficient = 0.01;
  const double scale = 1024;
  const auto gradients = [&](double loss_scale, bool layers_scale) {
    auto m = model::build_gpt(g);
    model::Batch b = model::gpt_batch(g, 0, 0, 6, 6);
    b.normalizer /= loss_scale;
    model::PassContext context{0, 0, true, 0};
    context.loss_scale = layers_scale ? loss_scale : 1;
    const double loss = m->forward_backward(b, context);
    std::map<std::string, std::vector<double>> out;
    out["loss"] = {loss};
    for (model::Parameter* p : m->parameters()) out[p->name] = p->gradient().to_vector();
    return out;
  };
  const auto plain = gradients(1, true), scaled = gradients(scale, true), unscaled_aux = gradients(scale, false);
  std::size_t router_differs = 0;
  for (const auto& [name, values] : plain) {
    const std::vector<double>& s = scaled.at(name);
    ASSERT_EQ(s.size(), values.size()) << name;
    for (std::size_t i = 0; i < values.size(); ++i)
      ASSERT_EQ(s[i], scale * values[i]) << name << "[" << i << "]";
    if (name.find("router") != std::string::npos && unscaled_aux.at(name) != s) ++router_differs;
  }
  // The check can fail: the layers' losses left unscaled change both routers' gradients.
  EXPECT_EQ(router_differs, 2u);
}

TEST(MoeBadInput, ConfigurationsAreRefusedInOneLine) {
  model::GptConfig g;
  g.layers = 2;
  g.moe.layers = {0};
  g.moe.experts = 4;
  const auto refused = [&](auto change, const char* needle) {
    model::GptConfig c = g;
    change(c.moe);
    try {
      c.validate();
      ADD_FAILURE() << "accepted: " << needle;
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
    }
  };
  refused([](model::MoeConfig& m) { m.top_k = 5; }, "k = 5");
  refused([](model::MoeConfig& m) { m.top_k = 0; }, "k = 0");
  refused([](model::MoeConfig& m) { m.capacity_factor = 0; }, "capacity factor");
  refused([](model::MoeConfig& m) { m.capacity_factor = -2; }, "capacity factor");
  refused([](model::MoeConfig& m) { m.layers = {2}; }, "MoE layer 2 is beyond");
  refused([](model::MoeConfig& m) { m.layers = {1, 1}; }, "listed twice");
  refused([](model::MoeConfig& m) { m.router = "switch"; }, "unknown router");
  refused([](model::MoeConfig& m) { m.experts = 0; }, "at least one expert");
  EXPECT_THROW(model::every_kth_block(0, 4), UsageError);
  EXPECT_EQ(model::every_kth_block(2, 5), (std::vector<int>{1, 3}));
}
