// The GPT-2 attributes parity's files carry (GPT2Config's names, as `state export` writes them
// and bench/gpt2_torch.py reads them), shared by `parity state` and `parity case`.
#pragma once

#include <string>

#include "reference/model/model.hpp"
#include "reference/record/arrays.hpp"

namespace parity::cli {

// vocab_size, n_positions, n_embd, n_layer, n_head, n_inner, layer_norm_epsilon,
// activation_function (gelu_new) and tie_word_embeddings on the file's root.
void write_gpt2_config(record::ArrayWriter& file, const model::GptConfig& config);
// The GPT those attributes describe (dropout 0, dtype float64 until the caller says otherwise);
// UsageError naming `what` (the file) for a missing attribute or a model parity's GPT is not (an
// MLP other than 4 n_embd, another activation).
model::GptConfig read_gpt2_config(const record::ArrayReader& file, const std::string& what);

}  // namespace parity::cli
