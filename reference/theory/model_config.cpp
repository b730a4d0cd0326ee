// Model configurations: checks and descriptions (see model_config.hpp).
#include "reference/theory/model_config.hpp"

#include <cstdio>

#include "reference/core/error.hpp"

namespace parity::model {
namespace {
// half_storage: the model's ops all have 16-bit storage forms (float32 arithmetic); the GPT's
// attention does not.
void require_model_type(const char* what, DataType dtype, bool half_storage) {
  if (dtype == DataType::float32 || dtype == DataType::float64 || (half_storage && is_half(dtype))) return;
  throw UsageError(std::string(what) + ": data type " + std::string(name_of(dtype)) + " is not supported (float32 or float64" +
                   (half_storage ? ", or 16-bit storage with float32 arithmetic)" : "; attention has no 16-bit kernel)"));
}
}  // namespace

void GptConfig::validate() const {
  const std::string what = "GPT config (" + describe() + ")";
  if (vocabulary <= 0 || layers <= 0 || hidden <= 0 || heads <= 0 || sequence <= 0)
    throw UsageError(what + ": vocabulary, layers, hidden, heads and sequence must all be positive");
  if (hidden % heads != 0)
    throw UsageError(what + ": heads " + std::to_string(heads) + " do not divide hidden " + std::to_string(hidden));
  if (!(dropout >= 0 && dropout < 1)) throw UsageError(what + ": dropout must be in [0, 1)");
  require_model_type("GPT config", dtype, true);
  if (moe.enabled()) moe.validate(layers);
}

bool MoeConfig::holds(int block) const {
  for (int b : layers)
    if (b == block) return true;
  return false;
}

void MoeConfig::validate(int blocks) const {
  const std::string what = "MoE config (" + describe() + ")";
  if (experts < 1) throw UsageError(what + ": needs at least one expert");
  if (router != "top_k" && router != "expert_choice" && router != "aux_free")
    throw UsageError(what + ": unknown router '" + router + "' (known: top_k, expert_choice, aux_free)");
  if (router != "expert_choice" && (top_k < 1 || top_k > experts))
    throw UsageError(what + ": k = " + std::to_string(top_k) + " must be between 1 and the " + std::to_string(experts) +
                     " experts");
  if (!(capacity_factor > 0))
    throw UsageError(what + ": capacity factor " + std::to_string(capacity_factor) + " must be above 0 (inf: dropless)");
  for (std::size_t i = 0; i < layers.size(); ++i) {
    if (layers[i] < 0 || layers[i] >= blocks)
      throw UsageError(what + ": MoE layer " + std::to_string(layers[i]) + " is beyond the model's " +
                       std::to_string(blocks) + " blocks (0.." + std::to_string(blocks - 1) + ")");
    for (std::size_t j = 0; j < i; ++j)
      if (layers[j] == layers[i]) throw UsageError(what + ": MoE layer " + std::to_string(layers[i]) + " is listed twice");
  }
  if (!(balance_coefficient >= 0 && z_loss_coefficient >= 0 && bias_update_rate >= 0))
    throw UsageError(what + ": the balancing and z-loss coefficients and the bias rate must be >= 0");
  if (expert_hidden < 0) throw UsageError(what + ": expert hidden size must be positive (0: 4 h)");
}

std::string MoeConfig::describe() const {
  if (!enabled()) return "";
  std::string blocks;
  for (int b : layers) {
    if (!blocks.empty()) blocks += ',';
    blocks += std::to_string(b);
  }
  char cf[32];
  std::snprintf(cf, sizeof cf, "%g", capacity_factor);
  std::string text = "moe E=" + std::to_string(experts);
  if (router != "expert_choice") text += " k=" + std::to_string(top_k);
  text += " cf=";
  text += cf;
  text += ' ';
  text += router;
  if (shared_expert) text += " shared";
  text += " blocks ";
  text += blocks;
  return text;
}

std::vector<int> every_kth_block(int every, int blocks) {
  if (every < 1) throw UsageError("an MoE layer every " + std::to_string(every) + " blocks: must be 1 or more");
  std::vector<int> out;
  for (int b = every - 1; b < blocks; b += every) out.push_back(b);
  return out;
}

std::string GptConfig::describe() const {
  std::string text = "V=" + std::to_string(vocabulary) + " L=" + std::to_string(layers) + " h=" + std::to_string(hidden) +
         " a=" + std::to_string(heads) + " s=" + std::to_string(sequence) + (tied_embeddings ? " tied" : " untied") +
         " " + std::string(name_of(dtype));
  if (moe.enabled()) {
    text += ' ';
    text += moe.describe();
  }
  return text;
}

void MlpConfig::validate() const {
  const std::string what = "MLP config (" + describe() + ")";
  if (inputs <= 0 || width <= 0 || outputs <= 0 || layers <= 0)
    throw UsageError(what + ": inputs, width, outputs and layers must all be positive");
  require_model_type("MLP config", dtype, true);
}

std::string MlpConfig::describe() const {
  return "in=" + std::to_string(inputs) + " width=" + std::to_string(width) + " out=" + std::to_string(outputs) +
         " L=" + std::to_string(layers) + " " + std::string(name_of(dtype));
}

}  // namespace parity::model
