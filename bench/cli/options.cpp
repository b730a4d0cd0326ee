// The parser behind CommandOptions: every option a command declares becomes a CLI11 option here.
#include "bench/cli/options.hpp"

#include <CLI/CLI.hpp>

#include <charconv>
#include <cstdint>
#include <limits>

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

Option& Option::range(long long low, long long high) {
  option_->check(CLI::Range(low, high));
  return *this;
}

namespace {

// An integer option refuses a decimal value past its type's range (the parser would otherwise
// clamp 99999999999999999999 to the largest value and run with it).
template <typename T>
CLI::Option* in_range(CLI::Option* option) {
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    option->check(CLI::Validator(
        [](std::string& input) -> std::string {
          T parsed{};
          const char* end = input.data() + input.size();
          if (std::from_chars(input.data() + (input.size() > 1 && input[0] == '+'), end, parsed).ec ==
              std::errc::result_out_of_range)
            return input + " is out of range (" + std::to_string(std::numeric_limits<T>::min()) + " to " +
                   std::to_string(std::numeric_limits<T>::max()) + ")";
          return {};
        },
        "", "integer in range"));
  }
  return option;
}

}  // namespace

template <typename T>
Option CommandOptions::add(const std::string& flags, T& value, const std::string& help) {
  return Option(in_range<T>(app_.add_option(flags, value, help)));
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

}  // namespace parity::cli
