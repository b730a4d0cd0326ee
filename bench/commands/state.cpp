// parity state export / parity state import: a GPT's training state to and from a file of its
// parameters under Hugging Face's GPT-2 names and layouts (GPT2LMHeadModel: transformer.h.0.
// attn.c_attn.weight, its Conv1D weights [in, out]), the file bench/gpt2_torch.py turns into a
// PyTorch state_dict and back. Export also writes parity's logits of a few rows, so that a
// PyTorch GPT-2 built from the export can be checked against them.
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "bench/commands/command.hpp"
#include "reference/core/error.hpp"
#include "reference/model/model.hpp"
#include "reference/ops/ops.hpp"
#include "reference/parallel/batches.hpp"
#include "reference/parallel/state/whole.hpp"
#include "reference/record/arrays.hpp"
#include "reference/record/output.hpp"

namespace parity::cli {

namespace fs = std::filesystem;

namespace {

constexpr const char* kGpt2Schema = "parity-gpt2";
constexpr std::int64_t kGpt2Version = 1;

const char* const kStateHelp =
    "The training state (docs/training-state.md): a GPT's parameters to and from a file under Hugging Face's GPT-2 "
    "names, which bench/gpt2_torch.py turns into a PyTorch state_dict and back";

struct ExportOptions {
  std::string from, out;
  int tokens = 2;
  std::string values = "master";
  bool force = false;
};

// The file's model attributes, as GPT2Config names them.
void write_config(record::ArrayWriter& file, const model::GptConfig& c) {
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

int state_export(const ExportOptions& o) {
  if (o.tokens < 0) throw UsageError("--tokens must be at least 0");
  if (o.values != "master" && o.values != "model")
    throw UsageError("--values must be master (the float32 masters of a mixed-precision state) or model");
  record::check_output_path(o.out, o.force);
  const parallel::WholeState state = parallel::read_whole_training_state(o.from);
  if (!state.model)
    throw UsageError(o.from + ": the save does not name the GPT it trains (its index has no /model)");
  model::GptConfig config = *state.model;
  // The values: the masters where a mixed-precision state has them (and --values master).
  std::map<std::string, const parallel::WholeTensor*> values;
  for (const auto& [ours, theirs] : parallel::gpt2_names(config)) {
    auto it = state.tensors.find(o.values == "master" ? ours + "/master" : ours);
    if (it == state.tensors.end()) it = state.tensors.find(ours);
    if (it == state.tensors.end()) throw UsageError(o.from + ": the save has no " + ours + " (a GPT of another shape?)");
    values[theirs] = &it->second;
  }
  config.dtype = values.begin()->second->dtype;
  config.dropout = 0;
  const fs::path out(o.out);
  record::ArrayWriter file(out.string() + ".tmp", kGpt2Schema, kGpt2Version);
  write_config(file, config);
  file.set_attribute("/", "source", fs::absolute(o.from).string());
  file.set_attribute("/", "next_step", static_cast<std::int64_t>(state.next_step));
  for (const auto& [theirs, t] : values) {
    file.write("/" + theirs, t->dtype, t->bytes.data(), t->bytes.size() / size_of(t->dtype));
    std::vector<std::int64_t> shape(t->shape.begin(), t->shape.end());
    file.set_attribute("/" + theirs, "shape", shape);
  }
  if (o.tokens > 0) {
    // Parity's logits of the first rows of step 0's batch, in the values' precision.
    auto m = model::build_gpt(config);
    for (model::Parameter* p : m->parameters()) {
      const parallel::WholeTensor& t = state.tensors.count(p->name + "/master") && o.values == "master"
                                           ? state.tensors.at(p->name + "/master")
                                           : state.tensors.at(p->name);
      if (t.dtype != p->value.dtype() || t.shape != p->value.shape())
        throw UsageError(o.from + ": " + p->name + " is " + std::string(name_of(t.dtype)) + " " + to_string(t.shape) +
                         ", the model holds " + p->value.describe());
      std::memcpy(p->value.raw(), t.bytes.data(), t.bytes.size());
    }
    const model::Batch batch = parallel::batches_of(config)(0, 0, o.tokens, o.tokens);
    model::PassContext context{0, 0, false, 0};
    const Tensor logits = m->forward(batch.inputs, context);
    const Tensor tokens = cast(batch.inputs, DataType::int64, "tokens", MemoryCategory::workspace);
    file.write("/parity/tokens", DataType::int64, tokens.raw(), static_cast<std::size_t>(tokens.numel()));
    file.set_attribute("/parity/tokens", "shape", std::vector<std::int64_t>(tokens.shape().begin(), tokens.shape().end()));
    const Tensor wide = cast(logits, DataType::float64, "logits", MemoryCategory::workspace);
    file.write("/parity/logits", DataType::float64, wide.raw(), static_cast<std::size_t>(wide.numel()));
    file.set_attribute("/parity/logits", "shape", std::vector<std::int64_t>(wide.shape().begin(), wide.shape().end()));
    file.set_attribute("/parity/logits", "dtype_computed", std::string(name_of(config.dtype)));
  }
  if (o.force && fs::exists(out)) fs::remove(out);
  file.commit_as(out);
  std::printf("exported %zu tensors of %s (step %llu) to %s%s\n", values.size(), config.describe().c_str(),
              static_cast<unsigned long long>(state.next_step), o.out.c_str(),
              o.tokens > 0 ? (" with parity's logits of " + std::to_string(o.tokens) + " rows").c_str() : "");
  return kExitOk;
}

struct ImportOptions {
  std::string from, out;
};

int state_import(const ImportOptions& o) {
  record::ArrayReader file(o.from, kGpt2Schema, kGpt2Version);
  auto integer = [&](const char* name) {
    const auto v = file.int_attribute("/", name);
    if (!v) throw UsageError(o.from + " has no integer attribute " + name);
    return *v;
  };
  model::GptConfig config;
  config.vocabulary = integer("vocab_size");
  config.sequence = integer("n_positions");
  config.hidden = integer("n_embd");
  config.layers = static_cast<int>(integer("n_layer"));
  config.heads = static_cast<int>(integer("n_head"));
  config.tied_embeddings = integer("tie_word_embeddings") != 0;
  config.dropout = 0;
  if (integer("n_inner") != 4 * config.hidden)
    throw UsageError(o.from + ": an MLP of " + std::to_string(integer("n_inner")) + " (parity's GPT has 4 x n_embd)");
  if (file.string_attribute("/", "activation_function").value_or("") != "gelu_new")
    throw UsageError(o.from + ": activation " + file.string_attribute("/", "activation_function").value_or("(none)") +
                     " (parity's GPT uses gelu_new, GeLU's tanh form)");
  parallel::WholeState state;
  bool first = true;
  for (const auto& [ours, theirs] : parallel::gpt2_names(config)) {
    if (state.tensors.count(ours)) continue;  // the tied table, taken from transformer.wte
    const std::string path = "/" + theirs;
    if (!file.has(path)) throw UsageError(o.from + " has no " + theirs);
    parallel::WholeTensor t;
    t.dtype = file.dtype(path);
    if (first) config.dtype = t.dtype;
    first = false;
    if (t.dtype != config.dtype)
      throw UsageError(o.from + ": " + theirs + " is " + std::string(name_of(t.dtype)) + ", the others " +
                       std::string(name_of(config.dtype)));
    const std::size_t n = file.length(path);
    t.bytes.resize(n * size_of(t.dtype));
    file.read(path, t.dtype, 0, n, t.bytes.data());
    state.tensors[ours] = std::move(t);
  }
  config.validate();
  // Shapes from the model parity builds; AdamW's moments start at zero (and float32 masters of
  // 16-bit values), as a run from a pretrained model starts.
  const auto m = model::build_gpt(config);
  const bool mixed = is_half(config.dtype);
  for (const model::Parameter* p : m->parameters()) {
    parallel::WholeTensor& t = state.tensors.at(p->name);
    if (t.bytes.size() != static_cast<std::size_t>(p->value.numel()) * size_of(t.dtype))
      throw UsageError(o.from + ": " + p->name + " has " + std::to_string(t.bytes.size() / size_of(t.dtype)) +
                       " elements, the GPT of its attributes " + p->value.describe());
    t.shape = p->value.shape();
    const DataType state_type = mixed ? DataType::float32 : config.dtype;
    for (const char* moment : {"/exp_avg", "/exp_avg_sq"})
      state.tensors[p->name + moment] = {state_type, t.shape, std::vector<char>(t.bytes.size() / size_of(t.dtype) *
                                                                                     size_of(state_type), 0)};
    if (mixed) {
      Tensor half = Tensor::empty(p->name, t.shape, t.dtype, MemoryCategory::workspace);
      std::memcpy(half.raw(), t.bytes.data(), t.bytes.size());
      const Tensor wide = cast(half, DataType::float32, p->name, MemoryCategory::workspace);
      parallel::WholeTensor master{DataType::float32, t.shape, std::vector<char>(wide.bytes())};
      std::memcpy(master.bytes.data(), wide.raw(), wide.bytes());
      state.tensors[p->name + "/master"] = std::move(master);
    }
  }
  state.model = config;
  state.layout = "imported from " + o.from;
  const fs::path saved = parallel::write_whole_training_state(o.out, state);
  std::printf("imported %s from %s as %s (step 0, AdamW's moments zero)\n", config.describe().c_str(), o.from.c_str(),
              saved.string().c_str());
  return kExitOk;
}

class StateExport final : public Command {
 public:
  StateExport()
      : Command({.name = "state export",
                 .help = "A GPT's parameters from a saved training state (any layout) to a file under Hugging Face's "
                         "GPT-2 names and layouts, with parity's logits of a few rows; bench/gpt2_torch.py to-torch "
                         "makes a PyTorch state_dict of it",
                 .order = 150,
                 .ranks = false,
                 .parent_help = kStateHelp}) {}
  void declare(CommandOptions& o) override {
    o.add("--from", options_.from, "A save's directory, or a root whose newest complete save is taken")->required();
    o.add("--out", options_.out, "The file to write (HDF5: one dataset per GPT-2 parameter, GPT2Config's attributes)")
        ->required();
    o.add("--tokens", options_.tokens, "Rows of step 0's batch whose logits parity writes beside (0: none)")
        ->capture_default_str();
    o.add("--values", options_.values, "master: a mixed-precision state's float32 masters; model: its 16-bit values")
        ->capture_default_str();
    o.flag("--force", options_.force, "Overwrite --out");
  }
  int run_here() override { return state_export(options_); }

 private:
  ExportOptions options_;
};

class StateImport final : public Command {
 public:
  StateImport()
      : Command({.name = "state import",
                 .help = "A GPT-2 file (state export's format; bench/gpt2_torch.py from-torch writes one from a PyTorch "
                         "state_dict) as a training state at step 0 that any layout restores",
                 .order = 151,
                 .ranks = false}) {}
  void declare(CommandOptions& o) override {
    o.add("--from", options_.from, "The GPT-2 file")->required();
    o.add("--out", options_.out, "The root to save under (step-00000000 is made there)")->required();
  }
  int run_here() override { return state_import(options_); }

 private:
  ImportOptions options_;
};

const RegisteredCommand<StateExport> kStateExport;
const RegisteredCommand<StateImport> kStateImport;

}  // namespace
}  // namespace parity::cli
