// The layers the models are built from. Parameter names are "<layer>.<local>", e.g.
// "blocks.3.attn.qkv.weight"; a parameter's values are a pure function of (seed, name, index).
#pragma once

#include "reference/model/layer.hpp"
#include "reference/ops/cpu.hpp"

namespace parity::model {

// y = x W + b with W [in, out].
class Linear : public Layer {
 public:
  Linear(std::string name, std::int64_t in, std::int64_t out, bool bias, DataType dtype, double init_std,
         std::uint64_t seed);
  const char* kind() const override { return "linear"; }
  Parameter& weight() { return *weight_; }
  Parameter* bias() { return bias_; }

 protected:
  Tensor do_forward(const Tensor& x, const PassContext& context) override;
  Tensor do_backward(const Tensor& dy, const PassContext& context) override;

 private:
  Parameter* weight_;
  Parameter* bias_ = nullptr;
};

class Gelu : public Layer {
 public:
  using Layer::Layer;
  const char* kind() const override { return "gelu"; }

 protected:
  Tensor do_forward(const Tensor& x, const PassContext& context) override;
  Tensor do_backward(const Tensor& dy, const PassContext& context) override;
};

class LayerNorm : public Layer {
 public:
  LayerNorm(std::string name, std::int64_t channels, DataType dtype, std::uint64_t seed);
  const char* kind() const override { return "layernorm"; }

 protected:
  Tensor do_forward(const Tensor& x, const PassContext& context) override;
  Tensor do_backward(const Tensor& dy, const PassContext& context) override;

 private:
  Parameter* gamma_;
  Parameter* beta_;
};

// The key of a dropout layer's mask in step `step`, for the tensor whose first element is element
// `first_element` of the whole step's tensor: every layer, sharded or not, draws from it.
ops::DropoutKey dropout_key(std::uint64_t seed, const std::string& layer, std::uint64_t step, std::uint64_t first_element);

// Inverted dropout; the mask is regenerated from (seed, layer name, step, global element index),
// never stored. Identity when p = 0 or outside training. The input's first dimension is the
// batch: its row r is row context.first_row + r of the step's global batch.
class Dropout : public Layer {
 public:
  Dropout(std::string name, double p, std::uint64_t seed);
  const char* kind() const override { return "dropout"; }
  ops::DropoutKey key(const PassContext& context, const Tensor& x) const;

 protected:
  Tensor do_forward(const Tensor& x, const PassContext& context) override;
  Tensor do_backward(const Tensor& dy, const PassContext& context) override;

 private:
  double p_;
  std::uint64_t seed_;
};

// Causal multi-head self-attention: fused qkv projection, attention core, output projection,
// residual dropout.
class CausalSelfAttention : public Layer {
 public:
  CausalSelfAttention(std::string name, std::int64_t hidden, int heads, double dropout, DataType dtype,
                      double init_std, double proj_std, std::uint64_t seed);
  // With projections and dropout of another kind, named "<name>.qkv", ".proj", ".dropout":
  // tensor parallelism's, where qkv gives this rank's `heads` heads (the core's width comes
  // from qkv's output) and proj takes their outputs.
  CausalSelfAttention(std::string name, int heads, std::unique_ptr<Layer> qkv, std::unique_ptr<Layer> proj,
                      std::unique_ptr<Layer> dropout);
  const char* kind() const override { return "attention"; }
  int heads() const { return heads_; }
  // Selective recompute (Korthikanti et al. 2022): keep qkv but not the a s^2 attention
  // probabilities per sequence; backward recomputes them from qkv (the same values, bit for bit).
  void set_recompute_core(bool on) { recompute_core_ = on; }

 protected:
  Tensor do_forward(const Tensor& x, const PassContext& context) override;
  Tensor do_backward(const Tensor& dy, const PassContext& context) override;

 private:
  int heads_;
  bool recompute_core_ = false;
  Layer* qkv_;
  Layer* proj_;
  Layer* dropout_;
};

// Feed-forward block: Linear(h -> ffn) , GeLU, Linear(ffn -> h), dropout.
class FeedForward : public Layer {
 public:
  FeedForward(std::string name, std::int64_t hidden, std::int64_t ffn, double dropout, DataType dtype,
              double init_std, double proj_std, std::uint64_t seed);
  // With linears and dropout of another kind, named "<name>.fc", ".proj", ".dropout" (tensor
  // parallelism's: the GeLU applies to this rank's columns).
  FeedForward(std::string name, std::unique_ptr<Layer> fc, std::unique_ptr<Layer> proj, std::unique_ptr<Layer> dropout);
  const char* kind() const override { return "mlp"; }

 protected:
  Tensor do_forward(const Tensor& x, const PassContext& context) override;
  Tensor do_backward(const Tensor& dy, const PassContext& context) override;

 private:
  Layer* fc_;
  Gelu* gelu_;
  Layer* proj_;
  Layer* dropout_;
};

// Pre-LayerNorm transformer block: x + attn(ln1(x)), then + mlp(ln2(.)).
class TransformerBlock : public Layer {
 public:
  TransformerBlock(std::string name, std::int64_t hidden, int heads, double dropout, DataType dtype, double init_std,
                   double proj_std, std::uint64_t seed);
  // With attention and feed-forward layers of another kind (named "<name>.attn", "<name>.mlp"):
  // tensor parallelism's, whose inputs and outputs have the same shapes.
  TransformerBlock(std::string name, std::int64_t hidden, DataType dtype, std::uint64_t seed,
                   std::unique_ptr<Layer> attention, std::unique_ptr<Layer> mlp);
  const char* kind() const override { return "block"; }

 protected:
  Tensor do_forward(const Tensor& x, const PassContext& context) override;
  Tensor do_backward(const Tensor& dy, const PassContext& context) override;

 private:
  LayerNorm* ln1_;
  Layer* attn_;
  LayerNorm* ln2_;
  Layer* mlp_;
};

// Token plus learned position embedding: tokens [B, T] (int32/int64) -> [B, T, C].
class Embedding : public Layer {
 public:
  Embedding(std::string name, std::int64_t vocabulary, std::int64_t max_sequence, std::int64_t hidden,
            DataType dtype, double init_std, std::uint64_t seed);
  const char* kind() const override { return "embedding"; }
  Parameter& token_table() { return *wte_; }

 protected:
  Tensor do_forward(const Tensor& tokens, const PassContext& context) override;
  Tensor do_backward(const Tensor& dy, const PassContext& context) override;

 private:
  Parameter* wte_;
  Parameter* wpe_;
};

// Logits [B, T, V] = x W^T with W [V, C]: the token table itself when tied (owned by the
// embedding layer, gradients add into it), else its own weight.
class LanguageModelHead : public Layer {
 public:
  // Own weight named `weight_name` ("lm_head.weight" untied; "embedding.wte" for a pipeline
  // stage's copy of a tied table, which then holds the table's values).
  LanguageModelHead(std::string name, std::string weight_name, std::int64_t vocabulary, std::int64_t hidden,
                    DataType dtype, double init_std, std::uint64_t seed);
  // Tied to a token table owned by an Embedding layer.
  LanguageModelHead(std::string name, Parameter& tied_table);
  const char* kind() const override { return "lm_head"; }
  Parameter& weight() { return *weight_; }
  bool tied() const { return tied_; }

 protected:
  Tensor do_forward(const Tensor& x, const PassContext& context) override;
  Tensor do_backward(const Tensor& dy, const PassContext& context) override;

 private:
  Parameter* weight_;
  bool tied_;
};

// Linear then (optionally) GeLU: one layer of the plain MLP stack.
class Dense : public Layer {
 public:
  Dense(std::string name, std::int64_t in, std::int64_t out, bool activation, DataType dtype, std::uint64_t seed);
  const char* kind() const override { return "dense"; }
  Linear& linear() { return *linear_; }

 protected:
  Tensor do_forward(const Tensor& x, const PassContext& context) override;
  Tensor do_backward(const Tensor& dy, const PassContext& context) override;

 private:
  Linear* linear_;
  Gelu* gelu_ = nullptr;
};

}  // namespace parity::model
