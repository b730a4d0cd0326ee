// The GPT presets (presets.hpp).
#include "bench/commands/presets.hpp"

#include <algorithm>
#include <exception>
#include <optional>

#include "reference/core/error.hpp"
#include "reference/theory/model.hpp"

namespace parity::cli {

const std::vector<ModelPreset>& model_presets() {
  static const std::vector<ModelPreset> presets = [] {
    auto gpt = [](std::int64_t v, int l, std::int64_t h, int a, std::int64_t s) {
      return model::GptConfig{.vocabulary = v, .layers = l, .hidden = h, .heads = a, .sequence = s};
    };
    return std::vector<ModelPreset>{
        {"tiny", gpt(256, 2, 64, 4, 64)},
        {"small", gpt(512, 4, 128, 4, 128)},
        {"medium", gpt(1024, 6, 256, 8, 256)},
        {"large", gpt(2048, 12, 512, 8, 512)},
        // GPT-2 medium and GPT-3's 1.3B and 2.7B shapes; vocabulary 50304 is GPT-2's 50257
        // padded to a multiple of 128.
        {"gpt2-medium", gpt(50304, 24, 1024, 16, 1024)},
        {"gpt-1.3b", gpt(50304, 24, 2048, 16, 2048)},
        {"gpt-2.7b", gpt(50304, 32, 2560, 32, 2048)},
    };
  }();
  return presets;
}

const ModelPreset& find_model_preset(const std::string& name) {
  auto it = std::find_if(model_presets().begin(), model_presets().end(), [&](const ModelPreset& p) { return p.name == name; });
  if (it != model_presets().end()) return *it;
  std::string known;
  for (const auto& p : model_presets()) known += (known.empty() ? "" : ", ") + p.name;
  throw UsageError("'" + name + "' is not a known model (" + known + ")");
}

model::GptConfig preset_config(const std::string& model, int layers) {
  if (layers < 0) throw UsageError("--layers must be at least 1 (0: the preset's)");
  model::GptConfig config;
  try {
    config = find_model_preset(model).config;
  } catch (const UsageError& e) {
    throw UsageError(std::string("--model: ") + e.what());
  }
  if (layers > 0) config.layers = layers;
  return config;
}

DataType training_type(const std::string& option, const std::string& text, const std::vector<DataType>& allowed) {
  std::optional<DataType> type;
  try {
    type = parse_data_type(text);
  } catch (const std::exception&) {
  }
  if (type && std::find(allowed.begin(), allowed.end(), *type) != allowed.end()) return *type;
  std::string names;
  for (std::size_t i = 0; i < allowed.size(); ++i)
    names += (i == 0 ? "" : i + 1 == allowed.size() ? " or " : ", ") + std::string(name_of(allowed[i]));
  throw UsageError(option + ": " + text + " is not " + names);
}

void check_swept_layers(int layers) {
  if (layers < 0 || layers > kMostSweptLayers)
    throw UsageError("--layers: " + std::to_string(layers) + " is out of range (0 to " + std::to_string(kMostSweptLayers) + ")");
}

std::string model_presets_help() {
  std::string names;
  for (const auto& p : model_presets()) names += " " + p.name + " (" + p.config.describe() + ");";
  return names;
}

double gpt_training_bytes_beside_blocks(const model::GptConfig& config, double rows, double tokens) {
  const auto e = static_cast<double>(size_of(config.dtype));
  const double per_parameter = is_half(config.dtype) ? 2 * e + 12 : 4 * e;
  return per_parameter * static_cast<double>(theory::gpt_parameters(config)) +
         e * (3.0 * rows * tokens * static_cast<double>(config.vocabulary) + 8.0 * rows * tokens * static_cast<double>(config.hidden));
}

double gpt_training_bytes(const model::GptConfig& config, double rows) {
  // A block's activations are linear in the rows: one row's, times the rows, in double.
  return static_cast<double>(theory::parity_block_activation_bytes(config, 1)) * rows * config.layers +
         gpt_training_bytes_beside_blocks(config, rows, static_cast<double>(config.sequence));
}

}  // namespace parity::cli
