// Model configurations: checks and descriptions (see model_config.hpp).
#include "reference/theory/model_config.hpp"

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
  require_model_type("GPT config", dtype, false);
}

std::string GptConfig::describe() const {
  return "V=" + std::to_string(vocabulary) + " L=" + std::to_string(layers) + " h=" + std::to_string(hidden) +
         " a=" + std::to_string(heads) + " s=" + std::to_string(sequence) + (tied_embeddings ? " tied" : " untied") +
         " " + std::string(name_of(dtype));
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
