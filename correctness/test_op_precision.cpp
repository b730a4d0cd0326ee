// The ops in float32 and in 16-bit storage against the same ops in float64, as the rows of one
// table: the op, the storage type, the shapes, and for each output its bound from
// reference/core/tolerance.hpp with the reason (the count of roundings and reductions).
//
// A row runs the op forward and backward twice on the same float64 inputs (pure functions of
// their names): in float64 as drawn, and in the row's type after rounding them to it. float32
// rows: tolerance::float32_op_relative_bound(n, stages), n the op's longest reduction and stages
// its chained reductions (for element-wise ops n counts the rounded operations per element: a
// chain of n roundings without cancellation errs by at most gamma_n, Higham 3.1, covered with
// stages = 1); the bound includes one unit roundoff for rounding the inputs. 16-bit rows (the op
// computes in float32 and rounds each result once): tolerance::half_storage_op_relative_bound,
// which adds a 16-bit unit roundoff per rounded operand and one for the result.
#include <gtest/gtest.h>

#include <cctype>
#include <cstdint>
#include <cstring>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "correctness/op_testing.hpp"
#include "reference/core/tolerance.hpp"
#include "reference/ops/ops.hpp"
#include "reference/tensor/tensor.hpp"

using namespace parity;
using namespace parity::op_testing;

namespace {

// What an op produced: output tensors, or a loss, by name.
struct Output {
  std::string name;
  Tensor tensor;  // undefined for a loss
  double loss = 0;
};
using Outputs = std::vector<Output>;

// The sizes a row runs on, and the op run forward and backward on its inputs rounded to a type.
struct Case {
  std::string variant;  // what tells the rows of one op apart ("a^T b", "causal", ...)
  std::string shape;
  std::function<Outputs(DataType)> run;
};

// One output's bound: n the longest reduction (element-wise: roundings per element), stages the
// chained reductions, rounded_inputs the operands rounded to 16 bits (16-bit rows only).
struct Bound {
  std::string output;
  int n, stages, rounded_inputs;
  std::string reason;
};

struct Row {
  std::string op;
  DataType type;
  Case on;
  std::vector<Bound> bounds;
};

std::ostream& operator<<(std::ostream& out, const Row& row) {
  return out << row.op << " " << row.on.variant << " in " << name_of(row.type) << " on " << row.on.shape;
}

Tensor in(const Tensor& t, DataType type) { return to_type(t, type); }

// ---- The ops as rows run them. Input names are those the tests have always drawn.

Case matmul(const std::string& prefix, std::int64_t m, std::int64_t k, std::int64_t n, bool ta, bool tb,
            bool accumulate) {
  const std::string variant = std::string(ta ? "a^T " : "a ") + (tb ? "b^T" : "b") + (accumulate ? " accumulate" : "");
  return {variant, "op(a) [" + std::to_string(m) + ", " + std::to_string(k) + "], op(b) [" + std::to_string(k) + ", " +
                       std::to_string(n) + "]",
          [=](DataType type) {
    const Tensor a = random_tensor(prefix + ".a", ta ? Shape{k, m} : Shape{m, k});
    const Tensor b = random_tensor(prefix + ".b", tb ? Shape{n, k} : Shape{k, n});
    // An accumulated c starts at values exact in every type (small multiples of 1/4), so
    // the float64 reference adds the same start; otherwise c is overwritten.
    Tensor c = nans(prefix + ".c", {m, n});
    if (accumulate)
      for (std::int64_t i = 0; i < c.numel(); ++i) c.set(i, 0.25 * static_cast<double>(i % 7));
    c = in(c, type);
    ops::matmul(in(a, type), ta, in(b, type), tb, c, accumulate);
    return Outputs{{"c", c}};
  }};
}

Case linear(const std::string& prefix, Shape x_shape, std::int64_t out) {
  const std::int64_t width = x_shape.back();
  return {"", "x " + to_string(x_shape) + ", w [" + std::to_string(width) + ", " + std::to_string(out) + "]",
          [=](DataType type) {
    const Tensor x = random_tensor(prefix + ".x", x_shape), w = random_tensor(prefix + ".w", {width, out});
    const Tensor bias = random_tensor(prefix + ".bias", {out});
    const Tensor dy = random_tensor(prefix + ".dy", with_last(x_shape, out));
    Tensor y = nans(prefix + ".y", with_last(x_shape, out), type);
    ops::linear_forward(in(x, type), in(w, type), in(bias, type), y);
    Tensor dx = nans(prefix + ".dx", x_shape, type), dw = zeros(prefix + ".dw", {width, out}, type);
    Tensor dbias = zeros(prefix + ".dbias", {out}, type);
    ops::linear_backward(in(dy, type), in(x, type), in(w, type), dx, dw, dbias);
    return Outputs{{"y", y}, {"dx", dx}, {"dw", dw}, {"dbias", dbias}};
  }};
}

// An element-wise op of one input x (drawn with spread 2) and its backward from dy and x; the
// outputs are named op_forward and op_backward.
using Forward = void (*)(const Tensor&, Tensor&);
using Backward = void (*)(const Tensor&, const Tensor&, Tensor&);
Case elementwise(const std::string& op, const std::string& prefix, Shape shape, Forward forward, Backward backward) {
  return {"", to_string(shape), [=](DataType type) {
    const Tensor x = random_tensor(prefix + ".x", shape, 0, 2), dy = random_tensor(prefix + ".dy", shape);
    Tensor y = nans(prefix + ".y", shape, type), dx = nans(prefix + ".dx", shape, type);
    forward(in(x, type), y);
    backward(in(dy, type), in(x, type), dx);
    return Outputs{{op + "_forward", y}, {op + "_backward", dx}};
  }};
}

Case add(const std::string& prefix, Shape shape) {
  return {"", to_string(shape), [=](DataType type) {
    const Tensor a = random_tensor(prefix + ".a", shape), b = random_tensor(prefix + ".b", shape);
    Tensor y = nans(prefix + ".y", shape, type);
    ops::add_forward(in(a, type), in(b, type), y);
    return Outputs{{"add_forward", y}};
  }};
}

Case layernorm(const std::string& prefix, std::int64_t N, std::int64_t C) {
  return {"", "x [" + std::to_string(N) + ", " + std::to_string(C) + "]", [=](DataType type) {
    const DataType stat = type == DataType::float64 ? DataType::float64 : DataType::float32;
    const Tensor x = random_tensor(prefix + ".x", {N, C}, 0.5, 1.5);
    const Tensor gamma = random_tensor(prefix + ".gamma", {C}, 1, 0.5), beta = random_tensor(prefix + ".beta", {C});
    const Tensor dy = random_tensor(prefix + ".dy", {N, C});
    Tensor y = nans(prefix + ".y", {N, C}, type);
    Tensor mean = nans(prefix + ".mean", {N}, stat), rstd = nans(prefix + ".rstd", {N}, stat);
    ops::layernorm_forward(in(x, type), in(gamma, type), in(beta, type), y, mean, rstd);
    Tensor dx = nans(prefix + ".dx", {N, C}, type);
    Tensor dgamma = zeros(prefix + ".dgamma", {C}, type), dbeta = zeros(prefix + ".dbeta", {C}, type);
    ops::layernorm_backward(in(dy, type), in(x, type), in(gamma, type), mean, rstd, dx, dgamma, dbeta);
    return Outputs{{"y", y}, {"mean", mean}, {"rstd", rstd}, {"dx", dx}, {"dgamma", dgamma}, {"dbeta", dbeta}};
  }};
}

Case softmax(const std::string& prefix, std::int64_t N, std::int64_t C) {
  return {"", "x [" + std::to_string(N) + ", " + std::to_string(C) + "]", [=](DataType type) {
    const Tensor x = random_tensor(prefix + ".x", {N, C}, 0, 2), dy = random_tensor(prefix + ".dy", {N, C});
    Tensor y = nans(prefix + ".y", {N, C}, type), dx = nans(prefix + ".dx", {N, C}, type);
    ops::softmax_forward(in(x, type), y);
    ops::softmax_backward(in(dy, type), y, dx);  // from this type's own forward
    return Outputs{{"softmax_forward", y}, {"softmax_backward", dx}};
  }};
}

Case attention(const std::string& prefix, std::int64_t B, std::int64_t T, std::int64_t C, int heads, bool causal) {
  return {causal ? "causal" : "not causal",
          "qkv [" + std::to_string(B) + ", " + std::to_string(T) + ", " + std::to_string(3 * C) + "], " +
              std::to_string(heads) + " heads",
          [=](DataType type) {
    const Tensor qkv = random_tensor(prefix + ".qkv", {B, T, 3 * C}), dout = random_tensor(prefix + ".dout", {B, T, C});
    Tensor out = nans(prefix + ".out", {B, T, C}, type), probs = nans(prefix + ".probs", {B, heads, T, T}, type);
    ops::attention_forward(in(qkv, type), heads, causal, out, probs);
    Tensor dqkv = nans(prefix + ".dqkv", {B, T, 3 * C}, type);
    ops::attention_backward(in(dout, type), in(qkv, type), probs, heads, dqkv);
    return Outputs{{"out", out}, {"probs", probs}, {"dqkv", dqkv}};
  }};
}

Case embedding(const std::string& prefix, std::int64_t B, std::int64_t T, std::int64_t C, std::int64_t V) {
  return {"", "tokens [" + std::to_string(B) + ", " + std::to_string(T) + "] of " + std::to_string(V) + ", C " +
                  std::to_string(C),
          [=](DataType type) {
    const Tensor tokens = token_tensor(prefix + ".tokens", {B, T}, V);
    const Tensor wte = random_tensor(prefix + ".wte", {V, C}), wpe = random_tensor(prefix + ".wpe", {T, C});
    const Tensor dy = random_tensor(prefix + ".dy", {B, T, C});
    Tensor y = nans(prefix + ".y", {B, T, C}, type);
    ops::embedding_forward(tokens, in(wte, type), in(wpe, type), y);
    Tensor dwte = zeros(prefix + ".dwte", {V, C}, type), dwpe = zeros(prefix + ".dwpe", {T, C}, type);
    ops::embedding_backward(in(dy, type), tokens, dwte, dwpe);
    return Outputs{{"embedding_forward", y}, {"dwte", dwte}, {"dwpe", dwpe}};
  }};
}

Case cross_entropy(const std::string& prefix, std::int64_t N, std::int64_t V) {
  return {"", "logits [" + std::to_string(N) + ", " + std::to_string(V) + "]", [=](DataType type) {
    const Tensor logits = random_tensor(prefix + ".logits", {N, V}, 0, 2);
    const Tensor targets = token_tensor(prefix + ".targets", {N}, V);
    const double loss = ops::cross_entropy_forward(in(logits, type), targets, static_cast<double>(N));
    Tensor dlogits = nans(prefix + ".dlogits", {N, V}, type);
    ops::cross_entropy_backward(in(logits, type), targets, static_cast<double>(N), dlogits);
    return Outputs{{"cross_entropy_forward", Tensor(), loss}, {"cross_entropy_backward", dlogits}};
  }};
}

Case mse(const std::string& prefix, Shape shape, double normalizer) {
  return {"", to_string(shape), [=](DataType type) {
    const Tensor p = random_tensor(prefix + ".prediction", shape), t = random_tensor(prefix + ".target", shape);
    const double loss = ops::mse_forward(in(p, type), in(t, type), normalizer);
    Tensor d = nans(prefix + ".d", shape, type);
    ops::mse_backward(in(p, type), in(t, type), normalizer, d);
    return Outputs{{"mse_forward", Tensor(), loss}, {"mse_backward", d}};
  }};
}

Case dropout(const std::string& prefix, Shape shape, double p, ops::DropoutKey key) {
  return {"", to_string(shape) + ", p " + std::to_string(p), [=](DataType type) {
    const Tensor x = random_tensor(prefix + ".x", shape);
    Tensor y = nans(prefix + ".y", shape, type), dx = nans(prefix + ".dx", shape, type);
    ops::dropout_forward(in(x, type), p, key, y);
    ops::dropout_backward(in(x, type), p, key, dx);
    return Outputs{{"dropout_forward", y}, {"dropout_backward", dx}};
  }};
}

constexpr DataType kF32 = DataType::float32, kBF16 = DataType::bfloat16, kF16 = DataType::float16;

// The reasons several rows share.
const char* const kGeluForward =
    "elementwise, 12 rounded operations per element: the two rounded constants, the cubic's two products, its "
    "scale and sum, the sqrt(2/pi) scale, tanh counted twice for libm's error of up to about 2 ulp, 1 + t, and the "
    "two final products";
const char* const kGeluBackward =
    "elementwise, 21 rounded operations per element: the inner chain up to tanh, 9 as forward; sech^2 = 1 - t^2, 2; "
    "1 + t, 1; the polynomial 1 + 3c x^2 with its rounded constant, 4; three products, the sum of the two terms, and "
    "the product with dy, 5";

std::vector<Row> rows() {
  std::vector<Row> table;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      table.push_back({"matmul", kF32, matmul("f32_matmul", 24, 64, 20, ta, tb, false),
                       {{"c", 64, 1, 0, "one reduction of length k per output"}}});
  for (DataType type : {kBF16, kF16})
    for (bool accumulate : {false, true})
      table.push_back({"matmul", type, matmul("half_matmul", 12, 48, 10, false, false, accumulate),
                       {{"c", 48, 1, 2, "widened to float32, one reduction of length k, the result rounded once"}}});
  table.push_back({"linear", kF32, linear("f32_linear", {4, 8, 32}, 24),
                   {{"y", 33, 1, 0, "one reduction of in terms plus the bias: in + 1"},
                    {"dx", 24, 1, 0, "dx reduces over out"},
                    {"dw", 32, 1, 0, "dw reduces over the N = 32 rows"},
                    {"dbias", 32, 1, 0, "dbias reduces over the N = 32 rows"}}});
  table.push_back({"gelu", kF32, elementwise("gelu", "f32_gelu", {16, 64}, ops::gelu_forward, ops::gelu_backward),
                   {{"gelu_forward", 12, 1, 0, kGeluForward}, {"gelu_backward", 21, 1, 0, kGeluBackward}}});
  for (DataType type : {kBF16, kF16})
    table.push_back({"gelu", type, elementwise("gelu", "half_gelu", {16, 32}, ops::gelu_forward, ops::gelu_backward),
                     {{"gelu_forward", 12, 1, 1, kGeluForward}, {"gelu_backward", 21, 1, 2, kGeluBackward}}});
  table.push_back({"add", kF32, add("f32_add", {32, 48}),
                   {{"add_forward", 1, 1, 0, "one rounded addition per element"}}});
  table.push_back({"layernorm", kF32, layernorm("f32_layernorm", 24, 64),
                   {{"y", 64, 2, 0, "mean then variance, two chained reductions of C"},
                    {"mean", 64, 1, 0, "one reduction of C"},
                    {"rstd", 64, 2, 0, "mean then variance"},
                    {"dx", 64, 4, 0, "the forward's two plus the row means of dxhat and dxhat * xhat"},
                    {"dgamma", 64, 3, 0, "after the forward's two, a reduction over the N rows: n = max(C, N)"},
                    {"dbeta", 24, 1, 0, "one reduction over the N rows"}}});
  table.push_back({"softmax", kF32, softmax("f32_softmax", 16, 48),
                   {{"softmax_forward", 48, 1, 0, "one reduction: the sum of C exponentials"},
                    {"softmax_backward", 48, 2, 0, "the forward's sum, then the row dot product sum(dy * y)"}}});
  for (bool causal : {false, true})
    table.push_back({"attention", kF32, attention("f32_attention", 2, 16, 32, 4, causal),
                     {{"out", 16, 3, 0,
                       "scores (length hs), softmax (length T), weighted sum (length T): n = max(hs, T)"},
                      {"probs", 16, 2, 0, "scores, then softmax"},
                      {"dqkv", 16, 6, 0,
                       "the forward's three, then dP = dO V^T (hs), the row sum of dP * P (T), and dQ = dS K, "
                       "dK = dS^T Q, dV = P^T dO (T)"}}});
  table.push_back({"embedding", kF32, embedding("f32_embedding", 4, 8, 16, 6),
                   {{"embedding_forward", 1, 1, 0, "one addition wte + wpe per element"},
                    {"dwte", 32, 1, 0, "dwte sums the rows of every occurrence of a token: at most B*T terms"},
                    {"dwpe", 4, 1, 0, "dwpe sums over the B batch rows"}}});
  table.push_back({"cross_entropy", kF32, cross_entropy("f32_cross_entropy", 16, 32),
                   {{"cross_entropy_forward", 32, 1, 0,
                     "the sum of V exponentials per row; the sum over rows is in float64"},
                    {"cross_entropy_backward", 32, 1, 0, "softmax minus one-hot: the same one reduction"}}});
  table.push_back({"mse", kF32, mse("f32_mse", {12, 20}, 240),
                   {{"mse_forward", 1, 1, 0,
                     "one float32 subtraction per element; the squares and their sum in float64"},
                    {"mse_backward", 3, 1, 0, "the rounded scale 2 / normalizer, the subtraction and the product"}}});
  table.push_back({"dropout", kF32, dropout("f32_dropout", {32, 32}, 0.3, {3, 9}),
                   {{"dropout_forward", 2, 1, 0,
                     "the rounded scale 1 / (1 - p) and one product; the mask depends on the key only"},
                    {"dropout_backward", 2, 1, 0, "as forward"}}});
  return table;
}

class OpPrecision : public ::testing::TestWithParam<Row> {};

// "matmul_a_T_b_float32": the op, its variant and the type, in the characters a test name allows.
std::string row_name(const ::testing::TestParamInfo<Row>& info) {
  const std::string words = info.param.op + " " + info.param.on.variant + " " + std::string(name_of(info.param.type));
  std::string name;
  for (char c : words) {
    const bool letter = std::isalnum(static_cast<unsigned char>(c)) != 0;
    if (letter) name += c;
    else if (!name.empty() && name.back() != '_') name += '_';
  }
  return name;
}

const Output& output_named(const Outputs& outputs, const std::string& name) {
  for (const Output& o : outputs)
    if (o.name == name) return o;
  throw Error("no output named " + name);
}

}  // namespace

INSTANTIATE_TEST_SUITE_P(Rows, OpPrecision, ::testing::ValuesIn(rows()), row_name);

TEST_P(OpPrecision, WithinTheBoundOfItsRoundings) {
  const Row& row = GetParam();
  const Outputs expected = row.on.run(DataType::float64), got = row.on.run(row.type);
  ASSERT_EQ(got.size(), row.bounds.size()) << row << ": every output has its bound";
  for (const Bound& b : row.bounds) {
    SCOPED_TRACE(row.op + " " + b.output + ", n = " + std::to_string(b.n) + ", stages = " + std::to_string(b.stages) +
                 ": " + b.reason);
    const Output &want = output_named(expected, b.output), &have = output_named(got, b.output);
    if (row.type == DataType::float32) {
      if (have.tensor.defined())
        expect_float32_close(have.tensor, want.tensor, b.n, b.stages, b.output);
      else
        expect_float32_scalar_close(have.loss, want.loss, b.n, b.stages, b.output);
      continue;
    }
    ASSERT_EQ(have.tensor.dtype(), row.type) << b.output;
    expect_close(have.tensor, want.tensor,
                 tolerance::half_storage_op_relative_bound(row.type, b.rounded_inputs, b.n, b.stages),
                 b.output + " in " + std::string(name_of(row.type)) + " against float64");
  }
}

TEST(OpPrecisionCanFail, Bfloat16MatmulExceedsTheFloat32Bound) {
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

// Attention on 16-bit storage is defined as the float32 attention of the widened 16-bit inputs,
// each result rounded to 16 bits once: equal to that bit for bit, on CPU here and on a GPU in
// the CUDA op tests (the float32 attention itself is a row above). Backward reads the
// probabilities as they were stored, rounded.
TEST(OpPrecisionHalf, AttentionIsFloat32AttentionRoundedOnce) {
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
      Tensor out = nans("half_attention.out", {B, T, C}, type);
      Tensor probs = nans("half_attention.probs", {B, heads, T, T}, type);
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
