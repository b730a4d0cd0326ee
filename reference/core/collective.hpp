// The collectives by name: the vocabulary the communicator, the analytic models and the
// benchmarks share (what each computes is in reference/comm/communicator.hpp).
#pragma once

#include <string_view>

namespace parity {

enum class Collective { all_reduce, reduce, broadcast, all_gather, reduce_scatter, all_to_all };
inline constexpr Collective kAllCollectives[] = {Collective::all_reduce, Collective::reduce,
                                                 Collective::broadcast, Collective::all_gather,
                                                 Collective::reduce_scatter, Collective::all_to_all};
std::string_view name_of(Collective collective);
Collective parse_collective(std::string_view text);  // throws UsageError listing the known names
bool is_reducing(Collective collective);
bool has_root(Collective collective);
// True when the per-rank chunk is the count (all_gather, reduce_scatter, all_to_all).
bool is_chunked(Collective collective);

}  // namespace parity
