// The files of `parity case` (docs/framework-conformance.md): a case (schema parity-case: a GPT
// under GPT-2's names, its initial parameters, every step's batch and dropout masks, AdamW with
// its groups, the precision and the layout under test) and a framework's results (schema
// parity-case-results: every step's loss, the first step's gradients, the parameters and AdamW's
// moments after the last step, whole or as shards with their offsets).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "reference/model/model.hpp"
#include "reference/model/optimizer.hpp"
#include "reference/tensor/tensor.hpp"

namespace parity::cli {

// What a case holds besides its tensors.
struct CaseSpec {
  model::GptConfig config;  // float64, dropout 0
  int steps = 3;
  std::int64_t global_batch = 8;
  std::string precision = "float32";  // the framework's
  int dp = 2, accumulation = 1, zero = 0, tp = 1, pp = 1;
  model::AdamWConfig adamw{1e-3, 0.9, 0.999, 1e-8, 0.1, model::DecayGroups::matrices};
  double clip = 0;  // the gradients' largest global L2 norm before the update (0: not clipped)
  double dropout = 0;  // residual dropout after attention and after the MLP, its masks in the case
  std::string id;
  std::int64_t tokens() const { return global_batch * config.sequence; }
};


// The case of the options' `options` (steps, batch, precision, layout, clipping, dropout) on the
// GPT preset `model`: validated (UsageError naming the option), its config and id made.
CaseSpec make_case_spec(CaseSpec options, const std::string& model);
// Writes the case file (refusing an existing `out` unless `force`).
void write_case(const CaseSpec& spec, const std::string& model, const std::string& out, bool force);
// UsageError when `bytes` exceed the memory available here ("WHAT needs ... of memory but ...;
// ADVICE").
void require_memory_for_case(const std::string& what, double bytes, const std::string& advice);

// (parity name, GPT-2 name) of every parameter once (the tied head is the table itself).
std::vector<std::pair<std::string, std::string>> case_names(const model::GptConfig& config);

struct Case {
  CaseSpec spec;
  std::map<std::string, std::vector<double>> init;  // by GPT-2 name
  std::vector<std::pair<Tensor, Tensor>> batches;   // (tokens, targets) per step, int32
};
// The case file at `path`; UsageError for anything missing or damaged, or masks that are not the
// ones parity draws for the case.
Case read_case(const std::string& path);

// What a framework recorded, by GPT-2 name.
struct Results {
  std::vector<double> losses;
  std::map<std::string, std::vector<double>> gradients, parameters, exp_avg, exp_avg_sq;
};
// The results file at `path` for case `c`; UsageError for another case's, a missing tensor, a
// tensor of another size, shards that leave a gap or overlap, a loss that is not finite.
Results read_results(const std::string& path, const Case& c);

}  // namespace parity::cli
