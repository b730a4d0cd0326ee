// The calibrated rates (reference/theory/calibration.hpp): interpolation that returns what was
// measured at the measured points and stays between them elsewhere; the reference GPT step
// composed from them, its products against the FLOP formula and its element-wise work against
// a count by hand; the JSON reader; a calibrated cluster file read by the planner.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>

#include "reference/core/error.hpp"
#include "reference/core/json.hpp"
#include "reference/theory/calibration.hpp"
#include "reference/theory/model.hpp"
#include "reference/theory/planner.hpp"

namespace parity::theory {
namespace {

// Products at `gflops` GFLOP/s at every shape except one (if given); every op at `ns` ns an
// element at every size.
Calibration uniform(double gflops, double ns) {
  Calibration c;
  c.dtype = "float32";
  for (const std::int64_t m : kGemmSides)
    for (const std::int64_t n : kGemmSides)
      for (const std::int64_t k : kGemmSides)
        c.gemm.push_back({m, n, k, 2.0 * static_cast<double>(m * n * k) / (gflops * 1e9)});
  for (const char* op : kCalibratedOps)
    for (const std::int64_t e : kOpElements) c.ops.push_back({op, e, static_cast<double>(e) * ns * 1e-9});
  return c;
}

model::GptConfig gpt(int layers, std::int64_t hidden, int heads, std::int64_t sequence, std::int64_t vocabulary) {
  return {.vocabulary = vocabulary, .layers = layers, .hidden = hidden, .heads = heads, .sequence = sequence};
}
// The tiny preset's shape: 2 layers, hidden 64, 4 heads, sequence 64, vocabulary 256.
model::GptConfig tiny_gpt() { return gpt(2, 64, 4, 64, 256); }

TEST(Calibration, ProductsAreTheMeasuredOnesOnTheGridAndBetweenThemElsewhere) {
  Calibration c = uniform(100, 1);
  // One shape twice as slow: at it, exactly its time; halfway (in log) to a neighbour, the
  // geometric mean of the two rates.
  const std::size_t sides = std::size(kGemmSides);
  const std::size_t slow = (1 * sides + 2) * sides + 3;  // 64 x 256 x 1024
  c.gemm[slow].seconds *= 2;
  // (Within rounding: the rate is interpolated in its logarithm.)
  EXPECT_NEAR(c.gemm_seconds(64, 256, 1024), c.gemm[slow].seconds, 1e-12 * c.gemm[slow].seconds);
  EXPECT_NEAR(c.gemm_seconds(256, 256, 256), 2.0 * 256 * 256 * 256 / 100e9, 1e-12 * 2.0 * 256 * 256 * 256 / 100e9);
  const double m = 128;  // halfway between 64 and 256 in log
  EXPECT_NEAR(c.gemm_seconds(m, 256, 1024), 2.0 * m * 256 * 1024 / (std::sqrt(50.0 * 100.0) * 1e9),
              1e-12 * c.gemm_seconds(m, 256, 1024));
  // Beyond the grid the rate of its edge: time in proportion to the FLOPs.
  EXPECT_NEAR(c.gemm_seconds(4096, 4096, 4096), 2.0 * 4096.0 * 4096 * 4096 / 100e9, 1e-6);
  EXPECT_NEAR(c.gemm_seconds(4, 16, 16), 2.0 * 4 * 16 * 16 / 100e9, 1e-18);
  EXPECT_DOUBLE_EQ(c.best_gemm_GFLOPs(), 100);
}

TEST(Calibration, OpsInterpolateTheirTimePerElementAndRefuseWhatWasNotMeasured) {
  Calibration c = uniform(100, 1);
  for (OpSample& s : c.ops)
    if (s.op == "gelu_forward" && s.elements == kOpElements[3]) s.seconds *= 4;  // 4 ns at the largest
  EXPECT_DOUBLE_EQ(c.op_seconds("gelu_forward", static_cast<double>(kOpElements[3])), 4e-9 * static_cast<double>(kOpElements[3]));
  // Halfway in log elements between 1 ns and 4 ns: 2 ns.
  const double e = std::sqrt(static_cast<double>(kOpElements[2]) * static_cast<double>(kOpElements[3]));
  EXPECT_NEAR(c.op_seconds("gelu_forward", e), 2e-9 * e, 1e-12 * e);
  EXPECT_NEAR(c.op_seconds("gelu_forward", 1e9), 4.0, 1e-9);  // past the largest: its rate
  EXPECT_NEAR(c.op_seconds("add", 10), 10e-9, 1e-20);
  // Below the shortest length: the line through the two shortest, here 2 us a call and 1 ns an
  // element (a rate alone would give 1 ns an element).
  for (OpSample& s : c.ops)
    if (s.op == "add") s.seconds = 2e-6 + 1e-9 * static_cast<double>(s.elements);
  EXPECT_NEAR(c.op_seconds("add", 1000), 2e-6 + 1000e-9, 1e-15);
  EXPECT_NEAR(c.op_seconds("add", 0), 2e-6, 1e-15);
  EXPECT_THROW(c.op_seconds("rope", 100), UsageError);
  Calibration short_grid = c;
  short_grid.gemm.pop_back();
  EXPECT_THROW(short_grid.validate(), UsageError);
  Calibration no_adamw = c;
  std::erase_if(no_adamw.ops, [](const OpSample& s) { return s.op == "adamw"; });
  EXPECT_THROW(no_adamw.validate(), UsageError);
  EXPECT_NO_THROW(c.validate());
}

// The step's products are every matrix multiply the model counts: equal to the formula.
TEST(Calibration, ReferenceStepCostsEveryProductTheFormulaCounts) {
  for (const auto& [layers, hidden, heads, sequence, vocabulary] :
       {std::tuple{2, 64, 4, 64, 256}, std::tuple{4, 128, 4, 128, 512}, std::tuple{3, 96, 6, 40, 1000}}) {
    const model::GptConfig g = gpt(layers, hidden, heads, sequence, vocabulary);
    const StepEstimate e = reference_gpt_step(g, 8, uniform(100, 1), true);
    EXPECT_EQ(e.product_flops, gpt_step_flops(g, 8)) << g.describe();
    // Every product at 100 GFLOP/s: their time is the formula's FLOPs at that rate, less the
    // masked half of attention's six products (2 s^2 (h/a) FLOPs each per head and sequence),
    // which the CPU kernel skips: it runs the live share (s + 1) / 2s of each.
    const double s = sequence, attention_flops = 6.0 * 2 * s * s * (hidden / heads) * 8 * heads * layers;
    const double skipped = attention_flops * (1 - (s + 1) / (2 * s));
    EXPECT_NEAR(e.products_s + e.attention_s - /* the softmax's, forward and backward */ 1e-9 * 8 * heads * (s * s + s) * layers,
                (static_cast<double>(gpt_step_flops(g, 8)) - skipped) / 100e9, 1e-9 * e.total());
  }
}

// The element-wise work by hand for the tiny GPT (B 8, s 64, h 64, a 4, V 256, L 2) at 1 ns an
// element: zero_grad over the P parameters, the embedding's gather and scatter 2 N h, per layer
// two norms forward and backward 4 N h, four adds 4 N h, GeLU forward and backward 8 N h, the
// linear layers' bias fill and column sums 2 N (3h + h + 4h + h) = 18 N h; the final norm 2 N h;
// cross-entropy's one pass N V; AdamW over P.
TEST(Calibration, ReferenceStepElementWiseWorkCountedByHand) {
  const model::GptConfig g = tiny_gpt();
  const double N = 8 * 64, h = 64, V = 256, P = static_cast<double>(gpt_parameters(g));
  const StepEstimate e = reference_gpt_step(g, 8, uniform(100, 1), true);
  const double elements = P + 2 * N * h + 2 * (4 * N * h + 4 * N * h + 8 * N * h + 18 * N * h) + 2 * N * h + N * V;
  EXPECT_NEAR(e.elementwise_s, elements * 1e-9, 1e-15);
  EXPECT_NEAR(e.optimizer_s, P * 1e-9, 1e-15);
  // With dropout: two masks a layer (the attention's and the MLP's outputs), forward and backward.
  model::GptConfig with_dropout = g;
  with_dropout.dropout = 0.1;
  EXPECT_NEAR(reference_gpt_step(with_dropout, 8, uniform(100, 1), true).elementwise_s - e.elementwise_s,
              2 * 4 * N * h * 1e-9, 1e-15);
  // SGD: two adds a parameter.
  EXPECT_NEAR(reference_gpt_step(g, 8, uniform(100, 1), false).optimizer_s, 2 * P * 1e-9, 1e-15);
  // Attention per layer: the softmax and its gradient on the causal half of each row, and six
  // products of 2 s^2 (h/a) FLOPs (two forward, four backward) of which the kernel runs the live
  // share (s + 1) / 2s, per head and sequence (8 x 4 of them).
  const double heads = 8 * 4, s = 64;
  const double softmax = heads * 2 * (s * (s + 1) / 2) * 1e-9,
               products = heads * 6 * 2 * s * s * 16 / 100e9 * (s + 1) / (2 * s);
  EXPECT_NEAR(e.attention_s, 2 * (softmax + products), 1e-12 * e.attention_s);
}

// The step split by top-level layer (embedding, blocks, ln_f, head): the parts add up to the
// step less zero_grad and the optimizer; the blocks alike; weight gradients within backward.
TEST(Calibration, LayerCostsAddUpToTheStep) {
  const model::GptConfig g = tiny_gpt();
  const Calibration c = uniform(100, 1);
  const StepEstimate e = reference_gpt_step(g, 8, c, true);
  ASSERT_EQ(e.layer_costs.size(), static_cast<std::size_t>(g.layers + 3));
  double sum = 0, backward = 0;
  for (const LayerCost& l : e.layer_costs) {
    sum += l.forward_s + l.backward_s;
    backward += l.backward_s;
    EXPECT_GT(l.forward_s + l.backward_s, 0);
    EXPECT_LE(l.weight_grad_s, l.backward_s);
  }
  const double zero_grad = c.op_seconds("fill", static_cast<double>(gpt_parameters(g)));
  EXPECT_NEAR(sum, e.total() - e.optimizer_s - zero_grad, 1e-12 * e.total());
  EXPECT_NEAR(backward, e.backward_s, 1e-12 * e.total());
  EXPECT_DOUBLE_EQ(e.layer_costs[1].forward_s, e.layer_costs[2].forward_s);
  EXPECT_DOUBLE_EQ(e.layer_costs[1].forward_s, e.block_forward_s);
  // A block's weight gradients: its four linear layers' dW products and bias sums, by hand.
  const double N = 8 * 64, C = 64;
  double weight = 0;
  for (const auto& [in, out] : {std::pair{C, 3 * C}, std::pair{C, C}, std::pair{C, 4 * C}, std::pair{4 * C, C}})
    weight += c.gemm_seconds(in, out, N) + c.op_seconds("add", N * out);
  EXPECT_NEAR(e.layer_costs[1].weight_grad_s, weight, 1e-12 * weight);
}

// The MLP (Dense layers with GeLU, mean-squared error) by hand: its products are 3 x the forward
// formula; backward is two of every three products, the GeLU gradients, the bias column sums and
// the loss's gradient.
TEST(Calibration, ReferenceMlpStepCountedByHand) {
  const model::MlpConfig m{.inputs = 16, .width = 32, .outputs = 8, .layers = 4};
  const StepEstimate e = reference_mlp_step(m, 64, uniform(100, 1), true);
  EXPECT_EQ(e.product_flops, 3 * mlp_forward_flops(m, 64));
  const double B = 64, P = static_cast<double>(mlp_parameters(m));
  const double outs = 32 + 32 + 32 + 8;  // the layers' widths
  // zero_grad P; forward: the bias fills B x outs, GeLU B x 96; backward: column sums B x outs,
  // GeLU B x 96, the loss B x 8.
  EXPECT_NEAR(e.elementwise_s, (P + 2 * B * outs + 2 * B * 96 + B * 8) * 1e-9, 1e-15);
  const double forward_products = static_cast<double>(mlp_forward_flops(m, 64)) / 100e9;
  EXPECT_NEAR(e.products_s, 3 * forward_products, 1e-15);
  EXPECT_NEAR(e.backward_s, 2 * forward_products + (B * outs + B * 96 + B * 8) * 1e-9, 1e-15);
  EXPECT_NEAR(e.optimizer_s, P * 1e-9, 1e-15);
}

// Two levels of memory: the stream samples up to `near_elements` at `near_ns` a byte, the larger
// ones at `far_ns` a byte.
Calibration with_stream(Calibration c, double near_ns, double far_ns, std::int64_t near_elements) {
  for (const std::int64_t e : kStreamElements) {
    const double bytes = 3.0 * static_cast<double>(e) * 4;
    c.stream.push_back({e, bytes * (e <= near_elements ? near_ns : far_ns) * 1e-9});
  }
  return c;
}

// An operand costs what streaming it from the working set's level costs beyond streaming it from
// its own: nothing when it is as large as the working set or larger, nothing without samples.
TEST(Calibration, FetchCostsTheWorkingSetsLevelBeyondTheOperandsOwn) {
  const Calibration c = with_stream(uniform(100, 1), 0.05, 0.2, 1 << 18);
  const double near = 3.0 * (1 << 18) * 4, far = 3.0 * (1 << 23) * 4;  // 3 MiB, 96 MiB
  EXPECT_NEAR(c.stream_seconds_per_byte(1e3), 0.05e-9, 1e-12 * 0.05e-9);  // below the smallest: clamped
  EXPECT_NEAR(c.stream_seconds_per_byte(near), 0.05e-9, 1e-12 * 0.05e-9);
  EXPECT_NEAR(c.stream_seconds_per_byte(3.0 * (1 << 21) * 4), 0.2e-9, 1e-12 * 0.2e-9);
  EXPECT_NEAR(c.stream_seconds_per_byte(1e12), 0.2e-9, 1e-12 * 0.2e-9);
  // 6 MiB is a third of the way from 3 to 24 MiB in log footprint.
  EXPECT_NEAR(c.stream_seconds_per_byte(3.0 * (1 << 19) * 4), std::exp(2 * std::log(0.05e-9) / 3 + std::log(0.2e-9) / 3), 1e-21);
  EXPECT_NEAR(c.fetch_seconds(1e6, far), 1e6 * (0.2e-9 - 0.05e-9), 1e-12 * 1e6 * (0.2e-9 - 0.05e-9));
  EXPECT_EQ(c.fetch_seconds(1e6, 1e5), 0);   // the working set is smaller than the operand
  EXPECT_EQ(c.fetch_seconds(far, far), 0);
  EXPECT_EQ(uniform(100, 1).fetch_seconds(1e6, far), 0);
  Calibration bad = c;
  std::swap(bad.stream[0], bad.stream[1]);
  EXPECT_THROW(bad.validate(), UsageError);
  bad = c;
  bad.stream[2].seconds = 0;
  EXPECT_THROW(bad.validate(), UsageError);
}

// The MLP's step with its operands fetched from its working set's level, by hand: every product
// pays for its three matrices and every op for its arrays, at the working set's time a byte
// less the operand's own.
TEST(Calibration, ReferenceMlpStepFetchCountedByHand) {
  const model::MlpConfig m{.inputs = 16, .width = 32, .outputs = 8, .layers = 4};
  const double B = 64, P = static_cast<double>(mlp_parameters(m));
  // Its working set (about 100 KB) beyond the nearest level (48 KiB).
  const Calibration flat = uniform(100, 1), c = with_stream(flat, 0.05, 0.2, 1 << 12);
  // Parameters, gradients, AdamW's two moments; the hidden layers' outputs and GeLUs and the
  // last layer's output.
  const double working_set = P * 4 * 4 + B * 4 * (2 * 32 * 3 + 8);
  const auto fetch = [&](double elements) { return c.fetch_seconds(4 * elements, working_set); };
  double expected = fetch(P);  // zero_grad
  const double widths[][2] = {{16, 32}, {32, 32}, {32, 32}, {32, 8}};
  for (const auto& [in, out] : widths) {
    // forward: the bias fill and x W; backward: dx = dy W^T, dW += x^T dy, the bias sums (an add).
    expected += fetch(B * out) + fetch(B * in + in * out + B * out);
    expected += fetch(B * out + out * in + B * in) + fetch(in * B + B * out + in * out) + fetch(3 * B * out);
    if (out == 32) expected += fetch(2 * B * out) + fetch(3 * B * out);  // GeLU forward (2 arrays), backward (3)
  }
  expected += fetch(3 * B * 8) + fetch(4 * P);  // the loss's gradient (an add); AdamW (4 arrays)
  EXPECT_GT(expected, 0);
  EXPECT_NEAR(reference_mlp_step(m, 64, c, true).total() - reference_mlp_step(m, 64, flat, true).total(), expected,
              1e-9 * expected);
}

// The GPT's attention fetched from its working set's level, by hand: each of a head's six
// products pays for its three matrices in full (the kernel skips the masked half of the work,
// not of the operands), the softmax and its gradient for their arrays over the live half. The
// working set holds one array of P more with AdamW (its second moment) than with SGD.
TEST(Calibration, ReferenceGptAttentionFetchCountedByHand) {
  const model::GptConfig g = tiny_gpt();
  const double P = static_cast<double>(gpt_parameters(g)), T = 64, hs = 16, heads = 8 * 4;
  EXPECT_EQ(reference_gpt_working_set(g, 8, true) - reference_gpt_working_set(g, 8, false), 4 * P);
  const Calibration flat = uniform(100, 1), c = with_stream(flat, 0.05, 0.2, 1 << 12);
  const double working_set = reference_gpt_working_set(g, 8, true);
  const auto fetch = [&](double elements) { return c.fetch_seconds(4 * elements, working_set); };
  const double live = heads * T * (T + 1) / 2;
  const double per_layer = heads * 6 * fetch(2 * T * hs + T * T) + fetch(2 * live) + fetch(3 * live);
  EXPECT_GT(per_layer, 0);
  EXPECT_NEAR(reference_gpt_step(g, 8, c, true).attention_s - reference_gpt_step(g, 8, flat, true).attention_s,
              g.layers * per_layer, 1e-9 * per_layer);
}

TEST(Calibration, BackwardOfTheGptStepIsItsShare) {
  const model::GptConfig g = tiny_gpt();
  const StepEstimate e = reference_gpt_step(g, 8, uniform(100, 1e-9), true);  // the ops all but free
  // With the ops all but free, backward is two thirds of every product (input and weight gradients).
  EXPECT_NEAR(e.backward_s, 2.0 / 3 * (e.products_s + e.attention_s), 1e-6 * e.total());
}

// One rank of a tensor-parallel group: every product split over tp (the FLOPs are the formula's
// over tp); the element-wise work by hand, with sequence parallelism splitting the norms', adds'
// and embedding's rows too.
TEST(Calibration, TensorParallelRankCountedByHand) {
  const model::GptConfig g = tiny_gpt();
  const double N = 8 * 64, C = 64, V = 256, P = 1000;
  for (const int t : {2, 4}) {
    for (const bool sp : {false, true}) {
      const StepEstimate e = reference_gpt_step(g, 8, uniform(100, 1), true, {t, sp, 1000});
      EXPECT_EQ(e.product_flops * t, gpt_step_flops(g, 8)) << t;
      const double rows = sp ? N / t : N;
      // zero_grad P; embedding 2 rows C; per layer norms 4 rows C, adds 4 rows C, GeLU 8 N C / t,
      // the biases' fills and column sums 2 N (3C/t + C + 4C/t + C); final norm 2 rows C; the
      // loss N V / t.
      const double elements = P + 2 * rows * C + 2 * (8 * rows * C + 8 * N * C / t + 2 * N * (7 * C / t + 2 * C)) +
                              2 * rows * C + N * V / t;
      EXPECT_NEAR(e.elementwise_s, elements * 1e-9, 1e-15) << t << " " << sp;
      EXPECT_NEAR(e.optimizer_s, P * 1e-9, 1e-15);
    }
  }
}

// An MoE block in place of block 0's MLP, 4 experts of width 4C on one rank, top-2 routing
// sending every expert N/2 rows (2N assignments): the products are the dense step's plus a
// second MLP's worth over the N tokens (k = 2) and the router's three N x C x E products; the
// element-wise work changes by hand: the dense MLP's GeLU (4NC) and its biases' fills and sums
// (N (4C + C)) a pass give way to the router's output fill (NE, forward) and softmax (NE), the
// rows' gather and combine (2 x 2N x C), and the experts' biases and GeLU (2N (F + C) + 2N F).
// An expert given no rows runs on one.
TEST(Calibration, MoeBlockCountedByHand) {
  const model::GptConfig g = tiny_gpt();
  const double N = 8 * 64, C = 64, E = 4, F = 4 * C, A = 2 * N;
  StepSplit split;
  split.moe.push_back({0, E, F, A, {N / 2, N / 2, N / 2, N / 2}});
  const StepEstimate dense = reference_gpt_step(g, 8, uniform(100, 1), true, {1, false, 1000});
  const StepEstimate moe = reference_gpt_step(g, 8, uniform(100, 1), true, {1, false, 1000, split.moe});
  EXPECT_EQ(moe.product_flops - dense.product_flops,
            std::llround(3 * (2 * N * C * F + 2 * N * F * C) + 3 * 2 * N * C * E));
  const double per_pass_dense = 4 * N * C + N * (4 * C + C);
  const double per_pass_moe = E * N + 2 * A * C + A * (F + C) + A * F;
  EXPECT_NEAR(moe.elementwise_s - dense.elementwise_s, 1e-9 * (N * E + 2 * (per_pass_moe - per_pass_dense)), 1e-15);
  // Block 0's share moved with it; block 1 stays dense.
  EXPECT_GT(moe.layer_costs[1].forward_s, dense.layer_costs[1].forward_s);
  EXPECT_DOUBLE_EQ(moe.layer_costs[2].forward_s, dense.layer_costs[2].forward_s);
  // An idle expert: one row of work, not none.
  split.moe[0].expert_rows = {A, 0, 0, 0};
  const StepEstimate idle = reference_gpt_step(g, 8, uniform(100, 1), true, {1, false, 1000, split.moe});
  EXPECT_EQ(idle.product_flops - dense.product_flops,
            std::llround(3 * ((A + 3) * 4 * C * F) - 3 * 4 * N * C * F + 3 * 2 * N * C * E));
}

// Buckets ready evenly through backward, reduced one at a time.
TEST(Calibration, OverlappedBucketsExposeWhatBackwardDoesNotHide) {
  EXPECT_DOUBLE_EQ(overlapped_exposed_seconds(4, 4, 0.5), 0.5);  // each hidden but the last
  EXPECT_DOUBLE_EQ(overlapped_exposed_seconds(4, 4, 2), 5);      // ends at 3, 5, 7, 9
  EXPECT_DOUBLE_EQ(overlapped_exposed_seconds(0, 3, 1), 3);      // nothing to hide behind
  EXPECT_DOUBLE_EQ(overlapped_exposed_seconds(10, 1, 1), 1);     // one bucket: all of it after backward
  EXPECT_DOUBLE_EQ(overlapped_exposed_seconds(10, 0, 1), 0);
  // The closed form against the buckets played one by one: each starts when it is ready and the
  // one before it is done.
  for (int buckets : {1, 2, 3, 7, 40})
    for (double backward : {0.0, 1.0, 13.0})
      for (double each : {0.0, 0.01, 0.3, 1.0, 5.0}) {
        double end = 0;
        for (int i = 1; i <= buckets; ++i) end = std::max(end, backward * i / buckets) + each;
        EXPECT_NEAR(overlapped_exposed_seconds(backward, buckets, each), end - backward, 1e-12 * (1 + end))
            << buckets << " buckets of " << each << " s behind " << backward << " s";
      }
  // A planned stage of a trillion parameters holds millions of buckets: answered at once, not
  // one by one (a loop over them held `parity plan` for minutes).
  EXPECT_DOUBLE_EQ(overlapped_exposed_seconds(1, 1e12, 1e-9), 1e-12 + 1e3 - 1);
}

// A collective's efficiency by size: the measured figures at their sizes, interpolated in log
// bytes between them, the ends beyond them; the all-reduce's for a collective not measured; the
// cluster's one figure where none was. The models the efficiencies are taken against.
TEST(Calibration, CollectiveEfficiencyBySize) {
  Calibration c;
  EXPECT_EQ(c.collective_efficiency_at(1e6, 0.7), 0.7);
  EXPECT_EQ(c.collective_efficiency_at(1e6, 0.7, "all_to_all"), 0.7);
  c.collective_efficiency["all_reduce"] = {{1e4, 0.2}, {1e6, 0.6}};
  EXPECT_DOUBLE_EQ(c.collective_efficiency_at(1e4, 0.7), 0.2);
  EXPECT_DOUBLE_EQ(c.collective_efficiency_at(1e5, 0.7), 0.4);  // halfway in log
  EXPECT_DOUBLE_EQ(c.collective_efficiency_at(1e9, 0.7), 0.6);
  EXPECT_DOUBLE_EQ(c.collective_efficiency_at(10, 0.7), 0.2);
  EXPECT_DOUBLE_EQ(c.collective_efficiency_at(1e5, 0.7, "all_gather"), 0.4);  // not measured: the all-reduce's
  c.collective_efficiency["all_gather"] = {{1e4, 0.9}, {1e6, 0.3}};
  EXPECT_DOUBLE_EQ(c.collective_efficiency_at(1e5, 0.7, "all_gather"), 0.6);
  EXPECT_DOUBLE_EQ(c.collective_efficiency_at(1e5, 0.7), 0.4);
  const double alpha = 2e-6, beta = 1e-9, B = 1 << 20;
  EXPECT_DOUBLE_EQ(collective_model_seconds("all_reduce", 4, B, alpha, beta), 6 * (alpha + beta * B / 4));
  for (const char* chunked : {"all_gather", "reduce_scatter", "all_to_all"})
    EXPECT_DOUBLE_EQ(collective_model_seconds(chunked, 4, B, alpha, beta), 3 * (alpha + beta * B / 4)) << chunked;
  EXPECT_EQ(collective_model_seconds("all_gather", 1, B, alpha, beta), 0.0);
  EXPECT_THROW(collective_model_seconds("broadcast", 4, B, alpha, beta), UsageError);
}

TEST(Json, ReadsValuesAndNamesTheByteOfAnError) {
  const JsonValue v = parse_json(R"({"a": [1, -2.5e3, "x\"y\u00e9"], "b": {"c": true, "d": false}, "e": null})");
  ASSERT_EQ(v.kind, JsonValue::Kind::object);
  ASSERT_EQ(v.members.size(), 3u);
  EXPECT_EQ(v.members[0].first, "a");
  EXPECT_EQ(v.members[0].second.items[1].number, -2500);
  EXPECT_EQ(v.members[0].second.items[2].text, "x\"y\xc3\xa9");
  EXPECT_TRUE(v.members[1].second.members[0].second.boolean);
  EXPECT_FALSE(v.members[1].second.members[1].second.boolean);
  EXPECT_EQ(v.members[2].second.kind, JsonValue::Kind::null);
  for (const char* bad : {"{", "{\"a\": }", "[1, 2", "{\"a\": 1} x", "\"open", "{a: 1}", "[1e999]", "nul"}) {
    try {
      parse_json(bad);
      ADD_FAILURE() << bad << " was read";
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find("JSON at byte "), std::string::npos) << e.what();
    }
  }
  try {
    parse_json("[1, -1e400]");
    ADD_FAILURE() << "-1e400 was read";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("JSON at byte 4: the number -1e400 is beyond a double's range"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(parse_json(std::string(100, '[') + std::string(100, ']')), UsageError);  // deeper than 64
  EXPECT_EQ(json_quoted("a\"b\\\n"), "\"a\\\"b\\\\\\u000a\"");
  EXPECT_EQ(parse_json(json_quoted("a\"b\\\n\t")).text, "a\"b\\\n\t");
}

// A calibrated cluster file: its products' times replace the tile model (a plan at twice the
// measured rate spends half the time in products), and a bad row is refused in one line.
TEST(Calibration, PlannerReadsACalibratedClusterFile) {
  const auto write = [](const std::string& path, const Calibration& c, const std::string& extra = "") {
    std::ofstream f(path);
    f << R"({"gpu": "cpu", "peak_TFLOPs": 0.1, "gemm_efficiency": 1, "multiprocessors": 1, "memory_GB": 1000,
             "memory_GBps": 20, "elementwise_efficiency": 1, "gpus_per_node": 8, "node_GBps": 10,
             "node_latency_us": 1, "network_GBps": 10, "network_latency_us": 1, "collective_efficiency": 1,)"
      << extra << R"( "gemm_rates": [)";
    for (std::size_t i = 0; i < c.gemm.size(); ++i)
      f << (i ? "," : "") << "[" << c.gemm[i].m << "," << c.gemm[i].n << "," << c.gemm[i].k << "," << c.gemm[i].seconds << "]";
    f << R"(], "op_rates": [)";
    for (std::size_t i = 0; i < c.ops.size(); ++i)
      f << (i ? "," : "") << "[\"" << c.ops[i].op << "\"," << c.ops[i].elements << "," << c.ops[i].seconds << "]";
    f << "]}";
  };
  const std::string slow = testing::TempDir() + "parity-slow.json", fast = testing::TempDir() + "parity-fast.json";
  write(slow, uniform(100, 1));
  write(fast, uniform(200, 1));
  const PlanCluster a = parse_plan_cluster(slow), b = parse_plan_cluster(fast);
  EXPECT_EQ(a.rates.gemm.size(), std::size(kGemmSides) * std::size(kGemmSides) * std::size(kGemmSides));
  EXPECT_EQ(a.rates.ops.size(), std::size(kCalibratedOps) * std::size(kOpElements));
  PlanModel m = parse_plan_model("layers=4,hidden=256,heads=4,vocab=1000,sequence=256");
  PlanLayout l;
  l.dp = 1;
  l.recompute = Recompute::none;
  const PlanPrediction pa = plan_predict(m, a, l, 8), pb = plan_predict(m, b, l, 8);
  // compute_s holds the products and the element-wise work; only the products changed.
  PlanCluster no_products = a;
  for (auto& g : no_products.rates.gemm) g.seconds *= 1e-9;
  const double elementwise = plan_predict(m, no_products, l, 8).compute_s;
  EXPECT_NEAR(pb.compute_s - elementwise, (pa.compute_s - elementwise) / 2, 1e-6 * pa.compute_s);
  // A measured efficiency by size replaces the one figure: a slower all-reduce, a slower step.
  const std::string with_links = testing::TempDir() + "parity-links.json";
  write(with_links, uniform(100, 1), R"( "collective_rates": [[65536, 0.1], [4194304, 0.2]],)");
  const PlanCluster linked = parse_plan_cluster(with_links);
  ASSERT_EQ(linked.rates.collective_efficiency.at("all_reduce").size(), 2u);
  PlanLayout dp8 = l;
  dp8.dp = 8;
  EXPECT_GT(plan_predict(m, linked, dp8, 8).dp_comm_s, plan_predict(m, a, dp8, 8).dp_comm_s);
  write(with_links, uniform(100, 1), R"( "collective_rates": [[65536, 0.5], [1024, 0.2]],)");  // not by growing size
  EXPECT_THROW(parse_plan_cluster(with_links), UsageError);
  // The stream's adds (bench calibrate writes them): read back, and refused out of order.
  write(with_links, uniform(100, 1), R"( "stream_rates": [[4096, 1e-6], [32768, 2e-5]],)");
  const PlanCluster streamed = parse_plan_cluster(with_links);
  ASSERT_EQ(streamed.rates.stream.size(), 2u);
  EXPECT_EQ(streamed.rates.stream[1].elements, 32768);
  EXPECT_DOUBLE_EQ(streamed.rates.stream[1].seconds, 2e-5);
  write(with_links, uniform(100, 1), R"( "stream_rates": [[32768, 2e-5], [4096, 1e-6]],)");
  EXPECT_THROW(parse_plan_cluster(with_links), UsageError);
  // By collective: tp 4 with sp pays the all-gather's and reduce-scatter's, without it the
  // all-reduce's; a slower all-gather slows only the first.
  write(with_links, uniform(100, 1),
        R"( "collective_rates": {"all_reduce": [[65536, 0.5]], "all_gather": [[65536, 0.5]], "reduce_scatter": [[65536, 0.5]]},)");
  const PlanCluster even = parse_plan_cluster(with_links);
  write(with_links, uniform(100, 1),
        R"( "collective_rates": {"all_reduce": [[65536, 0.5]], "all_gather": [[65536, 0.1]], "reduce_scatter": [[65536, 0.5]]},)");
  const PlanCluster slow_gather = parse_plan_cluster(with_links);
  ASSERT_EQ(slow_gather.rates.collective_efficiency.size(), 3u);
  PlanLayout tp4 = l;
  tp4.tp = 4;
  tp4.sp = true;
  EXPECT_GT(plan_predict(m, slow_gather, tp4, 8).tp_comm_s, plan_predict(m, even, tp4, 8).tp_comm_s);
  tp4.sp = false;
  EXPECT_DOUBLE_EQ(plan_predict(m, slow_gather, tp4, 8).tp_comm_s, plan_predict(m, even, tp4, 8).tp_comm_s);
  // By level: a slower all-reduce within a node slows tp 4's collectives (inside a node), not
  // dp 16's (across nodes, which takes the network's, else the world's); a slower one across
  // nodes the other way round.
  write(with_links, uniform(100, 1), R"( "collective_rates": {"all_reduce": [[65536, 0.5]], "node:all_reduce": [[65536, 0.1]]},)");
  const PlanCluster slow_node = parse_plan_cluster(with_links);
  write(with_links, uniform(100, 1), R"( "collective_rates": {"all_reduce": [[65536, 0.5]], "network:all_reduce": [[65536, 0.1]]},)");
  const PlanCluster slow_network = parse_plan_cluster(with_links);
  PlanLayout dp16 = l;
  dp16.dp = 16;
  EXPECT_GT(plan_predict(m, slow_node, tp4, 8).tp_comm_s, plan_predict(m, even, tp4, 8).tp_comm_s);
  EXPECT_DOUBLE_EQ(plan_predict(m, slow_network, tp4, 8).tp_comm_s, plan_predict(m, even, tp4, 8).tp_comm_s);
  EXPECT_GT(plan_predict(m, slow_network, dp16, 16).dp_comm_s, plan_predict(m, even, dp16, 16).dp_comm_s);
  EXPECT_DOUBLE_EQ(plan_predict(m, slow_node, dp16, 16).dp_comm_s, plan_predict(m, even, dp16, 16).dp_comm_s);
  write(with_links, uniform(100, 1), R"( "collective_rates": {"rack:all_reduce": [[65536, 0.5]]},)");  // no such level
  EXPECT_THROW(parse_plan_cluster(with_links), UsageError);
  write(with_links, uniform(100, 1), R"( "collective_rates": {"broadcast": [[65536, 0.5]]},)");  // not one measured
  EXPECT_THROW(parse_plan_cluster(with_links), UsageError);
  write(with_links, uniform(100, 1), R"( "collective_rates": {"all_gather": 0.5},)");
  EXPECT_THROW(parse_plan_cluster(with_links), UsageError);
  std::remove(with_links.c_str());
  const std::string broken = testing::TempDir() + "parity-broken.json";
  std::ofstream(broken) << R"({"gpu": "cpu", "gemm_rates": [[16, 16, "x", 1]]})";
  EXPECT_THROW(parse_plan_cluster(broken), UsageError);
  std::ofstream(broken) << R"({"gpu": "cpu", "gemm_rates": [[16, 16, 16, 1]]})";  // not the whole grid
  EXPECT_THROW(parse_plan_cluster(broken), UsageError);
  std::remove(slow.c_str());
  std::remove(fast.c_str());
  std::remove(broken.c_str());
}

}  // namespace
}  // namespace parity::theory
