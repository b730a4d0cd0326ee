// Name filters, size parsing and sweeps of the command line, and the mpirun line it builds.
#include <gtest/gtest.h>

#include "bench/cli/filter.hpp"
#include "bench/cli/launcher.hpp"
#include "bench/cli/session.hpp"
#include "bench/cli/shared.hpp"
#include "bench/cli/sizes.hpp"
#include "bench/cli/supervisor.hpp"
#include "reference/core/error.hpp"
#include "reference/core/provenance.hpp"
#include "reference/core/text.hpp"
#include "reference/record/output.hpp"

#include <unistd.h>
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace parity::cli {
namespace {

TEST(Filter, GoogleTestSyntax) {
  EXPECT_TRUE(NameFilter("*").matches("all_reduce/ring/float32/sum/3/in_place/exact"));
  EXPECT_TRUE(NameFilter("all_reduce/ring/*").matches("all_reduce/ring/float32/sum/3/in_place/exact"));
  EXPECT_FALSE(NameFilter("all_reduce/ring/*").matches("all_reduce/naive/float32/sum/3/in_place/exact"));
  EXPECT_TRUE(NameFilter("reduce/*:all_reduce/*").matches("all_reduce/x"));
  EXPECT_FALSE(NameFilter("*-*/bfloat16/*").matches("all_reduce/ring/bfloat16/sum/3/in_place/exact"));
  EXPECT_TRUE(NameFilter("-*/bfloat16/*").matches("all_reduce/ring/float32/sum/3/in_place/exact"));
  EXPECT_TRUE(NameFilter("a?c").matches("abc"));
  EXPECT_FALSE(NameFilter("a?c").matches("ac"));
  EXPECT_TRUE(wildcard_match("*ring*exact", "all_reduce/ring/float32/sum/3/in_place/exact"));
  EXPECT_FALSE(wildcard_match("*ring*random", "all_reduce/ring/float32/sum/3/in_place/exact"));
}

TEST(Sizes, Parse) {
  EXPECT_EQ(parse_size("8", "-b"), 8u);
  EXPECT_EQ(parse_size("4K", "-b"), 4096u);
  EXPECT_EQ(parse_size("64M", "-b"), 64u << 20);
  EXPECT_EQ(parse_size("1G", "-b"), std::size_t{1} << 30);
  EXPECT_EQ(parse_size("2MB", "-b"), 2u << 20);
  EXPECT_EQ(parse_size("3t", "-b"), std::size_t{3} << 40);
  EXPECT_EQ(parse_size("5kb", "-b"), 5u << 10);
  EXPECT_EQ(parse_size("16777215T", "-b"), std::size_t{16777215} << 40);  // the largest T that fits 64 bits
  EXPECT_THROW(parse_size("16777216T", "-b"), UsageError);
  for (const char* bad : {"", "abc", "12Q", "-1", "M", "1.5M"}) EXPECT_THROW(parse_size(bad, "-b"), UsageError) << bad;
  EXPECT_THROW(parse_size("99999999999999999999", "-b"), UsageError);
  EXPECT_EQ(format_size(64u << 20), "64M");
  EXPECT_EQ(format_size(1000), "1000");
  EXPECT_EQ(format_size(std::size_t{3} << 40), "3T");
  EXPECT_EQ(format_size(std::size_t{3} << 50), "3072T");
}

TEST(Sizes, Sweeps) {
  SizeSweep s;
  s.min_bytes = 8;
  s.max_bytes = 64;
  s.step_factor = 2;
  EXPECT_EQ(s.sizes(), (std::vector<std::size_t>{8, 16, 32, 64}));
  s.step_factor = 1;
  s.step_bytes = 20;
  EXPECT_EQ(s.sizes(), (std::vector<std::size_t>{8, 28, 48}));
  s.min_bytes = 128;
  EXPECT_THROW(s.sizes(), UsageError);  // inverted
  s.min_bytes = 8;
  s.step_bytes = 0;
  EXPECT_THROW(s.sizes(), UsageError);  // would never end
  // As many sizes as a sweep may hold, and one more.
  s.min_bytes = 1;
  s.step_bytes = 1;
  s.max_bytes = SizeSweep::kMostSizes;
  EXPECT_EQ(s.sizes().size(), SizeSweep::kMostSizes);
  EXPECT_EQ(s.sizes().back(), SizeSweep::kMostSizes);
  s.max_bytes = SizeSweep::kMostSizes + 1;
  EXPECT_THROW(s.sizes(), UsageError);
  s.max_bytes = std::size_t{1} << 30;  // a billion sizes: refused before they are listed
  EXPECT_THROW(s.sizes(), UsageError);
}

TEST(Launcher, MpirunLine) {
  const auto line = mpirun_command("/usr/bin/mpirun", {4, ""}, {"/x/parity", "check"});
  ASSERT_GE(line.size(), 5u);
  EXPECT_EQ(line[0], "/usr/bin/mpirun");
  EXPECT_EQ(line[1], "-n");
  EXPECT_EQ(line[2], "4");
  EXPECT_EQ(line[line.size() - 2], "/x/parity");
  const bool oversubscribed = std::find(line.begin(), line.end(), "--oversubscribe") != line.end();
  EXPECT_EQ(oversubscribed, 4 > parity::online_cores());
  const bool as_root = std::find(line.begin(), line.end(), "--allow-run-as-root") != line.end();
  EXPECT_EQ(as_root, geteuid() == 0);
  // Passed to the ranks: one BLAS thread (no pool per rank), and that they tell parity how the
  // job ends, in lines as written (no tag, time stamp or XML, not sent to files).
  for (const std::string& variable : {std::string("OPENBLAS_NUM_THREADS=1"), std::string(kTellStatusVariable) + "=1"}) {
    const auto at = std::find(line.begin(), line.end(), variable);
    ASSERT_NE(at, line.end()) << variable;
    EXPECT_EQ(*(at - 1), "-x") << variable;
  }
  for (const auto& [setting, value] : std::vector<std::pair<std::string, std::string>>{
           {"orte_tag_output", "0"}, {"orte_timestamp_output", "0"}, {"orte_xml_output", "0"}, {"orte_output_filename", ""}}) {
    const auto at = std::find(line.begin(), line.end(), setting);
    ASSERT_NE(at, line.end()) << setting;
    EXPECT_EQ(*(at - 1), "--mca") << setting;
    EXPECT_EQ(*(at + 1), value) << setting;
  }
  const auto hosts = mpirun_command("mpirun", {16, "hosts.txt"}, {"parity"});
  EXPECT_NE(std::find(hosts.begin(), hosts.end(), "hosts.txt"), hosts.end());
  EXPECT_EQ(std::find(hosts.begin(), hosts.end(), "--oversubscribe"), hosts.end());  // the hostfile decides
  // One local rank is bound to no core, as a process started alone; more are left to Open MPI.
  const auto bound = [](const std::vector<std::string>& words) {
    const auto at = std::find(words.begin(), words.end(), "--bind-to");
    return at == words.end() || at + 1 == words.end() ? std::string() : *(at + 1);
  };
  EXPECT_EQ(bound(mpirun_command("mpirun", {1, ""}, {"parity"})), "none");
  EXPECT_EQ(bound(line), "");
  EXPECT_EQ(bound(mpirun_command("mpirun", {1, "hosts.txt"}, {"parity"})), "");
}

// An output onto a file the command reads or writes otherwise: refused by name, through
// another spelling of it, or as a hard link to it; other files and empty names pass.
TEST(Launcher, OutputOntoAnotherOfTheCommandsFiles) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("parity-onto-" + std::to_string(getpid()));
  fs::create_directories(dir);
  const std::string hosts = (dir / "hosts").string(), link = (dir / "link").string();
  { std::FILE* f = std::fopen(hosts.c_str(), "w"); ASSERT_NE(f, nullptr); std::fclose(f); }
  fs::create_hard_link(hosts, link);
  try {
    refuse_output_onto("--out", hosts, {{"--hostfile", hosts}});
    FAIL() << "the hostfile itself was taken";
  } catch (const UsageError& e) {
    EXPECT_EQ(std::string(e.what()), "--out '" + hosts + "' is the file --hostfile reads; choose another --out");
  }
  EXPECT_THROW(refuse_output_onto("--out", (dir / "." / "hosts").string(), {{"--hostfile", hosts}}), UsageError);
  EXPECT_THROW(refuse_output_onto("--out", link, {{"--hostfile", hosts}}), UsageError);
  EXPECT_THROW(refuse_output_onto("--write-csv", (dir / "new.h5").string(), {{"--out", (dir / "new.h5").string()}}, "names"),
               UsageError);  // an output not made yet
  EXPECT_NO_THROW(refuse_output_onto("--out", (dir / "other").string(), {{"--hostfile", hosts}, {"--schedule", ""}}));
  EXPECT_NO_THROW(refuse_output_onto("--out", "", {{"--hostfile", hosts}}));
  fs::remove_all(dir);
}

// Runs started in the same second in one folder would share a default result name: one that a
// file holds, or another run, gives way to NAME-2.h5, NAME-3.h5, ...
TEST(Launcher, DefaultResultNamesGiveWayToTakenOnes) {
  namespace fs = std::filesystem;
  const fs::path folder = fs::temp_directory_path() / ("parity-default-names-" + std::to_string(getpid()));
  fs::create_directories(folder);
  const fs::path before = fs::current_path();
  fs::current_path(folder);
  struct Back {  // to the folder the other tests run in, however this one ends
    fs::path to, made;
    ~Back() {
      std::error_code ec;
      fs::current_path(to, ec);
      fs::remove_all(made, ec);
    }
  } back{before, folder};
  bool within_one_second = false;
  for (int attempt = 0; attempt < 5 && !within_one_second; ++attempt) {
    const std::string first = default_output_path("names");
    const std::string stem = first.substr(0, first.size() - 3);
    std::ofstream(first) << "a finished run's file";
    std::string second_name, third_name, fifth_name, again_name;
    std::unique_ptr<record::OutputLock> second = lock_default_output("names", second_name);
    const std::unique_ptr<record::OutputLock> third = lock_default_output("names", third_name);
    fs::create_directory(stem + "-4.h5");
    const std::unique_ptr<record::OutputLock> fifth = lock_default_output("names", fifth_name);
    second.reset();  // that run ends without a file: its name is free again
    const std::unique_ptr<record::OutputLock> again = lock_default_output("names", again_name);
    fs::create_directory(stem + "-6.h5.lock");  // a lock no run can open (as another user's)
    std::string seventh_name;
    const std::unique_ptr<record::OutputLock> seventh = lock_default_output("names", seventh_name);
    within_one_second = default_output_path("names") == first;
    if (!within_one_second) continue;  // the clock's second turned: the names differ anyway
    EXPECT_EQ(second_name, stem + "-2.h5");  // the file holds the first
    EXPECT_EQ(third_name, stem + "-3.h5");   // a run holds the second
    EXPECT_EQ(fifth_name, stem + "-5.h5");   // a folder holds the fourth
    EXPECT_EQ(again_name, stem + "-2.h5");
    EXPECT_EQ(seventh_name, stem + "-7.h5");  // the sixth's lock cannot be opened
    EXPECT_FALSE(fs::exists(second_name));   // a name is taken by its lock, the file made later
  }
  EXPECT_TRUE(within_one_second);
}

// Ranks on this host alone: refused past kMaxRanksPerCore per core or past the memory a rank
// needs before any work, with the figures; a hostfile or unknown figures refuse nothing.
TEST(Launcher, LocalRanksRefusedWithFigures) {
  const unsigned long long gib = 1ull << 30;
  EXPECT_EQ(local_ranks_problem(4, 2, 24 * gib), "");
  EXPECT_EQ(local_ranks_problem(2 * kMaxRanksPerCore, 2, 24 * gib), "");
  const std::string cores = local_ranks_problem(2 * kMaxRanksPerCore + 1, 2, 1000 * gib);
  EXPECT_NE(cores.find("--np 33 is too many ranks for this host: 16.5 ranks per core on this host's 2 cores (at most "
                       "16 are started), and at least 3.1 GiB (96 MiB a rank before any work) against 1000.0 GiB"),
            std::string::npos)
      << cores;
  const std::string memory = local_ranks_problem(100000, 0, 24 * gib);  // cores unknown: memory decides
  EXPECT_NE(memory.find("--np 100000 is too many ranks for this host: at least 9375.0 GiB (96 MiB a rank before any "
                        "work) against 24.0 GiB available"),
            std::string::npos)
      << memory;
  // Exactly at the memory: allowed; one rank more: refused.
  const unsigned long long fits = 10 * kRankBaseBytes;
  EXPECT_EQ(local_ranks_problem(10, 0, fits), "");
  EXPECT_NE(local_ranks_problem(11, 0, fits), "");
  EXPECT_EQ(local_ranks_problem(100000, 0, 0), "");  // nothing known: mpirun decides
  EXPECT_NO_THROW(check_local_ranks({100000, "hosts.txt"}));
  EXPECT_THROW(check_local_ranks({1 << 20, ""}), UsageError);
}

// User input in messages: nothing reaches the terminal as a control byte, a NUL does not cut
// the message, a long token is cut with its length said, and a long line keeps its end.
TEST(Text, QuotedEscapesControlBytesAndCuts) {
  EXPECT_EQ(quoted_input("1F0"), "'1F0'");
  EXPECT_EQ(quoted_input("\x1b]0;pwned\x07\x1b[2J"), "'\\x1b]0;pwned\\x07\\x1b[2J'");
  EXPECT_EQ(quoted_input(std::string("a\0b", 3)), "'a\\x00b'");
  EXPECT_EQ(quoted_input("caf\xc3\xa9"), "'caf\xc3\xa9'");    // printable UTF-8 kept
  EXPECT_EQ(quoted_input("\xc2\x9b" "2J"), "'\\xc2\\x9b2J'");  // C1 CSI in UTF-8: escaped
  EXPECT_EQ(quoted_input("\x9b" "2J"), "'\\x9b2J'");           // an 8-bit CSI: escaped
  EXPECT_EQ(quoted_input("\xc3"), "'\\xc3'");                  // a cut character
  EXPECT_EQ(quoted_input(std::string(10'000'000, 'A'), 8), "'AAAAAAAA'... (+9999992 bytes)");
  EXPECT_EQ(quoted_input("ab\xc3\xa9", 3), "'ab'... (+2 bytes)");  // never half a character
}

TEST(Text, PrintableLineKeepsTheReasonAtItsEnd) {
  EXPECT_EQ(printable_line("file a\nb.h5: gone"), "file a\\x0ab.h5: gone");
  const std::string line = "bad " + std::string(5'000'000, 'x') + " is not a number";
  const std::string shown = printable_line(line, 100);
  EXPECT_LE(shown.size(), 160u);
  EXPECT_EQ(shown.rfind("bad xxx", 0), 0u) << shown;
  EXPECT_NE(shown.find(" is not a number"), std::string::npos) << shown;
  EXPECT_NE(shown.find("left out"), std::string::npos) << shown;
  for (char c : printable_line(std::string("\x00\x01\x7f\x1b", 4))) EXPECT_TRUE(c >= 0x20 && c < 0x7f) << int(c);
}

// Numbers from the command line and from plan's key=value pairs: plain decimal only.
TEST(Text, PlainDecimal) {
  for (const char* whole : {"0", "8", "010", "+5", "-12", "2147483648"}) EXPECT_TRUE(plain_decimal(whole, false)) << whole;
  for (const char* not_whole : {"", "+", "-", "0x10", " 8", "8 ", "1e3", "2.0", "1_0", "0b1", "inf", "nan", "\xef\xbc\x98"})
    EXPECT_FALSE(plain_decimal(not_whole, false)) << not_whole;
  for (const char* real : {"2.5", ".5", "5.", "1e3", "1.5E-3", "-0.0", "+7"}) EXPECT_TRUE(plain_decimal(real, true)) << real;
  for (const char* not_real : {".", "e3", "1e", "1e+", "0x1p3", " 1.0", "1.0 ", "nan", "inf", "1.2.3", "1e3.5"})
    EXPECT_FALSE(plain_decimal(not_real, true)) << not_real;
  EXPECT_TRUE(plain_decimal("inf", true, true));
  EXPECT_TRUE(plain_decimal("-inf", true, true));
  EXPECT_FALSE(plain_decimal("infinity", true, true));
  EXPECT_FALSE(plain_decimal("nan", true, true));
}

TEST(Text, WithoutLeadingZeros) {
  const std::pair<const char*, const char*> cases[] = {
      {"010", "10"}, {"0", "0"}, {"000", "0"}, {"7", "7"}, {"100", "100"}, {"-007", "-7"},
      {"+010", "+10"}, {"-0", "-0"}, {"-000", "-0"}, {"", ""}, {"-", "-"}, {"0010020", "10020"}};
  for (const auto& [text, want] : cases) EXPECT_EQ(without_leading_zeros(text), want) << text;
}

}  // namespace
}  // namespace parity::cli
