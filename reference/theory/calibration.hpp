// Rates measured on the machine at hand (`parity bench calibrate`, bench/commands/calibrate.hpp)
// and what they predict: the time of a matrix product of any shape and of an element-wise op
// of any length, interpolated between the measured ones; and the step of parity's own GPT
// (reference/model) composed from its ops, each costed at those rates. The planner takes the
// same product rates from a calibrated cluster file (theory/planner.hpp). Pure functions of
// numbers; docs/planner.md states the composition and its assumptions.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "reference/theory/model_config.hpp"

namespace parity::theory {

// C[m, n] = A[m, k] B[k, n], timed.
struct GemmSample {
  std::int64_t m = 0, n = 0, k = 0;
  double seconds = 0;
};
// An element-wise or row-wise op over `elements` elements, timed (row ops in rows of the
// length kOpRowLength gives them).
struct OpSample {
  std::string op;
  std::int64_t elements = 0;
  double seconds = 0;
};

// The sides of the measured products: every (m, n, k) of these, powers of 4 from 16 to 1024,
// spanning the reference models' products (a head of 16 columns to a vocabulary of 1024).
inline constexpr std::int64_t kGemmSides[] = {16, 64, 256, 1024};
// The element counts each op is measured at (within the caches to far beyond them).
inline constexpr std::int64_t kOpElements[] = {1 << 12, 1 << 15, 1 << 18, 1 << 21};
// The memory the operands come from. Each product and op above is timed on operands it used
// the call before, so they come from the nearest level that holds them. In a step they were
// last touched up to a whole working set of other tensors ago (the weights a step before, the
// saved activations a forward before), so they come from the level that holds the step's
// working set. An add (y = a + b) over growing buffers measures how long a byte takes from each
// level: three arrays of these element counts, from a 48 KiB footprint (the nearest caches) to
// 96 MiB in float32 (main memory on most CPUs; a GPU's L2 holds less than that).
inline constexpr std::int64_t kStreamElements[] = {1 << 12, 1 << 15, 1 << 18, 1 << 21, 1 << 23};
struct StreamSample {
  std::int64_t elements = 0;  // of each of the three arrays
  double seconds = 0;
};
// The arrays an op reads or writes per element (its footprint in elements, over the element
// count it is measured at): add 3, fill 1, the forwards of GeLU, LayerNorm, softmax and dropout
// 2, their backwards 3 (dropout's 2), cross-entropy forward 1 and backward 2, AdamW 4.
double calibrated_op_arrays(const std::string& op);
// The ops a reference step composes, each measured on its own (bench/commands/calibrate.cpp):
// add (a + b), fill (a store of one value), gelu and layernorm forward and backward, softmax and cross-entropy forward
// and backward over rows, AdamW's update (per parameter), dropout forward and backward (its mask
// drawn from the counter-based generator each time).
inline constexpr const char* kCalibratedOps[] = {
    "add",          "fill",          "gelu_forward",          "gelu_backward",          "layernorm_forward",
    "layernorm_backward", "softmax_forward", "softmax_backward", "cross_entropy_forward", "cross_entropy_backward",
    "adamw",        "dropout_forward", "dropout_backward"};
// The collectives whose efficiency is measured, with their models on an alpha-beta link for a
// buffer of B bytes over n ranks: all_reduce 2 (n - 1) (alpha + beta B / n); all_gather (B the
// gathered buffer), reduce_scatter (B the buffer reduced) and all_to_all (B a rank's send
// buffer, pairwise) (n - 1) (alpha + beta B / n).
inline constexpr const char* kCalibratedCollectives[] = {"all_reduce", "all_gather", "reduce_scatter", "all_to_all"};
double collective_model_seconds(const std::string& collective, int n, double bytes, double alpha, double beta);
// The row length the row ops are measured with.
std::int64_t calibrated_row_length(const std::string& op);

struct Calibration {
  std::string dtype;  // the products' and ops' element type
  std::vector<GemmSample> gemm;
  std::vector<OpSample> ops;
  std::vector<StreamSample> stream;  // kStreamElements; empty: operands are taken as where the ops found them
  // Seconds of one product: its FLOPs at the rate interpolated in log m, log n, log k between the
  // measured grid (trilinear in the log of the rate; sides clamped to the grid's range).
  double gemm_seconds(double m, double n, double k) const;
  // Seconds of one op over `elements`: the measured seconds per element interpolated in log
  // elements; past the longest, its rate; below the shortest, the line through the two shortest
  // (a fixed cost per call plus a rate, neither below 0). UsageError when the op was not measured.
  double op_seconds(const std::string& op, double elements) const;
  // Each collective's time against its alpha-beta model on the ping-pong's link, by message
  // size (bytes, fraction), keyed by collective (kCalibratedCollectives): the job's
  // /bench/calibrate_links. Empty when not measured (one rank).
  std::map<std::string, std::vector<std::pair<double, double>>> collective_efficiency;
  // Measured at a level (bench calibrate on ranks over several hosts: within each host, and one
  // rank a host), keyed "node:all_reduce", "network:all_gather", ...
  // The fraction `collective` reaches at `bytes`, interpolated in log bytes (clamped to the
  // measured sizes): at `level` ("node" or "network") where measured there, else over the whole
  // world; the all-reduce's where that collective was not measured (a description from before
  // the others were); `otherwise` when none was.
  double collective_efficiency_at(double bytes, double otherwise, const std::string& collective = "all_reduce",
                                  const std::string& level = "") const;
  // Bytes of one element of the calibration's type.
  double element_bytes() const;
  // Seconds per byte streamed from the level that holds `footprint` bytes: the stream samples'
  // time over their 3 x elements x element_bytes() bytes, interpolated in log footprint
  // (clamped to the measured range).
  double stream_seconds_per_byte(double footprint) const;
  // What fetching an operand of `bytes` costs beyond its measured time when it comes from the
  // level that holds a `working_set` of bytes rather than from the one that holds itself:
  // bytes x (seconds per byte at the working set - at `bytes`), never below 0; 0 without
  // stream samples.
  double fetch_seconds(double bytes, double working_set) const;
  // The fastest product measured, in GFLOP/s.
  double best_gemm_GFLOPs() const;
  // Throws UsageError unless every product of the grid and every op of kCalibratedOps is there
  // with a positive time.
  void validate() const;
};

// The step of parity's reference GPT (reference/model: zero_grad, forward, loss, backward,
// optimizer) on one rank, batch x sequence tokens, at the calibration's rates. Every op of the
// step is costed: the linear layers' products and bias work, attention's score and weighted-sum
// products per head with its causal softmax, the norms, GeLU, residual adds, the head's
// products and cross-entropy, the embedding's gather and scatter (at the add's rate) and the
// optimizer over every parameter. Each product and op also pays for fetching its operands from
// the level that holds the step's working set (Calibration::fetch_seconds; the working set: the
// rank's parameters, gradients and optimizer state, every block's saved activations and the
// logits). What is not costed: allocation, the tensors' bookkeeping and the row loops' per-call
// overheads. SGD with momentum is costed as two adds a parameter.
// One top-level layer's part of a step (the embedding, each block, the final norm, the head
// with the loss): its forward, its backward, and of the backward the weight gradients' share.
struct LayerCost {
  double forward_s = 0, backward_s = 0, weight_grad_s = 0;
};
struct StepEstimate {
  double products_s = 0;     // linear layers' and the head's matrix products
  double attention_s = 0;    // attention's products and its softmax
  double elementwise_s = 0;  // norms, GeLU, adds, bias, embedding, cross-entropy, zero_grad
  double optimizer_s = 0;
  std::int64_t product_flops = 0;  // the matrix products costed (equal to theory::gpt_step_flops)
  double backward_s = 0;  // of the above, the backward pass (from the loss's gradient to the first layer's)
  // One transformer block's forward, and its attention core's (what full and selective
  // recompute run again); 0 for the MLP.
  double block_forward_s = 0, attention_forward_s = 0;
  // Per top-level layer in the model's order (a GPT: embedding, blocks, ln_f, head; the MLP: its
  // Dense layers), for splitting a step into pipeline stages. Not in them: zero_grad, optimizer.
  std::vector<LayerCost> layer_costs;
  double total() const { return products_s + attention_s + elementwise_s + optimizer_s; }
};
// On one rank of a tensor-parallel group (`tp` > 1, Megatron's split: attention heads, the MLP's
// width and the vocabulary over tp; with `sp` the norms, residual adds and embedding rows too;
// `parameters` on the rank for zero_grad and the optimizer, 0: the whole model's), without the
// group's collectives (theory/tensor.hpp predicts them).
// One MoE block's work on a rank (tp 1): the rows its router's tokens send to experts (gathered
// and combined here), and the rows each of its local experts multiplies (from the run's routing:
// the work depends on where the tokens went, not on the machine).
struct MoeBlockWork {
  int block = 0;
  double experts = 0;        // E: the router's outputs
  double expert_hidden = 0;  // an expert's MLP width
  double assignments = 0;
  std::vector<double> expert_rows;
};
struct StepSplit {
  int tp = 1;
  bool sp = false;
  std::int64_t parameters = 0;
  std::vector<MoeBlockWork> moe;  // blocks whose MLP is a mixture of experts
};
StepEstimate reference_gpt_step(const model::GptConfig& config, std::int64_t batch, const Calibration& calibration,
                                bool adamw, const StepSplit& split = {});
// The bytes that step touches, the level its operands come from: the rank's parameters, their
// gradients and the optimizer's moments (AdamW 2, SGD with momentum 1), every block's saved
// activations, the logits and their gradient.
double reference_gpt_working_set(const model::GptConfig& config, std::int64_t batch, bool adamw, const StepSplit& split = {});
// The same for the reference MLP (Dense layers with GeLU, mean-squared error): its products
// equal theory::mlp_forward_flops times 3.
StepEstimate reference_mlp_step(const model::MlpConfig& config, std::int64_t batch, const Calibration& calibration,
                                bool adamw);

// Gradient all-reduces overlapped with backward: `buckets` buckets of equal bytes, bucket i
// ready at i / buckets of the backward pass (the last at its end), reduced one at a time,
// `bucket_seconds` each. The communication left after backward ends: at least the last
// bucket's, at most all of it. Bucket i (of B, each taking c) ends at
// max over k <= i of (k + (i - k + 1) c / d) d with d = backward / B, linear in k, so the last
// ends at max(d + B c, backward + c): a closed form, whatever the count (a planned 1T-parameter
// stage has millions of buckets).
double overlapped_exposed_seconds(double backward_seconds, double buckets, double bucket_seconds);

}  // namespace parity::theory
