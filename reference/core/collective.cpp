// Names and properties of the collectives (see collective.hpp).
#include "reference/core/collective.hpp"

#include <string>

#include "reference/core/error.hpp"

namespace parity {

std::string collective_names(std::string_view separator) {
  std::string text;
  for (auto c : kAllCollectives) text += (text.empty() ? "" : std::string(separator)) + std::string(name_of(c));
  return text;
}

Collective parse_collective(std::string_view text) {
  for (auto c : kAllCollectives)
    if (name_of(c) == text) return c;
  throw UsageError("unknown collective '" + std::string(text) + "' (known: " + collective_names(", ") + ")");
}

}  // namespace parity
