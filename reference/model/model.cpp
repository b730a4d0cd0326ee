// Models, builders and synthetic tasks (see model.hpp).
#include "reference/model/model.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "reference/core/error.hpp"

namespace parity::model {

Layer& Model::add(std::unique_ptr<Layer> layer) {
  layers_.push_back(std::move(layer));
  return *layers_.back();
}

Tensor Model::forward(const Tensor& x, const PassContext& context) {
  Tensor y = x;
  for (auto& layer : layers_) y = layer->forward(y, context);
  return y;
}

Tensor Model::backward(const Tensor& dy, const PassContext& context) {
  Tensor g = dy;
  for (auto it = layers_.rbegin(); it != layers_.rend(); ++it) g = (*it)->backward(g, context);
  return g;
}

double Model::loss(const Tensor& output, const Tensor& targets, double normalizer, Tensor* doutput) const {
  return loss_->compute(output, targets, normalizer, doutput);
}

double CrossEntropyLoss::compute(const Tensor& output, const Tensor& targets, double normalizer, Tensor* doutput) const {
  const std::int64_t v = output.dim(-1), n = output.numel() / v;
  const Tensor logits = output.reshape({n, v});
  const Tensor flat_targets = targets.reshape({targets.numel()});
  if (!doutput) return ops::cross_entropy_forward(logits, flat_targets, normalizer);
  *doutput = Tensor::empty("dlogits", output.shape(), output.dtype(), MemoryCategory::workspace, output.space());
  Tensor d2 = doutput->reshape({n, v});
  return ops::cross_entropy_backward(logits, flat_targets, normalizer, d2);
}

double MeanSquaredErrorLoss::compute(const Tensor& output, const Tensor& targets, double normalizer, Tensor* doutput) const {
  if (doutput) {
    *doutput = Tensor::empty("doutput", output.shape(), output.dtype(), MemoryCategory::workspace, output.space());
    ops::mse_backward(output, targets, normalizer, *doutput);
  }
  return ops::mse_forward(output, targets, normalizer);
}

double Model::forward_backward(const Batch& batch, const PassContext& context) {
  Tensor output = forward(batch.inputs, context);
  Tensor doutput;
  const double value = loss(output, batch.targets, batch.normalizer, &doutput) + take_auxiliary_loss(context);
  output = Tensor();  // the loss made its gradient: the logits are not needed in backward
  backward(doutput, context);
  return value;
}

void Model::wrap(std::size_t index, const std::function<std::unique_ptr<Layer>(std::unique_ptr<Layer>)>& wrapper) {
  require(index < layers_.size(), "Model::wrap: no top-level layer " + std::to_string(index));
  layers_[index] = wrapper(std::move(layers_[index]));
  require(layers_[index] != nullptr, "Model::wrap: the wrapper returned no layer");
}

double Model::take_auxiliary_loss(const PassContext& context) {
  double sum = 0;
  for (const auto& layer : layers_) sum += layer->take_auxiliary_loss(context);
  return sum;
}

std::vector<Layer*> Model::layers() const {
  std::vector<Layer*> out;
  for (const auto& layer : layers_) out.push_back(layer.get());
  return out;
}

std::vector<Parameter*> Model::parameters() const {
  std::vector<Parameter*> out;
  for (const auto& layer : layers_) {
    auto more = layer->parameters();
    out.insert(out.end(), more.begin(), more.end());
  }
  return out;
}

std::int64_t Model::parameter_count() const {
  std::int64_t n = 0;
  for (const Parameter* p : parameters()) n += p->value.numel();
  return n;
}

void Model::zero_grad() {
  for (Parameter* p : parameters())
    if (p->grad.defined()) p->grad.zero();
}

void Model::to(MemorySpace space) {
  for (Layer* layer : all_layers(layers())) layer->move_to(space);
  space_ = space;
}

Batch Batch::to(MemorySpace space) const {
  Batch out = *this;
  if (inputs.space() != space) out.inputs = inputs.to(space, inputs.name(), MemoryCategory::activations);
  if (targets.space() != space) out.targets = targets.to(space, targets.name(), MemoryCategory::activations);
  return out;
}

namespace {
struct StageBounds {
  int begin, end;
};
StageBounds resolve(LayerRange range, int total, const std::string& what) {
  const int end = range.end < 0 ? total : range.end;
  if (range.begin < 0 || range.begin >= end || end > total)
    throw UsageError(what + ": layer range [" + std::to_string(range.begin) + ", " + std::to_string(end) +
                     ") is not inside its " + std::to_string(total) + " layers");
  return {range.begin, end};
}
}  // namespace

std::unique_ptr<Model> build_gpt(const GptConfig& c, LayerRange range) { return build_gpt(c, std::vector<LayerRange>{range}); }

std::vector<int> layer_indices(const std::vector<LayerRange>& ranges, int total, const std::string& what) {
  std::vector<int> indices;
  for (const LayerRange& range : ranges) {
    const StageBounds stage = resolve(range, total, what);
    for (int i = stage.begin; i < stage.end; ++i) {
      if (!indices.empty() && i <= indices.back())
        throw UsageError(what + ": layer ranges must be in increasing order without overlap");
      indices.push_back(i);
    }
  }
  return indices;
}

std::vector<MixtureOfExperts*> moe_layers(const Model& model) {
  std::vector<MixtureOfExperts*> out;
  for (Layer* layer : all_layers(model.layers()))
    if (auto* moe = dynamic_cast<MixtureOfExperts*>(layer)) out.push_back(moe);
  return out;
}

std::unique_ptr<Layer> gpt_moe_block(const GptConfig& c, int block, std::unique_ptr<Layer> attention,
                                     const MoeBuild& moe, const ExpertBuilder& expert) {
  const std::string name = "blocks." + std::to_string(block);
  const double init_std = 0.02, proj_std = 0.02 / std::sqrt(2.0 * c.layers);
  auto exchange = moe.exchange ? moe.exchange(block) : std::shared_ptr<ExpertExchange>();
  return std::make_unique<TransformerBlock>(
      name, c.hidden, c.dtype, c.seed, std::move(attention),
      std::make_unique<MixtureOfExperts>(name + ".mlp", c.hidden, c.moe, c.dropout, c.dtype, init_std, proj_std, c.seed,
                                         std::move(exchange), moe.faults, expert));
}

std::unique_ptr<Model> build_gpt(const GptConfig& c, const std::vector<LayerRange>& ranges, const MoeBuild& moe) {
  c.validate();
  const std::vector<int> indices = layer_indices(ranges, gpt_top_level_layers(c), "GPT model");
  auto model = std::make_unique<Model>(c.describe(), std::make_unique<CrossEntropyLoss>(), c.dtype);
  const double init_std = 0.02, proj_std = 0.02 / std::sqrt(2.0 * c.layers);
  Embedding* embedding = nullptr;
  for (int i : indices) {
    if (i == 0) {
      embedding = static_cast<Embedding*>(&model->add(
          std::make_unique<Embedding>("embedding", c.vocabulary, c.sequence, c.hidden, c.dtype, init_std, c.seed)));
    } else if (i <= c.layers && c.moe.holds(i - 1)) {
      const std::string name = "blocks." + std::to_string(i - 1);
      model->add(gpt_moe_block(c, i - 1,
                               std::make_unique<CausalSelfAttention>(name + ".attn", c.hidden, c.heads, c.dropout,
                                                                     c.dtype, init_std, proj_std, c.seed),
                               moe));
    } else if (i <= c.layers) {
      model->add(std::make_unique<TransformerBlock>("blocks." + std::to_string(i - 1), c.hidden, c.heads, c.dropout,
                                                    c.dtype, init_std, proj_std, c.seed));
    } else if (i == c.layers + 1) {
      model->add(std::make_unique<LayerNorm>("ln_f", c.hidden, c.dtype, c.seed));
    } else if (c.tied_embeddings && embedding) {
      model->add(std::make_unique<LanguageModelHead>("lm_head", embedding->token_table()));
    } else if (c.tied_embeddings) {
      // A stage without the embedding holds its own copy of the tied table, with the same name
      // and therefore the same values (pipeline parallelism keeps the two copies' updates equal).
      model->add(std::make_unique<LanguageModelHead>("lm_head", "embedding.wte", c.vocabulary, c.hidden, c.dtype,
                                                     init_std, c.seed));
    } else {
      model->add(std::make_unique<LanguageModelHead>("lm_head", "lm_head.weight", c.vocabulary, c.hidden, c.dtype,
                                                     init_std, c.seed));
    }
  }
  return model;
}

std::unique_ptr<Model> build_mlp(const MlpConfig& c, LayerRange range) {
  c.validate();
  const StageBounds stage = resolve(range, c.layers, "MLP model");
  auto model = std::make_unique<Model>(c.describe(), std::make_unique<MeanSquaredErrorLoss>(), c.dtype);
  for (int i = stage.begin; i < stage.end; ++i) {
    const std::int64_t in = i == 0 ? c.inputs : c.width;
    const bool last = i == c.layers - 1;
    model->add(std::make_unique<Dense>("layers." + std::to_string(i), in, last ? c.outputs : c.width, !last, c.dtype,
                                       c.seed));
  }
  return model;
}

namespace {
void check_rows(const char* what, std::int64_t first_row, std::int64_t rows, std::int64_t global_rows) {
  if (rows <= 0 || first_row < 0 || first_row + rows > global_rows)
    throw UsageError(std::string(what) + ": rows [" + std::to_string(first_row) + ", " +
                     std::to_string(first_row + rows) + ") are not inside a global batch of " + std::to_string(global_rows));
}
}  // namespace

Batch gpt_batch(const GptConfig& c, std::uint64_t step, std::int64_t first_row, std::int64_t rows,
                std::int64_t global_rows) {
  check_rows("gpt_batch", first_row, rows, global_rows);
  // The task's permutation of the vocabulary: sort tokens by a random key (Fisher-Yates would
  // need sequential draws; keys keep it a pure function of the seed).
  std::vector<std::int64_t> order(static_cast<std::size_t>(c.vocabulary));
  std::iota(order.begin(), order.end(), 0);
  const std::uint64_t perm_id = tensor_id("task.permutation");
  std::vector<double> key(order.size());
  for (std::size_t i = 0; i < key.size(); ++i) key[i] = uniform_open(c.seed, perm_id, i);
  std::sort(order.begin(), order.end(), [&](auto a, auto b) { return key[static_cast<std::size_t>(a)] < key[static_cast<std::size_t>(b)]; });
  std::vector<std::int64_t> next(order.size());
  for (std::size_t i = 0; i < order.size(); ++i) next[static_cast<std::size_t>(order[i])] = order[(i + 1) % order.size()];

  Batch batch;
  batch.inputs = Tensor::empty("tokens", {rows, c.sequence}, DataType::int32, MemoryCategory::activations);
  batch.targets = Tensor::empty("targets", {rows, c.sequence}, DataType::int32, MemoryCategory::activations);
  batch.normalizer = static_cast<double>(global_rows * c.sequence);
  const std::uint64_t start_id = tensor_id("task.start.step" + std::to_string(step));
  auto* in = batch.inputs.data<std::int32_t>();
  auto* out = batch.targets.data<std::int32_t>();
  for (std::int64_t r = 0; r < rows; ++r) {
    std::int64_t token = static_cast<std::int64_t>(
        element_words(c.seed, start_id, static_cast<std::uint64_t>(first_row + r))[0] % static_cast<std::uint64_t>(c.vocabulary));
    for (std::int64_t t = 0; t < c.sequence; ++t) {
      in[r * c.sequence + t] = static_cast<std::int32_t>(token);
      token = next[static_cast<std::size_t>(token)];
      out[r * c.sequence + t] = static_cast<std::int32_t>(token);
    }
  }
  return batch;
}

Batch mlp_batch(const MlpConfig& c, std::uint64_t step, std::int64_t first_row, std::int64_t rows,
                std::int64_t global_rows) {
  check_rows("mlp_batch", first_row, rows, global_rows);
  Batch batch;
  batch.inputs = Tensor::empty("inputs", {rows, c.inputs}, c.dtype, MemoryCategory::activations);
  initialize_shard(batch.inputs, Init::normal(0, 1), c.seed, "task.inputs.step" + std::to_string(step),
                   ShardSpec({global_rows, c.inputs}).range(0, first_row, first_row + rows));
  Tensor teacher = Tensor::empty("task.teacher", {c.inputs, c.outputs}, DataType::float64, MemoryCategory::workspace);
  initialize(teacher, Init::normal(0, 1.0 / std::sqrt(static_cast<double>(c.inputs))), c.seed);
  batch.targets = Tensor::empty("targets", {rows, c.outputs}, c.dtype, MemoryCategory::activations);
  // In float64 from the stored (rounded) inputs, so targets do not depend on the model's type
  // beyond its inputs.
  const std::vector<double> x = batch.inputs.to_vector(), w = teacher.to_vector();
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t o = 0; o < c.outputs; ++o) {
      double s = 0;
      for (std::int64_t i = 0; i < c.inputs; ++i)
        s += x[static_cast<std::size_t>(r * c.inputs + i)] * w[static_cast<std::size_t>(i * c.outputs + o)];
      batch.targets.set(r * c.outputs + o, std::tanh(s));
    }
  batch.normalizer = static_cast<double>(global_rows * c.outputs);
  return batch;
}

}  // namespace parity::model
