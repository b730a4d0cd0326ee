// Conformance cases of context parallelism (parallel/context), written once and run by
// GoogleTest (correctness/test_context.cpp) and by `parity check --filter 'context/*'`. A case
// splits the world into cp x dp ranks, trains the tensor-parallel cases' GPT (sequence 24,
// dropout on, tied table) for 3 AdamW steps with each sequence over the cp group (the variant's
// attention, dropout drawn for the whole sequence) and the batch over dp, the gradients summed
// over dp x cp (DDP, or ZeRO-1 sharded over dp x cp); every step's loss, the first step's
// gradients and the parameters and moments after the last step must equal single-device
// training within the bounds (with pipeline stages through the pipeline cases' comparison).
#pragma once

#include <string>
#include <vector>

#include "correctness/cases/training.hpp"
#include "correctness/cases/family.hpp"
#include "reference/comm/communicator.hpp"
#include "reference/record/table.hpp"

namespace parity::cases {

inline const record::TableSpec kContextCasesTable = check_table("context",
    "conformance cases of context parallelism (ring, all-gather, Ulysses) composed with DP and ZeRO "
    "(docs/results-schema.md)",
    {{"variant", ColumnType::string}, {"cp", ColumnType::int64}, {"tp", ColumnType::int64}, {"sp", ColumnType::int64},
     {"pp", ColumnType::int64}, {"dp", ColumnType::int64}, {"zero", ColumnType::int64},
     {"precision", ColumnType::string}, {"device", ColumnType::string}, {"world_size", ColumnType::int64},
     {"steps", ColumnType::int64}, {"error", ColumnType::float64}, {"bound", ColumnType::float64},
     {"loss_error", ColumnType::float64}, {"gradient_error", ColumnType::float64},
     {"gradient_bound", ColumnType::float64}});

struct ContextCase {
  std::string variant = "ring";  // ring, allgather, ulysses
  int cp = 2;
  int tp = 1;                    // tensor parallelism (Megatron's splits)
  bool sp = false;               // and its sequence parallelism
  int pp = 1;                    // pipeline stages (the cases' schedule below), each over cp x tp
  std::string schedule = "1f1b";
  int micro_batches = 4;          // with pp > 1
  int dp = 1;                    // the world is cp x tp x dp x pp
  int zero = 0;                  // 0 (DDP) or 1, over dp x cp
  std::string precision = "float64";  // float64, float32, bfloat16, float16 (mixed: float32 masters)
  int steps = 3;
  std::string fault;             // parallel::ContextParallelConfig::fault
  // "context/ring/cp2/float64", "context/allgather/cp2/dp2/zero1/float32", "context/ulysses/cp2/tp2/bfloat16",
  // "context/ring/cp2/pp2/1f1b/m4/float64"
  std::string name() const;
};

// The cases at world size n: every variant at every cp in {2, 3, 4} dividing n (dp the rest), in
// float64, float32, bfloat16 and float16 (float32 masters; float16 with dynamic loss scaling),
// and with ZeRO-1 where dp > 1 in float64, float32 and bfloat16; at one rank cp 1. With tp 2 where cp x 2 divides n (cp 2 and
// 4): every variant in float64, float32 and bfloat16, with and without sequence parallelism.
// With a 1F1B pipeline of 2 stages (4 micro-batches) where cp x 2 divides n (cp 2 and 4): every
// variant in float64, float32 and bfloat16.
std::vector<ContextCase> context_grid(int world_size);

// error and bound: parameters and state (with pipeline stages, every step's loss too);
// loss_error every step's loss; gradient_error and gradient_bound the first step's gradients.
using ContextResult = TrainingResult;

ContextResult run_context_case(Communicator& world, const ContextCase& c);

}  // namespace parity::cases
