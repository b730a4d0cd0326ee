// A JSON reader for the small description files parity takes (a cluster, a model): one value
// (null, true, false, a number, a string, an array, an object) with its members in file order.
// Errors name the byte offset; nesting deeper than 64 is refused. Writing is the caller's.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace parity {

struct JsonValue {
  enum class Kind { null, boolean, number, string, array, object };
  Kind kind = Kind::null;
  bool boolean = false;
  double number = 0;
  std::string text;  // a string's value; a number's or boolean's spelling as written
  std::vector<JsonValue> items;                            // an array's
  std::vector<std::pair<std::string, JsonValue>> members;  // an object's, in file order
};

// Throws UsageError ("JSON at byte N: ...") on anything that is not one JSON value.
JsonValue parse_json(std::string_view text);
// A string with JSON's escapes, in quotes.
std::string json_quoted(std::string_view text);

}  // namespace parity
