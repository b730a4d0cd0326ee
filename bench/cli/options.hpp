// A command's options, each declared once: the flag, the variable it sets with its default, the
// help, and — for the commands `parity run` composes — the values the main job gives it with
// --quick and without, beside them. `parity run` sets those values instead of repeating them.
#pragma once

#include <CLI/CLI.hpp>

#include <charconv>
#include <functional>
#include <limits>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace parity::cli {

// The --help group of the options that steer how a job runs (ranks, result file, progress,
// watchdog, fault injection, --resume) and not what it computes or measures. --resume compares
// every option outside it with the resumed run's and refuses a difference.
inline constexpr const char* kRunningGroup = "Running a job";

// The values `parity run` gives an option: with --quick, and in the full job.
template <typename T>
struct RunValues {
  T quick;
  T full;
};

class CommandOptions {
 public:
  explicit CommandOptions(CLI::App& app) : app_(app) {}
  CLI::App& app() { return app_; }

  template <typename T>
  CLI::Option* add(const std::string& flags, T& value, const std::string& help) {
    return in_range<T>(app_.add_option(flags, value, help));
  }
  // An option `parity run` sets too; its help says to what.
  template <typename T>
  CLI::Option* add(const std::string& flags, T& value, const std::string& help, std::type_identity_t<RunValues<T>> run) {
    run_values_.push_back([&value, run](bool quick) { value = quick ? run.quick : run.full; });
    return in_range<T>(app_.add_option(flags, value, help + " [parity run: " + text(run.quick) + " with --quick, else " +
                                                            text(run.full) + "]"));
  }
  template <typename T>
  CLI::Option* flag(const std::string& flags, T& value, const std::string& help) {
    return app_.add_flag(flags, value, help);
  }
  CLI::Option* flag(const std::string& flags, bool& value, const std::string& help, RunValues<bool> run) {
    run_values_.push_back([&value, run](bool quick) { value = quick ? run.quick : run.full; });
    return app_.add_flag(flags, value, help + " [parity run: " + (run.quick ? "on" : "off") + " with --quick, " +
                                           (run.full ? "on" : "off") + " else]");
  }
  // Sets every option declared with run values to them.
  void use_run_values(bool quick) const {
    for (const auto& set : run_values_) set(quick);
  }

 private:
  // An integer option refuses a decimal value past its type's range (the parser would otherwise
  // clamp 99999999999999999999 to the largest value and run with it).
  template <typename T>
  static CLI::Option* in_range(CLI::Option* option) {
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
  template <typename T>
  static std::string text(const T& value) {
    std::ostringstream out;
    out << value;
    return out.str();
  }
  CLI::App& app_;
  std::vector<std::function<void(bool)>> run_values_;
};

}  // namespace parity::cli
