// Activation checkpointing (Chen et al. 2016; Korthikanti et al. 2022): which blocks a policy
// recomputes, the activation bytes the blocks hold (stored between forward and backward, and
// at the peak), and the FLOPs recomputation adds. Pure functions of numbers; the wrapper that
// does the recomputing is reference/parallel/checkpoint/, and docs/model-accounting.md derives
// every term.
//
// Bytes are parity's accounting (theory/model.hpp): every tensor a block saves, at the model's
// element size e, LayerNorm statistics at their own size; dropout masks are regenerated, never
// stored; gradients with respect to activations are workspace, not activations. The peak
// counts what is alive at the largest moment of the blocks' forward and backward, transients
// included, above the blocks' first input.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "reference/theory/model_config.hpp"

namespace parity::theory {

// The sizes that matter to checkpointing, for one block on `batch` sequences of `sequence`
// tokens: e element bytes, r LayerNorm statistic bytes (float32, or float64 in float64).
struct BlockActivationBytes {
  std::int64_t whole = 0;          // all it keeps for backward, its output included: e bs(16h) + r 4bs + e b a s^2
  std::int64_t output = 0;         // its output, the next block's input: e bsh
  std::int64_t probabilities = 0;  // the attention probabilities: e b a s^2
  std::int64_t core = 0;           // the attention core's output: e bsh
  std::int64_t branch = 0;         // the FFN branch's output, alive at the block's last residual add: e bsh
  // What the attention core reads and the LayerNorm before it keeps: ln1's statistics, its
  // output and qkv: r 2bs + e 4bsh.
  std::int64_t attention_inputs = 0;
};
BlockActivationBytes gpt_block_activation_bytes(std::int64_t sequence, std::int64_t batch, std::int64_t hidden,
                                                std::int64_t heads, std::int64_t element_bytes,
                                                std::int64_t statistic_bytes);

// The same for a GPT config's block (statistics in float32, or float64 in float64) on `rows` sequences.
BlockActivationBytes gpt_block_activation_bytes(const model::GptConfig& config, std::int64_t rows);

// How a policy checkpoints L blocks: `segment[i]` is the segment block i is recomputed in
// (consecutive blocks with the same number are recomputed together from the first one's
// input), or -1 when block i keeps its activations; `selective`: the kept blocks drop their
// attention probabilities and recompute them in backward.
struct CheckpointLayout {
  std::vector<int> segment;
  bool selective = false;
  int blocks() const { return static_cast<int>(segment.size()); }
  int recomputed_blocks() const;
  int segments() const;
};

// The policies, as layouts:
//   none: every block keeps everything;
//   full: every block its own segment (keeps only its input, Chen et al.'s n = 1);
//   every k: blocks 0, k, 2k, ... their own segments, the others kept;
//   sqrt: segments of ceil(sqrt(L)) blocks (Chen et al. 2016: O(sqrt L) memory, one extra forward);
//   selective: every block kept but its attention probabilities (Korthikanti et al. 2022);
//   budget: the last m blocks kept, the others their own segments, with m the most for which
//           the peak fits the budget (budget_layout).
CheckpointLayout none_layout(int blocks);
CheckpointLayout full_layout(int blocks);
CheckpointLayout every_layout(int blocks, int k);
CheckpointLayout sqrt_layout(int blocks);
CheckpointLayout selective_layout(int blocks);
// The most blocks kept (the last ones: their backward runs first) with the peak within
// `budget_bytes`; -1 when even recomputing every block does not fit.
int budget_kept_blocks(int blocks, const BlockActivationBytes& bytes, std::int64_t budget_bytes);
CheckpointLayout budget_layout(int blocks, int kept);

struct CheckpointActivationBytes {
  std::int64_t stored = 0;  // held between the blocks' forward and their backward
  std::int64_t peak = 0;    // the most alive at once in the blocks' forward or backward
};
// Walks the blocks' forward and backward (docs/model-accounting.md): with H_i alive before
// block i's forward (its input included),
//   forward of block i:  H_i + W' + branch at its last add (W' = whole, less the probabilities
//                        when selective, where the attention core's moment
//                        H_i + attention_inputs + core + probabilities may be the larger);
//   after it:            H_i + W' when kept, + output when it starts a segment, + 0 inside one
//                        (its input is let go, its output held);
//   recompute of a segment of n blocks from b: H_b + n whole + branch (at its last block's last add);
//   selective backward of block i: H_i + attention_inputs + core + probabilities.
// So full recompute holds L outputs (2sbh per layer at 16 bits) plus one block's working set.
CheckpointActivationBytes checkpoint_activation_bytes(const CheckpointLayout& layout, const BlockActivationBytes& bytes);

// Matmul FLOPs recomputation adds per step on `batch` sequences: a recomputed block's forward
// (gpt_block_forward_flops) for each recomputed block, and the attention core (scores and
// weighted sum, 4 b s^2 h) for each selective one. Full recompute: one more forward of the
// blocks, about a third more than a step's 3 forwards.
std::int64_t recompute_flops(const CheckpointLayout& layout, std::int64_t batch, std::int64_t sequence,
                             std::int64_t hidden);

}  // namespace parity::theory
