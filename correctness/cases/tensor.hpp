// Conformance cases of tensor parallelism (with and without sequence parallelism), alone and
// composed with data parallelism and ZeRO 1-3 through the process grid, written once and run by
// GoogleTest (correctness/test_tensor_parallel.cpp) and by `parity check --filter 'tensor/*'`.
//
// A case splits the world into tp x dp ranks, trains a small GPT (dropout on, tied table) for
// a few AdamW steps with the tensor-parallel model on every rank, and on every rank the whole
// model on one device; it checks:
//   - the first step's loss and every gradient, gathered from the shards, against one device;
//   - every step's loss, and after the last step the parameters and AdamW's moments, gathered;
//   - parameters held whole on every tp rank (LayerNorms, positions, row-parallel biases) equal
//     on all of them, bit for bit;
//   - the parameters a rank holds against the sharded count (theory/tensor.hpp);
//   - the bytes each rank sent in the tp group in the last step, per layer (embedding, each
//     block, head, loss), equal to the formula exactly.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "correctness/cases/family.hpp"
#include "reference/comm/communicator.hpp"
#include "reference/parallel/techniques/techniques.hpp"
#include "reference/record/table.hpp"

namespace parity::cases {

// The result groups it writes (docs/results-schema.md).
inline const record::TableSpec kTensorCasesTable = check_table("tensor",
    "conformance cases of tensor and sequence parallelism composed with DP and ZeRO "
    "(docs/results-schema.md)",
    {{"technique", ColumnType::string}, {"data_parallel", ColumnType::string}, {"tp", ColumnType::int64},
     {"dp", ColumnType::int64}, {"sequence_parallel", ColumnType::int64}, {"precision", ColumnType::string},
     {"device", ColumnType::string}, {"world_size", ColumnType::int64}, {"steps", ColumnType::int64},
     {"micro_batches", ColumnType::int64}, {"error", ColumnType::float64}, {"bound", ColumnType::float64},
     {"gradient_error", ColumnType::float64}, {"gradient_bound", ColumnType::float64},
     {"loss_error", ColumnType::float64}, {"tp_bytes_sent", ColumnType::float64, "B"},
     {"formula_tp_bytes_sent", ColumnType::float64, "B"}});

struct TensorCase {
  const parallel::Technique* technique = &parallel::find_technique("tp");     // tp or tp_sp
  const parallel::Technique* data_parallel = &parallel::find_technique("dp"); // dp, zero1-3 over the dp ranks
  int tp = 1;                        // dp = world / tp
  std::string precision = "float64"; // float64, float32
  int steps = 3;
  int micro_batches = 1;
  std::int64_t global_batch = 0;     // 0: 2 dp + 1 rows (uneven shards)
  // A deliberate bug (TensorParallelConfig::fault), to show the checks catch it.
  std::string fault;
  // "tensor/tp2/sp/zero1/float32"
  std::string name() const;
};

// The cases at world size n: tp in {1, 2, 3, 4} dividing n, with and without sequence
// parallelism (tp > 1), float64 and float32, composed with dp (and, where dp > 1, ZeRO 1-3).
std::vector<TensorCase> tensor_grid(int world_size);

struct TensorResult {
  double error = 0;          // the largest relative difference found (any check)
  double bound = 0;          // the parameters' bound (training_relative_bound)
  double gradient_error = 0, gradient_bound = 0;
  double loss_error = 0;     // largest relative difference of a step's loss
  double bytes_sent = 0;     // tp-group bytes of this rank in the last step (activations and loss)
  double bytes_formula = 0;
  std::string compared;
  bool passed = false;
  std::string message;
};

// Runs the case on every rank of comm (collectively); every rank returns the same result.
TensorResult run_tensor_case(Communicator& comm, const TensorCase& c);

// The GPT every case trains: heads and vocabulary divisible by 1, 2, 3 and 4, a sequence too.
model::GptConfig tensor_case_model(DataType dtype);

}  // namespace parity::cases
