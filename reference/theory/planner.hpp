// A model of a whole training step at cluster scale: memory per GPU by category and time per
// step by part, for a dense transformer (GPT, or Llama-style with grouped-query attention,
// gated MLP, RMSNorm, no biases) on a cluster of nodes of GPUs, under a layout (tp with or
// without sequence parallelism, pp with 1F1B or interleaved 1F1B, dp with ZeRO 0-3,
// micro-batch, recompute none, selective or full). Pure functions of numbers: `parity plan`
// searches it, and its derivations and assumptions are in docs/planner.md.
//
// Conventions (the report and `parity plan` name them):
//   model FLOPs    forward + backward of every matrix product, attention scores and weighted
//                  sum counted whole (not causal halves), as Megatron-LM counts them: for a GPT,
//                  72 B s L h^2 (1 + s/6h + V/12hL) a step;
//   hardware FLOPs model FLOPs plus the recompute's forward: with full recompute Megatron's
//                  96 B s L h^2 (1 + s/6h + V/16hL) (Narayanan et al. 2021, Eq. 3), the
//                  convention of its published TFLOP/s per GPU.
#pragma once

#include <cstdint>
#include <optional>
#include <map>
#include <string>
#include <vector>

#include "reference/theory/calibration.hpp"

namespace parity::theory {

struct PlanModel {
  std::string name;
  int layers = 0;
  std::int64_t hidden = 0;
  int heads = 0;
  int kv_heads = 0;           // 0: heads (multi-head attention)
  std::int64_t ffn_hidden = 0;  // 0: 4 x hidden
  bool gated_mlp = false;     // SwiGLU: three matrices of h x ffn_hidden
  std::int64_t vocabulary = 0;
  std::int64_t sequence = 0;
  bool tied = true;           // LM head shares the token table
  bool bias = true;           // linear layers and norms have biases
  bool rms_norm = false;      // RMSNorm (a weight per norm) instead of LayerNorm (weight and bias)
  bool learned_positions = true;  // a position table of sequence x hidden (false: rotary, none)
  // Dropout after attention's projection and after the MLP (with its masks kept for backward),
  // and on the scores where they are stored: GPT-3 and Megatron's runs train with it, Llama 3
  // without.
  bool dropout = true;
  // Mixture of experts (0 experts: dense): every moe_every-th block's MLP is `experts` MLPs of
  // ffn_hidden behind a router, each token sent to top_k of them, each expert taking up to
  // capacity_factor x its even share (its padding is computed too).
  int experts = 0;
  int top_k = 2;
  double capacity_factor = 1.25;
  int moe_every = 1;
  int moe_layers() const { return experts > 0 ? layers / moe_every : 0; }

  int kv() const { return kv_heads > 0 ? kv_heads : heads; }
  std::int64_t ffn() const { return ffn_hidden > 0 ? ffn_hidden : 4 * hidden; }
  std::int64_t head_size() const { return hidden / heads; }
  // Throws UsageError (one line) for zero sizes, heads not dividing hidden, kv_heads not dividing heads.
  void validate() const;
};

// "key=value,key=value" over a preset or from nothing (keys: layers, hidden, heads, kv_heads,
// ffn_hidden, gated_mlp, vocab, sequence, tied, bias, norm (layernorm|rmsnorm), positions
// (learned|rotary), dropout, experts, top_k, capacity_factor, moe_every); a preset name alone; or a JSON file of the same keys. UsageError for an
// unknown key or preset, a bad value, a missing size.
PlanModel parse_plan_model(const std::string& text);
// Presets: gpt3-1.7b ... gpt3-1t (Narayanan et al. 2021, Table 1), gpt3-175b, llama3-8b, llama3-70b,
// llama3-405b, mixtral-8x7b.
const std::vector<PlanModel>& plan_model_presets();

std::int64_t plan_parameters(const PlanModel& m);
// The same count in floating point, which does not overflow: PlanModel::validate refuses a model
// whose count (or a GPU's bytes of it) would not fit in 64 bits.
double plan_parameters_estimate(const PlanModel& m);
// Parameters of one dense transformer layer, and of one MoE layer (its experts and router).
std::int64_t plan_layer_parameters(const PlanModel& m);
std::int64_t plan_moe_layer_parameters(const PlanModel& m);
// Model FLOPs of one forward of one sequence, per layer (matrix products and attention; an MoE
// layer counts its router and top_k experts) and for the LM head, and of all the layers.
double plan_layer_forward_flops(const PlanModel& m, bool moe = false);
double plan_layers_forward_flops(const PlanModel& m);
double plan_head_forward_flops(const PlanModel& m);

// The most GPUs a plan takes (parity plan --gpus), and so the most a node may hold.
inline constexpr int kPlanMostGpus = 1 << 20;

// One level of the network a GPU reaches others over.
struct PlanLink {
  double bandwidth_GBps = 0;  // per GPU, one direction
  double latency_us = 0;
};
struct PlanCluster {
  std::string name;
  std::string gpu;
  double peak_TFLOPs = 0;            // dense, in `peak_type`
  double gemm_efficiency = 0;        // the largest matrix products' rate over the peak
  int multiprocessors = 0;           // for wave quantisation of the products' tiles
  double memory_GB = 0;              // per GPU (10^9 bytes)
  double memory_GBps = 0;            // HBM bandwidth
  double elementwise_efficiency = 0;  // element-wise kernels' bandwidth over the HBM peak
  int gpus_per_node = 0;
  PlanLink node;                     // within a node (NVLink)
  PlanLink network;                  // across nodes (InfiniBand, one NIC a GPU)
  double collective_efficiency = 0;  // a ring's achieved bus bandwidth over the link's
  // Measured (parity bench calibrate): the products' time by shape replaces the tile and wave
  // model when present; the ops' are kept for the record.
  Calibration rates;
  std::string note;  // where the figures come from (a calibrated file says)
  // The dense peak of each type the tensor cores run (datasheet figures; a calibrated cluster
  // has the type it measured alone); peak_TFLOPs is peak_by_type[peak_type].
  std::string peak_type = "bf16";
  std::map<std::string, double> peak_by_type;
  // A fused attention kernel's (FlashAttention's) executed products, forward and backward, over
  // the dense peak: such kernels reach less than large products do (softmax between the
  // products, the causal diagonal, a backward of five products). 0: gemm_efficiency.
  double attention_efficiency = 0;
  // What a device keeps beside training (optional field runtime_reserve_GB): kRuntimeReserveGB
  // on a GPU; a cluster of CPU cores (bench calibrate on CPU ranks) has no CUDA context: 0.
  double runtime_reserve_GB = 4;
};
// What a GPU of the cluster holds for training: its memory less the runtime's reserve (a GPU's
// default: kRuntimeReserveGB for the CUDA context, NCCL's buffers and the allocator's
// fragmentation); a cluster must have more.
inline constexpr double kRuntimeReserveGB = 4;
inline double usable_memory_bytes(const PlanCluster& c) { return (c.memory_GB - c.runtime_reserve_GB) * 1e9; }
// A matrix product M x N x K (`count` of them) in 16 bits on the cluster: at the measured rate of
// its shape where the cluster was calibrated, else the larger of its tensor-core time (tiles of
// 128 x 256 spread over the multiprocessors in waves, a partly empty last wave costing a whole
// one, at the large products' fraction of the peak) and its memory time (operands and result
// once, at the element-wise fraction of HBM).
double plan_product_seconds(const PlanCluster& c, double M, double N, double K, double count = 1);
// The share of the scores' s x s square FlashAttention's causal kernels compute: the lower half
// and the diagonal's 128-key tiles whole, (s + 128) / 2s (1 at s <= 128).
double plan_flash_causal_share(double sequence);

// a100-80gb-dgx, h100-sxm-dgx; a JSON file of the same fields. UsageError for an unknown name,
// a missing or unknown field.
PlanCluster parse_plan_cluster(const std::string& text);
// The cluster with its products at `type`'s dense peak (bf16, fp16, fp8, tf32, fp32, fp64):
// UsageError, naming the types it has, when the cluster has no peak for it, and for a
// calibrated cluster any type but the one its products were measured in.
PlanCluster with_precision(PlanCluster cluster, const std::string& type);
const std::vector<PlanCluster>& plan_cluster_presets();

enum class Recompute { none, selective, full };
// The pipeline's schedule: 1F1B, interleaved when v > 1 (Narayanan et al. 2021); or backward
// split into input and weight gradients (Qi et al. 2023, 2024): zb-h1 and zb-h2 (v 1; H2 holds
// about twice 1F1B's activations), zb-v (two chunks a rank in a V, v 2).
enum class PlanSchedule { one_f_one_b, zb_h1, zb_h2, zb_v };
std::string name_of(PlanSchedule s);  // "1f1b" (interleaved with v > 1), "zb-h1", "zb-h2", "zb-v"

struct PlanLayout {
  int tp = 1, pp = 1, dp = 1;
  bool sp = false;          // sequence parallelism (tp > 1)
  int v = 1;                // model chunks per pipeline rank (interleaved 1F1B when > 1)
  int micro_batch = 1;      // sequences
  int zero = 0;             // ZeRO stage over dp
  Recompute recompute = Recompute::full;
  // Attention as one kernel that never stores the scores (FlashAttention; its backward
  // recomputes them), or as matrix products around a softmax that reads and writes them
  // (Megatron-LM 2021). Not searched: --fix attention=unfused.
  bool flash = true;
  int ep = 1;  // expert parallelism within dp (MoE models)
  // Context parallelism: the sequence split over cp ranks (2 cp chunks, causally balanced), keys
  // and values passed around a ring overlapped with attention (ring attention).
  int cp = 1;
  // The data-parallel reduction in buckets overlapped with the last micro-batch's backward (false:
  // after the pipeline's flush, as Megatron-LM did in 2021). Not searched: --fix overlap=off.
  bool overlap = true;
  // Not searched: --fix schedule=zb-h1, zb-h2 or zb-v.
  PlanSchedule schedule = PlanSchedule::one_f_one_b;
  std::string describe() const;  // "tp8 pp2 dp32 v1 mb1 zero1 full sp" (" ep4" with experts, " zb-h1" with a zero-bubble schedule)
};
std::string name_of(Recompute r);
// "none", "selective" or "full"; UsageError naming the value as given_as + "recompute=..." otherwise.
Recompute parse_recompute(const std::string& text, const std::string& given_as = "");

struct PlanPrediction {
  // Bytes per GPU.
  double parameter_bytes = 0, gradient_bytes = 0, optimizer_bytes = 0, activation_bytes = 0;
  double memory_bytes() const { return parameter_bytes + gradient_bytes + optimizer_bytes + activation_bytes; }
  bool fits = false;
  // Seconds per step.
  double compute_s = 0;        // matrix products and element-wise work in the pipeline's critical path
  double recompute_s = 0;      // of which the recompute forward
  double tp_comm_s = 0;        // tensor-parallel collectives (not overlapped)
  double pp_comm_s = 0;        // point-to-point between stages on the critical path
  double bubble_s = 0;         // pipeline fill and drain
  double ep_comm_s = 0;        // the MoE layers' all-to-all (dispatch and combine), not overlapped
  double cp_comm_s = 0;        // ring attention's key/value passes that attention does not hide
  double dp_comm_s = 0;        // gradient all-reduce (or reduce-scatter and all-gather) exposed
  double optimizer_s = 0;
  double step_s = 0;
  double tokens_per_s = 0;
  double model_flops = 0, hardware_flops = 0;  // per step, whole job
  double mfu = 0, hfu = 0;                     // over the cluster's dense peak
  double tflops_per_gpu = 0;                   // hardware FLOPs per second per GPU, in TFLOP/s
  int micro_batches = 0;                       // per pipeline per step
  // The pipeline's parts, for a schedule simulator (bench/commands/plan.hpp): one micro-batch's
  // forward and backward (with its recompute) through the slowest stage's v chunks, its
  // collectives included, and one message between stages.
  double stage_forward_s = 0, stage_backward_s = 0, message_s = 0;
  // Of stage_backward_s, the weight gradients' products (a zero-bubble schedule's W actions).
  double stage_weight_grad_s = 0;
  bool simulated = false;  // the pipeline's time from the schedule simulator, not the closed form
};

// Why a layout cannot run at all ("" when it can): sizes that do not divide (GPUs, heads, the
// batch), more stages than layers (fewer divide unevenly: the slowest stage holds the most),
// v > 1 without pp > 1, sp without tp > 1.
std::string plan_layout_problem(const PlanModel& m, const PlanCluster& c, const PlanLayout& l, int gpus,
                                std::int64_t global_batch);
PlanPrediction plan_predict(const PlanModel& m, const PlanCluster& c, const PlanLayout& l, std::int64_t global_batch);

// Every layout of `gpus` GPUs that `fixed` allows (an unset field is searched: tp and pp powers
// of two dividing what they must, v up to layers/pp, micro-batch 1-8, ZeRO 0-3, each recompute,
// sp on with tp > 1), evaluated; the ones that cannot run are left out.
struct PlanFixed {
  std::optional<int> tp, pp, dp, ep, cp, v, micro_batch, zero;
  std::optional<bool> sp, flash, overlap;
  std::optional<Recompute> recompute;
  std::optional<PlanSchedule> schedule;
  bool interleaved = false;  // schedule=interleaved: 1F1B with v > 1 only
};
// "tp=8,pp=2,recompute=full,sp=on,attention=unfused"; UsageError for an unknown key or a bad value,
// or a schedule and a v that disagree (schedule=1f1b,v=4; schedule=interleaved,v=1).
PlanFixed parse_plan_fixed(const std::string& text);
struct PlanCandidate {
  PlanLayout layout;
  PlanPrediction prediction;
};
std::vector<PlanCandidate> plan_search(const PlanModel& m, const PlanCluster& c, int gpus, std::int64_t global_batch,
                                       const PlanFixed& fixed, std::size_t* evaluated = nullptr);

// The fastest layout that fits (none when nothing fits or nothing can run).
std::optional<PlanCandidate> plan_best(const PlanModel& m, const PlanCluster& c, int gpus, std::int64_t global_batch,
                                       const PlanFixed& fixed);

// Published results the model is checked against: Narayanan et al. 2021, Table 1 (A100 80GB,
// Selene, full recompute, mixed precision; TFLOP/s per GPU in the hardware convention).
struct PublishedRun {
  const char* source;
  PlanModel model;
  int tp, pp, gpus;
  std::int64_t global_batch;
  double tflops_per_gpu;
};
const std::vector<PublishedRun>& published_runs();
// The fastest layout that fits with the run's published tp and pp, full recompute, no sp, cp,
// ep or ZeRO, and attention and the data-parallel reduction as in 2021 (unfused, not overlapped);
// micro-batch and interleaving searched.
std::optional<PlanCandidate> plan_published(const PublishedRun& run, const PlanCluster& c);
// Published large-scale runs beside Table 1, not held to its 10% (their layouts and kernels are
// stated less fully): the model, cluster, GPUs, global batch and the keys the source states,
// and its figure, TFLOP/s per GPU in Megatron's convention (hardware FLOPs, the recompute's
// forward counted) or, where the source gives MFU, MFU.
struct PublishedSpotCheck {
  const char* source;
  std::string model;  // parse_plan_model's text
  std::string cluster;
  int gpus;
  std::int64_t global_batch;
  std::string fixed;  // parse_plan_fixed's text
  double figure;
  bool mfu;  // figure is MFU, else TFLOP/s per GPU
};
const std::vector<PublishedSpotCheck>& published_spot_checks();
// Published seconds per step of runs whose whole layout is stated, held to 10% beside Table 1:
// Korthikanti et al. 2022, Table 5 (A100 80GB, data-parallel size 1), each model with full
// recompute and with sequence parallelism and selective recompute.
struct PublishedStepTime {
  const char* source;
  std::string name;   // the run, as the source names it
  std::string model;  // parse_plan_model's text
  int gpus;
  std::int64_t global_batch;
  std::string fixed;  // parse_plan_fixed's text: every key of the layout
  double seconds;
};
const std::vector<PublishedStepTime>& published_step_times();
// What plan_published holds fixed.
PlanFixed published_fixed(const PublishedRun& run);

}  // namespace parity::theory
