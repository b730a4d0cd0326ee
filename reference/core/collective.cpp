// Names and properties of the collectives (see collective.hpp).
#include "reference/core/collective.hpp"

#include <string>

#include "reference/core/error.hpp"

namespace parity {

std::string_view name_of(Collective collective) {
  switch (collective) {
    case Collective::all_reduce: return "all_reduce";
    case Collective::reduce: return "reduce";
    case Collective::broadcast: return "broadcast";
    case Collective::all_gather: return "all_gather";
    case Collective::reduce_scatter: return "reduce_scatter";
    case Collective::all_to_all: return "all_to_all";
  }
  return "?";
}

Collective parse_collective(std::string_view text) {
  std::string known;
  for (auto c : kAllCollectives) {
    if (name_of(c) == text) return c;
    known += (known.empty() ? "" : ", ") + std::string(name_of(c));
  }
  throw UsageError("unknown collective '" + std::string(text) + "' (known: " + known + ")");
}

bool is_reducing(Collective c) {
  return c == Collective::all_reduce || c == Collective::reduce || c == Collective::reduce_scatter;
}
bool has_root(Collective c) { return c == Collective::reduce || c == Collective::broadcast; }
bool is_chunked(Collective c) {
  return c == Collective::all_gather || c == Collective::reduce_scatter || c == Collective::all_to_all;
}

}  // namespace parity
