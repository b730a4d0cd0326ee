// Conformance cases of mixture of experts and expert parallelism, written once and run by
// GoogleTest (correctness/test_moe.cpp) and by `parity check --filter 'moe/*'`.
//
// A case splits the world into tp x ep x dp ranks, trains a small GPT whose second block is an MoE
// layer (dropout on) for a few AdamW steps with the expert-parallel model, and on every rank the
// whole model on one device running each data-parallel rank's rows as its own pass (the
// routing groups of the parallel run). It checks:
//   - the routing decisions (every assignment's token and expert) and the dropped count of
//     every pass equal the single device's, exactly;
//   - the first step's gradients (gathered from the experts' ranks and the tp shards), every
//     step's loss (balancing losses included), and after the last step every parameter and
//     AdamW's moments, within the bounds of reference/core/tolerance.hpp;
//   - parameters every ep and tp rank holds whole equal on all of them, bit for bit, and the
//     experts' parameters per rank equal to the count of theory/moe.hpp;
//   - the bytes of the dispatch and combine all-to-alls of the last step, per rank, equal the
//     formula from the routing counts (theory/moe.hpp), exactly.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "correctness/cases/family.hpp"
#include "reference/comm/communicator.hpp"
#include "reference/theory/model_config.hpp"
#include "reference/record/table.hpp"

namespace parity::cases {

// The result groups it writes (docs/results-schema.md).
inline const record::TableSpec kMoeCasesTable = check_table("moe",
    "conformance cases of mixture of experts and expert parallelism against one device "
    "(docs/results-schema.md)",
    {{"ep", ColumnType::int64}, {"tp", ColumnType::int64}, {"dp", ColumnType::int64}, {"experts", ColumnType::int64},
     {"top_k", ColumnType::int64}, {"capacity_factor", ColumnType::float64}, {"router", ColumnType::string},
     {"all_to_all", ColumnType::string}, {"precision", ColumnType::string}, {"device", ColumnType::string},
     {"world_size", ColumnType::int64}, {"steps", ColumnType::int64}, {"error", ColumnType::float64},
     {"bound", ColumnType::float64}, {"loss_error", ColumnType::float64}, {"loss_bound", ColumnType::float64},
     {"gradient_error", ColumnType::float64, "", false}, {"decisions", ColumnType::int64},
     {"dropped", ColumnType::int64}, {"dispatch_bytes", ColumnType::float64, "B"},
     {"formula_dispatch_bytes", ColumnType::float64, "B"}});

struct MoeCase {
  int ep = 1;                        // dp = world / (ep tp)
  int tp = 1;                        // tensor parallelism inside every expert (and the attention)
  int experts = 4;
  int top_k = 2;
  double capacity_factor = 1.25;     // infinity: dropless
  std::string router = "top_k";
  std::string precision = "float64";
  int steps = 3;
  std::string all_to_all = "native";
  // A deliberate bug: a MoE fault (no_renormalise, drop_residual) or "wrong_rank".
  std::string fault;
  // "moe/ep2/E4/k2/cf1.25/top_k/float64", "moe/ep2/tp2/E4/..."
  std::string name() const;
};

// The cases at world size n: ep in {1, 2, 4} dividing n, E in {4, 8}, k in {1, 2}, cf in {1.0,
// 1.25, inf}, each router, float64 and float32 (a subset of the products, every value of each
// axis at least once at every ep); and tp 2 inside the experts at each ep with ep tp dividing n.
std::vector<MoeCase> moe_grid(int world_size);

struct MoeResult {
  double error = 0, bound = 0;       // parameters and state after the last step
  double loss_error = 0, loss_bound = 0;  // the loss of every step; the first step's gradients too
  double gradient_error = 0;
  std::int64_t decisions = 0;        // assignments compared
  std::int64_t dropped = 0;          // choices dropped over every pass (all ranks)
  double dispatch_bytes = 0, dispatch_formula = 0;
  std::string compared;
  bool passed = false;
  std::string message;
};

// Runs the case on every rank of comm (collectively); every rank returns the same result.
MoeResult run_moe_case(Communicator& comm, const MoeCase& c);

// The GPT every case trains (block 1 of 2 an MoE layer).
model::GptConfig moe_case_model(const MoeCase& c);

}  // namespace parity::cases
