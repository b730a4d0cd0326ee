// Pipeline parallelism under GoogleTest, every rank of the world a stage (or the schedule's
// chunks): every case of cases::pipeline_grid at this world size (suite "pipeline") against the
// single-device run; stages balanced by parameters; schedules the executor cannot run refused
// before any rank sends.
#include <cstdio>
#include <cstdlib>

#include "correctness/cases/pipeline.hpp"
#include "correctness/mpi_test.hpp"
#include "reference/core/error.hpp"
#include "reference/parallel/pipeline/executor.hpp"

namespace parity::test {
namespace {

class PipelineCaseTest : public MpiTest {
 public:
  explicit PipelineCaseTest(cases::PipelineCase c) : case_(std::move(c)) {}
  void TestBody() override {
    const cases::TrainingResult r = cases::run_pipeline_case(comm(), case_);
    if (comm().rank() == 0 && std::getenv("PARITY_VERBOSE"))
      std::printf("%s: error %.3g bound %.3g loss %.4g -> %.4g | %s\n", case_.name().c_str(), r.error, r.bound, r.first_loss,
                  r.last_loss, r.message.c_str());
    EXPECT_TRUE(r.passed) << case_.name() << ": " << r.message;
  }

 private:
  cases::PipelineCase case_;
};

void register_grid(Communicator& comm) {
  for (const auto& c : cases::pipeline_grid(comm.size()))
    ::testing::RegisterTest("pipeline", c.name().c_str(), nullptr, nullptr, __FILE__, __LINE__,
                            [c]() -> MpiTest* { return new PipelineCaseTest(c); });
}
const bool registered = add_registrar(register_grid);

namespace pp = parallel::pipeline;

TEST(PipelineStages, BalancedByParameters) {
  using R = std::vector<model::LayerRange>;
  const auto ranges = [](const R& r) {
    std::vector<std::pair<int, int>> out;
    for (const auto& x : r) out.emplace_back(x.begin, x.end);
    return out;
  };
  // The largest stage as small as it can be.
  EXPECT_EQ(ranges(pp::balance_stages({5, 1, 1, 1, 1, 1}, 2)), (std::vector<std::pair<int, int>>{{0, 1}, {1, 6}}));
  EXPECT_EQ(ranges(pp::balance_stages({1, 1, 1, 1}, 4)), (std::vector<std::pair<int, int>>{{0, 1}, {1, 2}, {2, 3}, {3, 4}}));
  EXPECT_EQ(ranges(pp::balance_stages({2, 2, 2, 2, 2, 2}, 3)), (std::vector<std::pair<int, int>>{{0, 2}, {2, 4}, {4, 6}}));
  EXPECT_THROW(pp::balance_stages({1, 1}, 3), UsageError);  // more stages than layers
}

TEST_F(MpiTest, ExecutorRefusesWhatItCannotRun) {
  const auto boundary = [](std::int64_t rows) { return Shape{rows, 4}; };
  const int p = comm().size();
  // A schedule for another number of ranks.
  EXPECT_THROW(pp::Executor(comm(), pp::one_f_one_b(p + 1, 2), std::vector<int>(static_cast<std::size_t>(p + 1), 1),
                            boundary, DataType::float64),
               UsageError);
  // A model split into another number of stages than the schedule's.
  EXPECT_THROW(pp::Executor(comm(), pp::zb_h1(p, 2), std::vector<int>(static_cast<std::size_t>(p + 1), 1), boundary,
                            DataType::float64),
               UsageError);
  // A broken schedule: refused by the validator before any message.
  pp::Schedule broken = pp::one_f_one_b(p, 2);
  std::swap(broken.ranks.back().front(), broken.ranks.back().back());
  EXPECT_THROW(pp::Executor(comm(), broken, std::vector<int>(static_cast<std::size_t>(p), 1), boundary, DataType::float64),
               UsageError);
}

}  // namespace
}  // namespace parity::test
