// Pipeline parallelism under GoogleTest, every rank of the world a stage (or the schedule's
// chunks): every case of cases::pipeline_grid at this world size (suite "pipeline") against the
// single-device run; stages balanced by parameters; schedules the executor cannot run refused
// before any rank sends.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "correctness/cases/compare.hpp"
#include "correctness/cases/pipeline.hpp"
#include "correctness/mpi_test.hpp"
#include "reference/core/error.hpp"
#include "reference/core/tolerance.hpp"
#include "reference/model/model.hpp"
#include "reference/parallel/batches.hpp"
#include "reference/parallel/pipeline/executor.hpp"
#include "reference/parallel/techniques/techniques.hpp"
#include "reference/theory/model.hpp"

namespace parity::test {
namespace {

void register_grid(Communicator& comm) {
  // The largest error / bound of the first step's gradients and of the parameters after the
  // steps, per precision, for the tightness test that runs after the grid.
  static BoundRatios ratios;
  register_cases<cases::PipelineCase>("pipeline", cases::pipeline_grid(comm.size()), [](Communicator& world, const auto& c) {
    const cases::TrainingResult r = cases::run_pipeline_case(world, c);
    verbose(world, "%s: error %.3g bound %.3g gradients %.3g bound %.3g loss %.4g -> %.4g | %s\n", c.name().c_str(), r.error,
            r.bound, r.gradient_error, r.gradient_bound, r.first_loss, r.last_loss, r.message.c_str());
    EXPECT_TRUE(r.passed) << c.name() << ": " << r.message;
    ratios.note("gradients/" + c.precision, r.gradient_error, r.gradient_bound, world.size());
    ratios.note("parameters/" + c.precision, r.error, r.bound, world.size());
  });
  register_bound_tightness("pipeline_bounds", ratios, tolerance::kTrainingBoundSlack);
}
const bool registered = add_registrar(register_grid);

namespace pp = parallel::pipeline;

// A trainer of `m` (built from `config`) on one rank: 4 sequences a step in 2 micro-batches,
// scheduled as one 1F1B stage holding the whole model when `pipelined`, else as the plain step.
parallel::Trainer one_stage_trainer(Communicator& comm, model::Model& m, const model::Optimizer& optimizer,
                                    const model::GptConfig& config, bool pipelined) {
  parallel::DataParallelConfig dp;
  dp.global_batch = 4;
  dp.micro_batches = 2;
  parallel::StepParts parts = parallel::make_data_parallel_parts(comm, m, optimizer, dp);
  if (pipelined)
    parts.schedule = std::make_unique<pp::Executor>(
        comm, pp::one_f_one_b(1, 2), std::vector<int>{static_cast<int>(m.layers().size())},
        [config](std::int64_t rows) { return Shape{rows, config.sequence, config.hidden}; }, config.dtype);
  return parallel::Trainer(m, comm, dp.global_batch, dp.micro_batches, std::move(parts));
}

TEST(PipelineStages, BalancedByParameters) {
  using R = std::vector<model::LayerRange>;
  const auto ranges = [](const R& r) {
    std::vector<std::pair<int, int>> out;
    for (const auto& x : r) out.emplace_back(x.begin, x.end);
    return out;
  };
  // The largest stage as small as it can be.
  EXPECT_EQ(ranges(pp::balance_stages({5, 1, 1, 1, 1, 1}, 2)), (std::vector<std::pair<int, int>>{{0, 1}, {1, 6}}));
  EXPECT_EQ(ranges(pp::balance_stages({1, 1, 1, 1}, 4)), (std::vector<std::pair<int, int>>{{0, 1}, {1, 2}, {2, 3}, {3, 4}}));
  EXPECT_EQ(ranges(pp::balance_stages({2, 2, 2, 2, 2, 2}, 3)), (std::vector<std::pair<int, int>>{{0, 2}, {2, 4}, {4, 6}}));
  // Ties: earlier stages smaller.
  EXPECT_EQ(ranges(pp::balance_stages({1, 1, 1}, 2)), (std::vector<std::pair<int, int>>{{0, 1}, {1, 3}}));
  EXPECT_EQ(ranges(pp::balance_stages({1, 1, 1, 1, 1}, 3)), (std::vector<std::pair<int, int>>{{0, 1}, {1, 3}, {3, 5}}));
  EXPECT_THROW(pp::balance_stages({1, 1}, 3), UsageError);  // more stages than layers
}

TEST_F(MpiTest, ExecutorRefusesWhatItCannotRun) {
  const auto boundary = [](std::int64_t rows) { return Shape{rows, 4}; };
  const int p = comm().size();
  // A schedule for another number of ranks.
  EXPECT_THROW(pp::Executor(comm(), pp::one_f_one_b(p + 1, 2), std::vector<int>(static_cast<std::size_t>(p + 1), 1),
                            boundary, DataType::float64),
               UsageError);
  // A model split into another number of stages than the schedule's.
  EXPECT_THROW(pp::Executor(comm(), pp::zb_h1(p, 2), std::vector<int>(static_cast<std::size_t>(p + 1), 1), boundary,
                            DataType::float64),
               UsageError);
  // A broken schedule: refused by the validator before any message.
  pp::Schedule broken = pp::one_f_one_b(p, 2);
  std::swap(broken.ranks.back().front(), broken.ranks.back().back());
  EXPECT_THROW(pp::Executor(comm(), broken, std::vector<int>(static_cast<std::size_t>(p), 1), boundary, DataType::float64),
               UsageError);
  // Message tags: a micro-batch's activation and gradient for each stage, 2 p m tags numbered
  // from 0, and MPI guarantees tags up to 32767 (MPI_TAG_UB >= 32767): p m = 16384 (the largest
  // tag exactly 32767) is within, one micro-batch more is not.
  const int m = 16384 / p;
  EXPECT_NO_THROW(pp::Executor(comm(), pp::gpipe(p, m), std::vector<int>(static_cast<std::size_t>(p), 1), boundary,
                               DataType::float64));
  EXPECT_THROW(pp::Executor(comm(), pp::gpipe(p, m + 1), std::vector<int>(static_cast<std::size_t>(p), 1), boundary,
                            DataType::float64),
               UsageError);
}

TEST_F(MpiTest, APipelinedStepsLossHoldsTheExpertsBalancingLoss) {
  // The step's loss is the model's loss plus the auxiliary losses its layers raise (an MoE
  // block's load-balancing loss), however the step is scheduled: one rank running the model as
  // a one-stage 1F1B pipeline reports the loss the plain step reports, to a few float64
  // roundings of the sum. The balancing term is made large enough to matter.
  if (comm().size() != 1) GTEST_SKIP() << "one rank: the same model whole and as one pipeline stage";
  model::GptConfig config = cases::case_gpt_config(DataType::float64);
  config.moe.layers = {0};
  config.moe.balance_coefficient = 0.5;
  const auto step_loss = [&](bool pipelined, double coefficient) {
    config.moe.balance_coefficient = coefficient;
    auto m = model::build_gpt(config);
    const auto optimizer = cases::case_adamw(config.dtype);
    parallel::Trainer trainer = one_stage_trainer(comm(), *m, *optimizer, config, pipelined);
    return trainer.step(parallel::batches_of(config), 0).loss;
  };
  const double plain = step_loss(false, 0.5), piped = step_loss(true, 0.5), without = step_loss(false, 0);
  const double bound = tolerance::gamma(16, unit_roundoff(DataType::float64)) * std::abs(plain);
  EXPECT_GT(std::abs(plain - without), 1000 * bound) << "the balancing loss is part of the step's loss";
  EXPECT_NEAR(piped, plain, bound);
}

TEST_F(MpiTest, AForwardKeepsWhatItsLayersSave) {
  // The bytes each forward keeps until its backward (the timeline's kept_bytes, what bench
  // pipeline's peak formula is built from), to the byte. A stage of blocks alone keeps
  // theory::parity_block_activation_bytes per block: its received input stands in the first
  // block for the output it sends on. The first and last stages hold the embedding, the final
  // LayerNorm and the head as well and are not checked here.
  cases::PipelineCase c;
  c.schedule = "1f1b";
  c.micro_batches = 2 * comm().size();
  c.rows_per_micro_batch = 2;
  const std::unique_ptr<cases::PipelineSetup> setup = cases::setup_pipeline_case(comm(), c);
  setup->executor->record_timeline(true);
  setup->trainer->step(parallel::batches_of(setup->config), 0);
  const std::vector<model::LayerRange> stages = pp::balance_stages(setup->layer_parameters, comm().size());
  const auto whole = model::build_gpt(setup->config);
  const std::int64_t per_block = theory::parity_block_activation_bytes(setup->config, c.rows_per_micro_batch);
  double checked = 0;
  for (const pp::Event& e : setup->executor->timeline()) {
    if (e.wait || e.action.work != pp::Work::forward) continue;
    const model::LayerRange& range = stages[static_cast<std::size_t>(e.action.stage)];
    bool blocks_alone = true;
    for (int i = range.begin; i < range.end; ++i)
      blocks_alone = blocks_alone && std::string(whole->layers()[static_cast<std::size_t>(i)]->kind()) == "block";
    if (!blocks_alone) continue;
    EXPECT_EQ(e.kept_bytes, (range.end - range.begin) * per_block)
        << "stage " << e.action.stage << ", micro-batch " << e.action.micro_batch << ": " << range.end - range.begin << " blocks";
    ++checked;
  }
  checked = cases::sum_over_ranks(comm(), checked);
  if (comm().size() < 3) GTEST_SKIP() << "at " << comm().size() << " ranks every stage holds the embedding or the head";
  EXPECT_GT(checked, 0) << "no stage held blocks alone";
}

TEST_F(MpiTest, AFailingActionIsNamedWithItsRank) {
  // The error a stage raises comes out naming the rank and the action; the job is then ended by
  // whoever catches it (parity aborts every rank). At one rank nothing else waits on it.
  if (comm().size() != 1) GTEST_SKIP() << "one rank: elsewhere the others would wait for the failed stage's messages";
  model::GptConfig config = cases::case_gpt_config(DataType::float64);
  auto m = model::build_gpt(config);
  const auto optimizer = cases::case_adamw(config.dtype);
  parallel::Trainer trainer = one_stage_trainer(comm(), *m, *optimizer, config, true);
  m->layers()[2]->add_hook([](model::Layer& layer, model::HookPoint point, const model::PassContext& context) {
    if (point == model::HookPoint::before_backward && context.micro_batch == 1) throw Error(layer.name() + " failed");
  });
  try {
    trainer.step(parallel::batches_of(config), 0);
    ADD_FAILURE() << "the failing backward went unnoticed";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("pipeline rank 0, action 0B1 (stage 0, micro-batch 1): blocks.1 failed"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace parity::test
