// Model configurations: what a GPT or an MLP of parity's is, as plain numbers. The analytic
// models (reference/theory/model.hpp) count from these, and the builders
// (reference/model/model.hpp) build from them, so theory never depends on the implementation.
#pragma once

#include <cstdint>
#include <string>

#include "reference/core/dtype.hpp"

namespace parity::model {

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
  // Refuses zero sizes, heads not dividing hidden, unsupported types (UsageError naming them).
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
