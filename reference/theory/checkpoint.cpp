// Activation checkpointing's layouts, bytes and FLOPs (see checkpoint.hpp).
#include "reference/theory/checkpoint.hpp"

#include <algorithm>
#include <cmath>

#include "reference/theory/model.hpp"

namespace parity::theory {

BlockActivationBytes gpt_block_activation_bytes(std::int64_t s, std::int64_t b, std::int64_t h, std::int64_t a,
                                                std::int64_t e, std::int64_t r) {
  BlockActivationBytes out;
  out.probabilities = e * b * a * s * s;
  out.whole = e * b * s * 16 * h + r * 4 * b * s + out.probabilities;
  out.output = out.core = out.branch = e * b * s * h;
  out.attention_inputs = r * 2 * b * s + e * 4 * b * s * h;
  return out;
}

BlockActivationBytes gpt_block_activation_bytes(const model::GptConfig& c, std::int64_t rows) {
  const std::int64_t e = static_cast<std::int64_t>(size_of(c.dtype));
  return gpt_block_activation_bytes(c.sequence, rows, c.hidden, c.heads, e, statistic_bytes(c.dtype));
}

int CheckpointLayout::recomputed_blocks() const {
  return static_cast<int>(std::count_if(segment.begin(), segment.end(), [](int s) { return s >= 0; }));
}

int CheckpointLayout::segments() const {
  int n = 0;
  for (std::size_t i = 0; i < segment.size(); ++i)
    if (segment[i] >= 0 && (i == 0 || segment[i - 1] != segment[i])) ++n;
  return n;
}

CheckpointLayout none_layout(int blocks) { return {std::vector<int>(static_cast<std::size_t>(blocks), -1), false}; }

CheckpointLayout full_layout(int blocks) {
  CheckpointLayout out = none_layout(blocks);
  for (int i = 0; i < blocks; ++i) out.segment[static_cast<std::size_t>(i)] = i;
  return out;
}

CheckpointLayout every_layout(int blocks, int k) {
  CheckpointLayout out = none_layout(blocks);
  for (int i = 0; i < blocks; i += k) out.segment[static_cast<std::size_t>(i)] = i;
  return out;
}

CheckpointLayout sqrt_layout(int blocks) {
  CheckpointLayout out = none_layout(blocks);
  const int n = static_cast<int>(std::ceil(std::sqrt(static_cast<double>(blocks))));
  for (int i = 0; i < blocks; ++i) out.segment[static_cast<std::size_t>(i)] = i / std::max(n, 1);
  return out;
}

CheckpointLayout selective_layout(int blocks) {
  CheckpointLayout out = none_layout(blocks);
  out.selective = true;
  return out;
}

CheckpointLayout budget_layout(int blocks, int kept) {
  CheckpointLayout out = full_layout(blocks);
  for (int i = blocks - kept; i < blocks; ++i) out.segment[static_cast<std::size_t>(i)] = -1;
  return out;
}

int budget_kept_blocks(int blocks, const BlockActivationBytes& bytes, std::int64_t budget_bytes) {
  for (int kept = blocks; kept >= 0; --kept)
    if (checkpoint_activation_bytes(budget_layout(blocks, kept), bytes).peak <= budget_bytes) return kept;
  return -1;
}

CheckpointActivationBytes checkpoint_activation_bytes(const CheckpointLayout& layout, const BlockActivationBytes& b) {
  const std::int64_t kept = layout.selective ? b.whole - b.probabilities : b.whole;
  // The attention core's moment in forward (and, selective, again in backward).
  const std::int64_t core_moment = b.attention_inputs + b.core + b.probabilities;
  CheckpointActivationBytes out;
  std::int64_t held = 0;  // alive between blocks, above the first block's input
  const int L = layout.blocks();
  for (int i = 0; i < L; ++i) {
    const int segment = layout.segment[static_cast<std::size_t>(i)];
    const bool recomputed = segment >= 0;
    const bool starts_segment = recomputed && (i == 0 || layout.segment[static_cast<std::size_t>(i - 1)] != segment);
    if (recomputed) {
      out.peak = std::max(out.peak, held + b.whole + b.branch);
      if (starts_segment) {
        // Its recompute in backward: the segment's blocks whole at once, the last at its last add.
        int n = 0;
        while (i + n < L && layout.segment[static_cast<std::size_t>(i + n)] == segment) ++n;
        out.peak = std::max(out.peak, held + n * b.whole + b.branch);
        held += b.output;
      }
    } else {
      out.peak = std::max(out.peak, held + kept + b.branch);
      if (layout.selective) out.peak = std::max(out.peak, held + core_moment);  // forward, and its backward
      held += kept;
    }
  }
  out.stored = held;
  return out;
}

std::int64_t recompute_flops(const CheckpointLayout& layout, std::int64_t batch, std::int64_t s, std::int64_t h) {
  const std::int64_t core = 4 * batch * s * s * h;
  return layout.recomputed_blocks() * gpt_block_forward_flops(batch, s, h) +
         (layout.selective ? layout.blocks() - layout.recomputed_blocks() : 0) * core;
}

}  // namespace parity::theory
