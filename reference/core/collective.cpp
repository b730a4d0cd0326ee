// Names and properties of the collectives (see collective.hpp).
#include "reference/core/collective.hpp"

#include <string>

#include "reference/core/error.hpp"

namespace parity {

Collective parse_collective(std::string_view text) {
  std::string known;
  for (auto c : kAllCollectives) {
    if (name_of(c) == text) return c;
    known += (known.empty() ? "" : ", ") + std::string(name_of(c));
  }
  throw UsageError("unknown collective '" + std::string(text) + "' (known: " + known + ")");
}

}  // namespace parity
