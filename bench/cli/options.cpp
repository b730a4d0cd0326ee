// The parser behind CommandOptions: every option a command declares becomes a CLI11 option here.
#include "bench/cli/options.hpp"

#include "reference/core/text.hpp"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <type_traits>
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

Option& Option::existing_file() {
  option_->check(CLI::ExistingFile);
  return *this;
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
                                         : out_of_range(input, std::numeric_limits<E>::min(), std::numeric_limits<E>::max());
          }
          return {};
        },
        "", "decimal number"));
  }
  return option;
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
