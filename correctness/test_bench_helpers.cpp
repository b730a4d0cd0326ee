// The benchmarks' host arithmetic that no run checks against a formula: the scaling rows'
// speedup, efficiency and Amdahl columns from measured step times, and the memory estimates'
// conversion to bytes; the GPT-2 attributes a state file carries, written and read back.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <utility>
#include <vector>

#include <unistd.h>

#include "bench/cli/shared.hpp"
#include "bench/commands/bench_parallel.hpp"
#include "bench/commands/bench_state.hpp"
#include "bench/commands/collective_timing.hpp"
#include "bench/commands/gpt2_file.hpp"
#include "reference/record/arrays.hpp"
#include "reference/theory/model.hpp"
#include "reference/theory/parallel.hpp"

namespace parity::cli {
namespace {

std::vector<ScalingPoint> points(const std::vector<double>& seconds) {
  std::vector<ScalingPoint> out;
  for (std::size_t i = 0; i < seconds.size(); ++i) {
    ScalingPoint p;
    p.world_size = static_cast<int>(i) + 1;
    p.step_seconds = seconds[i];
    p.predicted_step_seconds = 2 * seconds[i];
    out.push_back(p);
  }
  return out;
}

// Strong scaling keeps the problem: speedup T1 / TN, efficiency T1 / (N TN), and the Amdahl fit
// of those times (a serial fraction s gives T_N = T1 (s + (1 - s) / N): fitted back exactly).
TEST(BenchHelpers, StrongScalingRowsFromStepTimes) {
  const double s = 0.2, t1 = 3.0;
  std::vector<double> seconds;
  for (int n = 1; n <= 4; ++n) seconds.push_back(t1 * (s + (1 - s) / n));
  record::Table t{kScalingBenchTable};
  add_scaling_rows(t, "strong", "tiny", "cfg", points(seconds), false);
  ASSERT_EQ(t.rows(), 4u);
  for (std::size_t i = 0; i < 4; ++i) {
    const int n = static_cast<int>(i) + 1;
    EXPECT_EQ(t.get_i64("world_size")[i], n);
    EXPECT_DOUBLE_EQ(t.get_f64("speedup")[i], t1 / seconds[i]);
    EXPECT_DOUBLE_EQ(t.get_f64("efficiency")[i], t1 / (n * seconds[i]));
    EXPECT_NEAR(t.get_f64("amdahl_serial_fraction")[i], s, 1e-12);
    EXPECT_NEAR(t.get_f64("amdahl_speedup")[i], 1 / (s + (1 - s) / n), 1e-12);
    EXPECT_DOUBLE_EQ(t.get_f64("predicted_over_measured")[i], 2.0);
  }
}

// The fast path measures strong scaling only at the world sizes that divide the batch: the rows
// are the sizes given (1, 2, 4 of 4, without 3), and the fit is of those.
TEST(BenchHelpers, StrongScalingRowsAtTheWorldSizesMeasured) {
  const double s = 0.1, t1 = 2.0;
  std::vector<ScalingPoint> given;
  for (const int n : {1, 2, 4}) {
    ScalingPoint p;
    p.world_size = n;
    p.step_seconds = t1 * (s + (1 - s) / n);
    p.predicted_step_seconds = std::nan("");
    given.push_back(p);
  }
  record::Table t{kScalingBenchTable};
  add_scaling_rows(t, "strong", "gpt2-medium", "cfg", given, false);
  ASSERT_EQ(t.rows(), 3u);
  EXPECT_EQ(t.get_i64("world_size")[2], 4);
  EXPECT_DOUBLE_EQ(t.get_f64("speedup")[2], t1 / given[2].step_seconds);
  EXPECT_DOUBLE_EQ(t.get_f64("efficiency")[2], t1 / (4 * given[2].step_seconds));
  EXPECT_NEAR(t.get_f64("amdahl_serial_fraction")[0], s, 1e-12);
  EXPECT_TRUE(std::isnan(t.get_f64("predicted_over_measured")[1]));  // no calibrated prediction
}

// Weak scaling grows the problem with N: the scaled speedup N T1 / TN, efficiency T1 / TN, and no
// Amdahl fit (NaN); an oversubscribed run compares no prediction (NaN).
TEST(BenchHelpers, WeakScalingRowsFromStepTimes) {
  const std::vector<double> seconds = {1.0, 1.25, 2.0};
  record::Table t{kScalingBenchTable};
  add_scaling_rows(t, "weak", "tiny", "cfg", points(seconds), true);
  ASSERT_EQ(t.rows(), 3u);
  for (std::size_t i = 0; i < 3; ++i) {
    const int n = static_cast<int>(i) + 1;
    EXPECT_DOUBLE_EQ(t.get_f64("speedup")[i], n * 1.0 / seconds[i]);
    EXPECT_DOUBLE_EQ(t.get_f64("efficiency")[i], 1.0 / seconds[i]);
    EXPECT_TRUE(std::isnan(t.get_f64("amdahl_serial_fraction")[i]));
    EXPECT_TRUE(std::isnan(t.get_f64("amdahl_speedup")[i]));
    EXPECT_TRUE(std::isnan(t.get_f64("predicted_over_measured")[i]));
    EXPECT_EQ(t.get_str("mode")[i], "weak");
  }
}

// An overlap row derives the hidden share from what the overlapped step still waited and what
// the in-order one waited: 1 - 0.25 / 1 = 0.75; an in-order row hides nothing, nor a row where
// nothing was waited for in order.
TEST(BenchHelpers, OverlapRowsHiddenFraction) {
  record::Table t{kOverlapBenchTable};
  add_overlap_row(t, "tiny", {2, 1024, 3, false, 2.0, 1.0, 1.0, 0.5, 1.0});
  add_overlap_row(t, "tiny", {2, 1024, 3, true, 1.25, 1.0, 0.25, 0.5, 1.0});
  add_overlap_row(t, "tiny", {2, 1024, 3, true, 1.0, 1.0, 0.0, 0.0, 0.0});
  ASSERT_EQ(t.rows(), 3u);
  EXPECT_EQ(t.get_i64("overlap")[0], 0);
  EXPECT_EQ(t.get_i64("overlap")[1], 1);
  EXPECT_DOUBLE_EQ(t.get_f64("hidden_fraction")[0], 0.0);
  EXPECT_DOUBLE_EQ(t.get_f64("hidden_fraction")[1], 0.75);
  EXPECT_DOUBLE_EQ(t.get_f64("hidden_fraction")[2], 0.0);
  EXPECT_DOUBLE_EQ(t.get_f64("comm_seconds_alone")[1], 1.0);
}

// bench state's figures travel between ranks as rows of doubles and land in their own columns:
// distinct values, so that two fields exchanged on the way or in the table show.
TEST(BenchHelpers, StateFiguresLandInTheirOwnColumns) {
  const StateMeasured m{.bytes = 1, .file_bytes = 2, .save_s = 3, .load_s = 4, .load_bytes = 5, .fs_write_s = 6,
                        .fs_read_s = 7, .step_s = 8, .async_staged_s = 9, .async_step_s = 10, .async_finish_s = 11, .exact = 1};
  const auto row = m.as_row();
  const StateMeasured back = StateMeasured::from_row(row.data());
  record::Table t(kStateBenchTable);
  add_state_row(t, {"zero3", "float32", 2, 1, 4, 100, 101}, back);
  ASSERT_EQ(t.rows(), 1u);
  EXPECT_EQ(t.get_str("layout")[0], "zero3");
  EXPECT_EQ(t.get_str("precision")[0], "float32");
  EXPECT_EQ(t.get_i64("repeat")[0], 2);
  EXPECT_EQ(t.get_i64("rank")[0], 1);
  EXPECT_EQ(t.get_i64("world_size")[0], 4);
  const std::pair<const char*, double> want[] = {
      {"bytes", 1},        {"file_bytes", 2},  {"total_bytes", 100}, {"formula_bytes", 101},   {"save_s", 3},
      {"load_s", 4},       {"load_bytes", 5},  {"fs_write_s", 6},    {"fs_read_s", 7},         {"step_s", 8},
      {"async_staged_s", 9}, {"async_step_s", 10}, {"async_finish_s", 11}};
  for (const auto& [column, value] : want) EXPECT_EQ(t.get_f64(column)[0], value) << column;
  EXPECT_EQ(t.get_i64("restored_exactly")[0], 1);
}

// A percentile interpolates linearly between the two values around q (n - 1) in sorted order
// (NumPy's default): unevenly spaced values, so that a wrong pair of neighbours shows.
TEST(BenchHelpers, PercentilesInterpolateBetweenNeighbours) {
  EXPECT_EQ(percentile({20.0, 1.0, 10.0, 2.0}, 0.5), 6.0);           // 2 + (10 - 2) x 0.5
  EXPECT_DOUBLE_EQ(percentile({100.0, 10.0, 20.0, 30.0, 40.0}, 0.9), 76.0);  // 40 + (100 - 40) x 0.6
  EXPECT_EQ(percentile({3.0, 1.0, 2.0}, 0.0), 1.0);
  EXPECT_EQ(percentile({3.0, 1.0, 2.0}, 1.0), 3.0);
  EXPECT_EQ(percentile({7.0}, 0.95), 7.0);
  EXPECT_TRUE(std::isnan(percentile({}, 0.5)));
}

// A benchmark's step breakdown is one step's: the median step taken whole keeps its parts inside
// it. Here each part's own median (9 and 9) would add to twice the median step (9.1), as two
// steps, each with one long part, outvote the median step.
TEST(BenchHelpers, TheMedianStepKeepsItsOwnParts) {
  const std::vector<StepTiming<2>> steps{{20.0, {10.0, 10.0}}, {9.0, {9.0, 0.0}}, {9.1, {0.0, 9.0}}};
  const StepTiming<2> median = median_step(steps);
  EXPECT_EQ(median.seconds, 9.1);
  EXPECT_EQ(median.parts[0], 0.0);
  EXPECT_EQ(median.parts[1], 9.0);
  EXPECT_LE(median.parts[0] + median.parts[1], median.seconds);
  // An even count: the mean of the middle two steps, parts with them (as percentile's median).
  const std::vector<StepTiming<1>> four{{4.0, {1.0}}, {1.0, {0.5}}, {2.0, {2.0}}, {3.0, {0.0}}};
  const StepTiming<1> even = median_step(four);
  EXPECT_EQ(even.seconds, 2.5);
  EXPECT_EQ(even.seconds, percentile({4.0, 1.0, 2.0, 3.0}, 0.5));
  EXPECT_EQ(even.parts[0], 1.0);
  // No step: NaN, not a zero that reads as a measured time.
  const StepTiming<1> none = median_step(std::vector<StepTiming<1>>{});
  EXPECT_TRUE(std::isnan(none.seconds) && std::isnan(none.parts[0]));
}

// The slowest rank's row is taken whole: the row whose step (its first value) is largest among
// the ranks in the run, its parts with it; a step not measured (NaN) is not passed over.
TEST(BenchHelpers, TheSlowestRanksRowIsTakenWhole) {
  // Three ranks' (step, part) rows: rank 1's step is the longest though rank 2's part is.
  const std::vector<double> rows{2.0, 0.5, 3.0, 0.1, 2.5, 2.4};
  EXPECT_EQ(slowest_row(rows, 2, 3), 1u);
  EXPECT_EQ(slowest_row(rows, 2, 1), 0u);  // rank 0 alone ran (the others idle)
  EXPECT_EQ(slowest_row({1.0, std::nan(""), 3.0}, 1, 3), 1u);
  EXPECT_EQ(slowest_row({std::nan(""), 2.0}, 1, 2), 0u);
}

// Estimates past what std::size_t holds, or not numbers, come out as its largest value (which the
// memory check refuses); the others as the bytes.
// The count column of a bench row: a size of 4096 bytes is 1024 float32 elements, the whole
// buffer of the collectives whose count is the buffer (all_reduce, reduce, broadcast) and split
// into one chunk per rank for those whose count is a rank's chunk (all_gather's send,
// reduce_scatter's receive, all_to_all's and all_to_all_v's per-peer block): 1024 / 4 = 256.
TEST(BenchHelpers, CountColumnIsTheBufferOrTheChunkPerRank) {
  for (Collective c : {Collective::all_reduce, Collective::reduce, Collective::broadcast})
    EXPECT_EQ(count_for(c, 4096, DataType::float32, 4), 1024u) << name_of(c);
  for (Collective c : {Collective::all_gather, Collective::reduce_scatter, Collective::all_to_all, Collective::all_to_all_v})
    EXPECT_EQ(count_for(c, 4096, DataType::float32, 4), 256u) << name_of(c);
  EXPECT_EQ(count_for(Collective::reduce_scatter, 4096, DataType::float64, 8), 64u);
  EXPECT_EQ(count_for(Collective::all_reduce, 4096, DataType::float64, 8), 512u);
}

TEST(BenchHelpers, EstimatedBytesSaturate) {
  constexpr std::size_t kMost = std::numeric_limits<std::size_t>::max();
  EXPECT_EQ(estimated_bytes(0), 0u);
  EXPECT_EQ(estimated_bytes(-5), 0u);
  EXPECT_EQ(estimated_bytes(12345.0), 12345u);
  EXPECT_EQ(estimated_bytes(std::ldexp(1.0, 63)), std::size_t{1} << 63);
  EXPECT_EQ(estimated_bytes(std::ldexp(1.0, 64)), kMost);
  EXPECT_EQ(estimated_bytes(1e30), kMost);
  EXPECT_EQ(estimated_bytes(std::numeric_limits<double>::infinity()), kMost);
  EXPECT_EQ(estimated_bytes(std::nan("")), kMost);
  // A batch at the top of int64 makes every benchmark's estimate saturate instead of wrapping.
  ParallelBenchOptions o;
  o.model = "tiny";
  o.batch = std::numeric_limits<std::int64_t>::max();
  EXPECT_EQ(parallel_bench_bytes_per_rank(o), kMost);
}

// The GPT-2 attributes round trip for every field parity writes: the sizes, the head tied to the
// token table or not (an untied head is GPT2Config's tie_word_embeddings 0).
TEST(Gpt2File, AttributesRoundTripTiedAndUntied) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / ("parity-gpt2-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  struct Removed {  // the directory goes however the test ends
    std::filesystem::path dir;
    ~Removed() { std::filesystem::remove_all(dir); }
  } removed{dir};
  for (const bool tied : {true, false}) {
    model::GptConfig c;
    c.vocabulary = 300;
    c.layers = 3;
    c.hidden = 48;
    c.heads = 6;
    c.sequence = 40;
    c.tied_embeddings = tied;
    const std::filesystem::path file = dir / (tied ? "tied.h5" : "untied.h5");
    {
      record::ArrayWriter w(file.string() + ".tmp", "parity-test", 1);
      write_gpt2_config(w, c);
      // The reader refuses attributes describing more parameters than the file stores.
      const std::vector<double> values(static_cast<std::size_t>(theory::gpt_parameters(c)), 0.0);
      w.write("/values", DataType::float64, values.data(), values.size());
      w.commit_as(file);
    }
    const record::ArrayReader r(file, "parity-test", 1);
    EXPECT_EQ(r.int_attribute("/", "tie_word_embeddings"), tied ? 1 : 0);
    const model::GptConfig back = read_gpt2_config(r, file.string());
    EXPECT_EQ(back.tied_embeddings, tied);
    EXPECT_EQ(back.vocabulary, 300);
    EXPECT_EQ(back.layers, 3);
    EXPECT_EQ(back.hidden, 48);
    EXPECT_EQ(back.heads, 6);
    EXPECT_EQ(back.sequence, 40);
  }
}

}  // namespace
}  // namespace parity::cli
