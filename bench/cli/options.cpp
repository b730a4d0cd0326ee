// The parser behind CommandOptions: every option a command declares becomes a CLI11 option here.
#include "bench/cli/options.hpp"

#include "reference/core/text.hpp"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <charconv>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace parity::cli {

Option& Option::required() {
  option_->required();
  return *this;
}

Option& Option::show_default() {
  option_->capture_default_str();
  return *this;
}

Option& Option::group(const std::string& name) {
  option_->group(name);
  return *this;
}

Option& Option::excludes(const Option& other) {
  option_->excludes(other.option_);
  return *this;
}

Option& Option::at_most(int values) {
  option_->expected(1, values);
  return *this;
}

bool Option::given() const { return option_->count() > 0; }

Option& Option::existing_file() {
  option_->check(CLI::ExistingFile);
  return *this;
}

Option& Option::path() {
  path_only(option_);
  return *this;
}

CLI::Option* path_only(CLI::Option* option) {
  return option->check(
      CLI::Validator([](std::string& text) -> std::string { return text.empty() ? "an empty path names no file" : ""; }, "PATH"));
}

namespace {
template <typename B>
std::string out_of_range(const std::string& input, B low, B high) {
  return input + " is out of range (" + std::to_string(low) + " to " + std::to_string(high) + ")";
}

// A whole number outside [low, high], said as a number past its type is (decimal_only).
CLI::Validator range_check(long long low, long long high) {
  return CLI::Validator(
      [low, high](const std::string& input) -> std::string {
        long long value = 0;
        if (!CLI::detail::lexical_cast(input, value)) return {};  // the decimal check has said why
        return value < low || value > high ? out_of_range(input, low, high) : std::string();
      },
      "INT in [" + std::to_string(low) + " - " + std::to_string(high) + "]", "range");
}
}  // namespace

Option& Option::range(long long low, long long high) {
  if (range_) *range_ = {low, high, true};
  option_->check(range_check(low, high));
  return *this;
}

namespace {

template <typename T>
struct element {
  using type = T;
};
template <typename T>
struct element<std::vector<T>> {
  using type = T;
};

}  // namespace

// A number is refused unless written in plain decimal, or inf for a real number (the parser reads
// 010 as 8, 0x10 as 16, " 8" as 8 and nan as a number; an option's own check refuses inf where it
// means nothing), and a whole number past its type's range too (the parser would clamp
// 99999999999999999999 to the largest value and run with it). A whole number's leading zeros are
// dropped (a transform, not a check: the parser reads the text changed), so that 010 is ten.
template <typename T>
CLI::Option* decimal_only(CLI::Option* option, std::shared_ptr<const WholeRange> range) {
  using E = typename element<T>::type;
  if constexpr (std::is_arithmetic_v<E> && !std::is_same_v<E, bool>) {
    option->transform(CLI::Validator(
        [range](std::string& input) -> std::string {
          constexpr bool whole = std::is_integral_v<E>;
          if (!plain_decimal(input, !whole, !whole) || (std::is_unsigned_v<E> && input[0] == '-'))
            return quoted_input(input) + (whole ? " is not a whole number in decimal" : " is not a number in decimal");
          if constexpr (whole) {
            input = without_leading_zeros(input);
            E parsed{};
            if (std::from_chars(input.data() + (input[0] == '+'), input.data() + input.size(), parsed).ec ==
                std::errc::result_out_of_range)
              return range && range->set ? out_of_range(input, range->low, range->high)
                     : input[0] == '-'       ? input + " is too small (the least is " + std::to_string(std::numeric_limits<E>::min()) + ")"
                                             : input + " is too large (the most is " + std::to_string(std::numeric_limits<E>::max()) + ")";
          } else if (input.find_first_of("iI") == std::string::npos) {
            errno = 0;
            const double x = std::strtod(input.c_str(), nullptr);
            if (std::isinf(x)) return input + " is beyond the range of a number (1.8e308 either way)";  // else read as inf
            // Else read as 0, which an option may take to mean something else (--timeout 0: none).
            if (x == 0 && errno == ERANGE) return input + " is too near zero for a number (it would be read as 0)";
          }
          return {};
        },
        "", "decimal number"));
  }
  return option;
}

namespace {

// The edits (insert, delete, substitute a letter) that make a into b.
std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// Whether every letter of a stands in b in the same order ("dtype" in "datatype").
bool letters_in_order(const std::string& a, const std::string& b) {
  std::size_t j = 0;
  for (char c : b)
    if (j < a.size() && a[j] == c) ++j;
  return j == a.size();
}

// The command's long options a user who typed `given` (without its dashes, three letters or
// more) may have meant: one edit away (two from five letters), or with the same first letter
// and all of given's letters in it in order ("itr" for "iters", "dtype" for "datatype").
std::vector<std::string> near_options(const CLI::App& app, const std::string& given) {
  std::vector<std::pair<std::size_t, std::string>> near;  // nearest first
  for (const CLI::Option* option : app.get_options()) {
    for (const std::string& name : option->get_lnames()) {
      const std::size_t distance = edit_distance(given, name);
      if (name != "help-all" && given.size() >= 3 &&
          (distance <= (given.size() >= 5 ? 2u : 1u) || (given[0] == name[0] && letters_in_order(given, name))))
        near.emplace_back(distance, "--" + name);
    }
  }
  std::stable_sort(near.begin(), near.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<std::string> out;
  for (auto& entry : near) out.push_back(std::move(entry.second));
  return out;
}

}  // namespace

std::string unexpected_words(const CLI::App& command_app, const std::string& command,
                             const std::vector<std::string>& extras) {
  const std::string help = " (see parity " + command + " --help)";
  for (const std::string& word : extras) {
    // A negative number is a stray value, not an option.
    if (word.size() < 2 || word[0] != '-' || plain_decimal(word.substr(1), true, false)) continue;
    const std::string name = word.substr(0, word.find('='));
    // Its own option, given before the command's name (parity --np 2 check).
    if (command_app.get_option_no_throw(name))
      return quoted_input(name) + " goes after the command's name: parity " + command + " " + name + " ..." + help;
    std::string out = command + " has no option " + quoted_input(name);
    const std::size_t dashes = name.find_first_not_of('-');
    const std::vector<std::string> near =
        dashes == std::string::npos ? std::vector<std::string>{} : near_options(command_app, name.substr(dashes));
    for (std::size_t i = 0; i < near.size() && i < 3; ++i)
      out += (i == 0 ? "; did you mean " : i + 1 == std::min<std::size_t>(near.size(), 3) ? " or " : ", ") + near[i];
    return out + (near.empty() ? "" : "?") + help;
  }
  if (extras.empty()) return command + " was given words it does not take" + help;
  const bool takes_some = !command_app.get_options([](const CLI::Option* o) { return o->get_positional(); }).empty();
  return command + " takes no " + (takes_some ? "further " : "") + "argument " + quoted_input(extras.front()) + help;
}

template <typename T>
CLI::Option* decimal_in_range(CLI::Option* option, long long low, long long high) {
  return decimal_only<T>(option, std::make_shared<const WholeRange>(WholeRange{low, high, true}))->check(range_check(low, high));
}

template <typename T>
Option CommandOptions::add(const std::string& flags, T& value, const std::string& help) {
  auto range = std::is_integral_v<typename element<T>::type> ? std::make_shared<WholeRange>() : nullptr;
  return Option(decimal_only<T>(app_.add_option(flags, value, help), range), range);
}

Option CommandOptions::flag(const std::string& flags, bool& value, const std::string& help) {
  return Option(app_.add_flag(flags, value, help));
}

std::vector<std::string> CommandOptions::result_options() const {
  std::vector<std::string> out;
  for (const CLI::Option* option : app_.get_options()) {
    if (option->get_group() == kRunningGroup || option->get_name().empty() || option->get_name() == "--help" ||
        option->get_name() == "--help-all" || option->get_name() == "--version")
      continue;
    std::string value;
    if (option->count() > 0)
      for (const std::string& given : option->results()) value += (value.empty() ? "" : ",") + given;
    else
      value = option->get_default_str();
    out.push_back(option->get_name() + "=" + value);
  }
  return out;
}

// The value types commands declare options of.
template Option CommandOptions::add(const std::string&, int&, const std::string&);
template Option CommandOptions::add(const std::string&, long&, const std::string&);
template Option CommandOptions::add(const std::string&, long long&, const std::string&);
template Option CommandOptions::add(const std::string&, unsigned long&, const std::string&);
template Option CommandOptions::add(const std::string&, double&, const std::string&);
template Option CommandOptions::add(const std::string&, std::string&, const std::string&);
template Option CommandOptions::add(const std::string&, std::vector<std::string>&, const std::string&);
template Option CommandOptions::add(const std::string&, std::vector<int>&, const std::string&);
template Option CommandOptions::add(const std::string&, std::vector<double>&, const std::string&);
template CLI::Option* decimal_only<int>(CLI::Option*, std::shared_ptr<const WholeRange>);
template CLI::Option* decimal_only<double>(CLI::Option*, std::shared_ptr<const WholeRange>);
template CLI::Option* decimal_in_range<int>(CLI::Option*, long long, long long);

}  // namespace parity::cli
