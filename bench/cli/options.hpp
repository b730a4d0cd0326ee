// A command's options, each declared once: the flag, the variable it sets with its default, the
// help, and — for the commands `parity run` composes — the values the main job gives it with
// --quick and without, beside them. `parity run` sets those values instead of repeating them.
//
// The parser (CLI11, header-only) is reached only through options.cpp and main.cpp: a command's
// file declares its options here without compiling the parser itself.
#pragma once

#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace CLI {
class App;
class Option;
}  // namespace CLI

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

// The range Option::range gives a whole-number option, shared with its decimal check so that a
// number too large for the type is refused with the option's range, not the type's.
struct WholeRange {
  long long low = 0, high = 0;
  bool set = false;
};

// A number option's check (each option CommandOptions::add declares has it; T: int or double):
// refuses what is not written in plain decimal (or inf, for a real number; the parser reads 010
// as 8, 0x10 as 16), and a whole number past its type's range ("N is out of range (LOW to
// HIGH)" with the option's range where `range` holds one, else "N is too large (the most is
// MAX)", or too small, the least being MIN: not the type's whole range, which the option's own
// check may narrow).
template <typename T>
CLI::Option* decimal_only(CLI::Option* option, std::shared_ptr<const WholeRange> range = nullptr);
// decimal_only for a whole-number option of range [low, high] ("N is out of range (LOW to
// HIGH)" below, above and past the type alike). T: int.
template <typename T>
CLI::Option* decimal_in_range(CLI::Option* option, long long low, long long high);
// A path option's check: refuses "" (an empty path names no file, rather than standing for the
// default). Option::path() and the common --out and --resume take it.
CLI::Option* path_only(CLI::Option* option);

// Why the parser refused the words it was left with (CLI11 says "The following arguments were
// not expected: 3 --nosuch", last first): "bench collectives has no option '--itr'; did you mean
// --iters? (see parity bench collectives --help)" for the first unknown option, else "...
// takes no argument 'x'". `extras` in the order given; `command` the words naming the command.
std::string unexpected_words(const CLI::App& command_app, const std::string& command,
                             const std::vector<std::string>& extras);

// One declared option, for what is said of it after its declaration.
class Option {
 public:
  explicit Option(CLI::Option* option, std::shared_ptr<WholeRange> range = nullptr) : option_(option), range_(std::move(range)) {}
  Option& required();
  Option& show_default();                 // the default in --help
  Option& group(const std::string& name);  // its --help group
  Option& excludes(const Option& other);  // refused beside other
  Option& at_most(int values);            // a positional taking 1 to values values
  Option& existing_file();                // refuses a path that is no file
  Option& path();                         // refuses "", a path naming nothing
  Option& range(long long low, long long high);  // refuses a number outside [low, high], saying so
  bool given() const;                            // on the command line (once parsed)

 private:
  CLI::Option* option_;
  std::shared_ptr<WholeRange> range_;  // a whole-number option's (else null)
};

class CommandOptions {
 public:
  explicit CommandOptions(CLI::App& app) : app_(app) {}

  // T is one of the types options.cpp instantiates (integers, double, string, vectors of them).
  template <typename T>
  Option add(const std::string& flags, T& value, const std::string& help);
  // An option `parity run` sets too; its help says to what.
  template <typename T>
  Option add(const std::string& flags, T& value, const std::string& help, std::type_identity_t<RunValues<T>> run) {
    run_values_.push_back([&value, run](bool quick) { value = quick ? run.quick : run.full; });
    return add(flags, value, help + " [parity run: " + text(run.quick) + " with --quick, else " + text(run.full) + "]");
  }
  Option flag(const std::string& flags, bool& value, const std::string& help);
  Option flag(const std::string& flags, bool& value, const std::string& help, RunValues<bool> run) {
    run_values_.push_back([&value, run](bool quick) { value = quick ? run.quick : run.full; });
    return flag(flags, value,
                help + " [parity run: " + (run.quick ? "on" : "off") + " with --quick, " + (run.full ? "on" : "off") + " else]");
  }
  // Sets every option declared with run values to them.
  void use_run_values(bool quick) const {
    for (const auto& set : run_values_) set(quick);
  }
  // Every option that changes what the command computes or measures (all but kRunningGroup's
  // and the help's), as "--name=value" with the value given or the default.
  std::vector<std::string> result_options() const;

 private:
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
