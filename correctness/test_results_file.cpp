// Tests of results files: table and attribute round trips, the temporary-then-rename protocol,
// output path checks, and inspect()'s refusals of files that are not parity results.
#include "reference/record/results_file.hpp"
#include "reference/record/journal.hpp"
#include "reference/record/output.hpp"
#include "reference/record/partial.hpp"

#include <gtest/gtest.h>
#include <hdf5.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "reference/core/error.hpp"

namespace fs = std::filesystem;
using parity::Error;
using parity::UsageError;
using namespace parity::record;  // NOLINT: the whole record API is under test here
using parity::record::check_output_path;
using parity::record::FileInfo;
using parity::record::inspect;
using parity::record::read_table;
using parity::record::ResultsFile;
using parity::record::Table;

namespace {

// Every test gets its own directory, so tests can run in parallel (ctest -j) and leave nothing.
class ResultsFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    static std::atomic<int> counter{0};
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           ("parity-results-test-" + std::to_string(getpid()) + "-" + info->name() + "-" +
            std::to_string(counter++));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  }
  void TearDown() override {
    // Any identifier still open here was leaked by the code under test (or by a helper here).
    EXPECT_EQ(H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_ALL), 0);
    std::error_code ec;
    // A test may have taken away write permission; give it back so the directory can go.
    fs::permissions(dir_, fs::perms::owner_all, fs::perm_options::add, ec);
    fs::remove_all(dir_, ec);
  }
  fs::path dir_;
};

fs::path partial_of(const fs::path& path) {
  fs::path partial = path;
  partial += ".partial-" + std::to_string(getpid());
  return partial;
}

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Runs `body` and returns the UsageError's message, failing the test if none was thrown.
std::string usage_error_of(const std::function<void()>& body) {
  try {
    body();
  } catch (const UsageError& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected UsageError, got another exception: " << e.what();
    return "";
  }
  ADD_FAILURE() << "expected UsageError, nothing was thrown";
  return "";
}

void expect_one_line(const std::string& message) {
  EXPECT_FALSE(message.empty());
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
}

// ---- direct HDF5 access, independent of the code under test --------------------------------------

struct H5 {
  hid_t id;
  herr_t (*close)(hid_t);
  ~H5() {
    if (id >= 0) close(id);
  }
};

bool is_vlen_utf8(hid_t type) {
  return H5Tget_class(type) == H5T_STRING && H5Tis_variable_str(type) > 0 &&
         H5Tget_cset(type) == H5T_CSET_UTF8;
}

hssize_t element_count(hid_t attribute) {
  H5 space{H5Aget_space(attribute), H5Sclose};
  return H5Sget_simple_extent_npoints(space.id);
}

int rank_of(hid_t attribute) {
  H5 space{H5Aget_space(attribute), H5Sclose};
  return H5Sget_simple_extent_ndims(space.id);
}

std::vector<std::string> attribute_strings(hid_t attribute) {
  H5 type{H5Aget_type(attribute), H5Tclose};
  EXPECT_TRUE(is_vlen_utf8(type.id));
  const hssize_t n = element_count(attribute);
  std::vector<char*> pointers(static_cast<std::size_t>(std::max<hssize_t>(n, 1)), nullptr);
  EXPECT_GE(H5Aread(attribute, type.id, pointers.data()), 0);
  std::vector<std::string> values;
  for (hssize_t i = 0; i < n; ++i) values.emplace_back(pointers[i] ? pointers[i] : "");
  H5 space{H5Aget_space(attribute), H5Sclose};
  H5Dvlen_reclaim(type.id, space.id, H5P_DEFAULT, pointers.data());
  return values;
}

template <typename T>
std::vector<T> attribute_numbers(hid_t attribute, H5T_class_t expected_class) {
  H5 type{H5Aget_type(attribute), H5Tclose};
  EXPECT_EQ(H5Tget_class(type.id), expected_class);
  EXPECT_EQ(H5Tget_size(type.id), 8u);
  const hssize_t n = element_count(attribute);
  std::vector<T> values(static_cast<std::size_t>(std::max<hssize_t>(n, 1)));
  EXPECT_GE(H5Aread(attribute, std::is_same_v<T, double> ? H5T_NATIVE_DOUBLE : H5T_NATIVE_INT64,
                    values.data()),
            0);
  values.resize(static_cast<std::size_t>(n));
  return values;
}

// Opens `object`'s attribute `name` in the file and hands it to `check`.
void with_attribute(const fs::path& path, const std::string& object, const std::string& name,
                    const std::function<void(hid_t)>& check) {
  H5 file{H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose};
  ASSERT_GE(file.id, 0);
  ASSERT_GT(H5Aexists_by_name(file.id, object.c_str(), name.c_str(), H5P_DEFAULT), 0)
      << object << " has no attribute " << name;
  H5 attribute{H5Aopen_by_name(file.id, object.c_str(), name.c_str(), H5P_DEFAULT, H5P_DEFAULT),
               H5Aclose};
  ASSERT_GE(attribute.id, 0);
  check(attribute.id);
}

// Writes an HDF5 file that is not a parity result file, with optional root `schema` string.
void write_foreign_hdf5(const fs::path& path, const char* schema = nullptr) {
  H5 file{H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), H5Fclose};
  ASSERT_GE(file.id, 0);
  const hsize_t dims[1] = {3};
  H5 space{H5Screate_simple(1, dims, nullptr), H5Sclose};
  H5 dataset{H5Dcreate2(file.id, "data", H5T_IEEE_F64LE, space.id, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
             H5Dclose};
  const double values[3] = {1, 2, 3};
  ASSERT_GE(H5Dwrite(dataset.id, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, values), 0);
  if (schema != nullptr) {
    H5 type{H5Tcopy(H5T_C_S1), H5Tclose};
    H5Tset_size(type.id, H5T_VARIABLE);
    H5 scalar{H5Screate(H5S_SCALAR), H5Sclose};
    H5 attribute{H5Acreate2(file.id, "schema", type.id, scalar.id, H5P_DEFAULT, H5P_DEFAULT), H5Aclose};
    ASSERT_GE(H5Awrite(attribute.id, type.id, &schema), 0);
  }
}

// A table exercising all three column types, awkward values included.
Table sample_table() {
  Table table("sample: every column type");
  table.str("name") = {"all_reduce", "", "µs ünïcödé", "x"};
  table.i64("size_bytes", "B") = {0, -1, std::numeric_limits<std::int64_t>::max(),
                                  std::numeric_limits<std::int64_t>::min()};
  table.f64("time_us", "us") = {1.5, -0.0, std::numeric_limits<double>::infinity(),
                                std::numeric_limits<double>::quiet_NaN()};
  table.i64("unitless") = {1, 2, 3, 4};
  return table;
}

void expect_same_doubles(const std::vector<double>& a, const std::vector<double>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(b[i])) {
      EXPECT_TRUE(std::isnan(a[i])) << i;
    } else {
      EXPECT_EQ(a[i], b[i]) << i;
      EXPECT_EQ(std::signbit(a[i]), std::signbit(b[i])) << i;
    }
  }
}

void expect_same_tables(const Table& got, const Table& want) {
  EXPECT_EQ(got.description(), want.description());
  ASSERT_EQ(got.columns().size(), want.columns().size());
  EXPECT_EQ(got.rows(), want.rows());
  for (std::size_t c = 0; c < want.columns().size(); ++c) {
    const auto& g = got.columns()[c];
    const auto& w = want.columns()[c];
    EXPECT_EQ(g.name, w.name);
    EXPECT_EQ(g.unit, w.unit) << w.name;
    ASSERT_EQ(g.values.index(), w.values.index()) << w.name;
    if (const auto* doubles = std::get_if<std::vector<double>>(&w.values)) {
      expect_same_doubles(std::get<std::vector<double>>(g.values), *doubles);
    } else {
      EXPECT_EQ(g.values, w.values) << w.name;
    }
  }
}

// Writes a committed file holding the sample table and a subcommand.
void write_good_file(const fs::path& path) {
  ResultsFile file(path, false);
  file.set_attribute("/", "subcommand", std::string("bench collectives"));
  file.write_table("/bench/collectives", sample_table());
  file.commit();
}

// ---- Table ------------------------------------------------------------------------------------

TEST(Table, ColumnsKeepOrderAndType) {
  Table table("t");
  table.f64("b", "us").push_back(1.0);
  table.i64("a").push_back(2);
  table.str("c").push_back("x");
  table.f64("b").push_back(3.0);  // same column again, unit not repeated
  ASSERT_EQ(table.columns().size(), 3u);
  EXPECT_EQ(table.columns()[0].name, "b");
  EXPECT_EQ(table.columns()[0].unit, "us");
  EXPECT_EQ(table.columns()[0].size(), 2u);
  EXPECT_EQ(table.columns()[1].name, "a");
  EXPECT_EQ(table.columns()[2].name, "c");
  EXPECT_THROW(table.i64("b"), Error);   // another type
  EXPECT_THROW(table.str("a"), Error);
  EXPECT_THROW(table.f64("b", "ms"), Error);  // another unit
  EXPECT_THROW(table.f64("x/y"), Error);      // would be a path in the file
  EXPECT_THROW(table.rows(), Error);          // b has 2 values, a and c have 1
  table.i64("a").push_back(4);
  table.str("c").push_back("");
  EXPECT_EQ(table.rows(), 2u);
  EXPECT_EQ(Table().rows(), 0u);
}

// A column longer than the first is ragged too, wherever it stands (rows() counts by the first).
TEST(Table, ALaterColumnLongerThanTheFirstIsRagged) {
  Table table("t");
  table.i64("a") = {1};
  table.f64("b") = {1.0, 2.0};
  EXPECT_THROW(table.rows(), Error);
}

TEST(Table, PutTakesTheColumnsTypeAndUnit) {
  const TableSpec spec{"/t", "t",
                       {{"n", ColumnType::int64}, {"x", ColumnType::float64, "s"}, {"s", ColumnType::string},
                        {"m", ColumnType::int64}, {"y", ColumnType::float64, "B"}, {"u", ColumnType::string}}};
  Table table(spec);
  const std::size_t big = 5;
  // Out of the schema's order, each value to its own column; a whole number for reals is a real.
  table.put({{"y", 2}, {"u", "b"}, {"x", 3}, {"m", -4}, {"n", big}, {"s", "a"}});
  table.put({{"n", true}, {"x", 0.25f}, {"s", std::string("c")}, {"m", 'A'}, {"y", 1.5}, {"u", std::string_view("d")}});
  EXPECT_EQ(table.rows(), 2u);
  EXPECT_EQ(table.get_i64("n"), (std::vector<std::int64_t>{5, 1}));
  EXPECT_EQ(table.get_i64("m"), (std::vector<std::int64_t>{-4, 65}));
  EXPECT_EQ(table.get_f64("x"), (std::vector<double>{3.0, 0.25}));
  EXPECT_EQ(table.get_f64("y"), (std::vector<double>{2.0, 1.5}));
  EXPECT_EQ(table.get_str("s"), (std::vector<std::string>{"a", "c"}));
  EXPECT_EQ(table.get_str("u"), (std::vector<std::string>{"b", "d"}));
  EXPECT_EQ(table.columns()[4].unit, "B");  // the schema's units stay
  // A refused value refuses its whole row, wherever it stands in it.
  EXPECT_THROW(table.put({{"n", 1}, {"m", 1.5}}), Error);  // a real for whole numbers
  EXPECT_THROW(table.put({{"x", 1.0}, {"s", 1}}), Error);
  EXPECT_THROW(table.put({{"s", "z"}, {"x", "1"}}), Error);
  EXPECT_THROW(table.put({{"n", 1}, {"other", 1}}), Error);  // not in the schema
  EXPECT_THROW(table.put({{"n", 1}, {"m", 2}, {"n", 3}}), Error);  // a name twice
  for (const Column& c : table.columns()) EXPECT_EQ(c.size(), 2u) << c.name;

  Table free("free");  // a free table's new column takes the value's type
  free.put({{"i", 7}, {"r", 7.0}, {"t", "7"}});
  EXPECT_THROW(free.put({{"j", 1}, {"i", 1.5}}), Error);
  EXPECT_EQ(free.columns().size(), 3u);  // the refused row made no column
  EXPECT_EQ(free.get_i64("i"), std::vector<std::int64_t>{7});
  EXPECT_EQ(free.get_f64("r"), std::vector<double>{7.0});
  EXPECT_EQ(free.get_str("t"), std::vector<std::string>{"7"});
}

TEST_F(ResultsFileTest, ASchemasTableGoesToItsGroup) {
  const TableSpec spec{"/bench/schema_group", "a table", {{"n", ColumnType::int64}}};
  Table table(spec);
  table.put({{"n", 3}});
  const fs::path path = dir_ / "schema.h5";
  {
    ResultsFile file(path, false);
    file.write_table(table);
    EXPECT_THROW(file.write_table("/bench/y", table), Error);  // not its schema's group
    EXPECT_THROW(file.write_table(Table("free")), Error);      // no group of its own
    file.commit();
  }
  EXPECT_EQ(read_table(path, "/bench/schema_group").get_i64("n"), std::vector<std::int64_t>{3});
}

TEST_F(ResultsFileTest, TableGroupFollowsTheSchema) {
  const fs::path path = dir_ / "out.h5";
  write_good_file(path);
  with_attribute(path, "/bench/collectives", "kind", [](hid_t a) {
    EXPECT_EQ(rank_of(a), 0);
    EXPECT_EQ(attribute_strings(a), std::vector<std::string>{"table"});
  });
  with_attribute(path, "/bench/collectives", "columns", [](hid_t a) {
    EXPECT_EQ(rank_of(a), 1);
    EXPECT_EQ(attribute_strings(a), (std::vector<std::string>{"name", "size_bytes", "time_us", "unitless"}));
  });
  with_attribute(path, "/bench/collectives", "rows", [](hid_t a) {
    EXPECT_EQ(attribute_numbers<std::int64_t>(a, H5T_INTEGER), std::vector<std::int64_t>{4});
  });
  with_attribute(path, "/bench/collectives/size_bytes", "unit", [](hid_t a) {
    EXPECT_EQ(attribute_strings(a), std::vector<std::string>{"B"});
  });
  with_attribute(path, "/bench/collectives/unitless", "unit", [](hid_t a) {
    EXPECT_EQ(attribute_strings(a), std::vector<std::string>{""});
  });
  // Column datasets: 1-D, float64 / int64 / variable-length UTF-8.
  H5 file{H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose};
  for (const auto& [name, type_class] : std::vector<std::pair<std::string, H5T_class_t>>{
           {"name", H5T_STRING}, {"size_bytes", H5T_INTEGER}, {"time_us", H5T_FLOAT}}) {
    H5 dataset{H5Dopen2(file.id, ("/bench/collectives/" + name).c_str(), H5P_DEFAULT), H5Dclose};
    ASSERT_GE(dataset.id, 0) << name;
    H5 type{H5Dget_type(dataset.id), H5Tclose};
    EXPECT_EQ(H5Tget_class(type.id), type_class) << name;
    if (type_class == H5T_STRING) {
      EXPECT_TRUE(is_vlen_utf8(type.id));
    } else {
      EXPECT_EQ(H5Tget_size(type.id), 8u) << name;
    }
    H5 space{H5Dget_space(dataset.id), H5Sclose};
    hsize_t dims[1] = {0};
    EXPECT_EQ(H5Sget_simple_extent_ndims(space.id), 1);
    H5Sget_simple_extent_dims(space.id, dims, nullptr);
    EXPECT_EQ(dims[0], 4u);
  }
}

TEST_F(ResultsFileTest, EmptyTableRoundTrips) {
  const fs::path path = dir_ / "empty.h5";
  Table table("nothing measured");
  table.str("host");
  table.i64("rank");
  table.f64("bandwidth_GBps", "GB/s");
  {
    ResultsFile file(path, false);
    file.write_table("/host/copy_bandwidth", table);
    file.write_table("/no_columns", Table("no columns at all"));
    file.commit();
  }
  const Table got = read_table(path, "/host/copy_bandwidth");
  expect_same_tables(got, table);
  EXPECT_EQ(got.rows(), 0u);
  const Table none = read_table(path, "/no_columns");
  EXPECT_TRUE(none.columns().empty());
  EXPECT_EQ(none.description(), "no columns at all");
}

TEST_F(ResultsFileTest, RaggedTableIsRefused) {
  const fs::path path = dir_ / "ragged.h5";
  Table table;
  table.i64("a") = {1, 2};
  table.i64("b") = {1};
  ResultsFile file(path, false);
  EXPECT_THROW(file.write_table("/t", table), Error);
}

TEST_F(ResultsFileTest, TableAfterGroupAttributesAndTwiceRefused) {
  const fs::path path = dir_ / "p2p.h5";
  Table table("ping-pong");
  table.i64("size_bytes", "B") = {8, 1024};
  table.f64("time_us", "us") = {1.0, 2.0};
  {
    ResultsFile file(path, false);
    // The schema puts the fitted constants on the table's own group; they may come first.
    file.set_attribute("/bench/point_to_point", "alpha_us", 0.5);
    file.write_table("/bench/point_to_point", table);
    file.set_attribute("/bench/point_to_point", "beta_us_per_byte", 0.001);
    EXPECT_THROW(file.write_table("/bench/point_to_point", table), Error);
    file.commit();
  }
  expect_same_tables(read_table(path, "/bench/point_to_point"), table);
  with_attribute(path, "/bench/point_to_point", "alpha_us", [](hid_t a) {
    EXPECT_EQ(attribute_numbers<double>(a, H5T_FLOAT), std::vector<double>{0.5});
  });
}

TEST_F(ResultsFileTest, AttributesOfEveryType) {
  const fs::path path = dir_ / "attrs.h5";
  {
    ResultsFile file(path, false);
    file.set_attribute("/", "command_line", std::string("parity bench collectives --out 'a b.h5'"));
    file.set_attribute("/", "empty", std::string(""));
    file.set_attribute("/", "world_size", std::int64_t{4});
    file.set_attribute("/", "hosts", std::vector<std::string>{"node-ä", "", "node-b", "node-b"});
    file.set_attribute("/", "no_hosts", std::vector<std::string>{});
    file.set_attribute("/bench/point_to_point", "alpha_us", 1.25);
    file.set_attribute("/a/b/c", "doubles", std::vector<double>{1.0, -2.5, 1e300});
    file.set_attribute("/a/b/c", "ints", std::vector<std::int64_t>{-1, 0, 1LL << 40});
    file.set_attribute("/a/b/c", "no_ints", std::vector<std::int64_t>{});
    // Overwriting replaces the value, also with another type.
    file.set_attribute("/", "subcommand", std::string("run"));
    file.set_attribute("/", "subcommand", std::string("check"));
    file.set_attribute("/a", "changes_type", std::int64_t{7});
    file.set_attribute("/a", "changes_type", std::vector<double>{0.25});
    file.commit();
  }
  with_attribute(path, "/", "schema", [](hid_t a) {
    EXPECT_EQ(attribute_strings(a), std::vector<std::string>{"parity-results"});
  });
  with_attribute(path, "/", "schema_version", [](hid_t a) {
    EXPECT_EQ(attribute_numbers<std::int64_t>(a, H5T_INTEGER), std::vector<std::int64_t>{1});
  });
  with_attribute(path, "/", "command_line", [](hid_t a) {
    EXPECT_EQ(rank_of(a), 0);
    EXPECT_EQ(attribute_strings(a), std::vector<std::string>{"parity bench collectives --out 'a b.h5'"});
  });
  with_attribute(path, "/", "empty", [](hid_t a) {
    EXPECT_EQ(attribute_strings(a), std::vector<std::string>{""});
  });
  with_attribute(path, "/", "world_size", [](hid_t a) {
    EXPECT_EQ(rank_of(a), 0);
    EXPECT_EQ(attribute_numbers<std::int64_t>(a, H5T_INTEGER), std::vector<std::int64_t>{4});
  });
  with_attribute(path, "/", "hosts", [](hid_t a) {
    EXPECT_EQ(rank_of(a), 1);
    EXPECT_EQ(attribute_strings(a), (std::vector<std::string>{"node-ä", "", "node-b", "node-b"}));
  });
  with_attribute(path, "/", "no_hosts", [](hid_t a) {
    EXPECT_EQ(rank_of(a), 1);
    EXPECT_TRUE(attribute_strings(a).empty());
  });
  with_attribute(path, "/bench/point_to_point", "alpha_us", [](hid_t a) {
    EXPECT_EQ(rank_of(a), 0);
    EXPECT_EQ(attribute_numbers<double>(a, H5T_FLOAT), std::vector<double>{1.25});
  });
  with_attribute(path, "/a/b/c", "doubles", [](hid_t a) {
    EXPECT_EQ(attribute_numbers<double>(a, H5T_FLOAT), (std::vector<double>{1.0, -2.5, 1e300}));
  });
  with_attribute(path, "/a/b/c", "ints", [](hid_t a) {
    EXPECT_EQ(attribute_numbers<std::int64_t>(a, H5T_INTEGER), (std::vector<std::int64_t>{-1, 0, 1LL << 40}));
  });
  with_attribute(path, "/a/b/c", "no_ints", [](hid_t a) {
    EXPECT_TRUE(attribute_numbers<std::int64_t>(a, H5T_INTEGER).empty());
  });
  with_attribute(path, "/", "subcommand", [](hid_t a) {
    EXPECT_EQ(attribute_strings(a), std::vector<std::string>{"check"});
  });
  with_attribute(path, "/a", "changes_type", [](hid_t a) {
    EXPECT_EQ(attribute_numbers<double>(a, H5T_FLOAT), std::vector<double>{0.25});
  });
  EXPECT_EQ(inspect(path).subcommand, "check");
}

TEST_F(ResultsFileTest, LargeStringArrayAttribute) {
  // Well over the 64 KiB an attribute may take in the oldest HDF5 format.
  const fs::path path = dir_ / "hosts.h5";
  std::vector<std::string> hosts;
  for (int i = 0; i < 20000; ++i) hosts.push_back("compute-node-" + std::to_string(i));
  {
    ResultsFile file(path, false);
    file.set_attribute("/", "hosts", hosts);
    file.commit();
  }
  with_attribute(path, "/", "hosts", [&](hid_t a) { EXPECT_EQ(attribute_strings(a), hosts); });
}

TEST_F(ResultsFileTest, AttributeOnADatasetPathIsRefused) {
  const fs::path path = dir_ / "clash.h5";
  ResultsFile file(path, false);
  file.write_table("/t", sample_table());
  EXPECT_THROW(file.set_attribute("/t/name", "x", 1.0), Error);
  EXPECT_THROW(file.set_attribute("/t/name/deeper", "x", 1.0), Error);
}

// ---- temporary file and commit ------------------------------------------------------------------

TEST_F(ResultsFileTest, FinalNameAppearsOnlyAtCommit) {
  const fs::path path = dir_ / "out.h5";
  {
    ResultsFile file(path, false);
    EXPECT_EQ(file.path(), path);
    EXPECT_FALSE(fs::exists(path));
    EXPECT_TRUE(fs::exists(partial_of(path)));
    file.write_table("/bench/collectives", sample_table());
    file.set_attribute("/", "subcommand", std::string("run"));
    EXPECT_FALSE(fs::exists(path));
    file.commit();
    EXPECT_TRUE(fs::exists(path));
    EXPECT_FALSE(fs::exists(partial_of(path)));
    EXPECT_THROW(file.set_attribute("/", "late", 1.0), Error);
    EXPECT_THROW(file.commit(), Error);
  }
  // The destructor after commit leaves the committed file alone.
  EXPECT_TRUE(fs::exists(path));
  EXPECT_EQ(inspect(path).subcommand, "run");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 1);
}

TEST_F(ResultsFileTest, DestructorWithoutCommitLeavesNothing) {
  const fs::path path = dir_ / "out.h5";
  {
    ResultsFile file(path, false);
    file.write_table("/bench/collectives", sample_table());
  }
  EXPECT_FALSE(fs::exists(path));
  EXPECT_FALSE(fs::exists(partial_of(path)));
  EXPECT_TRUE(fs::is_empty(dir_));
}

TEST_F(ResultsFileTest, ExistingFileRefusedWithoutForce) {
  const fs::path path = dir_ / "out.h5";
  write_text(path, "an earlier result");
  const std::string message = usage_error_of([&] { ResultsFile file(path, false); });
  expect_one_line(message);
  EXPECT_NE(message.find(path.string()), std::string::npos) << message;
  EXPECT_NE(message.find("--force"), std::string::npos) << message;
  EXPECT_THROW(check_output_path(path, false), UsageError);
  EXPECT_EQ(read_text(path), "an earlier result");
  EXPECT_FALSE(fs::exists(partial_of(path)));
}

TEST_F(ResultsFileTest, ExistingFileReplacedWithForce) {
  const fs::path path = dir_ / "out.h5";
  write_text(path, "an earlier result");
  EXPECT_NO_THROW(check_output_path(path, true));
  {
    ResultsFile file(path, true);
    file.set_attribute("/", "subcommand", std::string("check"));
    // Until commit the earlier file stays as it was.
    EXPECT_EQ(read_text(path), "an earlier result");
    file.commit();
  }
  EXPECT_EQ(inspect(path).subcommand, "check");
}

TEST_F(ResultsFileTest, CommitRefusesAFileThatAppearedMeanwhile) {
  const fs::path path = dir_ / "out.h5";
  {
    ResultsFile file(path, false);
    write_text(path, "another run got there first");
    expect_one_line(usage_error_of([&] { file.commit(); }));
  }
  EXPECT_EQ(read_text(path), "another run got there first");
  EXPECT_FALSE(fs::exists(partial_of(path)));
}

TEST_F(ResultsFileTest, CommitWithForceReplacesAFileThatAppearedMeanwhile) {
  const fs::path path = dir_ / "out.h5";
  {
    ResultsFile file(path, true);
    write_text(path, "another run got there first");
    file.commit();
  }
  EXPECT_EQ(inspect(path).schema_version, 1);
}

// ---- output path checks -----------------------------------------------------------------------

TEST_F(ResultsFileTest, MissingDirectoryRefused) {
  const fs::path path = dir_ / "no" / "such" / "out.h5";
  const std::string message = usage_error_of([&] { ResultsFile file(path, false); });
  expect_one_line(message);
  EXPECT_NE(message.find("does not exist"), std::string::npos) << message;
  EXPECT_THROW(check_output_path(path, true), UsageError);
}

TEST_F(ResultsFileTest, ParentThatIsAFileRefused) {
  write_text(dir_ / "plain", "x");
  const fs::path path = dir_ / "plain" / "out.h5";
  expect_one_line(usage_error_of([&] { check_output_path(path, false); }));
  expect_one_line(usage_error_of([&] { ResultsFile file(path, true); }));
}

TEST_F(ResultsFileTest, DirectoryAsOutputRefused) {
  fs::create_directory(dir_ / "sub");
  const std::string message = usage_error_of([&] { check_output_path(dir_ / "sub", true); });
  expect_one_line(message);
  EXPECT_NE(message.find("is a directory"), std::string::npos) << message;
  expect_one_line(usage_error_of([&] { ResultsFile file(dir_ / "sub", false); }));
}

TEST_F(ResultsFileTest, UnwritableDirectoryRefused) {
  // root passes access(W_OK) on any directory, so the refusal cannot be seen there.
  if (geteuid() == 0) GTEST_SKIP() << "running as root";
  const fs::path locked = dir_ / "locked";
  fs::create_directory(locked);
  fs::permissions(locked, fs::perms::owner_read | fs::perms::owner_exec);
  const std::string message = usage_error_of([&] { ResultsFile file(locked / "out.h5", false); });
  fs::permissions(locked, fs::perms::owner_all);
  expect_one_line(message);
  EXPECT_NE(message.find("not writable"), std::string::npos) << message;
}

TEST_F(ResultsFileTest, RelativePathInCurrentDirectory) {
  const fs::path previous = fs::current_path();
  fs::current_path(dir_);
  EXPECT_NO_THROW(check_output_path("out.h5", false));
  {
    ResultsFile file("out.h5", false);
    file.commit();
  }
  EXPECT_TRUE(fs::exists(dir_ / "out.h5"));
  fs::current_path(previous);
}

// ---- inspect ----------------------------------------------------------------------------------

TEST_F(ResultsFileTest, InspectGoodFile) {
  const fs::path path = dir_ / "good.h5";
  write_good_file(path);
  const FileInfo info = inspect(path);
  EXPECT_EQ(info.schema_version, 1);
  EXPECT_EQ(info.subcommand, "bench collectives");
}

TEST_F(ResultsFileTest, InspectWithoutSubcommand) {
  const fs::path path = dir_ / "bare.h5";
  {
    ResultsFile file(path, false);
    file.commit();
  }
  const FileInfo info = inspect(path);
  EXPECT_EQ(info.schema_version, 1);
  EXPECT_EQ(info.subcommand, "");
}

TEST_F(ResultsFileTest, InspectMissingFile) {
  const std::string message = usage_error_of([&] { inspect(dir_ / "absent.h5"); });
  expect_one_line(message);
  EXPECT_NE(message.find("does not exist"), std::string::npos) << message;
}

TEST_F(ResultsFileTest, InspectTextFile) {
  const fs::path path = dir_ / "notes.txt";
  write_text(path, "collective,algorithm\nall_reduce,ring\n");
  const std::string message = usage_error_of([&] { inspect(path); });
  expect_one_line(message);
  EXPECT_EQ(message, path.string() + " is not an HDF5 file");
  write_text(path, "");
  expect_one_line(usage_error_of([&] { inspect(path); }));
}

TEST_F(ResultsFileTest, InspectDirectory) {
  expect_one_line(usage_error_of([&] { inspect(dir_); }));
}

TEST_F(ResultsFileTest, InspectForeignHdf5) {
  const fs::path path = dir_ / "foreign.h5";
  write_foreign_hdf5(path);
  std::string message = usage_error_of([&] { inspect(path); });
  expect_one_line(message);
  EXPECT_EQ(message, path.string() + " is not a parity result file");
  write_foreign_hdf5(path, "someone-elses-results");
  message = usage_error_of([&] { inspect(path); });
  EXPECT_EQ(message, path.string() + " is not a parity result file");
  // The right name without a version is not enough either.
  write_foreign_hdf5(path, "parity-results");
  expect_one_line(usage_error_of([&] { inspect(path); }));
  expect_one_line(usage_error_of([&] { read_table(path, "/data"); }));
}

TEST_F(ResultsFileTest, InspectUnknownVersion) {
  for (const std::int64_t version : {std::int64_t{2}, std::int64_t{0}, std::int64_t{-3}}) {
    const fs::path path = dir_ / ("v" + std::to_string(version) + ".h5");
    {
      ResultsFile file(path, false);
      file.set_attribute("/", "schema_version", version);
      file.commit();
    }
    const std::string message = usage_error_of([&] { inspect(path); });
    expect_one_line(message);
    EXPECT_EQ(message, path.string() + " has schema version " + std::to_string(version) +
                           "; this parity reads version 1");
  }
}

TEST_F(ResultsFileTest, InspectSchemaVersionOfWrongType) {
  const fs::path path = dir_ / "strver.h5";
  {
    ResultsFile file(path, false);
    file.set_attribute("/", "schema_version", std::string("1"));
    file.commit();
  }
  expect_one_line(usage_error_of([&] { inspect(path); }));
}

TEST_F(ResultsFileTest, InspectTruncatedFile) {
  const fs::path good = dir_ / "good.h5";
  write_good_file(good);
  const auto size = fs::file_size(good);
  // Cut at several places: inside the superblock, in the middle, just short of the end.
  for (const auto keep : {size / 2, std::uintmax_t{4}, std::uintmax_t{100}, size / 4, size * 3 / 4, size - 1}) {
    const fs::path path = dir_ / ("cut-" + std::to_string(keep) + ".h5");
    fs::copy_file(good, path);
    fs::resize_file(path, keep);
    expect_one_line(usage_error_of([&] { inspect(path); }));
    expect_one_line(usage_error_of([&] { read_table(path, "/bench/collectives"); }));
  }
}

// ---- read_table -------------------------------------------------------------------------------

// The sample table written to `path`, its time_us column then made again by hand with the
// dataset creation properties `layout` (H5P_DEFAULT: contiguous), its values written or not.
void remake_time_column(const fs::path& path, hid_t layout, bool write_values) {
  {
    ResultsFile file(path, false);
    file.write_table("/bench/collectives", sample_table());
    file.commit();
  }
  H5 file{H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT), H5Fclose};
  ASSERT_GE(file.id, 0);
  ASSERT_GE(H5Ldelete(file.id, "/bench/collectives/time_us", H5P_DEFAULT), 0);
  const hsize_t dims[1] = {4};
  H5 space{H5Screate_simple(1, dims, nullptr), H5Sclose};
  H5 dataset{H5Dcreate2(file.id, "/bench/collectives/time_us", H5T_IEEE_F64LE, space.id, H5P_DEFAULT, layout, H5P_DEFAULT),
             H5Dclose};
  ASSERT_GE(dataset.id, 0);
  const std::vector<double> values = sample_table().get_f64("time_us");
  if (write_values) {
    ASSERT_GE(H5Dwrite(dataset.id, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()), 0);
  }
}

// A column whose values were never written reads as HDF5's fill values (zeros, here where the
// rows agree): refused as damaged before any is read, so that a billion declared rows cost no
// memory either.
TEST_F(ResultsFileTest, ReadTableRefusesAColumnNeverWritten) {
  const fs::path path = dir_ / "unwritten.h5";
  remake_time_column(path, H5P_DEFAULT, false);
  const std::string message = usage_error_of([&] { read_table(path, "/bench/collectives"); });
  expect_one_line(message);
  EXPECT_NE(message.find("time_us"), std::string::npos) << message;
  EXPECT_NE(message.find("never written"), std::string::npos) << message;
}

// A column stored compressed in chunks, the last partial (a repacked file), is read as written
// (HDF5 before 1.10.9 calls its storage partly allocated).
TEST_F(ResultsFileTest, ReadTableTakesACompressedChunkedColumn) {
  const fs::path path = dir_ / "deflated.h5";
  H5 layout{H5Pcreate(H5P_DATASET_CREATE), H5Pclose};
  const hsize_t chunk[1] = {3};
  ASSERT_GE(H5Pset_chunk(layout.id, 1, chunk), 0);
  ASSERT_GE(H5Pset_deflate(layout.id, 6), 0);
  remake_time_column(path, layout.id, true);
  const Table got = read_table(path, "/bench/collectives");
  expect_same_doubles(got.get_f64("time_us"), sample_table().get_f64("time_us"));
}

TEST_F(ResultsFileTest, ReadTableRefusesWhatIsNotATable) {
  const fs::path path = dir_ / "good.h5";
  {
    ResultsFile file(path, false);
    file.set_attribute("/bench", "note", std::string("a group, not a table"));
    file.write_table("/bench/collectives", sample_table());
    file.commit();
  }
  std::string message = usage_error_of([&] { read_table(path, "/bench/absent"); });
  expect_one_line(message);
  EXPECT_NE(message.find("has no table"), std::string::npos) << message;
  expect_one_line(usage_error_of([&] { read_table(path, "/no/such/group"); }));
  message = usage_error_of([&] { read_table(path, "/bench"); });
  expect_one_line(message);
  EXPECT_NE(message.find("is not a table"), std::string::npos) << message;
  expect_one_line(usage_error_of([&] { read_table(path, "/bench/collectives/name"); }));
  expect_one_line(usage_error_of([&] { read_table(dir_ / "absent.h5", "/bench/collectives"); }));
}

// ---- the journal and partial files -------------------------------------------------------------

// A table built row by row, as a run builds /check/collectives.
Table numbered_rows(int n) {
  Table t("rows by number");
  for (int i = 0; i < n; ++i) {
    t.str("case").push_back("case-" + std::to_string(i));
    t.i64("passed").push_back(i % 3 != 0);
    t.f64("error", "1").push_back(0.5 * i);
  }
  return t;
}

// Journals the first n rows of `all` one by one at /check/collectives, as a run does, then stops
// the run there (the journal stays).
void journal_rows_then_stop(ResultsFile& file, const Table& all, int n) {
  Table building(all.description());
  for (int i = 0; i < n; ++i) {
    append_rows(building, all, i, i + 1);
    file.append_rows("/check/collectives", building, building.rows() - 1);
  }
  file.abandon();
}

TEST_F(ResultsFileTest, PartialFileHoldsEveryRowJournaledBeforeTheFault) {
  const fs::path path = dir_ / "out.h5";
  const Table all = numbered_rows(5);
  {
    ResultsFile file(path, false);
    file.set_attribute("/", "subcommand", std::string("check"));
    file.write_table("/host/copy_bandwidth", sample_table());
    Table building("rows by number");
    for (int i = 0; i < 3; ++i) {
      append_rows(building, all, i, i + 1);
      file.append_rows("/check/collectives", building, building.rows() - 1);
    }
    EXPECT_TRUE(fs::exists(journal_path(path)));
    file.abandon();  // the run stops here
  }
  EXPECT_FALSE(fs::exists(path));
  ASSERT_TRUE(fs::exists(journal_path(path)));
  const PartialSummary kept = write_partial(journal_path(path), path, "interrupted by SIGINT");
  EXPECT_EQ(kept.tables, 2u);
  EXPECT_EQ(kept.rows, 3u + sample_table().rows());
  EXPECT_FALSE(fs::exists(journal_path(path)));
  const FileInfo info = inspect(path);
  EXPECT_FALSE(info.complete);
  EXPECT_EQ(info.incomplete_reason, "interrupted by SIGINT");
  EXPECT_EQ(info.subcommand, "check");
  const Table rows = read_table(path, "/check/collectives");
  ASSERT_EQ(rows.rows(), 3u);
  EXPECT_EQ(rows.get_str("case"), (std::vector<std::string>{"case-0", "case-1", "case-2"}));
  EXPECT_EQ(rows.get_i64("passed"), (std::vector<std::int64_t>{0, 1, 1}));
  EXPECT_EQ(rows.get_f64("error"), (std::vector<double>{0.0, 0.5, 1.0}));
  EXPECT_EQ(read_table(path, "/host/copy_bandwidth").rows(), sample_table().rows());
}

TEST_F(ResultsFileTest, CommittedFileIsCompleteAndTheJournalGoes) {
  const fs::path path = dir_ / "out.h5";
  {
    ResultsFile file(path, false);
    Table t = numbered_rows(2);
    file.append_rows("/check/collectives", t, 0);
    file.write_table("/check/collectives", t);  // the whole table replaces the rows
    file.commit();
  }
  EXPECT_TRUE(inspect(path).complete);
  EXPECT_FALSE(fs::exists(journal_path(path)));
  EXPECT_EQ(read_table(path, "/check/collectives").rows(), 2u);
}

TEST_F(ResultsFileTest, TornJournalRecordIsLeftOut) {
  const fs::path path = dir_ / "out.h5";
  const Table all = numbered_rows(4);
  {
    ResultsFile file(path, false);
    journal_rows_then_stop(file, all, 4);
  }
  // A process killed in the middle of its last write.
  fs::resize_file(journal_path(path), fs::file_size(journal_path(path)) - 3);
  const JournalReading reading = read_journal(journal_path(path));
  EXPECT_GT(reading.ignored_bytes, 0u);
  ASSERT_NE(reading.contents.find("/check/collectives"), nullptr);
  EXPECT_EQ(reading.contents.find("/check/collectives")->table->rows(), 3u);
  write_partial(journal_path(path), path, "killed");
  EXPECT_EQ(read_table(path, "/check/collectives").rows(), 3u);
}

// A point and its per-rank rows journaled together: a tail torn anywhere in their record, at
// every cut of 1 to its whole length, leaves both tables at the rows before it, never one row
// without the other.
TEST_F(ResultsFileTest, RowsJournaledTogetherAreKeptTogetherOrNotAtAll) {
  const fs::path path = dir_ / "out.h5";
  const Table points = numbered_rows(3);
  Table per_rank("per-rank rows");
  std::uintmax_t before_last = 0;
  {
    ResultsFile file(path, false);
    Table building(points.description()), ranks("per-rank rows");
    for (int i = 0; i < 3; ++i) {
      if (i == 2) before_last = fs::file_size(journal_path(path));
      append_rows(building, points, i, i + 1);
      const std::size_t first = ranks.rows();
      for (int rank = 0; rank < 4; ++rank) {
        ranks.i64("row").push_back(i);
        ranks.i64("rank").push_back(rank);
      }
      file.append_rows({{"/check/collectives", &building, building.rows() - 1}, {"/bench/ranks", &ranks, first}});
    }
    file.abandon();
  }
  const std::uintmax_t whole = fs::file_size(journal_path(path));
  const JournalReading all = read_journal(journal_path(path));
  EXPECT_EQ(all.contents.find("/check/collectives")->table->rows(), 3u);
  EXPECT_EQ(all.contents.find("/bench/ranks")->table->rows(), 12u);
  const fs::path copy = dir_ / "copy.journal";
  for (std::uintmax_t cut = 1; cut <= whole - before_last; ++cut) {
    fs::copy_file(journal_path(path), copy, fs::copy_options::overwrite_existing);
    fs::resize_file(copy, whole - cut);
    const JournalReading torn = read_journal(copy);
    ASSERT_EQ(torn.contents.find("/check/collectives")->table->rows(), 2u) << "cut " << cut;
    ASSERT_EQ(torn.contents.find("/bench/ranks")->table->rows(), 8u) << "cut " << cut;
  }
}

TEST_F(ResultsFileTest, JournalWithAFlippedByteEndsBeforeIt) {
  const fs::path path = dir_ / "out.h5";
  const Table all = numbered_rows(3);
  {
    ResultsFile file(path, false);
    journal_rows_then_stop(file, all, 3);
  }
  std::fstream f(journal_path(path), std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(-2, std::ios::end);
  f.put('\x7f');
  f.close();
  EXPECT_EQ(read_journal(journal_path(path)).contents.find("/check/collectives")->table->rows(), 2u);
}

TEST_F(ResultsFileTest, RowsCarriedFromAResumedFileAndNotYetTakenAreKept) {
  const fs::path path = dir_ / "out.h5";
  const Table resumed = numbered_rows(4);
  {
    ResultsFile file(path, true);
    file.carry_rows("/check/collectives", resumed);
    // The resumed run takes the first two rows back, each journaled with the mark that it was
    // taken, and is stopped.
    Table building("rows by number");
    for (std::size_t i = 0; i < 2; ++i) {
      append_rows(building, resumed, i, i + 1);
      file.append_rows({{"/check/collectives", &building, i, {i}}});
    }
    file.abandon();
  }
  // A record cut short takes its mark with it: the row it took back stays carried.
  const fs::path journal = journal_path(path), cut = dir_ / "cut.journal";
  fs::copy_file(journal, cut);
  fs::resize_file(cut, fs::file_size(cut) - 3);
  const Table kept = *read_journal(cut).contents.find("/check/collectives")->table;
  EXPECT_EQ(kept.get_str("case"), resumed.get_str("case"));  // the first row taken, then the others
  write_partial(journal, path, "stalled");
  const Table rows = read_table(path, "/check/collectives");
  EXPECT_EQ(rows.get_str("case"), resumed.get_str("case"));  // taken rows once, then the others
  EXPECT_EQ(rows.get_f64("error"), resumed.get_f64("error"));
}

TEST_F(ResultsFileTest, NothingFinishedGivesNoFile) {
  const fs::path path = dir_ / "out.h5";
  {
    ResultsFile file(path, false);
    file.set_attribute("/", "subcommand", std::string("check"));
    file.abandon();
  }
  EXPECT_EQ(write_partial(journal_path(path), path, "interrupted").tables, 0u);
  EXPECT_FALSE(fs::exists(path));
  EXPECT_FALSE(fs::exists(journal_path(path)));
}

TEST_F(ResultsFileTest, JournalOfAnInterruptedRunIsNotOverwrittenWithoutForce) {
  const fs::path path = dir_ / "out.h5";
  write_text(journal_path(path), "parityJ1");
  const std::string message = usage_error_of([&] { ResultsFile file(path, false); });
  expect_one_line(message);
  EXPECT_NE(message.find("--resume"), std::string::npos) << message;
  EXPECT_EQ(read_text(journal_path(path)), "parityJ1");
  { ResultsFile file(path, true); }  // --force starts afresh
  EXPECT_FALSE(fs::exists(journal_path(path)));
}

TEST_F(ResultsFileTest, ForeignFileIsNotAJournal) {
  write_text(dir_ / "x.journal", "not a journal at all");
  expect_one_line(usage_error_of([&] { read_journal(dir_ / "x.journal"); }));
}

}  // namespace
