// Data parallelism, accumulation, ZeRO 1-3 and the parameter server under GoogleTest: every
// case of cases::training_grid at this world size (suite "training", test name = case name,
// as `parity check` names them), the communication stream, and bad input.
#include <cmath>
#include <cstdio>

#include "correctness/cases/training.hpp"
#include "correctness/mpi_test.hpp"
#include "reference/comm/stream.hpp"
#include "reference/core/error.hpp"
#include "reference/parallel/parameter_server.hpp"
#include "reference/parallel/zero.hpp"

namespace parity::test {
namespace {

class TrainingCaseTest : public MpiTest {
 public:
  explicit TrainingCaseTest(cases::TrainingCase c) : case_(std::move(c)) {}
  void TestBody() override {
    const cases::TrainingResult r = cases::run_training_case(comm(), case_);
    if (comm().rank() == 0 && std::getenv("PARITY_VERBOSE"))
      std::printf("%s: error %.3g bound %.3g bytes %.0f/%.0f | %s\n", case_.name().c_str(), r.error, r.bound,
                  r.bytes_sent, r.bytes_formula, r.message.c_str());
    EXPECT_TRUE(r.passed) << case_.name() << ": " << r.message;
  }

 private:
  cases::TrainingCase case_;
};

void register_grid(Communicator& comm) {
  for (const auto& c : cases::training_grid(comm.size()))
    ::testing::RegisterTest("training", c.name().c_str(), nullptr, nullptr, __FILE__, __LINE__,
                            [c]() -> MpiTest* { return new TrainingCaseTest(c); });
}
const bool registered = add_registrar(register_grid);

}  // namespace
}  // namespace parity::test
