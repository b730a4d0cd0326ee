// Name filters, size parsing and sweeps of the command line, and the mpirun line it builds.
#include <gtest/gtest.h>

#include "bench/cli/filter.hpp"
#include "bench/cli/launcher.hpp"
#include "bench/cli/sizes.hpp"
#include "reference/core/error.hpp"
#include "reference/core/provenance.hpp"

#include <unistd.h>
#include <algorithm>

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
  for (const char* bad : {"", "abc", "12Q", "-1", "M", "1.5M"}) EXPECT_THROW(parse_size(bad, "-b"), UsageError) << bad;
  EXPECT_THROW(parse_size("99999999999999999999", "-b"), UsageError);
  EXPECT_EQ(format_size(64u << 20), "64M");
  EXPECT_EQ(format_size(1000), "1000");
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
  const auto hosts = mpirun_command("mpirun", {16, "hosts.txt"}, {"parity"});
  EXPECT_NE(std::find(hosts.begin(), hosts.end(), "hosts.txt"), hosts.end());
  EXPECT_EQ(std::find(hosts.begin(), hosts.end(), "--oversubscribe"), hosts.end());  // the hostfile decides
}

}  // namespace
}  // namespace parity::cli
