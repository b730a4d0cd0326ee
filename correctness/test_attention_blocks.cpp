// Attention assembled from blocks of keys (ops.hpp: attention_block_forward, attention_merge,
// attention_block_backward) against the whole causal attention (attention_forward and
// attention_backward) on the same inputs: queries and keys in a scrambled order, so that the
// causal mask must follow the rows' positions and not their places; keys split into blocks
// merged in any order, one of them invisible to the first queries; the gradients of every block
// added up. Within regrouped_op_relative_bound: the same sums in another order.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "correctness/op_testing.hpp"
#include "reference/core/error.hpp"
#include "reference/core/tolerance.hpp"
#include "reference/ops/ops.hpp"
#include "reference/tensor/random.hpp"

namespace parity {
namespace {

constexpr int kB = 2, kT = 12, kC = 8, kHeads = 2;

Tensor random(const std::string& name, Shape shape, DataType type, std::uint64_t seed) {
  Tensor t = Tensor::empty(name, std::move(shape), DataType::float64, MemoryCategory::activations);
  initialize(t, Init::normal(0, 1), seed);
  return cast(t, type, name, MemoryCategory::activations);
}

// Rows `rows` (positions in the sequence) of part `part` (0 q, 1 k, 2 v) of a fused qkv, as
// [B, rows, C]; or of a [B, T, C] tensor with part -1.
Tensor rows_of(const Tensor& x, int part, const std::vector<std::int64_t>& rows) {
  const std::int64_t width = x.dim(2), offset = part < 0 ? 0 : part * kC;
  Tensor out = Tensor::empty("rows", {kB, static_cast<std::int64_t>(rows.size()), kC}, x.dtype(), MemoryCategory::activations);
  for (int b = 0; b < kB; ++b)
    for (std::size_t i = 0; i < rows.size(); ++i)
      for (int c = 0; c < kC; ++c)
        out.set((b * static_cast<std::int64_t>(rows.size()) + static_cast<std::int64_t>(i)) * kC + c,
                x.at((b * kT + rows[i]) * width + offset + c));
  return out;
}

double relative(const Tensor& got, const Tensor& want) { return op_testing::difference(got, want).relative; }

std::vector<std::int64_t> range(std::int64_t a, std::int64_t b) {
  std::vector<std::int64_t> out;
  for (std::int64_t i = a; i < b; ++i) out.push_back(i);
  return out;
}

std::vector<std::int64_t> concat(std::vector<std::int64_t> a, const std::vector<std::int64_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// The whole causal attention of a fused qkv: its output and probabilities.
struct Whole {
  Tensor out, probs;
};
Whole whole_attention(const Tensor& qkv) {
  Whole w{Tensor::empty("out", {kB, kT, kC}, qkv.dtype(), MemoryCategory::activations),
          Tensor::empty("probs", {kB, kHeads, kT, kT}, qkv.dtype(), MemoryCategory::activations)};
  ops::attention_forward(qkv, kHeads, true, w.out, w.probs);
  return w;
}

class AttentionBlocks : public ::testing::TestWithParam<DataType> {};

TEST_P(AttentionBlocks, ForwardInBlocksIsTheWholeAttention) {
  const DataType type = GetParam();
  const Tensor qkv = random("qkv", {kB, kT, 3 * kC}, type, 11);
  const Tensor whole = whole_attention(qkv).out;
  // The queries of a load-balanced rank (the first and last of 4 chunks), the keys in three
  // blocks merged last-first: the latest block holds no key the first chunk's queries see.
  const std::vector<std::int64_t> queries = concat(range(0, 3), range(9, 12));
  const std::vector<std::vector<std::int64_t>> blocks{concat(range(9, 12), range(6, 9)), range(3, 6), range(0, 3)};
  const Tensor q = rows_of(qkv, 0, queries);
  Tensor out = Tensor::empty("out", {kB, 6, kC}, type, MemoryCategory::activations);
  Tensor lse = Tensor::empty("lse", {kB, kHeads, 6}, type, MemoryCategory::activations);
  for (std::size_t n = 0; n < blocks.size(); ++n) {
    const Tensor k = rows_of(qkv, 1, blocks[n]), v = rows_of(qkv, 2, blocks[n]);
    if (n == 0) {
      ops::attention_block_forward(q, k, v, queries, blocks[n], kHeads, out, lse);
      // Queries 0-2 see none of positions 6-11.
      for (int h = 0; h < kHeads; ++h) EXPECT_EQ(lse.at(h * 6), -INFINITY);
      continue;
    }
    Tensor part = Tensor::empty("part", out.shape(), type, MemoryCategory::activations);
    Tensor part_lse = Tensor::empty("part_lse", lse.shape(), type, MemoryCategory::activations);
    ops::attention_block_forward(q, k, v, queries, blocks[n], kHeads, part, part_lse);
    ops::attention_merge(out, lse, part, part_lse);
  }
  const double error = relative(out, rows_of(whole, -1, queries));
  EXPECT_LE(error, tolerance::regrouped_op_relative_bound(type, kT, 4)) << name_of(type);
}

TEST_P(AttentionBlocks, BackwardInBlocksIsTheWholeAttentions) {
  const DataType type = GetParam();
  const Tensor qkv = random("qkv", {kB, kT, 3 * kC}, type, 12), dout = random("dout", {kB, kT, kC}, type, 13);
  const Whole whole = whole_attention(qkv);
  Tensor dqkv = Tensor::zeros("dqkv", {kB, kT, 3 * kC}, type, MemoryCategory::activations);
  ops::attention_backward(dout, qkv, whole.probs, kHeads, dqkv);
  // Every query, in a scrambled order; the keys in two blocks.
  const std::vector<std::int64_t> queries{5, 0, 11, 3, 8, 1, 10, 2, 7, 4, 9, 6};
  const std::vector<std::vector<std::int64_t>> blocks{{7, 2, 11, 0, 5, 9}, {1, 10, 3, 8, 6, 4}};
  const Tensor q = rows_of(qkv, 0, queries), d = rows_of(dout, -1, queries);
  Tensor out = Tensor::empty("out", {kB, kT, kC}, type, MemoryCategory::activations);
  Tensor lse = Tensor::empty("lse", {kB, kHeads, kT}, type, MemoryCategory::activations);
  std::vector<Tensor> ks, vs;
  for (std::size_t n = 0; n < blocks.size(); ++n) {
    ks.push_back(rows_of(qkv, 1, blocks[n]));
    vs.push_back(rows_of(qkv, 2, blocks[n]));
    Tensor part = Tensor::empty("part", out.shape(), type, MemoryCategory::activations);
    Tensor part_lse = Tensor::empty("part_lse", lse.shape(), type, MemoryCategory::activations);
    ops::attention_block_forward(q, ks[n], vs[n], queries, blocks[n], kHeads, n == 0 ? out : part, n == 0 ? lse : part_lse);
    if (n > 0) ops::attention_merge(out, lse, part, part_lse);
  }
  Tensor dq = Tensor::zeros("dq", {kB, kT, kC}, type, MemoryCategory::activations);
  const double bound = tolerance::regrouped_op_relative_bound(type, kT, 6);
  for (std::size_t n = 0; n < blocks.size(); ++n) {
    Tensor dk = Tensor::zeros("dk", {kB, 6, kC}, type, MemoryCategory::activations);
    Tensor dv = Tensor::zeros("dv", {kB, 6, kC}, type, MemoryCategory::activations);
    ops::attention_block_backward(d, q, ks[n], vs[n], out, lse, queries, blocks[n], kHeads, dq, dk, dv);
    EXPECT_LE(relative(dk, rows_of(dqkv, 1, blocks[n])), bound) << "dk of block " << n;
    EXPECT_LE(relative(dv, rows_of(dqkv, 2, blocks[n])), bound) << "dv of block " << n;
  }
  EXPECT_LE(relative(dq, rows_of(dqkv, 0, queries)), bound) << "dq";
}

TEST_P(AttentionBlocks, AMaskByPlaceInsteadOfPositionIsTold) {
  // The same block with its positions given in place order: the outputs of the scrambled
  // queries differ far beyond the bound (the check the forward test relies on can fail).
  const DataType type = GetParam();
  const Tensor qkv = random("qkv", {kB, kT, 3 * kC}, type, 14);
  const Tensor whole = whole_attention(qkv).out;
  const std::vector<std::int64_t> queries{5, 0, 11, 3, 8, 1, 10, 2, 7, 4, 9, 6};
  Tensor out = Tensor::empty("out", {kB, kT, kC}, type, MemoryCategory::activations);
  Tensor lse = Tensor::empty("lse", {kB, kHeads, kT}, type, MemoryCategory::activations);
  ops::attention_block_forward(rows_of(qkv, 0, queries), rows_of(qkv, 1, queries), rows_of(qkv, 2, queries), range(0, kT),
                               range(0, kT), kHeads, out, lse);
  EXPECT_GT(relative(out, rows_of(whole, -1, queries)), 100 * tolerance::regrouped_op_relative_bound(type, kT, 4));
}

INSTANTIATE_TEST_SUITE_P(Types, AttentionBlocks, ::testing::Values(DataType::float64, DataType::float32),
                         [](const auto& info) { return std::string(name_of(info.param)); });

TEST(AttentionBlocksRefusals, SizesThatDoNotFitAreRefused) {
  const Tensor q = random("q", {1, 4, 8}, DataType::float64, 1), k = random("k", {1, 3, 8}, DataType::float64, 2);
  Tensor out = Tensor::empty("out", {1, 4, 8}, DataType::float64, MemoryCategory::activations);
  Tensor lse = Tensor::empty("lse", {1, 2, 4}, DataType::float64, MemoryCategory::activations);
  EXPECT_THROW(ops::attention_block_forward(q, k, k, range(0, 3), range(0, 3), 2, out, lse), Error);  // 3 query positions
  EXPECT_THROW(ops::attention_block_forward(q, k, k, range(0, 4), range(0, 3), 3, out, lse), Error);  // 3 heads of 8
  const Tensor half = cast(q, DataType::bfloat16, "q", MemoryCategory::activations);
  EXPECT_THROW(ops::attention_block_forward(half, k, k, range(0, 4), range(0, 3), 2, out, lse), Error);
}

}  // namespace
}  // namespace parity
