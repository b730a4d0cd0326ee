// The layers (see layers.hpp). Each forward allocates its outputs as activations and saves the
// tensors its backward reads; saving shares storage, so only new outputs cost memory.
#include "reference/model/layers.hpp"

#include <cmath>

#include "reference/core/error.hpp"

namespace parity::model {

Linear::Linear(std::string name, std::int64_t in, std::int64_t out, bool bias, DataType dtype, double init_std,
               std::uint64_t seed)
    : Layer(std::move(name)) {
  weight_ = &add_parameter("weight", {in, out}, dtype, Init::normal(0, init_std), seed);
  if (bias) bias_ = &add_parameter("bias", {out}, dtype, Init::constant(0), seed);
}

Tensor Linear::do_forward(const Tensor& x, const PassContext& context) {
  Shape shape = x.shape();
  shape.back() = weight_->value.dim(1);
  Tensor y = activation("out", shape, x.dtype());
  const Tensor no_bias;
  ops::linear_forward(x, weight_->value, bias_ ? bias_->value : no_bias, y);
  save(context, {x});
  return y;
}

Tensor Linear::do_backward(const Tensor& dy, const PassContext& context) {
  const Tensor x = take_saved(context).at(0);
  Tensor dx = activation_gradient("dx", x.shape(), x.dtype()), none;
  ops::linear_backward(dy, x, weight_->value, dx, none, none);
  weight_gradient(context, [this, dy, x] {
    Tensor no_dx, no_bias;
    ops::linear_backward(dy, x, weight_->value, no_dx, weight_->gradient(), bias_ ? bias_->gradient() : no_bias);
  });
  return dx;
}

Tensor Gelu::do_forward(const Tensor& x, const PassContext& context) {
  Tensor y = activation("out", x.shape(), x.dtype());
  ops::gelu_forward(x, y);
  save(context, {x});
  return y;
}

Tensor Gelu::do_backward(const Tensor& dy, const PassContext& context) {
  const Tensor x = take_saved(context).at(0);
  Tensor dx = activation_gradient("dx", x.shape(), x.dtype());
  ops::gelu_backward(dy, x, dx);
  return dx;
}

LayerNorm::LayerNorm(std::string name, std::int64_t channels, DataType dtype, std::uint64_t seed)
    : Layer(std::move(name)) {
  gamma_ = &add_parameter("gamma", {channels}, dtype, Init::constant(1), seed);
  beta_ = &add_parameter("beta", {channels}, dtype, Init::constant(0), seed);
}

Tensor LayerNorm::do_forward(const Tensor& x, const PassContext& context) {
  const DataType stat = x.dtype() == DataType::float64 ? DataType::float64 : DataType::float32;
  const std::int64_t rows = x.numel() / x.dim(-1);
  Tensor y = activation("out", x.shape(), x.dtype());
  Tensor mean = activation("mean", {rows}, stat), rstd = activation("rstd", {rows}, stat);
  ops::layernorm_forward(x, gamma_->value, beta_->value, y, mean, rstd);
  save(context, {x, mean, rstd});
  return y;
}

Tensor LayerNorm::do_backward(const Tensor& dy, const PassContext& context) {
  const auto saved = take_saved(context);
  Tensor dx = activation_gradient("dx", saved[0].shape(), saved[0].dtype()), none;
  ops::layernorm_backward(dy, saved[0], gamma_->value, saved[1], saved[2], dx, none, none);
  weight_gradient(context, [this, dy, saved] {
    Tensor no_dx;
    ops::layernorm_backward(dy, saved[0], gamma_->value, saved[1], saved[2], no_dx, gamma_->gradient(),
                            beta_->gradient());
  });
  return dx;
}

Dropout::Dropout(std::string name, double p, std::uint64_t seed) : Layer(std::move(name)), p_(p), seed_(seed) {
  require(p >= 0 && p < 1, "dropout " + this->name() + ": probability " + std::to_string(p) + " must be in [0, 1)");
}

ops::DropoutKey dropout_key(std::uint64_t seed, const std::string& layer, std::uint64_t step, std::uint64_t first_element) {
  return {seed, tensor_id(layer + "/step" + std::to_string(step)), first_element};
}

ops::DropoutKey Dropout::key(const PassContext& context, const Tensor& x) const {
  const auto per_row = static_cast<std::uint64_t>(x.numel() / x.dim(0));
  return dropout_key(seed_ + context.dropout_seed_offset, name(), context.step,
                     static_cast<std::uint64_t>(context.first_row) * per_row);
}

Tensor Dropout::do_forward(const Tensor& x, const PassContext& context) {
  if (p_ == 0 || !context.training) return x;
  Tensor y = activation("out", x.shape(), x.dtype());
  ops::dropout_forward(x, p_, key(context, x), y);
  return y;
}

Tensor Dropout::do_backward(const Tensor& dy, const PassContext& context) {
  if (p_ == 0 || !context.training) return dy;
  Tensor dx = activation_gradient("dx", dy.shape(), dy.dtype());
  ops::dropout_backward(dy, p_, key(context, dy), dx);
  return dx;
}

CausalSelfAttention::CausalSelfAttention(std::string name, std::int64_t hidden, int heads, double dropout,
                                         DataType dtype, double init_std, double proj_std, std::uint64_t seed)
    : CausalSelfAttention(name, heads,
                          std::make_unique<Linear>(name + ".qkv", hidden, 3 * hidden, true, dtype, init_std, seed),
                          std::make_unique<Linear>(name + ".proj", hidden, hidden, true, dtype, proj_std, seed),
                          std::make_unique<Dropout>(name + ".dropout", dropout, seed)) {}

CausalSelfAttention::CausalSelfAttention(std::string name, int heads, std::unique_ptr<Layer> qkv,
                                         std::unique_ptr<Layer> proj, std::unique_ptr<Layer> dropout)
    : Layer(std::move(name)), heads_(heads) {
  qkv_ = &add_child(std::move(qkv));
  proj_ = &add_child(std::move(proj));
  dropout_ = &add_child(std::move(dropout));
}

Tensor CausalSelfAttention::do_forward(const Tensor& x, const PassContext& context) {
  const Tensor qkv = qkv_->forward(x, context);
  // The core's sizes come from qkv, not x: a tensor-parallel rank holds only its heads, and with
  // sequence parallelism x is a sequence shard while qkv covers whole sequences.
  const std::int64_t b = qkv.dim(0), t = qkv.dim(1), c = qkv.dim(2) / 3;
  Tensor out = activation("core", {b, t, c}, x.dtype());
  Tensor probs = activation("probs", {b, heads_, t, t}, x.dtype());
  ops::attention_forward(qkv, heads_, true, out, probs);
  if (recompute_core_)
    save(context, {qkv});
  else
    save(context, {qkv, probs});
  probs = Tensor();
  return dropout_->forward(proj_->forward(out, context), context);
}

Tensor CausalSelfAttention::do_backward(const Tensor& dy, const PassContext& context) {
  const Tensor dout = proj_->backward(dropout_->backward(dy, context), context);
  auto saved = take_saved(context);
  if (saved.size() == 1) {
    // Selective recompute: the core again from the kept qkv; its output (proj kept its own) is
    // dropped at once.
    const Tensor& qkv = saved[0];
    const std::int64_t b = qkv.dim(0), t = qkv.dim(1), c = qkv.dim(2) / 3;
    Tensor probs = activation("probs", {b, heads_, t, t}, qkv.dtype());
    {
      Tensor out = activation("core", {b, t, c}, qkv.dtype());
      ops::attention_forward(qkv, heads_, true, out, probs);
    }
    saved.push_back(std::move(probs));
  }
  Tensor dqkv = activation_gradient("dqkv", saved[0].shape(), saved[0].dtype());
  ops::attention_backward(dout, saved[0], saved[1], heads_, dqkv);
  saved.clear();
  return qkv_->backward(dqkv, context);
}

FeedForward::FeedForward(std::string name, std::int64_t hidden, std::int64_t ffn, double dropout, DataType dtype,
                         double init_std, double proj_std, std::uint64_t seed)
    : FeedForward(name, std::make_unique<Linear>(name + ".fc", hidden, ffn, true, dtype, init_std, seed),
                  std::make_unique<Linear>(name + ".proj", ffn, hidden, true, dtype, proj_std, seed),
                  std::make_unique<Dropout>(name + ".dropout", dropout, seed)) {}

FeedForward::FeedForward(std::string name, std::unique_ptr<Layer> fc, std::unique_ptr<Layer> proj,
                         std::unique_ptr<Layer> dropout)
    : Layer(std::move(name)) {
  fc_ = &add_child(std::move(fc));
  gelu_ = &add_child(std::make_unique<Gelu>(this->name() + ".gelu"));
  proj_ = &add_child(std::move(proj));
  dropout_ = &add_child(std::move(dropout));
}

Tensor FeedForward::do_forward(const Tensor& x, const PassContext& context) {
  return dropout_->forward(proj_->forward(gelu_->forward(fc_->forward(x, context), context), context), context);
}

Tensor FeedForward::do_backward(const Tensor& dy, const PassContext& context) {
  return fc_->backward(gelu_->backward(proj_->backward(dropout_->backward(dy, context), context), context), context);
}

TransformerBlock::TransformerBlock(std::string name, std::int64_t hidden, int heads, double dropout, DataType dtype,
                                   double init_std, double proj_std, std::uint64_t seed)
    : TransformerBlock(name, hidden, dtype, seed,
                       std::make_unique<CausalSelfAttention>(name + ".attn", hidden, heads, dropout, dtype, init_std,
                                                             proj_std, seed),
                       std::make_unique<FeedForward>(name + ".mlp", hidden, 4 * hidden, dropout, dtype, init_std,
                                                     proj_std, seed)) {}

TransformerBlock::TransformerBlock(std::string name, std::int64_t hidden, DataType dtype, std::uint64_t seed,
                                   std::unique_ptr<Layer> attention, std::unique_ptr<Layer> mlp)
    : Layer(std::move(name)) {
  // Children in the order the passes visit them (and parameters are listed).
  ln1_ = &add_child(std::make_unique<LayerNorm>(this->name() + ".ln1", hidden, dtype, seed));
  attn_ = &add_child(std::move(attention));
  ln2_ = &add_child(std::make_unique<LayerNorm>(this->name() + ".ln2", hidden, dtype, seed));
  mlp_ = &add_child(std::move(mlp));
}

Tensor TransformerBlock::do_forward(const Tensor& x, const PassContext& context) {
  // Each sum is made once its branch has run, and the branch's output let go once added, so
  // neither is held through the other branch.
  Tensor branch = attn_->forward(ln1_->forward(x, context), context);
  Tensor x1 = activation("residual1", x.shape(), x.dtype());
  ops::add_forward(x, branch, x1);
  branch = Tensor();
  branch = mlp_->forward(ln2_->forward(x1, context), context);
  Tensor x2 = activation("residual2", x.shape(), x.dtype());
  ops::add_forward(x1, branch, x2);
  return x2;
}

Tensor TransformerBlock::do_backward(const Tensor& dy, const PassContext& context) {
  // The residual passes dy straight through and adds the branch's input gradient.
  Tensor dx1 = activation_gradient("dresidual1", dy.shape(), dy.dtype());
  ops::add_forward(dy, ln2_->backward(mlp_->backward(dy, context), context), dx1);
  Tensor dx = activation_gradient("dx", dy.shape(), dy.dtype());
  ops::add_forward(dx1, ln1_->backward(attn_->backward(dx1, context), context), dx);
  return dx;
}

Embedding::Embedding(std::string name, std::int64_t vocabulary, std::int64_t max_sequence, std::int64_t hidden,
                     DataType dtype, double init_std, std::uint64_t seed)
    : Layer(std::move(name)) {
  wte_ = &add_parameter("wte", {vocabulary, hidden}, dtype, Init::normal(0, init_std), seed);
  wpe_ = &add_parameter("wpe", {max_sequence, hidden}, dtype, Init::normal(0, init_std / 2), seed);
}

Tensor Embedding::do_forward(const Tensor& tokens, const PassContext& context) {
  Tensor y = activation("out", {tokens.dim(0), tokens.dim(1), wte_->value.dim(1)}, wte_->value.dtype());
  ops::embedding_forward(tokens, wte_->value, wpe_->value, y);
  save(context, {tokens});
  return y;
}

Tensor Embedding::do_backward(const Tensor& dy, const PassContext& context) {
  const Tensor tokens = take_saved(context).at(0);
  weight_gradient(context, [this, dy, tokens] { ops::embedding_backward(dy, tokens, wte_->gradient(), wpe_->gradient()); });
  return {};  // tokens have no gradient
}

LanguageModelHead::LanguageModelHead(std::string name, std::string weight_name, std::int64_t vocabulary,
                                     std::int64_t hidden, DataType dtype, double init_std, std::uint64_t seed)
    : Layer(std::move(name)), tied_(false) {
  weight_ = &add_named_parameter(std::move(weight_name), {vocabulary, hidden}, dtype, Init::normal(0, init_std), seed);
}

LanguageModelHead::LanguageModelHead(std::string name, Parameter& tied_table)
    : Layer(std::move(name)), weight_(&tied_table), tied_(true) {
  borrow_parameter(tied_table);
}

Tensor LanguageModelHead::do_forward(const Tensor& x, const PassContext& context) {
  const Tensor& w = weight_->value;
  const std::int64_t n = x.numel() / x.dim(-1);
  if (x.dim(-1) != w.dim(1))
    throw Error("lm_head " + name() + ": input " + x.describe() + " does not match weight " + w.describe());
  Shape shape = x.shape();
  shape.back() = w.dim(0);
  Tensor logits = activation("logits", shape, x.dtype());
  Tensor logits2 = logits.reshape({n, w.dim(0)});
  ops::matmul(x.reshape({n, x.dim(-1)}), false, w, true, logits2, false);
  save(context, {x});
  return logits;
}

Tensor LanguageModelHead::do_backward(const Tensor& dy, const PassContext& context) {
  const Tensor x = take_saved(context).at(0);
  const Tensor& w = weight_->value;
  const std::int64_t n = x.numel() / x.dim(-1);
  const Tensor dy2 = dy.reshape({n, w.dim(0)});
  Tensor dx = activation_gradient("dx", x.shape(), x.dtype());
  Tensor dx2 = dx.reshape({n, w.dim(1)});
  ops::matmul(dy2, false, w, false, dx2, false);  // dx = dy W
  weight_gradient(context, [this, dy2, x, n] {
    ops::matmul(dy2, true, x.reshape({n, weight_->value.dim(1)}), false, weight_->gradient(), true);  // dW += dy^T x
  });
  return dx;
}

Dense::Dense(std::string name, std::int64_t in, std::int64_t out, bool activation_on, DataType dtype, std::uint64_t seed)
    : Layer(std::move(name)) {
  // 1/sqrt(in) keeps the signal's scale through the stack.
  linear_ = &add_child(std::make_unique<Linear>(this->name() + ".linear", in, out, true, dtype,
                                                1.0 / std::sqrt(static_cast<double>(in)), seed));
  if (activation_on) gelu_ = &add_child(std::make_unique<Gelu>(this->name() + ".gelu"));
}

Tensor Dense::do_forward(const Tensor& x, const PassContext& context) {
  Tensor y = linear_->forward(x, context);
  return gelu_ ? gelu_->forward(y, context) : y;
}

Tensor Dense::do_backward(const Tensor& dy, const PassContext& context) {
  return linear_->backward(gelu_ ? gelu_->backward(dy, context) : dy, context);
}

}  // namespace parity::model
