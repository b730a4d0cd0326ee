// The JSON reader of core/json.hpp: recursive descent over the bytes.
#include "reference/core/json.hpp"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "reference/core/error.hpp"

namespace parity {
namespace {

class Reader {
 public:
  explicit Reader(std::string_view text) : s_(text) {}

  JsonValue document() {
    JsonValue v = value(0);
    space();
    if (at_ < s_.size()) fail("more after the value");
    return v;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw UsageError("JSON at byte " + std::to_string(at_) + ": " + what);
  }
  void space() {
    while (at_ < s_.size() && (s_[at_] == ' ' || s_[at_] == '\t' || s_[at_] == '\n' || s_[at_] == '\r')) ++at_;
  }
  bool take(char c) {
    space();
    if (at_ < s_.size() && s_[at_] == c) {
      ++at_;
      return true;
    }
    return false;
  }
  void expect(char c) {
    if (!take(c)) fail(std::string("expected '") + c + "'");
  }

  JsonValue value(int depth) {
    if (depth > 64) fail("nested deeper than 64");
    space();
    if (at_ >= s_.size()) fail("expected a value, found the end");
    JsonValue v;
    const char c = s_[at_];
    if (c == '{') {
      ++at_;
      v.kind = JsonValue::Kind::object;
      if (take('}')) return v;
      do {
        space();
        if (at_ >= s_.size() || s_[at_] != '"') fail("expected a member name in quotes");
        std::string name = string();
        expect(':');
        v.members.emplace_back(std::move(name), value(depth + 1));
      } while (take(','));
      expect('}');
    } else if (c == '[') {
      ++at_;
      v.kind = JsonValue::Kind::array;
      if (take(']')) return v;
      do v.items.push_back(value(depth + 1));
      while (take(','));
      expect(']');
    } else if (c == '"') {
      v.kind = JsonValue::Kind::string;
      v.text = string();
    } else if (word("true") || word("false")) {
      v.kind = JsonValue::Kind::boolean;
      v.boolean = s_[at_ - 2] == 'u';  // tr(u)e, fal(s)e
      v.text = v.boolean ? "true" : "false";
    } else if (word("null")) {
      v.kind = JsonValue::Kind::null;
    } else {
      v.kind = JsonValue::Kind::number;
      const std::size_t start = at_;
      while (at_ < s_.size() && (std::isdigit(static_cast<unsigned char>(s_[at_])) || s_[at_] == '-' || s_[at_] == '+' ||
                                 s_[at_] == '.' || s_[at_] == 'e' || s_[at_] == 'E'))
        ++at_;
      v.text = std::string(s_.substr(start, at_ - start));
      char* end = nullptr;
      v.number = std::strtod(v.text.c_str(), &end);
      if (v.text.empty() || *end != '\0') {
        at_ = start;
        fail("expected a value");
      }
      if (!std::isfinite(v.number)) {
        at_ = start;
        fail("the number " + (v.text.size() > 40 ? v.text.substr(0, 37) + "..." : v.text) + " is beyond a double's range");
      }
    }
    return v;
  }

  bool word(std::string_view w) {
    if (s_.substr(at_, w.size()) != w) return false;
    at_ += w.size();
    return true;
  }

  std::string string() {
    ++at_;  // the opening quote
    std::string out;
    while (true) {
      if (at_ >= s_.size()) fail("a string is not closed");
      const char c = s_[at_++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) fail("a control character inside a string");
      if (c != '\\') {
        out += c;
        continue;
      }
      if (at_ >= s_.size()) fail("a string is not closed");
      const char e = s_[at_++];
      switch (e) {
        case '"': case '\\': case '/': out += e; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          if (at_ + 4 > s_.size()) fail("a short \\u escape");
          const std::string hex(s_.substr(at_, 4));
          char* end = nullptr;
          const long code = std::strtol(hex.c_str(), &end, 16);
          if (*end != '\0') fail("a bad \\u escape");
          at_ += 4;
          if (code < 0x80) {
            out += static_cast<char>(code);
          } else if (code < 0x800) {
            out += static_cast<char>(0xC0 | (code >> 6));
            out += static_cast<char>(0x80 | (code & 0x3F));
          } else {
            out += static_cast<char>(0xE0 | (code >> 12));
            out += static_cast<char>(0x80 | ((code >> 6) & 0x3F));
            out += static_cast<char>(0x80 | (code & 0x3F));
          }
          break;
        }
        default: fail("an unknown escape in a string");
      }
    }
  }

  std::string_view s_;
  std::size_t at_ = 0;
};

}  // namespace

JsonValue parse_json(std::string_view text) { return Reader(text).document(); }

std::string json_quoted(std::string_view text) {
  std::string out = "\"";
  for (const char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buffer[8];
      std::snprintf(buffer, sizeof buffer, "\\u%04x", static_cast<unsigned>(static_cast<unsigned char>(c)));
      out += buffer;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

}  // namespace parity
