// The two levels a hierarchical collective works on: the ranks within a host (NVLink or shared
// memory) and the hosts between them (the network). What each level carries per rank, for the
// hierarchical all-reduce of reference/comm/algorithms/hierarchical.cpp.
#pragma once

#include <vector>

namespace parity::theory {

struct LevelBytes {
  double within_hosts = 0;  // mean bytes a rank sends to ranks on its host
  double across_hosts = 0;  // mean bytes a rank sends to ranks on other hosts
};

// An all-reduce of `bytes` on hosts holding ranks_per_host[h] ranks, n in all, H hosts.
//   Every host the same size L = n / H: a ring reduce-scatter and all-gather within the host
//   (2 (L-1)/L of the buffer per rank) around a ring all-reduce of each rank's 1/L across the
//   hosts (2 (H-1)/H of it): within 2 (L-1)/L bytes, across 2 (H-1)/(H L) bytes.
//   Otherwise: a binomial reduce to each host's first rank and a binomial broadcast back (L_h - 1
//   whole-buffer messages each way on host h), around a ring all-reduce among the first ranks:
//   within sum_h 2 (L_h - 1) bytes / n, across 2 (H-1) bytes / n.
// Either way the two add up to the flat ring's 2 (n-1)/n bytes per rank: the hierarchy moves
// the same bytes, but only a 1/L share of them (uniform) crosses hosts.
inline LevelBytes hierarchical_all_reduce_bytes(const std::vector<int>& ranks_per_host, double bytes) {
  double n = 0;
  bool uniform = true;
  for (int l : ranks_per_host) {
    n += l;
    uniform = uniform && l == ranks_per_host.front();
  }
  const double hosts = static_cast<double>(ranks_per_host.size());
  if (n == 0) return {};
  if (uniform) {
    const double l = ranks_per_host.front();
    return {2.0 * (l - 1) / l * bytes, 2.0 * (hosts - 1) / (hosts * l) * bytes};
  }
  double within = 0;
  for (int l : ranks_per_host) within += 2.0 * (l - 1) * bytes;
  return {within / n, 2.0 * (hosts - 1) * bytes / n};
}

}  // namespace parity::theory
