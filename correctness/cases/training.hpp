// Conformance cases for data parallelism, gradient accumulation, ZeRO 1-3 and the parameter
// server, written once and run by GoogleTest (correctness/test_training.cpp) and by `parity
// check`. A case trains a small model for a few optimizer steps with the technique on every
// rank of the communicator and, on every rank, the same model on one device on the whole
// batch; parameters and optimizer state must agree within tolerance::training_relative_bound,
// and the bytes each rank sent must equal the formula of theory/parallel.hpp exactly.
#pragma once

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "correctness/cases/family.hpp"
#include "reference/comm/communicator.hpp"
#include "reference/model/optimizer.hpp"
#include "reference/parallel/data/parameter_server.hpp"
#include "reference/parallel/step.hpp"
#include "reference/parallel/techniques/techniques.hpp"
#include "reference/record/table.hpp"

namespace parity::cases {

// The result groups it writes (docs/results-schema.md).
inline const record::TableSpec kTrainingCasesTable = check_table("training",
    "conformance cases of data parallelism, ZeRO and the parameter server (docs/results-schema.md)",
    {{"technique", ColumnType::string}, {"optimizer", ColumnType::string}, {"precision", ColumnType::string},
     {"model", ColumnType::string}, {"device", ColumnType::string, "", false}, {"world_size", ColumnType::int64},
     {"steps", ColumnType::int64}, {"global_batch", ColumnType::int64}, {"micro_batches", ColumnType::int64},
     {"error", ColumnType::float64}, {"bound", ColumnType::float64}, {"bytes_sent", ColumnType::float64, "B"},
     {"formula_bytes_sent", ColumnType::float64, "B"}, {"max_staleness", ColumnType::float64},
     {"float64_error", ColumnType::float64, "", false}, {"float64_bound", ColumnType::float64, "", false}});

// The cases' GPT: vocabulary 32, 2 layers, hidden 16, 2 heads, sequence 8, a tied table and
// dropout 0.1 (so the checks see shared parameters and replayed masks), in `dtype`.
model::GptConfig case_gpt_config(DataType dtype);
// The cases' AdamW (lr 1e-2, betas 0.9/0.999, eps 1e-8, weight decay 0.01 on the weight matrices
// alone: model::DecayGroups::matrices, as GPT-2 trains), its state in `state`.
std::unique_ptr<model::Optimizer> case_adamw(DataType state);
// The 16-bit cases' loss scaling for a model of `model_type`: float16 trains with its loss
// multiplied by 2^12 (dynamic scaling that, for a case's few steps, neither grows nor meets an
// overflow: a skipped step fails the case); bfloat16 has float32's range and needs none.
parallel::LossScaling case_loss_scaling(DataType model_type);
// The scale a case's steps run with: case_loss_scaling's initial scale, or 1 without scaling.
double case_loss_scale(DataType model_type);

// The reference of the GPT cases: `config`'s model on one device, the whole batch of `rows`,
// `steps` steps of case_adamw (16 bits: float32 masters and state, the loss multiplied by
// case_loss_scale). Each step's loss, the first step's gradients, the parameters and state after
// the last step, and where they started. Trained on comm's rank 0 alone and sent to the others
// (broadcast_from_first). Collective.
struct SingleDeviceRun {
  std::vector<double> losses;
  parallel::ParameterValues gradients, values, origin;
};
SingleDeviceRun single_device_gpt(Communicator& comm, const model::GptConfig& config, std::int64_t rows, int steps);

struct TrainingCase {
  // From the registry (parallel/techniques): dp, dp_accumulation, zero1-3, ps_one_worker, ps_async.
  const parallel::Technique* technique = &parallel::find_technique("dp");
  std::string optimizer = "adamw"; // adamw, sgd (momentum 0.9), sgd_plain
  // float64, float32, or mixed precision: bfloat16 or float16 parameters and gradients with
  // float32 master weights and state (float16 with its loss scaled).
  std::string precision = "float64";
  std::string model = "gpt";       // gpt (tied, dropout), mlp
  int steps = 3;
  std::int64_t global_batch = 10;
  int micro_batches = 1;
  // A deliberate bug, to show the checks catch it: "local_normalizer" (each rank averages its
  // own rows: uneven shards weighted wrongly), "shifted_rows" (rank 0 trains on its
  // neighbour's first row); and small ones: "scaled_gradient" (rank 0's gradient of step 1
  // scaled by 1 + 1e-3), "dropped_micro_batch" (rank 0 skips one micro-batch of step 1).
  std::string fault;
  // "training/zero2/adamw/float32/gpt"
  std::string name() const;
};

// The cases at world size n: every technique x {adamw, sgd} x {float64, float32} on the GPT;
// every stage in mixed precision (bfloat16, float16) on the GPT; the parameter server with one
// worker (n >= 2) and with several (n >= 3).
std::vector<TrainingCase> training_grid(int world_size);

struct TrainingResult {
  double error = 0;        // largest relative difference of parameters (or state) found
  double bound = 0;        // tolerance::training_relative_bound for the case
  std::string compared;    // what was compared with what
  double bytes_sent = 0;   // by this rank in the last step (the mean over ranks for plain DP)
  double bytes_formula = 0;
  double first_loss = 0, last_loss = 0;
  // Pipeline and context cases: every step's loss against one device's (pipelines fold it into
  // `error`), and the first step's gradients (tolerance::gradient_relative_bound); NaN where not
  // compared.
  double loss_error = NAN, gradient_error = NAN, gradient_bound = NAN;
  double max_staleness = 0;  // parameter server only
  // Mixed precision: the master weights against float64 training from the same start
  // (tolerance::mixed_precision_relative_bound); -1 otherwise.
  double float64_error = -1, float64_bound = 0;
  bool passed = false;
  std::string message;
};

// Runs the case on every rank of comm (collectively); every rank returns the same result. Data
// parallelism and ZeRO train in comm's memory space (a GPU's, for a device communicator); the
// parameter server trains on the host (its protocol polls any worker, which needs MPI).
TrainingResult run_training_case(Communicator& comm, const TrainingCase& c);
bool runs_on_host(const TrainingCase& c);

// The parameter server's run on one device: each gradient recomputed from the parameters of
// the version its worker used, on the same batch, applied in `order` (the server's log). With
// the server's own order it equals the server's parameters bit for bit.
parallel::ParameterValues replay_parameter_server(const TrainingCase& c,
                                                  const std::vector<parallel::ParameterServerUpdate>& order);

}  // namespace parity::cases
