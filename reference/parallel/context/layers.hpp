// The GPT over a context-parallel group (context_parallel.hpp): every rank runs the whole model
// on its rows of each sequence (chunks r and 2 cp - 1 - r), and the layers that see across
// tokens or index them by position take the split into account:
//   ContextEmbedding    takes the whole sequence's tokens, keeps the rank's rows and adds the
//                       position table's rows at their positions (its gradient scattered back);
//   ContextAttention    qkv and the output projection token-wise, attention through the group
//                       (ring, all-gather or Ulysses);
//   ContextDropout      draws exactly the whole sequence's mask at the rank's elements, chunk by
//                       chunk, so that every layout draws the same masks;
//   ContextLoss         cross-entropy of the rank's rows against their targets, the loss's value
//                       summed over the group (its gradient stays the rank's own).
// Parameters are whole (or, with tensor parallelism, this tp rank's shards) and named as the
// single-device model's; their gradients are summed over the group (and dp) by the data-parallel
// part of the step.
#pragma once

#include <memory>
#include <vector>

#include "reference/model/layers.hpp"
#include "reference/model/model.hpp"
#include "reference/parallel/context/context_parallel.hpp"
#include "reference/parallel/tensor/regions.hpp"

namespace parity::parallel {

// The GPT of `config` (dense; dropout drawn as the whole sequence's) over cp's group; with `tp`,
// also tensor-parallel over its group (Megatron's splits: the token table and head by vocabulary
// rows, qkv and fc by columns, proj by rows, each rank attending heads / tp heads over cp), and with
// its sequence parallelism the rank's T / cp tokens split over tp in the LayerNorm and dropout
// regions (the LayerNorm gradients then summed over tp by TensorParallelSync). UsageError for a
// model or split they cannot take.
// With `ranges`, only those top-level layers (a pipeline stage's: "embedding", "blocks.i", "ln_f",
// "lm_head"; a tied head away from the embedding holds a copy of the table by its name).
std::unique_ptr<model::Model> build_context_parallel_gpt(const model::GptConfig& config, ContextParallel& cp,
                                                         const TensorParallel* tp = nullptr,
                                                         const std::vector<model::LayerRange>& ranges = {});

}  // namespace parity::parallel
