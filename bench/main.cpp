// The `parity` command line: builds every registered command's options (bench/commands/), parses
// the arguments and runs the command named. What each command is, does and writes is in its own
// file; this one knows none of them by name.
#include <CLI/CLI.hpp>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <regex>
#include <string>
#include <utility>
#include <vector>

#include "bench/cli/options.hpp"
#include "bench/cli/supervisor.hpp"
#include "bench/commands/command.hpp"
#include "reference/core/error.hpp"
#include "reference/core/provenance.hpp"
#include "reference/core/text.hpp"

using namespace parity;
using namespace parity::cli;

namespace {

// Seconds: a finite number >= 0 (CLI11's own range check accepts nan and words its refusal of
// -1 with DBL_MAX written out in full).
CLI::Validator timeout_validator() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        char* end = nullptr;
        const double value = std::strtod(text.c_str(), &end);
        if (text.empty() || end == text.c_str() || *end != '\0' || !std::isfinite(value) || value < 0)
          return text + " is not a number of seconds >= 0 (0 disables the watchdog)";
        return "";
      },
      "SECONDS");
}

// The parser's refusals said as parity says its own: "--out: At Most 1 required but received 2"
// becomes "--out is given 2 times (once at most)".
std::string in_plain_words(const std::string& message) {
  static const std::pair<std::regex, const char*> kRewrites[] = {
      {std::regex("^(\\S+): At Most 1 required but received (\\d+)$"), "$1 is given $2 times (once at most)"},
      {std::regex("^(\\S+): At Most (\\d+) required but received (\\d+)$"), "$1: $3 given, $2 at most"},
      {std::regex("^(\\S+): 1 required .* missing$"), "$1 needs a value"},
      {std::regex("^(\\S+): File does not exist: (.*)$"), "$1: $2 does not exist"},
      {std::regex("^(\\S+): File is actually a directory: (.*)$"), "$1: $2 is a directory, not a file"}};
  for (const auto& [pattern, words] : kRewrites)
    if (std::regex_match(message, pattern)) return std::regex_replace(message, pattern, words);
  return message;
}

void add_common(CLI::App* app, CommonOptions& o, bool with_half = true) {
  decimal_in_range<int>(app->add_option("--np", o.np, "Ranks to start. Outside mpirun/srun parity re-runs itself as `mpirun -n NP` "
                                "(adding --oversubscribe when NP exceeds the cores; refused past 16 ranks per core or past the "
                                "memory of about 100 MB a rank needs before any work); under a launcher, the world given is used"),
                       1, 1 << 20)
      ->group(kRunningGroup);
  app->add_option("--hostfile", o.hostfile, "Open MPI hostfile passed to mpirun (multi-host runs)")
      ->check(CLI::ExistingFile)
      ->group(kRunningGroup);
  path_only(app->add_option("--out", o.out, "Result file (HDF5) [default: parity-<subcommand>-<UTC time>.h5 in the current directory, or -2.h5, -3.h5 ... in its place when a file or another run holds that name]"))
      ->group(kRunningGroup);
  app->add_flag("--force", o.force, "Overwrite an existing result file")->group(kRunningGroup);
  app->add_flag("-q,--quiet", o.quiet, "No progress lines on stderr")->group(kRunningGroup);
  decimal_only<double>(app->add_option("-T,--timeout", o.timeout_seconds,
                                       "Seconds one operation may take before the job is aborted, naming the rank and "
                                       "operation that stalled; 0 disables"))
      ->check(timeout_validator())
      ->group(kRunningGroup);
  if (with_half)
    app->add_option("--half-accumulate", o.half_accumulate,
                    "How float16/bfloat16 are reduced: float32 (widen, reduce in float32, round once to nearest even) "
                    "or native (every combination rounded to 16 bits)");
  app->add_option("--device", o.device,
                  "Where tensors and collective buffers live: cpu, or cuda (one GPU per rank chosen from the rank's "
                  "place on its host, round robin; several ranks may share a GPU)");
  app->add_option("--backend", o.backend,
                  "Communicator: auto (mpi on cpu; on cuda nccl, or mpi when ranks share a GPU and NCCL does not allow "
                  "it), mpi (device buffers staged through pinned host memory unless the MPI is CUDA-aware), nccl");
  decimal_in_range<int>(app->add_option("--inject-stall", o.inject_stall_rank,
                                        "Fault injection: this rank stops before the first operation, to see --timeout at "
                                        "work (a rank of the world; -1 none)"),
                       -1, 1 << 20)
      ->group(kRunningGroup);
  app->add_option("--inject-interrupt", o.inject_interrupt,
                  "Fault injection, to see the partial file and --resume at work: GROUP:N:SIGNAL (e.g. "
                  "bench/tensor:2:TERM). Once rank 0 has journaled N blocks of rows of the table GROUP, it sends "
                  "SIGNAL (TERM, INT or HUP) where a user would (parity's parent, or its own process) and journals "
                  "nothing more until the signal ends the job")
      ->group(kRunningGroup);
}

void add_resume(CLI::App* app, CommonOptions& o) {
  path_only(app->add_option("--resume", o.resume,
                  "Continue an interrupted run from its partial result file (or FILE.journal): rows it finished are "
                  "taken, the rest run; refused when an option outside this group differs from the interrupted run's. "
                  "The result replaces FILE unless --out is given"))
      ->group(kRunningGroup);
}

std::vector<std::string> words_of(const std::string& name) {
  std::vector<std::string> words;
  std::size_t start = 0;
  while (start <= name.size()) {
    const std::size_t end = std::min(name.find(' ', start), name.size());
    words.push_back(name.substr(start, end - start));
    start = end + 1;
  }
  return words;
}

// The command line of every registered command, nested by the words of its name ("bench
// model" under "bench"); each command's CLI::App by command.
std::map<Command*, CLI::App*> build(CLI::App& app) {
  std::map<Command*, CLI::App*> apps;
  for (Command* c : commands()) {
    const std::vector<std::string> words = words_of(c->info().name);
    CLI::App* parent = &app;
    for (std::size_t i = 0; i + 1 < words.size(); ++i) {
      CLI::App* group = nullptr;
      try {
        group = parent->get_subcommand(words[i]);
      } catch (const CLI::OptionNotFound&) {
        group = parent->add_subcommand(words[i], "");
        group->require_subcommand(1);
      }
      if (!c->info().parent_help.empty()) group->description(c->info().parent_help);
      parent = group;
    }
    CLI::App* sub = parent->add_subcommand(words.back(), c->info().help);
    if (c->info().ranks) {
      add_common(sub, c->common(), c->info().half_accumulate);
      add_resume(sub, c->common());
    }
    c->attach(*sub);
    apps[c] = sub;
  }
  return apps;
}

// What the words before the first option name: a command (its name in `words`, the index of the
// word after it in `next`), a group of commands or nothing (command null, `words` all of them),
// or words no command starts with (known false).
struct Named {
  Command* command = nullptr;
  std::string words;
  int next = 1;
  bool known = true;
};

// The commands of `group` ("bench": "collectives, model, ...") or, for none, all of them.
std::string command_names(const std::string& group) {
  std::string out;
  for (const Command* c : commands())
    if (group.empty() || c->info().name.rfind(group + " ", 0) == 0)
      out += (out.empty() ? "" : ", ") + c->info().name.substr(group.empty() ? 0 : group.size() + 1);
  return out;
}

Named named_by(int argc, char** argv) {
  Named out;
  for (int i = 1; i < argc && argv[i][0] != '-'; ++i) {
    out.words += (out.words.empty() ? "" : " ") + std::string(argv[i]);
    out.next = i + 1;
    bool prefix = false;
    for (Command* c : commands()) {
      if (c->info().name == out.words) out.command = c;
      prefix = prefix || c->info().name.rfind(out.words + " ", 0) == 0;
    }
    if (out.command) return out;  // what follows is its arguments
    if (!prefix) {
      out.known = false;
      return out;
    }
  }
  return out;
}

// The command the words were given to, once parsed: the longest name parsed ("bench
// collectives", not "bench"); null when none was.
const std::pair<Command* const, CLI::App*>* command_given(const std::map<Command*, CLI::App*>& apps) {
  const std::pair<Command* const, CLI::App*>* given = nullptr;
  for (const auto& entry : apps)
    if (entry.second->parsed() && (!given || entry.first->info().name.size() > given->first->info().name.size()))
      given = &entry;
  return given;
}

// The first word of the form --name or --name=value that names no option of the command the
// words before it name, said by unexpected_words; empty where there is none. Looked for before
// parsing, so that an unknown option is what is said, not what the parser made of the words
// after it (`report a.h5 --formt html` would read html as a second file). Words after a bare
// `--` are left alone.
std::string unknown_option(const Named& named, const CLI::App& sub, int argc, char** argv) {
  int end = named.next;  // the words up to a bare "--"
  while (end < argc && std::strcmp(argv[end], "--") != 0) ++end;
  // Help asked for is given, whatever else the words hold.
  for (int i = named.next; i < end; ++i)
    if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) return {};
  for (int i = named.next; i < end; ++i) {
    const std::string word = argv[i];
    // "---x" is a value to the parser, not an option.
    if (word.size() <= 2 || word.rfind("--", 0) != 0 || word[2] == '-') continue;
    const std::string name = word.substr(0, word.find('='));
    if (name == "--version") continue;
    if (!sub.get_option_no_throw(name)) return unexpected_words(sub, named.words, {word});
  }
  return {};
}

}  // namespace

// The status, once what the command printed for the user (plan's layouts, list's names, a
// simulated timeline) has reached stdout: a full device or an I/O error fails the run, where a
// reader that went away (| head) only loses the lines it did not want.
int stdout_written(int status) {
  errno = 0;
  const bool flushed = std::fflush(stdout) == 0;
  const int error = errno;
  if (flushed && !std::ferror(stdout)) return status;
  // A pipe or socket whose reader has gone (the write end polls as an error or a hang-up).
  pollfd out{STDOUT_FILENO, POLLOUT, 0};
  if (error == EPIPE || (poll(&out, 1, 0) == 1 && (out.revents & (POLLERR | POLLHUP)) != 0)) return status;
  std::fprintf(stderr, "parity: could not write the output to stdout: %s\n", error ? std::strerror(error) : "a write failed");
  return status == 0 ? kExitFault : status;
}

int main(int argc, char** argv) {
  // Output piped into a reader that stops early (| head) must not end a run by SIGPIPE, leaving
  // its lock, journal and temporary files and no result: the lost lines are only lost lines.
  // (Every rank runs this main too; mpirun's stdout is relayed by the supervisor.)
  std::signal(SIGPIPE, SIG_IGN);
  // Internal: the partial-results writer a rank starts when a signal or a stall ends its run.
  if (argc >= 2 && std::strcmp(argv[1], kWritePartialFlag) == 0) {
    if (argc != 5) {
      std::fprintf(stderr, "parity: usage: parity %s JOURNAL RESULT REASON\n", kWritePartialFlag);
      return kExitUsage;
    }
    return write_partial_results(argv[2], argv[3], argv[4]);
  }
  // `parity help [COMMAND...]` is `parity [COMMAND...] --help`.
  std::vector<char*> words(argv, argv + argc);
  static char help_flag[] = "--help";
  if (argc >= 2 && std::strcmp(argv[1], "help") == 0) {
    while (words.size() > 1 && std::strcmp(words[1], "help") == 0) words.erase(words.begin() + 1);
    words.push_back(help_flag);
    argc = static_cast<int>(words.size());
    argv = words.data();
  }
  CLI::App app{"parity: reference implementation, conformance suite and benchmark of distributed training.\n"
               "Collectives run on real ranks (Open MPI), are checked against exact or float64 results, timed\n"
               "nccl-tests style, and recorded to HDF5; `parity report` draws the results."};
  app.footer(kExitStatusHelp);
  app.require_subcommand(1);
  app.option_defaults()->always_capture_default();
  app.set_version_flag("--version", parity_version() + " (" + git_commit() + ")");
  const std::map<Command*, CLI::App*> apps = build(app);

  // CLI11 words an unknown subcommand as a missing one: it is named here, with the known ones.
  const Named named = named_by(argc, argv);
  if (!named.known) {
    std::fprintf(stderr, "parity: unknown subcommand %s (known: %s)\n", quoted_input(named.words).c_str(),
                 command_names("").c_str());
    return kExitUsage;
  }
  if (named.command) {
    if (const std::string unknown = unknown_option(named, *apps.at(named.command), argc, argv); !unknown.empty()) {
      std::fprintf(stderr, "parity: %s\n", printable_line(unknown).c_str());
      return kExitUsage;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ExtrasError& e) {
    const std::pair<Command* const, CLI::App*>* given = command_given(apps);
    if (!given) {
      std::fprintf(stderr, "parity: %s (see parity --help)\n", printable_line(e.what()).c_str());
      return kExitUsage;
    }
    // Its own leftovers, else those of the groups and the program before its name.
    std::vector<std::string> extras = given->second->remaining();
    if (extras.empty()) extras = app.remaining(true);
    std::fprintf(stderr, "parity: %s\n",
                 printable_line(unexpected_words(*given->second, given->first->info().name, extras)).c_str());
    return kExitUsage;
  } catch (const CLI::ParseError& e) {
    if (std::string(e.what()) == "A subcommand is required") {
      // The words name a group of commands ("bench") or none: say which may follow.
      const std::string& said = named.words;
      const std::string known = command_names(said);
      // An option where a command belongs ("parity --bogus", "parity bench --itr 3"): named.
      for (int i = 1; i < argc; ++i)
        if (argv[i][0] == '-') {
          const std::string where = said.empty() ? "parity" : "parity " + said;
          std::fprintf(stderr, "parity: %s is no option of %s; name %s: %s (see %s --help)\n", quoted_input(argv[i]).c_str(),
                       where.c_str(), said.empty() ? "a command" : "one of its commands", known.c_str(), where.c_str());
          return kExitUsage;
        }
      if (said.empty())
        std::fprintf(stderr, "parity: name a command: %s (see parity --help)\n", known.c_str());
      else
        std::fprintf(stderr, "parity: %s needs one of its commands after it: %s (see parity %s --help)\n",
                     printable_line(said).c_str(), known.c_str(), printable_line(said).c_str());
      return kExitUsage;
    }
    const std::pair<Command* const, CLI::App*>* given = command_given(apps);
    const std::string help = given ? "parity " + given->first->info().name + " --help" : "parity --help";
    // A positional argument missing ("files is required"): named with what it is.
    static const std::regex kMissing("^([a-z_]+) is required$");
    std::smatch missing;
    const std::string what = e.what();
    if (given && std::regex_match(what, missing, kMissing))
      if (const CLI::Option* o = given->second->get_option_no_throw(missing[1].str()); o && o->get_positional()) {
        std::string description = o->get_description();  // "One result file, ..." inside a sentence
        if (description.size() > 1 && std::isupper(static_cast<unsigned char>(description[0])) &&
            std::islower(static_cast<unsigned char>(description[1])))
          description[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(description[0])));
        std::fprintf(stderr, "parity: %s needs %s: %s (see %s)\n", given->first->info().name.c_str(), missing[1].str().c_str(),
                     description.c_str(), help.c_str());
        return kExitUsage;
      }
    std::fprintf(stderr, "parity: %s (see %s)\n", printable_line(in_plain_words(e.what())).c_str(), help.c_str());
    return kExitUsage;
  }
  try {
    for (const auto& [command, sub] : apps)
      if (sub->parsed()) return stdout_written(run_command(*command, argc, argv));
  } catch (const UsageError& e) {
    std::fprintf(stderr, "parity: %s\n", printable_line(e.what()).c_str());
    return kExitUsage;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "parity: %s\n", printable_line(fault_text(e)).c_str());
    return kExitFault;
  }
  return kExitUsage;
}
