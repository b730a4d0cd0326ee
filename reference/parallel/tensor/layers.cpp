// Tensor-parallel layers (see layers.hpp).
#include "reference/parallel/tensor/layers.hpp"

#include <cmath>
#include <numeric>

#include "reference/core/error.hpp"
#include "reference/ops/cpu.hpp"

namespace parity::parallel {

ShardSpec ColumnSplit::spec(std::int64_t in, std::int64_t out, int shard, int shards) const {
  const std::int64_t block = out / parts, width = block / shards;
  std::vector<std::int64_t> keep;
  for (int k = 0; k < parts; ++k)
    for (std::int64_t j = 0; j < width; ++j) keep.push_back(k * block + shard * width + j);
  if (in == 0) return std::move(ShardSpec({out}).indices(0, std::move(keep)));
  return std::move(ShardSpec({in, out}).indices(1, std::move(keep)));
}

namespace {
// The input side of a column-parallel layer (f, or the fused sequence all-gather).
Tensor gathered_input(const TensorParallel& tp, const Tensor& x, const std::string& site) {
  return tp.sequence_parallel() ? tp.all_gather(x, 1, site) : x;
}
// The gradient of the layer's input from the gradient of the whole (gathered) input.
Tensor input_gradient(const TensorParallel& tp, Tensor& dx_whole, const std::string& site) {
  if (tp.sequence_parallel()) return tp.reduce_scatter(dx_whole, 1, site);
  if (!tp.fault("copy_without_all_reduce")) tp.all_reduce(dx_whole, site);
  return dx_whole;
}
}  // namespace

// ---- column-parallel linear ----

ColumnParallelLinear::ColumnParallelLinear(std::string name, std::int64_t in, std::int64_t out, bool bias,
                                           DataType dtype, double init_std, std::uint64_t seed,
                                           const TensorParallel& tp, ColumnSplit split, int shard)
    : ParallelLinear(std::move(name), tp) {
  weight_ = &add_sharded_parameter(this->name() + ".weight", split.spec(in, out, shard, tp.size()), dtype,
                                   Init::normal(0, init_std), seed);
  if (bias)
    bias_ = &add_sharded_parameter(this->name() + ".bias", split.spec(0, out, shard, tp.size()), dtype,
                                   Init::constant(0), seed);
}

Tensor ColumnParallelLinear::do_forward(const Tensor& x, const model::PassContext& context) {
  const Tensor whole = gathered_input(tp_, x, name());
  Shape shape = whole.shape();
  shape.back() = weight_->value.dim(1);
  Tensor y = activation("out", shape, whole.dtype());
  const Tensor no_bias;
  ops::linear_forward(whole, weight_->value, bias_ ? bias_->value : no_bias, y);
  save(context, {tp_.sequence_parallel() ? x : whole});  // the shard only: gathered again in backward
  return y;
}

Tensor ColumnParallelLinear::do_backward(const Tensor& dy, const model::PassContext& context) {
  const Tensor whole = gathered_input(tp_, take_saved(context).at(0), name());
  Tensor dx = activation_gradient("dx", whole.shape(), whole.dtype()), none;
  ops::linear_backward(dy, whole, weight_->value, dx, none, none);
  weight_gradient(context, [this, dy, whole] {
    Tensor no_dx, no_bias;
    ops::linear_backward(dy, whole, weight_->value, no_dx, weight_->gradient(), bias_ ? bias_->gradient() : no_bias);
  });
  return input_gradient(tp_, dx, name());
}

// ---- row-parallel linear ----

RowParallelLinear::RowParallelLinear(std::string name, std::int64_t in, std::int64_t out, bool bias, DataType dtype,
                                     double init_std, std::uint64_t seed, const TensorParallel& tp)
    : ParallelLinear(std::move(name), tp) {
  weight_ = &add_sharded_parameter(this->name() + ".weight", std::move(ShardSpec({in, out}).split(0, tp.rank(), tp.size())),
                                   dtype, Init::normal(0, init_std), seed);
  if (bias) bias_ = &add_parameter("bias", {out}, dtype, Init::constant(0), seed);
}

Tensor RowParallelLinear::do_forward(const Tensor& x, const model::PassContext& context) {
  Shape shape = x.shape();
  shape.back() = weight_->value.dim(1);
  Tensor partial = activation("partial", shape, x.dtype());
  const Tensor no_bias;
  ops::linear_forward(x, weight_->value, bias_ && tp_.rank() == 0 ? bias_->value : no_bias, partial);
  save(context, {x});
  if (tp_.sequence_parallel()) return tp_.reduce_scatter(partial, 1, name());
  if (!tp_.fault("reduce_without_all_reduce")) tp_.all_reduce(partial, name());
  return partial;
}

Tensor RowParallelLinear::do_backward(const Tensor& dy, const model::PassContext& context) {
  const Tensor x = take_saved(context).at(0);
  const Tensor whole = tp_.sequence_parallel() ? tp_.all_gather(dy, 1, name()) : dy;
  Tensor dx = activation_gradient("dx", x.shape(), x.dtype()), none;
  ops::linear_backward(whole, x, weight_->value, dx, none, none);
  weight_gradient(context, [this, whole, x] {
    Tensor no_dx, no_bias;
    ops::linear_backward(whole, x, weight_->value, no_dx, weight_->gradient(), bias_ ? bias_->gradient() : no_bias);
  });
  return dx;
}

// ---- dropout ----

TensorParallelDropout::TensorParallelDropout(std::string name, double p, std::uint64_t seed, const TensorParallel& tp)
    : Layer(std::move(name)), p_(p), seed_(seed), tp_(tp) {
  require(p >= 0 && p < 1, "dropout " + this->name() + ": probability " + std::to_string(p) + " must be in [0, 1)");
}

Tensor TensorParallelDropout::apply(const Tensor& x, const model::PassContext& context, const std::string& what) {
  const bool backward = what == "dx";
  Tensor y = backward ? activation_gradient(what, x.shape(), x.dtype()) : activation(what, x.shape(), x.dtype());
  auto run = [&](const Tensor& in, Tensor& out, std::uint64_t first) {
    const ops::DropoutKey key = model::dropout_key(seed_ + context.dropout_seed_offset, name(), context.step, first);
    if (backward)
      ops::dropout_backward(in, p_, key, out);
    else
      ops::dropout_forward(in, p_, key, out);
  };
  const std::int64_t per_row = x.numel() / x.dim(0);
  if (!tp_.sequence_parallel()) {
    run(x, y, static_cast<std::uint64_t>(context.first_row * per_row));
    return y;
  }
  // A shard [B, T/t, C] of the whole [B, T, C]: each sequence's part is contiguous here and
  // starts at ((first_row + b) T + rank T/t) C in the whole.
  const std::int64_t b_count = x.dim(0), t_local = x.dim(1), c = x.numel() / (b_count * t_local);
  const std::int64_t t_whole = t_local * tp_.size();
  for (std::int64_t b = 0; b < b_count; ++b) {
    const Tensor in = x.segment(x.name(), b * per_row, {per_row});
    Tensor out = y.segment(y.name(), b * per_row, {per_row});
    run(in, out, static_cast<std::uint64_t>(((context.first_row + b) * t_whole + tp_.rank() * t_local) * c));
  }
  return y;
}

Tensor TensorParallelDropout::do_forward(const Tensor& x, const model::PassContext& context) {
  if (p_ == 0 || !context.training) return x;
  return apply(x, context, "out");
}

Tensor TensorParallelDropout::do_backward(const Tensor& dy, const model::PassContext& context) {
  if (p_ == 0 || !context.training) return dy;
  return apply(dy, context, "dx");
}

// ---- vocabulary-parallel embedding ----

VocabParallelEmbedding::VocabParallelEmbedding(std::string name, std::int64_t vocabulary, std::int64_t max_sequence,
                                               std::int64_t hidden, DataType dtype, double init_std,
                                               std::uint64_t seed, const TensorParallel& tp)
    : Layer(std::move(name)), tp_(tp), vocabulary_(vocabulary) {
  wte_ = &add_sharded_parameter(this->name() + ".wte", std::move(ShardSpec({vocabulary, hidden}).split(0, tp.rank(), tp.size())),
                                dtype, Init::normal(0, init_std), seed);
  wpe_ = &add_parameter("wpe", {max_sequence, hidden}, dtype, Init::normal(0, init_std / 2), seed);
}

Tensor VocabParallelEmbedding::do_forward(const Tensor& tokens, const model::PassContext& context) {
  const std::int64_t first = tp_.rank() * wte_->value.dim(0), c = wte_->value.dim(1);
  Tensor lookup = activation("lookup", {tokens.dim(0), tokens.dim(1), c}, wte_->value.dtype());
  ops::embedding_shard_forward(tokens, wte_->value, first, vocabulary_, lookup);
  // One rank holds each token's row, so the sum is exact: the whole table's lookup.
  Tensor y = lookup;
  if (tp_.sequence_parallel())
    y = tp_.reduce_scatter(lookup, 1, name());
  else
    tp_.all_reduce(y, name());
  // Positions: this rank's tokens are [offset, offset + T_local) of every sequence.
  const std::int64_t t_local = y.dim(1), offset = tp_.sequence_parallel() ? tp_.rank() * t_local : 0;
  const Tensor positions = wpe_->value.segment("wpe.rows", offset * c, {t_local * c});
  for (std::int64_t b = 0; b < y.dim(0); ++b) {
    Tensor row = y.segment(y.name(), b * t_local * c, {t_local * c});
    ops::accumulate(row, positions);
  }
  save(context, {tokens});
  return y;
}

Tensor VocabParallelEmbedding::do_backward(const Tensor& dy, const model::PassContext& context) {
  const Tensor tokens = take_saved(context).at(0);
  const std::int64_t c = wte_->value.dim(1), t_local = dy.dim(1);
  const std::int64_t offset = tp_.sequence_parallel() ? tp_.rank() * t_local : 0;
  // The gather is communication, so it runs here even when the gradients wait for W.
  const Tensor whole = tp_.sequence_parallel() ? tp_.all_gather(dy, 1, name()) : dy;
  weight_gradient(context, [this, dy, whole, tokens, offset, c, t_local] {
    Tensor dpositions = wpe_->gradient().segment("dwpe.rows", offset * c, {t_local * c});
    for (std::int64_t b = 0; b < dy.dim(0); ++b)
      ops::accumulate(dpositions, dy.segment(dy.name(), b * t_local * c, {t_local * c}));
    ops::embedding_shard_backward(whole, tokens, tp_.rank() * wte_->value.dim(0), wte_->gradient());
  });
  return {};  // tokens have no gradient
}

// ---- vocabulary-parallel head ----

VocabParallelHead::VocabParallelHead(std::string name, model::Parameter& tied_table_shard, const TensorParallel& tp)
    : Layer(std::move(name)), tp_(tp), weight_(&tied_table_shard) {
  borrow_parameter(tied_table_shard);
}

VocabParallelHead::VocabParallelHead(std::string name, std::string weight_name, std::int64_t vocabulary,
                                     std::int64_t hidden, DataType dtype, double init_std, std::uint64_t seed,
                                     const TensorParallel& tp)
    : Layer(std::move(name)), tp_(tp) {
  weight_ = &add_sharded_parameter(std::move(weight_name),
                                   std::move(ShardSpec({vocabulary, hidden}).split(0, tp.rank(), tp.size())), dtype,
                                   Init::normal(0, init_std), seed);
}

Tensor VocabParallelHead::do_forward(const Tensor& x, const model::PassContext& context) {
  const Tensor whole = gathered_input(tp_, x, name());
  const Tensor& w = weight_->value;
  const std::int64_t n = whole.numel() / whole.dim(-1);
  Shape shape = whole.shape();
  shape.back() = w.dim(0);
  Tensor logits = activation("logits", shape, whole.dtype());
  Tensor logits2 = logits.reshape({n, w.dim(0)});
  ops::matmul(whole.reshape({n, w.dim(1)}), false, w, true, logits2, false);
  save(context, {tp_.sequence_parallel() ? x : whole});
  return logits;
}

Tensor VocabParallelHead::do_backward(const Tensor& dy, const model::PassContext& context) {
  const Tensor whole = gathered_input(tp_, take_saved(context).at(0), name());
  const Tensor& w = weight_->value;
  const std::int64_t n = whole.numel() / whole.dim(-1);
  const Tensor dy2 = dy.reshape({n, w.dim(0)});
  Tensor dx = activation_gradient("dx", whole.shape(), whole.dtype());
  Tensor dx2 = dx.reshape({n, w.dim(1)});
  ops::matmul(dy2, false, w, false, dx2, false);  // dx = dy W
  weight_gradient(context, [this, dy2, whole, n] {
    ops::matmul(dy2, true, whole.reshape({n, weight_->value.dim(1)}), false, weight_->gradient(), true);  // dW += dy^T x
  });
  return input_gradient(tp_, dx, name());
}

// ---- vocabulary-parallel cross-entropy ----

double VocabParallelCrossEntropy::compute(const Tensor& output, const Tensor& targets, double normalizer,
                                          Tensor* doutput) const {
  const std::int64_t v = output.dim(-1), n = output.numel() / v;
  const Tensor logits = output.reshape({n, v});
  const Tensor flat_targets = targets.reshape({targets.numel()});
  const DataType stat = output.dtype() == DataType::float64 ? DataType::float64 : DataType::float32;
  auto statistic = [&](const char* what, Shape shape) {
    return Tensor::empty(std::string("loss.") + what, std::move(shape), stat, MemoryCategory::activations, output.space());
  };
  // The global row maxima, then the sums of exponentials and the target logits in one
  // all-reduce of [2, N].
  Tensor maxima = statistic("row_max", {n});
  ops::cross_entropy_shard_max(logits, maxima);
  tp_.all_reduce(maxima, "loss", ReduceOp::max);
  Tensor sums = statistic("sums", {2, n});
  Tensor sum_exp = sums.segment("loss.sum_exp", 0, {n}), target_logit = sums.segment("loss.target_logit", n, {n});
  const std::int64_t first = tp_.rank() * v;
  ops::cross_entropy_shard_sums(logits, flat_targets, first, vocabulary_, maxima, sum_exp, target_logit);
  tp_.all_reduce(sums, "loss");
  const std::vector<double> m = maxima.to_vector(), s = sums.to_vector();
  double total = 0;
  for (std::int64_t i = 0; i < n; ++i)
    total += std::log(s[static_cast<std::size_t>(i)]) + m[static_cast<std::size_t>(i)] - s[static_cast<std::size_t>(n + i)];
  if (doutput) {
    *doutput = Tensor::empty("dlogits", output.shape(), output.dtype(), MemoryCategory::workspace, output.space());
    Tensor d2 = doutput->reshape({n, v});
    ops::cross_entropy_shard_backward(logits, flat_targets, first, maxima, sum_exp, normalizer, d2);
  }
  return total / normalizer;
}

}  // namespace parity::parallel
