// The analytic models on hand-computed values.
#include <gtest/gtest.h>

#include <tuple>

#include "reference/comm/collectives.hpp"
#include "reference/core/tolerance.hpp"
#include "reference/theory/collectives.hpp"
#include "reference/theory/model.hpp"
#include "reference/theory/tensor.hpp"

namespace parity::theory {
namespace {

// The collectives' descriptors (reference/comm/collectives/) hold the factors and sizes.
TEST(Theory, BusBandwidthFactors) {
  EXPECT_DOUBLE_EQ(describe(Collective::all_reduce).busbw_factor(4), 1.5);
  EXPECT_DOUBLE_EQ(describe(Collective::all_reduce).busbw_factor(1), 0.0);
  EXPECT_DOUBLE_EQ(describe(Collective::all_gather).busbw_factor(8), 7.0 / 8);
  EXPECT_DOUBLE_EQ(describe(Collective::reduce_scatter).busbw_factor(2), 0.5);
  EXPECT_DOUBLE_EQ(describe(Collective::all_to_all).busbw_factor(4), 0.75);
  EXPECT_DOUBLE_EQ(describe(Collective::all_to_all_v).busbw_factor(4), 0.75);
  EXPECT_DOUBLE_EQ(describe(Collective::broadcast).busbw_factor(8), 1.0);
  EXPECT_DOUBLE_EQ(describe(Collective::reduce).busbw_factor(8), 1.0);
  EXPECT_DOUBLE_EQ(collective_bytes(Collective::all_gather, 10, 4, 3), 120.0);
  EXPECT_DOUBLE_EQ(collective_bytes(Collective::all_reduce, 10, 4, 3), 40.0);
}

// all_to_all_v's count pattern is what its comment promises: uneven, zero somewhere at every
// n >= 2, the self block one chunk, never nothing both ways between two ranks, and n chunks
// per send and receive buffer on average, so that collective_bytes is all_to_all's.
TEST(Theory, AllToAllVCountPattern) {
  const std::size_t chunk = 7;
  EXPECT_EQ(all_to_all_v_count(chunk, 0, 0), chunk);  // one rank: all_to_all of chunk
  for (int n = 1; n <= 40; ++n) {
    std::size_t sent = 0, received = 0, zeros = 0;
    for (int r = 0; r < n; ++r) {
      EXPECT_EQ(all_to_all_v_count(chunk, r, r), chunk);
      sent += all_to_all_v_send_total(chunk, r, n);
      received += all_to_all_v_recv_total(chunk, r, n);
      for (int p = 0; p < n; ++p) {
        zeros += all_to_all_v_count(chunk, r, p) == 0 ? 1 : 0;
        EXPECT_GT(all_to_all_v_count(chunk, r, p) + all_to_all_v_count(chunk, p, r), 0u) << n << " " << r << " " << p;
      }
    }
    EXPECT_EQ(sent, chunk * static_cast<std::size_t>(n * n)) << n;
    EXPECT_EQ(received, sent) << n;
    if (n >= 2) {
      EXPECT_GT(zeros, 0u) << n;
    }
    EXPECT_DOUBLE_EQ(collective_bytes(Collective::all_to_all_v, chunk, 4, n), collective_bytes(Collective::all_to_all, chunk, 4, n));
  }
  EXPECT_EQ(all_to_all_v_send_total(chunk, 1, 2), chunk);      // 0 to rank 0, chunk to itself
  EXPECT_EQ(all_to_all_v_recv_total(chunk, 1, 2), 3 * chunk);  // 2 chunks from rank 0, its own
}

TEST(Theory, AlphaBetaCosts) {
  const AlphaBeta m{2e-6, 1e-9};  // 2 us per message, 1 GB/s
  const double M = 1 << 20;
  EXPECT_DOUBLE_EQ(ring_all_reduce_seconds(4, M, m), 6 * (2e-6 + M / 4 * 1e-9));
  EXPECT_DOUBLE_EQ(naive_all_reduce_seconds(4, M, m), 6 * (2e-6 + M * 1e-9));
  EXPECT_DOUBLE_EQ(recursive_doubling_all_reduce_seconds(8, M, m), 3 * (2e-6 + M * 1e-9));
  EXPECT_DOUBLE_EQ(recursive_doubling_all_reduce_seconds(6, M, m), (2 + 2) * (2e-6 + M * 1e-9));
  EXPECT_DOUBLE_EQ(rabenseifner_all_reduce_seconds(8, M, m), 6 * 2e-6 + 2.0 * 7 / 8 * M * 1e-9);
  EXPECT_DOUBLE_EQ(binomial_tree_seconds(5, M, m), 3 * (2e-6 + M * 1e-9));
  EXPECT_DOUBLE_EQ(ring_chunked_seconds(4, M, m), 3 * (2e-6 + M / 4 * 1e-9));
  EXPECT_DOUBLE_EQ(ring_all_reduce_bytes_per_rank(4, M), 1.5 * M);
  // all_to_all_v at 2 ranks: one step, rank 0 sends 2 chunks (M / 2 each), rank 1 none.
  EXPECT_DOUBLE_EQ(pairwise_all_to_all_v_seconds(2, M, m), 2e-6 + M * 1e-9);
  EXPECT_DOUBLE_EQ(pairwise_all_to_all_v_seconds(1, M, m), 0.0);
  // At 3 ranks each rank's two exchanges carry 2 chunks (M / 3 each) one way, none the other.
  EXPECT_DOUBLE_EQ(pairwise_all_to_all_v_seconds(3, M, m), 2 * (2e-6 + 2 * M / 3 * 1e-9));
  EXPECT_DOUBLE_EQ(pairwise_all_to_all_v_bytes_per_rank(4, M), 0.75 * M);
  // For large messages the ring's bandwidth term is independent of n and beats naive.
  EXPECT_LT(ring_all_reduce_seconds(8, 1e9, m), naive_all_reduce_seconds(8, 1e9, m));
}

TEST(Theory, PowersOfTwo) {
  EXPECT_EQ(power_of_two_floor(1), 1);
  EXPECT_EQ(power_of_two_floor(5), 4);
  EXPECT_EQ(power_of_two_floor(8), 8);
  EXPECT_EQ(ceil_log2(1), 0);
  EXPECT_EQ(ceil_log2(5), 3);
  EXPECT_EQ(ceil_log2(8), 3);
}

// docs/tensor-parallelism.md: at 2 bytes per element, parity's block keeps Korthikanti et al.'s
// bytes minus the residual dropout masks (2sbh, over t with SP) and the attention dropout's mask
// and output (3as^2b/t), plus the LayerNorm statistics (8bs, over t with SP).
TEST(Theory, TensorParallelActivationsDifferFromKorthikantiAsDocumented) {
  for (auto [s, b, h, a] : {std::tuple{12, 3, 24, 12}, std::tuple{128, 4, 256, 8}, std::tuple{2048, 1, 4096, 32}})
    for (int t : {1, 2, 4})
      for (bool sp : {false, true}) {
        const double sbh = double(s) * b * h;
        const double korthikanti = korthikanti_tensor_parallel_activation_bytes(s, b, h, a, t, sp);
        const double shard = sp ? t : 1;
        // The LayerNorm statistics: 4 float32 values per token.
        const double explained = korthikanti - 2 * sbh / shard - 3.0 * a * s * s * b / t + 16.0 * s * b / shard;
        const double ours = static_cast<double>(tensor_parallel_block_activation_bytes(s, b, h, a, t, sp, 2, 4));
        EXPECT_NEAR(ours, explained, tolerance::closed_form_relative_bound(12) * korthikanti)
            << "s=" << s << " b=" << b << " h=" << h << " a=" << a << " t=" << t << (sp ? " sp" : "");
      }
  // One rank: the single-device accounting; SP divides everything by t.
  for (std::int64_t e : {2, 4, 8}) {
    const std::int64_t r = e == 8 ? 8 : 4;
    EXPECT_EQ(tensor_parallel_block_activation_bytes(12, 3, 24, 12, 1, false, e, r),
              parity_block_activation_bytes(12, 3, 24, 12, e, r));
    EXPECT_EQ(4 * tensor_parallel_block_activation_bytes(12, 3, 24, 12, 4, true, e, r),
              parity_block_activation_bytes(12, 3, 24, 12, e, r));
  }
}

TEST(Theory, TensorParallelBytesAndParameters) {
  model::GptConfig c{.vocabulary = 48, .layers = 2, .hidden = 24, .heads = 12, .sequence = 12};
  // b = 3 sequences, t = 4, e = 4: A = 3 * 12 * 24 = 864 elements.
  const TensorParallelBytes plain = tensor_parallel_bytes_per_rank(c, 3, 4, false, 4, 4);
  EXPECT_DOUBLE_EQ(plain.block, 8 * 0.75 * 864 * 4);
  EXPECT_DOUBLE_EQ(plain.embedding, 2 * 0.75 * 864 * 4);
  EXPECT_DOUBLE_EQ(plain.head, 2 * 0.75 * 864 * 4);
  EXPECT_DOUBLE_EQ(plain.loss, 2 * 0.75 * 3 * 36 * 4);
  const TensorParallelBytes sp = tensor_parallel_bytes_per_rank(c, 3, 4, true, 4, 4);
  EXPECT_DOUBLE_EQ(sp.block, 10 * 0.75 * 864 * 4);
  EXPECT_DOUBLE_EQ(sp.head, 3 * 0.75 * 864 * 4);
  EXPECT_DOUBLE_EQ(tensor_parallel_bytes_per_rank(c, 3, 1, true, 4, 4).total(2), 0.0);
  // At t = 1 the sharded count is the whole model's.
  EXPECT_EQ(tensor_parallel_parameters_per_rank(c, 1), gpt_parameters(c));
  c.tied_embeddings = false;
  EXPECT_EQ(tensor_parallel_parameters_per_rank(c, 1), gpt_parameters(c));
  // t = 2: token table and head halved, blocks 12h^2/2 + 7h/2 + 6h, the rest whole.
  EXPECT_EQ(tensor_parallel_parameters_per_rank(c, 2), 2 * (48 * 24 / 2) + 12 * 24 + 2 * (6 * 576 + 84 + 144) + 48);
}

}  // namespace
}  // namespace parity::theory
