// The files of `parity case` (see case_file.hpp).
#include "bench/commands/case_file.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <sstream>

#include "bench/commands/gpt2_file.hpp"
#include "bench/commands/presets.hpp"
#include "reference/core/error.hpp"
#include "reference/core/provenance.hpp"
#include "reference/parallel/batches.hpp"
#include "reference/parallel/state/whole.hpp"
#include "reference/record/arrays.hpp"
#include "reference/record/output.hpp"
#include "reference/theory/model.hpp"

namespace parity::cli {
namespace {

namespace fs = std::filesystem;

constexpr const char* kCaseSchema = "parity-case";
constexpr const char* kResultsSchema = "parity-case-results";
constexpr std::int64_t kVersion = 1;

// FNV-1a over the text: the case's id, which a results file repeats.
std::string case_id(const std::string& text) {
  std::uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : text) h = (h ^ c) * 1099511628211ULL;
  char out[24];
  std::snprintf(out, sizeof out, "%016llx", static_cast<unsigned long long>(h));
  return out;
}

void write_shaped(record::ArrayWriter& file, const std::string& path, const Tensor& t) {
  file.write(path, t.dtype(), t.raw(), static_cast<std::size_t>(t.numel()));
  file.set_attribute(path, "shape", std::vector<std::int64_t>(t.shape().begin(), t.shape().end()));
}

// The model's dropout layers by name ("blocks.0.attn.dropout", ...).
void find_dropouts(model::Layer& layer, std::map<std::string, model::Layer*>& out) {
  if (std::string(layer.kind()) == "dropout") out[layer.name()] = &layer;
  for (model::Layer* child : layer.children()) find_dropouts(*child, out);
}

// Step `step`'s keep masks (int32 1 kept, 0 dropped) of the whole global batch at each block's
// two residual dropouts, by GPT-2 module ("transformer.h.0.attn", "transformer.h.0.mlp"): what
// the model draws (a dropout layer applied to ones in the step's pass context).
std::vector<std::pair<std::string, Tensor>> dropout_masks(model::Model& m, const CaseSpec& s, int step) {
  std::map<std::string, model::Layer*> dropouts;
  for (model::Layer* layer : m.layers()) find_dropouts(*layer, dropouts);
  Tensor ones = Tensor::empty("ones", {s.global_batch, s.config.sequence, s.config.hidden}, DataType::float64,
                              MemoryCategory::workspace);
  ones.fill(1.0);
  std::vector<std::pair<std::string, Tensor>> out;
  for (int i = 0; i < s.config.layers; ++i)
    for (const char* site : {"attn", "mlp"}) {
      const std::string ours = "blocks." + std::to_string(i) + "." + site + ".dropout";
      require(dropouts.count(ours) == 1, "case: the GPT has no dropout layer " + ours);
      const Tensor kept = dropouts.at(ours)->forward(ones, {static_cast<std::uint64_t>(step), 0, true, 0});
      Tensor mask = Tensor::empty(ours, kept.shape(), DataType::int32, MemoryCategory::workspace);
      for (std::int64_t e = 0; e < kept.numel(); ++e) mask.set(e, kept.at(e) != 0 ? 1.0 : 0.0);
      out.emplace_back("transformer.h." + std::to_string(i) + "." + site, std::move(mask));
    }
  return out;
}


std::vector<double> read_doubles(const record::ArrayReader& file, const std::string& path, const std::string& what) {
  if (!file.has(path)) throw UsageError(what + " has no " + path);
  const DataType type = file.dtype(path);
  const std::size_t n = file.length(path);
  if (n == 0) return {};  // an empty shard (a rank of FSDP holding none of a small tensor)
  Tensor t = Tensor::empty(path, {static_cast<std::int64_t>(n)}, type, MemoryCategory::workspace);
  file.read(path, type, 0, n, t.raw());
  return t.to_vector();
}

// A tensor of `size` elements given as shards: every dataset of the group `at` holds the
// elements from its `offset` attribute on (row-major order of the whole tensor); together they
// must cover each element once.
std::vector<double> read_shards(const record::ArrayReader& file, const std::string& at, std::size_t size) {
  const std::string where = file.path().string() + ": " + at;
  std::vector<double> whole(size, 0.0);
  std::vector<char> held(size, 0);
  const std::vector<std::string> shards = file.members(at);
  if (shards.empty()) throw UsageError(where + " is a group without shards");
  for (const std::string& shard : shards) {
    const std::string p = at + "/" + shard;
    const auto offset = file.int_attribute(p, "offset");
    if (!offset) throw UsageError(where + "/" + shard + " has no integer attribute offset (the shard's first element)");
    const std::vector<double> v = read_doubles(file, p, file.path().string());
    if (*offset < 0 || v.size() > size || static_cast<std::size_t>(*offset) > size - v.size())
      throw UsageError(where + "/" + shard + ": " + std::to_string(v.size()) + " elements from element " +
                       std::to_string(*offset) + " of a tensor of " + std::to_string(size));
    for (std::size_t i = 0; i < v.size(); ++i) {
      const std::size_t e = static_cast<std::size_t>(*offset) + i;
      if (held[e]) throw UsageError(where + ": element " + std::to_string(e) + " is in two shards (" + shard + " and another)");
      held[e] = 1;
      whole[e] = v[i];
    }
  }
  const auto gap = std::find(held.begin(), held.end(), 0);
  if (gap != held.end())
    throw UsageError(where + ": no shard holds element " + std::to_string(gap - held.begin()) + " of " + std::to_string(size));
  return whole;
}

}  // namespace

std::vector<std::pair<std::string, std::string>> case_names(const model::GptConfig& config) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& pair : parallel::gpt2_names(config))
    if (std::none_of(out.begin(), out.end(), [&](const auto& o) { return o.first == pair.first; })) out.push_back(pair);
  return out;
}

CaseSpec make_case_spec(CaseSpec s, const std::string& model) {
  s.config = find_model_preset(model).config;
  s.config.dtype = DataType::float64;
  s.config.dropout = s.dropout;
  if (!(s.dropout >= 0 && s.dropout < 1)) throw UsageError("--dropout must be in [0, 1)");
  if (s.steps < 1 || s.steps > 1000) throw UsageError("--steps must be from 1 to 1000");
  if (!(s.clip >= 0) || !std::isfinite(s.clip)) throw UsageError("--clip-grad-norm must be a finite norm >= 0 (0: none)");
  if (s.dp < 1 || s.accumulation < 1 || s.tp < 1 || s.pp < 1)
    throw UsageError("--dp, --accumulation, --tp and --pp must be at least 1");
  if (s.pp > s.config.layers)
    throw UsageError("--pp " + std::to_string(s.pp) + " is more stages than the GPT's " + std::to_string(s.config.layers) + " blocks");
  if (s.zero < 0 || s.zero > 3) throw UsageError("--zero must be 0, 1, 2 or 3");
  if (s.precision != "float32" && s.precision != "float64" && s.precision != "bfloat16")
    throw UsageError("--precision must be float32, float64 or bfloat16 (float32 parameters with bfloat16 compute)");
  // Frameworks average each rank's mean loss: equal shards make that the global batch's mean.
  if (s.global_batch < 1 || s.global_batch % (static_cast<std::int64_t>(s.dp) * s.accumulation) != 0)
    throw UsageError("--global-batch " + std::to_string(s.global_batch) + " must be a positive multiple of dp x accumulation = " +
                     std::to_string(s.dp * s.accumulation) + " (equal micro-batches on every rank)");
  const model::GptConfig& c = s.config;
  if (c.heads % s.tp != 0 || c.hidden % s.tp != 0 || c.vocabulary % s.tp != 0)
    throw UsageError("--tp " + std::to_string(s.tp) + " must divide the heads (" + std::to_string(c.heads) + "), the hidden size (" +
                     std::to_string(c.hidden) + ") and the vocabulary (" + std::to_string(c.vocabulary) + ")");
  std::ostringstream text;
  text << model << ' ' << c.describe() << " steps " << s.steps << " batch " << s.global_batch << ' ' << s.precision << " dp "
       << s.dp << " accumulation " << s.accumulation << " zero " << s.zero << " tp " << s.tp << " pp " << s.pp << " clip " << s.clip << " dropout " << s.dropout;
  s.id = case_id(text.str());
  return s;
}

void require_memory_for_case(const std::string& what, double bytes, const std::string& advice) {
  const unsigned long long available = available_memory_bytes();
  if (available != 0 && bytes > static_cast<double>(available))
    throw UsageError(what + " needs " + record::size_text(bytes) + " of memory but only " + record::size_text(static_cast<double>(available)) +
                     " is available; " + advice);
}

void write_case(const CaseSpec& s, const std::string& model, const std::string& out_path, bool force) {
  record::check_output_path(out_path, force);
  const fs::path out(out_path);
  // Refused before any work: the float64 parameters are held whole (and a step's batch, its
  // tokens and targets as made and as int64, and its dropout masks with the float64 passes
  // that draw them), and the file holds them, the tokens and targets in int64 and the masks in
  // int32.
  const double parameter_bytes = 8.0 * static_cast<double>(theory::gpt_parameters(s.config));
  const double activation = static_cast<double>(s.tokens()) * static_cast<double>(s.config.hidden);
  const double mask_bytes = s.dropout > 0 ? 2.0 * s.config.layers * activation * 4 : 0;
  const double batch_bytes = 32.0 * static_cast<double>(s.tokens());
  require_memory_for_case("case export of " + model,
                          parameter_bytes + batch_bytes + mask_bytes + (s.dropout > 0 ? 16 * activation : 0),
                          "choose a smaller --model or --global-batch");
  const double file_bytes = parameter_bytes + s.steps * (16.0 * static_cast<double>(s.tokens()) + mask_bytes);
  const double free = record::free_bytes_on(record::directory_of(out));
  if (free >= 0 && free < file_bytes)
    throw UsageError("case export of " + model + " writes about " + record::size_text(file_bytes) + " but only " + record::size_text(free) +
                     " is free on " + record::directory_of(out).string() + "; choose a smaller --model or fewer --steps");
  const record::DiscardedOnSignal discarded(out.string() + ".tmp");
  record::ArrayWriter file(out.string() + ".tmp", kCaseSchema, kVersion);
  write_gpt2_config(file, s.config);
  file.set_attribute("/", "case_id", s.id);
  file.set_attribute("/", "model", model);
  file.set_attribute("/", "steps", static_cast<std::int64_t>(s.steps));
  file.set_attribute("/", "global_batch", s.global_batch);
  file.set_attribute("/", "precision", s.precision);
  file.set_attribute("/", "loss", std::string("mean cross-entropy over every token of the global batch"));
  file.set_attribute("/", "dropout", s.dropout);
  file.set_attribute("/", "seed", static_cast<std::int64_t>(s.config.seed));
  for (const auto& [name, value] : std::vector<std::pair<const char*, int>>{
           {"dp", s.dp}, {"accumulation", s.accumulation}, {"zero", s.zero}, {"tp", s.tp}, {"pp", s.pp}})
    file.set_attribute("/layout", name, static_cast<std::int64_t>(value));
  file.set_attribute("/optimizer", "name", std::string("adamw"));
  file.set_attribute("/optimizer", "lr", s.adamw.learning_rate);
  file.set_attribute("/optimizer", "beta1", s.adamw.beta1);
  file.set_attribute("/optimizer", "beta2", s.adamw.beta2);
  file.set_attribute("/optimizer", "eps", s.adamw.epsilon);
  file.set_attribute("/optimizer", "weight_decay", s.adamw.weight_decay);
  file.set_attribute("/optimizer", "decay_groups", std::string(model::name_of(s.adamw.decay_groups)));
  file.set_attribute("/optimizer", "clip_grad_norm", s.clip);
  std::vector<std::string> no_decay;
  for (const auto& [ours, theirs] : case_names(s.config))
    if (!model::decays(s.adamw.decay_groups, ours)) no_decay.push_back(theirs);
  file.set_attribute("/optimizer", "no_decay", no_decay);
  // The initial parameters, float64, under GPT-2's names ([in, out] weights, as Conv1D). A large
  // model or batch takes minutes: say what is being made, and each step as it is written.
  const bool large = file_bytes > 1073741824.0;
  if (large)
    std::fprintf(stderr, "[case export] making %s's %.2fB float64 parameters (%s), then writing about %s to %s\n",
                 model.c_str(), parameter_bytes / 8e9, record::size_text(parameter_bytes).c_str(), record::size_text(file_bytes).c_str(),
                 out_path.c_str());
  const auto m = model::build_gpt(s.config);
  if (large) std::fprintf(stderr, "[case export] parameters made; writing them and %d steps of batches\n", s.steps);
  std::map<std::string, const model::Parameter*> ours;
  for (const model::Parameter* p : m->parameters()) ours[p->name] = p;
  for (const auto& [name, theirs] : case_names(s.config)) write_shaped(file, "/init/" + theirs, ours.at(name)->value);
  // Every step's global batch; rank r of dp takes rows [r B/dp, (r+1) B/dp), in `accumulation`
  // consecutive micro-batches.
  const parallel::BatchSource source = parallel::batches_of(s.config);
  for (int step = 0; step < s.steps; ++step) {
    const model::Batch b = source(static_cast<std::uint64_t>(step), 0, s.global_batch, s.global_batch);
    const std::string at = "/batches/" + std::to_string(step);
    write_shaped(file, at + "/tokens", cast(b.inputs, DataType::int64, "tokens", MemoryCategory::workspace));
    write_shaped(file, at + "/targets", cast(b.targets, DataType::int64, "targets", MemoryCategory::workspace));
    if (s.dropout > 0)
      for (const auto& [name, mask] : dropout_masks(*m, s, step))
        write_shaped(file, at + "/dropout/" + name, mask);
    if (large) std::fprintf(stderr, "[case export] step %d of %d written\n", step + 1, s.steps);
  }
  if (force && fs::exists(out)) fs::remove(out);
  file.commit_as(out);
  std::printf("case %s: %s %s, %d steps of %lld sequences, %s, dp %d x accumulation %d, ZeRO %d, tp %d, pp %d -> %s\n",
              s.id.c_str(), model.c_str(), s.config.describe().c_str(), s.steps, static_cast<long long>(s.global_batch),
              s.precision.c_str(), s.dp, s.accumulation, s.zero, s.tp, s.pp, out_path.c_str());
}

Case read_case(const std::string& path) {
  record::ArrayReader file(path, kCaseSchema, kVersion);
  Case c;
  CaseSpec& s = c.spec;
  s.config = read_gpt2_config(file, path);
  const auto integer = [&](const std::string& at, const char* name) {
    const auto v = file.int_attribute(at, name);
    if (!v) throw UsageError(path + " has no integer attribute " + name + " on " + at);
    return *v;
  };
  const auto real = [&](const char* name) {
    const auto v = file.float_attribute("/optimizer", name);
    if (!v) throw UsageError(path + " has no optimizer attribute " + name);
    return *v;
  };
  s.id = file.string_attribute("/", "case_id").value_or("");
  s.steps = static_cast<int>(integer("/", "steps"));
  s.global_batch = integer("/", "global_batch");
  s.precision = file.string_attribute("/", "precision").value_or("float32");
  s.dp = static_cast<int>(integer("/layout", "dp"));
  s.accumulation = static_cast<int>(integer("/layout", "accumulation"));
  s.zero = static_cast<int>(integer("/layout", "zero"));
  s.tp = static_cast<int>(integer("/layout", "tp"));
  s.pp = static_cast<int>(integer("/layout", "pp"));
  s.adamw = {real("lr"), real("beta1"), real("beta2"), real("eps"), real("weight_decay"),
             model::parse_decay_groups(file.string_attribute("/optimizer", "decay_groups").value_or("all"))};
  s.clip = real("clip_grad_norm");
  s.dropout = file.float_attribute("/", "dropout").value_or(0.0);
  s.config.dropout = s.dropout;
  s.config.seed = static_cast<std::uint64_t>(integer("/", "seed"));
  for (const auto& [ours, theirs] : case_names(s.config)) c.init[theirs] = read_doubles(file, "/init/" + theirs, path);
  for (int step = 0; step < s.steps; ++step) {
    const std::string at = "/batches/" + std::to_string(step);
    const auto tensor = [&](const char* what) {
      const std::vector<double> v = read_doubles(file, at + "/" + what, path);
      if (static_cast<std::int64_t>(v.size()) != s.tokens())
        throw UsageError(path + ": " + at + "/" + what + " has " + std::to_string(v.size()) + " tokens, not " +
                         std::to_string(s.tokens()));
      Tensor t = Tensor::empty(what, {s.global_batch, s.config.sequence}, DataType::int32, MemoryCategory::workspace);
      for (std::size_t i = 0; i < v.size(); ++i) {
        // Token ids of the vocabulary, as the model's embedding and loss take them.
        if (!(v[i] >= 0 && v[i] < static_cast<double>(s.config.vocabulary)) || v[i] != std::floor(v[i]))
          throw UsageError(path + ": " + at + "/" + what + " holds " + (std::ostringstream() << v[i]).str() + " at " +
                           std::to_string(i) + ", not a token of the vocabulary of " + std::to_string(s.config.vocabulary));
        t.set(static_cast<std::int64_t>(i), v[i]);
      }
      return t;
    };
    c.batches.emplace_back(tensor("tokens"), tensor("targets"));
  }
  // The reference draws its masks itself: they must be the case's.
  if (s.dropout > 0) {
    const auto m = model::build_gpt(s.config);
    for (int step = 0; step < s.steps; ++step)
      for (const auto& [name, mask] : dropout_masks(*m, s, step)) {
        const std::string at = "/batches/" + std::to_string(step) + "/dropout/" + name;
        if (read_doubles(file, at, path) != mask.to_vector())
          throw UsageError(path + ": " + at + " is not the mask parity draws for this case (seed " +
                           std::to_string(s.config.seed) + ")");
      }
  }
  return c;
}


Results read_results(const std::string& path, const Case& c) {
  record::ArrayReader file(path, kResultsSchema, kVersion);
  const std::string id = file.string_attribute("/", "case_id").value_or("(none)");
  if (id != c.spec.id)
    throw UsageError(path + " holds results of case " + id + ", not of case " + c.spec.id + " (another case file)");
  Results r;
  r.losses = read_doubles(file, "/loss", path);
  if (static_cast<int>(r.losses.size()) != c.spec.steps)
    throw UsageError(path + ": /loss has " + std::to_string(r.losses.size()) + " steps, the case " + std::to_string(c.spec.steps));
  for (std::size_t i = 0; i < r.losses.size(); ++i)
    if (!std::isfinite(r.losses[i]))
      throw UsageError(path + ": the loss of step " + std::to_string(i) + " is " + std::to_string(r.losses[i]));
  for (const auto& [name, init] : c.init) {
    const auto take = [&](const std::string& at) {
      if (file.is_group(at)) return read_shards(file, at, init.size());
      std::vector<double> v = read_doubles(file, at, path);
      if (v.size() != init.size())
        throw UsageError(path + ": " + at + " has " + std::to_string(v.size()) + " elements, the case's " + name + " " +
                         std::to_string(init.size()));
      return v;
    };
    r.gradients[name] = take("/gradients/" + name);
    r.parameters[name] = take("/parameters/" + name);
    r.exp_avg[name] = take("/optimizer/" + name + "/exp_avg");
    r.exp_avg_sq[name] = take("/optimizer/" + name + "/exp_avg_sq");
  }
  return r;
}

}  // namespace parity::cli
