// Alpha-beta costs of the reference algorithms, counted step by step as they are written in
// reference/comm/algorithms/ (so the model and the code agree on the message pattern).
#include "reference/theory/collectives.hpp"

#include <algorithm>
#include <bit>
#include <stdexcept>
#include <string>

namespace parity::theory {

std::size_t all_to_all_v_send_total(std::size_t chunk, int rank, int n) {
  std::size_t total = 0;
  for (int peer = 0; peer < n; ++peer) total += all_to_all_v_count(chunk, rank, peer);
  return total;
}

std::size_t all_to_all_v_recv_total(std::size_t chunk, int rank, int n) {
  std::size_t total = 0;
  for (int source = 0; source < n; ++source) total += all_to_all_v_count(chunk, source, rank);
  return total;
}

int power_of_two_floor(int n) { return n <= 1 ? 1 : static_cast<int>(std::bit_floor(static_cast<unsigned>(n))); }
int ceil_log2(int n) { return n <= 1 ? 0 : static_cast<int>(std::bit_width(static_cast<unsigned>(n - 1))); }

namespace {
double message(double bytes, AlphaBeta m) { return m.alpha_seconds + bytes * m.beta_seconds_per_byte; }
int floor_log2(int n) { return n <= 1 ? 0 : static_cast<int>(std::bit_width(static_cast<unsigned>(n))) - 1; }
}  // namespace

AlphaBeta fit_alpha_beta(const std::vector<std::size_t>& bytes, const std::vector<double>& seconds) {
  if (bytes.empty() || bytes.size() != seconds.size())
    throw std::invalid_argument("fit_alpha_beta: " + std::to_string(bytes.size()) + " sizes and " +
                                std::to_string(seconds.size()) + " times");
  AlphaBeta m;
  m.alpha_seconds = seconds.front();
  if (bytes.size() > 1) {
    const double slope = (seconds.back() - seconds.front()) / static_cast<double>(bytes.back() - bytes.front());
    m.beta_seconds_per_byte = slope > 0 ? slope : seconds.back() / static_cast<double>(bytes.back());
  }
  return m;
}

// 2(n-1) steps, each moving one chunk of bytes/n.
double ring_all_reduce_seconds(int n, double bytes, AlphaBeta m) {
  return 2.0 * (n - 1) * message(bytes / n, m);
}

// The root receives n-1 whole buffers, then sends n-1 whole buffers, one after another.
double naive_all_reduce_seconds(int n, double bytes, AlphaBeta m) {
  return 2.0 * (n - 1) * message(bytes, m);
}

// log2(p) exchanges of the whole buffer among p = 2^floor(log2 n) ranks, plus one step to
// fold the other n - p ranks in and one to hand them the result.
double recursive_doubling_all_reduce_seconds(int n, double bytes, AlphaBeta m) {
  const int p = power_of_two_floor(n);
  const int extra = p == n ? 0 : 2;
  return (floor_log2(p) + extra) * message(bytes, m);
}

// Recursive halving (reduce-scatter) then doubling (all-gather) among p ranks:
// 2 log2(p) messages carrying 2(p-1)/p of the buffer, plus the fold steps.
double rabenseifner_all_reduce_seconds(int n, double bytes, AlphaBeta m) {
  const int p = power_of_two_floor(n);
  const double fold = p == n ? 0.0 : 2.0 * message(bytes, m);
  return 2.0 * floor_log2(p) * m.alpha_seconds + 2.0 * (p - 1) / p * bytes * m.beta_seconds_per_byte + fold;
}

double binomial_tree_seconds(int n, double bytes, AlphaBeta m) { return ceil_log2(n) * message(bytes, m); }

// n-1 steps, each moving one chunk of bytes/n (bytes = n * chunk).
double ring_chunked_seconds(int n, double bytes, AlphaBeta m) { return (n - 1) * message(bytes / n, m); }

double pairwise_all_to_all_seconds(int n, double bytes, AlphaBeta m) { return (n - 1) * message(bytes / n, m); }

// Over the n steps a rank meets every other once (step k pairs r with (k - r) mod n), sending
// and receiving at once, so an exchange lasts as long as the larger of its two blocks, a
// message both ways counted as one (as pairwise all-to-all's model does); a pair with nothing
// either way would exchange no message (never the case for this pattern). The collective
// ends with the slowest rank. A chunk is bytes / n; with equal blocks this is pairwise
// all-to-all's (n-1) (alpha + S/n beta).
double pairwise_all_to_all_v_seconds(int n, double bytes, AlphaBeta m) {
  const double chunk_bytes = bytes / n;
  double slowest = 0;
  for (int r = 0; r < n; ++r) {
    double seconds = 0;
    for (int peer = 0; peer < n; ++peer) {
      const std::size_t larger = std::max(all_to_all_v_count(1, r, peer), all_to_all_v_count(1, peer, r));
      if (peer != r && larger > 0) seconds += message(static_cast<double>(larger) * chunk_bytes, m);
    }
    slowest = std::max(slowest, seconds);
  }
  return slowest;
}

double ring_all_reduce_bytes_per_rank(int n, double bytes) { return 2.0 * (n - 1) / n * bytes; }
double ring_chunked_bytes_per_rank(int n, double bytes) { return static_cast<double>(n - 1) / n * bytes; }
// The send buffer (n chunks on average) less the self block, one chunk on every rank.
double pairwise_all_to_all_v_bytes_per_rank(int n, double bytes) { return static_cast<double>(n - 1) / n * bytes; }

}  // namespace parity::theory
