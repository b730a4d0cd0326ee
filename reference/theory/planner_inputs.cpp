// The descriptions the planner takes (theory/planner.hpp): models and clusters from presets,
// key=value pairs or JSON files, and the --fix keys.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <optional>
#include <sstream>
#include <span>
#include <string_view>

#include "reference/core/error.hpp"
#include "reference/core/json.hpp"
#include "reference/core/text.hpp"
#include "reference/theory/planner.hpp"

namespace parity::theory {

namespace {

// ---- reading descriptions --------------------------------------------------------------------

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
}

// parse_json with the file named in its errors.
JsonValue parse_json_of(const std::string& text, const std::string& where) {
  try {
    return parse_json(text);
  } catch (const UsageError& e) {
    throw UsageError(where + ": " + e.what());
  }
}

// The keys of a description whose values are numbers, which a JSON file must write as numbers
// ("memory_GB": 80, not "80"); the others take words ("norm": "rmsnorm", "tied": true), and a
// key of neither kind is refused by its parser as unknown.
using Numbers = std::span<const std::string_view>;
constexpr std::string_view kFixNumbers[] = {"tp", "pp", "dp", "ep", "cp", "v", "micro_batch", "zero"};

// A description's key, stated once: its name, whether it takes a number, whether a description
// must give it, and what it sets.
template <typename T>
struct KeyRule {
  std::string_view name;
  bool number;
  void (*set)(T& into, const std::string& key, const std::string& value);
  bool required = false;
};

template <typename T, std::size_t N>
std::vector<std::string_view> numbers_of(const KeyRule<T> (&rules)[N]) {
  std::vector<std::string_view> out;
  for (const KeyRule<T>& r : rules)
    if (r.number) out.push_back(r.name);
  return out;
}

// The rule of `key`, or null for a key the description does not know.
template <typename T, std::size_t N>
const KeyRule<T>* rule_of(const KeyRule<T> (&rules)[N], std::string_view key) {
  for (const KeyRule<T>& r : rules)
    if (r.name == key) return &r;
  return nullptr;
}

// A JSON object's members whose values are numbers, strings or booleans, in order; a key given
// twice is refused, and so is a string for a key of `numbers`.
std::vector<std::pair<std::string, std::string>> pairs_of(const JsonValue& json, Numbers numbers) {
  if (json.kind != JsonValue::Kind::object) throw UsageError("a JSON description must be one object {\"key\": value, ...}");
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& [key, value] : json.members) {
    if (std::any_of(out.begin(), out.end(), [&](const auto& p) { return p.first == key; }))
      throw UsageError("the field " + quoted_input(key) + " is given twice");
    if (value.kind == JsonValue::Kind::array || value.kind == JsonValue::Kind::object || value.kind == JsonValue::Kind::null)
      throw UsageError("the value of " + quoted_input(key) + " must be a number, a string or true/false");
    if (value.kind == JsonValue::Kind::string && std::find(numbers.begin(), numbers.end(), key) != numbers.end())
      throw UsageError("the value of " + quoted_input(key) + " is the string " + quoted_input(value.text) +
                       ": a number belongs there, written without quotes");
    out.emplace_back(key, value.text);
  }
  return out;
}

// "k=v,k=v", key=value lines, or a JSON object {"k": v, ...}: the pairs in order.
std::vector<std::pair<std::string, std::string>> pairs_of(const std::string& text, Numbers numbers) {
  std::string body = trim(text);
  std::vector<std::pair<std::string, std::string>> out;
  if (!body.empty() && (body.front() == '{' || body.front() == '[')) return pairs_of(parse_json_of(body, "the description"), numbers);
  std::string item;
  std::stringstream in(body);
  while (std::getline(in, item, body.find('\n') != std::string::npos && body.find(',') == std::string::npos ? '\n' : ',')) {
    item = trim(item);
    if (item.empty() || item[0] == '#') continue;
    const auto eq = item.find('=');
    if (eq == std::string::npos) throw UsageError("expected key=value, got " + quoted_input(item));
    const auto unquote = [](std::string s) {
      s = trim(s);
      if (s.size() >= 2 && s.front() == '"' && s.back() == '"') s = s.substr(1, s.size() - 2);
      return s;
    };
    std::string key = unquote(item.substr(0, eq));
    if (std::any_of(out.begin(), out.end(), [&](const auto& p) { return p.first == key; }))
      throw UsageError("the key " + quoted_input(key) + " is given twice");
    out.emplace_back(std::move(key), unquote(item.substr(eq + 1)));
  }
  return out;
}

// The contents of the description file `text` names: "" when it names no file (a preset, or
// key=value pairs); UsageError for a directory or other non-file, one that cannot be read, is
// empty or larger than 16 MiB, and for a path (with a '/' or ending in .json) that does not exist.
std::string read_if_file(const std::string& text, const char* what) {
  namespace fs = std::filesystem;
  if (text.empty() || text.find('=') != std::string::npos || text.front() == '{') return "";
  std::error_code error;
  const fs::file_status status = fs::status(text, error);
  const bool path_like = text.find('/') != std::string::npos || text.ends_with(".json");
  if (!fs::exists(status)) {
    if (path_like) throw UsageError(std::string(what) + " file " + quoted_input(text) + " does not exist");
    return "";
  }
  if (!fs::is_regular_file(status))
    throw UsageError(std::string(what) + " " + quoted_input(text) + " is not a regular file");
  const auto size = fs::file_size(text, error);
  if (error || size > (std::uintmax_t{16} << 20))
    throw UsageError(std::string(what) + " file " + quoted_input(text) + " is larger than 16 MiB or cannot be sized");
  std::ifstream in(text, std::ios::binary);
  std::stringstream all;
  if (!in || !(all << in.rdbuf()) || trim(all.str()).empty())
    throw UsageError(std::string(what) + " file " + quoted_input(text) + " cannot be read or is empty");
  return all.str();
}


double number(const std::string& key, const std::string& value) {
  char* end = nullptr;
  const double x = std::strtod(value.c_str(), &end);
  if (!plain_decimal(value, true) || *end != '\0' || !std::isfinite(x) || x < 0)
    throw UsageError(key + "=" + quoted_input(value) + " is not a number >= 0 in decimal");
  return x;
}

std::int64_t whole(const std::string& key, const std::string& value) {
  const double x = number(key, value);
  if (x != std::floor(x)) throw UsageError(key + "=" + quoted_input(value) + " is not a whole number");
  if (x > 1e15) throw UsageError(key + "=" + quoted_input(value) + " is more than 10^15");
  return static_cast<std::int64_t>(x);
}

// A count held in an int (layers, heads, experts, ...): never narrowed silently.
int whole_int(const std::string& key, const std::string& value) {
  return int_count(whole(key, value), key + "=" + quoted_input(value));
}

// A size whose 0 stands for its default inside PlanModel: given, it must be a size.
template <typename T> T given_size(const std::string& key, const std::string& value, T x, const char* default_text) {
  if (x < 1) throw UsageError(key + "=" + quoted_input(value) + ": expected at least 1 (left out: " + default_text + ")");
  return x;
}

bool yes_no(const std::string& key, const std::string& value) {
  if (value == "true" || value == "on" || value == "1" || value == "yes") return true;
  if (value == "false" || value == "off" || value == "0" || value == "no") return false;
  throw UsageError(key + "=" + quoted_input(value) + ": expected on or off (true or false, yes or no, 1 or 0)");
}

PlanModel gpt(const char* name, int layers, std::int64_t hidden, int heads) {
  return {.name = name, .layers = layers, .hidden = hidden, .heads = heads, .vocabulary = 51200, .sequence = 2048};
}

PlanModel llama(const char* name, int layers, std::int64_t hidden, int heads, int kv, std::int64_t ffn) {
  return {.name = name, .layers = layers, .hidden = hidden, .heads = heads, .kv_heads = kv, .ffn_hidden = ffn,
          .gated_mlp = true, .vocabulary = 128256, .sequence = 8192, .tied = false, .bias = false, .rms_norm = true,
          .learned_positions = false, .dropout = false};
}

}  // namespace

void PlanModel::validate() const {
  if (layers <= 0 || hidden <= 0 || heads <= 0 || vocabulary <= 0 || sequence <= 0)
    throw UsageError("model " + name + ": layers, hidden, heads, vocab and sequence must all be given and above 0");
  if (hidden % heads != 0)
    throw UsageError("model " + name + ": " + std::to_string(heads) + " heads do not divide hidden " + std::to_string(hidden));
  if (experts > 0 && (top_k < 1 || top_k > experts || !(capacity_factor > 0) || moe_every < 1 || moe_every > layers))
    throw UsageError("model " + name + ": experts need 1 <= top_k <= experts, capacity_factor > 0 and 1 <= moe_every <= layers");
  if (kv_heads < 0 || heads % kv() != 0)
    throw UsageError("model " + name + ": kv_heads " + std::to_string(kv_heads) + " does not divide the " +
                     std::to_string(heads) + " heads");
  // Counted exactly in 64 bits (a GPU's share of them too): 2^62 leaves room for every sum.
  constexpr double kMostParameters = 4611686018427387904.0;  // 2^62
  if (const double count = plan_parameters_estimate(*this); !(count <= kMostParameters)) {
    char text[160];
    std::snprintf(text, sizeof text, ": %.3g parameters, more than the %.3g (2^62) parity counts", count, kMostParameters);
    throw UsageError("model " + name + text);
  }
}

const std::vector<PlanModel>& plan_model_presets() {
  static const std::vector<PlanModel> presets = [] {
    std::vector<PlanModel> p = {
        // Narayanan et al. 2021, Table 1 (vocabulary 51,200, sequence 2048).
        gpt("gpt3-1.7b", 24, 2304, 24), gpt("gpt3-3.6b", 30, 3072, 32), gpt("gpt3-7.5b", 36, 4096, 32),
        gpt("gpt3-18b", 40, 6144, 48), gpt("gpt3-39b", 48, 8192, 64), gpt("gpt3-76b", 60, 10240, 80),
        gpt("gpt3-145b", 80, 12288, 96), gpt("gpt3-310b", 96, 16384, 128), gpt("gpt3-530b", 105, 20480, 128),
        gpt("gpt3-1t", 128, 25600, 160),
        // Llama 3 (Grattafiori et al. 2024, Table 3): GQA with 8 key/value heads, SwiGLU, RMSNorm, rotary.
        llama("llama3-8b", 32, 4096, 32, 8, 14336), llama("llama3-70b", 80, 8192, 64, 8, 28672),
        llama("llama3-405b", 126, 16384, 128, 8, 53248)};
    // Mixtral 8x7B (Jiang et al. 2024): Llama-style layers whose MLP is 8 experts, top 2.
    PlanModel mixtral = llama("mixtral-8x7b", 32, 4096, 32, 8, 14336);
    mixtral.vocabulary = 32000;
    mixtral.sequence = 4096;
    mixtral.experts = 8;
    mixtral.top_k = 2;
    p.push_back(mixtral);
    PlanModel g175 = gpt("gpt3-175b", 96, 12288, 96);  // Brown et al. 2020 (GPT-2's vocabulary)
    g175.vocabulary = 50257;
    p.push_back(g175);
    return p;
  }();
  return presets;
}

namespace {
// Runs `parse`, naming what was given in the first words of any refusal that does not yet
// ("cluster 'c.json': memory_GB='x' is not a number >= 0").
template <typename F> auto naming_input(const char* what, const std::string& given, F&& parse) {
  try {
    return parse();
  } catch (const UsageError& e) {
    const std::string message = e.what();
    if (message.rfind(what, 0) == 0 || message.rfind(std::string("unknown ") + what, 0) == 0) throw;
    throw UsageError(std::string(what) + " " + quoted_input(given, 200) + ": " + message);
  }
}
PlanModel parse_model(const std::string& given);
PlanCluster parse_cluster(const std::string& given);
}  // namespace

PlanModel parse_plan_model(const std::string& given) {
  return naming_input("model", given, [&] { return parse_model(given); });
}

PlanCluster parse_plan_cluster(const std::string& given) {
  return naming_input("cluster", given, [&] { return parse_cluster(given); });
}

namespace {
using Text = const std::string&;
// In the order the unknown-key message names them.
const KeyRule<PlanModel> kModelKeys[] = {
    {"layers", true, [](PlanModel& m, Text k, Text v) { m.layers = whole_int(k, v); }},
    {"hidden", true, [](PlanModel& m, Text k, Text v) { m.hidden = whole(k, v); }},
    {"heads", true, [](PlanModel& m, Text k, Text v) { m.heads = whole_int(k, v); }},
    {"kv_heads", true, [](PlanModel& m, Text k, Text v) { m.kv_heads = given_size(k, v, whole_int(k, v), "the heads"); }},
    {"ffn_hidden", true, [](PlanModel& m, Text k, Text v) { m.ffn_hidden = given_size(k, v, whole(k, v), "4 x hidden"); }},
    {"gated_mlp", false, [](PlanModel& m, Text k, Text v) { m.gated_mlp = yes_no(k, v); }},
    {"vocab", true, [](PlanModel& m, Text k, Text v) { m.vocabulary = whole(k, v); }},
    {"sequence", true, [](PlanModel& m, Text k, Text v) { m.sequence = whole(k, v); }},
    {"tied", false, [](PlanModel& m, Text k, Text v) { m.tied = yes_no(k, v); }},
    {"bias", false, [](PlanModel& m, Text k, Text v) { m.bias = yes_no(k, v); }},
    {"norm", false,
     [](PlanModel& m, Text, Text v) {
       if (v != "layernorm" && v != "rmsnorm") throw UsageError("norm=" + quoted_input(v) + ": expected layernorm or rmsnorm");
       m.rms_norm = v == "rmsnorm";
     }},
    {"positions", false,
     [](PlanModel& m, Text, Text v) {
       if (v != "learned" && v != "rotary") throw UsageError("positions=" + quoted_input(v) + ": expected learned or rotary");
       m.learned_positions = v == "learned";
     }},
    {"dropout", false, [](PlanModel& m, Text k, Text v) { m.dropout = yes_no(k, v); }},
    {"experts", true, [](PlanModel& m, Text k, Text v) { m.experts = whole_int(k, v); }},
    {"top_k", true, [](PlanModel& m, Text k, Text v) { m.top_k = whole_int(k, v); }},
    {"capacity_factor", true, [](PlanModel& m, Text k, Text v) { m.capacity_factor = number(k, v); }},
    {"moe_every", true, [](PlanModel& m, Text k, Text v) { m.moe_every = whole_int(k, v); }}};
const std::vector<std::string_view> kModelNumbers = numbers_of(kModelKeys);

PlanModel parse_model(const std::string& given) {
  const std::string file = read_if_file(given, "model");
  const std::string text = file.empty() ? given : file;
  PlanModel m;
  std::vector<std::pair<std::string, std::string>> pairs;
  const std::string first = trim(text.substr(0, text.find(',')));
  if (!first.empty() && first.find('=') == std::string::npos && first.front() != '{') {
    const auto& presets = plan_model_presets();
    const auto it = std::find_if(presets.begin(), presets.end(), [&](const PlanModel& p) { return p.name == first; });
    if (it == presets.end()) {
      if (!file.empty())
        throw UsageError("model " + quoted_input(given, 200) + ": not a JSON object, a preset or key=value pairs (it begins " +
                         quoted_input(first, 40) + ")");
      std::string known;
      for (const auto& p : presets) known += (known.empty() ? "" : ", ") + p.name;
      throw UsageError("unknown model " + quoted_input(first) + " (presets: " + known + "; or key=value pairs)");
    }
    m = *it;
    const auto comma = text.find(',');
    if (comma != std::string::npos) pairs = pairs_of(text.substr(comma + 1), kModelNumbers);
  } else {
    m.name = file.empty() ? "custom" : given;
    try {
      pairs = pairs_of(text, kModelNumbers);
    } catch (const UsageError& e) {
      if (file.empty()) throw;
      throw UsageError("model " + quoted_input(given, 200) + ": " + e.what());
    }
  }
  for (const auto& [key, value] : pairs) {
    const KeyRule<PlanModel>* rule = rule_of(kModelKeys, key);
    if (rule == nullptr) {
      std::string known;
      for (const auto& r : kModelKeys) known += (known.empty() ? "" : ", ") + std::string(r.name);
      throw UsageError("unknown model key " + quoted_input(key) + " (known: " + known + ")");
    }
    rule->set(m, key, value);
  }
  m.validate();
  return m;
}
}  // namespace


// ---- clusters ------------------------------------------------------------------------------------

namespace {
constexpr const char* kPeakTypes[] = {"bf16", "fp16", "fp8", "tf32", "fp32", "fp64"};
bool known_peak_type(const std::string& type) {
  return std::find_if(std::begin(kPeakTypes), std::end(kPeakTypes), [&](const char* t) { return type == t; }) !=
         std::end(kPeakTypes);
}
// A preset with its fused attention's efficiency.
PlanCluster with_attention(PlanCluster c, double efficiency) {
  c.attention_efficiency = efficiency;
  return c;
}

// A preset with its other types' dense peaks beside its bf16 one.
PlanCluster with_peaks(PlanCluster c, std::map<std::string, double> others) {
  c.peak_by_type = std::move(others);
  c.peak_by_type[c.peak_type] = c.peak_TFLOPs;
  return c;
}
}  // namespace

PlanCluster with_precision(PlanCluster c, const std::string& type) {
  if (!known_peak_type(type))
    throw UsageError("--precision " + quoted_input(type) + ": expected bf16, fp16, fp8, tf32, fp32 or fp64");
  if (type == c.peak_type) return c;
  if (!c.rates.gemm.empty())
    throw UsageError("cluster " + c.name + ": its products were measured in " + c.peak_type + " (parity bench calibrate), not " +
                     type + "; calibrate in that type, or leave out --precision");
  const auto it = c.peak_by_type.find(type);
  if (it == c.peak_by_type.end()) {
    std::string known;
    for (const auto& [t, _] : c.peak_by_type) known += (known.empty() ? "" : ", ") + t;
    throw UsageError("cluster " + c.name + " has no dense " + type + " peak (it has: " + known + ")");
  }
  c.peak_type = type;
  c.peak_TFLOPs = it->second;
  return c;
}

const std::vector<PlanCluster>& plan_cluster_presets() {
  static const std::vector<PlanCluster> presets = {
      // NVIDIA DGX A100 (A100 SXM4 80GB datasheet: 312 TFLOP/s dense BF16, 2,039 GB/s HBM2e,
      // 108 SMs; NVLink 3 600 GB/s per GPU both ways through NVSwitch; 8 ConnectX-6 HDR
      // 200 Gb/s, one per GPU). Achieved fractions: large BF16 GEMMs about 0.8 of the peak and
      // element-wise kernels about 0.8 of HBM in cuBLAS and NVIDIA's published benchmarks; a
      // ring's bus bandwidth about 0.8 of the link (nccl-tests on DGX A100).
      // Dense peaks by type (the same datasheet, without sparsity): FP16 312, TF32 156, FP64
      // Tensor Core 19.5 TFLOP/s; no FP8.
      // Fused attention: FlashAttention-2's forward and backward at head size 128 on long causal
      // sequences reach about 0.6 of the peak (Dao 2023, its benchmarks on A100 80GB).
      with_attention(with_peaks({"a100-80gb-dgx", "A100 SXM4 80GB", 312, 0.8, 108, 80, 2039, 0.8, 8, {300, 3}, {25, 5}, 0.8},
                                {{"fp16", 312}, {"tf32", 156}, {"fp64", 19.5}}),
                     0.6),
      // NVIDIA DGX H100 (H100 SXM5 datasheet: 989 TFLOP/s dense BF16, 3,350 GB/s HBM3, 132 SMs;
      // NVLink 4 900 GB/s per GPU both ways; 8 ConnectX-7 NDR 400 Gb/s, one per GPU). Large
      // BF16 GEMMs reach about 0.7 of the peak (cuBLASLt; 0.68-0.72 measured here on one H100,
      // docs/results/h100).
      // Dense peaks by type (the datasheet's figures with sparsity halved): FP16 989, FP8 1,979,
      // TF32 495, FP64 Tensor Core 67 TFLOP/s.
      // Fused attention: FlashAttention-3's forward reaches about 0.6 of the BF16 peak at head
      // size 128 and its backward about 0.45 (Shah et al. 2024, their H100 SXM5 benchmarks),
      // about 0.5 for the pair weighted by their work (backward 2.5 x forward).
      with_attention(with_peaks({"h100-sxm-dgx", "H100 SXM5 80GB", 989, 0.7, 132, 80, 3350, 0.8, 8, {450, 3}, {50, 5}, 0.8},
                                {{"fp16", 989}, {"fp8", 1979}, {"tf32", 495}, {"fp64", 67}}),
                     0.5),
  };
  return presets;
}

namespace {
const KeyRule<PlanCluster> kClusterKeys[] = {
    {"gpu", false, [](PlanCluster& c, Text, Text v) { c.gpu = v; }, true},
    {"note", false, [](PlanCluster& c, Text, Text v) { c.note = v; }},
    {"dtype", false, [](PlanCluster& c, Text, Text v) { c.rates.dtype = v; }},
    {"peak_TFLOPs", true, [](PlanCluster& c, Text k, Text v) { c.peak_TFLOPs = number(k, v); }, true},
    {"gemm_efficiency", true, [](PlanCluster& c, Text k, Text v) { c.gemm_efficiency = number(k, v); }, true},
    {"multiprocessors", true, [](PlanCluster& c, Text k, Text v) { c.multiprocessors = whole_int(k, v); }, true},
    {"memory_GB", true, [](PlanCluster& c, Text k, Text v) { c.memory_GB = number(k, v); }, true},
    {"memory_GBps", true, [](PlanCluster& c, Text k, Text v) { c.memory_GBps = number(k, v); }, true},
    {"elementwise_efficiency", true, [](PlanCluster& c, Text k, Text v) { c.elementwise_efficiency = number(k, v); }, true},
    {"gpus_per_node", true, [](PlanCluster& c, Text k, Text v) { c.gpus_per_node = whole_int(k, v); }, true},
    {"node_GBps", true, [](PlanCluster& c, Text k, Text v) { c.node.bandwidth_GBps = number(k, v); }, true},
    {"node_latency_us", true, [](PlanCluster& c, Text k, Text v) { c.node.latency_us = number(k, v); }, true},
    {"network_GBps", true, [](PlanCluster& c, Text k, Text v) { c.network.bandwidth_GBps = number(k, v); }, true},
    {"network_latency_us", true, [](PlanCluster& c, Text k, Text v) { c.network.latency_us = number(k, v); }, true},
    {"collective_efficiency", true, [](PlanCluster& c, Text k, Text v) { c.collective_efficiency = number(k, v); }, true},
    {"attention_efficiency", true, [](PlanCluster& c, Text k, Text v) { c.attention_efficiency = number(k, v); }},
    {"runtime_reserve_GB", true, [](PlanCluster& c, Text k, Text v) { c.runtime_reserve_GB = number(k, v); }}};
const std::vector<std::string_view> kClusterNumbers = numbers_of(kClusterKeys);

PlanCluster parse_cluster(const std::string& given) {
  const auto& presets = plan_cluster_presets();
  const auto it = std::find_if(presets.begin(), presets.end(), [&](const PlanCluster& c) { return c.name == given; });
  if (it != presets.end()) return *it;
  const std::string file = read_if_file(given, "cluster");
  if (file.empty()) {
    std::string known;
    for (const auto& p : presets) known += (known.empty() ? "" : ", ") + p.name;
    throw UsageError("unknown cluster " + quoted_input(given) + " (presets: " + known + "; or a JSON file)");
  }
  PlanCluster c;
  c.name = given;
  std::map<std::string, bool> seen;
  // A calibrated cluster (parity bench calibrate) adds the measured products and ops as arrays:
  // "gemm_rates": [[m, n, k, seconds], ...], "op_rates": [["op", elements, seconds], ...],
  // "stream_rates": [[elements, seconds], ...] (the add over growing buffers).
  std::vector<std::pair<std::string, std::string>> scalars;
  if (trim(file).front() != '{' && trim(file).front() != '[') {
    scalars = pairs_of(file, kClusterNumbers);
  } else {
    JsonValue json = parse_json_of(file, "cluster " + quoted_input(given, 200));
    const auto field = [&](const JsonValue& row, std::size_t i, const std::string& key) -> const JsonValue& {
      if (row.kind != JsonValue::Kind::array || row.items.size() <= i)
        throw UsageError("cluster " + quoted_input(given, 200) + ": every row of " + key + " must be an array of " +
                         (key == "gemm_rates" ? "[m, n, k, seconds]"
                          : key == "op_rates" ? "[\"op\", elements, seconds]"
                          : key == "stream_rates" ? "[elements, seconds]" : "[bytes, efficiency]"));
      return row.items[i];
    };
    const auto count = [&](const JsonValue& v, const std::string& key) {
      if (v.kind != JsonValue::Kind::number || !(v.number > 0))
        throw UsageError("cluster " + quoted_input(given, 200) + ": " + key + " holds " + quoted_input(v.text) + " where a number above 0 belongs");
      return v.number;
    };
    std::erase_if(json.members, [&](const std::pair<std::string, JsonValue>& member) {
      const auto& [key, value] = member;
      if (key == "gemm_rates") {
        if (value.kind != JsonValue::Kind::array) throw UsageError("cluster " + quoted_input(given, 200) + ": gemm_rates must be an array");
        for (const JsonValue& row : value.items)
          c.rates.gemm.push_back({static_cast<std::int64_t>(count(field(row, 0, key), key)),
                                  static_cast<std::int64_t>(count(field(row, 1, key), key)),
                                  static_cast<std::int64_t>(count(field(row, 2, key), key)), count(field(row, 3, key), key)});
        return true;
      }
      if (key == "collective_rates") {
        // [[bytes, efficiency], ...] of the all-reduce, or an object of such arrays by collective.
        const auto rows_of = [&](const JsonValue& rows, const std::string& collective) {
          if (rows.kind != JsonValue::Kind::array)
            throw UsageError("cluster " + quoted_input(given, 200) + ": collective_rates" +
                             (collective == "all_reduce" && value.kind == JsonValue::Kind::array ? "" : "." + collective) +
                             " must be an array");
          auto& points = c.rates.collective_efficiency[collective];
          for (const JsonValue& row : rows.items) {
            const double bytes = count(field(row, 0, key), key), efficiency = count(field(row, 1, key), key);
            if (efficiency > 1 || (!points.empty() && bytes <= points.back().first))
              throw UsageError("cluster " + quoted_input(given, 200) +
                               ": collective_rates holds [bytes, efficiency] rows by growing size, efficiencies at most 1");
            points.emplace_back(bytes, efficiency);
          }
        };
        if (value.kind == JsonValue::Kind::object) {
          for (const auto& [collective, rows] : value.members) {
            // "all_reduce", or with its level "node:all_reduce", "network:all_reduce".
            const std::size_t colon = collective.find(':');
            const std::string level = colon == std::string::npos ? "" : collective.substr(0, colon);
            const std::string kind = colon == std::string::npos ? collective : collective.substr(colon + 1);
            if (std::find_if(std::begin(kCalibratedCollectives), std::end(kCalibratedCollectives),
                             [&](const char* known) { return kind == known; }) == std::end(kCalibratedCollectives) ||
                (colon != std::string::npos && level != "node" && level != "network"))
              throw UsageError("cluster " + quoted_input(given, 200) + ": collective_rates names an unknown collective " +
                               quoted_input(collective) +
                               " (known: all_reduce, all_gather, reduce_scatter, all_to_all, each also as node:NAME or network:NAME)");
            rows_of(rows, collective);
          }
        } else {
          rows_of(value, "all_reduce");
        }
        return true;
      }
      if (key == "peak_TFLOPs_by_type") {
        if (value.kind != JsonValue::Kind::object)
          throw UsageError("cluster " + quoted_input(given, 200) + ": peak_TFLOPs_by_type must be an object of type: TFLOP/s");
        for (const auto& [type, peak] : value.members) {
          if (!known_peak_type(type))
            throw UsageError("cluster " + quoted_input(given, 200) + ": peak_TFLOPs_by_type names an unknown type " +
                             quoted_input(type) + " (known: bf16, fp16, fp8, tf32, fp32, fp64)");
          c.peak_by_type[type] = count(peak, key);
        }
        return true;
      }
      if (key == "stream_rates") {
        if (value.kind != JsonValue::Kind::array) throw UsageError("cluster " + quoted_input(given, 200) + ": stream_rates must be an array");
        for (const JsonValue& row : value.items)
          c.rates.stream.push_back({static_cast<std::int64_t>(count(field(row, 0, key), key)), count(field(row, 1, key), key)});
        return true;
      }
      if (key == "op_rates") {
        if (value.kind != JsonValue::Kind::array) throw UsageError("cluster " + quoted_input(given, 200) + ": op_rates must be an array");
        for (const JsonValue& row : value.items)
          c.rates.ops.push_back({field(row, 0, key).text, static_cast<std::int64_t>(count(field(row, 1, key), key)),
                                 count(field(row, 2, key), key)});
        return true;
      }
      return false;
    });
    if (!c.rates.gemm.empty() || !c.rates.ops.empty()) {
      try {
        c.rates.validate();
      } catch (const UsageError& e) {
        throw UsageError("cluster " + quoted_input(given, 200) + ": " + e.what() +
                         " (measure it again with parity bench calibrate)");
      }
    }
    scalars = pairs_of(json, kClusterNumbers);
  }
  for (const auto& [key, value] : scalars) {
    seen[key] = true;
    const KeyRule<PlanCluster>* rule = rule_of(kClusterKeys, key);
    if (rule == nullptr) throw UsageError("cluster " + quoted_input(given, 200) + ": unknown field " + quoted_input(key));
    rule->set(c, key, value);
  }
  for (const auto& r : kClusterKeys)
    if (r.required && !seen.count(std::string(r.name)))
      throw UsageError("cluster " + quoted_input(given, 200) + ": missing field " + std::string(r.name));
  // An efficiency a millionth or less is no machine's (a step priced with 1e-300 takes 1e299 s).
  const auto fraction = [](double x) { return x >= 1e-6 && x <= 1; };
  if (c.peak_TFLOPs <= 0 || !fraction(c.gemm_efficiency) || c.multiprocessors <= 0 || c.memory_GB <= 0 ||
      c.memory_GBps <= 0 || !fraction(c.elementwise_efficiency) || c.gpus_per_node <= 0 ||
      c.node.bandwidth_GBps <= 0 || c.network.bandwidth_GBps <= 0 || !fraction(c.collective_efficiency) ||
      (seen.count("attention_efficiency") && !fraction(c.attention_efficiency)))
    throw UsageError("cluster " + quoted_input(given, 200) + ": rates and sizes must be above 0, efficiencies between 1e-6 and 1");
  // Figures a millionth of a unit or less (a TFLOP/s, a GB, a GB/s), or past a billion units, are
  // no GPU's or network's: a step priced with them overflows or rounds to nothing.
  const auto plausible = [](double x) { return x >= 1e-6 && x <= 1e9; };
  if (!plausible(c.peak_TFLOPs) || !plausible(c.memory_GB) || !plausible(c.memory_GBps) ||
      !plausible(c.node.bandwidth_GBps) || !plausible(c.network.bandwidth_GBps) || c.node.latency_us > 1e9 ||
      c.network.latency_us > 1e9)
    throw UsageError("cluster " + quoted_input(given, 200) +
                     ": peak_TFLOPs, memory_GB, memory_GBps and the GBps figures must be between 1e-6 and 1e9, latencies "
                     "at most 1e9 us");
  if (c.memory_GB <= c.runtime_reserve_GB)
    throw UsageError("cluster " + quoted_input(given, 200) + ": memory_GB=" + (std::ostringstream() << c.memory_GB).str() +
                     " leaves nothing beside the " + (std::ostringstream() << c.runtime_reserve_GB).str() +
                     " GB a GPU keeps for its runtime (CUDA context, NCCL buffers; runtime_reserve_GB)");
  for (const auto& [type, peak] : c.peak_by_type)
    if (!plausible(peak))
      throw UsageError("cluster " + quoted_input(given, 200) + ": peak_TFLOPs_by_type's " + type + " must be between 1e-6 and 1e9");
  // A node holds no more GPUs than a job may have (--gpus).
  if (c.gpus_per_node > kPlanMostGpus)
    throw UsageError("cluster " + quoted_input(given, 200) + ": gpus_per_node=" + std::to_string(c.gpus_per_node) +
                     " is more than " + std::to_string(kPlanMostGpus));
  // peak_TFLOPs is bf16's, or a calibrated cluster's measured type's.
  if (c.rates.dtype == "float32") c.peak_type = "fp32";
  if (c.rates.dtype == "float64") c.peak_type = "fp64";
  const auto given_peak = c.peak_by_type.find(c.peak_type);
  if (given_peak != c.peak_by_type.end() && given_peak->second != c.peak_TFLOPs)
    throw UsageError("cluster " + quoted_input(given, 200) + ": peak_TFLOPs_by_type's " + c.peak_type + " (" +
                     std::to_string(given_peak->second) + ") is not peak_TFLOPs (" + std::to_string(c.peak_TFLOPs) + ")");
  c.peak_by_type[c.peak_type] = c.peak_TFLOPs;
  return c;
}
}  // namespace


Recompute parse_recompute(const std::string& text, const std::string& given_as) {
  if (text == "none") return Recompute::none;
  if (text == "selective") return Recompute::selective;
  if (text == "full") return Recompute::full;
  throw UsageError(given_as + "recompute=" + quoted_input(text) + ": expected none, selective or full");
}

PlanFixed parse_plan_fixed(const std::string& text) {
  PlanFixed f;
  std::string schedule;         // as given
  std::optional<int> chunks;    // the v the schedule holds (1f1b, zb-h1, zb-h2: 1; zb-v: 2)
  const auto pairs = [&] {
    try {
      return pairs_of(text, kFixNumbers);
    } catch (const UsageError& e) {
      throw UsageError(std::string("--fix: ") + e.what());
    }
  }();
  for (const auto& [key, value] : pairs) {
    const auto positive = [&] {
      const std::int64_t x = whole(key, value);
      if (x < 1 || x > (1 << 20)) throw UsageError("--fix " + key + "=" + quoted_input(value) + ": expected 1 to 1048576");
      return static_cast<int>(x);
    };
    if (key == "tp") f.tp = positive();
    else if (key == "pp") f.pp = positive();
    else if (key == "dp") f.dp = positive();
    else if (key == "ep") f.ep = positive();
    else if (key == "cp") f.cp = positive();
    else if (key == "v") f.v = positive();
    else if (key == "micro_batch") f.micro_batch = positive();
    else if (key == "zero") {
      const std::int64_t z = whole(key, value);
      if (z > 3) throw UsageError("--fix zero=" + quoted_input(value) + ": expected 0 to 3");
      f.zero = static_cast<int>(z);
    } else if (key == "sp") f.sp = yes_no("--fix sp", value);
    else if (key == "attention") {
      if (value != "flash" && value != "unfused") throw UsageError("--fix attention=" + quoted_input(value) + ": expected flash or unfused");
      f.flash = value == "flash";
    }
    else if (key == "overlap") f.overlap = yes_no("--fix overlap", value);
    else if (key == "recompute") f.recompute = parse_recompute(value, "--fix ");
    else if (key == "schedule") {
      if (value == "1f1b" || value == "interleaved") f.schedule = PlanSchedule::one_f_one_b;
      else if (value == "zb-h1") f.schedule = PlanSchedule::zb_h1;
      else if (value == "zb-h2") f.schedule = PlanSchedule::zb_h2;
      else if (value == "zb-v") f.schedule = PlanSchedule::zb_v;
      else throw UsageError("--fix schedule=" + quoted_input(value) + ": expected 1f1b, interleaved, zb-h1, zb-h2 or zb-v");
      schedule = value;
      f.interleaved = value == "interleaved";
      if (value == "1f1b" || value == "zb-h1" || value == "zb-h2") chunks = 1;
      if (value == "zb-v") chunks = 2;
    } else {
      throw UsageError("--fix: unknown key " + quoted_input(key) +
                       " (known: tp, pp, dp, ep, cp, v, schedule, micro_batch, zero, recompute, sp, attention, overlap)");
    }
  }
  // The schedule and v together, whichever came first.
  if (chunks && f.v && *f.v != *chunks)
    throw UsageError("--fix schedule=" + schedule + " holds " + std::to_string(*chunks) + " chunk" + (*chunks == 1 ? "" : "s") +
                     " a rank, not v=" + std::to_string(*f.v));
  if (chunks) f.v = chunks;
  if (f.interleaved && f.v && *f.v == 1) throw UsageError("--fix schedule=interleaved needs v > 1 (at v=1 it is 1f1b)");
  if (f.interleaved && f.pp && *f.pp == 1) throw UsageError("--fix schedule=interleaved needs pp > 1");
  return f;
}

}  // namespace parity::theory
