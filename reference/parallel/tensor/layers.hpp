// Tensor-parallel layers (Shoeybi et al. 2019; sequence parallelism, Korthikanti et al. 2022).
// Each holds this rank's shard of the whole layer's parameters, named and initialised as the
// whole (Layer::add_sharded_parameter), so a model built on t ranks holds exactly the slices of
// the single-device model. Activations are [B, T, C]; with sequence parallelism the tensors
// between the parallel layers (LayerNorm, dropout, residual) are sequence shards [B, T/t, C].
//
//   column-parallel linear  W [in, out] split by output columns: Y_i = X W_i. Its input enters
//                           through f (copy to the region: identity, backward all-reduce) or,
//                           with sequence parallelism, an all-gather whose backward is a
//                           reduce-scatter; the all-gather is fused with the layer so that only
//                           the shard is kept and it is gathered again in backward (Korthikanti
//                           et al. 2022, 4.2.2), which is what makes the activation memory 1/t.
//   row-parallel linear     W split by input rows: Y = sum_i X_i W_i, through g (all-reduce;
//                           backward identity) or a reduce-scatter to sequence shards (backward
//                           all-gather). The bias is added once, by the group's first rank, before
//                           the sum; its gradient, the column sums of the whole dY, is computed
//                           on every rank.
//   vocabulary-parallel     the token table split by rows: each rank looks up the tokens it
//   embedding               holds (zeros elsewhere), the lookups are summed (g, or a
//                           reduce-scatter to sequence shards) and the positions added.
//   vocabulary-parallel     logits of this rank's classes from the (tied) table shard; the
//   head and loss           cross-entropy reduces the row maxima, the sums of exponentials and
//                           the target logits over the group, so no rank holds whole logits.
#pragma once

#include <memory>

#include "reference/model/layers.hpp"
#include "reference/model/model.hpp"
#include "reference/parallel/tensor/regions.hpp"

namespace parity::parallel {

// How a column-parallel weight [in, out] is split: contiguous blocks of columns, or by heads
// within each of the `parts` equal blocks of a fused projection (q, k and v).
struct ColumnSplit {
  int parts = 1;
  // The ShardSpec of part `shard` of `shards` of a weight [in, out] (or a bias [out] when in is 0).
  ShardSpec spec(std::int64_t in, std::int64_t out, int shard, int shards) const;
};

// What a column- or row-parallel linear holds: the group, and this rank's shards of the weight
// and (when it has one) the bias.
class ParallelLinear : public model::Layer {
 protected:
  ParallelLinear(std::string name, const TensorParallel& tp) : Layer(std::move(name)), tp_(tp) {}
  const TensorParallel& tp_;
  model::Parameter* weight_ = nullptr;
  model::Parameter* bias_ = nullptr;
};

class ColumnParallelLinear : public ParallelLinear {
 public:
  // `shard`: which part this rank holds (its rank in the group, unless a fault says otherwise).
  ColumnParallelLinear(std::string name, std::int64_t in, std::int64_t out, bool bias, DataType dtype,
                       double init_std, std::uint64_t seed, const TensorParallel& tp, ColumnSplit split, int shard);
  const char* kind() const override { return "column_parallel_linear"; }

 protected:
  Tensor do_forward(const Tensor& x, const model::PassContext& context) override;
  Tensor do_backward(const Tensor& dy, const model::PassContext& context) override;
};

class RowParallelLinear : public ParallelLinear {
 public:
  RowParallelLinear(std::string name, std::int64_t in, std::int64_t out, bool bias, DataType dtype, double init_std,
                    std::uint64_t seed, const TensorParallel& tp);
  const char* kind() const override { return "row_parallel_linear"; }

 protected:
  Tensor do_forward(const Tensor& x, const model::PassContext& context) override;
  Tensor do_backward(const Tensor& dy, const model::PassContext& context) override;
};

// Dropout on whole activations, or (sequence parallelism) on a sequence shard, drawing exactly
// the whole tensor's mask at the shard's elements.
class TensorParallelDropout : public model::Layer {
 public:
  TensorParallelDropout(std::string name, double p, std::uint64_t seed, const TensorParallel& tp);
  const char* kind() const override { return "dropout"; }

 protected:
  Tensor do_forward(const Tensor& x, const model::PassContext& context) override;
  Tensor do_backward(const Tensor& dy, const model::PassContext& context) override;

 private:
  Tensor apply(const Tensor& x, const model::PassContext& context, const std::string& what);
  double p_;
  std::uint64_t seed_;
  const TensorParallel& tp_;
};

class VocabParallelEmbedding : public model::Layer {
 public:
  VocabParallelEmbedding(std::string name, std::int64_t vocabulary, std::int64_t max_sequence, std::int64_t hidden,
                         DataType dtype, double init_std, std::uint64_t seed, const TensorParallel& tp);
  const char* kind() const override { return "vocab_parallel_embedding"; }
  model::Parameter& token_table() { return *wte_; }
  std::int64_t vocabulary() const { return vocabulary_; }

 protected:
  Tensor do_forward(const Tensor& tokens, const model::PassContext& context) override;
  Tensor do_backward(const Tensor& dy, const model::PassContext& context) override;

 private:
  const TensorParallel& tp_;
  std::int64_t vocabulary_;
  model::Parameter* wte_;  // rows [rank V/t, (rank+1) V/t)
  model::Parameter* wpe_;  // whole (replicated)
};

// Logits [B, T, V/t] of this rank's classes: x W_shard^T with the embedding's table shard (tied)
// or its own shard of "lm_head.weight".
class VocabParallelHead : public model::Layer {
 public:
  VocabParallelHead(std::string name, model::Parameter& tied_table_shard, const TensorParallel& tp);
  // With a table of its own, named `weight_name` ("lm_head.weight"; a pipeline stage's copy of
  // a tied table takes the table's name, "embedding.wte").
  VocabParallelHead(std::string name, std::string weight_name, std::int64_t vocabulary, std::int64_t hidden,
                    DataType dtype, double init_std, std::uint64_t seed, const TensorParallel& tp);
  const char* kind() const override { return "vocab_parallel_head"; }

 protected:
  Tensor do_forward(const Tensor& x, const model::PassContext& context) override;
  Tensor do_backward(const Tensor& dy, const model::PassContext& context) override;

 private:
  const TensorParallel& tp_;
  model::Parameter* weight_;
};

// Cross-entropy of vocabulary-parallel logits [.., V/t] against the whole vocabulary's targets.
class VocabParallelCrossEntropy : public model::Loss {
 public:
  VocabParallelCrossEntropy(std::int64_t vocabulary, const TensorParallel& tp) : vocabulary_(vocabulary), tp_(tp) {}
  const char* name() const override { return "vocab_parallel_cross_entropy"; }
  double compute(const Tensor& output, const Tensor& targets, double normalizer, Tensor* doutput) const override;

 private:
  std::int64_t vocabulary_;
  const TensorParallel& tp_;
};

}  // namespace parity::parallel
