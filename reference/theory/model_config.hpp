// Model configurations: what a GPT or an MLP of parity's is, as plain numbers. The analytic
// models (reference/theory/model.hpp) count from these, and the builders
// (reference/model/model.hpp) build from them, so theory never depends on the implementation.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "reference/core/dtype.hpp"

namespace parity::model {

// Mixture of experts (reference/model/moe.hpp): the blocks listed hold an MoE feed-forward layer
// of E expert FFNs (each h -> expert_hidden -> h) behind a router, instead of the dense FFN.
struct MoeConfig {
  std::vector<int> layers;            // block indices with an MoE FFN; empty: a dense model
  int experts = 4;
  int top_k = 2;                      // choices per token (top_k and aux_free routers)
  double capacity_factor = std::numeric_limits<double>::infinity();  // infinity: dropless
  std::string router = "top_k";       // top_k, expert_choice, aux_free (ops/routing.hpp)
  double balance_coefficient = 1e-2;  // alpha of Switch's load-balancing loss (top_k router only)
  double z_loss_coefficient = 1e-3;   // ST-MoE's router z-loss
  double bias_update_rate = 1e-3;     // aux_free: the bias step per optimizer step
  bool shared_expert = false;         // one more expert every token goes through, ungated
  std::int64_t expert_hidden = 0;     // 0: 4 h, as the dense FFN
  bool enabled() const { return !layers.empty(); }
  bool holds(int block) const;
  // Refuses, in one line (UsageError): fewer than one expert, k outside [1, E], a capacity
  // factor <= 0 or NaN, a block index outside [0, blocks) or repeated, negative coefficients.
  void validate(int blocks) const;
  std::string describe() const;  // "moe E=8 k=2 cf=1.25 top_k blocks 1,3" ("" when disabled)
};
// Blocks every-1, 2 every-1, ...: an MoE FFN in every `every`-th block (UsageError for every < 1).
std::vector<int> every_kth_block(int every, int blocks);

// GPT-style decoder: embedding (token + position), L pre-LN blocks (attention with h/a heads,
// FFN 4h), final LayerNorm, LM head (tied to the token table or its own weight).
// GPT-2 initialisation: weights N(0, 0.02), residual projections N(0, 0.02/sqrt(2L)).
struct GptConfig {
  std::int64_t vocabulary = 64;
  int layers = 2;
  std::int64_t hidden = 32;
  int heads = 4;
  std::int64_t sequence = 16;
  bool tied_embeddings = true;
  double dropout = 0;
  DataType dtype = DataType::float32;
  std::uint64_t seed = 1234;
  MoeConfig moe;
  // Refuses zero sizes, heads not dividing hidden, unsupported types, a bad MoE config
  // (UsageError naming them).
  void validate() const;
  std::string describe() const;
};

// Plain MLP stack: Dense(in -> width, GeLU), (layers - 2) x Dense(width -> width, GeLU),
// Dense(width -> out); mean-squared-error loss. Top-level layers "layers.0" .. "layers.L-1".
struct MlpConfig {
  std::int64_t inputs = 16;
  std::int64_t width = 32;
  std::int64_t outputs = 8;
  int layers = 4;
  DataType dtype = DataType::float32;
  std::uint64_t seed = 1234;
  void validate() const;
  std::string describe() const;
};

}  // namespace parity::model
