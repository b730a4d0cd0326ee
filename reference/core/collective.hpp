// The collectives by name: the vocabulary the communicator, the analytic models and the
// benchmarks share (what each computes is in reference/comm/communicator.hpp).
#pragma once

#include <string>
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
std::string collective_names(std::string_view separator);  // every name, in kAllCollectives' order
// What each computes, and everything else about it: reference/comm/collectives.hpp.

}  // namespace parity
