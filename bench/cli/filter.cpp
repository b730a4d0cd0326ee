// Name filters for `parity check --filter`.
#include "bench/cli/filter.hpp"

namespace parity::cli {
namespace {
std::vector<std::string> split(const std::string& text) {
  std::vector<std::string> parts;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t colon = text.find(':', start);
    const std::string part = text.substr(start, colon == std::string::npos ? std::string::npos : colon - start);
    if (!part.empty()) parts.push_back(part);
    if (colon == std::string::npos) break;
    start = colon + 1;
  }
  return parts;
}
}  // namespace

bool wildcard_match(const char* pattern, const char* text) {
  // Iterative matcher with one backtrack point for the last '*'.
  const char* star = nullptr;
  const char* resume = nullptr;
  while (*text) {
    if (*pattern == '?' || *pattern == *text) {
      ++pattern;
      ++text;
    } else if (*pattern == '*') {
      star = pattern++;
      resume = text;
    } else if (star) {
      pattern = star + 1;
      text = ++resume;
    } else {
      return false;
    }
  }
  while (*pattern == '*') ++pattern;
  return *pattern == '\0';
}

NameFilter::NameFilter(const std::string& spec) {
  const std::size_t dash = spec.find('-');
  positive_ = split(spec.substr(0, dash));
  if (dash != std::string::npos) negative_ = split(spec.substr(dash + 1));
  if (positive_.empty()) positive_.push_back("*");
}

bool NameFilter::matches(const std::string& name) const {
  bool accepted = false;
  for (const auto& p : positive_) accepted = accepted || wildcard_match(p.c_str(), name.c_str());
  if (!accepted) return false;
  for (const auto& n : negative_)
    if (wildcard_match(n.c_str(), name.c_str())) return false;
  return true;
}

}  // namespace parity::cli
