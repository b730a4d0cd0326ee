// A training state whole in one process (see whole.hpp).
#include "reference/parallel/state/whole.hpp"

#include <random>
#include <sstream>

#include "reference/core/error.hpp"
#include "reference/core/text.hpp"
#include "reference/parallel/state/files.hpp"
#include "reference/parallel/state/store.hpp"

namespace parity::parallel {

namespace fs = std::filesystem;
using namespace state_files;

namespace {
// "[32, 16]" back to a shape.
Shape parse_shape(const std::string& text, const std::string& name) {
  Shape shape;
  std::string inner = text;
  if (inner.size() < 2 || inner.front() != '[' || inner.back() != ']')
    throw UsageError("the saved shape of " + name + " is not [..]: " + text);
  std::istringstream items(inner.substr(1, inner.size() - 2));
  for (std::string d; std::getline(items, d, ',');) shape.push_back(std::stoll(d));
  return shape;
}
}  // namespace

WholeState read_whole_training_state(const fs::path& path) {
  SaveReader save(resolve(path));
  WholeState state;
  for (const auto& [name, entry] : save.tensors()) {
    WholeTensor t;
    t.dtype = parse_data_type(entry.first);
    t.shape = parse_shape(entry.second, name);
    const std::int64_t n = element_count(t.shape);
    t.bytes.assign(static_cast<std::size_t>(n) * size_of(t.dtype), 0);
    HeldTensor whole{name, t.shape, t.dtype, Tensor(), {{0, n}}, {}};
    std::uint64_t bytes = 0;
    const std::int64_t copied = save.stage(whole, t.bytes, bytes);
    if (copied != n)
      throw UsageError(save.directory().string() + ": the pieces of " + name + " cover " + std::to_string(copied) +
                       " of its " + std::to_string(n) + " elements");
    state.tensors.emplace(name, std::move(t));
  }
  state.next_step = static_cast<std::uint64_t>(save.integer("next_step"));
  state.optimizer_steps = save.integer("optimizer_steps");
  state.clean_steps = save.integer("clean_steps");
  state.loss_scale = save.number("loss_scale");
  state.optimizer = save.index().string_attribute("/", "optimizer").value_or("");
  state.layout = save.index().string_attribute("/", "layout").value_or("");
  state.model = save.model();
  return state;
}

fs::path write_whole_training_state(const fs::path& root, const WholeState& state) {
  const fs::path final_dir = root / step_name(state.next_step), partial = root / (step_name(state.next_step) + ".partial");
  if (fs::exists(root) && !fs::is_directory(root)) throw UsageError(root.string() + " is not a directory");
  // A complete save of this step is refused; an uncommitted step-N (no index) is replaced.
  if (const auto refused = save_refused(root, state.next_step)) throw UsageError(*refused);
  fs::remove_all(final_dir);
  fs::remove_all(partial);
  std::error_code made;
  fs::create_directories(partial, made);
  if (made) throw UsageError("cannot make the folder " + quoted_input(partial.string(), 200) + ": " + made.message());
  IndexContents index;
  std::random_device device;
  index.save_id = std::to_string(device()) + std::to_string(device());
  index.next_step = state.next_step;
  index.optimizer_steps = state.optimizer_steps;
  index.optimizer = state.optimizer;
  index.loss_scale = state.loss_scale;
  index.clean_steps = state.clean_steps;
  index.world_size = 1;
  index.layout = state.layout;
  index.model = state.model;
  std::string written;
  {
    record::ArrayWriter file(partial / (rank_file(0) + ".tmp"), kTrainingStateSchema, kTrainingStateVersion);
    file.set_attribute("/", "save_id", index.save_id);
    file.set_attribute("/", "rank", std::int64_t{0});
    file.set_attribute("/", "next_step", static_cast<std::int64_t>(state.next_step));
    std::int64_t j = 0;
    for (const auto& [name, t] : state.tensors) {
      const std::int64_t n = element_count(t.shape);
      if (t.bytes.size() != static_cast<std::size_t>(n) * size_of(t.dtype))
        throw Error("write_whole_training_state: " + name + " holds " + std::to_string(t.bytes.size()) +
                    " bytes for " + to_string(t.shape) + " of " + std::string(name_of(t.dtype)));
      index.catalog[name] = {std::string(name_of(t.dtype)), t.shape};
      const std::uint32_t crc = crc_of(t.bytes.data(), t.bytes.size());
      const std::vector<std::int64_t> runs{0, n};
      file.write(piece_group(j) + "/data", t.dtype, t.bytes.data(), static_cast<std::size_t>(n));
      file.write(piece_group(j) + "/runs", DataType::int64, runs.data(), runs.size());
      file.set_attribute(piece_group(j), "name", name);
      file.set_attribute(piece_group(j), "crc32", static_cast<std::int64_t>(crc));
      written += name + '\t' + std::to_string(j) + '\t' + std::to_string(n) + "\t0\t" + std::to_string(n) + '\t' +
                 std::to_string(crc) + '\n';
      ++j;
    }
    file.commit_as(partial / rank_file(0));
  }
  index.written = {written};
  write_index(partial, index);
  fs::rename(partial, final_dir);
  record::sync_directory(root);
  return final_dir;
}

std::vector<std::pair<std::string, std::string>> gpt2_names(const model::GptConfig& c) {
  if (c.moe.enabled()) throw UsageError("GPT-2 names: the model has MoE layers, which GPT-2 has not");
  std::vector<std::pair<std::string, std::string>> out{{"embedding.wte", "transformer.wte.weight"},
                                                       {"embedding.wpe", "transformer.wpe.weight"}};
  for (int i = 0; i < c.layers; ++i) {
    const std::string p = "blocks." + std::to_string(i) + ".", h = "transformer.h." + std::to_string(i) + ".";
    for (const auto& [ours, theirs] : std::vector<std::pair<std::string, std::string>>{
             {"ln1.gamma", "ln_1.weight"}, {"ln1.beta", "ln_1.bias"},
             {"attn.qkv.weight", "attn.c_attn.weight"}, {"attn.qkv.bias", "attn.c_attn.bias"},
             {"attn.proj.weight", "attn.c_proj.weight"}, {"attn.proj.bias", "attn.c_proj.bias"},
             {"ln2.gamma", "ln_2.weight"}, {"ln2.beta", "ln_2.bias"},
             {"mlp.fc.weight", "mlp.c_fc.weight"}, {"mlp.fc.bias", "mlp.c_fc.bias"},
             {"mlp.proj.weight", "mlp.c_proj.weight"}, {"mlp.proj.bias", "mlp.c_proj.bias"}})
      out.push_back({p + ours, h + theirs});
  }
  out.push_back({"ln_f.gamma", "transformer.ln_f.weight"});
  out.push_back({"ln_f.beta", "transformer.ln_f.bias"});
  out.push_back({c.tied_embeddings ? "embedding.wte" : "lm_head.weight", "lm_head.weight"});
  return out;
}

}  // namespace parity::parallel
