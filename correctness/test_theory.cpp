// The analytic collective models on hand-computed values.
#include <gtest/gtest.h>

#include "reference/theory/collectives.hpp"

namespace parity::theory {
namespace {

TEST(Theory, BusBandwidthFactors) {
  EXPECT_DOUBLE_EQ(busbw_factor(Collective::all_reduce, 4), 1.5);
  EXPECT_DOUBLE_EQ(busbw_factor(Collective::all_reduce, 1), 0.0);
  EXPECT_DOUBLE_EQ(busbw_factor(Collective::all_gather, 8), 7.0 / 8);
  EXPECT_DOUBLE_EQ(busbw_factor(Collective::reduce_scatter, 2), 0.5);
  EXPECT_DOUBLE_EQ(busbw_factor(Collective::all_to_all, 4), 0.75);
  EXPECT_DOUBLE_EQ(busbw_factor(Collective::broadcast, 8), 1.0);
  EXPECT_DOUBLE_EQ(busbw_factor(Collective::reduce, 8), 1.0);
  EXPECT_DOUBLE_EQ(collective_bytes(Collective::all_gather, 10, 4, 3), 120.0);
  EXPECT_DOUBLE_EQ(collective_bytes(Collective::all_reduce, 10, 4, 3), 40.0);
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

}  // namespace
}  // namespace parity::theory
