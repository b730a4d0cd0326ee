// Mixed precision under GoogleTest, on real ranks: float32 master weights that keep updates
// below half a 16-bit ulp, loss scaling (exact where nothing overflows, a step skipped on every
// rank when any rank's gradients overflow, under data, tensor and pipeline parallelism, the
// scale halved and grown again, the count of clean steps restarted by a skip, float16 without
// it stopped with the step named) and bad settings.
#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "correctness/cases/compare.hpp"
#include "correctness/cases/pipeline.hpp"
#include "correctness/cases/tensor.hpp"
#include "correctness/cases/training.hpp"
#include "correctness/mpi_test.hpp"
#include "correctness/thrown.hpp"
#include "reference/core/error.hpp"
#include "reference/parallel/grid.hpp"
#include "reference/parallel/precision/precision.hpp"
#include "reference/parallel/techniques/techniques.hpp"
#include "reference/parallel/tensor/tensor_parallel.hpp"

namespace parity::test {
namespace {

class LossScalingTest : public MpiTest {};

parallel::DataParallelConfig mixed_config(int stage, int world, bool dynamic, double initial_scale) {
  parallel::DataParallelConfig c;
  c.zero_stage = stage;
  c.global_batch = 2 * world;
  c.bucket_bytes = 4096;
  c.precision = parallel::Precision::mixed;
  c.loss_scaling.dynamic = dynamic;
  c.loss_scaling.initial_scale = initial_scale;
  c.loss_scaling.growth_interval = 1000;
  return c;
}

// Every rank's master weights, whole, as one list.
std::vector<double> masters(parallel::Trainer& trainer) {
  std::vector<double> out;
  for (const auto& v : trainer.gathered(true).values) out.insert(out.end(), v.begin(), v.end());
  return out;
}

// Whether `flag` is the same on every rank.
bool agreed(Communicator& comm, bool flag) {
  const double mine = flag ? 1 : 0;
  return cases::max_over_ranks(comm, mine) == -cases::max_over_ranks(comm, -mine);
}

// Multiplying the loss by a power of two multiplies every gradient by it exactly (each rounding
// commutes with it while no number leaves bfloat16's range), and the optimizer divides it out
// exactly: training with a scale equals training without, bit for bit. Forgetting to unscale a
// part, unscaling twice, or scaling the loss but not what a layer adds to it fails this.
TEST_F(LossScalingTest, ScalingIsExactWhereNothingOverflows) {
  const model::GptConfig g = cases::case_gpt_config(DataType::bfloat16);
  for (int stage : {0, 2}) {
    std::vector<double> losses[2], values[2];
    for (int scaled = 0; scaled < 2; ++scaled) {
      auto m = model::build_gpt(g);
      auto adamw = cases::case_adamw(DataType::float32);
      auto trainer = parallel::make_trainer(comm(), *m, *adamw, mixed_config(stage, comm().size(), scaled == 1, 0x1p12));
      for (int step = 0; step < 3; ++step) {
        const parallel::StepStats s = trainer->step(parallel::batches_of(g), step);
        EXPECT_EQ(s.loss_scale, scaled ? 0x1p12 : 1.0);
        EXPECT_FALSE(s.skipped);
        losses[scaled].push_back(s.loss);
      }
      values[scaled] = masters(*trainer);
    }
    EXPECT_EQ(losses[0], losses[1]) << "ZeRO stage " << stage;
    ASSERT_EQ(values[0].size(), values[1].size());
    std::size_t differing = 0;
    for (std::size_t i = 0; i < values[0].size(); ++i) differing += values[0][i] == values[1][i] ? 0 : 1;
    EXPECT_EQ(differing, 0u) << "ZeRO stage " << stage << ": master weights differing with a loss scale of 2^12";
  }
}

// A scale too large for float16 makes every gradient overflow: the step is skipped on every
// rank (parameters unchanged bit for bit), the scale halves, and so on until a step is clean.
TEST_F(LossScalingTest, OverflowSkipsTheStepAndHalvesTheScale) {
  const model::GptConfig g = cases::case_gpt_config(DataType::float16);
  for (int stage : {0, 3}) {
    auto m = model::build_gpt(g);
    auto adamw = cases::case_adamw(DataType::float32);
    auto trainer = parallel::make_trainer(comm(), *m, *adamw, mixed_config(stage, comm().size(), true, 0x1p40));
    std::vector<double> before = masters(*trainer);
    double scale = 0x1p40;
    int skipped = 0;
    for (int step = 0; step < 40; ++step) {
      const parallel::StepStats s = trainer->step(parallel::batches_of(g), step);
      EXPECT_TRUE(agreed(comm(), s.skipped)) << "step " << step;
      EXPECT_EQ(s.loss_scale, scale) << "step " << step;
      const std::vector<double> after = masters(*trainer);
      if (!s.skipped) {
        EXPECT_NE(after, before) << "a clean step changes the parameters";
        EXPECT_EQ(trainer->loss_scale(), scale);
        break;
      }
      ++skipped;
      EXPECT_EQ(after, before) << "step " << step << " was skipped but changed the parameters";
      scale /= 2;
      EXPECT_EQ(trainer->loss_scale(), scale) << "step " << step;
    }
    // dL/dlogits is up to scale / (rows x tokens) and float16 ends at 65504: 2^40 overflows.
    EXPECT_GE(skipped, 10) << "ZeRO stage " << stage;
    EXPECT_LT(scale, 0x1p40);
  }
}

// Writes inf into one gradient element of one rank after the gradients are synchronised: only
// that rank sees it, and the decision to skip must still be every rank's.
class OneRankOverflows : public parallel::GradientSync {
 public:
  OneRankOverflows(Communicator& comm, model::Parameter* p, std::uint64_t step) : comm_(comm), p_(p), step_(step) {}
  std::string describe() const override { return "inf in one gradient element of the last rank"; }
  void begin_step() override { ++current_; }
  void finish() override {
    if (current_ != step_ + 1 || comm_.rank() != comm_.size() - 1) return;
    Tensor g = p_->gradient();
    Tensor host = g.to(MemorySpace::host, "inf", MemoryCategory::workspace);
    host.data<float16_t>()[0] = from_double<float16_t>(std::numeric_limits<double>::infinity());
    copy_into(g, host);
  }

 private:
  Communicator& comm_;
  model::Parameter* p_;
  std::uint64_t step_, current_ = 0;
};

// Steps 0 to 2 with inf written into one gradient element of the world's last rank at step 1
// (after the trainer's synchronisations): every rank skips step 1, its masters unchanged and
// the scale halved from `scale`, and trains on at steps 0 and 2.
void expect_one_ranks_overflow_skipped(Communicator& world, parallel::Trainer& trainer, model::Parameter* poisoned,
                                       const parallel::BatchSource& source, double scale, const std::string& what) {
  trainer.add_sync(std::make_unique<OneRankOverflows>(world, poisoned, 1));
  EXPECT_FALSE(trainer.step(source, 0).skipped) << what;
  const std::vector<double> before = masters(trainer);
  const parallel::StepStats second = trainer.step(source, 1);
  EXPECT_TRUE(second.skipped) << what << ": rank " << world.rank() << " did not skip the step another rank overflowed in";
  EXPECT_EQ(second.loss_scale, scale) << what;
  EXPECT_EQ(masters(trainer), before) << what << ": a skipped step changed the masters";
  EXPECT_EQ(trainer.loss_scale(), scale / 2) << what;
  const parallel::StepStats third = trainer.step(source, 2);
  EXPECT_FALSE(third.skipped) << what;
  EXPECT_EQ(third.loss_scale, scale / 2) << what;
  EXPECT_NE(masters(trainer), before) << what;
}

// The count every rank agrees on: the inf and NaN elements summed over the job, and how many
// ranks hold some (what the overflow line's "on K of N ranks" says). Rank r holds r of them
// (an inf, then NaNs) in its first buffer and rank 1 one more in its second, so ranks 1 .. n-1
// hold some and n (n - 1) / 2 + 1 elements are found (none at one rank).
TEST_F(LossScalingTest, NonfiniteGradientsAreCountedOverTheJob) {
  const int n = comm().size(), r = comm().rank();
  ASSERT_LE(n, 9) << "eight elements in the first buffer";  // the same on every rank: none goes on alone
  std::vector<float> first(8, 1.0f), second(5, -2.0f);
  for (int i = 0; i < r; ++i)
    first[static_cast<std::size_t>(i)] = i == 0 ? std::numeric_limits<float>::infinity() : std::numeric_limits<float>::quiet_NaN();
  if (r == 1) second[4] = -std::numeric_limits<float>::infinity();  // and one in the second buffer
  const parallel::NonfiniteGradients found = parallel::find_nonfinite(
      comm(), {{first.data(), first.size(), DataType::float32, MemorySpace::host},
               {second.data(), second.size(), DataType::float32, MemorySpace::host}});
  EXPECT_EQ(found.elements, n * (n - 1) / 2.0 + (n > 1 ? 1 : 0));
  EXPECT_EQ(found.ranks, n - 1);
  EXPECT_EQ(found.job_ranks, n);
  EXPECT_EQ(found.found(), n > 1);
}

TEST_F(LossScalingTest, OneRanksOverflowSkipsTheStepOnEveryRank) {
  const model::GptConfig g = cases::case_gpt_config(DataType::float16);
  auto m = model::build_gpt(g);
  auto adamw = cases::case_adamw(DataType::float32);
  auto trainer = parallel::make_trainer(comm(), *m, *adamw, mixed_config(0, comm().size(), true, 0x1p8));
  expect_one_ranks_overflow_skipped(comm(), *trainer, m->parameters().front(), parallel::batches_of(g), 0x1p8, "dp");
}

// Under tensor parallelism (tp 2 with sequence parallelism, dp over the rest) the ranks of a
// tp group hold different shards: the decision is the whole world's, not the dp group's.
TEST_F(LossScalingTest, OneRanksOverflowSkipsTheStepUnderTensorParallelism) {
  if (comm().size() % 2 != 0) GTEST_SKIP() << "tp 2 needs an even world";
  const model::GptConfig g = cases::tensor_case_model(DataType::float16);
  parallel::GridSpec spec;
  spec.set(parallel::Axis::tp, 2).set(parallel::Axis::dp, comm().size() / 2);
  parallel::Grid grid(comm(), spec);
  parallel::TensorParallelConfig tc;
  tc.sequence_parallel = true;
  const parallel::TensorParallel tp(grid.group(parallel::Axis::tp), tc);
  auto m = parallel::build_tensor_parallel_gpt(g, tp);
  auto adamw = cases::case_adamw(DataType::float32);
  auto trainer = parallel::make_tensor_parallel_trainer(grid, tp, *m, *adamw,
                                                        mixed_config(0, grid.size(parallel::Axis::dp), true, 0x1p8));
  expect_one_ranks_overflow_skipped(comm(), *trainer, m->parameters().front(), parallel::batches_of(g), 0x1p8, "tp 2");
}

// Under pipeline parallelism (1F1B over every rank) each rank holds its own stage: an overflow
// in the last stage skips the step on the first.
TEST_F(LossScalingTest, OneRanksOverflowSkipsTheStepUnderPipelineParallelism) {
  if (comm().size() < 2) GTEST_SKIP() << "a pipeline needs 2 ranks or more";
  cases::PipelineCase c;
  c.schedule = "1f1b";
  c.micro_batches = 2 * comm().size();
  c.precision = "float16";
  const auto setup = cases::setup_pipeline_case(comm(), c);
  parallel::Trainer& trainer = *setup->trainer;
  expect_one_ranks_overflow_skipped(comm(), trainer, setup->model->parameters().front(),
                                    parallel::batches_of(setup->config), trainer.loss_scale(), "pipeline 1f1b");
}

// Why mixed precision keeps float32 master weights (Micikevicius et al. 2018): an update below
// half a 16-bit ulp of its parameter would round away, step after step. With SGD at a small
// learning rate on one fixed batch (so that the gradients barely change between steps), most
// bfloat16 parameters keep their value over two steps while the masters move twice as far as
// after one (within 0.05: the second step's gradients differ from the first's by what one step
// of lr 1e-4 changes them; measured 1.997 at 2 ranks). Masters re-read from the 16-bit values
// each step move about as far after two steps as after one (measured 1.25).
TEST_F(LossScalingTest, MasterWeightsKeepUpdatesBelowHalfAnUlp) {
  const model::GptConfig g = cases::case_gpt_config(DataType::bfloat16);
  const parallel::BatchSource plain = parallel::batches_of(g);
  const parallel::BatchSource fixed = [plain](std::uint64_t, std::int64_t first, std::int64_t rows, std::int64_t global) {
    return plain(0, first, rows, global);
  };
  for (int stage : {0, 3}) {
    auto m = model::build_gpt(g);
    const model::Sgd sgd(model::SgdConfig{1e-4}, DataType::float32);
    auto trainer = parallel::make_trainer(comm(), *m, sgd, mixed_config(stage, comm().size(), false, 1));
    const auto values = [&] {
      std::vector<double> out;
      for (const auto& v : trainer->gathered(false).values) out.insert(out.end(), v.begin(), v.end());
      return out;
    };
    const std::vector<double> start = masters(*trainer), start_values = values();
    trainer->step(fixed, 0);
    const std::vector<double> one = masters(*trainer);
    trainer->step(fixed, 1);
    const std::vector<double> two = masters(*trainer), two_values = values();
    ASSERT_EQ(two.size(), start.size());
    double moved_one = 0, moved_two = 0;
    std::size_t kept = 0;
    for (std::size_t i = 0; i < start.size(); ++i) {
      moved_one += std::abs(one[i] - start[i]);
      moved_two += std::abs(two[i] - start[i]);
      kept += two_values[i] == start_values[i] ? 1 : 0;
    }
    const double kept_fraction = static_cast<double>(kept) / static_cast<double>(start.size());
    EXPECT_GT(kept_fraction, 0.5) << "stage " << stage << ": the updates are meant to be below half an ulp";
    EXPECT_NEAR(moved_two / moved_one, 2.0, 0.05) << "stage " << stage << ": the masters did not accumulate "
                                                   << "(" << kept_fraction << " of the 16-bit values unchanged)";
  }
}

// A skipped step restarts the count of clean steps: with an interval of 3 and an overflow at
// step 1 (after one clean step), the scale halves there and doubles only after steps 2, 3 and
// 4, not after the third clean step counted across the skip.
TEST_F(LossScalingTest, SkippedStepRestartsTheCleanCount) {
  const model::GptConfig g = cases::case_gpt_config(DataType::float16);
  auto m = model::build_gpt(g);
  auto adamw = cases::case_adamw(DataType::float32);
  parallel::DataParallelConfig c = mixed_config(0, comm().size(), true, 0x1p8);
  c.loss_scaling.growth_interval = 3;
  auto trainer = parallel::make_trainer(comm(), *m, *adamw, c);
  trainer->add_sync(std::make_unique<OneRankOverflows>(comm(), m->parameters().front(), 1));
  const std::vector<double> expected = {0x1p8, 0x1p8, 0x1p7, 0x1p7, 0x1p7, 0x1p8};
  for (std::size_t step = 0; step < expected.size(); ++step) {
    const parallel::StepStats stats = trainer->step(parallel::batches_of(g), step);
    EXPECT_EQ(stats.loss_scale, expected[step]) << "step " << step;
    EXPECT_EQ(stats.skipped, step == 1) << "step " << step;
  }
}

// After `growth_interval` clean steps in a row the scale doubles.
TEST_F(LossScalingTest, ScaleGrowsAfterCleanSteps) {
  const model::GptConfig g = cases::case_gpt_config(DataType::bfloat16);
  auto m = model::build_gpt(g);
  auto adamw = cases::case_adamw(DataType::float32);
  parallel::DataParallelConfig c = mixed_config(1, comm().size(), true, 16);
  c.loss_scaling.growth_interval = 2;
  auto trainer = parallel::make_trainer(comm(), *m, *adamw, c);
  const std::vector<double> expected = {16, 16, 32, 32, 64};
  for (int step = 0; step < 5; ++step)
    EXPECT_EQ(trainer->step(parallel::batches_of(g), step).loss_scale, expected[static_cast<std::size_t>(step)])
        << "step " << step;
  EXPECT_EQ(trainer->loss_scale(), 64);  // one clean step at 64 so far
}

// float16 gradients that overflow without loss scaling: every rank stops with the step named.
TEST_F(LossScalingTest, Float16OverflowWithoutScalingNamesTheStep) {
  const model::GptConfig g = cases::case_gpt_config(DataType::float16);
  auto m = model::build_gpt(g);
  auto adamw = cases::case_adamw(DataType::float32);
  auto trainer = parallel::make_trainer(comm(), *m, *adamw, mixed_config(0, comm().size(), false, 0x1p16));
  const parallel::BatchSource plain = parallel::batches_of(g);
  // Step 2's loss divided by 2^-30 of its count: its gradients leave float16's range.
  const parallel::BatchSource overflowing = [plain](std::uint64_t step, std::int64_t first, std::int64_t rows,
                                                    std::int64_t global) {
    model::Batch b = plain(step, first, rows, global);
    if (step == 2) b.normalizer *= 0x1p-30;
    return b;
  };
  EXPECT_NO_THROW(trainer->step(overflowing, 0));
  EXPECT_NO_THROW(trainer->step(overflowing, 1));
  const std::string message = message_of<Error>([&] { trainer->step(overflowing, 2); });
  EXPECT_NE(message.find("step 2:"), std::string::npos) << message;
  EXPECT_NE(message.find("inf or NaN"), std::string::npos) << message;
  EXPECT_NE(message.find("dynamic loss scaling"), std::string::npos) << message;
}

TEST_F(LossScalingTest, RefusesBadSettings) {
  const model::GptConfig g = cases::case_gpt_config(DataType::float32);
  auto m = model::build_gpt(g);
  auto adamw = cases::case_adamw(DataType::float32);
  parallel::DataParallelConfig c;
  c.global_batch = 2 * comm().size();
  c.loss_scaling.dynamic = true;
  EXPECT_NE(message_of<UsageError>([&] { parallel::make_trainer(comm(), *m, *adamw, c); }).find("--precision mixed"),
            std::string::npos);
  parallel::LossScaling s;
  s.initial_scale = 1000;
  EXPECT_NE(message_of<UsageError>([&] { s.validate(); }).find("power of two"), std::string::npos);
  s.initial_scale = 0x1p101;
  EXPECT_THROW(s.validate(), UsageError);
  s.initial_scale = std::numeric_limits<double>::quiet_NaN();
  EXPECT_THROW(s.validate(), UsageError);
  s.initial_scale = 0x1p-25;
  EXPECT_THROW(s.validate(), UsageError);
  s.initial_scale = 0x1p-24;
  EXPECT_NO_THROW(s.validate());
  s.growth_interval = 0;
  EXPECT_NE(message_of<UsageError>([&] { s.validate(); }).find("growth interval"), std::string::npos);
}

}  // namespace
}  // namespace parity::test
