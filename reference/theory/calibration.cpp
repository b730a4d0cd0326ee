// Interpolation between measured rates, and the reference GPT step composed from them
// (theory/calibration.hpp).
#include "reference/theory/calibration.hpp"

#include <algorithm>
#include <cmath>
#include <iterator>

#include "reference/core/error.hpp"
#include "reference/core/text.hpp"
#include "reference/theory/collectives.hpp"
#include "reference/theory/model.hpp"
#include "reference/theory/tensor.hpp"

namespace parity::theory {

std::int64_t calibrated_row_length(const std::string& op) {
  if (op.rfind("layernorm", 0) == 0) return 128;
  if (op.rfind("softmax", 0) == 0) return 128;
  if (op.rfind("cross_entropy", 0) == 0) return 512;
  return 1;
}

double calibrated_op_arrays(const std::string& op) {
  if (op == "fill" || op == "cross_entropy_forward") return 1;
  if (op == "add" || op == "gelu_backward" || op == "layernorm_backward" || op == "softmax_backward") return 3;
  if (op == "adamw") return 4;
  if (op == "gelu_forward" || op == "layernorm_forward" || op == "softmax_forward" || op == "dropout_forward" ||
      op == "dropout_backward" || op == "cross_entropy_backward")
    return 2;
  throw UsageError("no footprint is known for op " + op);
}

namespace {

// Where x falls on the measured sides: the index below it and the weight of the one above
// (log-spaced; clamped to the ends).
std::pair<std::size_t, double> bracket(double x) {
  const std::size_t n = std::size(kGemmSides);
  const double lo = std::log(static_cast<double>(kGemmSides[0]));
  const double step = std::log(static_cast<double>(kGemmSides[1]) / static_cast<double>(kGemmSides[0]));
  const double at = std::clamp((std::log(std::max(x, 1.0)) - lo) / step, 0.0, static_cast<double>(n - 1));
  const auto i = std::min(static_cast<std::size_t>(at), n - 2);
  return {i, at - static_cast<double>(i)};
}


// y at x from (x, y) points sorted by x, all positive: linear in log x of log y between the two
// points around x, the end point's y beyond either end.
double log_log_interpolate(const std::vector<std::pair<double, double>>& points, double x) {
  if (x <= points.front().first) return points.front().second;
  for (std::size_t i = 1; i < points.size(); ++i)
    if (x <= points[i].first) {
      const auto& [x0, y0] = points[i - 1];
      const auto& [x1, y1] = points[i];
      const double w = std::log(x / x0) / std::log(x1 / x0);
      return std::exp((1 - w) * std::log(y0) + w * std::log(y1));
    }
  return points.back().second;
}

}  // namespace

double Calibration::gemm_seconds(double m, double n, double k) const {
  const std::size_t sides = std::size(kGemmSides);
  if (gemm.size() != sides * sides * sides) throw UsageError("the calibration holds no complete grid of matrix products");
  // The grid in the order bench calibrate measures it: m slowest, k fastest.
  const auto log_rate = [&](std::size_t i, std::size_t j, std::size_t l) {
    const GemmSample& g = gemm[(i * sides + j) * sides + l];
    return std::log(2.0 * static_cast<double>(g.m) * static_cast<double>(g.n) * static_cast<double>(g.k) / g.seconds);
  };
  const auto [i, wi] = bracket(m);
  const auto [j, wj] = bracket(n);
  const auto [l, wl] = bracket(k);
  double value = 0;
  for (int di = 0; di < 2; ++di)
    for (int dj = 0; dj < 2; ++dj)
      for (int dl = 0; dl < 2; ++dl) {
        const double w = (di ? wi : 1 - wi) * (dj ? wj : 1 - wj) * (dl ? wl : 1 - wl);
        if (w > 0) value += w * log_rate(i + static_cast<std::size_t>(di), j + static_cast<std::size_t>(dj), l + static_cast<std::size_t>(dl));
      }
  return 2.0 * m * n * k / std::exp(value);
}

double Calibration::op_seconds(const std::string& op, double elements) const {
  std::vector<std::pair<double, double>> points;  // (elements, seconds per element)
  for (const OpSample& s : ops)
    if (s.op == op) points.emplace_back(static_cast<double>(s.elements), s.seconds / static_cast<double>(s.elements));
  if (points.empty()) throw UsageError("the calibration has no measurement of " + op);
  std::sort(points.begin(), points.end());
  // Below the shortest length measured: a call's fixed cost plus a rate, the line through the two
  // shortest (a per-element rate alone would price a call of a few elements at almost nothing).
  if (points.size() >= 2 && elements < points[0].first) {
    const auto [x0, r0] = points[0];
    const auto [x1, r1] = points[1];
    const double t0 = x0 * r0, t1 = x1 * r1;
    const double rate = std::max(0.0, (t1 - t0) / (x1 - x0));
    return std::max(0.0, t0 - rate * x0) + rate * std::max(elements, 0.0);
  }
  return elements * log_log_interpolate(points, std::max(elements, 1.0));
}

double Calibration::element_bytes() const { return dtype == "float64" ? 8.0 : 4.0; }

double Calibration::stream_seconds_per_byte(double footprint) const {
  if (stream.empty()) throw UsageError("the calibration has no stream samples");
  std::vector<std::pair<double, double>> points;  // (footprint, seconds per byte), by growing footprint (validate)
  for (const StreamSample& s : stream) {
    const double bytes = 3.0 * static_cast<double>(s.elements) * element_bytes();
    points.emplace_back(bytes, s.seconds / bytes);
  }
  return log_log_interpolate(points, footprint);
}

double Calibration::fetch_seconds(double bytes, double working_set) const {
  if (stream.empty() || bytes <= 0) return 0;
  return bytes * std::max(0.0, stream_seconds_per_byte(std::max(working_set, bytes)) - stream_seconds_per_byte(bytes));
}

double collective_model_seconds(const std::string& collective, int n, double bytes, double alpha, double beta) {
  const AlphaBeta m{alpha, beta};
  if (collective == "all_reduce") return n <= 1 ? 0 : ring_all_reduce_seconds(n, bytes, m);
  if (collective == "all_gather" || collective == "reduce_scatter") return n <= 1 ? 0 : ring_chunked_seconds(n, bytes, m);
  if (collective == "all_to_all") return n <= 1 ? 0 : pairwise_all_to_all_seconds(n, bytes, m);
  throw UsageError("no alpha-beta model of the collective " + quoted_input(collective));
}

double Calibration::collective_efficiency_at(double bytes, double otherwise, const std::string& collective,
                                             const std::string& level) const {
  auto found = level.empty() ? collective_efficiency.end() : collective_efficiency.find(level + ":" + collective);
  if (found == collective_efficiency.end() || found->second.empty()) found = collective_efficiency.find(collective);
  if (found == collective_efficiency.end() || found->second.empty()) found = collective_efficiency.find("all_reduce");
  if (found == collective_efficiency.end() || found->second.empty()) return otherwise;
  const auto& e = found->second;  // sorted by size (bench calibrate measures them so)
  const double x = std::log(std::max(bytes, 1.0));
  if (x <= std::log(e.front().first)) return e.front().second;
  if (x >= std::log(e.back().first)) return e.back().second;
  for (std::size_t i = 0; i + 1 < e.size(); ++i) {
    const double x0 = std::log(e[i].first), x1 = std::log(e[i + 1].first);
    if (x <= x1) return e[i].second + (e[i + 1].second - e[i].second) * (x - x0) / (x1 - x0);
  }
  return e.back().second;
}

double Calibration::best_gemm_GFLOPs() const {
  double best = 0;
  for (const GemmSample& g : gemm)
    best = std::max(best, 2.0 * static_cast<double>(g.m) * static_cast<double>(g.n) * static_cast<double>(g.k) / g.seconds / 1e9);
  return best;
}

void Calibration::validate() const {
  const std::size_t sides = std::size(kGemmSides);
  if (gemm.size() != sides * sides * sides)
    throw UsageError("the calibration holds " + std::to_string(gemm.size()) + " matrix products, not the grid's " +
                     std::to_string(sides * sides * sides));
  for (std::size_t i = 0; i < gemm.size(); ++i) {
    const GemmSample& g = gemm[i];
    const std::int64_t want_m = kGemmSides[i / (sides * sides)], want_n = kGemmSides[i / sides % sides],
                       want_k = kGemmSides[i % sides];
    if (g.m != want_m || g.n != want_n || g.k != want_k || !(g.seconds > 0) || !std::isfinite(g.seconds))
      throw UsageError("the calibration's product " + std::to_string(i) + " is not " + std::to_string(want_m) + "x" +
                       std::to_string(want_n) + "x" + std::to_string(want_k) + " with a time above 0");
  }
  for (const char* op : kCalibratedOps) {
    const bool found = std::any_of(ops.begin(), ops.end(), [&](const OpSample& s) { return s.op == op; });
    if (!found) throw UsageError(std::string("the calibration has no measurement of ") + op);
  }
  for (const OpSample& s : ops)
    if (s.elements < 1 || !(s.seconds > 0) || !std::isfinite(s.seconds))
      throw UsageError("the calibration's " + s.op + " over " + std::to_string(s.elements) + " elements has no time above 0");
  for (std::size_t i = 0; i < stream.size(); ++i)
    if (stream[i].elements < 1 || !(stream[i].seconds > 0) || !std::isfinite(stream[i].seconds) ||
        (i > 0 && stream[i].elements <= stream[i - 1].elements))
      throw UsageError("the calibration's stream sample over " + std::to_string(stream[i].elements) +
                       " elements has no time above 0 or is out of order");
}

namespace {

// Accumulates a step's costs by category and pass.
class StepCosts {
 public:
  // working_set: the bytes the step touches (Calibration::fetch_seconds).
  StepCosts(const Calibration& cal, int top_level_layers, double working_set)
      : cal_(cal), layers_(static_cast<std::size_t>(top_level_layers)), working_set_(working_set) {}
  bool backward = false;  // the pass the next costs belong to
  int layer = -1;         // the top-level layer they belong to (-1: none, zero_grad)
  bool weight = false;    // they are weight-gradient work

  // executed: the share of the product's FLOPs the kernel runs (causal attention's live half);
  // the FLOPs counted are the whole product's, the formulas' convention.
  void product(double& into, double m, double n, double k, double count = 1, double executed = 1) {
    const double bytes = cal_.element_bytes() * (m * k + k * n + m * n);
    add(into, count * (executed * cal_.gemm_seconds(m, n, k) + cal_.fetch_seconds(bytes, working_set_)));
    flops_ += count * 2 * m * n * k;
  }
  void op(double& into, const char* name, double elements) {
    const double bytes = cal_.element_bytes() * calibrated_op_arrays(name) * elements;
    add(into, cal_.op_seconds(name, elements) + cal_.fetch_seconds(bytes, working_set_));
  }
  // A linear layer [rows, in] -> [rows, out] with a bias: forward, the bias broadcast into the
  // output (a fill) then the product accumulated; backward, dx = dy W^T, then the weight
  // gradients: dW += x^T dy and the bias gradient's column sums (an add). Without a bias the
  // forward's output is zeroed (a fill) all the same, and backward has no column sums.
  void linear(StepEstimate& e, double rows, double in, double out, bool pass_backward, bool bias = true) {
    backward = pass_backward;
    if (!pass_backward) {
      op(e.elementwise_s, "fill", rows * out);
      product(e.products_s, rows, out, in);
      return;
    }
    product(e.products_s, rows, in, out);
    weight = true;
    product(e.products_s, in, out, rows);
    if (bias) op(e.elementwise_s, "add", rows * out);
    weight = false;
  }
  void finish(StepEstimate& e) const {
    e.product_flops = static_cast<std::int64_t>(std::llround(flops_));
    e.backward_s = backward_s_;
    e.layer_costs = layers_;
  }

 private:
  void add(double& into, double seconds) {
    into += seconds;
    if (backward) backward_s_ += seconds;
    if (layer < 0) return;
    LayerCost& l = layers_.at(static_cast<std::size_t>(layer));
    (backward ? l.backward_s : l.forward_s) += seconds;
    if (weight) l.weight_grad_s += seconds;
  }
  const Calibration& cal_;
  std::vector<LayerCost> layers_;
  double working_set_ = 0;
  double flops_ = 0, backward_s_ = 0;
};

bool holds_moe(const StepSplit& split, int block) {
  return std::any_of(split.moe.begin(), split.moe.end(), [&](const MoeBlockWork& w) { return w.block == block; });
}

// An MoE block's feed-forward on one rank (reference/model/moe.cpp): the router (a linear layer
// without bias) and its softmax over the experts on the rank's N tokens; its assignments'
// rows gathered and, weighted by their gates, combined back (row copies at the add's rate, as
// the embedding's); each local expert's MLP on the rows it was sent (one row of zeros when
// none). Backward in the reverse order: the combine's and gather's gradients, the experts',
// the softmax's and the router's.
void cost_moe_block(StepCosts& cost, StepEstimate& e, const MoeBlockWork& w, double N, double C, bool backward) {
  const double E = w.experts, F = w.expert_hidden;
  cost.linear(e, N, C, E, backward, false);
  cost.op(e.elementwise_s, backward ? "softmax_backward" : "softmax_forward", N * E);
  cost.op(e.elementwise_s, "add", 2 * w.assignments * C);  // gather and combine (their gradients backward)
  for (const double given : w.expert_rows) {
    const double r = std::max(1.0, given);
    cost.linear(e, r, C, F, backward);
    cost.op(e.elementwise_s, backward ? "gelu_backward" : "gelu_forward", r * F);
    cost.linear(e, r, F, C, backward);
  }
}

}  // namespace

double reference_gpt_working_set(const model::GptConfig& config, std::int64_t batch, bool adamw, const StepSplit& split) {
  const double P = static_cast<double>(split.parameters > 0 ? split.parameters : gpt_parameters(config));
  const double bytes = static_cast<double>(size_of(config.dtype));
  const double tokens = static_cast<double>(batch) * static_cast<double>(config.sequence);
  const double vocabulary = static_cast<double>(config.vocabulary) / split.tp;
  return P * bytes * (adamw ? 4 : 3) +
         config.layers * static_cast<double>(tensor_parallel_block_activation_bytes(config, batch, split.tp, split.sp)) +
         2 * tokens * vocabulary * bytes;
}

StepEstimate reference_gpt_step(const model::GptConfig& config, std::int64_t batch, const Calibration& cal, bool adamw,
                                const StepSplit& split) {
  const double t = split.tp;
  const double B = static_cast<double>(batch), T = static_cast<double>(config.sequence),
               C = static_cast<double>(config.hidden), H = config.heads, V = static_cast<double>(config.vocabulary) / t;
  const double hs = C / H, N = B * T, heads = B * H / t;
  const double P = static_cast<double>(split.parameters > 0 ? split.parameters : gpt_parameters(config));
  const double rows = split.sp ? N / t : N;  // the norms', residual adds' and embedding's rows
  StepEstimate e;
  StepCosts cost(cal, config.layers + 3, reference_gpt_working_set(config, batch, adamw, split));  // embedding, blocks, ln_f, head
  cost.op(e.elementwise_s, "fill", P);  // zero_grad
  for (const bool backward : {false, true}) {
    cost.backward = backward;
    cost.layer = 0;
    // The embedding's gather with positions; backward, its scatter into the tables' gradients.
    cost.weight = backward;
    cost.op(e.elementwise_s, "add", rows * C);
    cost.weight = false;
    for (int layer = 0; layer < config.layers; ++layer) {
      cost.backward = backward;
      cost.layer = 1 + layer;
      const double attention_before = e.attention_s;
      cost.op(e.elementwise_s, backward ? "layernorm_backward" : "layernorm_forward", 2 * rows * C);  // two norms
      cost.op(e.elementwise_s, "add", 2 * rows * C);  // two residual adds
      // Dropout on the attention's and the MLP's outputs before their adds.
      if (config.dropout > 0) cost.op(e.elementwise_s, backward ? "dropout_backward" : "dropout_forward", 2 * rows * C);
      if (!holds_moe(split, layer)) cost.op(e.elementwise_s, backward ? "gelu_backward" : "gelu_forward", 4 * N * C / t);
      // Attention per head (reference/simd/attention.cpp), each product over the live keys
      // only, the causal half T (T + 1) / 2 of the T^2 pairs, at the rate of its shape (a model:
      // the kernel's own loops taken to run at the calibrated product's rate): forward
      // the scores Q K^T, the softmax and the weighted sum P V; backward dP = dO V^T, the
      // softmax's gradient, dV = P^T dO, dQ = dS K, dK = dS^T Q.
      const double live = (T + 1) / (2 * T);
      if (!backward) {
        cost.product(e.attention_s, T, T, hs, heads, live);
        cost.product(e.attention_s, T, hs, T, heads, live);
        cost.op(e.attention_s, "softmax_forward", heads * T * (T + 1) / 2);
      } else {
        cost.product(e.attention_s, T, T, hs, heads, live);
        cost.product(e.attention_s, T, hs, T, 3 * heads, live);
        cost.op(e.attention_s, "softmax_backward", heads * T * (T + 1) / 2);
      }
      // Column-parallel qkv and fc (their outputs split), row-parallel proj and fc2 (their inputs).
      const auto moe = std::find_if(split.moe.begin(), split.moe.end(), [&](const MoeBlockWork& w) { return w.block == layer; });
      cost.linear(e, N, C, 3 * C / t, backward);
      cost.linear(e, N, C / t, C, backward);
      if (moe == split.moe.end()) {
        cost.linear(e, N, C, 4 * C / t, backward);
        cost.linear(e, N, 4 * C / t, C, backward);
      } else {
        cost_moe_block(cost, e, *moe, N, C, backward);  // an MoE block's MLP is its router and experts
      }
      if (!backward && layer == 0) e.attention_forward_s = e.attention_s - attention_before;
    }
    cost.backward = backward;
    cost.layer = config.layers + 1;
    cost.op(e.elementwise_s, backward ? "layernorm_backward" : "layernorm_forward", rows * C);
    cost.layer = config.layers + 2;
    // The head (its weight the token table, or its own; its vocabulary split over tp): logits =
    // x W^T; dx = dlogits W, dW += dlogits^T x. Training computes the loss with its gradient, in
    // one pass.
    if (!backward) {
      cost.product(e.products_s, N, V, C);
    } else {
      cost.op(e.elementwise_s, "cross_entropy_backward", N * V);
      cost.product(e.products_s, N, C, V);
      cost.weight = true;
      cost.product(e.products_s, V, C, N);
      cost.weight = false;
    }
  }
  cost.backward = false;
  cost.layer = -1;
  if (adamw) cost.op(e.optimizer_s, "adamw", P);
  else for (int i = 0; i < 2; ++i) cost.op(e.optimizer_s, "add", P);
  cost.finish(e);
  e.block_forward_s = config.layers > 0 ? e.layer_costs[1].forward_s : 0;
  return e;
}

StepEstimate reference_mlp_step(const model::MlpConfig& config, std::int64_t batch, const Calibration& cal, bool adamw) {
  const double B = static_cast<double>(batch), P = static_cast<double>(mlp_parameters(config));
  // The working set: parameters, gradients and the optimizer's moments; every layer's output
  // (and its GeLU's) kept for backward.
  const double bytes = static_cast<double>(size_of(config.dtype));
  const double working_set = P * bytes * (adamw ? 4 : 3) +
                             B * bytes * (2.0 * static_cast<double>(config.width) * (config.layers - 1) + static_cast<double>(config.outputs));
  StepEstimate e;
  StepCosts cost(cal, config.layers, working_set);
  cost.op(e.elementwise_s, "fill", P);  // zero_grad
  for (const bool backward : {false, true}) {
    for (int i = 0; i < config.layers; ++i) {
      cost.layer = i;
      const bool last = i == config.layers - 1;
      const double in = static_cast<double>(i == 0 ? config.inputs : config.width);
      const double out = static_cast<double>(last ? config.outputs : config.width);
      cost.linear(e, B, in, out, backward);
      if (!last) cost.op(e.elementwise_s, backward ? "gelu_backward" : "gelu_forward", B * out);
    }
    // The loss with its gradient: an element-wise pass over the outputs (at the add's rate), the
    // last layer's.
    if (backward) cost.op(e.elementwise_s, "add", B * static_cast<double>(config.outputs));
  }
  cost.backward = false;
  cost.layer = -1;
  if (adamw) cost.op(e.optimizer_s, "adamw", P);
  else for (int i = 0; i < 2; ++i) cost.op(e.optimizer_s, "add", P);
  cost.finish(e);
  return e;
}

double overlapped_exposed_seconds(double backward_seconds, double buckets, double bucket_seconds) {
  if (!(buckets >= 1)) return 0;
  const double end = std::max(backward_seconds / buckets + buckets * bucket_seconds, backward_seconds + bucket_seconds);
  return end - backward_seconds;
}

}  // namespace parity::theory
