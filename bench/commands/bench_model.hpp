// parity bench model: tokens per second and MFU of a GPT training step on every rank.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "bench/cli/session.hpp"
#include "bench/commands/presets.hpp"
#include "reference/record/table.hpp"

namespace parity::cli {

struct ModelBenchOptions {
  std::string models = "tiny,small";
  std::int64_t batch = 8;
  int steps = 5;
  int warmup = 1;
  std::string dtype = "float32";
  std::string optimizer = "adamw";
};
struct ModelBenchPlan {
  std::vector<ModelPreset> models;
  std::int64_t batch = 8;
  DataType dtype = DataType::float32;
};
// Checks every option; throws UsageError naming the bad one.
ModelBenchPlan plan_model_bench(const ModelBenchOptions& options);
// Largest bytes one rank needs for the plan (parameters, gradients, state, activations).
std::size_t model_bench_bytes_per_rank(const ModelBenchPlan& plan);
struct ModelBenchOutcome {
  record::Table table{"training step of GPT models on every rank: tokens/s and MFU (docs/model-accounting.md)"};
};
ModelBenchOutcome run_model_bench(Session& session, const ModelBenchPlan& plan, const ModelBenchOptions& options);
void record_model_bench(Session& session, const ModelBenchOutcome& outcome, const ModelBenchOptions& options);

}  // namespace parity::cli
