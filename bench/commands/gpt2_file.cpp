// GPT2Config's attributes in parity's files (see gpt2_file.hpp).
#include "bench/commands/gpt2_file.hpp"

#include <cstdio>
#include <string>

#include "reference/core/error.hpp"
#include "reference/core/text.hpp"
#include "reference/ops/ops.hpp"
#include "reference/theory/model.hpp"

namespace parity::cli {
namespace {

// Elements of every dataset under `group`, its subgroups' too, down to `depth` levels (parity's
// files nest two; a link back up would make the walk endless).
double stored_elements(const record::ArrayReader& file, const std::string& group, const std::string& what, int depth = 4) {
  double n = 0;
  for (const std::string& member : file.members(group)) {
    const std::string path = (group == "/" ? "/" : group + "/") + member;
    if (!file.is_group(path)) {
      n += static_cast<double>(file.length(path));
    } else {
      if (depth == 0) throw UsageError(what + ": groups nest deeper than a GPT-2 file's (" + quoted_input(path, 200) + ")");
      n += stored_elements(file, path, what, depth - 1);
    }
  }
  return n;
}

}  // namespace

void write_gpt2_config(record::ArrayWriter& file, const model::GptConfig& c) {
  file.set_attribute("/", "vocab_size", c.vocabulary);
  file.set_attribute("/", "n_positions", c.sequence);
  file.set_attribute("/", "n_embd", c.hidden);
  file.set_attribute("/", "n_layer", static_cast<std::int64_t>(c.layers));
  file.set_attribute("/", "n_head", static_cast<std::int64_t>(c.heads));
  file.set_attribute("/", "n_inner", 4 * c.hidden);
  file.set_attribute("/", "layer_norm_epsilon", ops::kLayerNormEps);
  file.set_attribute("/", "activation_function", std::string("gelu_new"));
  file.set_attribute("/", "tie_word_embeddings", static_cast<std::int64_t>(c.tied_embeddings ? 1 : 0));
}

model::GptConfig read_gpt2_config(const record::ArrayReader& file, const std::string& what) {
  auto integer = [&](const char* name) {
    const auto v = file.int_attribute("/", name);
    if (!v) throw UsageError(what + " has no integer attribute " + name);
    return *v;
  };
  // A count parity holds in an int is refused past it, not narrowed to another count.
  auto count = [&](const char* name) {
    const std::int64_t v = integer(name);
    return int_count(v, what + ": " + name + " " + std::to_string(v));
  };
  model::GptConfig config;
  config.vocabulary = integer("vocab_size");
  config.sequence = integer("n_positions");
  config.hidden = integer("n_embd");
  config.layers = count("n_layer");
  config.heads = count("n_head");
  config.tied_embeddings = integer("tie_word_embeddings") != 0;
  config.dropout = 0;
  config.dtype = DataType::float64;
  if (integer("n_inner") != 4 * config.hidden)
    throw UsageError(what + ": an MLP of " + std::to_string(integer("n_inner")) + " (parity's GPT has 4 x n_embd)");
  // GPT2Config's default when absent; another (or a NaN) would be another model.
  const double epsilon = file.float_attribute("/", "layer_norm_epsilon").value_or(ops::kLayerNormEps);
  if (epsilon != ops::kLayerNormEps) {
    char text[96];
    std::snprintf(text, sizeof text, "layer_norm_epsilon %.10g (parity's GPT uses %g)", epsilon, ops::kLayerNormEps);
    throw UsageError(what + ": " + text);
  }
  if (file.string_attribute("/", "activation_function").value_or("") != "gelu_new")
    throw UsageError(what + ": activation " + file.string_attribute("/", "activation_function").value_or("(none)") +
                     " (parity's GPT uses gelu_new, GeLU's tanh form)");
  try {
    config.validate();
  } catch (const UsageError& e) {
    throw UsageError(what + ": " + e.what());
  }
  // The attributes size what is named, read and built from the file: a GPT of more parameters
  // than the file stores elements (n_layer 2^31 - 1, vocab_size 2^40) is refused before any of
  // that is made. Each term is bounded in double first, so that the count cannot overflow.
  const double stored = stored_elements(file, "/", what), h = static_cast<double>(config.hidden);
  const bool bounded = stored < 0x1p53 && static_cast<double>(config.vocabulary) * h <= stored &&
                       static_cast<double>(config.sequence) * h <= stored &&
                       static_cast<double>(config.layers) * (12 * h * h + 13 * h) <= stored;
  if (!bounded || static_cast<double>(theory::gpt_parameters(config)) > stored) {
    char text[160];
    std::snprintf(text, sizeof text, "describe more parameters than the %.0f elements the file stores", stored);
    throw UsageError(what + ": its attributes (" + config.describe() + ") " + text);
  }
  return config;
}

}  // namespace parity::cli
