// The tensor-parallel GPT, its gradient sum and the gathering of its shards (see
// tensor_parallel.hpp).
#include "reference/parallel/tensor/tensor_parallel.hpp"

#include <algorithm>
#include <cmath>

#include "reference/core/error.hpp"
#include "reference/parallel/precision/precision.hpp"

namespace parity::parallel {

void validate_tensor_parallel(const model::GptConfig& c, int t, bool sequence_parallel) {
  const std::string what = "tensor-parallel size " + std::to_string(t);
  if (t < 1) throw UsageError(what + ": must be at least 1");
  if (sequence_parallel && t == 1)
    throw UsageError("sequence parallelism needs a tensor-parallel size above 1 (it shards what the tensor-parallel "
                     "ranks would otherwise all hold)");
  std::string bad;
  auto check = [&](const char* name, std::int64_t n) {
    if (n % t != 0) bad += (bad.empty() ? "" : ", ") + std::string(name) + " " + std::to_string(n);
  };
  check("heads", c.heads);
  check("hidden", c.hidden);
  check("FFN", 4 * c.hidden);
  check("vocabulary", c.vocabulary);
  if (c.moe.enabled()) check("expert FFN", c.moe.expert_hidden > 0 ? c.moe.expert_hidden : 4 * c.hidden);
  if (!bad.empty())
    throw UsageError(what + " does not divide the model's " + bad + " (" + c.describe() +
                     "); choose a size that divides the heads and the vocabulary");
  if (sequence_parallel && c.moe.enabled())
    throw UsageError("sequence parallelism does not compose with MoE layers here (an expert split over the tp ranks "
                     "takes whole sequences); use tensor parallelism without it");
  if (sequence_parallel && c.sequence % t != 0)
    throw UsageError(what + " does not divide the sequence of " + std::to_string(c.sequence) +
                     " tokens, which sequence parallelism splits");
}

std::unique_ptr<model::Model> build_tensor_parallel_gpt(const model::GptConfig& c, const TensorParallel& tp,
                                                        const std::vector<model::LayerRange>& ranges,
                                                        const model::MoeBuild& moe) {
  c.validate();
  const int t = tp.size(), r = tp.rank();
  validate_tensor_parallel(c, t, tp.sequence_parallel());
  const std::vector<int> indices = model::layer_indices(ranges, c.layers + 3, "GPT model");
  auto m = std::make_unique<model::Model>(c.describe() + " tp" + std::to_string(t) + (tp.sequence_parallel() ? " sp" : ""),
                                          std::make_unique<VocabParallelCrossEntropy>(c.vocabulary, tp), c.dtype);
  const double init_std = 0.02, proj_std = 0.02 / std::sqrt(2.0 * c.layers);
  // Faults, for the conformance checks that must catch them.
  const ColumnSplit qkv_split{tp.fault("transposed_split") ? 1 : 3};
  const int fc_shard = tp.fault("wrong_shard") ? (r + 1) % t : r;
  VocabParallelEmbedding* embedding = nullptr;
  for (int i : indices) {
    if (i == 0) {
      embedding = static_cast<VocabParallelEmbedding*>(&m->add(std::make_unique<VocabParallelEmbedding>(
          "embedding", c.vocabulary, c.sequence, c.hidden, c.dtype, init_std, c.seed, tp)));
    } else if (i <= c.layers) {
      const std::string b = "blocks." + std::to_string(i - 1);
      auto attention = std::make_unique<model::CausalSelfAttention>(
          b + ".attn", c.heads / t,
          std::make_unique<ColumnParallelLinear>(b + ".attn.qkv", c.hidden, 3 * c.hidden, true, c.dtype, init_std,
                                                 c.seed, tp, qkv_split, r),
          std::make_unique<RowParallelLinear>(b + ".attn.proj", c.hidden, c.hidden, true, c.dtype, proj_std, c.seed, tp),
          std::make_unique<TensorParallelDropout>(b + ".attn.dropout", c.dropout, c.seed, tp));
      if (c.moe.holds(i - 1)) {
        // The router is whole on every tp rank (each sees the same tokens and so routes alike);
        // every expert, and the shared one, is split as the dense FFN is.
        const model::ExpertBuilder split_expert = [&tp, r](const std::string& name, std::int64_t hidden, std::int64_t ffn,
                                                           DataType dtype, double init, double proj, std::uint64_t seed) {
          return std::make_unique<model::FeedForward>(
              name,
              std::make_unique<ColumnParallelLinear>(name + ".fc", hidden, ffn, true, dtype, init, seed, tp,
                                                     ColumnSplit{}, r),
              std::make_unique<RowParallelLinear>(name + ".proj", ffn, hidden, true, dtype, proj, seed, tp),
              std::make_unique<TensorParallelDropout>(name + ".dropout", 0.0, seed, tp));
        };
        m->add(model::gpt_moe_block(c, i - 1, std::move(attention), moe, split_expert));
        continue;
      }
      auto mlp = std::make_unique<model::FeedForward>(
          b + ".mlp",
          std::make_unique<ColumnParallelLinear>(b + ".mlp.fc", c.hidden, 4 * c.hidden, true, c.dtype, init_std, c.seed,
                                                 tp, ColumnSplit{}, fc_shard),
          std::make_unique<RowParallelLinear>(b + ".mlp.proj", 4 * c.hidden, c.hidden, true, c.dtype, proj_std, c.seed, tp),
          std::make_unique<TensorParallelDropout>(b + ".mlp.dropout", c.dropout, c.seed, tp));
      m->add(std::make_unique<model::TransformerBlock>(b, c.hidden, c.dtype, c.seed, std::move(attention), std::move(mlp)));
    } else if (i == c.layers + 1) {
      m->add(std::make_unique<model::LayerNorm>("ln_f", c.hidden, c.dtype, c.seed));
    } else if (c.tied_embeddings && embedding) {
      m->add(std::make_unique<VocabParallelHead>("lm_head", embedding->token_table(), tp));
    } else {
      m->add(std::make_unique<VocabParallelHead>("lm_head", c.tied_embeddings ? "embedding.wte" : "lm_head.weight",
                                                 c.vocabulary, c.hidden, c.dtype, init_std, c.seed, tp));
    }
  }
  return m;
}

std::vector<model::Parameter*> sequence_sharded_gradients(model::Model& model, const TensorParallel& tp) {
  std::vector<model::Parameter*> out;
  if (!tp.sequence_parallel()) return out;
  for (model::Layer* layer : model::all_layers(model.layers())) {
    if (dynamic_cast<model::LayerNorm*>(layer)) {
      for (model::Parameter* p : layer->own_parameters()) out.push_back(p);
    } else if (dynamic_cast<VocabParallelEmbedding*>(layer)) {
      for (model::Parameter* p : layer->own_parameters())
        if (!p->shard) out.push_back(p);  // the position table (the token table is sharded)
    }
  }
  return out;
}

// ---- the gradient sum ----

TensorParallelSync::TensorParallelSync(const TensorParallel& tp, model::Model& model, bool every_micro_batch)
    : tp_(tp),
      every_micro_batch_(every_micro_batch) {
  const std::vector<model::Parameter*> summed = sequence_sharded_gradients(model, tp);
  for (model::Layer* layer : model::all_layers(model.layers()))
    for (model::Parameter* p : layer->own_parameters())
      if (std::find(summed.begin(), summed.end(), p) != summed.end()) owned_[layer].push_back(p);
}

std::size_t TensorParallelSync::summed_parameters() const {
  std::size_t n = 0;
  for (const auto& [layer, parameters] : owned_) n += parameters.size();
  return n;
}

std::string TensorParallelSync::describe() const {
  std::string s = "tensor parallel over " + std::to_string(tp_.size()) + " ranks (" + tp_.config().describe() + ")";
  if (tp_.sequence_parallel())
    s += ", " + std::to_string(summed_parameters()) + " sequence-sharded gradients all-reduced " +
         (every_micro_batch_ ? "every micro-batch" : "once per step");
  return s;
}

void TensorParallelSync::take_collective_time() {
  exposed_seconds += tp_.seconds() - seen_;
  seen_ = tp_.seconds();
}

void TensorParallelSync::on_layer(model::Layer& layer, model::HookPoint point, const model::PassContext&) {
  take_collective_time();
  if (point != model::HookPoint::after_backward || tp_.size() == 1 || !(every_micro_batch_ || last_)) return;
  auto it = owned_.find(&layer);
  if (it == owned_.end()) return;
  for (model::Parameter* p : it->second) tp_.all_reduce(p->gradient(), kSequenceShardedGradientsSite);
  take_collective_time();
}

// ---- gathering the shards ----

ParameterValues gather_tensor_parallel(const ParameterValues& local, const std::vector<model::Parameter*>& parameters,
                                       Communicator& group, std::vector<std::string>* disagreeing) {
  require(parameters.size() == local.names.size(), "gather_tensor_parallel: the values do not list the parameters");
  const int t = group.size();
  ParameterValues out = local;
  // All ranks' copies of a list of doubles of the same length, rank after rank.
  auto gather = [&](const std::vector<double>& mine) {
    std::vector<double> all(mine.size() * static_cast<std::size_t>(t));
    group.all_gather({const_cast<double*>(mine.data()), mine.size(), DataType::float64, MemorySpace::host},
                     {all.data(), all.size(), DataType::float64, MemorySpace::host});
    return all;
  };
  for (std::size_t i = 0; i < parameters.size(); ++i) {
    const model::Parameter& p = *parameters[i];
    require(p.name == local.names[i], "gather_tensor_parallel: parameter " + std::to_string(i) + " is " + p.name +
                                          " in the model but " + local.names[i] + " in the values");
    if (!p.shard) {
      // Whole on every rank: the copies must agree exactly.
      const std::vector<double> all = gather(local.values[i]);
      const std::size_t n = local.values[i].size();
      bool same = true;
      for (std::size_t k = 0; k < all.size(); ++k) same = same && all[k] == all[k % n];
      if (!same && disagreeing) disagreeing->push_back(p.name);
      continue;
    }
    // The global index of every element of every rank's shard, and the values there.
    const std::vector<std::int64_t> mine = p.shard->global_indices();
    std::vector<double> mine_as_double(mine.begin(), mine.end());
    const std::vector<double> where = gather(mine_as_double);
    auto place = [&](const std::vector<double>& values) {
      const std::vector<double> all = gather(values);
      std::vector<double> whole(static_cast<std::size_t>(element_count(p.shard->whole())), std::nan(""));
      for (std::size_t k = 0; k < all.size(); ++k) whole[static_cast<std::size_t>(where[k])] = all[k];
      return whole;
    };
    out.values[i] = place(local.values[i]);
    for (std::size_t s = 0; s < local.state[i].size(); ++s) out.state[i][s] = place(local.state[i][s]);
  }
  return out;
}

}  // namespace parity::parallel
