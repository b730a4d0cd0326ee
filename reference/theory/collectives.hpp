// Analytic models of collectives: the bytes nccl-tests counts, the bus-bandwidth factor, and
// alpha-beta costs (T = alpha + beta * bytes per message) of each reference algorithm.
// Derivations: docs/busbw.md. References: nccl-tests PERFORMANCE.md; Thakur, Rabenseifner and
// Gropp, "Optimization of Collective Communication Operations in MPICH" (2005).
#pragma once

#include <cstddef>

#include "reference/core/collective.hpp"

namespace parity::theory {

// Bytes the algbw of a collective is computed from: count * element size for all-reduce,
// reduce and broadcast; count * element size * n for the chunked collectives (count = chunk).
double collective_bytes(Collective collective, std::size_t count, std::size_t element_bytes, int n);

// busbw = algbw * factor: all-reduce 2(n-1)/n; all-gather, reduce-scatter, all-to-all (n-1)/n;
// reduce and broadcast 1.
double busbw_factor(Collective collective, int n);

// Constants of the alpha-beta model, fitted from a ping-pong.
struct AlphaBeta {
  double alpha_seconds = 0;           // per message
  double beta_seconds_per_byte = 0;   // inverse bandwidth
};

// Largest power of two not above n (recursive doubling and halving-doubling fold the rest).
int power_of_two_floor(int n);
int ceil_log2(int n);

// Predicted time of each reference algorithm for a collective of `bytes` (collective_bytes).
double ring_all_reduce_seconds(int n, double bytes, AlphaBeta m);
double naive_all_reduce_seconds(int n, double bytes, AlphaBeta m);
double recursive_doubling_all_reduce_seconds(int n, double bytes, AlphaBeta m);
double rabenseifner_all_reduce_seconds(int n, double bytes, AlphaBeta m);
double binomial_tree_seconds(int n, double bytes, AlphaBeta m);  // reduce or broadcast
double ring_chunked_seconds(int n, double bytes, AlphaBeta m);   // reduce-scatter, all-gather
double pairwise_all_to_all_seconds(int n, double bytes, AlphaBeta m);

// Average bytes one rank sends, for a collective of `bytes` (collective_bytes).
double ring_all_reduce_bytes_per_rank(int n, double bytes);        // 2(n-1)/n * bytes
double ring_chunked_bytes_per_rank(int n, double bytes);           // (n-1)/n * bytes

}  // namespace parity::theory
