// Context parallelism's attention (parallel/context) over every rank of the world as one cp
// group, against the whole causal attention on one rank with the same inputs: every variant
// (ring, allgather, ulysses), forward and backward, in float64 and float32, within the regrouped bound;
// the load-balanced split (every position once, chunks r and 2cp-1-r, every rank the same count
// of visible pairs); the bytes each rank sends against the variants' closed forms; the faults the
// check must catch (a split without its reordering, a ring merge without its rescale, a block
// sent to the wrong neighbour); sizes that do not split refused.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <set>

#include "correctness/cases/context.hpp"
#include "correctness/cases/family.hpp"
#include "correctness/mpi_test.hpp"
#include "correctness/op_testing.hpp"
#include "reference/core/error.hpp"
#include "reference/core/tolerance.hpp"
#include "reference/ops/ops.hpp"
#include "reference/model/model.hpp"
#include "reference/parallel/context/context_parallel.hpp"
#include "reference/parallel/context/layers.hpp"
#include "reference/parallel/grid.hpp"
#include "reference/parallel/tensor/tensor_parallel.hpp"
#include "reference/record/table.hpp"
#include "reference/tensor/memory.hpp"
#include "reference/tensor/random.hpp"
#include "reference/theory/context.hpp"
#include "reference/theory/model.hpp"

namespace parity::test {
namespace {

using parallel::ContextParallel;
using parallel::ContextParallelConfig;

// 48 tokens split into 2 cp chunks and 24 heads over cp ranks for cp = 1, 2, 3, 4, 8.
constexpr std::int64_t kB = 2, kT = 48, kC = 48;
constexpr int kHeads = 24;

Tensor random(const std::string& name, Shape shape, DataType type, std::uint64_t seed) {
  Tensor t = Tensor::empty(name, std::move(shape), DataType::float64, MemoryCategory::activations);
  initialize(t, Init::normal(0, 1), seed);
  return cast(t, type, name, MemoryCategory::activations);
}

// Columns [part C, (part + 1) C) of a fused [B, T, 3C] tensor, or the fusion of three.
Tensor part_of(const Tensor& qkv, int part) {
  Tensor out = Tensor::empty("part", {kB, kT, kC}, qkv.dtype(), MemoryCategory::activations);
  for (std::int64_t r = 0; r < kB * kT; ++r)
    for (std::int64_t c = 0; c < kC; ++c) out.set(r * kC + c, qkv.at(r * 3 * kC + part * kC + c));
  return out;
}

// A GPT of the attention tests' sizes: 48 tokens, hidden 48, 24 heads, 2 blocks.
model::GptConfig small_gpt(DataType type) {
  return {.vocabulary = 64, .layers = 2, .hidden = kC, .heads = kHeads, .sequence = kT, .dtype = type};
}

double relative(const Tensor& got, const Tensor& want) { return op_testing::difference(got, want).relative; }

struct Errors {
  double out = 0, dq = 0, dk = 0, dv = 0;
  double forward_bytes = 0, backward_bytes = 0;
  double worst() const { return std::max({out, dq, dk, dv}); }
};

// The attention of random inputs whole on every rank and spread over the world by `config`; the
// gathered results' relative errors against the whole.
Errors run(Communicator& world, DataType type, ContextParallelConfig config) {
  const Tensor qkv = random("qkv", {kB, kT, 3 * kC}, type, 91), dout = random("dout", {kB, kT, kC}, type, 92);
  Tensor whole = Tensor::empty("out", {kB, kT, kC}, type, MemoryCategory::activations);
  Tensor probs = Tensor::empty("probs", {kB, kHeads, kT, kT}, type, MemoryCategory::activations);
  Tensor dqkv = Tensor::zeros("dqkv", {kB, kT, 3 * kC}, type, MemoryCategory::activations);
  ops::attention_forward(qkv, kHeads, true, whole, probs);
  ops::attention_backward(dout, qkv, probs, kHeads, dqkv);

  ContextParallel cp(world, config);
  const Tensor q = cp.split(part_of(qkv, 0)), k = cp.split(part_of(qkv, 1)), v = cp.split(part_of(qkv, 2));
  const Tensor d = cp.split(dout);
  const std::int64_t local = kT / world.size();
  Tensor out = Tensor::empty("out", {kB, local, kC}, type, MemoryCategory::activations);
  Tensor lse = Tensor::empty("lse", {kB, kHeads, local}, type, MemoryCategory::activations);
  cp.attention_forward(q, k, v, kT, kHeads, out, lse);
  Tensor dq = Tensor::empty("dq", q.shape(), type, MemoryCategory::activations);
  Tensor dk = Tensor::empty("dk", k.shape(), type, MemoryCategory::activations);
  Tensor dv = Tensor::empty("dv", v.shape(), type, MemoryCategory::activations);
  cp.attention_backward(d, q, k, v, out, lse, kT, kHeads, dq, dk, dv);
  Errors e;
  e.forward_bytes = cp.forward_bytes();
  e.backward_bytes = cp.backward_bytes();
  // Gathered with the balanced positions (a fault that split otherwise shows here).
  ContextParallel plain(world, {config.variant, ""});
  e.out = relative(plain.gather(out, kT), whole);
  e.dq = relative(plain.gather(dq, kT), part_of(dqkv, 0));
  e.dk = relative(plain.gather(dk, kT), part_of(dqkv, 1));
  e.dv = relative(plain.gather(dv, kT), part_of(dqkv, 2));
  return e;
}

void register_grid(Communicator& comm) {
  // The largest error / bound of the first step's gradients and of the parameters after the
  // steps, per precision, for the tightness test that runs after the grid.
  static BoundRatios ratios;
  register_cases<cases::ContextCase>("context", cases::context_grid(comm.size()), [](Communicator& world, const auto& c) {
    const cases::ContextResult r = cases::run_context_case(world, c);
    verbose(world, "%s: error %.3g bound %.3g loss %.3g gradients %.3g bound %.3g | %s\n", c.name().c_str(), r.error, r.bound,
            r.loss_error, r.gradient_error, r.gradient_bound, r.message.c_str());
    EXPECT_TRUE(r.passed) << c.name() << ": " << r.message;
    ratios.note("gradients/" + c.precision, r.gradient_error, r.gradient_bound, world.size());
    ratios.note("parameters/" + c.precision, r.error, r.bound, world.size());
  });
  register_bound_tightness("context_bounds", ratios, tolerance::kTrainingBoundSlack);
}
const bool registered = add_registrar(register_grid);

class ContextTest : public MpiTest {};

TEST_F(ContextTest, TrainingCatchesTheFaults) {
  if (comm().size() == 1) GTEST_SKIP() << "one rank: no split, no ring";
  for (const char* fault : {"no_reorder", "missing_rescale", "wrong_neighbour"}) {
    cases::ContextCase c;
    c.cp = comm().size() % 2 == 0 ? 2 : comm().size();
    c.dp = comm().size() / c.cp;
    c.fault = fault;
    const cases::ContextResult r = cases::run_context_case(comm(), c);
    EXPECT_FALSE(r.passed) << c.name() << " passed: " << r.message;
  }
}

// Context parallelism runs on the CPU only, so on a device run (`--device cuda`) its cases take
// the host world and their rows say device cpu. The world here is labelled as in GPU memory: it
// refuses the host buffers the cases use, as a GPU run's world did before they took the host's.
TEST_F(ContextTest, OnADeviceRunTheCasesTakeTheHostWorldAndSaySo) {
  const auto device = mpi_world(MemorySpace::cuda);
  const cases::CaseFamily& family = cases::find_case_family("context");
  const auto list = family.grid(comm().size(), {false});
  ASSERT_GT(list->size(), 0u);
  const std::string first = list->name(0);
  list->keep_only([&](const std::string& name) { return name == first; });
  record::Table table{*family.info().table};
  const cases::Verdict verdict = list->run(cases::CaseContext{*device, comm()}, 0, table);
  EXPECT_TRUE(verdict.passed) << first << ": " << verdict.message;
  // The row without its verdict (the caller adds `passed` and `message`).
  ASSERT_EQ(table.get_str("device").size(), 1u);
  EXPECT_EQ(table.get_str("device")[0], "cpu");
}

TEST_F(ContextTest, TrainingWithTensorParallelismCatchesTheFaults) {
  if (comm().size() % 4 != 0) GTEST_SKIP() << "cp 2 x tp 2 needs a multiple of 4 ranks";
  for (const char* fault : {"no_reorder", "wrong_neighbour"}) {
    cases::ContextCase c;
    c.tp = 2;
    c.dp = comm().size() / 4;
    c.fault = fault;
    const cases::ContextResult r = cases::run_context_case(comm(), c);
    EXPECT_FALSE(r.passed) << c.name() << " passed: " << r.message;
  }
}

TEST_F(ContextTest, TrainingWithPipelinesCatchesTheFaults) {
  if (comm().size() % 4 != 0) GTEST_SKIP() << "cp 2 x pp 2 needs a multiple of 4 ranks";
  for (const char* fault : {"no_reorder", "wrong_neighbour"}) {
    cases::ContextCase c;
    c.pp = 2;
    c.dp = comm().size() / 4;
    c.fault = fault;
    const cases::ContextResult r = cases::run_context_case(comm(), c);
    EXPECT_FALSE(r.passed) << c.name() << " passed: " << r.message;
    // Each check catches it on its own: the first step's gradients, every step's loss.
    EXPECT_GT(r.gradient_error, r.gradient_bound) << c.name() << ": " << r.message;
    EXPECT_GT(r.loss_error, r.bound) << c.name() << ": " << r.message;
  }
}

TEST_F(ContextTest, TheSplitIsBalancedAndCoversTheSequence) {
  ContextParallel cp(comm(), {});
  const int n = comm().size();
  std::set<std::int64_t> seen;
  std::vector<std::int64_t> visible;
  for (int r = 0; r < n; ++r) {
    const auto p = cp.positions(kT, r);
    ASSERT_EQ(p.size(), static_cast<std::size_t>(kT / n));
    const std::int64_t c = kT / (2 * n);
    EXPECT_EQ(p.front(), r * c);
    EXPECT_EQ(p[static_cast<std::size_t>(c)], (2 * n - 1 - r) * c);
    seen.insert(p.begin(), p.end());
    std::int64_t pairs = 0;
    for (auto i : p) pairs += i + 1;  // the keys a query at position i sees
    visible.push_back(pairs);
  }
  EXPECT_EQ(seen.size(), static_cast<std::size_t>(kT));
  for (auto pairs : visible) EXPECT_EQ(pairs, visible.front());
}

TEST_F(ContextTest, BothVariantsAreTheWholeAttention) {
  for (const char* variant : {"ring", "allgather", "ulysses"})
    for (DataType type : {DataType::float64, DataType::float32}) {
      const Errors e = run(comm(), type, {variant, ""});
      // Scores, softmax and weighted sum, the blocks' merge, and backward's three products.
      EXPECT_LE(e.out, tolerance::regrouped_op_relative_bound(type, static_cast<int>(kT), 4)) << variant << " " << name_of(type);
      EXPECT_LE(e.worst(), tolerance::regrouped_op_relative_bound(type, static_cast<int>(kT), 6)) << variant << " " << name_of(type);
    }
}

TEST_F(ContextTest, BytesAreTheFormulas) {
  // Every rank's bytes sent, forward and backward, equal theory/context.hpp's exactly (float64).
  const int n = comm().size();
  for (const char* variant : {"ring", "allgather", "ulysses"}) {
    const Errors e = run(comm(), DataType::float64, {variant, ""});
    const theory::ContextBytes want =
        theory::context_attention_bytes(variant, kB, static_cast<double>(kT / n), kC, kC, kHeads, n, 8, 8);
    EXPECT_EQ(e.forward_bytes, want.forward) << variant;
    EXPECT_EQ(e.backward_bytes, want.backward) << variant;
  }
  // And the formulas' closed forms at this size, by hand: a block of K is B Tl C 8 bytes.
  const double block = static_cast<double>(kB * (kT / n) * kC * 8);
  EXPECT_EQ(theory::context_attention_bytes("ring", kB, kT / n, kC, kC, kHeads, n, 8, 8).backward, (4.0 * n - 2) * block);
  EXPECT_EQ(theory::context_attention_bytes("allgather", kB, kT / n, kC, kC, kHeads, n, 8, 8).forward, 2.0 * (n - 1) * block);
}

TEST_F(ContextTest, TheRingWithoutOverlapIsTheSameBitForBit) {
  // Waiting for each block before computing it changes when the bytes move, not what is computed:
  // every error against the whole attention is the same double, and the same bytes are sent.
  for (DataType type : {DataType::float64, DataType::float32}) {
    ContextParallelConfig serial{"ring", ""};
    serial.overlap = false;
    const Errors a = run(comm(), type, {"ring", ""}), b = run(comm(), type, serial);
    EXPECT_EQ(a.out, b.out) << name_of(type);
    EXPECT_EQ(a.dq, b.dq) << name_of(type);
    EXPECT_EQ(a.dk, b.dk) << name_of(type);
    EXPECT_EQ(a.dv, b.dv) << name_of(type);
    EXPECT_EQ(a.forward_bytes, b.forward_bytes);
    EXPECT_EQ(a.backward_bytes, b.backward_bytes);
  }
}

TEST_F(ContextTest, TimesTheAttentionAndItsWaits) {
  for (const char* variant : {"ring", "allgather", "ulysses"}) {
    ContextParallel cp(comm(), {variant, ""});
    const Tensor q = random("q", {kB, kT / comm().size(), kC}, DataType::float64, 3);
    Tensor out = Tensor::empty("out", q.shape(), DataType::float64, MemoryCategory::activations);
    Tensor lse = Tensor::empty("lse", {kB, kHeads, q.dim(1)}, DataType::float64, MemoryCategory::activations);
    cp.attention_forward(q, q, q, kT, kHeads, out, lse);
    EXPECT_GT(cp.attention_seconds(), 0) << variant;
    EXPECT_GE(cp.communication_seconds(), 0) << variant;
    EXPECT_LE(cp.communication_seconds(), cp.attention_seconds()) << variant;
    if (comm().size() == 1 && std::string(variant) == "ring") {
      EXPECT_EQ(cp.communication_seconds(), 0) << "a ring of one passes nothing on";
    }
    cp.reset_counters();
    EXPECT_EQ(cp.attention_seconds(), 0);
    EXPECT_EQ(cp.forward_bytes(), 0);
  }
}

// The activations each block of `m` keeps, measured between its hooks in one forward (and a
// backward, which frees them) of `rows` rows of c's batch.
std::vector<std::int64_t> kept_per_block(model::Model& m, const model::GptConfig& c, std::int64_t rows) {
  auto& tracker = MemoryTracker::process();
  std::vector<std::int64_t> kept;
  std::int64_t before = 0;
  for (model::Layer* layer : m.layers())
    if (std::string(layer->kind()) == "block")
      layer->add_hook([&](model::Layer&, model::HookPoint point, const model::PassContext&) {
        const std::int64_t now = tracker.usage(MemoryCategory::activations, MemorySpace::host).current;
        if (point == model::HookPoint::before_forward) before = now;
        if (point == model::HookPoint::after_forward) kept.push_back(now - before);
      });
  const model::Batch batch = model::gpt_batch(c, 0, 0, rows, rows);
  const model::PassContext context{0, 0, true, 0};
  const Tensor logits = m.forward(batch.inputs, context);
  m.backward(Tensor::zeros_like(logits, "dlogits", MemoryCategory::activations), context);
  return kept;
}

// The activations one block of the context-parallel GPT keeps equal
// theory::context_block_activation_bytes to the byte.
TEST_F(ContextTest, ActivationBytesAreTheFormula) {
  const int n = comm().size();
  for (const char* variant : {"ring", "allgather", "ulysses"})
    for (DataType type : {DataType::float64, DataType::float32, DataType::bfloat16}) {
      const model::GptConfig c = small_gpt(type);
      ContextParallel cp(comm(), {variant, ""});
      auto m = parallel::build_context_parallel_gpt(c, cp);
      const std::int64_t rows = 3, e = static_cast<std::int64_t>(size_of(type));
      const std::int64_t want = theory::context_block_activation_bytes(kT, rows, kC, kHeads, n, e, is_half(type) ? 4 : e,
                                                                       theory::statistic_bytes(type));
      const std::vector<std::int64_t> kept = kept_per_block(*m, c, rows);
      ASSERT_EQ(kept.size(), 2u);
      for (std::int64_t k : kept) EXPECT_EQ(k, want) << variant << " " << name_of(type);
    }
  // By hand at one size: 2 rows of a 48-token sequence over cp 4 in float32 (12 tokens each),
  // hidden 48, 24 heads: 24 tokens x (4 x 16 x 48 + 4 x 24 + 4 x 4) bytes.
  EXPECT_EQ(theory::context_block_activation_bytes(48, 2, 48, 24, 4, 4, 4, 4), 24 * (4 * 16 * 48 + 4 * 24 + 16));
  EXPECT_THROW(theory::context_block_activation_bytes(48, 2, 48, 24, 5, 4, 4, 4), UsageError);
}

// With tensor parallelism over 2 ranks beside cp (the rest of the world), with and without its
// sequence parallelism: the activation formula's tp and sp terms, and the attention's bytes at a
// tp rank's share of the width, to the byte.
TEST_F(ContextTest, ActivationBytesWithTensorParallelismAreTheFormula) {
  const int n = comm().size();
  if (n % 2 != 0) GTEST_SKIP() << "tp 2 needs an even world";
  parallel::GridSpec spec;
  spec.set(parallel::Axis::tp, 2).set(parallel::Axis::cp, n / 2);
  parallel::Grid grid(comm(), spec);
  for (const bool sp : {false, true})
    for (const char* variant : {"ring", "allgather", "ulysses"})
      for (DataType type : {DataType::float64, DataType::bfloat16}) {
        if (std::string(variant) == "ulysses" && (kHeads / 2) % (n / 2) != 0) continue;
        parallel::TensorParallelConfig tc;
        tc.sequence_parallel = sp;
        const parallel::TensorParallel tp(grid.group(parallel::Axis::tp), tc);
        ContextParallel cp(grid.group(parallel::Axis::cp), {variant, ""});
        const model::GptConfig c = small_gpt(type);
        auto m = parallel::build_context_parallel_gpt(c, cp, &tp);
        const std::int64_t rows = 3, e = static_cast<std::int64_t>(size_of(type));
        const std::int64_t want = theory::context_block_activation_bytes(
            kT, rows, kC, kHeads, n / 2, e, is_half(type) ? 4 : e, theory::statistic_bytes(type), 2, sp);
        const std::vector<std::int64_t> kept = kept_per_block(*m, c, rows);
        ASSERT_EQ(kept.size(), 2u);
        for (std::int64_t k : kept) EXPECT_EQ(k, want) << variant << " " << name_of(type) << (sp ? " sp" : "");
        // And the bytes the cp group moved for the two blocks' attention: the variant's formula at
        // a tp rank's width h / 2 and heads / 2, in attention's working type.
        const double w = is_half(type) ? 4 : static_cast<double>(e);
        const theory::ContextBytes bytes =
            theory::context_attention_bytes(variant, rows, static_cast<double>(kT / (n / 2)), kC / 2, kC / 2, kHeads / 2, n / 2, w, w);
        EXPECT_EQ(cp.forward_bytes(), 2 * bytes.forward) << variant << " " << name_of(type) << (sp ? " sp" : "");
        EXPECT_EQ(cp.backward_bytes(), 2 * bytes.backward) << variant << " " << name_of(type) << (sp ? " sp" : "");
      }
  // By hand: 2 rows over cp 2 (24 tokens each), hidden 48, 24 heads, float32, tp 2: without sp
  // 48 tokens x (4 (4 x 48 + 8 x 48 / 2) + 4 (4 x 48 + 24) / 2 + 16); with sp half the cp formula.
  EXPECT_EQ(theory::context_block_activation_bytes(48, 2, 48, 24, 2, 4, 4, 4, 2, false),
            48 * (4 * (4 * 48 + 8 * 48 / 2) + 4 * (4 * 48 + 24) / 2 + 16));
  EXPECT_EQ(theory::context_block_activation_bytes(48, 2, 48, 24, 2, 4, 4, 4, 2, true),
            theory::context_block_activation_bytes(48, 2, 48, 24, 2, 4, 4, 4) / 2);
  EXPECT_THROW(theory::context_block_activation_bytes(48, 2, 48, 24, 2, 4, 4, 4, 5), UsageError);
  EXPECT_THROW(theory::context_block_activation_bytes(48, 2, 48, 24, 16, 4, 4, 4, 2, true), UsageError);
}

TEST_F(ContextTest, FaultsAreCaught) {
  if (comm().size() == 1) GTEST_SKIP() << "one rank: no split, no ring";
  const double bound = tolerance::regrouped_op_relative_bound(DataType::float64, static_cast<int>(kT), 6);
  EXPECT_GT(run(comm(), DataType::float64, {"ring", "no_reorder"}).worst(), 100 * bound);
  EXPECT_GT(run(comm(), DataType::float64, {"allgather", "no_reorder"}).worst(), 100 * bound);
  EXPECT_GT(run(comm(), DataType::float64, {"ring", "missing_rescale"}).worst(), 100 * bound);
  EXPECT_GT(run(comm(), DataType::float64, {"ring", "wrong_neighbour"}).worst(), 100 * bound);
  EXPECT_GT(run(comm(), DataType::float64, {"ulysses", "no_reorder"}).worst(), 100 * bound);
}

TEST_F(ContextTest, SizesThatDoNotSplitAreRefused) {
  EXPECT_THROW(ContextParallel(comm(), {"zigzag", ""}), UsageError);
  EXPECT_THROW(ContextParallel(comm(), {"ring", "typo"}), UsageError);
  ContextParallel cp(comm(), {});
  EXPECT_THROW(cp.positions(2 * comm().size() + 1, 0), UsageError);
  // Layouts the context-parallel GPT does not take: a cp rank's tokens that do not split over
  // tp's sequence parallelism (30 over cp 1 and tp 4 or 8; at one rank, sequence parallelism of
  // one), MoE layers.
  model::GptConfig c = small_gpt(DataType::float64);
  if (comm().size() == 1 || comm().size() >= 4) {
    parallel::TensorParallelConfig sp;
    sp.sequence_parallel = true;
    const parallel::TensorParallel tp(comm(), sp);
    const std::unique_ptr<Communicator> alone = comm().split(comm().rank(), 0);
    ContextParallel one(*alone, {});
    model::GptConfig uneven = c;
    uneven.sequence = 30;
    EXPECT_THROW(parallel::build_context_parallel_gpt(uneven, one, &tp), UsageError);
  }
  // cp 2 x tp 4 with sequence parallelism (8 ranks): a sequence of 12 splits into cp's 4 chunks
  // and over tp, but the 6 tokens a cp rank holds do not split over tp's 4 ranks.
  if (comm().size() == 8) {
    parallel::GridSpec spec;
    spec.set(parallel::Axis::tp, 4).set(parallel::Axis::cp, 2);
    parallel::Grid grid(comm(), spec);
    parallel::TensorParallelConfig sp;
    sp.sequence_parallel = true;
    const parallel::TensorParallel tp(grid.group(parallel::Axis::tp), sp);
    ContextParallel two(grid.group(parallel::Axis::cp), {});
    model::GptConfig twelve = c;
    twelve.sequence = 12;
    std::string message = "(accepted)";
    try {
      parallel::build_context_parallel_gpt(twelve, two, &tp);
    } catch (const UsageError& e) {
      message = e.what();
    }
    EXPECT_NE(message.find("the 6 tokens of a sequence a cp rank holds do not split over tp = 4"), std::string::npos)
        << message;
  }
  model::GptConfig moe = c;
  moe.moe.layers = {1};
  EXPECT_THROW(parallel::build_context_parallel_gpt(moe, cp), UsageError);
}

}  // namespace
}  // namespace parity::test
