// The fast GPT training step on one GPU: the same model as the reference GPT
// (reference/model/model.hpp: token and position embeddings, pre-LN blocks with fused qkv
// attention and a 4h GeLU feed-forward, final LayerNorm, LM head tied to the token table, mean
// cross-entropy, AdamW with decoupled weight decay on every parameter), trained in 16-bit
// storage with float32 accumulation, a float32 residual stream and float32 master weights and
// moments (ops.hpp).
//
// Everything a step touches is allocated once, when the model is made: the parameters,
// gradients and optimizer state as flat buffers, every activation backward reads in one arena,
// and the scratch. A step allocates nothing, launches only on the process's stream, and waits
// for the device once, at its end, to read the loss (and, in float16, whether a gradient
// overflowed). It is deterministic: no atomics anywhere, so two runs from the same state give
// the same bits.
//
// Kept to C++17 and the standard library: nvcc compiles the implementation.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "reference/fast/ops.hpp"

namespace parity::fast {

struct GptShape {
  std::int64_t vocabulary = 0;
  int layers = 0;
  std::int64_t hidden = 0;
  int heads = 0;
  std::int64_t sequence = 0;
  std::int64_t batch = 0;  // sequences per step
  // The token table's rows and the logits' columns: vocabulary rounded up to a multiple of 64 (the
  // padding rows are never looked up and their logits take no part in the loss).
  std::int64_t padded_vocabulary() const;
  std::int64_t rows() const { return batch * sequence; }
};
// Why the fast path cannot train this shape ("" when it can): sizes not positive, heads not
// dividing hidden, a head size the attention kernels lack, hidden not a multiple of 8 or above
// 4096, more rows than int32 indexes.
std::string unsupported_reason(const GptShape& shape);

// A parameter's place in the flat buffers: the reference model's name and shape
// ("embedding.wte" [V, h] first, then "embedding.wpe", "blocks.i.ln1.gamma", ...,
// "ln_f.beta"), its first element and its element count (the token table with its padding rows).
struct ParameterSlot {
  std::string name;
  std::vector<std::int64_t> shape;
  std::int64_t offset = 0;
  std::int64_t count = 0;
};
// Every slot, in order; offsets are multiples of 64 elements.
std::vector<ParameterSlot> parameter_layout(const GptShape& shape);
std::int64_t parameter_elements(const GptShape& shape);  // the flat buffers' length

// The device bytes a model of this shape allocates (parameters, gradients, masters, moments,
// activations, scratch), for the memory check before it is made.
std::size_t device_bytes(const GptShape& shape, Storage storage);

// The rows of a step's tokens grouped by token, for the deterministic embedding gradient
// (ops.hpp: embedding_backward): `order` lists the row indices sorted by token (rows of one token
// in increasing order), unique[u] is the u-th distinct token and its rows are order[starts[u] ..
// starts[u + 1]).
struct TokenGroups {
  std::vector<std::int32_t> order, starts, unique;
};
TokenGroups group_rows_by_token(const std::int32_t* tokens, std::int64_t rows);

// Floating-point operations of one step. Model FLOPs count what the model defines (every matrix
// product, attention in full: the reference's and Megatron's convention); hardware FLOPs count
// what the kernels execute (the causal tiles, backward's recomputation): the numerators of MFU
// and HFU.
std::int64_t matmul_flops_per_step(const GptShape& shape);
std::int64_t model_flops_per_step(const GptShape& shape);
std::int64_t hardware_flops_per_step(const GptShape& shape);

struct StepResult {
  double loss = 0;       // mean cross-entropy over the step's tokens
  bool skipped = false;  // float16: a gradient overflowed, the update was skipped
};

// Where a profiled step's device time went (milliseconds, from events around each run of ops):
// matrix products (cuBLASLt), attention (forward, backward and its delta), and the rest: residual
// adds with LayerNorm, the loss, the embeddings, the optimizer (with the copies around it).
// With a gradient sync, sync_ms is the time the step waited for the gradients' sum: all of it
// when the sync does not overlap, only the part backward did not hide when it does.
struct StepParts {
  double products_ms = 0, attention_ms = 0;
  double layernorm_ms = 0, loss_ms = 0, embedding_ms = 0, optimizer_ms = 0;
  double sync_ms = 0;
  double other_ms() const { return layernorm_ms + loss_ms + embedding_ms + optimizer_ms; }
  double total_ms() const { return products_ms + attention_ms + other_ms() + sync_ms; }
};

// Data parallelism: the ranges of the flat gradient buffer that backward finishes together, in
// the order it finishes them (ln_f's, the last block's, ..., the first block's, then the position
// table's), each ready for summing over the replicas while backward goes on. The token table's
// gradient is not among them: it is float32 (dwte32) and finishes last of all.
struct GradientBucket {
  std::string what;  // "ln_f", "blocks.7", "embedding.wpe"
  std::int64_t offset = 0, count = 0;
};
std::vector<GradientBucket> gradient_buckets(const GptShape& shape);

// What sums a step's gradients over the replicas (bench/commands/fast_data_parallel.hpp has the
// communicator's). The step calls sum() for each bucket as backward finishes it and for the token
// table's float32 gradient last, then divides by replicas() in the optimizer (and in gradient()).
class GradientSync {
 public:
  virtual ~GradientSync() = default;
  virtual int replicas() const = 0;
  // True: sum() queues its work on `stream`, a stream of the step's own that waits for the
  // bucket's backward first, and the step's stream waits for it before the optimizer, so the
  // sums overlap the rest of backward (NCCL). False: sum() is called with the process's stream
  // and may wait for it (MPI through host memory).
  virtual bool overlaps() const = 0;
  // Sums `count` elements at `data` (the storage type, or float32 when `float32`) over the
  // replicas, in place.
  virtual void sum(void* data, std::int64_t count, bool float32, void* stream) = 0;
};

class Gpt {
 public:
  // Allocates everything and initialises the parameters on the device as GPT-2 does (weights
  // N(0, 0.02), residual projections N(0, 0.02 / sqrt(2 L)), biases 0, LayerNorm 1 and 0) from
  // `seed`. Throws with unsupported_reason, or when the device lacks the memory.
  Gpt(const GptShape& shape, Storage storage, const AdamWHyper& hyper, std::uint64_t seed);
  ~Gpt();
  Gpt(const Gpt&) = delete;
  Gpt& operator=(const Gpt&) = delete;

  const GptShape& shape() const;
  Storage storage() const;
  // Sets a parameter (masters, and the 16-bit copy rounded from them) from float32 values in the
  // reference layout; the token table takes `vocabulary` rows (its padding stays 0).
  void set_parameter(const std::string& name, const std::vector<float>& values);
  // A parameter's float32 master values, or the last step's gradient (float32 of the 16-bit
  // gradient, the token table's in float32, divided by the step's loss scale), in the reference
  // layout.
  std::vector<float> parameter(const std::string& name) const;
  std::vector<float> gradient(const std::string& name) const;

  // One step on tokens and targets [batch, sequence] (host int32, each in [0, vocabulary):
  // checked here, before anything is launched): forward, backward and, when `update`, AdamW.
  // float16 multiplies the loss by a dynamic scale (2^16 at first, halved after an overflow, whose
  // update is skipped, and doubled after 1000 steps without one).
  StepResult step(const std::int32_t* tokens, const std::int32_t* targets, bool update = true);
  int updates() const;  // AdamW steps taken
  float loss_scale() const;
  // Sums every step's gradients over replicas through `sync` (not owned; null: one replica, the
  // default), and divides them by its replicas() in the optimizer: data parallelism, each replica
  // stepping on its own tokens. Set between steps. With a sync that does not overlap, the step
  // waits for the device wherever sum() does.
  void set_gradient_sync(GradientSync* sync);
  // With profiling on, each step records events between its parts (a few dozen per layer; they
  // cost the step a little), and last_parts() reads them after the step.
  void set_profiling(bool on);
  StepParts last_parts() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace parity::fast
