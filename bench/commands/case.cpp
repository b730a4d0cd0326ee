// parity case export / parity case compare: conformance for other frameworks (docs/framework-
// conformance.md). Export writes a self-contained case (case_file.hpp). A framework trains it
// and writes a results file; compare trains the same case on one device in float64, sizes the
// bounds from tolerance.hpp for the layout and precision, checks every recorded tensor and names
// the first divergence, with a diagnosis where the pattern fits.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>

#include "bench/commands/case_file.hpp"
#include "bench/commands/command.hpp"
#include "bench/commands/presets.hpp"
#include "correctness/cases/compare.hpp"
#include "reference/core/error.hpp"
#include "reference/core/tolerance.hpp"
#include "reference/kernels/buffer_kernels.hpp"
#include "reference/model/model.hpp"
#include "reference/model/optimizer.hpp"
#include "reference/theory/calibration.hpp"

namespace parity::cli {
namespace {

const char* const kCaseHelp =
    "Conformance for other frameworks (docs/framework-conformance.md): export a case, train it elsewhere, compare the "
    "results with parity's single-device float64 training of it";

struct ExportOptions {
  std::string model = "tiny", out;
  CaseSpec spec;  // its steps, batch, precision and layout from the options; the rest made here
  bool force = false;
};

int case_export(const ExportOptions& o) {
  write_case(make_case_spec(o.spec, o.model), o.model, o.out, o.force);
  return kExitOk;
}

// ---- the single-device reference ----

struct Reference {
  std::vector<double> losses;
  std::map<std::string, std::vector<double>> gradients, parameters, exp_avg, exp_avg_sq;
};

// The case's GPT in float64 with its initial parameters, and parity's name -> GPT-2 name.
std::unique_ptr<model::Model> initial_model(const Case& c, std::map<std::string, std::string>& theirs) {
  auto m = model::build_gpt(c.spec.config);
  for (const auto& [ours, name] : case_names(c.spec.config)) theirs[ours] = name;
  for (model::Parameter* p : m->parameters()) {
    const std::vector<double>& v = c.init.at(theirs.at(p->name));
    for (std::size_t i = 0; i < v.size(); ++i) p->value.set(static_cast<std::int64_t>(i), v[i]);
  }
  return m;
}

// Rows [first, first + rows) of a step's batch, its loss their tokens' mean.
model::Batch rows_of(const Case& c, int step, std::int64_t first, std::int64_t rows) {
  const auto& [tokens, targets] = c.batches[static_cast<std::size_t>(step)];
  const std::int64_t t = c.spec.config.sequence;
  model::Batch b;
  b.inputs = tokens.segment("tokens", first * t, {rows, t});
  b.targets = targets.segment("targets", first * t, {rows, t});
  b.normalizer = static_cast<double>(rows * t);
  return b;
}

// torch.nn.utils.clip_grad_norm_: every gradient times min(1, max / (||g|| + 1e-6)), the norm
// over all of them.
void clip_gradients(model::Model& m, double max_norm) {
  double squares = 0;
  for (model::Parameter* p : m.parameters())
    for (double g : p->gradient().to_vector()) squares += g * g;
  const double coefficient = std::min(1.0, max_norm / (std::sqrt(squares) + 1e-6));
  for (model::Parameter* p : m.parameters()) scale_buffer(p->gradient().view(), coefficient);
}

// The case trained on one device. `row_bias_factor` != 1 simulates a known bug: the row-parallel
// biases (c_proj) counted that many times in the forward (added on every tensor-parallel rank
// before the all-reduce), their gradient the bias's own.
Reference train_reference(const Case& c, double row_bias_factor = 1) {
  const CaseSpec& s = c.spec;
  std::map<std::string, std::string> theirs;
  const auto m = initial_model(c, theirs);
  std::vector<model::Parameter*> row_biases;
  for (model::Parameter* p : m->parameters())
    if (theirs.at(p->name).ends_with("c_proj.bias")) row_biases.push_back(p);
  model::AdamW adamw(s.adamw, DataType::float64);
  Reference r;
  for (int step = 0; step < s.steps; ++step) {
    m->zero_grad();
    for (model::Parameter* p : row_biases) scale_buffer(p->value.view(), row_bias_factor);
    r.losses.push_back(m->forward_backward(rows_of(c, step, 0, s.global_batch), {static_cast<std::uint64_t>(step), 0, true}));
    for (model::Parameter* p : row_biases) scale_buffer(p->value.view(), 1 / row_bias_factor);
    if (s.clip > 0) clip_gradients(*m, s.clip);
    if (step == 0)
      for (model::Parameter* p : m->parameters()) r.gradients[theirs.at(p->name)] = p->gradient().to_vector();
    adamw.step(m->parameters());
  }
  for (model::Parameter* p : m->parameters()) {
    const std::string& name = theirs.at(p->name);
    r.parameters[name] = p->value.to_vector();
    r.exp_avg[name] = adamw.state_of(p->name).at(0).to_vector();
    r.exp_avg_sq[name] = adamw.state_of(p->name).at(1).to_vector();
  }
  return r;
}

// A known bug simulated: the first step's gradients with each data-parallel rank's own clipped
// before the ranks average them.
std::map<std::string, std::vector<double>> clipped_per_rank(const Case& c) {
  const CaseSpec& s = c.spec;
  std::map<std::string, std::string> theirs;
  const auto m = initial_model(c, theirs);
  std::map<std::string, std::vector<double>> out;
  const std::int64_t rows = s.global_batch / s.dp;
  for (int r = 0; r < s.dp; ++r) {
    m->zero_grad();
    m->forward_backward(rows_of(c, 0, r * rows, rows), {0, 0, true});
    clip_gradients(*m, s.clip);
    for (model::Parameter* p : m->parameters()) {
      const std::vector<double> g = p->gradient().to_vector();
      std::vector<double>& sum = out[theirs.at(p->name)];
      sum.resize(g.size(), 0.0);
      for (std::size_t i = 0; i < g.size(); ++i) sum[i] += g[i] / s.dp;
    }
  }
  return out;
}

// ---- the comparison ----


// Elements whose exact gradient is zero: the key third of every c_attn.bias (softmax ignores a
// constant added to a row of scores, and q . b_k is one).
bool exact_zero_gradient(const std::string& name, std::size_t i, std::int64_t hidden) {
  return name.ends_with("attn.c_attn.bias") && static_cast<std::int64_t>(i) >= hidden &&
         static_cast<std::int64_t>(i) < 2 * hidden;
}

// The layer a GPT-2 name belongs to ("transformer.h.3.mlp.c_fc.weight" -> "block 3").
std::string layer_of(const std::string& name) {
  const std::string prefix = "transformer.h.";
  if (name.rfind(prefix, 0) == 0) return "block " + name.substr(prefix.size(), name.find('.', prefix.size()) - prefix.size());
  if (name.find("wte") != std::string::npos || name.find("wpe") != std::string::npos) return "embedding";
  return name.find("ln_f") != std::string::npos ? "final LayerNorm" : "head";
}

struct Measure {
  double error = 0, bound = 0;
  std::string worst;         // the tensor whose own relative error is largest
  double worst_error = 0;
  bool ok() const { return error <= bound; }
};

// ||a - b|| / ||b - origin|| over the named tensors (origin empty: relative to ||b||), skipping
// the elements `skip` names; the worst tensor by its own relative difference.
Measure relative(const std::map<std::string, std::vector<double>>& a, const std::map<std::string, std::vector<double>>& b,
                 const std::map<std::string, std::vector<double>>* origin, double bound,
                 const std::function<bool(const std::string&, std::size_t)>& skip) {
  Measure m;
  m.bound = bound;
  double d2 = 0, r2 = 0;
  for (const auto& [name, want] : b) {
    const std::vector<double>& got = a.at(name);
    double t_d2 = 0, t_r2 = 0;
    for (std::size_t i = 0; i < want.size(); ++i) {
      if (skip && skip(name, i)) continue;
      const double d = got[i] - want[i], r = want[i] - (origin ? origin->at(name)[i] : 0.0);
      t_d2 += d * d;
      t_r2 += r * r;
    }
    d2 += t_d2;
    r2 += t_r2;
    const double own = t_r2 > 0 ? std::sqrt(t_d2 / t_r2) : std::sqrt(t_d2);
    if (own > m.worst_error || m.worst.empty()) {
      m.worst_error = own;
      m.worst = name;
    }
  }
  m.error = r2 > 0 ? std::sqrt(d2 / r2) : std::sqrt(d2);
  return m;
}

// <a, b> / <b, b> over every element, and how far a is from that multiple of b (relative).
std::pair<double, double> scale_of(const std::map<std::string, std::vector<double>>& a,
                                   const std::map<std::string, std::vector<double>>& b,
                                   const std::function<bool(const std::string&)>& only = nullptr) {
  double ab = 0, bb = 0, aa = 0;
  for (const auto& [name, want] : b) {
    if (only && !only(name)) continue;
    const std::vector<double>& got = a.at(name);
    for (std::size_t i = 0; i < want.size(); ++i) {
      ab += got[i] * want[i];
      bb += want[i] * want[i];
      aa += got[i] * got[i];
    }
  }
  const double k = bb > 0 ? ab / bb : 0;
  const double residual = aa > 0 ? std::sqrt(std::max(0.0, aa - 2 * k * ab + k * k * bb) / aa) : 0;
  return {k, residual};
}

// A diagnosis of gradients that are a multiple k of the single device's.
std::string scale_diagnosis(double k, const CaseSpec& s) {
  const auto near = [&](double want) { return std::abs(k - want) <= 0.02 * want; };
  char text[64];
  std::snprintf(text, sizeof text, "the gradients are %.4g x the single device's: ", k);
  if (s.dp > 1 && s.accumulation > 1 && near(static_cast<double>(s.dp) * s.accumulation))
    return text + std::string("summed over the dp ranks and over the accumulation steps instead of averaged");
  if (s.dp > 1 && s.dp == s.accumulation && near(s.dp))
    return text + std::string("summed over the ") + std::to_string(s.dp) + " data-parallel ranks or over the " +
           std::to_string(s.accumulation) + " accumulation steps instead of averaged (a case whose dp and accumulation differ tells which)";
  if (s.dp > 1 && near(s.dp))
    return text + std::string("summed over the ") + std::to_string(s.dp) +
           " data-parallel ranks instead of averaged (the reduction lacks its 1/dp)";
  if (s.dp > 1 && near(1.0 / s.dp)) return text + std::string("averaged over the data-parallel ranks twice (1/dp once too often)");
  if (s.accumulation > 1 && near(s.accumulation))
    return text + std::string("the loss summed over the ") + std::to_string(s.accumulation) +
           " accumulation steps instead of averaged (each micro-batch's loss not divided by the accumulation steps)";
  if (s.accumulation > 1 && near(1.0 / s.accumulation))
    return text + std::string("each micro-batch's loss divided by the accumulation steps twice");
  return text + std::string("a uniform scale (a loss normalisation) that matches no layout factor");
}

struct CompareOptions {
  std::string case_file, results;
};

int case_compare(const CompareOptions& o) {
  const Case c = read_case(o.case_file);
  // The float64 training on one device: parameters, gradients, AdamW's moments, activations.
  require_memory_for_case("case compare of " + o.case_file,
                          theory::reference_gpt_working_set(c.spec.config, c.spec.global_batch, true),
                          "compare it on a host with more, or export a smaller case");
  const Results got = read_results(o.results, c);
  const CaseSpec& s = c.spec;
  const Reference want = train_reference(c);
  const DataType type = parse_data_type(s.precision);
  // float32 and float64: the sums a framework regroups, the batch's tokens over dp x accumulation
  // partial sums (and tp's shards), against the longest of the step's reductions. 16 bits (a
  // framework computing in bfloat16 against float64): every op's 16-bit rounding along a
  // gradient's chain through the GPT (half_chain_noise), through AdamW's linear bound or its sign
  // flips (tolerance.hpp, as the 16-bit training cases hold their float64 comparison).
  const std::int64_t terms = tolerance::tensor_parallel_reduction_terms(s.tokens(), s.config.hidden, s.config.vocabulary);
  const int partials = s.dp * s.accumulation + 1 + (s.tp > 1 ? s.tp : 0);
  const double noise = tolerance::half_chain_noise(type, tolerance::gpt_rounding_chain(s.config.layers));
  const double gradient_bound = is_half(type) ? tolerance::kTrainingConditioning * noise
                                              : tolerance::gradient_relative_bound(type, terms, partials);
  const auto training_bound_after = [&](int steps) {
    return is_half(type) ? std::max(tolerance::linear_training_bound(noise, steps), tolerance::sign_flip_bound(noise))
                         : tolerance::training_relative_bound(type, terms, partials, steps);
  };
  const double training_bound = training_bound_after(s.steps);
  const double zero_bound = tolerance::adamw_zero_gradient_bound(s.adamw.learning_rate, s.adamw.beta1, s.adamw.beta2, s.steps);
  const std::int64_t h = s.config.hidden;
  const auto zero_gradient = [h](const std::string& name, std::size_t i) { return exact_zero_gradient(name, i, h); };

  std::printf("case %s: %s, %d steps, %s, dp %d x accumulation %d, ZeRO %d, tp %d, pp %d; results %s\n", s.id.c_str(),
              s.config.describe().c_str(), s.steps, s.precision.c_str(), s.dp, s.accumulation, s.zero, s.tp, s.pp,
              o.results.c_str());
  std::string first;  // the first divergence
  std::string diagnosis;
  // Losses, step by step: the first step's within the gradient bound (one forward), later ones
  // within the training bound of the steps before them.
  std::vector<double> loss_errors;
  for (int step = 0; step < s.steps; ++step) {
    const double w = want.losses[static_cast<std::size_t>(step)], g = got.losses[static_cast<std::size_t>(step)];
    const double e = std::abs(g - w) / std::abs(w);
    const double bound = step == 0 ? gradient_bound : training_bound_after(step);
    std::printf("  loss, step %d: %.10g against %.10g, error %.3g (bound %.3g)%s\n", step, g, w, e, bound, e <= bound ? "" : "  DIFFERS");
    if (e > bound && first.empty())
      first = "step " + std::to_string(step) + ": the loss " + std::to_string(g) + " against " + std::to_string(w);
    loss_errors.push_back(e);
  }
  const Measure gradients = relative(got.gradients, want.gradients, nullptr, gradient_bound, nullptr);
  std::printf("  first step's gradients: error %.3g (bound %.3g)%s; largest in %s (%.3g)\n", gradients.error, gradients.bound,
              gradients.ok() ? "" : "  DIFFER", gradients.worst.c_str(), gradients.worst_error);
  const Measure parameters = relative(got.parameters, want.parameters, &c.init, training_bound, zero_gradient);
  std::printf("  parameters after step %d: error %.3g (bound %.3g)%s; largest in %s (%.3g)\n", s.steps - 1, parameters.error,
              parameters.bound, parameters.ok() ? "" : "  DIFFER", parameters.worst.c_str(), parameters.worst_error);
  double zero_error = 0;
  std::string zero_where;
  for (const auto& [name, v] : want.parameters)
    for (std::size_t i = 0; i < v.size(); ++i)
      if (zero_gradient(name, i) && std::abs(got.parameters.at(name)[i] - v[i]) > zero_error) {
        zero_error = std::abs(got.parameters.at(name)[i] - v[i]);
        zero_where = name + "[" + std::to_string(i) + "]";
      }
  std::printf("  key biases (exact gradient zero): largest difference %.3g (bound %.3g, AdamW's step on noise)%s\n", zero_error,
              zero_bound, zero_error <= zero_bound ? "" : "  DIFFERS");
  const Measure exp_avg = relative(got.exp_avg, want.exp_avg, nullptr, training_bound, nullptr);
  const Measure exp_avg_sq = relative(got.exp_avg_sq, want.exp_avg_sq, nullptr, training_bound, nullptr);
  std::printf("  AdamW's moments: exp_avg %.3g, exp_avg_sq %.3g (bound %.3g)%s\n", exp_avg.error, exp_avg_sq.error,
              training_bound, exp_avg.ok() && exp_avg_sq.ok() ? "" : "  DIFFER");

  if (s.tp > 1 && gradients.ok() && !first.empty()) {  // later losses off, the first step right
    const Reference twice = train_reference(c, s.tp);
    bool fits = true;
    for (int step = 0; step < s.steps; ++step) {
      const double w = twice.losses[static_cast<std::size_t>(step)];
      fits = fits && std::abs(got.losses[static_cast<std::size_t>(step)] - w) / std::abs(w) <=
                         training_bound_after(std::max(step, 1));
    }
    if (fits)
      diagnosis = "every loss is what training with the row-parallel biases (c_proj.bias) counted " + std::to_string(s.tp) +
                  " times in the forward gives: the bias added on every tensor-parallel rank before the all-reduce "
                  "instead of once after it (invisible at step 0 while the biases are zero)";
  }
  if (s.dropout > 0 && s.dp > 1 && loss_errors[0] > gradient_bound) {
    // Every rank drawing rank 0's masks: each rank's rows with the masks of the batch's first rows.
    std::map<std::string, std::string> theirs;
    const auto m = initial_model(c, theirs);
    const std::int64_t rows = s.global_batch / s.dp;
    double loss = 0;
    for (int r = 0; r < s.dp; ++r) {
      model::Batch b = rows_of(c, 0, r * rows, rows);
      b.normalizer = static_cast<double>(s.tokens());
      loss += m->forward_backward(b, {0, 0, true, 0});
    }
    if (std::abs(got.losses[0] - loss) / std::abs(loss) <= gradient_bound)
      diagnosis = "the first loss is what every data-parallel rank drawing the first rank's dropout masks gives: "
                  "the ranks share one mask instead of each drawing its own rows'";
  }
  if (!gradients.ok()) {
    if (first.empty() || first.rfind("step 0", 0) != 0)
      first = "step 0: the first step's gradients, largest in " + gradients.worst + " (" + layer_of(gradients.worst) +
              "), error " + cases::format(gradients.worst_error) + " against the bound " + cases::format(gradient_bound);
    const auto [k, residual] = scale_of(got.gradients, want.gradients);
    if (residual <= std::max(1e-3, gradient_bound) && std::abs(k - 1) > 0.02)
      diagnosis = scale_diagnosis(k, s);  // uniform within the noise
    if (diagnosis.empty() && s.clip > 0 && s.dp > 1 &&
        relative(got.gradients, clipped_per_rank(c), nullptr, gradient_bound, nullptr).ok())
      diagnosis = "the gradients are each data-parallel rank's own clipped to the norm " + cases::format(s.clip) +
                  " and then averaged: clipped per rank before the reduction instead of after it";
    // Only the tied table off, with pipeline stages: its two copies' gradients not summed.
    const auto table = [](const std::string& n) { return n == "transformer.wte.weight"; };
    // (With clipping the rest may be a multiple of the single device's: the norm saw the wrong table.)
    const bool rest_agrees =
        relative(got.gradients, want.gradients, nullptr, gradient_bound, [&](const std::string& n, std::size_t) {
          return table(n);
        }).ok() ||
        (s.clip > 0 && scale_of(got.gradients, want.gradients, [&](const std::string& n) { return !table(n); }).second <= 1e-6);
    if (diagnosis.empty() && s.pp > 1 && s.config.tied_embeddings && rest_agrees)
      diagnosis = "only the tied token table's gradient differs: the gradients of its copies on the first and the "
                  "last pipeline stage are not summed (each stage updates its copy with its own part)";
    // Only the row-parallel biases off (by tp): added on every tensor-parallel rank.
    const auto row_bias = [](const std::string& n) { return n.ends_with("c_proj.bias"); };
    const Measure others = relative(got.gradients, want.gradients, nullptr, gradient_bound,
                                    [&](const std::string& n, std::size_t) { return row_bias(n); });
    if (diagnosis.empty() && others.ok()) {
      const auto [kb, rb] = scale_of(got.gradients, want.gradients, row_bias);
      char text[160];
      std::snprintf(text, sizeof text, "only the row-parallel biases (c_proj.bias) differ, %.4g x the single device's: ", kb);
      diagnosis = text + std::string(s.tp > 1 && std::abs(kb - s.tp) <= 0.02 * s.tp
                                         ? "the whole bias's gradient summed over the tensor-parallel ranks as if it were split (or the bias "
                                           "added on every rank)"
                                         : "the row-parallel bias handled apart from its layer");
    }
  } else if (!parameters.ok() && diagnosis.empty()) {
    if (first.empty())
      first = "after step " + std::to_string(s.steps - 1) + ": the parameters, largest in " + parameters.worst + " (" +
              layer_of(parameters.worst) + ")";
    // Gradients right, parameters wrong only where the case exempts weight decay.
    const auto exempt = [&](const std::string& n) {
      for (const auto& [ours, theirs] : case_names(s.config))
        if (theirs == n) return !model::decays(s.adamw.decay_groups, ours);
      return false;
    };
    const Measure decayed = relative(got.parameters, want.parameters, &c.init, training_bound,
                                     [&](const std::string& n, std::size_t i) { return exempt(n) || zero_gradient(n, i); });
    if (decayed.ok())
      diagnosis = "the gradients agree and only parameters the case exempts from weight decay differ (biases, "
                  "LayerNorm parameters, embedding tables): weight decay applied to them";
    else
      diagnosis = "the gradients agree and the update does not: the optimizer or its hyper-parameters differ from the case's";
  }
  if (diagnosis.empty() && !first.empty() && type == DataType::float64) {
    // Everything within float32's bounds: the framework's arithmetic is float32's.
    const double g32 = tolerance::gradient_relative_bound(DataType::float32, terms, partials);
    const double t32 = tolerance::training_relative_bound(DataType::float32, terms, partials, s.steps);
    bool fits = gradients.error <= g32 && parameters.error <= t32 && exp_avg.error <= t32 && exp_avg_sq.error <= t32;
    for (double e : loss_errors) fits = fits && e <= t32;
    if (fits)
      diagnosis = "every difference is within float32's bounds: the framework computes in float32 (somewhere: the "
                  "parameters, the activations or the loss), not in the case's float64";
  }
  if (first.empty() && zero_error > zero_bound) first = "the key bias " + zero_where;
  if (first.empty() && !(exp_avg.ok() && exp_avg_sq.ok()))
    first = "AdamW's moments after step " + std::to_string(s.steps - 1) + ", largest in " +
            (exp_avg.ok() ? exp_avg_sq.worst + " (exp_avg_sq)" : exp_avg.worst + " (exp_avg)");
  if (first.empty()) {
    std::printf("conforms: every loss, the first step's gradients, the parameters and AdamW's moments within their bounds\n");
    return kExitOk;
  }
  std::printf("first divergence: %s\n", first.c_str());
  if (!diagnosis.empty()) std::printf("diagnosis: %s\n", diagnosis.c_str());
  return kExitFailed;
}

class CaseExport final : public CommandWith<ExportOptions> {
 public:
  CaseExport()
      : CommandWith({.name = "case export",
                     .help = "Write a self-contained case for another framework to train: a GPT under GPT-2's names, its "
                             "initial parameters, every step's batch, AdamW with its parameter groups, the precision and the "
                             "layout under test (docs/framework-conformance.md)",
                     .order = 160,
                     .ranks = false,
                     .parent_help = kCaseHelp}) {}
  void declare(CommandOptions& o) override {
    o.add("--out", options_.out, "The case file to write (HDF5)").required();
    o.add("--model", options_.model, "GPT preset:" + model_presets_help()).show_default();
    CaseSpec& s = options_.spec;
    o.add("--steps", s.steps, "Optimizer steps").show_default();
    o.add("--global-batch", s.global_batch, "Sequences per step (a multiple of dp x accumulation)").show_default();
    o.add("--precision", s.precision,
          "The framework's precision: float32, float64, or bfloat16 (float32 parameters and optimizer, bfloat16 "
          "compute: autocast)")
        .show_default();
    o.add("--dp", s.dp, "Data-parallel ranks of the layout under test").show_default();
    o.add("--accumulation", s.accumulation, "Micro-batches a rank accumulates per step").show_default();
    o.add("--zero", s.zero, "ZeRO stage of the layout under test (0: plain DDP)").show_default();
    o.add("--tp", s.tp, "Tensor-parallel ranks of the layout under test").show_default();
    o.add("--pp", s.pp, "Pipeline stages of the layout under test (the micro-batches: --accumulation)")
        .show_default();
    o.add("--dropout", s.dropout, "Residual dropout after attention and after the MLP; its masks go in the case")
        .show_default();
    o.add("--clip-grad-norm", s.clip, "Clip the gradients to this global L2 norm before each update, as "
                                      "torch.nn.utils.clip_grad_norm_ (0: no clipping)").show_default();
    o.flag("--force", options_.force, "Overwrite --out");
  }
  int run_here() override { return case_export(options_); }
};

class CaseCompare final : public CommandWith<CompareOptions> {
 public:
  CaseCompare()
      : CommandWith({.name = "case compare",
                     .help = "Train the case on one device in float64 and compare a framework's results with it: every "
                             "step's loss, the first step's gradients, the parameters and AdamW's moments after the last "
                             "step, within bounds from the case's precision and layout; exit 0 when they conform, 1 naming "
                             "the first divergence with a diagnosis",
                     .order = 161,
                     .ranks = false}) {}
  void declare(CommandOptions& o) override {
    o.add("case", options_.case_file, "The case file (case export's)").required();
    o.add("results", options_.results, "The framework's results file (docs/framework-conformance.md)").required();
  }
  int run_here() override { return case_compare(options_); }
};

const RegisteredCommand<CaseExport> kCaseExport;
const RegisteredCommand<CaseCompare> kCaseCompare;

}  // namespace
}  // namespace parity::cli
