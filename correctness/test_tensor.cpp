// Tensors, memory accounting and deterministic inputs: Philox known answers, and every shard a
// technique will make (rows, columns, heads, layers, batch) equal to the slice of the whole.
#include <gtest/gtest.h>

#include <cmath>

#include "reference/core/error.hpp"
#include "reference/model/model.hpp"
#include "reference/tensor/random.hpp"
#include "reference/tensor/tensor.hpp"

using namespace parity;

namespace {

// Counts elements that differ (bit-exact comparison through double) and reports the first.
::testing::AssertionResult same_values(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape())
    return ::testing::AssertionFailure() << a.describe() << " vs " << b.describe() << ": shapes differ";
  std::int64_t wrong = 0, first = -1;
  for (std::int64_t i = 0; i < a.numel(); ++i)
    if (a.at(i) != b.at(i)) {
      if (first < 0) first = i;
      ++wrong;
    }
  if (wrong == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << wrong << " of " << a.numel() << " elements differ between " << a.describe()
                                       << " and " << b.describe() << "; first at " << first << ": " << a.at(first)
                                       << " vs " << b.at(first);
}

}  // namespace

TEST(Philox, Random123KnownAnswers) {
  // Random123's kat_vectors for philox4x32_10.
  EXPECT_EQ(philox4x32_10({0, 0, 0, 0}, {0, 0}), (PhiloxCounter{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}));
  EXPECT_EQ(philox4x32_10({0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff}),
            (PhiloxCounter{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}));
  EXPECT_EQ(philox4x32_10({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0}),
            (PhiloxCounter{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}));
}

TEST(Philox, ValuesArePureFunctionsOfSeedNameAndIndex) {
  const std::uint64_t id = tensor_id("w");
  EXPECT_EQ(standard_normal(7, id, 12345), standard_normal(7, id, 12345));
  EXPECT_NE(standard_normal(7, id, 12345), standard_normal(8, id, 12345));
  EXPECT_NE(standard_normal(7, id, 12345), standard_normal(7, tensor_id("v"), 12345));
  EXPECT_NE(standard_normal(7, id, 12345), standard_normal(7, id, 12346));
}

TEST(Philox, MomentsOfTheDistributions) {
  // 1e5 draws: the sample mean of N(0,1) has standard deviation 1/sqrt(n) = 0.0032, the sample
  // variance sqrt(2/n) = 0.0045; uniform(0,1) mean 1/sqrt(12 n) = 0.0009. Bounds are 6 sigma.
  const int n = 100000;
  const std::uint64_t id = tensor_id("moments");
  double sum = 0, sum2 = 0, usum = 0;
  for (int i = 0; i < n; ++i) {
    const double z = standard_normal(3, id, static_cast<std::uint64_t>(i));
    sum += z;
    sum2 += z * z;
    const double u = uniform_open(3, id, static_cast<std::uint64_t>(i));
    ASSERT_GT(u, 0.0);
    ASSERT_LT(u, 1.0);
    usum += u;
  }
  EXPECT_NEAR(sum / n, 0.0, 6 / std::sqrt(n));
  EXPECT_NEAR(sum2 / n, 1.0, 6 * std::sqrt(2.0 / n));
  EXPECT_NEAR(usum / n, 0.5, 6 / std::sqrt(12.0 * n));
}

TEST(Shards, EverySplitEqualsTheSliceOfTheWhole) {
  const std::uint64_t seed = 99;
  const Init init = Init::normal(0, 0.02);
  Tensor whole = Tensor::empty("blocks.0.mlp.fc.weight", {12, 20}, DataType::float64, MemoryCategory::parameters);
  initialize(whole, init, seed);
  for (int parts : {1, 2, 3, 4}) {
    for (int part = 0; part < parts; ++part) {
      for (int d : {0, 1}) {  // rows (row-parallel), columns (column-parallel)
        const std::int64_t size = whole.dim(d);
        if (size % parts) continue;
        ShardSpec spec(whole.shape());
        spec.split(d, part, parts);
        Tensor shard = Tensor::empty("shard", spec.shape(), DataType::float64, MemoryCategory::parameters);
        initialize_shard(shard, init, seed, whole.name(), spec);
        EXPECT_TRUE(same_values(shard, slice(whole, spec, "slice", MemoryCategory::workspace)))
            << "dimension " << d << " part " << part << " of " << parts;
      }
    }
  }
}

TEST(Shards, HeadSplitOfAFusedQkvWeight) {
  // qkv weight [h, 3h]: rank r of t keeps heads [r a/t, (r+1) a/t) of q, of k and of v, i.e.
  // three column ranges; Megatron's column-parallel QKV.
  const std::int64_t h = 24;
  const int heads = 6, t = 3;
  const std::int64_t per_rank = h / t;
  Tensor whole = Tensor::empty("blocks.1.attn.qkv.weight", {h, 3 * h}, DataType::float32, MemoryCategory::parameters);
  initialize(whole, Init::normal(0, 0.02), 5);
  ASSERT_EQ(heads % t, 0);
  for (int r = 0; r < t; ++r) {
    std::vector<std::int64_t> columns;
    for (int part = 0; part < 3; ++part)
      for (std::int64_t j = 0; j < per_rank; ++j) columns.push_back(part * h + r * per_rank + j);
    ShardSpec spec(whole.shape());
    spec.indices(1, columns);
    Tensor shard = Tensor::empty("qkv.shard", spec.shape(), DataType::float32, MemoryCategory::parameters);
    initialize_shard(shard, Init::normal(0, 0.02), 5, whole.name(), spec);
    EXPECT_TRUE(same_values(shard, slice(whole, spec, "slice", MemoryCategory::workspace))) << "rank " << r;
    // And the shard's first column is the whole's column r*per_rank (q of head group r).
    EXPECT_EQ(shard.at(0), whole.at(r * per_rank));
  }
}

TEST(Shards, BatchRowsOfTheSyntheticTasks) {
  model::MlpConfig mlp;
  mlp.dtype = DataType::float64;
  const model::Batch whole = model::mlp_batch(mlp, 4, 0, 10, 10);
  for (auto [first, rows] : {std::pair{0, 3}, std::pair{3, 3}, std::pair{6, 4}}) {
    const model::Batch part = model::mlp_batch(mlp, 4, first, rows, 10);
    EXPECT_TRUE(same_values(part.inputs, slice(whole.inputs, ShardSpec(whole.inputs.shape()).range(0, first, first + rows),
                                               "rows", MemoryCategory::workspace)));
    EXPECT_TRUE(same_values(part.targets, slice(whole.targets, ShardSpec(whole.targets.shape()).range(0, first, first + rows),
                                                "rows", MemoryCategory::workspace)));
    EXPECT_EQ(part.normalizer, whole.normalizer);  // the global element count
  }
  model::GptConfig gpt;
  const model::Batch tokens = model::gpt_batch(gpt, 2, 0, 6, 6);
  const model::Batch tail = model::gpt_batch(gpt, 2, 4, 2, 6);
  EXPECT_TRUE(same_values(tail.inputs, slice(tokens.inputs, ShardSpec(tokens.inputs.shape()).range(0, 4, 6), "rows",
                                             MemoryCategory::workspace)));
  EXPECT_TRUE(same_values(tail.targets, slice(tokens.targets, ShardSpec(tokens.targets.shape()).range(0, 4, 6), "rows",
                                              MemoryCategory::workspace)));
}

TEST(Shards, LayerRangesHoldTheWholeModelsValues) {
  // A pipeline stage built alone holds exactly the parameters of those layers in the whole model.
  model::GptConfig config;
  config.layers = 4;
  const auto whole = model::build_gpt(config);
  const auto stage = model::build_gpt(config, {2, 5});  // blocks.1 .. blocks.3
  std::map<std::string, Tensor> by_name;
  for (auto* p : whole->parameters()) by_name[p->name] = p->value;
  ASSERT_EQ(stage->layers().size(), 3u);
  for (auto* p : stage->parameters()) {
    ASSERT_TRUE(by_name.count(p->name)) << p->name;
    EXPECT_TRUE(same_values(p->value, by_name[p->name])) << p->name;
  }
  // The last stage's copy of the tied table equals the embedding's table.
  const auto last = model::build_gpt(config, {5, 7});
  bool found = false;
  for (auto* p : last->parameters())
    if (p->name == "embedding.wte") {
      found = true;
      EXPECT_TRUE(same_values(p->value, by_name["embedding.wte"]));
    }
  EXPECT_TRUE(found);
}

TEST(Memory, TracksCurrentAndPeakByCategory) {
  auto& tracker = MemoryTracker::process();
  const PeakScope scope;
  const auto before = tracker.usage(MemoryCategory::optimizer_state).current;
  {
    Tensor a = Tensor::zeros("a", {100}, DataType::float32, MemoryCategory::optimizer_state);
    Tensor b = Tensor::zeros("b", {50}, DataType::float64, MemoryCategory::optimizer_state);
    EXPECT_EQ(tracker.usage(MemoryCategory::optimizer_state).current - before, 800);
    Tensor shared = a;  // a handle: no new storage
    EXPECT_EQ(tracker.usage(MemoryCategory::optimizer_state).current - before, 800);
  }
  EXPECT_EQ(tracker.usage(MemoryCategory::optimizer_state).current, before);
  EXPECT_EQ(scope.peak_above_start(MemoryCategory::optimizer_state), 800);
  EXPECT_EQ(scope.peak_above_start(MemoryCategory::gradients), 0);
  EXPECT_EQ(scope.total_peak_above_start(), 800);
}

TEST(Memory, PeakScopesNest) {
  const PeakScope outer;
  {
    Tensor big = Tensor::zeros("big", {1000}, DataType::float64, MemoryCategory::workspace);
  }
  const PeakScope inner;  // opening it must not forget the outer scope's 8000-byte peak
  Tensor small = Tensor::zeros("small", {10}, DataType::float64, MemoryCategory::workspace);
  EXPECT_EQ(inner.peak_above_start(MemoryCategory::workspace), 80);
  EXPECT_EQ(outer.peak_above_start(MemoryCategory::workspace), 8000);
}

TEST(TensorErrors, NameTheTensorsAndShapes) {
  Tensor t = Tensor::zeros("activations.x", {2, 3}, DataType::float32, MemoryCategory::activations);
  try {
    (void)t.reshape({4, 2});
    FAIL() << "reshape to a different element count was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("activations.x [2, 3] float32"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("[4, 2]"), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)t.data<double>(), Error);
  EXPECT_THROW(Tensor::empty("bad", {3, 0}, DataType::float32, MemoryCategory::workspace), Error);
  EXPECT_THROW(Tensor::empty("gpu", {3}, DataType::float32, MemoryCategory::workspace, MemorySpace::cuda), Error);
  EXPECT_THROW(ShardSpec({4, 6}).split(1, 0, 4), Error);  // 6 columns do not split in 4
  EXPECT_THROW((void)t.at(6), Error);
  EXPECT_THROW(t.set(-1, 0.0), Error);
  EXPECT_THROW((void)t.reshape({-2, -3}), Error);
  const Tensor undefined;
  EXPECT_THROW(Tensor::zeros_like(undefined, "z", MemoryCategory::gradients), Error);
  EXPECT_THROW((void)undefined.clone("c", MemoryCategory::workspace), Error);
  EXPECT_THROW((void)undefined.category(), Error);
  EXPECT_THROW(Tensor::empty("huge", {1LL << 40, 1LL << 40}, DataType::float32, MemoryCategory::workspace), Error);
  EXPECT_THROW(Init::tokens(0), Error);
}

TEST(TensorCast, HalfTypesRoundToNearestEven) {
  Tensor x = Tensor::empty("x", {4}, DataType::float32, MemoryCategory::workspace);
  // 1 + 2^-8 is halfway between two bfloat16 values (1 and 1 + 2^-7): ties to even give 1.
  // 1 + 3*2^-8 is halfway between 1 + 2^-7 and 1 + 2^-6: even is 1 + 2^-6.
  x.set(0, 1.0 + 0x1p-8);
  x.set(1, 1.0 + 3 * 0x1p-8);
  x.set(2, 65520.0);   // float16: rounds to infinity (halfway to 65536 beyond max 65504)
  x.set(3, 0x1p-25);   // float16: halfway to the smallest subnormal 2^-24: ties to even gives 0
  const Tensor b = cast(x, DataType::bfloat16, "b", MemoryCategory::workspace);
  EXPECT_EQ(b.at(0), 1.0);
  EXPECT_EQ(b.at(1), 1.0 + 0x1p-6);
  const Tensor h = cast(x, DataType::float16, "h", MemoryCategory::workspace);
  EXPECT_TRUE(std::isinf(h.at(2)));
  EXPECT_EQ(h.at(3), 0.0);
}
