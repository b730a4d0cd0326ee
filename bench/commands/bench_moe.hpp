// parity bench moe: mixture of experts with expert parallelism against ep, router and capacity
// factor.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "bench/cli/session.hpp"
#include "bench/commands/point_to_point.hpp"
#include "reference/model/model.hpp"
#include "reference/record/table.hpp"
#include "reference/theory/calibration.hpp"

namespace parity::cli {

// The result groups it writes (docs/results-schema.md).
inline const record::TableSpec kMoeBenchTable{"/bench/moe",
    "mixture of experts against the expert-parallel size, router and capacity factor: step time "
    "split, all-to-all bytes beside the formula, load imbalance and dropped tokens",
    {{"run", ColumnType::int64}, {"model", ColumnType::string}, {"config", ColumnType::string},
     {"ep", ColumnType::int64}, {"dp", ColumnType::int64}, {"world_size", ColumnType::int64},
     {"experts", ColumnType::int64}, {"top_k", ColumnType::int64}, {"capacity_factor", ColumnType::float64},
     {"router", ColumnType::string}, {"moe_layers", ColumnType::int64}, {"in_ep_sweep", ColumnType::int64},
     {"in_router_sweep", ColumnType::int64}, {"in_cf_sweep", ColumnType::int64}, {"batch", ColumnType::int64},
     {"step_seconds", ColumnType::float64, "s"}, {"tokens_per_second", ColumnType::float64, "1/s"},
     {"all_to_all_seconds", ColumnType::float64, "s"}, {"gradient_reduction_seconds", ColumnType::float64, "s"},
     {"compute_seconds", ColumnType::float64, "s"}, {"all_to_all_share", ColumnType::float64},
     {"all_to_all_bytes", ColumnType::float64, "B"}, {"formula_all_to_all_bytes", ColumnType::float64, "B"},
     {"bytes_match", ColumnType::int64}, {"mean_load_imbalance", ColumnType::float64},
     {"mean_dropped_fraction", ColumnType::float64},
     {"predicted_all_to_all_seconds", ColumnType::float64, "s", false},
     {"predicted_step_seconds", ColumnType::float64, "s", false}, {"predicted_over_measured", ColumnType::float64, "", false}}};
inline const record::TableSpec kMoeStepsTable{"/bench/moe_steps",
    "each run's MoE layers at every step: load imbalance, dropped and unrouted tokens, balancing and "
    "z-losses (summed over the data ranks)",
    {{"run", ColumnType::int64}, {"step", ColumnType::int64}, {"timed", ColumnType::int64},
     {"block", ColumnType::int64}, {"tokens", ColumnType::int64}, {"load_imbalance", ColumnType::float64},
     {"admitted_imbalance", ColumnType::float64}, {"dropped", ColumnType::int64},
     {"dropped_fraction", ColumnType::float64}, {"unrouted_fraction", ColumnType::float64},
     {"balancing_loss", ColumnType::float64}, {"z_loss", ColumnType::float64}}};
inline const record::TableSpec kMoeLoadTable{"/bench/moe_load",
    "each run's tokens per expert at every step and MoE layer, chosen and admitted (summed over the "
    "data ranks)",
    {{"run", ColumnType::int64}, {"step", ColumnType::int64}, {"block", ColumnType::int64},
     {"expert", ColumnType::int64}, {"load", ColumnType::int64}, {"admitted", ColumnType::int64}}};

struct MoeBenchOptions {
  std::string model = "tiny";           // a GPT preset
  int experts = 8;
  int top_k = 2;
  double capacity_factor = 1.25;        // of the ep sweep and the router runs
  std::string capacity_factors = "0.5,1,1.25,2,inf";  // the dropped-fraction sweep (top_k router)
  std::string routers = "top_k,expert_choice,aux_free";
  std::string ep_sizes;                 // comma-separated; empty: every size dividing the world and E
  int moe_every = 2;                    // an MoE FFN in every k-th block ...
  std::string moe_layers;               // ... or in these blocks
  bool shared_expert = false;
  std::int64_t batch = 8;               // sequences per step (the global batch)
  int steps = 5;
  int warmup = 1;
  std::string dtype = "float32";
  std::string all_to_all = "native";
};
struct MoeBenchRun {
  int ep = 1;
  std::string router;
  double capacity_factor = 1;
  // Which measurement the run serves (one run may serve several): time against ep, load
  // imbalance per router, dropped fraction against cf.
  bool ep_sweep = false, router_sweep = false, cf_sweep = false;
};
struct MoeBenchPlan {
  std::string model;
  model::GptConfig config;  // with the MoE layers; each run sets its router and cf
  std::vector<MoeBenchRun> runs;
};
// Checks the options that do not depend on the world (UsageError naming the bad one).
void check_moe_bench_options(const MoeBenchOptions& options);
// The runs on `world` ranks (each on every rank: ep x dp = world); refuses an ep that does not
// divide the world or the experts, a batch smaller than the world.
MoeBenchPlan plan_moe_bench(const MoeBenchOptions& options, int world);
std::size_t moe_bench_bytes_per_rank(const MoeBenchPlan& plan, const MoeBenchOptions& options, int world);
struct MoeBenchOutcome {
  record::Table runs{kMoeBenchTable};
  record::Table steps{kMoeStepsTable};
  record::Table load{kMoeLoadTable};
  std::size_t mismatches = 0;  // runs whose all-to-all bytes differ from the formula
};
// `p2p` and `calibration` (this job's) predict each run's step beside the measured one.
MoeBenchOutcome run_moe_bench(Session& session, const MoeBenchPlan& plan, const MoeBenchOptions& options,
                              const PointToPoint& p2p, const theory::Calibration& calibration);
void record_moe_bench(Session& session, const MoeBenchOutcome& outcome, const MoeBenchOptions& options);

}  // namespace parity::cli
