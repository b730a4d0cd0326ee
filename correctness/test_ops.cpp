// Conformance of the CPU ops (reference/ops/cpu.hpp). Every backward is checked against central
// finite differences in float64; every op in float32 (and matmul and gelu on 16-bit storage)
// against the same op in float64 under the bounds of reference/core/tolerance.hpp; bad input
// must be refused with a parity::Error naming the tensors and shapes; the FLOP counter must add
// exactly the matrix-multiply FLOPs. A few tests prove the comparisons themselves can fail.
//
// Method for gradients: a scalar L = sum(y * R) with a fixed random projection R, so dL/dy = R;
// the analytic gradient comes from the op's backward given dy = R, the numeric one from
// (L(x + d) - L(x - d)) / 2d for every element of every input and parameter.
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <limits>
#include <numbers>
#include <ostream>
#include <source_location>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "correctness/op_testing.hpp"
#include "reference/core/error.hpp"
#include "reference/core/tolerance.hpp"
#include "reference/ops/cpu.hpp"
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

TEST(OpsGradient, Gelu) {
  // Spread 2 reaches the saturated tails of tanh as well as the curved middle.
  for (const Shape& shape : {Shape{7}, Shape{3, 5}, Shape{2, 3, 4}}) {
    SCOPED_TRACE("gelu " + to_string(shape));
    Tensor x = random_tensor("gelu.x", shape, 0, 2);
    const Tensor r = random_tensor("gelu.r", shape);
    Tensor y = nans("gelu.y", shape);
    const auto loss = [&] {
      ops::gelu_forward(x, y);
      return project(y, r);
    };
    Tensor dx = nans("gelu.dx", shape);
    ops::gelu_backward(r, x, dx);
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

TEST(OpsGradient, Softmax) {
  for (const Shape& shape : {Shape{4, 6}, Shape{2, 3, 5}, Shape{1, 10}}) {
    SCOPED_TRACE("softmax " + to_string(shape));
    Tensor x = random_tensor("softmax.x", shape, 0, 2);
    const Tensor r = random_tensor("softmax.r", shape);
    Tensor y = nans("softmax.y", shape);
    const auto loss = [&] {
      ops::softmax_forward(x, y);
      return project(y, r);
    };
    loss();  // y of the unperturbed x, for backward
    Tensor dx = nans("softmax.dx", shape);
    ops::softmax_backward(r, y, dx);
    expect_gradient(dx, x, loss, "dx");
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
  const Tensor targets = token_tensor("shards.targets", {N}, V, DataType::int64);
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

TEST(OpsBadInput, VocabularyShards) {
  const Tensor tokens = token_tensor("tokens", {2, 3}, 10);
  const Tensor wte = random_tensor("wte_shard", {4, 3});
  Tensor y = zeros("y", {2, 3, 3});
  expect_refused([&] { ops::embedding_shard_forward(tokens, wte, 7, 10, y); },
                 {"embedding_shard_forward", "wte_shard [4, 3]", "class 7", "vocabulary of 10"});
  expect_refused([&] { ops::embedding_shard_forward(tokens, wte, 0, 5, y); }, {"token", "vocabulary of 5"});
  const Tensor logits = random_tensor("logits", {3, 4});
  Tensor m32 = zeros("m", {3}, DataType::float32), m = zeros("m", {3}), s = zeros("s", {3}), z = zeros("z", {3});
  expect_refused([&] { ops::cross_entropy_shard_max(logits, m32); }, {"statistics m [3] float32", "must be float64"});
  Tensor targets = token_tensor("targets", {3}, 10);
  targets.set(1, 12);
  expect_refused([&] { ops::cross_entropy_shard_sums(logits, targets, 0, 10, m, s, z); },
                 {"cross_entropy_shard_sums", "target 12 at 1", "vocabulary of 10"});
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

TEST(OpsChecksCanFail, Bfloat16MatmulExceedsTheFloat32Bound) {
  // The float32 bound is tight enough to tell precisions apart: the same product computed from
  // bfloat16 storage (8-bit significand) is far outside it.
  const std::int64_t m = 16, k = 64, n = 12;
  const Tensor a = random_tensor("fail_bf16.a", {m, k});
  const Tensor b = random_tensor("fail_bf16.b", {k, n});
  Tensor c64 = nans("fail_bf16.c", {m, n});
  ops::matmul(a, false, b, false, c64, false);
  Tensor c16 = nans("fail_bf16.c16", {m, n}, DataType::bfloat16);
  ops::matmul(to_type(a, DataType::bfloat16), false, to_type(b, DataType::bfloat16), false, c16, false);
  EXPECT_GT(difference(c16, c64).relative, tolerance::float32_op_relative_bound(static_cast<int>(k), 1));
}

// ---------------------------------------------------------------------------------------------
// float32 against float64: the float32 op on the float64 inputs rounded to float32, against the
// float64 op on the unrounded inputs (the bound includes one unit roundoff for that rounding).

TEST(OpsFloat32, Matmul) {
  // One reduction of length k per output: n = k, stages = 1.
  const std::int64_t m = 24, k = 64, n = 20;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      SCOPED_TRACE("transpose_a=" + std::to_string(ta) + " transpose_b=" + std::to_string(tb));
      const Tensor a = random_tensor("f32_matmul.a", ta ? Shape{k, m} : Shape{m, k});
      const Tensor b = random_tensor("f32_matmul.b", tb ? Shape{n, k} : Shape{k, n});
      Tensor c64 = nans("f32_matmul.c", {m, n});
      ops::matmul(a, ta, b, tb, c64, false);
      Tensor c32 = nans("f32_matmul.c32", {m, n}, DataType::float32);
      ops::matmul(to_type(a, DataType::float32), ta, to_type(b, DataType::float32), tb, c32, false);
      expect_float32_close(c32, c64, static_cast<int>(k), 1, "matmul");
    }
  }
}

TEST(OpsFloat32, Linear) {
  // Forward: one reduction of in terms plus the bias, n = in + 1. Backward: dx reduces over out,
  // dw and dbias over the N rows; one stage each.
  const Shape x_shape{4, 8, 32};
  const std::int64_t in = 32, out = 24, rows = 32;
  const Tensor x = random_tensor("f32_linear.x", x_shape);
  const Tensor w = random_tensor("f32_linear.w", {in, out});
  const Tensor bias = random_tensor("f32_linear.bias", {out});
  const Tensor dy = random_tensor("f32_linear.dy", with_last(x_shape, out));
  const auto f32 = [](const Tensor& t) { return to_type(t, DataType::float32); };

  Tensor y64 = nans("f32_linear.y", with_last(x_shape, out));
  ops::linear_forward(x, w, bias, y64);
  Tensor y32 = nans("f32_linear.y32", with_last(x_shape, out), DataType::float32);
  ops::linear_forward(f32(x), f32(w), f32(bias), y32);
  expect_float32_close(y32, y64, static_cast<int>(in + 1), 1, "linear_forward y");

  Tensor dx64 = nans("f32_linear.dx", x_shape), dw64 = zeros("f32_linear.dw", {in, out});
  Tensor dbias64 = zeros("f32_linear.dbias", {out});
  ops::linear_backward(dy, x, w, dx64, dw64, dbias64);
  Tensor dx32 = nans("f32_linear.dx32", x_shape, DataType::float32);
  Tensor dw32 = zeros("f32_linear.dw32", {in, out}, DataType::float32);
  Tensor dbias32 = zeros("f32_linear.dbias32", {out}, DataType::float32);
  ops::linear_backward(f32(dy), f32(x), f32(w), dx32, dw32, dbias32);
  expect_float32_close(dx32, dx64, static_cast<int>(out), 1, "linear_backward dx");
  expect_float32_close(dw32, dw64, static_cast<int>(rows), 1, "linear_backward dw");
  expect_float32_close(dbias32, dbias64, static_cast<int>(rows), 1, "linear_backward dbias");
}

TEST(OpsFloat32, Gelu) {
  // Elementwise, no reduction. Forward: n = 12 rounded operations per element (the two rounded
  // constants, the cubic's two products, its scale and sum, the sqrt(2/pi) scale, tanh counted
  // twice for libm's error of up to about 2 ulp, 1 + t, and the two final products).
  // Backward: n = 21 (the inner chain up to tanh, 9 as above; sech^2 = 1 - t^2, 2; 1 + t, 1;
  // the polynomial 1 + 3c x^2 with its rounded constant, 4; three products, the sum of the two
  // terms, and the product with dy, 5).
  const Shape shape{16, 64};
  const Tensor x = random_tensor("f32_gelu.x", shape, 0, 2);
  const Tensor dy = random_tensor("f32_gelu.dy", shape);
  Tensor y64 = nans("f32_gelu.y", shape);
  ops::gelu_forward(x, y64);
  Tensor y32 = nans("f32_gelu.y32", shape, DataType::float32);
  ops::gelu_forward(to_type(x, DataType::float32), y32);
  expect_float32_close(y32, y64, 12, 1, "gelu_forward");

  Tensor dx64 = nans("f32_gelu.dx", shape);
  ops::gelu_backward(dy, x, dx64);
  Tensor dx32 = nans("f32_gelu.dx32", shape, DataType::float32);
  ops::gelu_backward(to_type(dy, DataType::float32), to_type(x, DataType::float32), dx32);
  expect_float32_close(dx32, dx64, 21, 1, "gelu_backward");
}

TEST(OpsFloat32, Add) {
  // One rounded addition per element: n = 1, stages = 1.
  const Shape shape{32, 48};
  const Tensor a = random_tensor("f32_add.a", shape), b = random_tensor("f32_add.b", shape);
  Tensor y64 = nans("f32_add.y", shape);
  ops::add_forward(a, b, y64);
  Tensor y32 = nans("f32_add.y32", shape, DataType::float32);
  ops::add_forward(to_type(a, DataType::float32), to_type(b, DataType::float32), y32);
  expect_float32_close(y32, y64, 1, 1, "add_forward");
}

TEST(OpsFloat32, LayerNorm) {
  // Forward: mean then variance, two chained reductions of C: n = C, stages = 2. Backward: the
  // forward's two plus the two row means of dxhat and dxhat * xhat: stages = 4 for dx; dgamma
  // and dbeta reduce over the N rows after the forward's two: n = max(C, N), stages = 3.
  const std::int64_t N = 24, C = 64;
  const Tensor x = random_tensor("f32_layernorm.x", {N, C}, 0.5, 1.5);
  const Tensor gamma = random_tensor("f32_layernorm.gamma", {C}, 1, 0.5);
  const Tensor beta = random_tensor("f32_layernorm.beta", {C});
  const Tensor dy = random_tensor("f32_layernorm.dy", {N, C});
  const auto f32 = [](const Tensor& t) { return to_type(t, DataType::float32); };

  Tensor y64 = nans("f32_layernorm.y", {N, C});
  Tensor mean64 = nans("f32_layernorm.mean", {N}), rstd64 = nans("f32_layernorm.rstd", {N});
  ops::layernorm_forward(x, gamma, beta, y64, mean64, rstd64);
  const Tensor x32 = f32(x), gamma32 = f32(gamma);
  Tensor y32 = nans("f32_layernorm.y32", {N, C}, DataType::float32);
  Tensor mean32 = nans("f32_layernorm.mean32", {N}, DataType::float32);
  Tensor rstd32 = nans("f32_layernorm.rstd32", {N}, DataType::float32);
  ops::layernorm_forward(x32, gamma32, f32(beta), y32, mean32, rstd32);
  expect_float32_close(y32, y64, static_cast<int>(C), 2, "layernorm_forward y");
  expect_float32_close(mean32, mean64, static_cast<int>(C), 1, "layernorm_forward mean");
  expect_float32_close(rstd32, rstd64, static_cast<int>(C), 2, "layernorm_forward rstd");

  Tensor dx64 = nans("f32_layernorm.dx", {N, C});
  Tensor dgamma64 = zeros("f32_layernorm.dgamma", {C}), dbeta64 = zeros("f32_layernorm.dbeta", {C});
  ops::layernorm_backward(dy, x, gamma, mean64, rstd64, dx64, dgamma64, dbeta64);
  Tensor dx32 = nans("f32_layernorm.dx32", {N, C}, DataType::float32);
  Tensor dgamma32 = zeros("f32_layernorm.dgamma32", {C}, DataType::float32);
  Tensor dbeta32 = zeros("f32_layernorm.dbeta32", {C}, DataType::float32);
  ops::layernorm_backward(f32(dy), x32, gamma32, mean32, rstd32, dx32, dgamma32, dbeta32);
  expect_float32_close(dx32, dx64, static_cast<int>(C), 4, "layernorm_backward dx");
  expect_float32_close(dgamma32, dgamma64, static_cast<int>(std::max(C, N)), 3, "layernorm_backward dgamma");
  expect_float32_close(dbeta32, dbeta64, static_cast<int>(N), 1, "layernorm_backward dbeta");
}

TEST(OpsFloat32, Softmax) {
  // Forward: one reduction (the sum of C exponentials): n = C, stages = 1. Backward: the
  // forward's sum, then the row dot product sum(dy * y): n = C, stages = 2.
  const std::int64_t N = 16, C = 48;
  const Tensor x = random_tensor("f32_softmax.x", {N, C}, 0, 2);
  const Tensor dy = random_tensor("f32_softmax.dy", {N, C});
  Tensor y64 = nans("f32_softmax.y", {N, C});
  ops::softmax_forward(x, y64);
  Tensor y32 = nans("f32_softmax.y32", {N, C}, DataType::float32);
  ops::softmax_forward(to_type(x, DataType::float32), y32);
  expect_float32_close(y32, y64, static_cast<int>(C), 1, "softmax_forward");

  Tensor dx64 = nans("f32_softmax.dx", {N, C});
  ops::softmax_backward(dy, y64, dx64);
  Tensor dx32 = nans("f32_softmax.dx32", {N, C}, DataType::float32);
  ops::softmax_backward(to_type(dy, DataType::float32), y32, dx32);
  expect_float32_close(dx32, dx64, static_cast<int>(C), 2, "softmax_backward");
}

TEST(OpsFloat32, Attention) {
  // Forward: scores (length hs), softmax (length T), weighted sum (length T): stages = 3,
  // n = max(hs, T) (tolerance.hpp's own example). Backward: after those three, dP = dO V^T
  // (hs), the row sum of dP * P (T) and dQ = dS K, dK = dS^T Q, dV = P^T dO (T): stages = 6.
  for (bool causal : {false, true}) {
    SCOPED_TRACE(causal ? "causal" : "not causal");
    const std::int64_t B = 2, T = 16, C = 32;
    const int heads = 4;
    const int n = static_cast<int>(std::max<std::int64_t>(C / heads, T));
    const Tensor qkv = random_tensor("f32_attention.qkv", {B, T, 3 * C});
    const Tensor dout = random_tensor("f32_attention.dout", {B, T, C});
    Tensor out64 = nans("f32_attention.out", {B, T, C}), probs64 = nans("f32_attention.probs", {B, heads, T, T});
    ops::attention_forward(qkv, heads, causal, out64, probs64);
    const Tensor qkv32 = to_type(qkv, DataType::float32);
    Tensor out32 = nans("f32_attention.out32", {B, T, C}, DataType::float32);
    Tensor probs32 = nans("f32_attention.probs32", {B, heads, T, T}, DataType::float32);
    ops::attention_forward(qkv32, heads, causal, out32, probs32);
    expect_float32_close(out32, out64, n, 3, "attention_forward out");
    expect_float32_close(probs32, probs64, n, 2, "attention_forward probs");

    Tensor dqkv64 = nans("f32_attention.dqkv", qkv.shape());
    ops::attention_backward(dout, qkv, probs64, heads, dqkv64);
    Tensor dqkv32 = nans("f32_attention.dqkv32", qkv.shape(), DataType::float32);
    ops::attention_backward(to_type(dout, DataType::float32), qkv32, probs32, heads, dqkv32);
    expect_float32_close(dqkv32, dqkv64, n, 6, "attention_backward dqkv");
  }
}

TEST(OpsFloat32, Embedding) {
  // Forward: one addition wte + wpe per element: n = 1, stages = 1. Backward: dwte sums the
  // rows of every occurrence of a token (at most B*T terms), dwpe over the B batch rows.
  const std::int64_t B = 4, T = 8, C = 16, V = 6;
  const Tensor tokens = token_tensor("f32_embedding.tokens", {B, T}, V);
  const Tensor wte = random_tensor("f32_embedding.wte", {V, C}), wpe = random_tensor("f32_embedding.wpe", {T, C});
  const Tensor dy = random_tensor("f32_embedding.dy", {B, T, C});
  Tensor y64 = nans("f32_embedding.y", {B, T, C});
  ops::embedding_forward(tokens, wte, wpe, y64);
  Tensor y32 = nans("f32_embedding.y32", {B, T, C}, DataType::float32);
  ops::embedding_forward(tokens, to_type(wte, DataType::float32), to_type(wpe, DataType::float32), y32);
  expect_float32_close(y32, y64, 1, 1, "embedding_forward");

  Tensor dwte64 = zeros("f32_embedding.dwte", {V, C}), dwpe64 = zeros("f32_embedding.dwpe", {T, C});
  ops::embedding_backward(dy, tokens, dwte64, dwpe64);
  Tensor dwte32 = zeros("f32_embedding.dwte32", {V, C}, DataType::float32);
  Tensor dwpe32 = zeros("f32_embedding.dwpe32", {T, C}, DataType::float32);
  ops::embedding_backward(to_type(dy, DataType::float32), tokens, dwte32, dwpe32);
  expect_float32_close(dwte32, dwte64, static_cast<int>(B * T), 1, "embedding_backward dwte");
  expect_float32_close(dwpe32, dwpe64, static_cast<int>(B), 1, "embedding_backward dwpe");
}

TEST(OpsFloat32, CrossEntropy) {
  // Forward: the sum of V exponentials per row (n = V, stages = 1); the sum over rows is in
  // float64. Backward: softmax minus one-hot, the same one reduction.
  const std::int64_t N = 16, V = 32;
  const Tensor logits = random_tensor("f32_cross_entropy.logits", {N, V}, 0, 2);
  const Tensor targets = token_tensor("f32_cross_entropy.targets", {N}, V);
  const Tensor logits32 = to_type(logits, DataType::float32);
  expect_float32_scalar_close(ops::cross_entropy_forward(logits32, targets, N),
                              ops::cross_entropy_forward(logits, targets, N), static_cast<int>(V), 1,
                              "cross_entropy_forward");
  Tensor d64 = nans("f32_cross_entropy.dlogits", {N, V});
  ops::cross_entropy_backward(logits, targets, N, d64);
  Tensor d32 = nans("f32_cross_entropy.dlogits32", {N, V}, DataType::float32);
  ops::cross_entropy_backward(logits32, targets, N, d32);
  expect_float32_close(d32, d64, static_cast<int>(V), 1, "cross_entropy_backward");
}

TEST(OpsFloat32, MeanSquaredError) {
  // Forward: one float32 subtraction per element, the squares and their sum in float64: n = 1.
  // Backward: the rounded scale 2 / normalizer, the subtraction and the product: n = 3.
  const Shape shape{12, 20};
  const double normalizer = 240;
  const Tensor p = random_tensor("f32_mse.prediction", shape), t = random_tensor("f32_mse.target", shape);
  const Tensor p32 = to_type(p, DataType::float32), t32 = to_type(t, DataType::float32);
  expect_float32_scalar_close(ops::mse_forward(p32, t32, normalizer), ops::mse_forward(p, t, normalizer), 1, 1,
                              "mse_forward");
  Tensor d64 = nans("f32_mse.d", shape);
  ops::mse_backward(p, t, normalizer, d64);
  Tensor d32 = nans("f32_mse.d32", shape, DataType::float32);
  ops::mse_backward(p32, t32, normalizer, d32);
  expect_float32_close(d32, d64, 3, 1, "mse_backward");
}

TEST(OpsFloat32, Dropout) {
  // The rounded scale 1 / (1 - p) and one product per element: n = 2, stages = 1. The mask is
  // the same in both types (it depends on the key only).
  const Shape shape{32, 32};
  const double p = 0.3;
  const ops::DropoutKey key{3, 9};
  const Tensor x = random_tensor("f32_dropout.x", shape);
  Tensor y64 = nans("f32_dropout.y", shape);
  ops::dropout_forward(x, p, key, y64);
  Tensor y32 = nans("f32_dropout.y32", shape, DataType::float32);
  ops::dropout_forward(to_type(x, DataType::float32), p, key, y32);
  expect_float32_close(y32, y64, 2, 1, "dropout_forward");
  Tensor dx64 = nans("f32_dropout.dx", shape);
  ops::dropout_backward(x, p, key, dx64);
  Tensor dx32 = nans("f32_dropout.dx32", shape, DataType::float32);
  ops::dropout_backward(to_type(x, DataType::float32), p, key, dx32);
  expect_float32_close(dx32, dx64, 2, 1, "dropout_backward");
}

// ---------------------------------------------------------------------------------------------
// 16-bit storage (float16, bfloat16): matmul widens to float32 and rounds the result once; gelu
// computes in float32 per element. Bound: tolerance::half_storage_op_relative_bound.
TEST(OpsHalf, Matmul) {
  const std::int64_t m = 12, k = 48, n = 10;
  for (DataType type : {DataType::bfloat16, DataType::float16}) {
    for (bool accumulate : {false, true}) {
      SCOPED_TRACE(std::string(name_of(type)) + (accumulate ? " accumulate" : ""));
      const Tensor a = random_tensor("half_matmul.a", {m, k});
      const Tensor b = random_tensor("half_matmul.b", {k, n});
      // With accumulate, c starts at a value exact in both 16-bit types (small multiples of 1/4),
      // so the float64 reference adds the same start.
      Tensor c64 = zeros("half_matmul.c", {m, n});
      for (std::int64_t i = 0; i < c64.numel(); ++i) c64.set(i, accumulate ? 0.25 * static_cast<double>(i % 7) : 0.0);
      Tensor c16 = to_type(c64, type);
      ops::matmul(a, false, b, false, c64, accumulate);
      ops::matmul(to_type(a, type), false, to_type(b, type), false, c16, accumulate);
      ASSERT_EQ(c16.dtype(), type);
      const double bound = tolerance::half_storage_op_relative_bound(type, 2, static_cast<int>(k), 1);
      expect_close(c16, c64, bound, "matmul in " + std::string(name_of(type)) + " against float64");
    }
  }
}

TEST(OpsHalf, Gelu) {
  // n as in OpsFloat32.Gelu; one rounded input (x; for backward also dy).
  const Shape shape{16, 32};
  const Tensor x = random_tensor("half_gelu.x", shape, 0, 2);
  const Tensor dy = random_tensor("half_gelu.dy", shape);
  Tensor y64 = nans("half_gelu.y", shape);
  ops::gelu_forward(x, y64);
  Tensor dx64 = nans("half_gelu.dx", shape);
  ops::gelu_backward(dy, x, dx64);
  for (DataType type : {DataType::bfloat16, DataType::float16}) {
    SCOPED_TRACE(std::string(name_of(type)));
    Tensor y16 = nans("half_gelu.y16", shape, type);
    ops::gelu_forward(to_type(x, type), y16);
    expect_close(y16, y64, tolerance::half_storage_op_relative_bound(type, 1, 12, 1), "gelu_forward in " + std::string(name_of(type)));
    Tensor dx16 = nans("half_gelu.dx16", shape, type);
    ops::gelu_backward(to_type(dy, type), to_type(x, type), dx16);
    expect_close(dx16, dx64, tolerance::half_storage_op_relative_bound(type, 2, 21, 1), "gelu_backward in " + std::string(name_of(type)));
  }
}

// Attention on 16-bit storage is defined as the float32 attention of the widened 16-bit inputs,
// each result rounded to 16 bits once: equal to that bit for bit, on CPU here and on a GPU in
// the CUDA op tests (the float32 attention itself is checked against float64 above). Backward
// reads the probabilities as they were stored, rounded.
TEST(OpsHalf, AttentionIsFloat32AttentionRoundedOnce) {
  const std::int64_t B = 2, T = 8, C = 16;
  const int heads = 2;
  const auto same_bits = [](const Tensor& got, const Tensor& want, const std::string& what) {
    ASSERT_EQ(got.dtype(), want.dtype()) << what;
    const std::vector<double> g = got.to_vector(), w = want.to_vector();
    std::int64_t differing = 0;
    for (std::size_t i = 0; i < g.size(); ++i) differing += std::memcmp(&g[i], &w[i], sizeof(double)) != 0;
    EXPECT_EQ(differing, 0) << what << ": " << differing << " of " << g.size() << " elements differ";
  };
  for (DataType type : {DataType::bfloat16, DataType::float16}) {
    for (bool causal : {false, true}) {
      SCOPED_TRACE(std::string(name_of(type)) + (causal ? " causal" : ""));
      const Tensor qkv = to_type(random_tensor("half_attention.qkv", {B, T, 3 * C}), type);
      const Tensor dout = to_type(random_tensor("half_attention.dout", {B, T, C}), type);
      Tensor out = nans("half_attention.out", {B, T, C}, type), probs = nans("half_attention.probs", {B, heads, T, T}, type);
      ops::attention_forward(qkv, heads, causal, out, probs);
      Tensor out32 = nans("half_attention.out32", {B, T, C}, DataType::float32);
      Tensor probs32 = nans("half_attention.probs32", {B, heads, T, T}, DataType::float32);
      ops::attention_forward(to_type(qkv, DataType::float32), heads, causal, out32, probs32);
      same_bits(out, to_type(out32, type), "attention_forward out");
      same_bits(probs, to_type(probs32, type), "attention_forward probs");

      Tensor dqkv = nans("half_attention.dqkv", qkv.shape(), type);
      ops::attention_backward(dout, qkv, probs, heads, dqkv);
      Tensor dqkv32 = nans("half_attention.dqkv32", qkv.shape(), DataType::float32);
      ops::attention_backward(to_type(dout, DataType::float32), to_type(qkv, DataType::float32),
                              to_type(probs, DataType::float32), heads, dqkv32);
      same_bits(dqkv, to_type(dqkv32, type), "attention_backward dqkv");
    }
  }
}

TEST(OpsBadInput, AttentionInHalfPrecisionChecksItsTensors) {
  const Tensor qkv = zeros("qkv", {1, 2, 6}, DataType::bfloat16);
  Tensor out = zeros("out", {1, 2, 2}, DataType::float32), probs = zeros("probs", {1, 1, 2, 2}, DataType::bfloat16);
  expect_refused([&] { ops::attention_forward(qkv, 1, false, out, probs); },
                 {"attention_forward", "qkv [1, 2, 6] bfloat16", "out [1, 2, 2] float32", "different data types"});
  const Tensor dout = zeros("dout", {1, 2, 2}, DataType::bfloat16);
  Tensor dqkv = zeros("dqkv", {1, 2, 6}, DataType::float16);
  expect_refused([&] { ops::attention_backward(dout, qkv, probs, 1, dqkv); },
                 {"attention_backward", "qkv [1, 2, 6] bfloat16", "dqkv [1, 2, 6] float16", "different data types"});
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

// ---------------------------------------------------------------------------------------------
// Bad input: refused with a parity::Error naming the tensors and their shapes.

TEST(OpsBadInput, ShapeMismatches) {
  const Tensor a = zeros("a", {4, 8}), b = zeros("b", {6, 3});
  Tensor c = zeros("c", {4, 3});
  expect_refused([&] { ops::matmul(a, false, b, false, c, false); },
                 {"matmul", "a [4, 8]", "b [6, 3]", "inner dimensions 8 and 6"});
  expect_refused([&] { ops::matmul(a, true, b, false, c, false); }, {"a [4, 8] float64 (transposed)", "b [6, 3]"});
  const Tensor b_ok = zeros("b", {8, 3});
  Tensor c_wrong = zeros("c", {3, 3});
  expect_refused([&] { ops::matmul(a, false, b_ok, false, c_wrong, false); }, {"c [3, 3]", "[4, 3]"});
  const Tensor a3 = zeros("a3", {2, 4, 8});
  expect_refused([&] { ops::matmul(a3, false, b_ok, false, c, false); }, {"a3 [2, 4, 8]", "2-D"});

  // linear: the weight's input size must match the input's last dimension.
  const Tensor x = zeros("x", {4, 8}), w = zeros("w", {6, 3}), no_bias;
  Tensor y = zeros("y", {4, 3});
  expect_refused([&] { ops::linear_forward(x, w, no_bias, y); }, {"linear_forward", "x [4, 8]", "w [6, 3]"});
  const Tensor w_ok = zeros("w", {8, 3}), bias_wrong = zeros("bias", {4});
  expect_refused([&] { ops::linear_forward(x, w_ok, bias_wrong, y); }, {"bias [4]", "[3]"});
  Tensor y_wrong = zeros("y", {4, 5});
  expect_refused([&] { ops::linear_forward(x, w_ok, no_bias, y_wrong); }, {"y [4, 5]", "[4, 3]"});
  const Tensor dy_wrong = zeros("dy", {4, 5});
  Tensor dx = zeros("dx", {4, 8}), dw = zeros("dw", {8, 3}), dbias = zeros("dbias", {3});
  expect_refused([&] { ops::linear_backward(dy_wrong, x, w_ok, dx, dw, dbias); },
                 {"linear_backward", "dy [4, 5]", "x [4, 8]", "w [8, 3]"});

  // layernorm: gamma and beta must have C entries.
  const Tensor gamma_wrong = zeros("gamma", {5}), beta = zeros("beta", {8});
  Tensor ln_y = zeros("y", {4, 8}), mean = zeros("mean", {4}), rstd = zeros("rstd", {4});
  expect_refused([&] { ops::layernorm_forward(x, gamma_wrong, beta, ln_y, mean, rstd); },
                 {"layernorm_forward", "gamma [5]", "[8]"});
  const Tensor gamma = zeros("gamma", {8});
  Tensor mean_wrong = zeros("mean", {3});
  expect_refused([&] { ops::layernorm_forward(x, gamma, beta, ln_y, mean_wrong, rstd); }, {"mean [3]", "[4]"});

  // Elementwise ops: operands of different shapes.
  const Tensor other = zeros("other", {8, 4});
  Tensor sum = zeros("sum", {4, 8});
  expect_refused([&] { ops::add_forward(x, other, sum); }, {"add_forward", "x [4, 8]", "other [8, 4]"});
  Tensor gelu_y = zeros("gelu_y", {4, 7});
  expect_refused([&] { ops::gelu_forward(x, gelu_y); }, {"gelu_forward", "x [4, 8]", "gelu_y [4, 7]"});
  const Tensor mse_target = zeros("target", {4, 7});
  expect_refused([&] { ops::mse_forward(x, mse_target, 1); }, {"mse_forward", "x [4, 8]", "target [4, 7]"});

  // attention: the output must be [B, T, C] and qkv [B, T, 3C].
  const Tensor qkv = zeros("qkv", {2, 4, 24});
  Tensor out_wrong = zeros("out", {2, 4, 24}), probs = zeros("probs", {2, 2, 4, 4});
  expect_refused([&] { ops::attention_forward(qkv, 2, false, out_wrong, probs); }, {"out [2, 4, 24]", "[2, 4, 8]"});
  const Tensor qkv_bad = zeros("qkv", {2, 4, 10});
  Tensor out = zeros("out", {2, 4, 8});
  expect_refused([&] { ops::attention_forward(qkv_bad, 2, false, out, probs); }, {"qkv [2, 4, 10]", "[B, T, 3C]"});

  // embedding: the position table must cover T.
  const Tensor tokens = zeros("tokens", {2, 5}, DataType::int32);
  const Tensor wte = zeros("wte", {10, 4}), wpe_short = zeros("wpe", {3, 4});
  Tensor emb = zeros("emb", {2, 5, 4});
  expect_refused([&] { ops::embedding_forward(tokens, wte, wpe_short, emb); }, {"wpe [3, 4]", "5"});

  // cross-entropy: one target per row.
  const Tensor logits = zeros("logits", {3, 5});
  const Tensor targets_wrong = zeros("targets", {4}, DataType::int32);
  expect_refused([&] { ops::cross_entropy_forward(logits, targets_wrong, 3); }, {"logits [3, 5]", "targets [4]"});
}

TEST(OpsBadInput, MixedFloat32AndFloat64) {
  const Tensor a32 = zeros("a", {4, 8}, DataType::float32), b64 = zeros("b", {8, 3});
  Tensor c64 = zeros("c", {4, 3});
  expect_refused([&] { ops::matmul(a32, false, b64, false, c64, false); },
                 {"matmul", "a [4, 8] float32", "b [8, 3] float64", "different data types"});
  const Tensor b32 = zeros("b", {8, 3}, DataType::float32);
  expect_refused([&] { ops::matmul(a32, false, b32, false, c64, false); },
                 {"c [4, 3] float64", "different data types"});

  const Tensor x64 = zeros("x", {4, 8}), w32 = zeros("w", {8, 3}, DataType::float32), no_bias;
  Tensor y64 = zeros("y", {4, 3});
  expect_refused([&] { ops::linear_forward(x64, w32, no_bias, y64); },
                 {"x [4, 8] float64", "w [8, 3] float32", "different data types"});

  const Tensor other32 = zeros("other", {4, 8}, DataType::float32);
  Tensor sum = zeros("sum", {4, 8});
  expect_refused([&] { ops::add_forward(x64, other32, sum); },
                 {"add_forward", "x [4, 8] float64", "other [4, 8] float32", "different data types"});
  Tensor gelu_y32 = zeros("gelu_y", {4, 8}, DataType::float32);
  expect_refused([&] { ops::gelu_forward(x64, gelu_y32); }, {"x [4, 8] float64", "gelu_y [4, 8] float32"});

  const Tensor gamma32 = zeros("gamma", {8}, DataType::float32), beta64 = zeros("beta", {8});
  Tensor ln_y = zeros("ln_y", {4, 8}), mean = zeros("mean", {4}), rstd = zeros("rstd", {4});
  expect_refused([&] { ops::layernorm_forward(x64, gamma32, beta64, ln_y, mean, rstd); },
                 {"x [4, 8] float64", "gamma [8] float32", "different data types"});
  // float32 x keeps float32 statistics: float64 mean is refused.
  const Tensor x32 = zeros("x", {4, 8}, DataType::float32), g32 = zeros("g", {8}, DataType::float32);
  const Tensor beta32 = zeros("beta", {8}, DataType::float32);
  Tensor ln_y32 = zeros("ln_y", {4, 8}, DataType::float32);
  expect_refused([&] { ops::layernorm_forward(x32, g32, beta32, ln_y32, mean, rstd); }, {"statistics mean [4] float64", "must be float32"});

  const Tensor qkv64 = zeros("qkv", {2, 4, 24});
  Tensor out32 = zeros("out", {2, 4, 8}, DataType::float32), probs64 = zeros("probs", {2, 2, 4, 4});
  expect_refused([&] { ops::attention_forward(qkv64, 2, false, out32, probs64); },
                 {"qkv [2, 4, 24] float64", "out [2, 4, 8] float32"});

  const Tensor tokens = zeros("tokens", {2, 3}, DataType::int32);
  const Tensor wte64 = zeros("wte", {5, 4}), wpe32 = zeros("wpe", {3, 4}, DataType::float32);
  Tensor emb = zeros("emb", {2, 3, 4});
  expect_refused([&] { ops::embedding_forward(tokens, wte64, wpe32, emb); },
                 {"wte [5, 4] float64", "wpe [3, 4] float32"});

  const Tensor target32 = zeros("target", {4, 8}, DataType::float32);
  expect_refused([&] { ops::mse_forward(x64, target32, 1); }, {"x [4, 8] float64", "target [4, 8] float32"});
}

TEST(OpsBadInput, LinearWithBiasAndMixedTypes) {
  // With a bias of the weight's type, the input/weight (or output/weight) mismatch must still
  // be what is reported, not the bias, which matches the weight.
  const Tensor x64 = zeros("x", {4, 8}), w32 = zeros("w", {8, 3}, DataType::float32);
  Tensor y64 = zeros("y", {4, 3});
  const Tensor bias32 = zeros("bias", {3}, DataType::float32);
  expect_refused([&] { ops::linear_forward(x64, w32, bias32, y64); },
                 {"linear_forward", "x [4, 8] float64", "w [8, 3] float32"});
  const Tensor x32 = zeros("x", {4, 8}, DataType::float32);
  expect_refused([&] { ops::linear_forward(x32, w32, bias32, y64); }, {"linear_forward", "y [4, 3] float64"});
  // Checks come first (cpu.hpp): a refused call leaves its output as it was.
  Tensor bias_ones = zeros("bias", {3}, DataType::float32);
  bias_ones.fill(1.0);
  Tensor y32 = zeros("y", {4, 3}, DataType::float32);
  expect_refused([&] { ops::linear_forward(x64, w32, bias_ones, y32); }, {"x [4, 8] float64", "w [8, 3] float32"});
  for (std::int64_t i = 0; i < y32.numel(); ++i)
    ASSERT_EQ(y32.at(i), 0.0) << "linear_forward wrote y at " << index_string(y32.shape(), i) << " before refusing";
}

TEST(OpsBadInput, MatmulOutputSharingAnInput) {
  // BLAS reads a and b while it writes c: an aliased output is refused, naming the tensors.
  Tensor a = random_tensor("a", {4, 4});
  const Tensor b = random_tensor("b", {4, 4});
  expect_refused([&] { ops::matmul(a, false, b, false, a, false); }, {"matmul", "a [4, 4] float64", "shares storage"});
}

TEST(OpsBadInput, IntegerTensorsToFloatingOps) {
  const Tensor i32 = zeros("ids", {2, 3}, DataType::int32), i64 = zeros("ids", {2, 3}, DataType::int64);
  Tensor y32 = zeros("y", {2, 3}, DataType::int32);
  expect_refused([&] { ops::gelu_forward(i32, y32); }, {"gelu_forward", "ids [2, 3] int32", "floating"});
  Tensor y64 = zeros("y", {2, 3}, DataType::int64);
  expect_refused([&] { ops::softmax_forward(i64, y64); }, {"softmax_forward", "ids [2, 3] int64", "floating"});
  expect_refused([&] { ops::add_forward(i32, i32, y32); }, {"add_forward", "ids [2, 3] int32", "floating"});
  expect_refused([&] { ops::dropout_forward(i32, 0.5, {1, 1}, y32); }, {"dropout_forward", "ids [2, 3] int32"});
  expect_refused([&] { ops::mse_forward(i32, i32, 1); }, {"mse_forward", "ids [2, 3] int32"});
  const Tensor b = zeros("b", {3, 2}, DataType::int32);
  Tensor c = zeros("c", {2, 2}, DataType::int32);
  expect_refused([&] { ops::matmul(i32, false, b, false, c, false); }, {"matmul", "ids [2, 3] int32", "floating"});
  const Tensor gamma = zeros("gamma", {3}, DataType::int32);
  Tensor mean = zeros("mean", {2}, DataType::float32), rstd = zeros("rstd", {2}, DataType::float32);
  expect_refused([&] { ops::layernorm_forward(i32, gamma, gamma, y32, mean, rstd); },
                 {"layernorm_forward", "ids [2, 3] int32"});
  const Tensor targets = zeros("targets", {2}, DataType::int32);
  expect_refused([&] { ops::cross_entropy_forward(i32, targets, 2); },
                 {"cross_entropy_forward", "ids [2, 3] int32", "floating"});
  const Tensor qkv = zeros("qkv", {1, 2, 6}, DataType::int32);
  Tensor out = zeros("out", {1, 2, 2}, DataType::int32), probs = zeros("probs", {1, 1, 2, 2}, DataType::int32);
  expect_refused([&] { ops::attention_forward(qkv, 1, false, out, probs); }, {"qkv [1, 2, 6] int32"});
  // And the reverse: indices must be integers.
  const Tensor float_tokens = zeros("tokens", {2, 3}), wte = zeros("wte", {4, 2}), no_wpe;
  Tensor emb = zeros("emb", {2, 3, 2});
  expect_refused([&] { ops::embedding_forward(float_tokens, wte, no_wpe, emb); },
                 {"tokens [2, 3] float64", "int32 or int64"});
  const Tensor logits = zeros("logits", {2, 4}), float_targets = zeros("targets", {2});
  expect_refused([&] { ops::cross_entropy_forward(logits, float_targets, 2); },
                 {"targets [2] float64", "int32 or int64"});
}

TEST(OpsBadInput, AttentionHeadsMustDivideHidden) {
  const Tensor qkv = zeros("qkv", {2, 4, 24});  // C = 8
  Tensor out = zeros("out", {2, 4, 8}), probs = zeros("probs", {2, 3, 4, 4});
  expect_refused([&] { ops::attention_forward(qkv, 3, false, out, probs); },
                 {"attention_forward", "3 heads", "hidden size 8", "qkv [2, 4, 24]"});
  expect_refused([&] { ops::attention_forward(qkv, 0, false, out, probs); }, {"0 heads", "qkv [2, 4, 24]"});
  const Tensor dout = zeros("dout", {2, 4, 8});
  Tensor dqkv = zeros("dqkv", {2, 4, 24});
  expect_refused([&] { ops::attention_backward(dout, qkv, probs, 3, dqkv); },
                 {"attention_backward", "3 heads", "qkv [2, 4, 24]"});
}

TEST(OpsBadInput, TokenOutsideVocabulary) {
  Tensor tokens = zeros("tokens", {2, 3}, DataType::int32);
  const Tensor wte = zeros("wte", {10, 4}), wpe = zeros("wpe", {3, 4});
  Tensor y = zeros("y", {2, 3, 4});
  tokens.set(4, 10);
  expect_refused([&] { ops::embedding_forward(tokens, wte, wpe, y); },
                 {"embedding_forward", "token 10", "position 4", "tokens [2, 3]", "wte [10, 4]"});
  tokens.set(4, -1);
  expect_refused([&] { ops::embedding_forward(tokens, wte, wpe, y); }, {"token -1", "wte [10, 4]"});
  Tensor dwte = zeros("dwte", {10, 4}), dwpe = zeros("dwpe", {3, 4});
  expect_refused([&] { ops::embedding_backward(y, tokens, dwte, dwpe); },
                 {"embedding_backward", "token -1", "dwte [10, 4]"});
}

TEST(OpsBadInput, TargetOutsideClasses) {
  const Tensor logits = zeros("logits", {3, 5});
  Tensor targets = zeros("targets", {3}, DataType::int64);
  targets.set(1, 5);
  expect_refused([&] { ops::cross_entropy_forward(logits, targets, 3); },
                 {"cross_entropy_forward", "target 5", "row 1", "5 classes", "logits [3, 5]"});
  Tensor dlogits = zeros("dlogits", {3, 5});
  targets.set(1, -2);
  expect_refused([&] { ops::cross_entropy_backward(logits, targets, 3, dlogits); },
                 {"cross_entropy_backward", "target -2", "logits [3, 5]"});
}

TEST(OpsBadInput, OutOfRangeParameters) {
  const Tensor x = zeros("x", {2, 3});
  Tensor y = zeros("y", {2, 3});
  expect_refused([&] { ops::dropout_forward(x, 1.0, {1, 1}, y); }, {"dropout_forward", "probability", "[0, 1)"});
  expect_refused([&] { ops::dropout_backward(x, -0.1, {1, 1}, y); }, {"dropout_backward", "probability"});
  expect_refused([&] { ops::mse_forward(x, x, 0); }, {"mse_forward", "normalizer"});
  const Tensor targets = zeros("targets", {2}, DataType::int32);
  expect_refused([&] { ops::cross_entropy_forward(x, targets, -1); }, {"cross_entropy_forward", "normalizer"});
}
