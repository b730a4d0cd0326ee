// Bad calls of the ops, refused with a parity::Error that names the op, the tensors and their
// shapes and types, so a user can tell which tensor was wrong without a debugger: one row per
// call, with the words its message must contain. The same check runs before either device's
// body (reference/ops/units/), so these rows hold on both; they run on the host.
#include <gtest/gtest.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <vector>

#include "correctness/op_testing.hpp"
#include "reference/ops/ops.hpp"
#include "reference/tensor/tensor.hpp"

using namespace parity;
using namespace parity::op_testing;

namespace {

struct Refusal {
  std::string what;  // the fault, in words
  std::function<void()> call;
  std::vector<std::string> words;  // what the message must name
};

constexpr DataType kF32 = DataType::float32, kBF16 = DataType::bfloat16, kI32 = DataType::int32,
                   kI64 = DataType::int64;

// An output argument (zeros), kept alive for the rest of the run: the ops take outputs by
// non-const reference, and a row's call is one expression.
Tensor& output(const std::string& name, Shape shape, DataType dtype = DataType::float64) {
  static std::deque<Tensor> kept;
  return kept.emplace_back(zeros(name, std::move(shape), dtype));
}

// Tokens [2, 3] (int32) with `id` at position 4; targets [3] (int64) with `id` at row 1.
Tensor tokens_with(std::int64_t id) {
  Tensor tokens = zeros("tokens", {2, 3}, kI32);
  tokens.set(4, id);
  return tokens;
}
Tensor targets_with(std::int64_t id) {
  Tensor targets = zeros("targets", {3}, kI64);
  targets.set(1, id);
  return targets;
}

const std::vector<Refusal>& refusals() {
  static const std::vector<Refusal> table = {
      // Shapes that do not fit.
      {"matmul, inner dimensions",
       [] { ops::matmul(zeros("a", {4, 8}), false, zeros("b", {6, 3}), false, output("c", {4, 3}), false); },
       {"matmul", "a [4, 8]", "b [6, 3]", "inner dimensions 8 and 6"}},
      {"matmul, a transposed",
       [] { ops::matmul(zeros("a", {4, 8}), true, zeros("b", {6, 3}), false, output("c", {4, 3}), false); },
       {"a [4, 8] float64 (transposed)", "b [6, 3]"}},
      {"matmul, output shape",
       [] { ops::matmul(zeros("a", {4, 8}), false, zeros("b", {8, 3}), false, output("c", {3, 3}), false); },
       {"c [3, 3]", "[4, 3]"}},
      {"matmul, 3-D operand",
       [] { ops::matmul(zeros("a3", {2, 4, 8}), false, zeros("b", {8, 3}), false, output("c", {4, 3}), false); },
       {"a3 [2, 4, 8]", "2-D"}},
      {"linear, weight input size",
       [] { ops::linear_forward(zeros("x", {4, 8}), zeros("w", {6, 3}), Tensor(), output("y", {4, 3})); },
       {"linear_forward", "x [4, 8]", "w [6, 3]"}},
      {"linear, bias size",
       [] { ops::linear_forward(zeros("x", {4, 8}), zeros("w", {8, 3}), zeros("bias", {4}), output("y", {4, 3})); },
       {"bias [4]", "[3]"}},
      {"linear, output shape",
       [] { ops::linear_forward(zeros("x", {4, 8}), zeros("w", {8, 3}), Tensor(), output("y", {4, 5})); },
       {"y [4, 5]", "[4, 3]"}},
      {"linear backward, gradient shape",
       [] {
         ops::linear_backward(zeros("dy", {4, 5}), zeros("x", {4, 8}), zeros("w", {8, 3}), output("dx", {4, 8}),
                              output("dw", {8, 3}), output("dbias", {3}));
       },
       {"linear_backward", "dy [4, 5]", "x [4, 8]", "w [8, 3]"}},
      {"layernorm, gamma size",
       [] {
         ops::layernorm_forward(zeros("x", {4, 8}), zeros("gamma", {5}), zeros("beta", {8}), output("y", {4, 8}),
                                output("mean", {4}), output("rstd", {4}));
       },
       {"layernorm_forward", "gamma [5]", "[8]"}},
      {"layernorm, statistics size",
       [] {
         ops::layernorm_forward(zeros("x", {4, 8}), zeros("gamma", {8}), zeros("beta", {8}), output("y", {4, 8}),
                                output("mean", {3}), output("rstd", {4}));
       },
       {"mean [3]", "[4]"}},
      {"add, operand shapes",
       [] { ops::add_forward(zeros("x", {4, 8}), zeros("other", {8, 4}), output("sum", {4, 8})); },
       {"add_forward", "x [4, 8]", "other [8, 4]"}},
      {"gelu, output shape", [] { ops::gelu_forward(zeros("x", {4, 8}), output("gelu_y", {4, 7})); },
       {"gelu_forward", "x [4, 8]", "gelu_y [4, 7]"}},
      {"mse, target shape", [] { ops::mse_forward(zeros("x", {4, 8}), zeros("target", {4, 7}), 1); },
       {"mse_forward", "x [4, 8]", "target [4, 7]"}},
      {"attention, output shape",
       [] {
         ops::attention_forward(zeros("qkv", {2, 4, 24}), 2, false, output("out", {2, 4, 24}),
                                output("probs", {2, 2, 4, 4}));
       },
       {"out [2, 4, 24]", "[2, 4, 8]"}},
      {"attention, qkv not 3C",
       [] {
         ops::attention_forward(zeros("qkv", {2, 4, 10}), 2, false, output("out", {2, 4, 8}),
                                output("probs", {2, 2, 4, 4}));
       },
       {"qkv [2, 4, 10]", "[B, T, 3C]"}},
      {"embedding, position table shorter than T",
       [] {
         ops::embedding_forward(zeros("tokens", {2, 5}, kI32), zeros("wte", {10, 4}), zeros("wpe", {3, 4}),
                                output("emb", {2, 5, 4}));
       },
       {"wpe [3, 4]", "5"}},
      {"cross-entropy, one target per row",
       [] { ops::cross_entropy_forward(zeros("logits", {3, 5}), zeros("targets", {4}, kI32), 3); },
       {"logits [3, 5]", "targets [4]"}},
      // float32 and float64 mixed.
      {"matmul, mixed operands",
       [] { ops::matmul(zeros("a", {4, 8}, kF32), false, zeros("b", {8, 3}), false, output("c", {4, 3}), false); },
       {"matmul", "a [4, 8] float32", "b [8, 3] float64", "different data types"}},
      {"matmul, mixed output",
       [] {
         ops::matmul(zeros("a", {4, 8}, kF32), false, zeros("b", {8, 3}, kF32), false, output("c", {4, 3}), false);
       },
       {"c [4, 3] float64", "different data types"}},
      {"linear, mixed",
       [] { ops::linear_forward(zeros("x", {4, 8}), zeros("w", {8, 3}, kF32), Tensor(), output("y", {4, 3})); },
       {"x [4, 8] float64", "w [8, 3] float32", "different data types"}},
      {"add, mixed", [] { ops::add_forward(zeros("x", {4, 8}), zeros("other", {4, 8}, kF32), output("sum", {4, 8})); },
       {"add_forward", "x [4, 8] float64", "other [4, 8] float32", "different data types"}},
      {"gelu, mixed", [] { ops::gelu_forward(zeros("x", {4, 8}), output("gelu_y", {4, 8}, kF32)); },
       {"x [4, 8] float64", "gelu_y [4, 8] float32"}},
      {"layernorm, mixed",
       [] {
         ops::layernorm_forward(zeros("x", {4, 8}), zeros("gamma", {8}, kF32), zeros("beta", {8}),
                                output("ln_y", {4, 8}), output("mean", {4}), output("rstd", {4}));
       },
       {"x [4, 8] float64", "gamma [8] float32", "different data types"}},
      {"layernorm, float64 statistics of float32 x",
       [] {
         ops::layernorm_forward(zeros("x", {4, 8}, kF32), zeros("g", {8}, kF32), zeros("beta", {8}, kF32),
                                output("ln_y", {4, 8}, kF32), output("mean", {4}), output("rstd", {4}));
       },
       {"statistics mean [4] float64", "must be float32"}},
      {"attention, mixed",
       [] {
         ops::attention_forward(zeros("qkv", {2, 4, 24}), 2, false, output("out", {2, 4, 8}, kF32),
                                output("probs", {2, 2, 4, 4}));
       },
       {"qkv [2, 4, 24] float64", "out [2, 4, 8] float32"}},
      {"embedding, mixed tables",
       [] {
         ops::embedding_forward(zeros("tokens", {2, 3}, kI32), zeros("wte", {5, 4}), zeros("wpe", {3, 4}, kF32),
                                output("emb", {2, 3, 4}));
       },
       {"wte [5, 4] float64", "wpe [3, 4] float32"}},
      {"mse, mixed", [] { ops::mse_forward(zeros("x", {4, 8}), zeros("target", {4, 8}, kF32), 1); },
       {"x [4, 8] float64", "target [4, 8] float32"}},
      // BLAS reads a and b while it writes c.
      {"matmul, output sharing an input",
       [] {
         Tensor a = random_tensor("a", {4, 4});
         ops::matmul(a, false, random_tensor("b", {4, 4}), false, a, false);
       },
       {"matmul", "a [4, 4] float64", "shares storage"}},
      // Integer tensors to floating ops, and floating tensors as indices.
      {"gelu, int32", [] { ops::gelu_forward(zeros("ids", {2, 3}, kI32), output("y", {2, 3}, kI32)); },
       {"gelu_forward", "ids [2, 3] int32", "floating"}},
      {"softmax, int64", [] { ops::softmax_forward(zeros("ids", {2, 3}, kI64), output("y", {2, 3}, kI64)); },
       {"softmax_forward", "ids [2, 3] int64", "floating"}},
      {"add, int32",
       [] { ops::add_forward(zeros("ids", {2, 3}, kI32), zeros("ids", {2, 3}, kI32), output("y", {2, 3}, kI32)); },
       {"add_forward", "ids [2, 3] int32", "floating"}},
      {"dropout, int32",
       [] { ops::dropout_forward(zeros("ids", {2, 3}, kI32), 0.5, {1, 1}, output("y", {2, 3}, kI32)); },
       {"dropout_forward", "ids [2, 3] int32"}},
      {"mse, int32", [] { ops::mse_forward(zeros("ids", {2, 3}, kI32), zeros("ids", {2, 3}, kI32), 1); },
       {"mse_forward", "ids [2, 3] int32"}},
      {"matmul, int32",
       [] {
         ops::matmul(zeros("ids", {2, 3}, kI32), false, zeros("b", {3, 2}, kI32), false, output("c", {2, 2}, kI32),
                     false);
       },
       {"matmul", "ids [2, 3] int32", "floating"}},
      {"layernorm, int32",
       [] {
         ops::layernorm_forward(zeros("ids", {2, 3}, kI32), zeros("gamma", {3}, kI32), zeros("gamma", {3}, kI32),
                                output("y", {2, 3}, kI32), output("mean", {2}, kF32), output("rstd", {2}, kF32));
       },
       {"layernorm_forward", "ids [2, 3] int32"}},
      {"cross-entropy, int32 logits",
       [] { ops::cross_entropy_forward(zeros("ids", {2, 3}, kI32), zeros("targets", {2}, kI32), 2); },
       {"cross_entropy_forward", "ids [2, 3] int32", "floating"}},
      {"attention, int32",
       [] {
         ops::attention_forward(zeros("qkv", {1, 2, 6}, kI32), 1, false, output("out", {1, 2, 2}, kI32),
                                output("probs", {1, 1, 2, 2}, kI32));
       },
       {"qkv [1, 2, 6] int32"}},
      {"embedding, float64 tokens",
       [] {
         ops::embedding_forward(zeros("tokens", {2, 3}), zeros("wte", {4, 2}), Tensor(), output("emb", {2, 3, 2}));
       },
       {"tokens [2, 3] float64", "int32 or int64"}},
      {"cross-entropy, float64 targets",
       [] { ops::cross_entropy_forward(zeros("logits", {2, 4}), zeros("targets", {2}), 2); },
       {"targets [2] float64", "int32 or int64"}},
      // Heads that do not divide the hidden size.
      {"attention, 3 heads of 8",
       [] {
         ops::attention_forward(zeros("qkv", {2, 4, 24}), 3, false, output("out", {2, 4, 8}),
                                output("probs", {2, 3, 4, 4}));
       },
       {"attention_forward", "3 heads", "hidden size 8", "qkv [2, 4, 24]"}},
      {"attention, 0 heads",
       [] {
         ops::attention_forward(zeros("qkv", {2, 4, 24}), 0, false, output("out", {2, 4, 8}),
                                output("probs", {2, 3, 4, 4}));
       },
       {"0 heads", "qkv [2, 4, 24]"}},
      {"attention backward, 3 heads of 8",
       [] {
         ops::attention_backward(zeros("dout", {2, 4, 8}), zeros("qkv", {2, 4, 24}), zeros("probs", {2, 3, 4, 4}), 3,
                                 output("dqkv", {2, 4, 24}));
       },
       {"attention_backward", "3 heads", "qkv [2, 4, 24]"}},
      // Indices outside the vocabulary or the classes.
      {"embedding, token 10 of 10",
       [] {
         ops::embedding_forward(tokens_with(10), zeros("wte", {10, 4}), zeros("wpe", {3, 4}), output("y", {2, 3, 4}));
       },
       {"embedding_forward", "token 10", "position 4", "tokens [2, 3]", "wte [10, 4]"}},
      {"embedding, token -1",
       [] {
         ops::embedding_forward(tokens_with(-1), zeros("wte", {10, 4}), zeros("wpe", {3, 4}), output("y", {2, 3, 4}));
       },
       {"token -1", "wte [10, 4]"}},
      {"embedding backward, token -1",
       [] {
         ops::embedding_backward(zeros("y", {2, 3, 4}), tokens_with(-1), output("dwte", {10, 4}),
                                 output("dwpe", {3, 4}));
       },
       {"embedding_backward", "token -1", "dwte [10, 4]"}},
      {"cross-entropy, target 5 of 5", [] { ops::cross_entropy_forward(zeros("logits", {3, 5}), targets_with(5), 3); },
       {"cross_entropy_forward", "target 5", "row 1", "5 classes", "logits [3, 5]"}},
      {"cross-entropy backward, target -2",
       [] { ops::cross_entropy_backward(zeros("logits", {3, 5}), targets_with(-2), 3, output("dlogits", {3, 5})); },
       {"cross_entropy_backward", "target -2", "logits [3, 5]"}},
      // Parameters out of range.
      {"dropout, p = 1", [] { ops::dropout_forward(zeros("x", {2, 3}), 1.0, {1, 1}, output("y", {2, 3})); },
       {"dropout_forward", "probability", "[0, 1)"}},
      {"dropout backward, p < 0", [] { ops::dropout_backward(zeros("x", {2, 3}), -0.1, {1, 1}, output("y", {2, 3})); },
       {"dropout_backward", "probability"}},
      {"mse, normalizer 0", [] { ops::mse_forward(zeros("x", {2, 3}), zeros("x", {2, 3}), 0); },
       {"mse_forward", "normalizer"}},
      {"cross-entropy, normalizer -1",
       [] { ops::cross_entropy_forward(zeros("x", {2, 3}), zeros("targets", {2}, kI32), -1); },
       {"cross_entropy_forward", "normalizer"}},
      // Vocabulary shards.
      {"embedding shard beyond the vocabulary",
       [] {
         ops::embedding_shard_forward(token_tensor("tokens", {2, 3}, 10), random_tensor("wte_shard", {4, 3}), 7, 10,
                                      output("y", {2, 3, 3}));
       },
       {"embedding_shard_forward", "wte_shard [4, 3]", "class 7", "vocabulary of 10"}},
      {"embedding shard, token beyond the vocabulary",
       [] {
         ops::embedding_shard_forward(token_tensor("tokens", {2, 3}, 10), random_tensor("wte_shard", {4, 3}), 0, 5,
                                      output("y", {2, 3, 3}));
       },
       {"token", "vocabulary of 5"}},
      {"cross-entropy shard, float32 maxima of float64 logits",
       [] { ops::cross_entropy_shard_max(random_tensor("logits", {3, 4}), output("m", {3}, kF32)); },
       {"statistics m [3] float32", "must be float64"}},
      {"cross-entropy shard, target beyond the vocabulary",
       [] {
         Tensor targets = token_tensor("targets", {3}, 10);
         targets.set(1, 12);
         ops::cross_entropy_shard_sums(random_tensor("logits", {3, 4}), targets, 0, 10, output("m", {3}),
                                       output("s", {3}), output("z", {3}));
       },
       {"cross_entropy_shard_sums", "target 12 at 1", "vocabulary of 10"}},
      // 16-bit attention checks its own tensors before widening them.
      {"attention in bfloat16, float32 output",
       [] {
         ops::attention_forward(zeros("qkv", {1, 2, 6}, kBF16), 1, false, output("out", {1, 2, 2}, kF32),
                                output("probs", {1, 1, 2, 2}, kBF16));
       },
       {"attention_forward", "qkv [1, 2, 6] bfloat16", "out [1, 2, 2] float32", "different data types"}},
      {"attention backward in bfloat16, float16 gradient",
       [] {
         ops::attention_backward(zeros("dout", {1, 2, 2}, kBF16), zeros("qkv", {1, 2, 6}, kBF16),
                                 zeros("probs", {1, 1, 2, 2}, kBF16), 1, output("dqkv", {1, 2, 6}, DataType::float16));
       },
       {"attention_backward", "qkv [1, 2, 6] bfloat16", "dqkv [1, 2, 6] float16", "different data types"}},
  };
  return table;
}

}  // namespace

TEST(OpRefusals, EveryRowIsRefusedNamingItsTensors) {
  for (const Refusal& r : refusals()) {
    SCOPED_TRACE(r.what);
    expect_refused(r.call, r.words);
  }
}

TEST(OpRefusals, LinearWithBiasAndMixedTypes) {
  // With a bias of the weight's type, the input/weight (or output/weight) mismatch must still
  // be what is reported, not the bias, which matches the weight.
  const Tensor x64 = zeros("x", {4, 8}), w32 = zeros("w", {8, 3}, kF32);
  Tensor y64 = zeros("y", {4, 3});
  const Tensor bias32 = zeros("bias", {3}, kF32);
  expect_refused([&] { ops::linear_forward(x64, w32, bias32, y64); },
                 {"linear_forward", "x [4, 8] float64", "w [8, 3] float32"});
  const Tensor x32 = zeros("x", {4, 8}, kF32);
  expect_refused([&] { ops::linear_forward(x32, w32, bias32, y64); }, {"linear_forward", "y [4, 3] float64"});
  // Checks come first (ops.hpp): a refused call leaves its output as it was.
  Tensor bias_ones = zeros("bias", {3}, kF32);
  bias_ones.fill(1.0);
  Tensor y32 = zeros("y", {4, 3}, kF32);
  expect_refused([&] { ops::linear_forward(x64, w32, bias_ones, y32); }, {"x [4, 8] float64", "w [8, 3] float32"});
  for (std::int64_t i = 0; i < y32.numel(); ++i)
    ASSERT_EQ(y32.at(i), 0.0) << "linear_forward wrote y at " << index_string(y32.shape(), i) << " before refusing";
}
