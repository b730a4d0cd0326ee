// Conformance of the ops on the CPU in float64 (reference/ops/ops.hpp): every backward against
// central finite differences, the properties a pair must keep (accumulation, masks, shift
// invariance, vocabulary shards equal to the whole), and the FLOP counter, which must add
// exactly the matrix-multiply FLOPs. A test proves the gradient comparison itself can fail. The
// ops in float32 and 16-bit storage are rows of test_op_precision.cpp, bad calls rows of
// test_op_refusals.cpp, and the device ops against these rows of test_cuda_ops.cpp.
//
// Method for gradients: a scalar L = sum(y * R) with a fixed random projection R, so dL/dy = R;
// the analytic gradient comes from the op's backward given dy = R, the numeric one from
// (L(x + d) - L(x - d)) / 2d for every element of every input and parameter.
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <limits>
#include <numbers>
#include <sstream>
#include <string>
#include <vector>

#include "correctness/op_testing.hpp"
#include "reference/core/error.hpp"
#include "reference/core/tolerance.hpp"
#include "reference/ops/ops.hpp"
#include "reference/ops/flops.hpp"
#include "reference/tensor/random.hpp"
#include "reference/tensor/tensor.hpp"

using namespace parity;
using namespace parity::op_testing;


// ---------------------------------------------------------------------------------------------
// Gradients against central differences (float64).

TEST(OpsGradient, Matmul) {
  // C = op(A) op(B), L = <C, R>: dop(A) = R op(B)^T, dop(B) = op(A)^T R; a stored-transposed
  // operand's gradient is the transpose of that, which is again one matmul.
  struct Case {
    std::int64_t m, k, n;
  };
  for (const Case& s : {Case{3, 4, 5}, Case{1, 6, 2}, Case{5, 3, 4}}) {
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        std::ostringstream tag;
        tag << "matmul m=" << s.m << " k=" << s.k << " n=" << s.n << " transpose_a=" << ta << " transpose_b=" << tb;
        SCOPED_TRACE(tag.str());
        Tensor a = random_tensor("matmul.a", ta ? Shape{s.k, s.m} : Shape{s.m, s.k});
        Tensor b = random_tensor("matmul.b", tb ? Shape{s.n, s.k} : Shape{s.k, s.n});
        const Tensor r = random_tensor("matmul.r", {s.m, s.n});
        Tensor c = nans("matmul.c", {s.m, s.n});
        const auto loss = [&] {
          ops::matmul(a, ta, b, tb, c, false);
          return project(c, r);
        };
        Tensor da = nans("matmul.da", a.shape());
        if (ta)
          ops::matmul(b, tb, r, true, da, false);  // op(B) R^T
        else
          ops::matmul(r, false, b, !tb, da, false);  // R op(B)^T
        Tensor db = nans("matmul.db", b.shape());
        if (tb)
          ops::matmul(r, true, a, ta, db, false);  // R^T op(A)
        else
          ops::matmul(a, !ta, r, false, db, false);  // op(A)^T R
        expect_gradient(da, a, loss, "dA");
        expect_gradient(db, b, loss, "dB");
      }
    }
  }
}

TEST(OpsGradient, MatmulAccumulateAdds) {
  // accumulate = true computes c += op(a) op(b): the result minus the old c is the product.
  const Tensor a = random_tensor("matmul_acc.a", {4, 3});
  const Tensor b = random_tensor("matmul_acc.b", {3, 5});
  const Tensor old = random_tensor("matmul_acc.c0", {4, 5});
  Tensor product = nans("matmul_acc.product", {4, 5});
  ops::matmul(a, false, b, false, product, false);
  Tensor c = old.clone("matmul_acc.c", kCategory);
  ops::matmul(a, false, b, false, c, true);
  Tensor expected = zeros("matmul_acc.expected", {4, 5});
  for (std::int64_t i = 0; i < c.numel(); ++i) expected.set(i, old.at(i) + product.at(i));
  // Both are one float64 product per element plus one addition: equal to rounding error.
  expect_close(c, expected, tolerance::gamma(4, unit_roundoff(DataType::float64)), "matmul with accumulate");
}

TEST(OpsGradient, Linear) {
  struct Case {
    Shape x;
    std::int64_t out;
    bool bias;
  };
  // A 3-D input checks that leading dimensions are flattened into rows.
  for (const Case& s : {Case{{3, 4}, 5, true}, Case{{2, 3, 6}, 4, true}, Case{{5, 3}, 2, false}}) {
    SCOPED_TRACE("linear x " + to_string(s.x) + " out " + std::to_string(s.out) + (s.bias ? " with bias" : ""));
    const std::int64_t in = s.x.back();
    const Shape y_shape = with_last(s.x, s.out);
    Tensor x = random_tensor("linear.x", s.x);
    Tensor w = random_tensor("linear.w", {in, s.out});
    Tensor bias = s.bias ? random_tensor("linear.bias", {s.out}) : Tensor();
    const Tensor r = random_tensor("linear.r", y_shape);
    Tensor y = nans("linear.y", y_shape);
    const auto loss = [&] {
      ops::linear_forward(x, w, bias, y);
      return project(y, r);
    };
    Tensor dx = nans("linear.dx", s.x);
    Tensor dw = zeros("linear.dw", {in, s.out});  // accumulated into: must start at zero
    Tensor dbias = s.bias ? zeros("linear.dbias", {s.out}) : Tensor();
    ops::linear_backward(r, x, w, dx, dw, dbias);
    expect_gradient(dx, x, loss, "dx");
    expect_gradient(dw, w, loss, "dw");
    if (s.bias) expect_gradient(dbias, bias, loss, "dbias");
  }
}

// The ops of one input and one output, as rows: the op, its shapes, the spread of its input.
// Spread 2 reaches gelu's saturated tails of tanh as well as its curved middle, and softmax's
// rows far from uniform. Backward gets dy = R, x and the forward's y (softmax reads y).
TEST(OpsGradient, OneInputOps) {
  struct Row {
    std::string op;
    std::vector<Shape> shapes;
    double spread;
    std::function<void(const Tensor& x, Tensor& y)> forward;
    std::function<void(const Tensor& dy, const Tensor& x, const Tensor& y, Tensor& dx)> backward;
  };
  const std::vector<Row> rows = {
      {"gelu", {{7}, {3, 5}, {2, 3, 4}}, 2, [](const Tensor& x, Tensor& y) { ops::gelu_forward(x, y); },
       [](const Tensor& dy, const Tensor& x, const Tensor&, Tensor& dx) { ops::gelu_backward(dy, x, dx); }},
      {"softmax", {{4, 6}, {2, 3, 5}, {1, 10}}, 2, [](const Tensor& x, Tensor& y) { ops::softmax_forward(x, y); },
       [](const Tensor& dy, const Tensor&, const Tensor& y, Tensor& dx) { ops::softmax_backward(dy, y, dx); }},
  };
  for (const Row& row : rows)
    for (const Shape& shape : row.shapes) {
      SCOPED_TRACE(row.op + " " + to_string(shape));
      Tensor x = random_tensor(row.op + ".x", shape, 0, row.spread);
      const Tensor r = random_tensor(row.op + ".r", shape);
      Tensor y = nans(row.op + ".y", shape);
      const auto loss = [&] {
        row.forward(x, y);
        return project(y, r);
      };
      loss();  // y of the unperturbed x, for backward
      Tensor dx = nans(row.op + ".dx", shape);
      row.backward(r, x, y, dx);
      expect_gradient(dx, x, loss, "dx");
    }
}

TEST(OpsGradient, Add) {
  // There is no add_backward: the residual's gradient is dy for both operands.
  for (const Shape& shape : {Shape{6}, Shape{4, 3}, Shape{2, 2, 5}}) {
    SCOPED_TRACE("add " + to_string(shape));
    Tensor a = random_tensor("add.a", shape);
    Tensor b = random_tensor("add.b", shape);
    const Tensor r = random_tensor("add.r", shape);
    Tensor y = nans("add.y", shape);
    const auto loss = [&] {
      ops::add_forward(a, b, y);
      return project(y, r);
    };
    expect_gradient(r, a, loss, "da = dy");
    expect_gradient(r, b, loss, "db = dy");
  }
}

TEST(OpsGradient, AccumulateAddsInPlace) {
  const Tensor x = random_tensor("accumulate.x", {3, 4});
  const Tensor old = random_tensor("accumulate.y0", {3, 4});
  Tensor y = old.clone("accumulate.y", kCategory);
  ops::accumulate(y, x);
  for (std::int64_t i = 0; i < y.numel(); ++i)
    ASSERT_EQ(y.at(i), old.at(i) + x.at(i)) << "accumulate at element " << index_string(y.shape(), i);
}

TEST(OpsGradient, LayerNorm) {
  for (const Shape& shape : {Shape{3, 8}, Shape{2, 3, 5}, Shape{1, 16}}) {
    SCOPED_TRACE("layernorm " + to_string(shape));
    const std::int64_t c = shape.back(), n = rows_of(shape);
    // Rows with a nonzero mean and a spread other than one exercise the centring and scaling.
    Tensor x = random_tensor("layernorm.x", shape, 0.5, 1.5);
    Tensor gamma = random_tensor("layernorm.gamma", {c}, 1, 0.5);
    Tensor beta = random_tensor("layernorm.beta", {c});
    const Tensor r = random_tensor("layernorm.r", shape);
    Tensor y = nans("layernorm.y", shape);
    Tensor mean = nans("layernorm.mean", {n});
    Tensor rstd = nans("layernorm.rstd", {n});
    const auto loss = [&] {
      ops::layernorm_forward(x, gamma, beta, y, mean, rstd);
      return project(y, r);
    };
    loss();  // mean and rstd of the unperturbed x, for backward
    Tensor dx = nans("layernorm.dx", shape);
    Tensor dgamma = zeros("layernorm.dgamma", {c});
    Tensor dbeta = zeros("layernorm.dbeta", {c});
    ops::layernorm_backward(r, x, gamma, mean, rstd, dx, dgamma, dbeta);
    expect_gradient(dx, x, loss, "dx");
    expect_gradient(dgamma, gamma, loss, "dgamma");
    expect_gradient(dbeta, beta, loss, "dbeta");
  }
}

TEST(OpsGradient, Attention) {
  struct Case {
    std::int64_t B, T, C;
    int heads;
    bool causal;
  };
  for (const Case& s : {Case{1, 4, 4, 1, false}, Case{1, 4, 4, 1, true}, Case{2, 5, 8, 2, false},
                        Case{2, 5, 8, 2, true}, Case{2, 3, 12, 3, false}, Case{1, 6, 6, 3, true}}) {
    std::ostringstream tag;
    tag << "attention B=" << s.B << " T=" << s.T << " C=" << s.C << " heads=" << s.heads << " causal=" << s.causal;
    SCOPED_TRACE(tag.str());
    Tensor qkv = random_tensor("attention.qkv", {s.B, s.T, 3 * s.C});
    const Tensor r = random_tensor("attention.r", {s.B, s.T, s.C});
    Tensor out = nans("attention.out", {s.B, s.T, s.C});
    Tensor probs = nans("attention.probs", {s.B, s.heads, s.T, s.T});
    const auto loss = [&] {
      ops::attention_forward(qkv, s.heads, s.causal, out, probs);
      return project(out, r);
    };
    loss();  // probs of the unperturbed qkv, for backward
    Tensor dqkv = nans("attention.dqkv", qkv.shape());
    ops::attention_backward(r, qkv, probs, s.heads, dqkv);
    expect_gradient(dqkv, qkv, loss, "dqkv");
  }
}

TEST(OpsGradient, AttentionCausalMaskHidesTheFuture) {
  // Position i must not depend on j > i: the gradient of out[:, i] with respect to every k and v
  // of later positions is zero, and the probabilities above the diagonal are exactly zero.
  const std::int64_t B = 1, T = 5, C = 4;
  const Tensor qkv = random_tensor("attention_mask.qkv", {B, T, 3 * C});
  Tensor out = nans("attention_mask.out", {B, T, C});
  Tensor probs = nans("attention_mask.probs", {B, 2, T, T});
  ops::attention_forward(qkv, 2, true, out, probs);
  for (std::int64_t h = 0; h < 2; ++h)
    for (std::int64_t i = 0; i < T; ++i)
      for (std::int64_t j = i + 1; j < T; ++j)
        EXPECT_EQ(probs.at((h * T + i) * T + j), 0.0) << "probs at [0, " << h << ", " << i << ", " << j << "]";
  // dout nonzero only at the first position: nothing may flow to later positions' k and v.
  Tensor dout = zeros("attention_mask.dout", {B, T, C});
  for (std::int64_t c = 0; c < C; ++c) dout.set(c, 1.0);
  Tensor dqkv = nans("attention_mask.dqkv", qkv.shape());
  ops::attention_backward(dout, qkv, probs, 2, dqkv);
  for (std::int64_t t = 1; t < T; ++t)
    for (std::int64_t c = C; c < 3 * C; ++c)
      EXPECT_EQ(dqkv.at(t * 3 * C + c), 0.0) << "dqkv at [0, " << t << ", " << c << "]";
}

TEST(OpsGradient, Embedding) {
  struct Case {
    Shape tokens;
    std::int64_t vocabulary, C, positions;  // positions 0: no position embedding
    DataType index_type;
  };
  // More tokens than vocabulary entries, so some rows of wte gather several gradients; more
  // positions than T, so the unused rows of wpe must get zero gradient.
  for (const Case& s : {Case{{2, 5}, 4, 3, 7, DataType::int32}, Case{{3, 2}, 5, 4, 0, DataType::int64},
                        Case{{1, 6}, 10, 2, 6, DataType::int32}}) {
    SCOPED_TRACE("embedding tokens " + to_string(s.tokens) + " V=" + std::to_string(s.vocabulary) +
                 " C=" + std::to_string(s.C) + " positions=" + std::to_string(s.positions));
    const Tensor tokens = token_tensor("embedding.tokens", s.tokens, s.vocabulary, s.index_type);
    Tensor wte = random_tensor("embedding.wte", {s.vocabulary, s.C});
    Tensor wpe = s.positions ? random_tensor("embedding.wpe", {s.positions, s.C}) : Tensor();
    const Shape y_shape{s.tokens[0], s.tokens[1], s.C};
    const Tensor r = random_tensor("embedding.r", y_shape);
    Tensor y = nans("embedding.y", y_shape);
    const auto loss = [&] {
      ops::embedding_forward(tokens, wte, wpe, y);
      return project(y, r);
    };
    Tensor dwte = zeros("embedding.dwte", wte.shape());
    Tensor dwpe = s.positions ? zeros("embedding.dwpe", wpe.shape()) : Tensor();
    ops::embedding_backward(r, tokens, dwte, dwpe);
    expect_gradient(dwte, wte, loss, "dwte");
    if (s.positions) expect_gradient(dwpe, wpe, loss, "dwpe");
  }
}

namespace {
// -sum_n log softmax(logits_n)[target_n] / normalizer, written directly in float64 without the
// max shift (the test logits are of order one, so exp cannot overflow). Also returns, through
// `magnitude`, sum_n (|log sum exp| + |logit at target| + 1): what the rounding errors of both
// this and the op's computation scale with.
double direct_cross_entropy(const Tensor& logits, const Tensor& targets, double normalizer, double& magnitude) {
  const std::int64_t n = logits.dim(0), v = logits.dim(1);
  double total = 0;
  magnitude = 0;
  for (std::int64_t r = 0; r < n; ++r) {
    double sum = 0;
    for (std::int64_t j = 0; j < v; ++j) sum += std::exp(logits.at(r * v + j));
    const double target_logit = logits.at(r * v + static_cast<std::int64_t>(targets.at(r)));
    total -= std::log(std::exp(target_logit) / sum);
    magnitude += std::fabs(std::log(sum)) + std::fabs(target_logit) + 1;
  }
  magnitude /= normalizer;
  return total / normalizer;
}
}  // namespace

TEST(OpsGradient, CrossEntropy) {
  struct Case {
    std::int64_t N, V;
    double normalizer;  // N: the batch mean; other values: a data-parallel global count
    DataType index_type;
  };
  for (const Case& s :
       {Case{4, 6, 4, DataType::int32}, Case{3, 10, 12.5, DataType::int64}, Case{1, 3, 1, DataType::int32}}) {
    SCOPED_TRACE("cross_entropy N=" + std::to_string(s.N) + " V=" + std::to_string(s.V) +
                 " normalizer=" + std::to_string(s.normalizer));
    Tensor logits = random_tensor("cross_entropy.logits", {s.N, s.V}, 0, 2);
    const Tensor targets = token_tensor("cross_entropy.targets", {s.N}, s.V, s.index_type);
    const auto loss = [&] { return ops::cross_entropy_forward(logits, targets, s.normalizer); };

    // Forward value against log-softmax computed here: both are float64 computations of at
    // most V + 4 roundings per row, so each is within gamma_{V+4} of the magnitude above.
    double magnitude = 0;
    const double expected = direct_cross_entropy(logits, targets, s.normalizer, magnitude);
    const double bound = 2 * tolerance::gamma(static_cast<int>(s.V) + 4, unit_roundoff(DataType::float64)) * magnitude;
    EXPECT_LE(std::fabs(loss() - expected), bound) << "cross_entropy_forward " << loss() << ", direct " << expected;

    Tensor dlogits = nans("cross_entropy.dlogits", {s.N, s.V});
    const double loss_from_backward = ops::cross_entropy_backward(logits, targets, s.normalizer, dlogits);
    EXPECT_EQ(loss_from_backward, loss()) << "backward returns the forward's loss, from the same sums";
    expect_gradient(dlogits, logits, loss, "dlogits");
  }
}

// Vocabulary shards (tensor parallelism's embedding and cross-entropy): the shards' results put
// together equal the whole op's, and the sharded loss's gradient matches central differences.
TEST(OpsGradient, VocabularyShardsEqualTheWholeOps) {
  const std::int64_t V = 10, C = 3, N = 6;
  const std::int64_t bounds[] = {0, 4, 7, 10};  // uneven shards
  const Tensor tokens = token_tensor("shards.tokens", {2, 3}, V);
  const Tensor wte = random_tensor("shards.wte", {V, C});
  Tensor whole = nans("shards.y", {2, 3, C});
  ops::embedding_forward(tokens, wte, Tensor(), whole);
  Tensor sum = zeros("shards.sum", {2, 3, C});
  const Tensor r = random_tensor("shards.r", {2, 3, C});
  Tensor dwte_whole = zeros("shards.dwte", {V, C});
  Tensor no_positions;
  ops::embedding_backward(r, tokens, dwte_whole, no_positions);
  for (int k = 0; k < 3; ++k) {
    const std::int64_t first = bounds[k], rows = bounds[k + 1] - bounds[k];
    const Tensor part = slice(wte, ShardSpec({V, C}).range(0, first, first + rows), "shards.wte.part", kCategory);
    Tensor y = nans("shards.y.part", {2, 3, C});
    ops::embedding_shard_forward(tokens, part, first, V, y);
    ops::accumulate(sum, y);
    Tensor dpart = zeros("shards.dwte.part", {rows, C});
    ops::embedding_shard_backward(r, tokens, first, dpart);
    const Tensor expected = slice(dwte_whole, ShardSpec({V, C}).range(0, first, first + rows), "e", kCategory);
    for (std::int64_t i = 0; i < dpart.numel(); ++i) EXPECT_EQ(dpart.at(i), expected.at(i)) << "shard " << k;
  }
  // Exactly one shard holds each token's row; the others add zeros.
  for (std::int64_t i = 0; i < whole.numel(); ++i) EXPECT_EQ(sum.at(i), whole.at(i)) << "element " << i;

  Tensor logits = random_tensor("shards.logits", {N, V}, 0, 2);
  Tensor targets = token_tensor("shards.targets", {N}, V, DataType::int64);
  // Targets on the shards' edges: each shard's first and last class, the last row's too.
  for (const auto& [row, target] : {std::pair{0, 3}, {1, 4}, {2, 6}, {3, 7}, {4, 0}, {5, 9}}) targets.set(row, target);
  const double normalizer = 9.0;
  // The sharded loss: maxima over shards, then the shards' sums and target logits added.
  const auto sharded = [&](Tensor* dlogits) {
    std::vector<Tensor> parts;
    Tensor m = zeros("m", {N}), s_total = zeros("s", {N}), z_total = zeros("z", {N});
    m.fill(-std::numeric_limits<double>::infinity());
    for (int k = 0; k < 3; ++k) {
      parts.push_back(slice(logits, ShardSpec({N, V}).range(1, bounds[k], bounds[k + 1]), "part", kCategory));
      Tensor mk = nans("mk", {N});
      ops::cross_entropy_shard_max(parts.back(), mk);
      for (std::int64_t i = 0; i < N; ++i) m.set(i, std::max(m.at(i), mk.at(i)));
    }
    for (int k = 0; k < 3; ++k) {
      Tensor sk = nans("sk", {N}), zk = nans("zk", {N});
      ops::cross_entropy_shard_sums(parts[static_cast<std::size_t>(k)], targets, bounds[k], V, m, sk, zk);
      ops::accumulate(s_total, sk);
      ops::accumulate(z_total, zk);
    }
    double loss = 0;
    for (std::int64_t i = 0; i < N; ++i) loss += std::log(s_total.at(i)) + m.at(i) - z_total.at(i);
    if (dlogits)
      for (int k = 0; k < 3; ++k) {
        const std::int64_t width = bounds[k + 1] - bounds[k];
        Tensor dk = nans("dk", {N, width});
        ops::cross_entropy_shard_backward(parts[static_cast<std::size_t>(k)], targets, bounds[k], m, s_total,
                                          normalizer, dk);
        for (std::int64_t i = 0; i < N; ++i)
          for (std::int64_t j = 0; j < width; ++j) dlogits->set(i * V + bounds[k] + j, dk.at(i * width + j));
      }
    return loss / normalizer;
  };
  Tensor dlogits = nans("shards.dlogits", {N, V});
  const double loss = sharded(&dlogits);
  Tensor dlogits_whole = nans("shards.dlogits.whole", {N, V});
  const double whole_loss = ops::cross_entropy_backward(logits, targets, normalizer, dlogits_whole);
  // The same sums in another order: within gamma_{V+4} of the magnitudes (as the op's own test).
  double magnitude = 0;
  direct_cross_entropy(logits, targets, normalizer, magnitude);
  const double bound = 2 * tolerance::gamma(static_cast<int>(V) + 4, unit_roundoff(DataType::float64));
  EXPECT_LE(std::fabs(loss - whole_loss), bound * magnitude) << "sharded " << loss << ", whole " << whole_loss;
  expect_close(dlogits, dlogits_whole, bound, "sharded dlogits against the whole op's");
  expect_gradient(dlogits, logits, [&] { return sharded(nullptr); }, "sharded dlogits");
}

TEST(OpsGradient, MeanSquaredError) {
  for (const auto& [shape, normalizer] : {std::pair{Shape{4, 5}, 20.0}, std::pair{Shape{13}, 3.5},
                                          std::pair{Shape{2, 3, 2}, 12.0}}) {
    SCOPED_TRACE("mse " + to_string(shape) + " normalizer " + std::to_string(normalizer));
    Tensor prediction = random_tensor("mse.prediction", shape);
    Tensor target = random_tensor("mse.target", shape);
    const auto loss = [&] { return ops::mse_forward(prediction, target, normalizer); };

    // Forward against sum (p - t)^2 / normalizer here: n float64 roundings of nonnegative terms.
    double expected = 0;
    for (std::int64_t i = 0; i < prediction.numel(); ++i) {
      const double d = prediction.at(i) - target.at(i);
      expected += d * d;
    }
    expected /= normalizer;
    const int n = static_cast<int>(prediction.numel()) + 2;
    EXPECT_LE(std::fabs(loss() - expected), 2 * tolerance::gamma(n, unit_roundoff(DataType::float64)) * expected)
        << "mse_forward " << loss() << ", direct " << expected;

    Tensor dprediction = nans("mse.dprediction", shape);
    ops::mse_backward(prediction, target, normalizer, dprediction);
    expect_gradient(dprediction, prediction, loss, "dprediction");
    // The loss depends on p - t only, so the target's gradient is -dprediction.
    Tensor dtarget = zeros("mse.dtarget", shape);
    for (std::int64_t i = 0; i < dtarget.numel(); ++i) dtarget.set(i, -dprediction.at(i));
    expect_gradient(dtarget, target, loss, "dtarget = -dprediction");
  }
}

TEST(OpsGradient, Dropout) {
  struct Case {
    Shape shape;
    double p;
    ops::DropoutKey key;
  };
  for (const Case& s : {Case{{4, 6}, 0.25, {7, 1}}, Case{{3, 5, 7}, 0.5, {7, 2}}, Case{{50}, 0.1, {11, 3}},
                        Case{{3, 4}, 0.0, {7, 4}}}) {
    SCOPED_TRACE("dropout " + to_string(s.shape) + " p=" + std::to_string(s.p));
    Tensor x = random_tensor("dropout.x", s.shape);
    const Tensor r = random_tensor("dropout.r", s.shape);
    Tensor y = nans("dropout.y", s.shape);
    const auto loss = [&] {
      ops::dropout_forward(x, s.p, s.key, y);
      return project(y, r);
    };
    Tensor dx = nans("dropout.dx", s.shape);
    ops::dropout_backward(r, s.p, s.key, dx);
    expect_gradient(dx, x, loss, "dx");

    // Backward applies the forward's mask and scale: the forward of a tensor of ones is
    // mask / (1 - p), and dx must be exactly dy times it (the same single multiply).
    Tensor ones = zeros("dropout.ones", s.shape);
    ones.fill(1.0);
    Tensor mask = nans("dropout.mask", s.shape);
    ops::dropout_forward(ones, s.p, s.key, mask);
    for (std::int64_t i = 0; i < dx.numel(); ++i)
      ASSERT_EQ(dx.at(i), r.at(i) * mask.at(i)) << "dropout_backward at " << index_string(s.shape, i);
  }
}

// The mask is a function of (seed, stream, element) alone, whatever the type: float32 (the
// vectorised path) and the 16-bit types (the scalar loop) drop exactly the elements float64
// drops, each kept element scaled by 1 / (1 - p), and a shard that starts at first_element drops
// what the whole tensor drops there.
TEST(OpsGradient, DropoutDropsTheSameElementsInEveryType) {
  const std::int64_t n = 1001;  // not a multiple of any vector width
  const double p = 0.3;
  const ops::DropoutKey key{77, 3, 12345};
  const auto mask_of = [&](DataType type, std::int64_t first, std::int64_t count) {
    Tensor ones = Tensor::zeros("dropout_types.ones", {count}, type, kCategory);
    ones.fill(1.0);
    Tensor y = Tensor::zeros("dropout_types.y", {count}, type, kCategory);
    ops::dropout_forward(ones, p, {key.seed, key.stream, key.first_element + static_cast<std::uint64_t>(first)}, y);
    std::vector<bool> kept(static_cast<std::size_t>(count));
    // A kept one is 1 / (1 - p), the scale rounded to float32 (16-bit storage scales in float32)
    // and the product to the type: within the type's unit roundoff and float32's.
    const double unit = type == DataType::float64 ? 0x1p-53
                        : type == DataType::float32 ? 0x1p-24
                        : type == DataType::bfloat16 ? 0x1p-8 : 0x1p-11;
    for (std::int64_t i = 0; i < count; ++i) {
      kept[static_cast<std::size_t>(i)] = y.at(i) != 0;
      if (y.at(i) != 0) {
        EXPECT_NEAR(y.at(i), 1 / (1 - p), (unit + 0x1p-24) / (1 - p)) << name_of(type) << " element " << i;
      }
    }
    return kept;
  };
  const std::vector<bool> whole = mask_of(DataType::float64, 0, n);
  const auto dropped = std::count(whole.begin(), whole.end(), false);
  EXPECT_GT(dropped, 0);
  EXPECT_LT(dropped, n);
  for (DataType type : {DataType::float32, DataType::bfloat16, DataType::float16}) {
    EXPECT_EQ(mask_of(type, 0, n), whole) << name_of(type);
    const std::vector<bool> shard = mask_of(type, 400, n - 400);
    EXPECT_TRUE(std::equal(shard.begin(), shard.end(), whole.begin() + 400)) << name_of(type) << ": a shard from element 400";
  }
}

TEST(OpsGradient, DropoutKeepsAboutOneMinusP) {
  // Each element is kept independently with probability 1 - p, so the kept count K of n
  // elements is Binomial(n, 1 - p): mean n(1 - p), standard deviation sqrt(n p (1 - p)). A
  // correct mask is outside 6 standard deviations with probability about 2e-9; these draws are
  // fixed (counter-based), so the test is deterministic and this is a statement about the RNG.
  const std::int64_t n = 1 << 18;
  const Tensor x = random_tensor("dropout_rate.x", {n});
  for (double p : {0.1, 0.5, 0.9}) {
    SCOPED_TRACE("p = " + std::to_string(p));
    Tensor y = nans("dropout_rate.y", {n});
    const ops::DropoutKey key{2024, 5};
    ops::dropout_forward(x, p, key, y);
    std::int64_t kept = 0;
    for (std::int64_t i = 0; i < n; ++i) {
      if (y.at(i) != 0) {
        ++kept;
        // Kept elements are scaled by 1 / (1 - p): inverted dropout keeps the expectation.
        ASSERT_EQ(y.at(i), x.at(i) * (1.0 / (1.0 - p))) << "kept element " << i;
      }
    }
    const double mean = static_cast<double>(n) * (1 - p);
    const double sd = std::sqrt(static_cast<double>(n) * p * (1 - p));
    EXPECT_LE(std::fabs(static_cast<double>(kept) - mean), 6 * sd)
        << "kept " << kept << " of " << n << " (expected " << mean << " +- " << 6 * sd << ")";

    // The mask is a pure function of the key: replayed exactly, and another stream differs.
    Tensor again = nans("dropout_rate.again", {n});
    ops::dropout_forward(x, p, key, again);
    Tensor other = nans("dropout_rate.other", {n});
    ops::dropout_forward(x, p, ops::DropoutKey{2024, 6}, other);
    std::int64_t replay_differences = 0, stream_differences = 0;
    for (std::int64_t i = 0; i < n; ++i) {
      replay_differences += (again.at(i) != y.at(i));
      stream_differences += ((other.at(i) == 0) != (y.at(i) == 0));
    }
    EXPECT_EQ(replay_differences, 0);
    // Independent masks disagree on a fraction 2p(1-p) of elements; far above zero here.
    EXPECT_GT(stream_differences, 0) << "streams 5 and 6 gave the same mask";
  }
}

TEST(OpsGradient, SoftmaxAndCrossEntropyAreShiftInvariant) {
  // softmax(x + s) = softmax(x): with s = 1000, exp(x + s) overflows float64, so only an
  // implementation that subtracts the row maximum passes. Rounding x + s moves each logit by at
  // most u (|x| + s); a logit change d moves log-softmax by at most 2d, and the softmax itself
  // errs by gamma_{C+4} (C terms summed, exp, subtract, divide).
  const std::int64_t N = 3, C = 7;
  const double shift = 1000;
  const double u = unit_roundoff(DataType::float64);
  const Tensor x = random_tensor("shift.x", {N, C});
  Tensor shifted = zeros("shift.x_shifted", {N, C});
  double largest = 0;
  for (std::int64_t i = 0; i < x.numel(); ++i) {
    shifted.set(i, x.at(i) + shift);
    largest = std::max(largest, std::fabs(x.at(i)));
  }
  const double bound = 2 * u * (largest + shift) + 2 * tolerance::gamma(static_cast<int>(C) + 4, u);
  Tensor y = nans("shift.y", {N, C}), y_shifted = nans("shift.y_shifted", {N, C});
  ops::softmax_forward(x, y);
  ops::softmax_forward(shifted, y_shifted);
  expect_close(y_shifted, y, bound, "softmax of logits shifted by 1000");
  const Tensor targets = token_tensor("shift.targets", {N}, C);
  const double loss = ops::cross_entropy_forward(x, targets, N);
  const double loss_shifted = ops::cross_entropy_forward(shifted, targets, N);
  EXPECT_LE(std::fabs(loss_shifted - loss), bound * std::fabs(loss))
      << "cross-entropy of shifted logits " << loss_shifted << ", unshifted " << loss;
}

// Inputs at the edges, each result worked from the op's definition: no NaN or inf where the
// mathematics has none.
TEST(OpsExtremes, ConstantRowsLargeArgumentsAndFarTargets) {
  // LayerNorm of constant rows: variance 0, so x - mean is exactly 0 and y is beta exactly;
  // rstd is 1/sqrt(eps); dx = rstd (gamma dy - mean(gamma dy)) sums to zero over the row.
  const std::int64_t C = 8;
  Tensor x = zeros("edge.x", {2, C});
  for (std::int64_t i = 0; i < C; ++i) x.set(C + i, 1e6);  // row 0 zeros, row 1 a large constant
  const Tensor gamma = random_tensor("edge.gamma", {C}, 1, 0.5);
  const Tensor beta = random_tensor("edge.beta", {C});
  Tensor y = nans("edge.y", {2, C}), mean = nans("edge.mean", {2}), rstd = nans("edge.rstd", {2});
  ops::layernorm_forward(x, gamma, beta, y, mean, rstd);
  for (std::int64_t i = 0; i < 2 * C; ++i) EXPECT_EQ(y.at(i), beta.at(i % C)) << "layernorm of a constant row at " << i;
  // GPT-2's epsilon (PyTorch's LayerNorm default too), written out rather than read from the constant
  // the op uses, so that a changed constant fails here.
  EXPECT_EQ(rstd.at(0), 1 / std::sqrt(1e-5));
  const Tensor dy = random_tensor("edge.dy", {2, C});
  Tensor dx = nans("edge.dx", {2, C}), dgamma = zeros("edge.dgamma", {C}), dbeta = zeros("edge.dbeta", {C});
  ops::layernorm_backward(dy, x, gamma, mean, rstd, dx, dgamma, dbeta);
  for (int row = 0; row < 2; ++row) {
    double mean_g = 0, sum = 0, largest = 0;
    for (std::int64_t i = 0; i < C; ++i) mean_g += gamma.at(i) * dy.at(row * C + i) / C;
    for (std::int64_t i = 0; i < C; ++i) {
      const double want = rstd.at(0) * (gamma.at(i) * dy.at(row * C + i) - mean_g);
      EXPECT_NEAR(dx.at(row * C + i), want, 1e-12 * std::fabs(rstd.at(0))) << "row " << row << " element " << i;
      sum += dx.at(row * C + i);
      largest = std::max(largest, std::fabs(dx.at(row * C + i)));
    }
    EXPECT_LE(std::fabs(sum), tolerance::gamma(static_cast<int>(C), unit_roundoff(DataType::float64)) * C * largest);
  }
  // GeLU far out: 0.5 x (1 + tanh(z)) with tanh = +-1 in float64 past |z| ~ 19: x itself, or 0
  // (not -0 times inf, not NaN); its derivative 1 or 0.
  const std::vector<double> far = {-1e4, -60, 60, 1e4};
  Tensor g = zeros("edge.g", {4});
  for (std::int64_t i = 0; i < 4; ++i) g.set(i, far[static_cast<std::size_t>(i)]);
  Tensor gy = nans("edge.gy", {4}), gdx = nans("edge.gdx", {4});
  const Tensor ones = random_tensor("edge.ones", {4}, 1, 0);
  ops::gelu_forward(g, gy);
  ops::gelu_backward(ones, g, gdx);
  for (std::int64_t i = 0; i < 4; ++i) {
    EXPECT_EQ(gy.at(i), far[static_cast<std::size_t>(i)] > 0 ? far[static_cast<std::size_t>(i)] : 0.0) << far[static_cast<std::size_t>(i)];
    EXPECT_EQ(gdx.at(i), far[static_cast<std::size_t>(i)] > 0 ? 1.0 : 0.0) << far[static_cast<std::size_t>(i)];
  }
  // Cross-entropy with the target's logit 800 below the row's largest: -log softmax is
  // 800 + log(1 + e^-800 + ...) = 800 (exp(-800) underflows to 0 in the sum), finite; its
  // gradient at the target is softmax - 1 = -1 and 1 at the largest logit.
  Tensor logits = zeros("edge.logits", {1, 3});
  logits.set(0, -800);
  logits.set(1, 0);
  logits.set(2, -1e4);
  Tensor target = token_tensor("edge.target", {1}, 3);
  target.set(0, 0);
  Tensor dlogits = nans("edge.dlogits", {1, 3});
  EXPECT_EQ(ops::cross_entropy_backward(logits, target, 1, dlogits), 800.0);
  EXPECT_EQ(dlogits.at(0), -1.0);
  EXPECT_EQ(dlogits.at(1), 1.0);
  EXPECT_EQ(dlogits.at(2), 0.0);
  // Softmax of a row spread over 10^4: one 1, the rest 0, no NaN.
  Tensor spread_y = nans("edge.spread_y", {1, 3});
  ops::softmax_forward(logits, spread_y);
  EXPECT_EQ(spread_y.at(1), 1.0);
  EXPECT_EQ(spread_y.at(0), std::exp(-800.0));
  EXPECT_EQ(spread_y.at(2), 0.0);
}

TEST(OpsGradient, ParameterGradientsAccumulate) {
  // Parameter gradients are summed (+=) so micro-batches add up: two backward calls give twice
  // one call. Input gradients are overwritten: the second call leaves them as the first did.
  const auto expect_doubled = [](const Tensor& once, const Tensor& twice) {
    for (std::int64_t i = 0; i < once.numel(); ++i)
      ASSERT_EQ(twice.at(i), 2 * once.at(i)) << twice.name() << " at " << index_string(twice.shape(), i);
  };
  const auto expect_same = [](const Tensor& once, const Tensor& twice) {
    for (std::int64_t i = 0; i < once.numel(); ++i)
      ASSERT_EQ(twice.at(i), once.at(i)) << twice.name() << " (overwritten) at " << index_string(twice.shape(), i);
  };
  // Where the op adds its terms into the gradient one by one (in place, or in BLAS blocks), a
  // second call interleaves its terms with the first call's sum; with small integer values
  // (exact in float64, as nccl-tests crafts its inputs) every partial sum is exact, so the
  // doubling is exact in any summation order.
  const auto integer_tensor = [](const std::string& name, Shape shape) {
    Tensor t = zeros(name, std::move(shape));
    initialize(t, Init::uniform(-8, 8), kSeed);
    for (std::int64_t i = 0; i < t.numel(); ++i) t.set(i, std::round(t.at(i)));
    return t;
  };
  {
    const Tensor x = integer_tensor("acc_linear.x", {3, 4});
    const Tensor w = random_tensor("acc_linear.w", {4, 2});
    const Tensor dy = integer_tensor("acc_linear.dy", {3, 2});
    Tensor dx = nans("acc_linear.dx", {3, 4});
    Tensor dw = zeros("acc_linear.dw", {4, 2});
    Tensor dbias = zeros("acc_linear.dbias", {2});
    ops::linear_backward(dy, x, w, dx, dw, dbias);
    const Tensor dx1 = dx.clone("dx once", kCategory), dw1 = dw.clone("dw once", kCategory);
    const Tensor dbias1 = dbias.clone("dbias once", kCategory);
    ops::linear_backward(dy, x, w, dx, dw, dbias);
    expect_doubled(dw1, dw);
    expect_doubled(dbias1, dbias);
    expect_same(dx1, dx);
  }
  {
    const Tensor tokens = token_tensor("acc_embedding.tokens", {2, 4}, 5);
    const Tensor dy = integer_tensor("acc_embedding.dy", {2, 4, 3});
    Tensor dwte = zeros("acc_embedding.dwte", {5, 3}), dwpe = zeros("acc_embedding.dwpe", {4, 3});
    ops::embedding_backward(dy, tokens, dwte, dwpe);
    const Tensor dwte1 = dwte.clone("dwte once", kCategory), dwpe1 = dwpe.clone("dwpe once", kCategory);
    ops::embedding_backward(dy, tokens, dwte, dwpe);
    expect_doubled(dwte1, dwte);
    expect_doubled(dwpe1, dwpe);
  }
  {
    // layernorm's terms dy * xhat cannot be made integers. Both calls add the same N terms per
    // entry, so after two calls the entry is a float64 sum of 2N terms and twice the first call
    // is (exactly) twice a sum of N: each within gamma_{2N} sum|terms| of the exact value, in
    // any order (Higham 4.2), so they differ by at most 2 gamma_{2N} sum|terms|.
    const std::int64_t N = 3, C = 6;
    const Tensor x = random_tensor("acc_layernorm.x", {N, C});
    const Tensor gamma = random_tensor("acc_layernorm.gamma", {C}, 1, 0.5);
    const Tensor beta = random_tensor("acc_layernorm.beta", {C});
    const Tensor dy = random_tensor("acc_layernorm.dy", {N, C});
    Tensor y = nans("acc_layernorm.y", {N, C});
    Tensor mean = nans("acc_layernorm.mean", {N}), rstd = nans("acc_layernorm.rstd", {N});
    ops::layernorm_forward(x, gamma, beta, y, mean, rstd);
    Tensor dx = nans("acc_layernorm.dx", {N, C});
    Tensor dgamma = zeros("acc_layernorm.dgamma", {C}), dbeta = zeros("acc_layernorm.dbeta", {C});
    ops::layernorm_backward(dy, x, gamma, mean, rstd, dx, dgamma, dbeta);
    const Tensor dx1 = dx.clone("dx once", kCategory), dgamma1 = dgamma.clone("dgamma once", kCategory);
    const Tensor dbeta1 = dbeta.clone("dbeta once", kCategory);
    ops::layernorm_backward(dy, x, gamma, mean, rstd, dx, dgamma, dbeta);
    const double g = tolerance::gamma(static_cast<int>(2 * N), unit_roundoff(DataType::float64));
    for (std::int64_t j = 0; j < C; ++j) {
      double gamma_terms = 0, beta_terms = 0;  // sum over both calls of |dy xhat| and |dy|
      for (std::int64_t r = 0; r < N; ++r) {
        const double xhat = (x.at(r * C + j) - mean.at(r)) * rstd.at(r);
        gamma_terms += 2 * std::fabs(dy.at(r * C + j) * xhat);
        beta_terms += 2 * std::fabs(dy.at(r * C + j));
      }
      EXPECT_LE(std::fabs(dgamma.at(j) - 2 * dgamma1.at(j)), 2 * g * gamma_terms)
          << "dgamma at [" << j << "]: twice " << dgamma.at(j) << ", once " << dgamma1.at(j);
      EXPECT_LE(std::fabs(dbeta.at(j) - 2 * dbeta1.at(j)), 2 * g * beta_terms)
          << "dbeta at [" << j << "]: twice " << dbeta.at(j) << ", once " << dbeta1.at(j);
    }
    expect_same(dx1, dx);
  }
}

// ---------------------------------------------------------------------------------------------
// The checks can fail: a wrong gradient or a lower-precision result is caught.

TEST(OpsChecksCanFail, PerturbedGradientExceedsTheTolerance) {
  // The gelu gradient is correct (OpsGradient.Gelu); a relative change of 10 times the
  // tolerance in one element, or dropping the derivative's second term (a plausible bug), must
  // fail expect_gradient, and its message must say where the largest difference is.
  Tensor x = random_tensor("fail.x", {4, 5}, 0, 2);
  const Tensor r = random_tensor("fail.r", {4, 5});
  Tensor y = nans("fail.y", {4, 5});
  const auto loss = [&] {
    ops::gelu_forward(x, y);
    return project(y, r);
  };
  Tensor dx = nans("fail.dx", {4, 5});
  ops::gelu_backward(r, x, dx);
  const Tensor numeric = numeric_gradient(x, loss);
  const Difference baseline = difference(dx, numeric);
  ASSERT_LT(baseline.relative, tolerance::kGradientRelativeError) << baseline;

  // The largest element carries much of the norm, so a relative change of 10 tolerances there
  // moves the relative Frobenius error by several tolerances.
  std::int64_t largest = 0;
  for (std::int64_t i = 0; i < dx.numel(); ++i)
    if (std::fabs(dx.at(i)) > std::fabs(dx.at(largest))) largest = i;
  Tensor perturbed = dx.clone("fail.dx_perturbed", kCategory);
  perturbed.set(largest, dx.at(largest) * (1 + 10 * tolerance::kGradientRelativeError));
  EXPECT_GT(difference(perturbed, numeric).relative, tolerance::kGradientRelativeError) << baseline;

  ::testing::TestPartResultArray failures;
  {
    const ::testing::ScopedFakeTestPartResultReporter intercept(
        ::testing::ScopedFakeTestPartResultReporter::INTERCEPT_ONLY_CURRENT_THREAD, &failures);
    expect_gradient(perturbed, x, loss, "perturbed dx");
  }
  ASSERT_EQ(failures.size(), 1) << "expect_gradient accepted a gradient 10 tolerances off";
  const std::string message = failures.GetTestPartResult(0).message();
  EXPECT_NE(message.find("largest difference"), std::string::npos) << message;
  EXPECT_NE(message.find(index_string(x.shape(), largest)), std::string::npos) << message;

  // d/dx of 0.5 x (1 + tanh(u)) without the 0.5 x sech^2(u) u' term.
  Tensor wrong = nans("fail.dx_wrong", {4, 5});
  for (std::int64_t i = 0; i < x.numel(); ++i) {
    const double u = std::sqrt(2 / std::numbers::pi) * (x.at(i) + 0.044715 * std::pow(x.at(i), 3));
    wrong.set(i, r.at(i) * 0.5 * (1 + std::tanh(u)));
  }
  EXPECT_GT(difference(wrong, numeric).relative, tolerance::kGradientRelativeError);
}

// ---------------------------------------------------------------------------------------------
// FLOP counter: exactly the matrix-multiply FLOPs, 2 m n k each.

TEST(OpsFlops, MatmulCountsTwoMNK) {
  const std::int64_t m = 3, k = 7, n = 5;
  for (DataType type : {DataType::float64, DataType::float32, DataType::bfloat16}) {
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        const Tensor a = zeros("flops.a", ta ? Shape{k, m} : Shape{m, k}, type);
        const Tensor b = zeros("flops.b", tb ? Shape{n, k} : Shape{k, n}, type);
        Tensor c = zeros("flops.c", {m, n}, type);
        const ops::FlopScope scope;
        ops::matmul(a, ta, b, tb, c, false);
        EXPECT_EQ(scope.matmul(), 2 * m * n * k)
            << name_of(type) << " transpose_a=" << ta << " transpose_b=" << tb;
      }
    }
  }
}

TEST(OpsFlops, Linear) {
  // Forward x w: 2 N in out. Backward dx = dy w^T and dw = x^T dy: twice that; without dx, once.
  const std::int64_t N = 6, in = 4, out = 3;
  const Tensor x = zeros("flops_linear.x", {2, 3, in}), w = zeros("flops_linear.w", {in, out});
  const Tensor bias = zeros("flops_linear.bias", {out}), dy = zeros("flops_linear.dy", {2, 3, out});
  Tensor y = zeros("flops_linear.y", {2, 3, out}), dx = zeros("flops_linear.dx", {2, 3, in});
  Tensor dw = zeros("flops_linear.dw", {in, out}), dbias = zeros("flops_linear.dbias", {out});
  {
    const ops::FlopScope scope;
    ops::linear_forward(x, w, bias, y);
    EXPECT_EQ(scope.matmul(), 2 * N * in * out);
  }
  {
    const ops::FlopScope scope;
    ops::linear_backward(dy, x, w, dx, dw, dbias);
    EXPECT_EQ(scope.matmul(), 4 * N * in * out);
  }
  {
    Tensor no_dx;
    const ops::FlopScope scope;
    ops::linear_backward(dy, x, w, no_dx, dw, dbias);
    EXPECT_EQ(scope.matmul(), 2 * N * in * out);
  }
}

TEST(OpsFlops, Attention) {
  // Per head, forward: scores q k^T (2 T T hs) and probs v (2 T T hs); summed over heads and
  // batch, 4 B T^2 C. Backward: dP, dV, dQ, dK, four products of 2 T T hs: 8 B T^2 C. The
  // causal mask does not change the count (the masked scores are computed too).
  const std::int64_t B = 2, T = 5, C = 12;
  for (int heads : {1, 3}) {
    for (bool causal : {false, true}) {
      const Tensor qkv = random_tensor("flops_attention.qkv", {B, T, 3 * C});
      Tensor out = nans("flops_attention.out", {B, T, C}), probs = nans("flops_attention.probs", {B, heads, T, T});
      Tensor dqkv = nans("flops_attention.dqkv", qkv.shape());
      const Tensor dout = random_tensor("flops_attention.dout", {B, T, C});
      {
        const ops::FlopScope scope;
        ops::attention_forward(qkv, heads, causal, out, probs);
        EXPECT_EQ(scope.matmul(), 4 * B * T * T * C) << "forward, heads=" << heads << " causal=" << causal;
      }
      {
        const ops::FlopScope scope;
        ops::attention_backward(dout, qkv, probs, heads, dqkv);
        EXPECT_EQ(scope.matmul(), 8 * B * T * T * C) << "backward, heads=" << heads << " causal=" << causal;
      }
    }
  }
}

TEST(OpsFlops, ElementwiseOpsCountNothing) {
  // Only matrix multiplies are counted (flops.hpp): the O(elements) ops add zero.
  const Tensor x = random_tensor("flops_elementwise.x", {4, 6});
  Tensor y = nans("flops_elementwise.y", {4, 6});
  const ops::FlopScope scope;
  ops::gelu_forward(x, y);
  ops::softmax_forward(x, y);
  ops::add_forward(x, x, y);
  ops::dropout_forward(x, 0.5, {1, 1}, y);
  EXPECT_EQ(scope.matmul(), 0);
}
