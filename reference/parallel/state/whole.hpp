// A training state whole in one process, without ranks: read from a save of any layout (every
// tensor assembled from its pieces), or written as a save of one rank that any layout restores
// (load_training_state). What `parity state export` and `parity state import` work on, and the
// names of a GPT's parameters in Hugging Face's GPT-2 (GPT2LMHeadModel), whose Conv1D weights
// are stored [in, out] as parity stores its linear weights.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "reference/core/dtype.hpp"
#include "reference/tensor/tensor.hpp"
#include "reference/theory/model_config.hpp"

namespace parity::parallel {

struct WholeTensor {
  DataType dtype = DataType::float32;
  Shape shape;
  std::vector<char> bytes;  // row-major, numel x size_of(dtype)
};

struct WholeState {
  std::map<std::string, WholeTensor> tensors;  // by canonical name (held.hpp)
  std::uint64_t next_step = 0;
  std::int64_t optimizer_steps = 0, clean_steps = 0;
  double loss_scale = 1;
  std::string optimizer = "adamw", layout;
  std::optional<model::GptConfig> model;
};

// The save at `path` (a save's directory, or a root whose newest complete save is taken), every
// tensor whole; UsageError as load_training_state refuses (a missing, partial, corrupt save).
WholeState read_whole_training_state(const std::filesystem::path& path);
// Writes `state` under `root` as a save of one rank at state.next_step (through step-N.partial,
// the index last); returns its directory. UsageError when that step is saved completely already
// (a step-N never committed is replaced: save_refused in files.hpp).
std::filesystem::path write_whole_training_state(const std::filesystem::path& root, const WholeState& state);

// (parity name, GPT-2 name) of every parameter of a dense GPT, in parity's order: embedding.wte
// -> transformer.wte.weight, blocks.i.attn.qkv.weight -> transformer.h.i.attn.c_attn.weight, ...,
// ln_f.gamma -> transformer.ln_f.weight, and lm_head.weight (the table itself when tied).
std::vector<std::pair<std::string, std::string>> gpt2_names(const model::GptConfig& config);

}  // namespace parity::parallel
