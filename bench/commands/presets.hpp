// The GPT presets the benchmarks train (--model, --models): tiny, small, medium, large, and the
// published shapes gpt2-medium, gpt-1.3b and gpt-2.7b.
#pragma once

#include <string>
#include <vector>

#include "reference/core/dtype.hpp"
#include "reference/model/model.hpp"

namespace parity::cli {

struct ModelPreset {
  std::string name;
  model::GptConfig config;
};
const std::vector<ModelPreset>& model_presets();
// The preset of that name; throws UsageError listing the known ones.
const ModelPreset& find_model_preset(const std::string& name);
// " tiny (V=256 ...); small (...); ...": the presets for an option's help.
std::string model_presets_help();

// The preset `model` names (--model), with `layers` blocks where above 0 (--layers; 0: the
// preset's). Refuses in one line: "--model: 'x' is not a known model (tiny, ...)", a negative
// --layers.
model::GptConfig preset_config(const std::string& model, int layers);

// The types a GPT trains in: float64, float32 and, in mixed precision, bfloat16 and float16.
inline const std::vector<DataType> kTrainingTypes = {DataType::float64, DataType::float32, DataType::bfloat16,
                                                     DataType::float16};
// The type `text` names for `option`, one of `allowed`; else, in one line, "<option>: <text> is
// not float64, float32 or bfloat16" (the allowed ones, in their order).
DataType training_type(const std::string& option, const std::string& text, const std::vector<DataType>& allowed);

// The most blocks `--layers` takes where each layer count up to it is a run of the default sweep
// (bench pipeline's layer balance, bench checkpoint's policies): 0 (the preset's) to this, or
// a one-line UsageError.
inline constexpr int kMostSweptLayers = 1024;
void check_swept_layers(int layers);

// What a rank holds training `config` on `rows` sequences of `tokens` tokens each, beside its
// blocks' activations: parameters, gradients and AdamW's two moments (in 16 bits the moments and
// the float32 master weights at 4 bytes), the logits and their gradient, and a few transient
// [rows, tokens, h] tensors. An estimate for the memory check before a run, not a formula the
// runs are held to.
double gpt_training_bytes_beside_blocks(const model::GptConfig& config, double rows, double tokens);
// The same with the blocks' activations (theory::parity_block_activation_bytes) of `rows` whole
// sequences: what a rank holds training `config` unsplit.
double gpt_training_bytes(const model::GptConfig& config, double rows);

}  // namespace parity::cli
