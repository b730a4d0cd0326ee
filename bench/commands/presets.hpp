// The GPT presets the benchmarks train (--model, --models): tiny, small, medium, large, and the
// published shapes gpt2-medium, gpt-1.3b and gpt-2.7b.
#pragma once

#include <string>
#include <vector>

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

}  // namespace parity::cli
