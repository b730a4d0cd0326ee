// parity bench context: context parallelism's step time, attention time, hidden communication,
// bytes and activation memory against cp and the sequence length (docs/context-parallelism.md).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "reference/model/model.hpp"
#include "reference/record/table.hpp"

namespace parity::cli {

// The result group it writes (docs/results-schema.md).
inline const record::TableSpec kContextBenchTable{"/bench/context",
    "context parallelism per variant, cp and sequence length, a row per configuration (the slowest rank's times): "
    "step and attention time, the waits on the group with the ring's transfers overlapped and not, bytes and "
    "activation memory per rank against their formulas",
    {{"variant", ColumnType::string}, {"cp", ColumnType::int64}, {"dp", ColumnType::int64},
     {"world_size", ColumnType::int64}, {"sequence", ColumnType::int64}, {"rows", ColumnType::int64},
     {"precision", ColumnType::string}, {"layers", ColumnType::int64},
     {"step_s", ColumnType::float64, "s"}, {"tokens_per_s", ColumnType::float64, "1/s"},
     {"attention_s", ColumnType::float64, "s"}, {"communication_s", ColumnType::float64, "s"},
     {"serial_attention_s", ColumnType::float64, "s"}, {"serial_communication_s", ColumnType::float64, "s"},
     {"hidden_fraction", ColumnType::float64},
     {"forward_bytes", ColumnType::float64, "B"}, {"backward_bytes", ColumnType::float64, "B"},
     {"formula_forward_bytes", ColumnType::float64, "B"}, {"formula_backward_bytes", ColumnType::float64, "B"},
     {"activation_bytes", ColumnType::float64, "B"}, {"formula_activation_bytes", ColumnType::float64, "B"}}};

struct ContextBenchOptions {
  std::string model = "tiny";  // a GPT preset (dense)
  int layers = 0;              // transformer blocks; 0: the preset's
  std::string precision = "float32";
  std::string variants = "ring,allgather,ulysses";
  std::string cp = "auto";            // cp sizes, each dividing the world (dp the rest); auto: 1, 2, 4 where they do
  std::string sequences = "256,1024";  // sequence lengths, each divisible by 2 cp
  int rows = 1;                        // sequences per dp rank
  int warmup = 1;
  int steps = 3;
};

struct ContextBenchPlan {
  std::string model;
  model::GptConfig config;  // the preset at its type and layers; the sequence set per run
  std::vector<std::string> variants;
  std::vector<int> cp;
  std::vector<std::int64_t> sequences;
};

// Checks every option that needs no world (UsageError naming the bad one): the model (dense),
// the precision, the variants, cp sizes of at least 1, sequences divisible by 2 cp for every cp,
// heads divisible by cp for Ulysses. world_size (when known) must be a multiple of every cp.
ContextBenchPlan plan_context_bench(const ContextBenchOptions& options, int world_size = 0);
// The most a rank holds over the plan's runs, for the memory check: the blocks' activations at
// its local tokens (theory::context_block_activation_bytes), the whole K and V the all-gather
// variant gathers, one block of attention scores and probabilities, and the rest of training
// (gpt_training_bytes_beside_blocks).
std::size_t context_bench_bytes_per_rank(const ContextBenchPlan& plan, int rows);

}  // namespace parity::cli
