// Tensor parallelism under GoogleTest, with every rank of the world in one tp group: every case
// of cases::tensor_grid at this world size (suite "tensor", as `parity check` names them); each
// tensor-parallel layer alone against the same layer whole, forward and backward, with and
// without sequence parallelism; sharded initialisation equal to slicing the whole bit for bit;
// activation bytes kept per block and parameter bytes per rank against the formulas; the
// checks shown able to fail; and bad sizes refused.
#include <cmath>
#include <cstdio>
#include <optional>

#include "correctness/cases/compare.hpp"
#include "correctness/cases/tensor.hpp"
#include "correctness/mpi_test.hpp"
#include "reference/core/error.hpp"
#include "reference/core/tolerance.hpp"
#include "reference/parallel/tensor/tensor_parallel.hpp"
#include "reference/theory/model.hpp"

namespace parity::test {
namespace {

using parallel::TensorParallel;

void register_grid(Communicator& comm) {
  // The largest error / bound of the first step's gradients and of the parameters after the
  // steps, per precision, for the tightness test that runs after the grid.
  static BoundRatios ratios;
  register_cases<cases::TensorCase>("tensor", cases::tensor_grid(comm.size()), [](Communicator& world, const auto& c) {
    const cases::TensorResult r = cases::run_tensor_case(world, c);
    verbose(world, "%s: error %.3g bound %.3g gradients %.3g/%.3g bytes %.0f/%.0f | %s\n", c.name().c_str(), r.error, r.bound,
            r.gradient_error, r.gradient_bound, r.bytes_sent, r.bytes_formula, r.message.c_str());
    EXPECT_TRUE(r.passed) << c.name() << ": " << r.message;
    if (c.fault.empty()) {
      ratios.note("gradients/" + c.precision, r.gradient_error, r.gradient_bound, world.size());
      ratios.note("parameters/" + c.precision, r.error, r.bound, world.size());
    }
  });
  register_bound_tightness("tensor_bounds", ratios, tolerance::kTrainingBoundSlack);
}
const bool registered = add_registrar(register_grid);

class TensorParallelTest : public MpiTest {
 protected:
  // Sizes here are multiples of 24, so every world size these tests run at (1, 2, 3, 4, 8)
  // divides them.
  bool divides(std::int64_t n) { return n % comm().size() == 0; }
};

constexpr std::uint64_t kSeed = 777;

Tensor random_tensor(const std::string& name, Shape shape, DataType dtype, double stddev = 1) {
  Tensor t = Tensor::empty(name, std::move(shape), DataType::float64, MemoryCategory::activations);
  initialize(t, Init::normal(0, stddev), kSeed);
  return cast(t, dtype, name, MemoryCategory::activations);
}

// Where a tensor-parallel layer's input or output lives relative to the whole tensor.
enum class Layout { whole, sequence_shard, column_shard };

Tensor to_layout(const TensorParallel& tp, const Tensor& whole, Layout layout) {
  if (layout == Layout::whole) return whole;
  return tp.split(whole, layout == Layout::sequence_shard ? 1 : whole.rank() - 1, "test");
}
Tensor from_layout(const TensorParallel& tp, const Tensor& part, Layout layout) {
  if (layout == Layout::whole) return part;
  return tp.all_gather(part, layout == Layout::sequence_shard ? 1 : part.rank() - 1, "test");
}

double relative(const std::vector<double>& got, const std::vector<double>& want) {
  double d2 = 0, w2 = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    d2 += (got[i] - want[i]) * (got[i] - want[i]);
    w2 += want[i] * want[i];
  }
  return got.size() == want.size() ? std::sqrt(d2 / w2) : INFINITY;
}

// The layer whole and split: outputs, input gradients and gathered parameter gradients agree
// within the bound of the same sums regrouped (n terms, `stages` chained reductions).
void expect_equivalent(const std::string& what, const TensorParallel& tp, model::Layer& whole, model::Layer& split,
                       const Tensor& x, Layout in, Layout out, int n, int stages) {
  const model::PassContext context{0, 0, true, 0};
  const DataType dtype = x.dtype();
  const double bound = tolerance::regrouped_op_relative_bound(dtype, n, stages);
  const Tensor y_whole = whole.forward(x, context);
  const Tensor y = from_layout(tp, split.forward(to_layout(tp, x, in), context), out);
  EXPECT_LT(relative(y.to_vector(), y_whole.to_vector()), bound) << what << ": forward";
  const Tensor dy = random_tensor(what + ".dy", y_whole.shape(), dtype);
  const Tensor dx_whole = whole.backward(dy, context);
  const Tensor dx_part = split.backward(to_layout(tp, dy, out), context);
  if (dx_whole.defined()) {
    const Tensor dx = from_layout(tp, dx_part, in);
    EXPECT_LT(relative(dx.to_vector(), dx_whole.to_vector()), bound) << what << ": input gradient";
  }
  // (These layers hold no sequence-sharded gradient: the row-parallel bias's is computed whole.)
  std::vector<model::Parameter*> parameters = split.parameters();
  parallel::ParameterValues local;
  for (model::Parameter* p : parameters) {
    local.names.push_back(p->name);
    local.values.push_back(p->gradient().to_vector());
    local.state.emplace_back();
  }
  std::vector<std::string> disagreeing;
  const parallel::ParameterValues gathered = parallel::gather_tensor_parallel(local, parameters, tp.group(), &disagreeing);
  const auto whole_parameters = whole.parameters();
  ASSERT_EQ(whole_parameters.size(), parameters.size()) << what;
  for (std::size_t i = 0; i < parameters.size(); ++i) {
    EXPECT_EQ(whole_parameters[i]->name, parameters[i]->name) << what;
    EXPECT_LT(relative(gathered.values[i], whole_parameters[i]->gradient().to_vector()), bound)
        << what << ": gradient of " << parameters[i]->name;
  }
  EXPECT_TRUE(disagreeing.empty()) << what << ": whole parameters' gradients differ between ranks";
}

TEST_F(TensorParallelTest, EachLayerEqualsItsUnshardedVersion) {
  const int t = comm().size();
  for (DataType dtype : {DataType::float64, DataType::float32})
    for (bool sp : {false, true}) {
      if (sp && t == 1) continue;
      parallel::TensorParallelConfig config;
      config.sequence_parallel = sp;
      const TensorParallel tp(comm(), config);
      const std::string mode = std::string(name_of(dtype)) + (sp ? " sp" : "");
      const Layout seq = sp ? Layout::sequence_shard : Layout::whole;
      const std::int64_t B = 2, T = 24, h = 24, heads = 24, V = 48;
      const Tensor x = random_tensor("x", {B, T, h}, dtype);
      {
        model::Linear whole("l.fc", h, 48, true, dtype, 0.5, kSeed);
        parallel::ColumnParallelLinear split("l.fc", h, 48, true, dtype, 0.5, kSeed, tp, {}, tp.rank());
        expect_equivalent("column-parallel linear " + mode, tp, whole, split, x, seq, Layout::column_shard, h, 1);
      }
      {
        const Tensor wide = random_tensor("wide", {B, T, 48}, dtype);
        model::Linear whole("l.proj", 48, h, true, dtype, 0.5, kSeed);
        parallel::RowParallelLinear split("l.proj", 48, h, true, dtype, 0.5, kSeed, tp);
        expect_equivalent("row-parallel linear " + mode, tp, whole, split, wide, Layout::column_shard, seq, 48, 1);
      }
      {
        model::FeedForward whole("mlp", h, 4 * h, 0.2, dtype, 0.3, 0.3, kSeed);
        model::FeedForward split("mlp",
                                 std::make_unique<parallel::ColumnParallelLinear>("mlp.fc", h, 4 * h, true, dtype, 0.3,
                                                                                  kSeed, tp, parallel::ColumnSplit{}, tp.rank()),
                                 std::make_unique<parallel::RowParallelLinear>("mlp.proj", 4 * h, h, true, dtype, 0.3, kSeed, tp),
                                 std::make_unique<parallel::TensorParallelDropout>("mlp.dropout", 0.2, kSeed, tp));
        expect_equivalent("MLP " + mode, tp, whole, split, x, seq, seq, 4 * h, 2);
      }
      {
        model::CausalSelfAttention whole("attn", h, static_cast<int>(heads), 0.2, dtype, 0.3, 0.3, kSeed);
        model::CausalSelfAttention split(
            "attn", static_cast<int>(heads / t),
            std::make_unique<parallel::ColumnParallelLinear>("attn.qkv", h, 3 * h, true, dtype, 0.3, kSeed, tp,
                                                             parallel::ColumnSplit{3}, tp.rank()),
            std::make_unique<parallel::RowParallelLinear>("attn.proj", h, h, true, dtype, 0.3, kSeed, tp),
            std::make_unique<parallel::TensorParallelDropout>("attn.dropout", 0.2, kSeed, tp));
        expect_equivalent("attention " + mode, tp, whole, split, x, seq, seq, static_cast<int>(T), 4);
      }
      {
        Tensor tokens = Tensor::empty("tokens", {B, T}, DataType::int32, MemoryCategory::activations);
        initialize(tokens, Init::tokens(V), kSeed);
        model::Embedding whole("embedding", V, T, h, dtype, 0.5, kSeed);
        parallel::VocabParallelEmbedding split("embedding", V, T, h, dtype, 0.5, kSeed, tp);
        const model::PassContext context{0, 0, true, 0};
        const Tensor y_whole = whole.forward(tokens, context);
        const Tensor y = from_layout(tp, split.forward(tokens, context), seq);
        // One rank holds each token's row and the others add zeros: exact.
        EXPECT_EQ(y.to_vector(), y_whole.to_vector()) << "embedding " << mode << ": forward";
        const Tensor dy = random_tensor("embedding.dy", y_whole.shape(), dtype);
        whole.backward(dy, context);
        split.backward(to_layout(tp, dy, seq), context);
        parallel::ParameterValues local;
        for (model::Parameter* p : split.parameters()) {
          Tensor g = p->gradient();
          if (sp && !p->shard) tp.group().all_reduce(g.view(), g.view(), ReduceOp::sum);
          local.names.push_back(p->name);
          local.values.push_back(g.to_vector());
          local.state.emplace_back();
        }
        const auto gathered = parallel::gather_tensor_parallel(local, split.parameters(), tp.group(), nullptr);
        const auto whole_parameters = whole.parameters();
        for (std::size_t i = 0; i < whole_parameters.size(); ++i)
          EXPECT_LT(relative(gathered.values[i], whole_parameters[i]->gradient().to_vector()),
                    tolerance::regrouped_op_relative_bound(dtype, static_cast<int>(B * T), 1))
              << "embedding " << mode << ": gradient of " << whole_parameters[i]->name;
      }
      {
        // The loss: cross-entropy of whole logits against the vocabulary-parallel one on their split.
        const Tensor logits = random_tensor("logits", {B, T, V}, dtype, 2);
        Tensor targets = Tensor::empty("targets", {B, T}, DataType::int32, MemoryCategory::activations);
        initialize(targets, Init::tokens(V), kSeed + 1);
        model::CrossEntropyLoss whole;
        parallel::VocabParallelCrossEntropy split(V, tp);
        Tensor d_whole, d_part;
        const double l_whole = whole.compute(logits, targets, 17.0, &d_whole);
        const double l_split = split.compute(to_layout(tp, logits, Layout::column_shard), targets, 17.0, &d_part);
        const double bound = tolerance::regrouped_op_relative_bound(dtype, static_cast<int>(V) + 4, 2);
        EXPECT_LT(std::abs(l_split - l_whole) / std::abs(l_whole), bound) << "cross-entropy " << mode;
        EXPECT_LT(relative(from_layout(tp, d_part, Layout::column_shard).to_vector(), d_whole.to_vector()), bound)
            << "cross-entropy gradient " << mode;
      }
    }
}

// Cross-entropy is invariant to a constant added to a row of logits; the vocabulary-parallel
// loss must stay so far from zero, where exp overflows without the (global) maximum taken out
// first: offsets past float32's (88.7) and float64's (709.8) range, powers of two so that
// shifting back is exact. Both losses on the shifted logits against the float64 loss of the
// same values shifted back, within the regrouped-op bound.
TEST_F(TensorParallelTest, CrossEntropyOfShiftedLogitsIsUnchanged) {
  const int t = comm().size();
  const std::int64_t B = 2, T = 6, V = 48;
  if (V % t != 0) GTEST_SKIP() << "V not a multiple of t";
  const TensorParallel tp(comm(), parallel::TensorParallelConfig{});
  Tensor targets = Tensor::empty("targets", {B, T}, DataType::int32, MemoryCategory::activations);
  initialize(targets, Init::tokens(V), kSeed + 2);
  for (const auto& [dtype, offset] : {std::pair{DataType::float32, 128.0}, std::pair{DataType::float32, -256.0},
                                      std::pair{DataType::float64, 1024.0}, std::pair{DataType::float64, -2048.0}}) {
    const std::string mode = std::string(name_of(dtype)) + " offset " + std::to_string(offset);
    Tensor shifted = random_tensor("shifted", {B, T, V}, dtype, 2);
    const std::vector<double> unshifted = shifted.to_vector();
    for (std::int64_t i = 0; i < shifted.numel(); ++i) shifted.set(i, unshifted[static_cast<std::size_t>(i)] + offset);
    // The same values shifted back, exactly, in float64: the reference.
    Tensor back = Tensor::empty("back", {B, T, V}, DataType::float64, MemoryCategory::activations);
    const std::vector<double> values = shifted.to_vector();
    for (std::int64_t i = 0; i < back.numel(); ++i) back.set(i, values[static_cast<std::size_t>(i)] - offset);
    model::CrossEntropyLoss reference_loss;
    Tensor d_reference;
    const double reference = reference_loss.compute(back, targets, 5.0, &d_reference);
    model::CrossEntropyLoss whole;
    parallel::VocabParallelCrossEntropy split(V, tp);
    Tensor d_whole, d_part;
    const double l_whole = whole.compute(shifted, targets, 5.0, &d_whole);
    const double l_split = split.compute(to_layout(tp, shifted, Layout::column_shard), targets, 5.0, &d_part);
    const double bound = tolerance::regrouped_op_relative_bound(dtype, static_cast<int>(V) + 4, 2);
    ASSERT_TRUE(std::isfinite(l_whole) && std::isfinite(l_split)) << mode << ": " << l_whole << ", " << l_split;
    EXPECT_LT(std::abs(l_whole - reference) / reference, bound) << "single-device loss, " << mode;
    EXPECT_LT(std::abs(l_split - reference) / reference, bound) << "vocabulary-parallel loss, " << mode;
    EXPECT_LT(relative(d_whole.to_vector(), d_reference.to_vector()), bound) << "single-device gradient, " << mode;
    EXPECT_LT(relative(from_layout(tp, d_part, Layout::column_shard).to_vector(), d_reference.to_vector()), bound)
        << "vocabulary-parallel gradient, " << mode;
  }
}

TEST_F(TensorParallelTest, ShardedInitialisationEqualsSlicingTheWhole) {
  const model::GptConfig config = cases::tensor_case_model(DataType::float32);
  if (!divides(config.heads) || !divides(config.vocabulary)) GTEST_SKIP() << "the world does not divide the model";
  const TensorParallel tp(comm(), {});
  const auto split = parallel::build_tensor_parallel_gpt(config, tp);
  const auto whole = model::build_gpt(config);
  const auto whole_parameters = whole->parameters();
  const auto parameters = split->parameters();
  ASSERT_EQ(parameters.size(), whole_parameters.size());
  for (std::size_t i = 0; i < parameters.size(); ++i) {
    ASSERT_EQ(parameters[i]->name, whole_parameters[i]->name);
    const Tensor expected = parameters[i]->shard
                                ? slice(whole_parameters[i]->value, *parameters[i]->shard, "slice", MemoryCategory::workspace)
                                : whole_parameters[i]->value;
    EXPECT_EQ(parameters[i]->value.to_vector(), expected.to_vector()) << parameters[i]->name << " is not bit for bit the slice";
  }
  EXPECT_EQ(split->parameter_count(), theory::tensor_parallel_parameters_per_rank(config, comm().size()));
}

// What a rank keeps for backward per block, measured by the memory tracker, equals the
// formula; with sequence parallelism a t-th of the single-device block.
TEST_F(TensorParallelTest, ActivationBytesPerBlockEqualTheFormula) {
  const int t = comm().size();
  for (DataType dtype : {DataType::float32, DataType::float64, DataType::bfloat16, DataType::float16})
    for (bool sp : {false, true}) {
      if (sp && t == 1) continue;
      model::GptConfig config = cases::tensor_case_model(dtype);
      if (!divides(config.heads) || !divides(config.vocabulary) || (sp && !divides(config.sequence)))
        GTEST_SKIP() << "the world does not divide the model";
      parallel::TensorParallelConfig tc;
      tc.sequence_parallel = sp;
      const TensorParallel tp(comm(), tc);
      const auto m = parallel::build_tensor_parallel_gpt(config, tp);
      auto& tracker = MemoryTracker::process();
      std::vector<std::int64_t> kept;
      std::int64_t before = 0;
      std::vector<std::pair<model::Layer*, model::HookId>> hooks;
      for (model::Layer* layer : m->layers())
        if (std::string(layer->kind()) == "block")
          hooks.emplace_back(layer, layer->add_hook([&](model::Layer&, model::HookPoint point, const model::PassContext&) {
            if (point == model::HookPoint::before_forward) before = tracker.usage(MemoryCategory::activations).current;
            if (point == model::HookPoint::after_forward)
              kept.push_back(tracker.usage(MemoryCategory::activations).current - before);
          }));
      const std::int64_t batch = 3;
      const model::Batch b = model::gpt_batch(config, 0, 0, batch, batch);
      const model::PassContext context{0, 0, true, 0};
      const Tensor logits = m->forward(b.inputs, context);
      ASSERT_EQ(kept.size(), static_cast<std::size_t>(config.layers));
      const auto expected = parallel::find_technique(sp ? "tp_sp" : "tp")
                                .activation_bytes_per_layer(config, batch, t);
      for (std::size_t l = 0; l < kept.size(); ++l)
        EXPECT_EQ(kept[l], expected) << "block " << l << " " << config.describe() << (sp ? " sp" : "") << " at t = " << t;
      if (sp) {
        const auto single = theory::parity_block_activation_bytes(config, batch);
        EXPECT_EQ(expected * t, single) << "sequence parallelism keeps a t-th of the single device's block";
      }
      m->backward(Tensor::zeros_like(logits, "dlogits", MemoryCategory::activations), context);
      for (auto& [layer, id] : hooks) layer->remove_hook(id);
    }
}

// The checks can fail: each realistic bug is caught with the bound exceeded many times over.
TEST_F(TensorParallelTest, CatchesMissingAllReducesTransposedSplitsAndWrongShards) {
  if (comm().size() < 2 || comm().size() == 5) GTEST_SKIP() << "no tensor-parallel size above 1 divides this world";
  for (const char* fault : {"copy_without_all_reduce", "reduce_without_all_reduce", "transposed_split", "wrong_shard"}) {
    cases::TensorCase c;
    for (int t : {2, 3, 4})
      if (comm().size() % t == 0) c.tp = t;  // the largest the case's model allows; dp takes the rest
    c.fault = fault;
    c.steps = 1;
    const cases::TensorResult r = cases::run_tensor_case(comm(), c);
    EXPECT_FALSE(r.passed) << fault;
    EXPECT_GT(r.error, 1e3 * r.bound) << fault << ": " << r.message;
  }
}

TEST_F(TensorParallelTest, RefusesSizesThatDoNotDivideTheModel) {
  model::GptConfig c = cases::tensor_case_model(DataType::float32);  // 12 heads, vocabulary 48, sequence 12
  auto message = [&](int t, bool sp) {
    try {
      parallel::validate_tensor_parallel(c, t, sp);
    } catch (const UsageError& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  EXPECT_NE(message(5, false).find("tensor-parallel size 5 does not divide the model's heads 12, hidden 24, FFN 96, "
                                   "vocabulary 48"),
            std::string::npos)
      << message(5, false);
  c.vocabulary = 50;
  EXPECT_NE(message(4, false).find("does not divide the model's vocabulary 50"), std::string::npos) << message(4, false);
  c.vocabulary = 48;
  c.sequence = 10;
  EXPECT_NE(message(4, true).find("does not divide the sequence of 10 tokens"), std::string::npos) << message(4, true);
  EXPECT_EQ(message(4, false), "(accepted)");
  EXPECT_NE(message(1, true).find("sequence parallelism needs a tensor-parallel size above 1"), std::string::npos);
  EXPECT_EQ(message(6, false), "(accepted)");
}

}  // namespace
}  // namespace parity::test
