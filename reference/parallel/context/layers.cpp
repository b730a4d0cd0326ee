// The context-parallel GPT's layers (see layers.hpp).
#include "reference/parallel/context/layers.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "reference/core/error.hpp"
#include "reference/ops/ops.hpp"
#include "reference/parallel/tensor/layers.hpp"
#include "reference/parallel/tensor/tensor_parallel.hpp"

namespace parity::parallel {

namespace {

// Rows `rows` (dimension 1) of a [B, T, ...] tensor, into a [B, rows, ...] one.
Tensor take_rows(const Tensor& x, const std::vector<std::int64_t>& rows, const std::string& name) {
  Shape shape = x.shape();
  shape[1] = static_cast<std::int64_t>(rows.size());
  Tensor out = Tensor::empty(name, shape, x.dtype(), MemoryCategory::activations);
  const std::int64_t B = x.dim(0), T = x.dim(1);
  const std::size_t row = x.bytes() / static_cast<std::size_t>(B * T);
  for (std::int64_t b = 0; b < B; ++b)
    for (std::size_t i = 0; i < rows.size(); ++i)
      std::memcpy(static_cast<char*>(out.raw()) + (static_cast<std::size_t>(b) * rows.size() + i) * row,
                  static_cast<const char*>(x.raw()) + static_cast<std::size_t>(b * T + rows[i]) * row, row);
  return out;
}

class ContextEmbedding : public model::Layer {
 public:
  // With tp: the token table split by rows over the tp ranks (vocabulary-parallel), each rank
  // looking up the tokens it holds and the lookups summed over tp.
  ContextEmbedding(std::string name, std::int64_t vocabulary, std::int64_t sequence, std::int64_t hidden, DataType dtype,
                   double init_std, std::uint64_t seed, ContextParallel& cp, const TensorParallel* tp)
      : Layer(std::move(name)), cp_(cp), tp_(tp), vocabulary_(vocabulary) {
    if (tp_)
      wte_ = &add_sharded_parameter(this->name() + ".wte",
                                    std::move(ShardSpec({vocabulary, hidden}).split(0, tp_->rank(), tp_->size())), dtype,
                                    Init::normal(0, init_std), seed);
    else
      wte_ = &add_parameter("wte", {vocabulary, hidden}, dtype, Init::normal(0, init_std), seed);
    wpe_ = &add_parameter("wpe", {sequence, hidden}, dtype, Init::normal(0, init_std / 2), seed);
  }
  const char* kind() const override { return "context_embedding"; }
  model::Parameter& token_table() { return *wte_; }

 protected:
  Tensor do_forward(const Tensor& tokens, const model::PassContext& context) override {
    const std::vector<std::int64_t> positions = cp_.positions(tokens.dim(1));
    const Tensor mine = cp_.split(tokens);
    const Tensor table = take_rows(wpe_->value.reshape({1, wpe_->value.dim(0), wpe_->value.dim(1)}), positions, "wpe.rows")
                             .reshape({static_cast<std::int64_t>(positions.size()), wpe_->value.dim(1)});
    Tensor y = activation("out", {mine.dim(0), mine.dim(1), wte_->value.dim(1)}, wte_->value.dtype());
    if (tp_) {
      // One tp rank holds each token's row, so the sum is the whole table's lookup (with sequence
      // parallelism each tp rank keeps its contiguous share of the rows, and their positions).
      ops::embedding_shard_forward(mine, wte_->value, first_token(), vocabulary_, y);
      if (tp_->sequence_parallel())
        y = tp_->reduce_scatter(y, 1, name());
      else
        tp_->all_reduce(y, name());
      const std::int64_t c = table.dim(1), rows = y.dim(1), offset = tp_->sequence_parallel() ? tp_->rank() * rows : 0;
      const Tensor share = table.reshape({table.numel()}).segment("wpe.share", offset * c, {rows * c});
      for (std::int64_t b = 0; b < y.dim(0); ++b) {
        Tensor row = y.segment(y.name(), b * rows * c, {rows * c});
        ops::accumulate(row, share);
      }
    } else {
      ops::embedding_forward(mine, wte_->value, table, y);
    }
    save(context, {mine});
    return y;
  }
  Tensor do_backward(const Tensor& shard, const model::PassContext& context) override {
    const Tensor mine = take_saved(context).at(0);
    const std::int64_t sequence = mine.dim(1) * cp_.size();
    const std::vector<std::int64_t> positions = cp_.positions(sequence);
    // With sequence parallelism the rank's rows gathered first (communication, so here even when
    // the gradients wait): every tp rank then has the whole position-table gradient of its rows.
    const Tensor dy = tp_ && tp_->sequence_parallel() ? tp_->all_gather(shard, 1, name()) : shard;
    weight_gradient(context, [this, dy, mine, positions] {
      const std::int64_t c = wpe_->value.dim(1);
      Tensor rows = Tensor::zeros("dwpe.rows", {static_cast<std::int64_t>(positions.size()), c}, wpe_->value.dtype(),
                                  MemoryCategory::workspace);
      if (tp_) {
        ops::embedding_shard_backward(dy, mine, first_token(), wte_->gradient());
        for (std::int64_t b = 0; b < dy.dim(0); ++b)
          ops::accumulate(rows, dy.segment("dy", b * rows.numel(), rows.shape()));
      } else {
        ops::embedding_backward(dy, mine, wte_->gradient(), rows);
      }
      Tensor& dwpe = wpe_->gradient();
      for (std::size_t i = 0; i < positions.size(); ++i) {
        Tensor into = dwpe.segment("dwpe.row", positions[i] * c, {c});
        ops::accumulate(into, rows.segment("row", static_cast<std::int64_t>(i) * c, {c}));
      }
    });
    return {};
  }

 private:
  std::int64_t first_token() const { return tp_ ? tp_->rank() * wte_->value.dim(0) : 0; }
  ContextParallel& cp_;
  const TensorParallel* tp_;
  std::int64_t vocabulary_;
  model::Parameter* wte_;
  model::Parameter* wpe_;
};

class ContextDropout : public model::Layer {
 public:
  // With sequence parallelism (tp), x is tp rank r's contiguous share of the cp rank's rows.
  ContextDropout(std::string name, double p, std::uint64_t seed, ContextParallel& cp, const TensorParallel* tp)
      : Layer(std::move(name)), p_(p), seed_(seed), cp_(cp), tp_(tp && tp->sequence_parallel() ? tp : nullptr) {}
  const char* kind() const override { return "dropout"; }

 protected:
  Tensor do_forward(const Tensor& x, const model::PassContext& context) override {
    if (p_ == 0 || !context.training) return x;
    Tensor y = activation("out", x.shape(), x.dtype());
    each_chunk(x, y, context, [&](const Tensor& in, Tensor& out, ops::DropoutKey key) { ops::dropout_forward(in, p_, key, out); });
    return y;
  }
  Tensor do_backward(const Tensor& dy, const model::PassContext& context) override {
    if (p_ == 0 || !context.training) return dy;
    Tensor dx = activation_gradient("dx", dy.shape(), dy.dtype());
    each_chunk(dy, dx, context,
               [&](const Tensor& in, Tensor& out, ops::DropoutKey key) { ops::dropout_backward(in, p_, key, out); });
    return dx;
  }

 private:
  // Runs body on each run of consecutive positions of each row of [B, rows, C] x and y (the rank's
  // rows hold two chunks; a sequence-parallel share may cut one) with the key of the run's first
  // element in the whole [B_global, T, C] tensor (the single device's dropout key).
  template <typename Body>
  void each_chunk(const Tensor& x, Tensor& y, const model::PassContext& context, const Body& body) const {
    const std::int64_t B = x.dim(0), rows = x.dim(1), C = x.numel() / (B * rows);
    const std::int64_t local = rows * (tp_ ? tp_->size() : 1), T = local * cp_.size();
    const std::int64_t offset = tp_ ? tp_->rank() * rows : 0;  // of this share in the rank's rows
    const std::vector<std::int64_t> positions = cp_.positions(T);
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t i = 0; i < rows;) {
        std::int64_t n = 1;
        const auto at = [&](std::int64_t k) { return positions[static_cast<std::size_t>(offset + k)]; };
        while (i + n < rows && at(i + n) == at(i) + n) ++n;
        const Tensor in = x.segment("in", (b * rows + i) * C, {n, C});
        Tensor out = y.segment("out", (b * rows + i) * C, {n, C});
        const auto first = static_cast<std::uint64_t>(((context.first_row + b) * T + at(i)) * C);
        body(in, out, model::dropout_key(seed_ + context.dropout_seed_offset, name(), context.step, first));
        i += n;
      }
  }
  double p_;
  std::uint64_t seed_;
  ContextParallel& cp_;
  const TensorParallel* tp_;  // with sequence parallelism only
};

class ContextAttention : public model::Layer {
 public:
  // `heads`: the heads this rank attends (all, or heads / tp with tensor parallelism, whose
  // column-parallel qkv holds their columns and row-parallel proj sums their outputs over tp).
  ContextAttention(std::string name, int heads, std::unique_ptr<model::Layer> qkv, std::unique_ptr<model::Layer> proj,
                   std::unique_ptr<model::Layer> dropout, ContextParallel& cp)
      : Layer(std::move(name)), heads_(heads), cp_(cp) {
    qkv_ = &add_child(std::move(qkv));
    proj_ = &add_child(std::move(proj));
    dropout_ = &add_child(std::move(dropout));
  }
  const char* kind() const override { return "context_attention"; }

 protected:
  Tensor do_forward(const Tensor& x, const model::PassContext& context) override {
    const Tensor qkv = qkv_->forward(x, context);
    const std::int64_t B = qkv.dim(0), local = qkv.dim(1), C = qkv.dim(2) / 3, T = local * cp_.size();
    // 16-bit storage: the attention in float32, its output rounded once (as ops::attention does).
    const DataType work = is_half(x.dtype()) ? DataType::float32 : x.dtype();
    const Tensor fused = work == qkv.dtype() ? qkv : cast(qkv, work, "qkv", MemoryCategory::workspace);
    const Tensor q = part(fused, 0), k = part(fused, 1), v = part(fused, 2);
    Tensor out = activation("core", {B, local, C}, work);
    Tensor lse = activation("lse", {B, heads_, local}, work);
    cp_.attention_forward(q, k, v, T, heads_, out, lse);
    save(context, {q, k, v, out, lse});
    Tensor core = out;
    if (work != x.dtype()) core = cast(out, x.dtype(), "core", MemoryCategory::activations);
    return dropout_->forward(proj_->forward(core, context), context);
  }
  Tensor do_backward(const Tensor& dy, const model::PassContext& context) override {
    Tensor dout = proj_->backward(dropout_->backward(dy, context), context);
    const auto saved = take_saved(context);
    const DataType stored = dout.dtype();
    if (saved[0].dtype() != stored) dout = cast(dout, saved[0].dtype(), "dout", MemoryCategory::activations);
    const Tensor &q = saved[0], &k = saved[1], &v = saved[2], &out = saved[3], &lse = saved[4];
    const std::int64_t B = q.dim(0), local = q.dim(1), C = q.dim(2);
    Tensor dq = activation_gradient("dq", q.shape(), q.dtype()), dk = activation_gradient("dk", k.shape(), k.dtype()),
           dv = activation_gradient("dv", v.shape(), v.dtype());
    cp_.attention_backward(dout, q, k, v, out, lse, local * cp_.size(), heads_, dq, dk, dv);
    // dQ, dK, dV fused row by row in the work type, then rounded to the stored type once.
    Tensor dqkv = activation_gradient("dqkv", {B, local, 3 * C}, q.dtype());
    const std::size_t row = static_cast<std::size_t>(C) * size_of(q.dtype());
    for (std::int64_t r = 0; r < B * local; ++r)
      for (int p = 0; p < 3; ++p)
        std::memcpy(static_cast<char*>(dqkv.raw()) + static_cast<std::size_t>(3 * r + p) * row,
                    static_cast<const char*>((p == 0 ? dq : p == 1 ? dk : dv).raw()) + static_cast<std::size_t>(r) * row, row);
    if (stored != dqkv.dtype()) dqkv = cast(dqkv, stored, "dqkv", MemoryCategory::activations);
    return qkv_->backward(dqkv, context);
  }

 private:
  // Columns [p C, (p + 1) C) of a fused [B, Tl, 3C], in `type`.
  // (qkv already in the type the part is wanted in: converted once for all three parts.)
  static Tensor part(const Tensor& qkv, int p) {
    const std::int64_t rows = qkv.dim(0) * qkv.dim(1), C = qkv.dim(2) / 3;
    Tensor out = Tensor::empty(p == 0 ? "q" : p == 1 ? "k" : "v", {qkv.dim(0), qkv.dim(1), C}, qkv.dtype(),
                               MemoryCategory::activations);
    const std::size_t row = static_cast<std::size_t>(C) * size_of(qkv.dtype());
    for (std::int64_t r = 0; r < rows; ++r)
      std::memcpy(static_cast<char*>(out.raw()) + static_cast<std::size_t>(r) * row,
                  static_cast<const char*>(qkv.raw()) + static_cast<std::size_t>(3 * r + p) * row, row);
    return out;
  }
  int heads_;
  ContextParallel& cp_;
  model::Layer* qkv_;
  model::Layer* proj_;
  model::Layer* dropout_;
};

class ContextLoss : public model::Loss {
 public:
  // With tp: the logits are this tp rank's classes (vocabulary-parallel cross-entropy).
  ContextLoss(ContextParallel& cp, const TensorParallel* tp, std::int64_t vocabulary)
      : cp_(cp), tp_(tp), vocabulary_(vocabulary) {}
  const char* name() const override { return "context_cross_entropy"; }
  double compute(const Tensor& output, const Tensor& targets, double normalizer, Tensor* doutput) const override {
    const Tensor mine = cp_.split(targets);
    double loss = tp_ ? VocabParallelCrossEntropy(vocabulary_, *tp_).compute(output, mine, normalizer, doutput)
                      : model::CrossEntropyLoss().compute(output, mine, normalizer, doutput);
    cp_.group().all_reduce({&loss, 1, DataType::float64, MemorySpace::host}, {&loss, 1, DataType::float64, MemorySpace::host},
                           ReduceOp::sum);
    return loss;
  }

 private:
  ContextParallel& cp_;
  const TensorParallel* tp_;
  std::int64_t vocabulary_;
};

}  // namespace

std::unique_ptr<model::Model> build_context_parallel_gpt(const model::GptConfig& c, ContextParallel& cp,
                                                         const TensorParallel* tp,
                                                         const std::vector<model::LayerRange>& ranges) {
  c.validate();
  if (c.moe.enabled()) throw UsageError("context parallelism: the GPT has MoE layers, which these layers do not take");
  cp.positions(c.sequence);  // refuses a sequence that does not split into 2 cp chunks
  const int t = tp ? tp->size() : 1;
  if (tp) {
    validate_tensor_parallel(c, t, tp->sequence_parallel());
    if (tp->sequence_parallel() && (c.sequence / cp.size()) % t != 0)
      throw UsageError("context parallelism with sequence parallelism: the " + std::to_string(c.sequence / cp.size()) +
                       " tokens of a sequence a cp rank holds do not split over tp = " + std::to_string(t) + " ranks");
  }
  if (cp.config().variant == "ulysses" && (c.heads / t) % cp.size() != 0)
    throw UsageError("context parallelism ulysses: " + std::to_string(c.heads / t) + " heads per tp rank do not split over cp = " +
                     std::to_string(cp.size()) + " ranks");
  auto model = std::make_unique<model::Model>(c.describe() + " cp" + std::to_string(cp.size()) +
                                                  (tp ? " tp" + std::to_string(t) : ""),
                                              std::make_unique<ContextLoss>(cp, tp, c.vocabulary), c.dtype);
  const double init_std = 0.02, proj_std = 0.02 / std::sqrt(2.0 * c.layers);
  // The top-level layers this rank holds (a pipeline stage's), or all of them.
  const int total = c.layers + 3;
  std::vector<int> indices;
  if (ranges.empty())
    for (int i = 0; i < total; ++i) indices.push_back(i);
  else
    indices = model::layer_indices(ranges, total, "GPT model");
  const auto holds = [&](int i) { return std::find(indices.begin(), indices.end(), i) != indices.end(); };
  ContextEmbedding* embedding = nullptr;
  if (holds(0)) {
    auto owned = std::make_unique<ContextEmbedding>("embedding", c.vocabulary, c.sequence, c.hidden, c.dtype, init_std,
                                                    c.seed, cp, tp);
    embedding = owned.get();
    model->add(std::move(owned));
  }
  // A linear layer whole, or split over tp by columns (`parts` blocks split alike: qkv) or rows.
  const auto column = [&](const std::string& name, std::int64_t in, std::int64_t out, double std, int parts) -> std::unique_ptr<model::Layer> {
    if (!tp) return std::make_unique<model::Linear>(name, in, out, true, c.dtype, std, c.seed);
    return std::make_unique<ColumnParallelLinear>(name, in, out, true, c.dtype, std, c.seed, *tp, ColumnSplit{parts}, tp->rank());
  };
  const auto row = [&](const std::string& name, std::int64_t in, std::int64_t out, double std) -> std::unique_ptr<model::Layer> {
    if (!tp) return std::make_unique<model::Linear>(name, in, out, true, c.dtype, std, c.seed);
    return std::make_unique<RowParallelLinear>(name, in, out, true, c.dtype, std, c.seed, *tp);
  };
  for (int i = 0; i < c.layers; ++i) {
    if (!holds(i + 1)) continue;
    const std::string name = "blocks." + std::to_string(i);
    auto mlp = std::make_unique<model::FeedForward>(name + ".mlp", column(name + ".mlp.fc", c.hidden, 4 * c.hidden, init_std, 1),
                                                    row(name + ".mlp.proj", 4 * c.hidden, c.hidden, proj_std),
                                                    std::make_unique<ContextDropout>(name + ".mlp.dropout", c.dropout, c.seed, cp, tp));
    auto attention = std::make_unique<ContextAttention>(
        name + ".attn", c.heads / t, column(name + ".attn.qkv", c.hidden, 3 * c.hidden, init_std, 3),
        row(name + ".attn.proj", c.hidden, c.hidden, proj_std),
        std::make_unique<ContextDropout>(name + ".attn.dropout", c.dropout, c.seed, cp, tp), cp);
    model->add(std::make_unique<model::TransformerBlock>(name, c.hidden, c.dtype, c.seed, std::move(attention), std::move(mlp)));
  }
  if (holds(c.layers + 1)) model->add(std::make_unique<model::LayerNorm>("ln_f", c.hidden, c.dtype, c.seed));
  if (holds(c.layers + 2)) {
    // The tied table: the embedding's when this rank holds it, else a copy of the same name (a
    // later pipeline stage's, its gradient summed with the first stage's by the caller).
    const std::string weight = c.tied_embeddings ? "embedding.wte" : "lm_head.weight";
    if (tp) {
      if (c.tied_embeddings && embedding)
        model->add(std::make_unique<VocabParallelHead>("lm_head", embedding->token_table(), *tp));
      else
        model->add(std::make_unique<VocabParallelHead>("lm_head", weight, c.vocabulary, c.hidden, c.dtype, init_std, c.seed,
                                                       *tp));
    } else if (c.tied_embeddings && embedding) {
      model->add(std::make_unique<model::LanguageModelHead>("lm_head", embedding->token_table()));
    } else {
      model->add(std::make_unique<model::LanguageModelHead>("lm_head", weight, c.vocabulary, c.hidden, c.dtype, init_std,
                                                            c.seed));
    }
  }
  return model;
}

}  // namespace parity::parallel
