// The journal's records read back as they were written (every attribute type at its full
// width, column units, a whole table after rows carried from a resumed file), the files beside a
// result that are parity's and those that are not, the table's column names, and the array
// files' reads at the edges of a dataset.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "reference/core/error.hpp"
#include "reference/record/arrays.hpp"
#include "reference/record/journal.hpp"
#include "reference/record/output.hpp"
#include "reference/record/results_file.hpp"
#include "reference/record/table.hpp"

namespace parity::record {
namespace {

namespace fs = std::filesystem;

class JournalTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() / ("parity-journal-test-" + std::to_string(getpid()) + "-" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  fs::path dir_;
};

// n rows: case-i, i, 0.5 i (the error column in "s").
Table rows_by_number(int n) {
  Table t("rows by number");
  for (int i = 0; i < n; ++i) {
    t.str("case").push_back("case-" + std::to_string(i));
    t.i64("number").push_back(i);
    t.f64("error", "s").push_back(0.5 * i);
  }
  return t;
}

void write_text(const fs::path& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }
std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Attributes past 32 bits, negative ones, and each other type come back as they were set.
TEST_F(JournalTest, AttributesComeBackAtTheirFullWidth) {
  const fs::path path = dir_ / "out.h5.journal";
  const std::vector<std::pair<std::string, Attribute>> set = {
      {"big", std::int64_t{1} << 40},
      {"negative", -(std::int64_t{1} << 33) - 5},
      {"small", std::int64_t{7}},
      {"real", 0.1},
      {"text", std::string("a line")},
      {"names", std::vector<std::string>{"x", "", "z"}},
  };
  {
    Journal journal(path);
    for (const auto& [name, value] : set) journal.attribute("/bench/x", name, value);
  }
  const JournalReading reading = read_journal(path);
  EXPECT_EQ(reading.ignored_bytes, 0u);
  for (const auto& [name, value] : set) {
    const Attribute* got = reading.contents.attribute("/bench/x", name);
    ASSERT_NE(got, nullptr) << name;
    EXPECT_EQ(*got, value) << name;
  }
}

// Rows journaled one by one keep their columns' units (a partial file written from the journal
// says what its numbers are in).
TEST_F(JournalTest, RowsKeepTheirColumnsUnits) {
  const fs::path path = dir_ / "out.h5.journal";
  const Table all = rows_by_number(3);
  {
    Journal journal(path);
    journal.rows("/check/x", all, 0);
  }
  const JournalReading reading = read_journal(path);
  const Contents::Group* group = reading.contents.find("/check/x");
  ASSERT_NE(group, nullptr);
  ASSERT_TRUE(group->table.has_value());
  ASSERT_EQ(group->table->columns().size(), 3u);
  EXPECT_EQ(group->table->columns()[0].unit, "");
  EXPECT_EQ(group->table->columns()[2].name, "error");
  EXPECT_EQ(group->table->columns()[2].unit, "s");
  EXPECT_EQ(group->table->get_f64("error"), (std::vector<double>{0.0, 0.5, 1.0}));
}

// A write cut short leaves a torn last record, read as the end of the journal; a record whole in
// length whose bytes changed is damage, and says where (the rows after it run again).
TEST_F(JournalTest, TornTailAndDamageAreToldApart) {
  const fs::path path = dir_ / "out.h5.journal";
  const Table all = rows_by_number(3);
  std::vector<std::uintmax_t> starts;
  {
    Journal journal(path);
    for (const char* group : {"/check/a", "/check/b", "/check/c"}) {
      starts.push_back(fs::file_size(path));
      journal.rows(group, all, 0);
    }
  }
  const std::string whole = read_text(path);
  const auto reading_of = [&](const std::string& bytes) {
    write_text(path, bytes);
    return read_journal(path);
  };
  // The journal with one byte changed: `value` or, when negative, the byte with bit 6 flipped.
  const auto changed = [&](std::uintmax_t at, int value) {
    std::string bytes = whole;
    bytes[at] = static_cast<char>(value >= 0 ? value : bytes[at] ^ 0x40);
    return reading_of(bytes);
  };
  const JournalReading torn = reading_of(whole.substr(0, whole.size() - 3));
  EXPECT_FALSE(torn.damaged_at.has_value());
  EXPECT_GT(torn.ignored_bytes, 0u);
  // A byte inside the second record, and (the record's length's high byte) a length that says
  // more than the file holds with whole records after it: damage, not a torn tail, both.
  for (const JournalReading& damaged : {changed(starts[1] + 12, -1), changed(starts[1] + 3, 0x7f)}) {
    ASSERT_TRUE(damaged.damaged_at.has_value());
    EXPECT_EQ(*damaged.damaged_at, starts[1]);
    EXPECT_NE(damaged.contents.find("/check/a"), nullptr);
    EXPECT_EQ(damaged.contents.find("/check/b"), nullptr);
    EXPECT_EQ(damaged.contents.find("/check/c"), nullptr);
  }
  // The same length on the last record is a torn tail.
  const JournalReading tail = changed(starts[2] + 3, 0x7f);
  EXPECT_FALSE(tail.damaged_at.has_value());
  EXPECT_NE(tail.contents.find("/check/b"), nullptr);
  EXPECT_EQ(tail.contents.find("/check/c"), nullptr);
  // A record that passes its check but is of no kind parity writes is damage too.
  std::string foreign = whole.substr(0, starts[1]);
  const std::string payload = "Z";
  std::uint32_t sum = 2166136261u;  // FNV-1a, the journal's check
  for (const char c : payload) sum = (sum ^ static_cast<unsigned char>(c)) * 16777619u;
  const std::uint32_t length = static_cast<std::uint32_t>(payload.size());
  foreign.append(reinterpret_cast<const char*>(&length), 4).append(reinterpret_cast<const char*>(&sum), 4).append(payload);
  const JournalReading unknown = reading_of(foreign + whole.substr(starts[1]));
  ASSERT_TRUE(unknown.damaged_at.has_value());
  EXPECT_EQ(*unknown.damaged_at, starts[1]);
}

// A resumed run took two of the four rows it carried, then wrote its table whole: the table is
// what it wrote, and the carried rows it did not take are not added to it again.
TEST_F(JournalTest, AWholeTableAfterCarriedRowsIsTheTableWritten) {
  const fs::path path = dir_ / "out.h5.journal";
  const Table carried = rows_by_number(4);
  const Table whole = rows_by_number(2);
  {
    Journal journal(path);
    journal.carried("/check/x", carried);
    journal.rows({{"/check/x", &whole, 0, {0, 1}}});
    journal.table("/check/x", whole);
  }
  const JournalReading reading = read_journal(path);
  const Contents::Group* group = reading.contents.find("/check/x");
  ASSERT_NE(group, nullptr);
  EXPECT_TRUE(group->complete);
  ASSERT_TRUE(group->table.has_value());
  EXPECT_EQ(group->table->get_str("case"), (std::vector<std::string>{"case-0", "case-1"}));
}

// A result may not take the name of a file parity keeps beside one.
TEST_F(JournalTest, SideFileNamesAreNotResultNames) {
  for (const char* name : {"out.h5.journal", "out.h5.lock", "out.h5.partial-123", "x.partial-notes.h5"})
    EXPECT_THROW(check_output_path(dir_ / name, true), UsageError) << name;
  EXPECT_NO_THROW(check_output_path(dir_ / "journal.h5", false));
  EXPECT_NO_THROW(check_output_path(dir_ / "out.lock.h5", false));
}

// Files beside a result under the names of its journal, lock or temporaries that parity did not
// write are kept, --force or not; those of a run that died are parity's to replace.
TEST_F(JournalTest, FilesBesideAResultThatAreNotParitysAreKept) {
  write_text(dir_ / "a.h5.journal", "my notes");
  EXPECT_THROW(ResultsFile(dir_ / "a.h5", true), UsageError);
  EXPECT_THROW(ResultsFile(dir_ / "a.h5", false), UsageError);
  EXPECT_EQ(read_text(dir_ / "a.h5.journal"), "my notes");

  write_text(dir_ / "e.h5.journal", "");  // a journal whose run was killed before its first bytes
  EXPECT_TRUE(is_journal(dir_ / "e.h5.journal"));
  EXPECT_EQ(read_journal(dir_ / "e.h5.journal").contents.groups.size(), 0u);
  { ResultsFile file(dir_ / "e.h5", false); }  // nothing finished: nothing to keep
  EXPECT_FALSE(fs::exists(dir_ / "e.h5.journal"));

  write_text(dir_ / "b.h5.lock", "lockish");
  EXPECT_THROW(OutputLock(dir_ / "b.h5"), UsageError);
  EXPECT_EQ(read_text(dir_ / "b.h5.lock"), "lockish");
  write_text(dir_ / "c.h5.lock", "12345\n");  // a run killed outright: its pid
  { OutputLock lock(dir_ / "c.h5"); }
  EXPECT_FALSE(fs::exists(dir_ / "c.h5.lock"));

  write_text(dir_ / "d.h5.partial-99999", "data");
  write_text(dir_ / "d.h5.partial-notes", "");
  write_text(dir_ / "d.h5.partial-12345", "");                              // died before writing
  write_text(dir_ / "d.h5.partial-23456", std::string("\x89HDF\r\n\x1a\n", 8) + "rest");  // died while writing
  { OutputLock lock(dir_ / "d.h5"); }
  EXPECT_EQ(read_text(dir_ / "d.h5.partial-99999"), "data");
  EXPECT_TRUE(fs::exists(dir_ / "d.h5.partial-notes"));
  EXPECT_FALSE(fs::exists(dir_ / "d.h5.partial-12345"));
  EXPECT_FALSE(fs::exists(dir_ / "d.h5.partial-23456"));
}

// A column name that would be a path in the file, or its "." (the group itself), is refused.
TEST(TableNames, PathLikeColumnNamesAreRefused) {
  for (const char* name : {".", "a/b", "", "/"}) {
    Table t("t");
    EXPECT_THROW(t.f64(name), Error) << "'" << name << "'";
  }
  Table t("t");
  EXPECT_NO_THROW(t.f64(".a"));
  EXPECT_NO_THROW(t.f64("a.b"));
}

// Reads of a dataset's elements: the empty range at its end and any empty read of an empty
// dataset are taken; a range past the end is refused in one line.
TEST_F(JournalTest, ArrayReadsAtTheEdgesOfADataset) {
  const fs::path path = dir_ / "arrays.h5";
  const std::vector<float> values = {1.5f, 2.5f, 3.5f};
  {
    ArrayWriter writer(path.string() + ".tmp", "parity-test", 1);
    writer.write("/full", DataType::float32, values.data(), values.size());
    writer.write("/empty", DataType::float32, values.data(), 0);
    writer.commit_as(path);
  }
  const ArrayReader reader(path, "parity-test", 1);
  std::vector<float> out(3, -1.0f);
  EXPECT_NO_THROW(reader.read("/full", DataType::float32, 3, 0, out.data()));
  EXPECT_NO_THROW(reader.read("/empty", DataType::float32, 0, 0, out.data()));
  EXPECT_EQ(out, (std::vector<float>{-1.0f, -1.0f, -1.0f}));
  reader.read("/full", DataType::float32, 1, 2, out.data());
  EXPECT_EQ(out[0], 2.5f);
  EXPECT_EQ(out[1], 3.5f);
  EXPECT_THROW(reader.read("/full", DataType::float32, 2, 2, out.data()), UsageError);
  EXPECT_THROW(reader.read("/full", DataType::float32, 4, 0, out.data()), UsageError);
  EXPECT_THROW(reader.read("/empty", DataType::float32, 0, 1, out.data()), UsageError);
}

}  // namespace
}  // namespace parity::record
