// Conformance cases of the training state (parallel/state): train k steps under layout A, save,
// restore under layout B (a fresh model and trainer, on the same or fewer or more ranks), train
// n more steps. Every rank of B checks, against single-device training of k + n steps:
//   - every step's loss after the restore, and the parameters and optimizer state at the end,
//     within the bounds of the layouts' own cases (tolerance::restore_relative_bound);
//   - right after the restore, every parameter (and master) and optimizer state element B holds,
//     gathered whole, equal bit for bit to what A held when it saved;
//   - the optimizer's step count and the loss scaler's scale and clean-step count, exactly;
// and when B is A, the run equals uninterrupted training under A bit for bit. Written once and
// run by GoogleTest (correctness/test_restore.cpp) and by `parity check --filter 'restore/*'`.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "correctness/cases/family.hpp"
#include "reference/comm/communicator.hpp"
#include "reference/record/table.hpp"

namespace parity::cases {

inline const record::TableSpec kRestoreCasesTable = check_table("restore",
    "conformance cases of the training state: saved under one layout, restored under another "
    "(docs/results-schema.md)",
    {{"before", ColumnType::string}, {"after", ColumnType::string}, {"precision", ColumnType::string},
     {"device", ColumnType::string}, {"world_size", ColumnType::int64}, {"steps", ColumnType::int64},
     {"saved_at", ColumnType::int64}, {"error", ColumnType::float64}, {"bound", ColumnType::float64},
     {"loss_error", ColumnType::float64}, {"restored_exactly", ColumnType::int64},
     {"bit_identical", ColumnType::int64}, {"saved_bytes", ColumnType::float64, "B"}});

// A layout the cases train under: dp data-parallel ranks (with a ZeRO stage and gradient
// accumulation over micro_batches) times tp tensor-parallel ranks (with or without sequence
// parallelism) times pp pipeline ranks (the schedule over micro_batches; ZeRO 0 or 1 over the
// replicas, no sequence parallelism).
struct RestoreLayout {
  int dp = 1;
  int zero = 0;
  int micro_batches = 1;
  int tp = 1;
  bool sp = false;
  int pp = 1;
  std::string schedule = "1f1b";  // pp > 1
  int ep = 1;                     // the MoE model's experts over ep ranks (tp inside them)
  int ranks() const { return dp * tp * pp * ep; }
  int data_ranks() const { return dp * ep; }  // the ranks the batch is split over
  // "dp2.zero1", "tp2.sp", "dp2.tp2.zero3.acc2", "pp4.1f1b.m4", "dp2.pp2.gpipe.m2.zero1", "one"
  // (a single rank)
  std::string name() const;
  bool operator==(const RestoreLayout&) const = default;
};

struct RestoreCase {
  RestoreLayout before, after;
  // float64, float32, or mixed precision: bfloat16, float16 (with dynamic loss scaling that
  // doubles the scale during the run, so a scaler not restored shows).
  std::string precision = "float32";
  // The MoE model (block 1 an MoE layer: 4 experts, top-2, dropless, balancing and z-losses on):
  // expert parallelism, and the batch split over the same number of data ranks in both layouts
  // (each data rank's rows are a pass of their own, whose balancing loss is its own).
  bool moe = false;
  std::string router = "top_k";  // or aux_free: its routing bias and pending load are state too
  int steps_before = 2, steps_after = 2;
  // A deliberate mistake of the restore (parallel::StateLoad::fault: other_step, wrong_offset,
  // missing_moment, loss_scale, routing_state), to show the checks catch it.
  std::string fault;
  // "restore/dp2.zero1-to-tp2.sp/float32", "restore/moe/ep4-to-ep2.dp2/float64"
  std::string name() const;
};

// The cases at world size n: the same layout before and after (bit for bit), data parallelism
// to ZeRO-3 and back, ZeRO stages into one another, accumulation, tensor parallelism re-cut
// (tp 2 -> 4 -> 1), with and without sequence parallelism, composed with ZeRO, pipelines
// rebalanced (pp 4 -> 2) and into and out of every other technique under every schedule, the
// world shrunk and grown (8 -> 4 -> 1), in float64, float32, bfloat16 and float16, as far as n
// ranks allow.
std::vector<RestoreCase> restore_grid(int world_size);

struct RestoreResult {
  double error = 0;       // parameters and state against one device, relative
  double bound = 0;
  double loss_error = 0;  // the largest relative loss difference after the restore
  int restored_exactly = 0;  // 1 when B held, right after the restore, every element A saved
  int bit_identical = -1;  // B = A: 1 when equal to uninterrupted A bit for bit, else 0; -1 otherwise
  double saved_bytes = 0;
  bool passed = false;
  std::string message;
};

// Collective over `world` (which must have the ranks both layouts need); every rank returns the
// same result.
RestoreResult run_restore_case(Communicator& world, const RestoreCase& c);

}  // namespace parity::cases
