// Conformance cases of activation checkpointing, written once and run by GoogleTest
// (correctness/test_checkpoint.cpp) and by `parity check --filter 'checkpoint/*'`.
//
// A case trains the cases' GPT (dropout on, so the recompute must replay its masks) for a few
// AdamW steps twice on the same ranks, once without recomputation and once with the policy,
// alone or composed with a technique, and checks:
//   - every step's loss, the parameters and optimizer state each rank holds, and the gradients
//     of the last step, equal between the two runs bit for bit;
//   - alone: the activation bytes of the blocks the memory tracker measured (stored between
//     forward and backward, and the peak) equal theory::checkpoint_activation_bytes exactly,
//     and the matmul FLOPs the policy adds equal theory::recompute_flops.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "correctness/cases/family.hpp"
#include "reference/comm/communicator.hpp"
#include "reference/record/table.hpp"

namespace parity::cases {

// The result groups it writes (docs/results-schema.md).
inline const record::TableSpec kCheckpointCasesTable = check_table("checkpoint",
    "conformance cases of activation checkpointing against the run without it "
    "(docs/results-schema.md)",
    {{"policy", ColumnType::string}, {"composition", ColumnType::string}, {"schedule", ColumnType::string},
     {"precision", ColumnType::string}, {"device", ColumnType::string}, {"world_size", ColumnType::int64},
     {"steps", ColumnType::int64}, {"recomputed_blocks", ColumnType::int64}, {"differing", ColumnType::int64},
     {"stored_bytes", ColumnType::int64, "B"}, {"formula_stored_bytes", ColumnType::int64, "B"},
     {"peak_bytes", ColumnType::int64, "B"}, {"formula_peak_bytes", ColumnType::int64, "B"},
     {"recompute_flops", ColumnType::int64}, {"formula_recompute_flops", ColumnType::int64}});

struct CheckpointCase {
  std::string policy = "full";  // parallel::parse_checkpoint_policy
  // alone (every rank the model by itself), moe (the same with two MoE blocks, auxiliary losses
  // on), zero3 (over every rank), tp_sp (tp 2 with sequence parallelism, dp the rest), pp (every
  // rank a stage; `schedule`).
  std::string composition = "alone";
  std::string schedule = "1f1b";
  std::string precision = "float64";  // float64, float32
  int steps = 3;
  // parallel::CheckpointPolicy::fault ("fresh_dropout_seed"), to show the check catches it.
  std::string fault;
  // "checkpoint/alone/full/float64", "checkpoint/pp/zb-h1/sqrt/float32"
  std::string name() const;
};

// The cases at world size n: every policy (full, every2, sqrt, selective, a budget that keeps
// half the blocks) alone, with MoE blocks (but the budget), with ZeRO-3 (n >= 2), with tp 2 and sequence parallelism (n even)
// and with every pipeline schedule (p = n, 2 <= n <= 4; m = 2p), in float64 and float32.
std::vector<CheckpointCase> checkpoint_grid(int world_size);

struct CheckpointResult {
  std::int64_t differing = 0;  // elements (and losses) that differ from the run without recompute, over ranks
  std::string compared;        // what was compared
  // Alone; else -1.
  std::int64_t stored_bytes = -1, formula_stored_bytes = -1;
  std::int64_t peak_bytes = -1, formula_peak_bytes = -1;
  std::int64_t recompute_flops = -1, formula_recompute_flops = -1;
  std::int64_t recomputed_blocks = 0;  // per step on this rank, from the layout
  bool passed = false;
  std::string message;
};

// Runs the case on every rank of comm (collectively); every rank returns the same verdict.
CheckpointResult run_checkpoint_case(Communicator& comm, const CheckpointCase& c);

}  // namespace parity::cases
