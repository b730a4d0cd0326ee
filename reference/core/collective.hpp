// The collectives by name: the vocabulary the communicator, the analytic models and the
// benchmarks share (what each computes is in reference/comm/communicator.hpp).
#pragma once

#include <string_view>

namespace parity {

enum class Collective { all_reduce, reduce, broadcast, all_gather, reduce_scatter, all_to_all, all_to_all_v };
inline constexpr Collective kAllCollectives[] = {Collective::all_reduce,     Collective::reduce,
                                                 Collective::broadcast,      Collective::all_gather,
                                                 Collective::reduce_scatter, Collective::all_to_all,
                                                 Collective::all_to_all_v};
// Inline: the communicator names and checks every call with these.
constexpr std::string_view name_of(Collective collective) {
  switch (collective) {
    case Collective::all_reduce: return "all_reduce";
    case Collective::reduce: return "reduce";
    case Collective::broadcast: return "broadcast";
    case Collective::all_gather: return "all_gather";
    case Collective::reduce_scatter: return "reduce_scatter";
    case Collective::all_to_all: return "all_to_all";
    case Collective::all_to_all_v: return "all_to_all_v";
  }
  return "?";
}
Collective parse_collective(std::string_view text);  // throws UsageError listing the known names
constexpr bool is_reducing(Collective c) {
  return c == Collective::all_reduce || c == Collective::reduce || c == Collective::reduce_scatter;
}
constexpr bool has_root(Collective c) { return c == Collective::reduce || c == Collective::broadcast; }
// True when the per-rank chunk is the count (all_gather, reduce_scatter, all_to_all).
// all_to_all_v is not: its blocks differ per peer, so its buffers' counts come from its
// per-peer counts (has_block_counts), never from chunk x size.
constexpr bool is_chunked(Collective c) {
  return c == Collective::all_gather || c == Collective::reduce_scatter || c == Collective::all_to_all;
}
// True when a call carries per-peer send and receive counts (all_to_all_v).
constexpr bool has_block_counts(Collective c) { return c == Collective::all_to_all_v; }

}  // namespace parity
