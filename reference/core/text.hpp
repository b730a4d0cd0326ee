// User input in messages. A token from a file or the command line may hold terminal escape
// sequences, NUL bytes or megabytes; a message shows it escaped and cut, so the terminal is
// never driven by input and the reason after the token is always seen.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace parity {

// 'text' with every byte that is not printable ASCII or part of a printable UTF-8 character
// written as \xNN, cut after `most` bytes of input with the count of the rest:
// 'ab\x1b]0;x\x07' or 'aaaa...' (+9999952 bytes).
std::string quoted_input(std::string_view text, std::size_t most = 48);

// One line for the terminal: the same escaping (a newline inside becomes \x0a), and a text
// longer than `most` bytes keeps its start and its end (where a reason usually stands) with the
// count of bytes left out between them.
std::string printable_line(std::string_view text, std::size_t most = 1000);

// Whether 'text' is a number written in plain decimal: an optional sign, digits, and where
// `fraction` a decimal point and an exponent (1.5e-3); where `infinity`, inf too (with a sign or
// none). strtod and the option parser take more (0x10 as 16, 010 as 8, " 8" with its space,
// nan, 0x1p3, infinity), which a user never means.
bool plain_decimal(std::string_view text, bool fraction, bool infinity = false);

// A whole number in plain decimal without the zeros that lead its digits, its sign kept and one
// digit left ("-007" is "-7", "000" is "0"): what a parser that reads 010 as octal should see.
std::string without_leading_zeros(std::string_view text);

}  // namespace parity
