// Analytic models of collectives: all_to_all_v's count pattern and the alpha-beta costs
// (T = alpha + beta * bytes per message) of each reference algorithm. The bytes nccl-tests
// counts and the bus-bandwidth factor are each collective's descriptor's
// (reference/comm/collectives/).
// Derivations: docs/busbw.md. References: nccl-tests PERFORMANCE.md; Thakur, Rabenseifner and
// Gropp, "Optimization of Collective Communication Operations in MPICH" (2005).
#pragma once

#include <cstddef>
#include <vector>


namespace parity::theory {

// The per-peer counts all_to_all_v is checked and benchmarked with: rank sends
// chunk * ((peer + 2 rank + 1) mod 3) elements to peer. Uneven, and zero for some pair at every
// world size >= 2 (rank 1 sends nothing to rank 0); the block a rank keeps for itself is always
// chunk ((3 rank + 1) mod 3 = 1), so at one rank it is all_to_all of `chunk`. No pair of ranks
// has zero both ways (the two residues sum to 2 mod 3), so every exchange carries something.
constexpr std::size_t all_to_all_v_count(std::size_t chunk, int rank, int peer) {
  return chunk * static_cast<std::size_t>((peer + 2 * rank + 1) % 3);
}
// Elements rank's send buffer holds under that pattern (its counts summed over peers), and
// elements its receive buffer holds (every rank's count for it). Both differ by rank, but
// their mean over the ranks is n chunks at every n, as all_to_all's (docs/busbw.md).
std::size_t all_to_all_v_send_total(std::size_t chunk, int rank, int n);
std::size_t all_to_all_v_recv_total(std::size_t chunk, int rank, int n);

// Constants of the alpha-beta model, fitted from a ping-pong.
struct AlphaBeta {
  double alpha_seconds = 0;           // per message
  double beta_seconds_per_byte = 0;   // inverse bandwidth
};
// The fit to a ping-pong's one-way times at ascending message sizes: alpha is the smallest
// message's time, beta the slope from there to the largest. Where the largest message was no
// slower than the smallest (a loaded host, whose noise swamps the small message), the slope
// says nothing, and beta is the largest message's time over its bytes, all of it bandwidth.
// One size: alpha is its time, beta 0.
AlphaBeta fit_alpha_beta(const std::vector<std::size_t>& bytes, const std::vector<double>& seconds);

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
// all_to_all_v with all_to_all_v_count's pattern (bytes = collective_bytes, a mean over ranks).
double pairwise_all_to_all_v_seconds(int n, double bytes, AlphaBeta m);

// Average bytes one rank sends, for a collective of `bytes` (collective_bytes).
double ring_all_reduce_bytes_per_rank(int n, double bytes);        // 2(n-1)/n * bytes
double ring_chunked_bytes_per_rank(int n, double bytes);           // (n-1)/n * bytes
// all_to_all_v with the pattern: every block but the rank's own (one chunk, bytes / n),
// averaged over ranks: (n-1)/n * bytes, as all_to_all.
double pairwise_all_to_all_v_bytes_per_rank(int n, double bytes);

}  // namespace parity::theory
