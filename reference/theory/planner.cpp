// The step model of theory/planner.hpp: counts, the time and memory of a layout, the search;
// docs/planner.md derives each term. The descriptions it reads are in planner_inputs.cpp.
#include "reference/theory/planner.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "reference/core/error.hpp"
#include "reference/theory/context.hpp"
#include "reference/theory/parallel.hpp"

namespace parity::theory {

namespace {
// The counts in N: std::int64_t for the exact figure, double to see whether it fits in one.
template <typename N> N layer_parameters(const PlanModel& m) {
  const N h = static_cast<N>(m.hidden), kv = static_cast<N>(m.kv()) * static_cast<N>(m.head_size()), f = static_cast<N>(m.ffn());
  const N matrices = h * (h + 2 * kv) + h * h + (m.gated_mlp ? 3 : 2) * h * f;
  const N biases = m.bias ? (h + 2 * kv) + h + (m.gated_mlp ? 2 : 1) * f + h : 0;
  const N norms = 2 * (m.rms_norm ? 1 : 2) * h;
  return matrices + biases + norms;
}
// One MLP of the model's width (matrices and biases).
template <typename N> N mlp_parameters(const PlanModel& m) {
  const N h = static_cast<N>(m.hidden), f = static_cast<N>(m.ffn());
  return (m.gated_mlp ? 3 : 2) * h * f + (m.bias ? (m.gated_mlp ? 2 : 1) * f + h : 0);
}
template <typename N> N moe_layer_parameters(const PlanModel& m) {
  const N experts = static_cast<N>(m.experts);
  return layer_parameters<N>(m) - mlp_parameters<N>(m) + experts * mlp_parameters<N>(m) + static_cast<N>(m.hidden) * experts;
}
template <typename N> N parameters(const PlanModel& m) {
  const N h = static_cast<N>(m.hidden), moe = static_cast<N>(m.moe_layers());
  return static_cast<N>(m.vocabulary) * h * (m.tied ? 1 : 2) + (m.learned_positions ? static_cast<N>(m.sequence) * h : 0) +
         (static_cast<N>(m.layers) - moe) * layer_parameters<N>(m) + moe * moe_layer_parameters<N>(m) +
         (m.rms_norm ? 1 : 2) * h;
}
std::int64_t mlp_parameters(const PlanModel& m) { return mlp_parameters<std::int64_t>(m); }
}  // namespace

std::int64_t plan_layer_parameters(const PlanModel& m) { return layer_parameters<std::int64_t>(m); }
std::int64_t plan_moe_layer_parameters(const PlanModel& m) { return moe_layer_parameters<std::int64_t>(m); }
std::int64_t plan_parameters(const PlanModel& m) { return parameters<std::int64_t>(m); }
double plan_parameters_estimate(const PlanModel& m) { return parameters<double>(m); }

double plan_layer_forward_flops(const PlanModel& m, bool moe) {
  const double s = static_cast<double>(m.sequence), h = static_cast<double>(m.hidden);
  const double kv = static_cast<double>(m.kv()) * static_cast<double>(m.head_size()), f = static_cast<double>(m.ffn());
  const double mlp = 2 * s * h * f * (m.gated_mlp ? 3 : 2);
  const double products = 2 * s * h * (h + 2 * kv) + 2 * s * h * h + (moe ? m.top_k * mlp + 2 * s * h * m.experts : mlp);
  return products + 4 * s * s * h;  // scores and weighted sum, whole (not causal halves)
}

double plan_layers_forward_flops(const PlanModel& m) {
  return (m.layers - m.moe_layers()) * plan_layer_forward_flops(m) + m.moe_layers() * plan_layer_forward_flops(m, true);
}

double plan_head_forward_flops(const PlanModel& m) {
  return 2.0 * static_cast<double>(m.sequence) * static_cast<double>(m.hidden) * static_cast<double>(m.vocabulary);
}

// ---- layouts -------------------------------------------------------------------------------------

std::string name_of(Recompute r) { return r == Recompute::none ? "none" : r == Recompute::selective ? "selective" : "full"; }

std::string name_of(PlanSchedule s) {
  return s == PlanSchedule::zb_h1 ? "zb-h1" : s == PlanSchedule::zb_h2 ? "zb-h2" : s == PlanSchedule::zb_v ? "zb-v" : "1f1b";
}

std::string PlanLayout::describe() const {
  std::string text = "tp" + std::to_string(tp) + " pp" + std::to_string(pp) + " dp" + std::to_string(dp) +
                     (ep > 1 ? " ep" + std::to_string(ep) : "") + (cp > 1 ? " cp" + std::to_string(cp) : "") + " v" +
                     std::to_string(v) + " mb" + std::to_string(micro_batch) + " zero" + std::to_string(zero) + " " +
                     name_of(recompute) + (sp ? " sp" : "") + (flash ? "" : " unfused") + (overlap ? "" : " no-overlap");
  if (schedule != PlanSchedule::one_f_one_b) text.append(" ").append(name_of(schedule));
  return text;
}

std::string plan_layout_problem(const PlanModel& m, const PlanCluster& c, const PlanLayout& l, int gpus,
                                std::int64_t global_batch) {
  const auto n = [](std::int64_t x) { return std::to_string(x); };
  if (l.tp < 1 || l.pp < 1 || l.dp < 1 || l.v < 1 || l.micro_batch < 1) return "tp, pp, dp, v and micro_batch must be at least 1";
  if (l.zero < 0 || l.zero > 3) return "zero=" + n(l.zero) + " is outside 0-3";
  if (m.heads % l.tp != 0 || m.kv() % l.tp != 0) return "tp=" + n(l.tp) + " does not divide the heads (" + n(m.heads) + ", " + n(m.kv()) + " key/value)";
  if (l.cp < 1) return "cp must be at least 1";
  if (static_cast<std::int64_t>(l.tp) * l.pp * l.dp * l.cp != gpus)
    return "tp x pp x dp x cp = " + n(static_cast<std::int64_t>(l.tp) * l.pp * l.dp * l.cp) + " is not the " + n(gpus) + " GPUs";
  if (l.cp > 1 && m.sequence % (2 * l.cp) != 0)
    return "cp=" + n(l.cp) + ": the sequence " + n(m.sequence) + " is not a multiple of 2 x cp = " + n(2 * l.cp) +
           " (causally balanced chunks)";
  if (l.tp > c.gpus_per_node) return "tp=" + n(l.tp) + " spans nodes of " + n(c.gpus_per_node) + " GPUs";
  if (static_cast<std::int64_t>(l.pp) * l.v > m.layers)
    return "pp x v = " + n(static_cast<std::int64_t>(l.pp) * l.v) + " is more than the " + n(m.layers) + " layers";
  if (l.v > 1 && l.pp == 1) return "v=" + n(l.v) + " needs pp > 1";
  if (l.ep > 1 && m.experts == 0) return "ep=" + n(l.ep) + " needs a model with experts (this one has none)";
  if (l.ep < 1 || (l.ep > 1 && (m.experts % l.ep != 0 || l.dp % l.ep != 0)))
    return "ep=" + n(l.ep) + " must divide the experts (" + n(m.experts) + ") and dp (" + n(l.dp) + ")";
  if (l.sp && l.tp == 1) return "sequence parallelism needs tp > 1";
  if (l.sp && m.sequence % l.tp != 0) return "tp=" + n(l.tp) + " does not divide the sequence for sp";
  if (global_batch % (static_cast<std::int64_t>(l.dp) * l.micro_batch) != 0)
    return "the global batch " + n(global_batch) + " is not a multiple of dp x micro_batch = " + n(static_cast<std::int64_t>(l.dp) * l.micro_batch);
  const std::int64_t m_batches = global_batch / (static_cast<std::int64_t>(l.dp) * l.micro_batch);
  if (l.schedule == PlanSchedule::one_f_one_b && l.v > 1 && m_batches % l.pp != 0)
    return "interleaving needs the micro-batches (" + n(m_batches) + ") a multiple of pp";
  if (l.schedule != PlanSchedule::one_f_one_b && l.pp == 1) return "the schedule " + name_of(l.schedule) + " needs pp > 1";
  if ((l.schedule == PlanSchedule::zb_h1 || l.schedule == PlanSchedule::zb_h2) && l.v != 1)
    return "the schedule " + name_of(l.schedule) + " holds one stage a rank (v=" + n(l.v) + ", not 1)";
  if (l.schedule == PlanSchedule::zb_v && l.v != 2) return "the schedule zb-v holds two chunks a rank (v=" + n(l.v) + ", not 2)";
  return "";
}

namespace {

// The tensor cores' time for `count` products M x N x K: tiles of 128 x 256 spread over the
// multiprocessors in waves (a partly empty last wave costs a whole one) at the large products'
// fraction of the peak.
double tensor_core_seconds(const PlanCluster& c, double M, double N, double K, double count, double efficiency) {
  const double tiles = std::ceil(M / 128) * std::ceil(N / 256) * count;
  const double waves = std::ceil(tiles / c.multiprocessors);
  const double filled = tiles / (waves * c.multiprocessors);
  const double flops = 2 * M * N * K * count;
  return flops / (c.peak_TFLOPs * 1e12 * efficiency * filled);
}

}  // namespace

double plan_product_seconds(const PlanCluster& c, double M, double N, double K, double count) {
  if (!c.rates.gemm.empty()) return count * c.rates.gemm_seconds(M, N, K);  // measured on the machine
  const double memory = 2 * (M * K + K * N + M * N) * count / (c.memory_GBps * 1e9 * c.elementwise_efficiency);
  return std::max(tensor_core_seconds(c, M, N, K, count, c.gemm_efficiency), memory);
}

namespace {

// A fused attention kernel's products (FlashAttention): the scores and probabilities stay in
// on-chip tiles, so the products take their tensor-core time alone (its memory traffic, the
// queries, keys, values and output, is a few s x head-size tiles) at the cluster's attention
// efficiency; measured products where the cluster was calibrated.
double fused_product_seconds(const PlanCluster& c, double M, double N, double K, double count = 1) {
  if (!c.rates.gemm.empty()) return count * c.rates.gemm_seconds(M, N, K);
  return tensor_core_seconds(c, M, N, K, count, c.attention_efficiency > 0 ? c.attention_efficiency : c.gemm_efficiency);
}

// Forward and backward (input and weight gradients) of y[M, N] = x[M, K] w[K, N].
double product_pass_seconds(const PlanCluster& c, double M, double N, double K, bool backward) {
  if (!backward) return plan_product_seconds(c, M, N, K);
  return plan_product_seconds(c, M, K, N) + plan_product_seconds(c, K, N, M);
}

double elementwise_seconds(const PlanCluster& c, double bytes) {
  return bytes / (c.memory_GBps * 1e9 * c.elementwise_efficiency);
}

// A ring (or pairwise) collective moving `fraction` x bytes per GPU over `steps` messages on a
// link. The fraction of the link it reaches: `collective`'s measured by size in a calibrated
// cluster (at the link's level where measured there), else the cluster's one figure.
//
// `lanes`: how many GPUs' links the collective's bytes leave a node on. A group with k members
// in every node runs its ring as k channels, each crossing between nodes through another of
// those GPUs' network links (NCCL: a multi-node all-reduce's bus bandwidth approaches the node's
// network links together, 8 x 25 GB/s on a DGX A100, not one GPU's), and the hops inside the
// node carry the same bytes over its own link, which bounds the sum.
double ring_seconds(const PlanCluster& c, const PlanLink& link, double bytes, double fraction, int steps,
                    const char* collective, int lanes = 1) {
  const std::string level = &link == &c.node ? "node" : &link == &c.network ? "network" : "";
  const double efficiency = c.rates.collective_efficiency_at(bytes, c.collective_efficiency, collective, level);
  const double bandwidth = lanes > 1 ? std::min(lanes * link.bandwidth_GBps, c.node.bandwidth_GBps) : link.bandwidth_GBps;
  return fraction * bytes / (bandwidth * 1e9 * efficiency) + steps * link.latency_us * 1e-6;
}

double all_reduce_seconds(const PlanCluster& c, const PlanLink& link, double bytes, int n, int lanes = 1) {
  if (n <= 1) return 0;
  return ring_seconds(c, link, bytes, 2.0 * (n - 1) / n, 2 * (n - 1), "all_reduce", lanes);
}

// An all-gather or a reduce-scatter of a `bytes` buffer over n GPUs.
double chunked_seconds(const PlanCluster& c, const PlanLink& link, double bytes, int n, const char* collective,
                       int lanes = 1) {
  if (n <= 1) return 0;
  return ring_seconds(c, link, bytes, (n - 1.0) / n, n - 1, collective, lanes);
}

// The lanes a group of n GPUs that spans nodes leaves each node on: the members the node that
// holds fewest of them holds. `whole` is what a node holds when the group fills it; a stage's
// group need not start at a node's first GPU (tp 1, dp 12: 8 in one node, 4 in the next), so
// a node holds a common divisor of n and `whole` at the least.
int slowest_node_members(int whole, int n) { return std::gcd(std::max(1, whole), std::max(1, n)); }

struct LayerTimes {
  double forward = 0, backward = 0, tp_forward = 0, tp_backward = 0, attention_forward = 0;
  double weight_grad = 0;  // of backward, the weight gradients' products
  double ep_forward = 0, ep_backward = 0;  // MoE all-to-all
  double cp_forward = 0, cp_backward = 0;  // ring attention's exposed key/value passes
};

// One transformer layer on one GPU for a micro-batch of b sequences; an MoE layer's experts
// take its tp group's tokens split over the group (experts are not split over tp), each token
// top_k times, padded to the capacity factor, over its E/ep local experts.
LayerTimes layer_times(const PlanModel& m, const PlanCluster& c, const PlanLayout& l, bool moe) {
  const double b = l.micro_batch, s = static_cast<double>(m.sequence), h = static_cast<double>(m.hidden);
  const double t = l.tp, hd = static_cast<double>(m.head_size()), kv = static_cast<double>(m.kv()) * hd;
  // With cp a GPU holds s / cp of the sequence: its queries attend to keys of the whole sequence.
  const double s_local = s / l.cp;
  const double f = static_cast<double>(m.ffn()), tokens = b * s_local, heads = m.heads / t;
  // An MoE layer's rows through the experts on this GPU: its share of the tp group's tokens, each
  // top_k times, padded to the capacity factor.
  const double assignments = tokens / t * m.top_k * std::min(m.capacity_factor, static_cast<double>(m.experts));
  const double local_experts = moe ? static_cast<double>(m.experts) / l.ep : 0;
  LayerTimes out;
  for (bool backward : {false, true}) {
    double products = 0;
    // A linear layer's products (count of them), and of its backward the weight gradient's.
    const auto linear = [&](double M, double N, double K, double count = 1) {
      products += count * product_pass_seconds(c, M, N, K, backward);
      if (backward) out.weight_grad += count * plan_product_seconds(c, K, N, M);
    };
    linear(tokens, (h + 2 * kv) / t, h);
    linear(tokens, h, h / t);
    if (moe) {
      const double per_expert = assignments / local_experts;  // rows each local expert multiplies
      linear(per_expert, f * (m.gated_mlp ? 2 : 1), h, local_experts);
      linear(per_expert, h, f, local_experts);
      linear(tokens / t, static_cast<double>(m.experts), h);  // the router
    } else {
      linear(tokens, f * (m.gated_mlp ? 2 : 1) / t, h);
      linear(tokens, h, f / t);
    }
    // Scores and weighted sum per head: [s, hd] x [hd, s] and [s, s] x [s, hd]. Backward: twice
    // the products, and FlashAttention's recomputation of the scores half as much again. The
    // mask is causal: unfused attention multiplies the whole square, writing the scores to
    // memory, and masks it; FlashAttention keeps them on chip and skips the tiles above the
    // diagonal, so it runs the lower half and the diagonal's tiles (plan_flash_causal_share), for
    // each GPU's queries (with cp the chunks are causally balanced, so each GPU holds the same
    // share).
    const double core_forward =
        l.flash ? plan_flash_causal_share(s) *
                      (fused_product_seconds(c, s_local, s, hd, b * heads) + fused_product_seconds(c, s_local, hd, s, b * heads))
                : plan_product_seconds(c, s_local, s, hd, b * heads) + plan_product_seconds(c, s_local, hd, s, b * heads);
    const double core = backward ? (l.flash ? 2.5 : 2) * core_forward : core_forward;
    // Element-wise traffic in 16 bits: the softmax over the scores with its scale, mask and
    // dropout (read and written about 4.5 times in forward, twice that in backward); two norms
    // (read, written: 2 each), two residual adds (two read, one written: 3 each) and two
    // dropouts (read, written, a byte of mask: 2.5 each) on the hidden states (replicated over
    // tp without sp); the MLP's activation.
    const double scores = l.flash ? 0 : b * heads * s_local * s;  // FlashAttention keeps them on chip
    const double hidden_states = tokens * h / (l.sp ? t : 1);
    const double activation = (moe ? assignments : tokens / t) * f * (m.gated_mlp ? 3 : 2);
    const double forward_bytes = 2 * (4.5 * scores + (m.dropout ? 15 : 10) * hidden_states + activation);
    const double elementwise = elementwise_seconds(c, (backward ? 2 : 1) * forward_bytes);
    (backward ? out.backward : out.forward) = products + core + elementwise;
    if (l.cp > 1) {
      // Ring attention's passes of a chunk's keys and values (backward: again, with their
      // gradients going home; theory/context.hpp, 16 bits), cp - 1 steps forward and cp back,
      // hidden behind the attention they feed; what the core does not cover is exposed.
      const PlanLink& cp_link = static_cast<std::int64_t>(l.tp) * l.cp <= c.gpus_per_node ? c.node : c.network;
      const ContextBytes ring_bytes = context_attention_bytes("ring", b, s_local, h / t, kv / t, heads, l.cp, 2, 4);
      const double steps = backward ? l.cp : l.cp - 1;
      const double ring = (backward ? ring_bytes.backward : ring_bytes.forward) /
                              (cp_link.bandwidth_GBps * 1e9 * c.collective_efficiency) +
                          steps * cp_link.latency_us * 1e-6;
      (backward ? out.cp_backward : out.cp_forward) = std::max(0.0, ring - core);
    }
    // Selective recompute redoes the core (with FlashAttention it stores nothing to drop).
    if (!backward) out.attention_forward = l.flash ? 0 : core + elementwise_seconds(c, 2 * 4.5 * scores);
  }
  // Tensor parallelism: two all-reduces of the hidden states in forward and two in backward (or,
  // with sp, all-gathers and reduce-scatters moving the same bytes), within a node.
  const PlanLink& link = l.tp <= c.gpus_per_node ? c.node : c.network;
  const double hidden_bytes = 2 * tokens * h;
  const double one = l.sp ? chunked_seconds(c, link, hidden_bytes, l.tp, "all_gather") +
                                chunked_seconds(c, link, hidden_bytes, l.tp, "reduce_scatter")
                          : all_reduce_seconds(c, link, hidden_bytes, l.tp);
  out.tp_forward = 2 * one;
  out.tp_backward = 2 * one;
  if (moe && l.ep > 1) {
    // Dispatch and combine: each sends the (ep-1)/ep of its assignments' hidden states that go
    // to other ranks, in forward and again in backward; within a node when the ep group (ranks
    // tp x cp apart in the grid) fits in one.
    const PlanLink& ep_link = static_cast<std::int64_t>(l.tp) * l.cp * l.ep <= c.gpus_per_node ? c.node : c.network;
    const double one_way = ring_seconds(c, ep_link, 2 * assignments * h, (l.ep - 1.0) / l.ep, l.ep - 1, "all_to_all");
    out.ep_forward = 2 * one_way;
    out.ep_backward = 2 * one_way;
  }
  return out;
}

}  // namespace

double plan_flash_causal_share(double sequence) {
  // The key tiles FlashAttention's causal kernels step over (FlashAttention-2 and -3 take 128 keys
  // at head sizes 64-128): the diagonal's tiles are computed whole.
  constexpr double kFlashTile = 128;
  return std::min(1.0, (sequence + kFlashTile) / (2 * sequence));
}

PlanPrediction plan_predict(const PlanModel& m, const PlanCluster& c, const PlanLayout& l, std::int64_t global_batch) {
  PlanPrediction p;
  const double b = l.micro_batch, s_whole = static_cast<double>(m.sequence), h = static_cast<double>(m.hidden);
  const double s = s_whole / l.cp;  // the tokens of a sequence a GPU holds
  const int replicas = l.dp * l.cp;  // ranks holding the same parameters (cp shares them as dp does)
  // Stages need not hold equal layers (Llama 3 405B's 126 over 16): the slowest holds ceil(L / (pp v)) a chunk.
  const double t = l.tp, a = m.heads;
  const double layers_per_stage = std::ceil(static_cast<double>(m.layers) / (l.pp * l.v)) * l.v;
  const std::int64_t micro_batches = global_batch / (static_cast<std::int64_t>(l.dp) * l.micro_batch);
  p.micro_batches = static_cast<int>(micro_batches);
  // ---- memory per GPU (the first stage holds the most activations; the last the logits)
  // The stage's share of MoE layers (every moe_every-th block), their experts held whole, E/ep
  // of them a GPU, and sharded by ZeRO over the dp/ep ranks that hold the same experts.
  const double moe_share = static_cast<double>(m.moe_layers()) / m.layers;
  const double stage_moe = layers_per_stage * moe_share, stage_dense = layers_per_stage - stage_moe;
  const double expert_parameters = static_cast<double>(plan_moe_layer_parameters(m) - plan_layer_parameters(m)) +
                                   static_cast<double>(mlp_parameters(m));  // every expert and the router
  const double shared_parameters = static_cast<double>(plan_layer_parameters(m) - mlp_parameters(m));
  const double per_stage = stage_dense * static_cast<double>(plan_layer_parameters(m)) + stage_moe * shared_parameters +
                           static_cast<double>(m.vocabulary) * h;  // a stage's layers and a vocabulary table
  const double on_gpu = per_stage / t;
  const double experts_on_gpu = stage_moe * expert_parameters / l.ep;
  const ModelStateBytes state = zero_model_state_bytes(l.zero, static_cast<std::int64_t>(on_gpu),
                                                       static_cast<std::int64_t>(on_gpu), replicas, StateBytes{});
  const ModelStateBytes experts = zero_model_state_bytes(l.zero, static_cast<std::int64_t>(experts_on_gpu),
                                                         static_cast<std::int64_t>(experts_on_gpu), replicas / l.ep, StateBytes{});
  p.parameter_bytes = state.parameters + experts.parameters;
  p.gradient_bytes = state.gradients + experts.gradients;
  p.optimizer_bytes = state.optimizer_state + experts.optimizer_state;
  // Activations of one layer and micro-batch in 16 bits (Korthikanti et al. 2022), the MLP's
  // share scaled to its width: sbh(10 + 24/t + 5as/(ht)) without sp, sbh(34 + 5as/h)/t with.
  // Of the 10 kept whole without sp, 2 are the two dropout masks (none without dropout); of the
  // 24 split, 8 are attention's queries, keys, values and output, 4 + 4 kv/a with fewer
  // key/value heads; and 16 the MLP's.
  const double mlp = static_cast<double>(m.ffn()) * (m.gated_mlp ? 1.5 : 1) / (4 * h);
  const double whole_part = m.dropout ? 10 : 8, attention_part = 4 + 4 * static_cast<double>(m.kv()) / a;
  // (The scores of a GPU's queries span the whole sequence: 5 a s_whole / (h t) per token held.)
  const double per_layer_split = (attention_part + 16 * mlp) / t, attention_scores = l.flash ? 0 : 5 * a * s_whole / (h * t);
  double layer_bytes = s * b * h * (l.sp ? whole_part / t : whole_part) + s * b * h * per_layer_split;
  // An MoE layer's experts keep their top_k x capacity-factor rows of the tp group's tokens split over it.
  if (m.experts > 0)
    layer_bytes += moe_share * s * b * h * 16 * mlp / t * (m.top_k * std::min(m.capacity_factor, static_cast<double>(m.experts)) - 1);
  if (l.recompute == Recompute::none) layer_bytes += s * b * h * attention_scores;
  const double input_bytes = 2 * s * b * h / (l.sp ? t : 1);
  // 1F1B: the first stage holds pp micro-batches of its layers (interleaved: 1 + (pp-1)/(pp v)
  // times more); full recompute keeps each layer's input and one layer's working set.
  // Zero-bubble schedules as Qi et al. count them: ZB-H1 and ZB-V 1F1B's pp, ZB-H2 2 pp - 1.
  const double in_flight = std::min<double>(l.schedule == PlanSchedule::zb_h2 ? 2.0 * l.pp - 1
                                            : l.schedule != PlanSchedule::one_f_one_b ? l.pp
                                            : l.pp * (l.v > 1 ? 1 + (l.pp - 1.0) / (l.pp * l.v) : 1.0),
                                            static_cast<double>(micro_batches));
  const double stage_layers = layers_per_stage * in_flight;  // layers x micro-batches alive
  p.activation_bytes = l.recompute == Recompute::full
                           ? stage_layers * input_bytes + layer_bytes + s * b * h * attention_scores
                           : stage_layers * layer_bytes;
  // The last stage's logits in float32 for the loss.
  p.activation_bytes = std::max(p.activation_bytes, 4 * s * b * static_cast<double>(m.vocabulary) / t);
  p.fits = p.memory_bytes() <= usable_memory_bytes(c);

  // ---- time of a step
  // A stage's layers as their average: dense and MoE layers in the model's proportion.
  const LayerTimes dense = layer_times(m, c, l, false);
  const LayerTimes expert = m.experts > 0 ? layer_times(m, c, l, true) : dense;
  const auto mix = [&](double LayerTimes::*field) { return (1 - moe_share) * dense.*field + moe_share * expert.*field; };
  LayerTimes layer;
  for (double LayerTimes::*field : {&LayerTimes::forward, &LayerTimes::backward, &LayerTimes::tp_forward,
                                    &LayerTimes::tp_backward, &LayerTimes::attention_forward, &LayerTimes::ep_forward,
                                    &LayerTimes::ep_backward, &LayerTimes::cp_forward, &LayerTimes::cp_backward,
                                    &LayerTimes::weight_grad})
    layer.*field = mix(field);
  // The recompute's own work (its collectives are counted with the others': with full recompute
  // a layer's forward collectives run twice).
  const bool full = l.recompute == Recompute::full;
  double recompute = 0;
  if (full) recompute = layer.forward;
  if (l.recompute == Recompute::selective) recompute = layer.attention_forward;
  const double head_forward = product_pass_seconds(c, b * s, static_cast<double>(m.vocabulary) / t, h, false);
  const double head_backward = product_pass_seconds(c, b * s, static_cast<double>(m.vocabulary) / t, h, true);
  const double head_loss = elementwise_seconds(c, 3 * 4 * b * s * static_cast<double>(m.vocabulary) / t);
  // The slowest stage (the last: its layers and the head) per micro-batch.
  const double stage_compute = layers_per_stage * (layer.forward + layer.backward + recompute) + head_forward +
                               head_backward + head_loss;
  const double stage_tp = layers_per_stage * (layer.tp_forward * (full ? 2 : 1) + layer.tp_backward);
  // Between stages: one activation forward and one gradient back per micro-batch and chunk,
  // scattered over tp (Megatron's scatter-gather: each GPU of the group sends 1/t of it, across
  // nodes when tp fills them, and the receivers all-gather it over NVLink).
  const PlanLink& pp_link = static_cast<std::int64_t>(l.tp) * l.dp < c.gpus_per_node ? c.node : c.network;
  const double message = 2 * b * s * h / t / (pp_link.bandwidth_GBps * 1e9 * c.collective_efficiency) +
                         pp_link.latency_us * 1e-6 +
                         chunked_seconds(c, c.node, 2 * b * s * h, l.tp, "all_gather");
  const double p2p = l.pp > 1 ? 2.0 * l.v * message : 0;
  const double stage_ep = layers_per_stage * (layer.ep_forward * (full ? 2 : 1) + layer.ep_backward);
  const double stage_cp = layers_per_stage * (layer.cp_forward * (full ? 2 : 1) + layer.cp_backward);
  const double per_micro_batch = stage_compute + stage_tp + stage_ep + stage_cp + p2p;
  p.stage_forward_s = layers_per_stage * (layer.forward + layer.tp_forward + layer.ep_forward + layer.cp_forward) + head_forward;
  p.stage_backward_s = per_micro_batch - p2p - p.stage_forward_s;
  p.stage_weight_grad_s = layers_per_stage * layer.weight_grad + plan_product_seconds(c, h, static_cast<double>(m.vocabulary) / t, b * s);
  p.message_s = l.pp > 1 ? message : 0;
  // The fill and drain: 1F1B's (pp - 1) / v micro-batches; a zero-bubble schedule's weight
  // gradients fill part of it (Qi et al. 2023: ZB-H1 (p - 1)(F + I - W), ZB-H2 (p - 1)(F + I -
  // 2W), ZB-V the latter over its half-size chunks; I = B - W). The simulator times them exactly.
  const double W = p.stage_weight_grad_s, F = p.stage_forward_s + message, I = p.stage_backward_s - W + message;
  const double fill_s = l.schedule == PlanSchedule::one_f_one_b ? (l.pp - 1.0) / l.v * per_micro_batch
                        : l.schedule == PlanSchedule::zb_h1    ? (l.pp - 1.0) * (F + I - W)
                        : l.schedule == PlanSchedule::zb_h2    ? (l.pp - 1.0) * std::max(0.0, F + I - 2 * W)
                                                               : (l.pp - 1.0) * std::max(0.0, F + I - 2 * W) / 2;
  p.compute_s = micro_batches * stage_compute;
  p.recompute_s = micro_batches * layers_per_stage * recompute;
  p.tp_comm_s = micro_batches * stage_tp;
  p.pp_comm_s = micro_batches * p2p;
  p.ep_comm_s = micro_batches * stage_ep;
  p.cp_comm_s = micro_batches * stage_cp;
  p.bubble_s = fill_s;
  // Data parallelism: the gradients' all-reduce (ZeRO: reduce-scatter and all-gather, the same
  // bytes) after the pipeline's flush, over the GPUs of a dp group: within a node when tp x dp
  // fits in one, else over the network.
  // The grid's order is tp, cp, ep, dp: a dp group is the cp x dp ranks tp apart; the ranks
  // holding the same experts are its cp ranks times the dp / ep ranks tp x cp x ep apart. Both
  // span the same nodes; across them each leaves a node on as many lanes as it has GPUs there.
  const PlanLink& dp_link = static_cast<std::int64_t>(l.tp) * replicas <= c.gpus_per_node ? c.node : c.network;
  const bool across = &dp_link == &c.network;
  const int G = c.gpus_per_node, tp_per_node = l.tp < G ? G / l.tp : 1;
  const int dp_lanes = across ? slowest_node_members(tp_per_node, replicas) : 1;
  const int expert_lanes =
      across ? slowest_node_members(std::min(l.cp, tp_per_node) * std::max(1, tp_per_node / (l.cp * l.ep)), replicas / l.ep) : 1;
  if (!l.overlap) {
    p.dp_comm_s = all_reduce_seconds(c, dp_link, 2 * on_gpu, replicas, dp_lanes);
    if (experts_on_gpu > 0)  // the experts' gradients over the dp / ep ranks holding the same experts
      p.dp_comm_s += all_reduce_seconds(c, dp_link, 2 * experts_on_gpu, replicas / l.ep, expert_lanes);
  } else {
    // Overlapped (Megatron-core's and PyTorch DDP's default): gradients in buckets of 40M
    // parameters (Megatron-core's bucket size) reduced as the last micro-batch's backward
    // produces them, one at a time; what that backward does not hide is exposed.
    constexpr double kBucketBytes = 2 * 40e6;
    const double dense_buckets = std::max(1.0, std::ceil(2 * on_gpu / kBucketBytes));
    const double expert_buckets = experts_on_gpu > 0 ? std::max(1.0, std::ceil(2 * experts_on_gpu / kBucketBytes)) : 0;
    const double reduce = dense_buckets * all_reduce_seconds(c, dp_link, 2 * on_gpu / dense_buckets, replicas, dp_lanes) +
                          (expert_buckets > 0 ? expert_buckets * all_reduce_seconds(c, dp_link, 2 * experts_on_gpu / expert_buckets,
                                                                                    replicas / l.ep, expert_lanes)
                                              : 0);
    const double last_backward = layers_per_stage * (layer.backward + layer.tp_backward + recompute) + head_backward;
    const double buckets = dense_buckets + expert_buckets;
    p.dp_comm_s = overlapped_exposed_seconds(last_backward, buckets, reduce / buckets);
  }
  // ZeRO-3 gathers the parameters again for every forward and backward.
  if (l.zero == 3)
    p.dp_comm_s += 2 * micro_batches * chunked_seconds(c, dp_link, 2 * on_gpu, replicas, "all_gather", dp_lanes);
  // The mixed-precision optimizer step, per parameter held, in bytes read and written: the
  // 16-bit gradient widened into the float32 main gradient (2 + 4), unscaled with the inf/NaN
  // check (4 + 4), its norm for clipping (4) and the clip (4 + 4), Adam on the float32 master,
  // gradient and moments (16 read, 12 written), the master rounded into the 16-bit weights
  // (4 + 2) and the 16-bit gradients zeroed (2): 62 bytes, as Megatron-LM's optimizer passes go.
  constexpr double kOptimizerBytes = 6 + 8 + 4 + 8 + 28 + 6 + 2;
  p.optimizer_s = elementwise_seconds(c, kOptimizerBytes * (on_gpu / (l.zero >= 1 ? replicas : 1) +
                                                            experts_on_gpu / (l.zero >= 1 ? replicas / l.ep : 1)));
  p.step_s = p.compute_s + p.tp_comm_s + p.pp_comm_s + p.ep_comm_s + p.cp_comm_s + p.bubble_s + p.dp_comm_s + p.optimizer_s;
  const double tokens = static_cast<double>(global_batch) * s_whole;
  p.tokens_per_s = tokens / p.step_s;
  const double forward = static_cast<double>(global_batch) * (plan_layers_forward_flops(m) + plan_head_forward_flops(m));
  p.model_flops = 3 * forward;
  const double recompute_flops = l.recompute == Recompute::full ? static_cast<double>(global_batch) * plan_layers_forward_flops(m)
                                 : l.recompute == Recompute::selective && !l.flash
                                     ? static_cast<double>(global_batch) * m.layers * 4 * s_whole * s_whole * h
                                     : 0;
  p.hardware_flops = p.model_flops + recompute_flops;
  const double gpus = static_cast<double>(l.tp) * l.pp * l.dp * l.cp;
  p.mfu = p.model_flops / p.step_s / (gpus * c.peak_TFLOPs * 1e12);
  p.hfu = p.hardware_flops / p.step_s / (gpus * c.peak_TFLOPs * 1e12);
  p.tflops_per_gpu = p.hardware_flops / p.step_s / gpus / 1e12;
  return p;
}

std::vector<PlanCandidate> plan_search(const PlanModel& m, const PlanCluster& c, int gpus, std::int64_t global_batch,
                                       const PlanFixed& fixed, std::size_t* evaluated) {
  std::vector<PlanCandidate> out;
  std::size_t count = 0;
  const auto values = [](const std::optional<int>& f, std::vector<int> all) { return f ? std::vector<int>{*f} : all; };
  std::vector<int> tps, pps, vs;
  for (int t = 1; t <= c.gpus_per_node; t *= 2) tps.push_back(t);
  for (int p = 1; p <= m.layers && p <= gpus; ++p)
    if (gpus % p == 0) pps.push_back(p);
  for (int v = fixed.interleaved ? 2 : 1; v <= std::min(m.layers, 16); ++v) vs.push_back(v);  // interleaved: v > 1
  std::vector<int> cps;
  // cp 1 always (nothing to split); more when the sequence splits into 2 cp chunks.
  for (int x = 1; x <= gpus && (x == 1 || 2 * x <= m.sequence); x *= 2) cps.push_back(x);
  for (int tp : values(fixed.tp, tps))
    for (int pp : values(fixed.pp, pps))
    for (int cp : values(fixed.cp, cps)) {
      if (gpus % (static_cast<std::int64_t>(tp) * pp * cp) != 0) continue;
      const int dp = gpus / (tp * pp * cp);
      if (fixed.dp && *fixed.dp != dp) continue;
      std::vector<int> eps = {1};
      for (int e = 2; m.experts > 0 && e <= std::min(m.experts, dp); e *= 2)
        if (m.experts % e == 0 && dp % e == 0) eps.push_back(e);
      for (int ep : values(fixed.ep, eps))
      for (int v : values(fixed.v, vs))
        for (int mb : values(fixed.micro_batch, {1, 2, 4, 8}))
          for (int zero : values(fixed.zero, {0, 1, 2, 3}))
            for (Recompute r : fixed.recompute ? std::vector<Recompute>{*fixed.recompute}
                                               : std::vector<Recompute>{Recompute::none, Recompute::selective, Recompute::full})
              for (bool sp : fixed.sp ? std::vector<bool>{*fixed.sp} : std::vector<bool>{false, true}) {
                PlanLayout l{tp, pp, dp, sp, v, mb, zero, r, fixed.flash.value_or(true), ep, cp, fixed.overlap.value_or(true),
                             fixed.schedule.value_or(PlanSchedule::one_f_one_b)};
                // With FlashAttention selective recompute is no recompute (no scores are kept): searched once.
                if (l.flash && r == Recompute::selective && !fixed.recompute) continue;
                if (!plan_layout_problem(m, c, l, gpus, global_batch).empty()) continue;
                ++count;
                out.push_back({l, plan_predict(m, c, l, global_batch)});
              }
    }
  if (evaluated) *evaluated = count;
  return out;
}

std::optional<PlanCandidate> plan_best(const PlanModel& m, const PlanCluster& c, int gpus, std::int64_t global_batch,
                                       const PlanFixed& fixed) {
  std::optional<PlanCandidate> best;
  for (PlanCandidate& x : plan_search(m, c, gpus, global_batch, fixed))
    if (x.prediction.fits && (!best || x.prediction.tokens_per_s > best->prediction.tokens_per_s)) best = std::move(x);
  return best;
}

std::optional<PlanCandidate> plan_published(const PublishedRun& run, const PlanCluster& c) {
  return plan_best(run.model, c, run.gpus, run.global_batch, published_fixed(run));
}

PlanFixed published_fixed(const PublishedRun& run) {
  PlanFixed fixed;
  fixed.tp = run.tp;
  fixed.pp = run.pp;
  fixed.cp = 1;
  fixed.ep = 1;
  fixed.recompute = Recompute::full;
  fixed.sp = false;
  fixed.zero = 0;
  fixed.flash = false;    // 2021: a fused softmax between the products, no FlashAttention
  fixed.overlap = false;  // 2021: the data-parallel all-reduce after the pipeline's flush
  return fixed;
}

}  // namespace parity::theory
