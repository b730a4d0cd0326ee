// Activation checkpointing: a wrapper around a model's transformer blocks that drops what their
// forward saved and recomputes it in backward (Chen et al. 2016), and the policies that choose
// which blocks (theory/checkpoint.hpp lays them out). The recomputed forward runs with the same
// pass context, so dropout replays its masks (Philox keyed by seed, layer, step and global
// element index) and every value comes out bit for bit as the first time: a policy changes
// memory and time, never results.
//
// Composes with every technique that works on top-level layers: the wrapper keeps the count
// and order of the model's top-level layers (a pipeline's stages are unchanged), and the
// recompute runs each block's forward through its hooks, so ZeRO-3 gathers the parameters
// again for it. Apply a policy after the model is built and before a trainer hooks it.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "reference/model/model.hpp"
#include "reference/tensor/memory.hpp"
#include "reference/theory/checkpoint.hpp"

namespace parity::parallel {

struct CheckpointPolicy {
  enum class Kind { none, full, every, sqrt, selective, budget };
  Kind kind = Kind::none;
  int every = 1;                   // every: blocks 0, k, 2k, ... recompute (k >= 1)
  std::int64_t budget_bytes = 0;   // budget: the peak of the blocks' activation bytes
  // A deliberate bug, to show the cases catch it: "fresh_dropout_seed" recomputes with another
  // dropout seed (different masks in backward than in forward).
  std::string fault;
  // "none", "full", "every2", "sqrt", "selective", "budget<bytes>" (case names, --policies).
  std::string name() const;
  // The kind without its argument: "none", "full", "every", "sqrt", "selective", "budget".
  std::string_view kind_name() const;
};
// Parses a policy name ("every:2" and "budget:64K" are accepted too; sizes take K, M, G);
// throws UsageError naming the known forms.
CheckpointPolicy parse_checkpoint_policy(std::string_view text);
// Refuses (UsageError) a policy the model cannot take: k outside 1..L (the model's blocks), a
// budget below one block's working set or one that even recomputing every block does not meet.
void check_checkpoint_policy(const CheckpointPolicy& policy, int model_blocks, const theory::BlockActivationBytes& bytes);
// The policy's layout of `blocks` blocks (a pipeline rank's share, or the whole model) with
// `bytes` per block (the budget's rule needs them). A budget that cannot be met recomputes
// every block; every k with k > blocks recomputes block 0 alone.
theory::CheckpointLayout checkpoint_layout(const CheckpointPolicy& policy, int blocks,
                                           const theory::BlockActivationBytes& bytes);

// The three steps above for a GPT's blocks in one call: checks the policy against the whole
// model (config.layers blocks), lays out the blocks `model` holds with the bytes of `rows`
// sequences per pass, and applies the layout; returns it.
theory::CheckpointLayout apply_checkpoint_policy(model::Model& model, const model::GptConfig& config,
                                        const CheckpointPolicy& policy, std::int64_t rows,
                                        const std::vector<int>& pieces = {});

// The model's transformer blocks (top-level layers of kind "block", wrapped or not), by
// top-level index.
std::vector<std::size_t> block_indices(const model::Model& model);

// Applies the layout to the model's blocks: each recomputed block wrapped (a segment's
// wrappers share it), selective blocks' attention told to recompute its core. Segments never
// cross `pieces` (counts of top-level layers per piece, e.g. a pipeline rank's chunks; empty:
// one piece): a segment is cut where a piece ends.
void apply_checkpointing(model::Model& model, const theory::CheckpointLayout& layout, const CheckpointPolicy& policy,
                         const std::vector<int>& pieces = {});

// Blocks recomputed so far in this process (all wrappers), for the bench and the cases.
std::int64_t recomputed_block_forwards();

// Activation bytes of the blocks, measured by the memory tracker around one training pass
// (theory::checkpoint_activation_bytes is their formula): from the first block's forward to
// the first top-level layer after the blocks (stored), the peak of the blocks' forward and of
// their backward, above what was alive when the first block began (its input).
class ActivationProbe {
 public:
  explicit ActivationProbe(model::Model& model);
  ~ActivationProbe();
  ActivationProbe(const ActivationProbe&) = delete;
  ActivationProbe& operator=(const ActivationProbe&) = delete;
  std::int64_t stored() const { return stored_; }
  std::int64_t peak() const { return peak_; }

 private:
  void on(std::size_t index, model::HookPoint point);
  std::int64_t current() const;
  std::vector<std::pair<model::Layer*, model::HookId>> hooks_;
  std::size_t first_ = 0, last_ = 0, after_ = 0;
  MemorySpace space_;
  std::int64_t base_ = 0, stored_ = 0, peak_ = 0, backward_start_ = 0;
  std::optional<PeakScope> scope_;
};

}  // namespace parity::parallel
