// Data parallelism, accumulation, ZeRO 1-3 and the parameter server under GoogleTest: every
// case of cases::training_grid at this world size (suite "training", test name = case name,
// as `parity check` names them), the communication stream, and bad input.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "correctness/cases/compare.hpp"
#include "correctness/cases/training.hpp"
#include "correctness/mpi_test.hpp"
#include "correctness/thrown.hpp"
#include "reference/comm/stream.hpp"
#include "reference/core/error.hpp"
#include "reference/core/tolerance.hpp"
#include "reference/parallel/data/data_parallel.hpp"
#include "reference/parallel/data/parameter_server.hpp"
#include "reference/parallel/techniques/techniques.hpp"
#include "reference/theory/parallel.hpp"

namespace parity::test {
namespace {

void register_grid(Communicator& comm) {
  // The largest error / bound per optimizer and precision ("adamw/float64"), for the tightness
  // test that runs after the grid.
  static BoundRatios ratios;
  register_cases<cases::TrainingCase>("training", cases::training_grid(comm.size()), [](Communicator& world, const auto& c) {
    const cases::TrainingResult r = cases::run_training_case(world, c);
    verbose(world, "%s: error %.3g bound %.3g bytes %.0f/%.0f | %s\n", c.name().c_str(), r.error, r.bound, r.bytes_sent,
            r.bytes_formula, r.message.c_str());
    EXPECT_TRUE(r.passed) << c.name() << ": " << r.message;
    ratios.note(c.optimizer + "/" + c.precision, r.error, r.bound, world.size());
    // Against float64 the error is not zero at one rank either (note() skips one rank, where
    // the other comparisons are with the run itself): counted at every world size.
    if (r.float64_error >= 0)
      ratios.note(c.optimizer + "/" + c.precision + " against float64", r.float64_error, r.float64_bound,
                    std::max(world.size(), 2));
  });
  register_bound_tightness("training_bounds", ratios, tolerance::kTrainingBoundSlack);
}
const bool registered = add_registrar(register_grid);

class DataParallelTest : public MpiTest {};

// The checks can fail: realistic bugs are caught by the parameter comparison.
TEST_F(DataParallelTest, CatchesWronglyWeightedShardsAndWrongRows) {
  if (comm().size() < 2) GTEST_SKIP() << "needs two ranks (one rank has no shards to get wrong)";
  for (const char* fault : {"local_normalizer", "shifted_rows"}) {
    cases::TrainingCase c;
    c.technique = &parallel::find_technique("zero2");
    c.precision = "float64";
    c.global_batch = 2 * comm().size() + 1;  // uneven shards
    c.fault = fault;
    const cases::TrainingResult r = cases::run_training_case(comm(), c);
    EXPECT_FALSE(r.passed) << fault;
    EXPECT_GT(r.error, 1e3 * r.bound) << fault << ": " << r.message;
  }
}

// Small, realistic faults are rejected too, not only ones a thousand times over the bound: one
// rank's gradient of one step off by 1e-3, one micro-batch of one step skipped.
// The single-device reference is trained on rank 0 and sent: every rank ends with rank 0's
// names, values and state, whatever it held; a list without state stays without.
TEST_F(DataParallelTest, TheReferenceReachesEveryRankWhole) {
  const int rank = comm().rank();
  parallel::ParameterValues v, bare;
  std::vector<double> losses(static_cast<std::size_t>(rank + 1), -rank);
  if (rank == 0) {
    v.names = {"wte", "h.0.ln_1.bias", "empty"};
    v.values = {{1.5, -2, 3}, {0.25}, {}};
    v.state = {{{7, 8, 9}, {-1, -2, -3}}, {{4}, {5}}, {{}, {}}};
    bare.names = {"w"};
    bare.values = {{6, 7}};
    losses = {2.5, 2.25, 2.0};
  } else {
    v.names = {"garbage"};
    v.values = {{static_cast<double>(rank)}};
    v.state = {{{1}}};
    bare = v;
  }
  cases::broadcast_from_first(comm(), v);
  cases::broadcast_from_first(comm(), bare);
  cases::broadcast_from_first(comm(), losses);
  EXPECT_EQ(v.names, (std::vector<std::string>{"wte", "h.0.ln_1.bias", "empty"}));
  EXPECT_EQ(v.values, (std::vector<std::vector<double>>{{1.5, -2, 3}, {0.25}, {}}));
  EXPECT_EQ(v.state, (std::vector<std::vector<std::vector<double>>>{{{7, 8, 9}, {-1, -2, -3}}, {{4}, {5}}, {{}, {}}}));
  EXPECT_EQ(bare.names, std::vector<std::string>{"w"});
  EXPECT_EQ(bare.values, (std::vector<std::vector<double>>{{6, 7}}));
  EXPECT_TRUE(bare.state.empty());
  EXPECT_EQ(losses, (std::vector<double>{2.5, 2.25, 2.0}));
}

TEST_F(DataParallelTest, CatchesSmallFaults) {
  if (comm().size() < 2) GTEST_SKIP() << "needs two ranks (the faults are on one rank of several)";
  for (const char* technique : {"dp", "zero1", "zero3"})
    for (const char* fault : {"scaled_gradient", "dropped_micro_batch"}) {
      cases::TrainingCase c;
      c.technique = &parallel::find_technique(technique);
      c.precision = "float64";
      c.micro_batches = 2;
      c.global_batch = 4 * comm().size();
      c.fault = fault;
      const cases::TrainingResult r = cases::run_training_case(comm(), c);
      EXPECT_FALSE(r.passed) << technique << " " << fault << ": " << r.message;
      EXPECT_GT(r.error, r.bound) << technique << " " << fault;
    }
}

// Every ZeRO stage accumulates micro-batches as plain data parallelism does (the grid's ZeRO
// cases take one micro-batch a step), in float64: stage 2 adds each micro-batch's reduce-scattered chunk
// into the rank's gradient shard, stage 3 gathers the parameters for every micro-batch's passes.
TEST_F(DataParallelTest, EveryZeroStageAccumulatesMicroBatches) {
  for (const char* technique : {"zero1", "zero2", "zero3"}) {
    cases::TrainingCase c;
    c.technique = &parallel::find_technique(technique);
    c.micro_batches = 2;
    c.global_batch = 4 * comm().size();
    const cases::TrainingResult r = cases::run_training_case(comm(), c);
    EXPECT_TRUE(r.passed) << technique << " with 2 micro-batches: " << r.message;
  }
}

// The parameter server's replay check can fail: the same updates in another order, or one
// worker's updates left out, give other parameters (so a server that applies updates out of
// its logged order, or drops a worker's, differs from its replay).
TEST_F(DataParallelTest, ParameterServerReplayDependsOnTheOrderOfUpdates) {
  cases::TrainingCase c;
  c.technique = &parallel::find_technique("ps_async");
  c.optimizer = "sgd_plain";
  c.model = "mlp";
  using U = parallel::ParameterServerUpdate;
  // Two workers, three steps each; each gradient computed on the version its worker last saw.
  const std::vector<U> logged = {{1, 0, 0}, {2, 1, 0}, {1, 2, 1}, {2, 3, 2}, {1, 4, 3}, {2, 5, 4}};
  std::vector<U> swapped = logged;
  std::swap(swapped[2], swapped[3]);
  const std::vector<U> one_worker = {{1, 0, 0}, {1, 2, 1}, {1, 4, 2}};
  const auto difference = [](const parallel::ParameterValues& a, const parallel::ParameterValues& b) {
    double d = 0;
    for (std::size_t i = 0; i < a.values.size(); ++i)
      for (std::size_t k = 0; k < a.values[i].size(); ++k) d = std::max(d, std::abs(a.values[i][k] - b.values[i][k]));
    return d;
  };
  const parallel::ParameterValues base = cases::replay_parameter_server(c, logged);
  EXPECT_EQ(difference(base, cases::replay_parameter_server(c, logged)), 0.0);  // deterministic
  EXPECT_GT(difference(base, cases::replay_parameter_server(c, swapped)), 0.0);
  EXPECT_GT(difference(base, cases::replay_parameter_server(c, one_worker)), 0.0);
  // A version the server never had is refused.
  EXPECT_THROW(cases::replay_parameter_server(c, {{1, 0, 5}}), Error);
}

TEST_F(DataParallelTest, RefusesBadConfigurations) {
  const int n = comm().size();
  parallel::DataParallelConfig c;
  c.global_batch = 4 * n;
  c.zero_stage = 4;
  EXPECT_NE(message_of<UsageError>([&] { c.validate(n); }).find("ZeRO stage 4 is outside 0-3"), std::string::npos);
  c.zero_stage = -1;
  EXPECT_NE(message_of<UsageError>([&] { c.validate(n); }).find("outside 0-3"), std::string::npos);
  c.zero_stage = 1;
  c.bucket_bytes = 0;
  EXPECT_NE(message_of<UsageError>([&] { c.validate(n); }).find("bucket size must be positive"), std::string::npos);
  c.bucket_bytes = 1024;
  c.global_batch = n - 1;
  if (n > 1) {
    EXPECT_NE(message_of<UsageError>([&] { c.validate(n); }).find("smaller than the world"), std::string::npos);
  }
  c.global_batch = 2 * n;
  c.micro_batches = 3;
  EXPECT_NE(message_of<UsageError>([&] { c.validate(n); }).find("cannot split them into 3 micro-batches"),
            std::string::npos);
  // Uneven shards: with 2n + 1 rows the first rank holds 3 and the others 2, so 3 micro-batches
  // fit the first rank's shard and not the last's: refused for the shard with the fewest rows.
  if (n > 1) {
    c.global_batch = 2 * n + 1;
    EXPECT_NE(message_of<UsageError>([&] { c.validate(n); }).find("cannot split them into 3 micro-batches"),
              std::string::npos);
    c.global_batch = 2 * n;
  }
  c.micro_batches = 1;
  c.all_reduce = "carrier_pigeon";
  EXPECT_THROW(c.validate(n), UsageError);
  c.all_reduce = "ring";
  EXPECT_NO_THROW(c.validate(n));
  // A 16-bit model needs mixed precision, and mixed precision float32 state.
  model::MlpConfig m;
  m.dtype = DataType::bfloat16;
  auto half = model::build_mlp(m);
  model::AdamW fp32_state({}, DataType::float32), fp64_state({}, DataType::float64);
  EXPECT_NE(message_of<UsageError>([&] { parallel::make_trainer(comm(), *half, fp32_state, c); }).find("--precision mixed"),
            std::string::npos);
  c.precision = parallel::Precision::mixed;
  EXPECT_NE(message_of<UsageError>([&] { parallel::make_trainer(comm(), *half, fp64_state, c); }).find("K = 12"),
            std::string::npos);
}

// A trainer's hooks go with it: a model trained again (by another trainer, or alone) runs no
// stale hook.
TEST_F(DataParallelTest, TrainerRemovesItsHooksWhenItGoesAway) {
  model::MlpConfig m;
  auto mlp = model::build_mlp(m);
  model::AdamW adamw({}, DataType::float32);
  const auto layers = model::all_layers(mlp->layers());
  std::vector<std::size_t> before;
  for (const model::Layer* l : layers) before.push_back(l->hook_count());
  for (int stage : {0, 3}) {
    parallel::DataParallelConfig c;
    c.zero_stage = stage;
    c.global_batch = 2 * comm().size();
    auto trainer = parallel::make_trainer(comm(), *mlp, adamw, c);
    trainer->step(parallel::batches_of(m), 0);
    for (std::size_t i = 0; i < layers.size(); ++i) EXPECT_EQ(layers[i]->hook_count(), before[i] + 1) << layers[i]->name();
    trainer.reset();
    for (std::size_t i = 0; i < layers.size(); ++i) EXPECT_EQ(layers[i]->hook_count(), before[i]) << layers[i]->name();
  }
}

// DDP's buckets are filled in backward order (the model's parameters reversed: the last layer's
// gradients are final first, so the first bucket's all-reduce can start while backward goes on),
// and a bucket takes parameters until it holds at least bucket_bytes, then closes: with the
// size set to the last two parameters' bytes exactly, the first bucket holds those two.
TEST_F(DataParallelTest, BucketsFillInBackwardOrderUpToTheirSize) {
  model::MlpConfig m;
  auto mlp = model::build_mlp(m);
  std::vector<const model::Parameter*> order;
  for (const model::Parameter* p : mlp->parameters()) order.push_back(p);
  std::reverse(order.begin(), order.end());
  ASSERT_GE(order.size(), 4u);
  parallel::DataParallelConfig c;
  c.global_batch = comm().size();
  c.bucket_bytes = order[0]->value.bytes() + order[1]->value.bytes();
  parallel::BucketedAllReduce ddp(comm(), *mlp, c);
  const std::vector<std::vector<std::string>> buckets = ddp.bucket_parameters();
  // The same rule, bucket by bucket, over the reversed order.
  std::vector<std::vector<std::string>> expected(1);
  std::size_t held = 0;
  for (const model::Parameter* p : order) {
    if (held >= c.bucket_bytes) {
      expected.emplace_back();
      held = 0;
    }
    expected.back().push_back(p->name);
    held += p->value.bytes();
  }
  EXPECT_EQ(buckets, expected);
  ASSERT_FALSE(buckets.empty());
  EXPECT_EQ(buckets.front(), (std::vector<std::string>{order[0]->name, order[1]->name}));
  EXPECT_GE(buckets.size(), 2u);
}

// The server yields its core only after a run of empty polls, and serving a worker starts the
// run again (it used to count empty polls forever, so a busy server kept yielding).
TEST_F(DataParallelTest, ParameterServerBackoffStartsAgainAfterServing) {
  parallel::PollBackoff backoff(3);
  for (int i = 0; i < 3; ++i) EXPECT_FALSE(backoff.should_yield(false)) << "poll " << i;
  EXPECT_TRUE(backoff.should_yield(false));
  EXPECT_TRUE(backoff.should_yield(false));
  EXPECT_FALSE(backoff.should_yield(true));
  for (int i = 0; i < 3; ++i) EXPECT_FALSE(backoff.should_yield(false)) << "poll " << i << " after serving";
  EXPECT_TRUE(backoff.should_yield(false));
}

TEST_F(DataParallelTest, ParameterServerNeedsAWorker) {
  if (comm().size() != 1) GTEST_SKIP() << "the refusal is for a world of one";
  model::MlpConfig m;
  auto mlp = model::build_mlp(m);
  model::Sgd sgd({0.1, 0, 0}, DataType::float32);
  const parallel::BatchSource source = parallel::batches_of(m);
  EXPECT_NE(message_of<UsageError>([&] { parallel::run_parameter_server(comm(), *mlp, sgd, source, {}); })
                .find("at least two ranks"),
            std::string::npos);
}

TEST_F(DataParallelTest, ShardsCoverTheBatchOnce) {
  for (int world : {1, 2, 3, 8})
    for (std::int64_t rows : {8, 10, 17}) {
      if (rows < world) continue;
      std::int64_t next = 0;
      for (int r = 0; r < world; ++r) {
        const parallel::RowRange s = parallel::batch_shard(rows, r, world);
        EXPECT_EQ(s.first, next);
        EXPECT_GE(s.rows, rows / world);
        EXPECT_LE(s.rows, rows / world + 1);
        next += s.rows;
      }
      EXPECT_EQ(next, rows);
    }
}

// The stream runs queued collectives in order, lets the caller compute between them, and
// reports a failure with the name of the work that failed.
TEST_F(DataParallelTest, StreamRunsCollectivesInOrderAndReportsFailures) {
  CommStream stream(comm());
  const int n = comm().size();
  std::vector<double> a(1000, 1.0), b(1000, 2.0);
  std::vector<int> order;
  const AlgorithmDescriptor& ring = find_algorithm(Collective::all_reduce, "ring");
  auto all_reduce = [&](std::vector<double>& v, int tag) {
    return stream.enqueue("all_reduce " + std::to_string(tag), [&v, &order, &ring, tag](Communicator& c) {
      CollectiveCall call;
      call.send = call.recv = {v.data(), v.size(), DataType::float64, MemorySpace::host};
      run_collective(c, ring, call);
      order.push_back(tag);
    });
  };
  const auto first = all_reduce(a, 1);
  const auto second = all_reduce(b, 2);
  EXPECT_FALSE(stream.idle());
  stream.progress();  // starts the first; the caller may compute now
  stream.wait(first);
  EXPECT_TRUE(stream.finished(first));
  stream.synchronize();
  EXPECT_TRUE(stream.finished(second));
  EXPECT_EQ(order, (std::vector<int>{1, 2}));
  EXPECT_EQ(a[999], 1.0 * n);
  EXPECT_EQ(b[0], 2.0 * n);
  stream.enqueue("doomed work", [](Communicator&) { throw Error("injected"); });
  const std::string message = message_of<Error>([&] { stream.synchronize(); });
  EXPECT_NE(message.find("doomed work failed"), std::string::npos) << message;
  EXPECT_NE(message.find("injected"), std::string::npos) << message;
}

TEST_F(DataParallelTest, AmdahlFitRecoversAKnownSerialFraction) {
  const double s = 0.2, t1 = 3.0;
  std::vector<int> ranks = {1, 2, 4, 8};
  std::vector<double> times;
  for (int n : ranks) times.push_back(t1 * (s + (1 - s) / n));
  const auto fit = theory::fit_amdahl(ranks, times, t1);
  EXPECT_NEAR(fit.serial_fraction, s, 1e-12);
  EXPECT_LT(fit.rms_residual, 1e-12);
  EXPECT_DOUBLE_EQ(theory::parallel_efficiency(4.0, 1.25, 4), 0.8);
}

TEST_F(DataParallelTest, ModelStateFormulasReproduceThePaperExample) {
  // Rajbhandari et al. 2020, Figure 1: 7.5B parameters, N_d = 64, mixed-precision Adam (K = 12).
  const std::int64_t psi = 7'500'000'000;
  // The paper prints 120 GB, 31.4 GB, 16.6 GB, 1.9 GB: within half a unit of the last digit shown.
  const double expect[] = {120e9, 31.4e9, 16.6e9, 1.9e9}, half_unit[] = {0.5e9, 0.05e9, 0.05e9, 0.05e9};
  for (int stage = 0; stage <= 3; ++stage) {
    const double bytes = theory::zero_model_state_bytes(stage, psi, psi, 64, {}).total();
    EXPECT_NEAR(bytes, expect[stage], half_unit[stage]) << "stage " << stage;
  }
}

}  // namespace
}  // namespace parity::test
