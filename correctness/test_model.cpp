// Models, optimizers and their accounting: parameter counts and matmul FLOPs equal the analytic
// formulas exactly, activation memory equals what the implementation is documented to keep,
// optimizers match their update rules, hooks fire in order, and a tiny model learns.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <optional>

#include "correctness/thrown.hpp"
#include "reference/core/error.hpp"
#include "reference/core/tolerance.hpp"
#include "reference/model/model.hpp"
#include "reference/model/optimizer.hpp"
#include "reference/ops/flops.hpp"
#include "reference/theory/model.hpp"

using namespace parity;
using namespace parity::model;

namespace {

GptConfig tiny_gpt(DataType dtype = DataType::float64) {
  return {.vocabulary = 48, .layers = 2, .hidden = 24, .heads = 3, .sequence = 8, .dtype = dtype};
}

std::int64_t sum_of_sizes(const Model& m) {
  std::int64_t n = 0;
  for (const Parameter* p : m.parameters()) n += p->value.numel();
  return n;
}

using parity::test::message_of;

}  // namespace

TEST(ModelAccounting, ParameterCountsEqualTheFormulas) {
  for (bool tied : {true, false})
    for (auto [layers, hidden, heads] : {std::tuple{1, 16, 2}, std::tuple{3, 24, 4}, std::tuple{2, 32, 8}}) {
      GptConfig c = tiny_gpt();
      c.layers = layers;
      c.hidden = hidden;
      c.heads = heads;
      c.tied_embeddings = tied;
      const auto m = build_gpt(c);
      EXPECT_EQ(sum_of_sizes(*m), theory::gpt_parameters(c)) << c.describe();
      std::int64_t block = 0;
      for (Parameter* p : m->layers()[1]->parameters()) block += p->value.numel();
      EXPECT_EQ(block, theory::gpt_block_parameters(hidden)) << "12h^2 + 13h at h=" << hidden;
    }
  MlpConfig mlp;
  mlp.layers = 5;
  const auto m = build_mlp(mlp);
  EXPECT_EQ(sum_of_sizes(*m), theory::mlp_parameters(mlp));
}

namespace {
// The whole model's gradient (every parameter, through every layer, the loss and a tied head)
// against central differences of the loss in float64. The context is the same for every
// evaluation, so dropout draws the same masks and the loss is a smooth function of parameters.
void expect_model_gradient(Model& m, const Batch& b, const PassContext& context, const std::string& what) {
  m.zero_grad();
  m.forward_backward(b, context);
  const double step = tolerance::kFiniteDifferenceStep;
  double diff2 = 0, ref2 = 0, largest = 0;
  std::string where;
  for (Parameter* p : m.parameters()) {
    for (std::int64_t i = 0; i < p->value.numel(); ++i) {
      const double x = p->value.at(i);
      p->value.set(i, x + step);
      const double up = m.loss(m.forward(b.inputs, context), b.targets, b.normalizer, nullptr);
      p->value.set(i, x - step);
      const double down = m.loss(m.forward(b.inputs, context), b.targets, b.normalizer, nullptr);
      p->value.set(i, x);
      const double numeric = (up - down) / (2 * step), analytic = p->grad.at(i);
      diff2 += (analytic - numeric) * (analytic - numeric);
      ref2 += numeric * numeric;
      if (std::fabs(analytic - numeric) > largest) {
        largest = std::fabs(analytic - numeric);
        where = p->name + "[" + std::to_string(i) + "] analytic " + std::to_string(analytic) + " numeric " +
                std::to_string(numeric);
      }
    }
  }
  for (Layer* layer : m.layers()) layer->release_saved(context);
  EXPECT_LT(std::sqrt(diff2 / ref2), tolerance::kGradientRelativeError) << what << "; largest difference at " << where;
}
}  // namespace

TEST(ModelGradient, GptAgainstFiniteDifferences) {
  for (bool tied : {true, false})
    for (double dropout : {0.0, 0.1}) {
      const GptConfig c{.vocabulary = 16, .layers = 2, .hidden = 8, .heads = 2, .sequence = 4, .tied_embeddings = tied,
                        .dropout = dropout, .dtype = DataType::float64};
      const auto m = build_gpt(c);
      expect_model_gradient(*m, gpt_batch(c, 0, 0, 2, 2), {3, 0, true, 0},
                            c.describe() + " dropout " + std::to_string(dropout));
    }
}

TEST(ModelGradient, MlpAgainstFiniteDifferences) {
  const MlpConfig c{.inputs = 5, .width = 7, .outputs = 3, .layers = 3, .dtype = DataType::float64};
  const auto m = build_mlp(c);
  expect_model_gradient(*m, mlp_batch(c, 0, 0, 4, 4), {}, c.describe());
}

TEST(ModelAccounting, CountedFlopsEqualTheFormulasExactly) {
  for (auto [batch, layers, hidden, heads, sequence] :
       {std::tuple{2, 2, 24, 3, 8}, std::tuple{1, 3, 16, 4, 12}, std::tuple{3, 1, 32, 2, 5}}) {
    GptConfig c = tiny_gpt(DataType::float32);
    c.layers = layers;
    c.hidden = hidden;
    c.heads = heads;
    c.sequence = sequence;
    const auto m = build_gpt(c);
    // Per block: count a block's forward through its hooks.
    std::vector<std::int64_t> block_forward;
    std::int64_t start = 0;
    for (Layer* layer : m->layers())
      if (std::string(layer->kind()) == "block")
        layer->add_hook([&](Layer&, HookPoint point, const PassContext&) {
          if (point == HookPoint::before_forward) start = ops::flop_counter().matmul;
          if (point == HookPoint::after_forward) block_forward.push_back(ops::flop_counter().matmul - start);
        });
    const Batch b = gpt_batch(c, 0, 0, batch, batch);
    const ops::FlopScope step;
    m->forward_backward(b, {});
    ASSERT_EQ(block_forward.size(), static_cast<std::size_t>(layers));
    for (auto f : block_forward) EXPECT_EQ(f, theory::gpt_block_forward_flops(batch, sequence, hidden));
    EXPECT_EQ(step.matmul(), theory::gpt_step_flops(c, batch)) << c.describe() << " B=" << batch;
    // Megatron's closed form has 14 floating-point operations.
    EXPECT_NEAR(theory::megatron_step_flops(c, batch), static_cast<double>(step.matmul()),
                tolerance::closed_form_relative_bound(14) * static_cast<double>(step.matmul()))
        << "Megatron's closed form";
  }
  MlpConfig mlp;
  const auto m = build_mlp(mlp);
  const ops::FlopScope step;
  m->forward_backward(mlp_batch(mlp, 0, 0, 6, 6), {});
  EXPECT_EQ(step.matmul(), 3 * theory::mlp_forward_flops(mlp, 6));
}

TEST(ModelAccounting, ActivationBytesKeptPerBlockEqualTheImplementationFormula) {
  for (DataType dtype : {DataType::float32, DataType::float64, DataType::bfloat16, DataType::float16})
    for (double dropout : {0.0, 0.1}) {
      GptConfig c = tiny_gpt(dtype);
      c.dropout = dropout;
      const std::int64_t batch = 3;
      const auto m = build_gpt(c);
      auto& tracker = MemoryTracker::process();
      std::vector<std::int64_t> kept, transient;
      std::int64_t before = 0;
      std::optional<PeakScope> scope;
      for (Layer* layer : m->layers())
        if (std::string(layer->kind()) == "block")
          layer->add_hook([&](Layer&, HookPoint point, const PassContext&) {
            if (point == HookPoint::before_forward) {
              scope.emplace();
              before = tracker.usage(MemoryCategory::activations).current;
            }
            if (point == HookPoint::after_forward) {
              const std::int64_t now = tracker.usage(MemoryCategory::activations).current - before;
              kept.push_back(now);
              transient.push_back(scope->peak_above_start(MemoryCategory::activations) - now);
              scope.reset();
            }
          });
      const Batch b = gpt_batch(c, 0, 0, batch, batch);
      const Tensor logits = m->forward(b.inputs, {});
      ASSERT_EQ(kept.size(), static_cast<std::size_t>(c.layers));
      // 16-bit blocks keep their LayerNorm statistics in float32.
      const std::int64_t statistic = dtype == DataType::float64 ? 8 : 4;
      const auto expected = theory::parity_block_activation_bytes(c.sequence, batch, c.hidden, c.heads,
                                                                  static_cast<std::int64_t>(size_of(dtype)), statistic);
      EXPECT_EQ(expected, theory::parity_block_activation_bytes(c, batch));
      for (std::size_t l = 0; l < kept.size(); ++l) {
        EXPECT_EQ(kept[l], expected) << "block " << l << " " << c.describe() << " dropout " << dropout
                                     << "; Korthikanti (16-bit) "
                                     << theory::korthikanti_layer_activation_bytes(c.sequence, batch, c.hidden, c.heads);
        // Within the forward, at most the attention projection's output plus, with dropout, its
        // dropped copy exist beyond what is kept (docs/model-accounting.md).
        EXPECT_LE(transient[l], (dropout > 0 ? 2 : 1) * batch * c.sequence * c.hidden * static_cast<std::int64_t>(size_of(dtype)));
      }
      m->backward(Tensor::zeros_like(logits, "dlogits", MemoryCategory::activations), {});
      for (Layer* layer : m->layers()) EXPECT_EQ(layer->saved_passes(), 0u) << layer->name();
      // An evaluation pass keeps nothing for a backward that never comes.
      m->forward(b.inputs, {0, 0, false});
      for (Layer* layer : all_layers(m->layers()))
        EXPECT_EQ(layer->saved_passes(), 0u) << layer->name() << " after an evaluation pass";
    }
}

TEST(ModelAccounting, ExactCountsRefuseToOverflow) {
  // Megatron's 1T configuration (Narayanan et al. 2021, table 1): a step of batch 2048 is about
  // 2.6e19 FLOPs, beyond int64's 9.2e18; the exact count refuses, the closed form still answers.
  const GptConfig c{.vocabulary = 51200, .layers = 128, .hidden = 25600, .heads = 160, .sequence = 2048};
  EXPECT_THROW(theory::gpt_step_flops(c, 2048), UsageError);
  EXPECT_GT(theory::megatron_step_flops(c, 2048), 9.3e18);
}

TEST(ModelAccounting, ImplementationFormulaDiffersFromKorthikantiAsDocumented) {
  // docs/model-accounting.md: at 2 bytes per value, parity keeps Korthikanti's sbh(34 + 5as/h)
  // minus the dropout masks (2sbh + as^2b) and the dropped probabilities (2as^2b), plus the
  // LayerNorm statistics (4 float32 values per token).
  for (auto [s, b, h, a] : {std::tuple{8, 2, 24, 3}, std::tuple{128, 4, 256, 8}, std::tuple{2048, 1, 4096, 32}}) {
    const double korthikanti = theory::korthikanti_layer_activation_bytes(s, b, h, a);
    const double explained = korthikanti - 2.0 * s * b * h - 3.0 * a * s * s * b + 16.0 * s * b;
    EXPECT_EQ(static_cast<double>(theory::parity_block_activation_bytes(s, b, h, a, 2, 4)), explained)
        << "s=" << s << " b=" << b << " h=" << h << " a=" << a;
  }
}

TEST(Optimizers, AdamWFollowsItsUpdateRule) {
  for (DataType state : {DataType::float64, DataType::float32}) {
    AdamWConfig config;
    config.learning_rate = 0.1;
    config.weight_decay = 0.05;
    AdamW adam(config, state);
    Parameter p;
    p.name = "p";
    p.value = Tensor::empty("p", {3}, DataType::float64, MemoryCategory::parameters);
    const double p0[3] = {0.5, -1.0, 2.0};
    const double g[3][3] = {{0.1, -0.2, 0.3}, {0.05, 0.4, -0.1}, {-0.3, 0.0, 0.2}};
    double expect[3], m[3] = {}, v[3] = {};
    for (int i = 0; i < 3; ++i) p.value.set(i, expect[i] = p0[i]);
    for (int t = 1; t <= 3; ++t) {
      for (int i = 0; i < 3; ++i) p.gradient().set(i, g[t - 1][i]);
      adam.step({&p});
      for (int i = 0; i < 3; ++i) {  // the rule, written out in float64
        expect[i] -= 0.1 * 0.05 * expect[i];
        m[i] = 0.9 * m[i] + 0.1 * g[t - 1][i];
        v[i] = 0.999 * v[i] + 0.001 * g[t - 1][i] * g[t - 1][i];
        expect[i] -= 0.1 * (m[i] / (1 - std::pow(0.9, t))) / (std::sqrt(v[i] / (1 - std::pow(0.999, t))) + 1e-8);
      }
    }
    // float64 state: a few roundings of an O(1) value; float32 state: about ten float32 roundings
    // per step on values of order one, three steps.
    const double bound = state == DataType::float64 ? 1e-15 : 30 * unit_roundoff(DataType::float32);
    for (int i = 0; i < 3; ++i) EXPECT_NEAR(p.value.at(i), expect[i], bound) << "element " << i;
    EXPECT_EQ(adam.state_of("p").size(), 2u);
    EXPECT_EQ(adam.state_of("p")[0].category(), MemoryCategory::optimizer_state);
  }
}

// 1 - beta is formed in float64 and rounded once to the state's type: in float32,
// 1 - 0.999f is 0.0010000467 (4.7e-5 off), which the first step writes into v whole. After one
// step from zero moments with g = 1, m and v are exactly 1 - beta1 and 1 - beta2 rounded once,
// on the vectorised path (float32 values and state) and the scalar one (float64 values).
TEST(Optimizers, AdamWFormsOneMinusBetaOnce) {
  for (DataType values : {DataType::float32, DataType::float64}) {
    AdamW adam(AdamWConfig{}, DataType::float32);
    Parameter p;
    p.name = "p";
    p.value = Tensor::empty("p", {9}, values, MemoryCategory::parameters);
    for (int i = 0; i < 9; ++i) {
      p.value.set(i, 0.25 * i);
      p.gradient().set(i, 1.0);
    }
    adam.step({&p});
    const auto& state = adam.state_of("p");
    for (int i = 0; i < 9; ++i) {
      EXPECT_EQ(state[0].at(i), static_cast<double>(static_cast<float>(1 - AdamWConfig{}.beta1))) << name_of(values);
      EXPECT_EQ(state[1].at(i), static_cast<double>(static_cast<float>(1 - AdamWConfig{}.beta2))) << name_of(values);
    }
  }
}

TEST(Optimizers, WeightDecayGroupsSpareBiasesNormsAndTables) {
  // GPT-2's and Megatron's groups: the weight matrices decay; biases, LayerNorm parameters and the
  // embedding tables do not. With zero gradients AdamW's step is the decay alone: p (1 - lr wd)
  // exactly for a decayed parameter, p unchanged otherwise.
  const auto m = build_gpt(tiny_gpt(DataType::float64));
  AdamWConfig config;
  config.learning_rate = 0.5;
  config.weight_decay = 0.25;  // 1 - lr wd = 7/8, exact
  config.decay_groups = DecayGroups::matrices;
  AdamW adam(config, DataType::float64);
  std::map<std::string, std::vector<double>> before;
  for (Parameter* p : m->parameters()) {
    before[p->name] = p->value.to_vector();
    p->gradient();  // zeros
  }
  adam.step(m->parameters());
  int decayed = 0, spared = 0;
  for (Parameter* p : m->parameters()) {
    const std::vector<double> after = p->value.to_vector();
    const bool matrix = p->name.ends_with(".weight");
    (matrix ? decayed : spared) += 1;
    EXPECT_EQ(adam.decays(p->name), matrix) << p->name;
    for (std::size_t i = 0; i < after.size(); ++i) {
      ASSERT_EQ(after[i], matrix ? before[p->name][i] * 0.875 : before[p->name][i]) << p->name << "[" << i << "]";
    }
  }
  // Per block qkv, proj, fc and fc2; biases, gains and shifts, and the tied table spared.
  EXPECT_EQ(decayed, 4 * tiny_gpt(DataType::float64).layers);
  EXPECT_GT(spared, decayed);
  EXPECT_FALSE(decays(DecayGroups::matrices, "embedding.wpe"));
  EXPECT_TRUE(decays(DecayGroups::matrices, "lm_head.weight"));
  EXPECT_TRUE(decays(DecayGroups::all, "blocks.0.ln1.gamma"));
  EXPECT_EQ(parse_decay_groups("matrices"), DecayGroups::matrices);
  EXPECT_THROW(parse_decay_groups("biases"), UsageError);
}

// SGD spares the same groups: with zero gradients and no momentum its step is p (1 - lr wd)
// for a weight matrix, nothing for the rest.
TEST(Optimizers, SgdWeightDecaySparesTheSameGroups) {
  const auto m = build_gpt(tiny_gpt(DataType::float64));
  Sgd sgd({0.5, 0.0, 0.25, DecayGroups::matrices}, DataType::float64);
  std::map<std::string, std::vector<double>> before;
  for (Parameter* p : m->parameters()) {
    before[p->name] = p->value.to_vector();
    p->gradient();  // zeros
  }
  sgd.step(m->parameters());
  for (Parameter* p : m->parameters()) {
    const bool matrix = p->name.ends_with(".weight");
    const std::vector<double> after = p->value.to_vector();
    for (std::size_t i = 0; i < after.size(); ++i)
      ASSERT_EQ(after[i], matrix ? before[p->name][i] * 0.875 : before[p->name][i]) << p->name << "[" << i << "]";
  }
}

TEST(Optimizers, SgdWithMomentumAndWeightDecay) {
  Sgd sgd({0.1, 0.9, 0.01}, DataType::float64);
  Parameter p;
  p.name = "p";
  p.value = Tensor::empty("p", {1}, DataType::float64, MemoryCategory::parameters);
  p.value.set(0, 1.0);
  double x = 1.0, buf = 0;
  for (double g : {0.5, -0.25, 1.0}) {
    p.gradient().set(0, g);
    sgd.step({&p});
    buf = 0.9 * buf + (g + 0.01 * x);
    x -= 0.1 * buf;
  }
  EXPECT_NEAR(p.value.at(0), x, 1e-15);
  Sgd plain({0.1, 0, 0}, DataType::float32);
  EXPECT_EQ(plain.state_count(), 0);
}

TEST(Training, TinyGptLearnsThePermutationTask) {
  GptConfig c = tiny_gpt(DataType::float32);
  const auto m = build_gpt(c);
  AdamW adam({3e-3, 0.9, 0.999, 1e-8, 0.0}, DataType::float32);
  double first = 0, last = 0;
  for (int step = 0; step < 80; ++step) {
    const double loss = train_step(*m, adam, gpt_batch(c, static_cast<std::uint64_t>(step), 0, 8, 8),
                                   static_cast<std::uint64_t>(step));
    if (step == 0) first = loss;
    last = loss;
  }
  // Untrained, the loss is about ln V (uniform guesses); the next token is a fixed function of
  // the current one, so the loss can fall to zero. Require it to fall below a third of ln V.
  EXPECT_NEAR(first, std::log(static_cast<double>(c.vocabulary)), 0.5);
  EXPECT_LT(last, std::log(static_cast<double>(c.vocabulary)) / 3) << "first " << first;
}

TEST(Training, MlpLearnsTheTeacher) {
  MlpConfig c;
  c.dtype = DataType::float64;
  const auto m = build_mlp(c);
  Sgd sgd({0.05, 0.9, 0}, DataType::float64);
  double first = 0, last = 0;
  for (int step = 0; step < 300; ++step) {
    const double loss = train_step(*m, sgd, mlp_batch(c, static_cast<std::uint64_t>(step), 0, 16, 16),
                                   static_cast<std::uint64_t>(step));
    if (step == 0) first = loss;
    last = loss;
  }
  EXPECT_LT(last, first / 4) << "first " << first << " last " << last;
}

TEST(Layers, HooksFireAroundEveryForwardAndBackward) {
  MlpConfig c;
  c.layers = 3;
  const auto m = build_mlp(c);
  std::vector<std::string> events;
  for (Layer* layer : m->layers())
    layer->add_hook([&](Layer& l, HookPoint point, const PassContext& ctx) {
      const char* names[] = {"F<", "F>", "B<", "B>"};
      events.push_back(std::string(names[static_cast<int>(point)]) + l.name() + "/" + std::to_string(ctx.micro_batch));
    });
  m->forward_backward(mlp_batch(c, 0, 0, 4, 4), {0, 1, true});
  const std::vector<std::string> expected = {"F<layers.0/1", "F>layers.0/1", "F<layers.1/1", "F>layers.1/1",
                                             "F<layers.2/1", "F>layers.2/1", "B<layers.2/1", "B>layers.2/1",
                                             "B<layers.1/1", "B>layers.1/1", "B<layers.0/1", "B>layers.0/1"};
  EXPECT_EQ(events, expected);
}

TEST(Layers, SeveralMicroBatchesInFlightGiveTheSameGradients) {
  // A pipeline stage runs several forwards before their backwards; saved state is kept per
  // micro-batch, so the gradients equal those of running each micro-batch alone, bit for bit.
  GptConfig c = tiny_gpt();
  const auto sequential = build_gpt(c), interleaved = build_gpt(c);
  const Batch b0 = gpt_batch(c, 0, 0, 2, 4), b1 = gpt_batch(c, 0, 2, 2, 4);
  sequential->forward_backward(b0, {0, 0, true});
  sequential->forward_backward(b1, {0, 1, true});
  Tensor d0, d1;
  const Tensor y0 = interleaved->forward(b0.inputs, {0, 0, true});
  const Tensor y1 = interleaved->forward(b1.inputs, {0, 1, true});
  EXPECT_EQ(interleaved->layers()[1]->saved_passes(), 2u);
  interleaved->loss(y0, b0.targets, b0.normalizer, &d0);
  interleaved->loss(y1, b1.targets, b1.normalizer, &d1);
  interleaved->backward(d0, {0, 0, true});
  interleaved->backward(d1, {0, 1, true});
  const auto ps = sequential->parameters(), pi = interleaved->parameters();
  for (std::size_t i = 0; i < ps.size(); ++i)
    for (std::int64_t j = 0; j < ps[i]->grad.numel(); ++j)
      ASSERT_EQ(ps[i]->grad.at(j), pi[i]->grad.at(j)) << ps[i]->name << " element " << j;
  EXPECT_THROW(interleaved->backward(d0, {0, 0, true}), Error);  // its state was consumed
}

TEST(Layers, SplitBackwardDefersTheWeightGradients) {
  // Zero-bubble pipelines split a backward into I (input gradients) and W (weight gradients).
  // I leaves every parameter gradient untouched and keeps the work in the layers; W then gives
  // the whole backward's gradients bit for bit. The hooks that mean "gradients final" fire at W.
  GptConfig c = tiny_gpt();
  c.dropout = 0.1;
  const auto whole = build_gpt(c), split = build_gpt(c);
  const Batch b = gpt_batch(c, 0, 0, 2, 4);
  const PassContext pass{0, 0, true};
  PassContext input_only = pass;
  input_only.defer_weight_gradients = true;
  int final_hooks = 0;
  // The layers' gradients become final in the same order either way (data parallelism's
  // buckets are filled in that order).
  std::vector<std::string> final_whole, final_split;
  for (Layer* layer : all_layers(split->layers()))
    layer->add_hook([&](Layer& l, HookPoint point, const PassContext&) {
      final_hooks += point == HookPoint::after_backward;
      if (point == HookPoint::after_backward) final_split.push_back(l.name());
    });
  for (Layer* layer : all_layers(whole->layers()))
    layer->add_hook([&](Layer& l, HookPoint point, const PassContext&) {
      if (point == HookPoint::after_backward) final_whole.push_back(l.name());
    });
  Tensor xw = b.inputs, xs = b.inputs, dw, ds;
  for (Layer* layer : whole->layers()) xw = layer->forward(xw, pass);
  for (Layer* layer : split->layers()) xs = layer->forward(xs, pass);
  whole->loss(xw, b.targets, b.normalizer, &dw);
  split->loss(xs, b.targets, b.normalizer, &ds);
  const auto layers_w = whole->layers(), layers_s = split->layers();
  for (std::size_t i = layers_w.size(); i-- > 0;) {
    dw = layers_w[i]->backward(dw, pass);
    ds = layers_s[i]->backward(ds, input_only);
    if (i == 0) break;  // the embedding: tokens have no gradient
    ASSERT_EQ(dw.numel(), ds.numel());
    for (std::int64_t j = 0; j < dw.numel(); ++j) ASSERT_EQ(dw.at(j), ds.at(j)) << layers_s[i]->name() << " dx " << j;
  }
  EXPECT_EQ(final_hooks, 0);
  for (Parameter* p : split->parameters()) {
    if (!p->grad.defined()) continue;
    for (std::int64_t j = 0; j < p->grad.numel(); ++j) ASSERT_EQ(p->grad.at(j), 0.0) << p->name << " written by I";
  }
  for (Layer* layer : layers_s) {
    const bool weights = !layer->parameters().empty() || !layer->borrowed_parameters().empty();  // a tied head borrows
    EXPECT_EQ(layer->deferred_passes(), weights ? 1u : 0u) << layer->name();
  }
  for (std::size_t i = layers_s.size(); i-- > 0;) layers_s[i]->backward_weights(input_only);
  EXPECT_EQ(final_hooks, static_cast<int>(all_layers(split->layers()).size()));
  EXPECT_EQ(final_split, final_whole);
  for (Layer* layer : layers_s) EXPECT_EQ(layer->deferred_passes(), 0u) << layer->name();
  const auto pw = whole->parameters(), ps = split->parameters();
  for (std::size_t i = 0; i < pw.size(); ++i)
    for (std::int64_t j = 0; j < pw[i]->grad.numel(); ++j)
      ASSERT_EQ(pw[i]->grad.at(j), ps[i]->grad.at(j)) << pw[i]->name << " element " << j;
}

// A layer's auxiliary losses of one pass add up (a layer may add several), are taken once, and
// an evaluation pass adds none.
TEST(Layers, AuxiliaryLossesOfAPassAddUp) {
  class TwoLosses final : public Layer {
   public:
    TwoLosses() : Layer("two") {}
    const char* kind() const override { return "test"; }

   protected:
    Tensor do_forward(const Tensor& x, const PassContext& context) override {
      add_auxiliary_loss(context, 0.25);
      add_auxiliary_loss(context, 0.5);
      return x;
    }
    Tensor do_backward(const Tensor& dy, const PassContext&) override { return dy; }
  } layer;
  const Tensor x = Tensor::zeros("x", {2}, DataType::float64, MemoryCategory::activations);
  layer.forward(x, {0, 0, true});
  layer.forward(x, {0, 1, true});
  EXPECT_EQ(layer.take_auxiliary_loss({0, 0, true}), 0.75);
  EXPECT_EQ(layer.take_auxiliary_loss({0, 1, true}), 0.75);
  EXPECT_EQ(layer.take_auxiliary_loss({0, 0, true}), 0.0);
  layer.forward(x, {0, 0, false});
  EXPECT_EQ(layer.take_auxiliary_loss({0, 0, false}), 0.0);
}

TEST(Layers, DropoutReplaysFromItsKey) {
  GptConfig c = tiny_gpt();
  c.dropout = 0.2;
  const auto m = build_gpt(c);
  const Batch b = gpt_batch(c, 0, 0, 2, 2);
  const Tensor a = m->forward(b.inputs, {5, 0, true}).clone("a", MemoryCategory::workspace);
  const Tensor again = m->forward(b.inputs, {5, 1, true});  // another micro-batch slot, same rows
  const Tensor other = m->forward(b.inputs, {6, 0, true});
  const Tensor eval = m->forward(b.inputs, {5, 0, false});
  std::int64_t same = 0, differ = 0, differ_eval = 0;
  for (std::int64_t i = 0; i < a.numel(); ++i) {
    same += a.at(i) == again.at(i);
    differ += a.at(i) != other.at(i);
    differ_eval += a.at(i) != eval.at(i);
  }
  EXPECT_EQ(same, a.numel()) << "same step and rows: the same masks";
  EXPECT_GT(differ, a.numel() / 2) << "another step: other masks";
  EXPECT_GT(differ_eval, a.numel() / 2) << "evaluation: no dropout";
  // The three training passes above await their backward; the evaluation pass kept nothing.
  for (Layer* layer : m->layers()) EXPECT_EQ(layer->saved_passes(), 3u) << layer->name();
}

TEST(Layers, DropoutMaskOfAShardIsTheSliceOfTheWholeBatchs) {
  // Rows [2, 5) of a batch of 6, run alone with first_row = 2, draw exactly the whole batch's
  // mask for those rows: data parallelism and micro-batching keep the reference's dropout.
  Dropout dropout("blocks.0.attn.dropout", 0.3, 11);
  Tensor whole = Tensor::empty("x", {6, 4, 5}, DataType::float64, MemoryCategory::activations);
  initialize(whole, Init::normal(0, 1), 3);
  const Tensor y_whole = dropout.forward(whole, {2, 0, true, 0});
  const ShardSpec rows = ShardSpec(whole.shape()).range(0, 2, 5);
  const Tensor part = slice(whole, rows, "x.rows", MemoryCategory::activations);
  const Tensor y_part = dropout.forward(part, {2, 0, true, 2});
  const Tensor expected = slice(y_whole, rows, "y.rows", MemoryCategory::workspace);
  std::int64_t dropped = 0;
  for (std::int64_t i = 0; i < y_part.numel(); ++i) {
    ASSERT_EQ(y_part.at(i), expected.at(i)) << "element " << i;
    dropped += y_part.at(i) == 0;
  }
  EXPECT_GT(dropped, 0);
  // And its backward applies the same mask.
  const Tensor ones = Tensor::zeros("dy", part.shape(), DataType::float64, MemoryCategory::activations);
  Tensor dy = ones;
  dy.fill(1);
  const Tensor dx = dropout.backward(dy, {2, 0, true, 2});
  for (std::int64_t i = 0; i < dx.numel(); ++i) EXPECT_EQ(dx.at(i) == 0, y_part.at(i) == 0) << "element " << i;
}

TEST(Layers, TiedHeadListsTheTableItBorrows) {
  // ZeRO-3 gathers a layer's parameters before its forward: a tied head must name the table.
  const auto m = build_gpt(tiny_gpt());
  Layer* head = m->layers().back();
  ASSERT_STREQ(head->kind(), "lm_head");
  EXPECT_TRUE(head->parameters().empty()) << "owned by the embedding, updated once";
  ASSERT_EQ(head->borrowed_parameters().size(), 1u);
  EXPECT_EQ(head->borrowed_parameters()[0]->name, "embedding.wte");
  EXPECT_EQ(head->borrowed_parameters()[0], &static_cast<Embedding*>(m->layers().front())->token_table());
  GptConfig untied = tiny_gpt();
  untied.tied_embeddings = false;
  EXPECT_TRUE(build_gpt(untied)->layers().back()->borrowed_parameters().empty());
}

TEST(ModelErrors, InvalidConfigsAreRefusedByName) {
  GptConfig c = tiny_gpt();
  c.heads = 5;
  EXPECT_NE(message_of<UsageError>([&] { build_gpt(c); }).find("heads 5 do not divide hidden 24"), std::string::npos);
  c = tiny_gpt();
  c.layers = 0;
  EXPECT_NE(message_of<UsageError>([&] { build_gpt(c); }).find("must all be positive"), std::string::npos);
  c = tiny_gpt(DataType::int32);
  EXPECT_NE(message_of<UsageError>([&] { build_gpt(c); }).find("int32"), std::string::npos);
  c = tiny_gpt();
  EXPECT_NE(message_of<UsageError>([&] { build_gpt(c, {3, 9}); }).find("layer range [3, 9)"), std::string::npos);
  // Dropout is a probability of dropping below 1: at 1 every activation is dropped and the
  // kept ones' scale 1 / (1 - p) is infinite.
  c = tiny_gpt();
  c.dropout = 1;
  EXPECT_NE(message_of<UsageError>([&] { build_gpt(c); }).find("dropout must be in [0, 1)"), std::string::npos);
  c.dropout = 0.999;
  EXPECT_NO_THROW(c.validate());
  MlpConfig mlp;
  mlp.width = 0;
  EXPECT_THROW(build_mlp(mlp), UsageError);
  EXPECT_THROW(AdamW({-1.0}, DataType::float32), UsageError);
  // The betas lie below 1: at 1 a bias correction 1 - beta^t is 0 and every step divides by it.
  EXPECT_THROW(AdamW(AdamWConfig{.beta1 = 1}, DataType::float32), UsageError);
  EXPECT_THROW(AdamW(AdamWConfig{.beta2 = 1}, DataType::float32), UsageError);
  EXPECT_THROW(Sgd({0.1, 0, 0}, DataType::bfloat16), UsageError);
  EXPECT_THROW(gpt_batch(tiny_gpt(), 0, 3, 2, 4), UsageError);  // rows beyond the global batch
  // A batch of the wrong width reaches the first layer, which names the tensors.
  MlpConfig good;
  const auto m = build_mlp(good);
  Tensor wrong = Tensor::zeros("inputs", {4, good.inputs + 1}, good.dtype, MemoryCategory::activations);
  const std::string what = message_of<Error>([&] { m->forward(wrong, {}); });
  EXPECT_NE(what.find("inputs [4, 17] float32"), std::string::npos) << what;
  EXPECT_NE(what.find("layers.0.linear.weight [16, 32]"), std::string::npos) << what;
}
