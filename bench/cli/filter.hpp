// GoogleTest-style name filters: "POSITIVE[:POSITIVE...][-NEGATIVE[:NEGATIVE...]]" where
// '*' matches any string and '?' any one character. An empty positive part matches all.
#pragma once

#include <string>
#include <vector>

namespace parity::cli {

class NameFilter {
 public:
  explicit NameFilter(const std::string& spec = "*");
  bool matches(const std::string& name) const;

 private:
  std::vector<std::string> positive_, negative_;
};

bool wildcard_match(const char* pattern, const char* text);

}  // namespace parity::cli
