// Analytic models of tensor and sequence parallelism for parity's GPT (Shoeybi et al. 2019;
// Korthikanti et al. 2022): bytes each rank of the tp group sends per step, activation bytes a
// rank keeps per transformer layer, and parameter elements per rank. Derivations:
// docs/tensor-parallelism.md. Ring collectives on t ranks: an all-reduce of n elements sends
// 2 (t-1)/t n per rank, an all-gather or reduce-scatter of a whole of n elements (t-1)/t n.
#pragma once

#include <cstdint>
#include <functional>

#include "reference/theory/collectives.hpp"
#include "reference/theory/model.hpp"
#include "reference/theory/model_config.hpp"

namespace parity::theory {

// Bytes one rank of t sends per step for `rows` sequences of the config's length, activations
// of `element_bytes` and loss statistics of `statistic_bytes`, with A = rows s h elements:
//   block       no SP: 4 all-reduces of A (forward after each row-parallel linear, backward
//               before each column-parallel one): 8 (t-1)/t A e;
//               SP: forward 2 all-gathers + 2 reduce-scatters, backward the reduce-scatters'
//               all-gathers, the all-gathers' reduce-scatters and the 2 all-gathers again of the
//               column-parallel inputs kept as shards: 10 (t-1)/t A e;
//   embedding   one all-reduce of the lookups (SP: reduce-scatter forward, all-gather back):
//               2 (t-1)/t A e;
//   head        no SP: the input gradient's all-reduce, 2 (t-1)/t A e; SP: all-gather forward,
//               all-gather again and reduce-scatter backward, 3 (t-1)/t A e;
//   loss        all-reduces of the rows' maxima (rows s) and of their sums of exponentials
//               and target logits (2 rows s): 2 (t-1)/t 3 rows s e_stat.
struct TensorParallelBytes {
  double embedding = 0;
  double block = 0;  // each transformer block
  double head = 0;
  double loss = 0;
  double total(int layers) const { return embedding + layers * block + head + loss; }
};
TensorParallelBytes tensor_parallel_bytes_per_rank(const model::GptConfig& config, std::int64_t rows, int t,
                                                   bool sequence_parallel, double element_bytes,
                                                   double statistic_bytes);
// The alpha-beta prediction (theory/collectives.hpp, ring algorithms) of the time those
// collectives take per step: per block 4 all-reduces of A e bytes, or with SP 6 all-gathers and
// 4 reduce-scatters of A e; the embedding's and head's as above (SP: the embedding one of each,
// the head 2 all-gathers and a reduce-scatter); the loss's two all-reduces. Each collective's
// model time is divided by the efficiency of its kind (1: the ring model on the link).
struct TensorParallelEfficiency {
  double all_reduce = 1, all_gather = 1, reduce_scatter = 1;
};
// What the regions (parallel/tensor/regions.cpp) do in memory beside the messages, each a
// function of bytes (unset: free). `copy`: seconds to copy bytes (read once, written once): an
// all-gather copies the rank's shard into the gathered buffer, and where rows > 1 interleaves
// the ranks' blocks into place (a copy of the whole); a reduce-scatter with rows > 1
// interleaves the whole before it. `fetch`: seconds beyond the collective's calibrated time to
// touch its buffers (send and receive; an all-reduce's one, in place) where a step last left
// them, a working set away (Calibration::fetch_seconds). Sequence parallelism gathers and
// scatters along the sequence, so rows > 1 interleave; without it nothing is copied.
struct TensorParallelMemory {
  std::function<double(double bytes)> copy, fetch;
};
double tensor_parallel_predicted_seconds(const model::GptConfig& config, std::int64_t rows, int t,
                                         bool sequence_parallel, double element_bytes, double statistic_bytes,
                                         AlphaBeta model, const TensorParallelEfficiency& efficiency = {},
                                         const TensorParallelMemory& memory = {});

// Bytes one rank sends to sum the sequence-sharded gradients once (SP): an all-reduce of every
// LayerNorm's 2h elements and the position table's s h: 2 (t-1)/t (4 h L + 2 h + s h) e.
double sequence_parallel_gradient_bytes_per_rank(const model::GptConfig& config, int t, double element_bytes);
// The alpha-beta time of those sums, one ring all-reduce per parameter (every LayerNorm's gamma
// and beta of h elements, the position table's s h) at the all-reduce's efficiency; 0 at t = 1.
double sequence_parallel_gradient_seconds(const model::GptConfig& config, int t, double element_bytes, AlphaBeta model,
                                          double all_reduce_efficiency = 1);

// Activation bytes one rank keeps for backward per transformer layer, in parity's accounting
// (theory/model.hpp: every saved tensor at element_bytes e, the 4 LayerNorm statistics per
// token at statistic_bytes r, dropout masks regenerated), with t ranks:
//   no SP: e (b s (4h + 12h/t) + b (a/t) s^2) + r 4 b s: the LayerNorms' inputs and outputs
//          whole, qkv, the attention core and both FFN activations split;
//   SP:    e (b (s/t) 16h + b (a/t) s^2) + r 4 b (s/t): everything split.
std::int64_t tensor_parallel_block_activation_bytes(std::int64_t sequence, std::int64_t batch, std::int64_t hidden,
                                                    std::int64_t heads, int t, bool sequence_parallel,
                                                    std::int64_t element_bytes, std::int64_t statistic_bytes);
// The same for a config's block (its type's e and r) on `rows` sequences.
std::int64_t tensor_parallel_block_activation_bytes(const model::GptConfig& config, std::int64_t rows, int t,
                                                    bool sequence_parallel);
// Korthikanti et al. (2022), 16-bit activations and 1-byte dropout masks: sbh(10 + 24/t +
// 5as/(ht)) without sequence parallelism, (sbh/t)(34 + 5as/h) with it.
double korthikanti_tensor_parallel_activation_bytes(std::int64_t sequence, std::int64_t batch, std::int64_t hidden,
                                                    std::int64_t heads, int t, bool sequence_parallel);

// Parameter elements one rank holds: Vh/t (token table) + s h (positions) + L (12h^2/t + 7h/t
// + 6h) + 2h (final LayerNorm) [+ Vh/t untied head]: per block qkv 3h^2/t + 3h/t, proj h^2/t +
// h (bias whole), fc 4h^2/t + 4h/t, fc2 4h^2/t + h, two LayerNorms 4h.
std::int64_t tensor_parallel_parameters_per_rank(const model::GptConfig& config, int t);

}  // namespace parity::theory
