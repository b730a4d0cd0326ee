// Escaping and cutting user input for messages (text.hpp).
#include "reference/core/text.hpp"

#include <algorithm>
#include <cstdio>

namespace parity {
namespace {

// Bytes of a printable UTF-8 character at `at` (0: not one). C1 controls (U+0080..U+009F),
// overlong forms and surrogates are not printable here.
std::size_t printable_utf8(std::string_view text, std::size_t at) {
  const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(text[i]); };
  const unsigned char lead = byte(at);
  std::size_t length = 0;
  unsigned long code = 0;
  if (lead >= 0xc2 && lead <= 0xdf) length = 2, code = lead & 0x1f;
  else if (lead >= 0xe0 && lead <= 0xef) length = 3, code = lead & 0x0f;
  else if (lead >= 0xf0 && lead <= 0xf4) length = 4, code = lead & 0x07;
  else return 0;
  if (at + length > text.size()) return 0;
  for (std::size_t i = 1; i < length; ++i) {
    if ((byte(at + i) & 0xc0) != 0x80) return 0;
    code = (code << 6) | (byte(at + i) & 0x3f);
  }
  const unsigned long smallest[5] = {0, 0, 0x80, 0x800, 0x10000};
  if (code < smallest[length] || code < 0xa0 || (code >= 0xd800 && code <= 0xdfff) || code > 0x10ffff) return 0;
  return length;
}

// Appends text[first, last) escaped; a character is never split at `last`.
std::size_t append_escaped(std::string& out, std::string_view text, std::size_t first, std::size_t last) {
  std::size_t at = first;
  while (at < last) {
    const unsigned char c = static_cast<unsigned char>(text[at]);
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
      ++at;
    } else if (const std::size_t n = c >= 0x80 ? printable_utf8(text, at) : 0; n > 0) {
      if (at + n > last) break;
      out.append(text.substr(at, n));
      at += n;
    } else {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", c);
      out += hex;
      ++at;
    }
  }
  return at;
}

std::string bytes_text(std::size_t n) { return std::to_string(n) + (n == 1 ? " byte" : " bytes"); }

}  // namespace

std::string quoted_input(std::string_view text, std::size_t most) {
  std::string out = "'";
  const std::size_t shown = append_escaped(out, text, 0, std::min(text.size(), most));
  out += "'";
  if (shown < text.size()) out += "... (+" + bytes_text(text.size() - shown) + ")";
  return out;
}

std::string printable_line(std::string_view text, std::size_t most) {
  std::string out;
  if (text.size() <= most) {
    append_escaped(out, text, 0, text.size());
    return out;
  }
  const std::size_t head = most * 6 / 10, tail = most * 3 / 10;
  const std::size_t head_end = append_escaped(out, text, 0, head);
  std::size_t tail_start = text.size() - tail;
  // Start the end part on a character's first byte.
  while (tail_start < text.size() && (static_cast<unsigned char>(text[tail_start]) & 0xc0) == 0x80) ++tail_start;
  out += " [... " + bytes_text(tail_start - head_end) + " left out ...] ";
  append_escaped(out, text, tail_start, text.size());
  return out;
}

bool plain_decimal(std::string_view text, bool fraction, bool infinity) {
  if (infinity && (text == "inf" || text == "+inf" || text == "-inf")) return true;
  std::size_t i = 0;
  const auto digits = [&] {
    const std::size_t start = i;
    while (i < text.size() && text[i] >= '0' && text[i] <= '9') ++i;
    return i - start;
  };
  if (i < text.size() && (text[i] == '+' || text[i] == '-')) ++i;
  std::size_t mantissa = digits();
  if (fraction && i < text.size() && text[i] == '.') {
    ++i;
    mantissa += digits();
  }
  if (mantissa == 0) return false;
  if (fraction && i < text.size() && (text[i] == 'e' || text[i] == 'E')) {
    ++i;
    if (i < text.size() && (text[i] == '+' || text[i] == '-')) ++i;
    if (digits() == 0) return false;
  }
  return i == text.size();
}

std::string without_leading_zeros(std::string_view text) {
  const std::size_t sign = !text.empty() && (text[0] == '+' || text[0] == '-');
  const std::size_t digits = std::min(text.find_first_not_of('0', sign), text.size() - (text.size() > sign));
  return std::string(text.substr(0, sign)) + std::string(text.substr(digits));
}

}  // namespace parity
