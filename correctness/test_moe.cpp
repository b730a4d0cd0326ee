// Mixture of experts and expert parallelism under GoogleTest at the world size mpirun gives:
// every case of cases::moe_grid (suite "moe", as `parity check` names them), each deliberate
// fault shown to fail its case, and expert- or tensor-parallel sizes that do not fit refused.
#include <cstdio>
#include <cstdlib>

#include "correctness/cases/moe.hpp"
#include "correctness/mpi_test.hpp"
#include "reference/core/error.hpp"
#include "reference/core/tolerance.hpp"
#include "reference/parallel/expert/expert_parallel.hpp"
#include "reference/parallel/tensor/tensor_parallel.hpp"

namespace parity::test {
namespace {

void register_grid(Communicator& comm) {
  // The largest error / bound of the parameters and state per precision (the bound is
  // training_relative_bound, whose slack tolerance.hpp states).
  static BoundRatios ratios;
  register_cases<cases::MoeCase>("moe", cases::moe_grid(comm.size()), [](Communicator& world, const auto& c) {
    const cases::MoeResult r = cases::run_moe_case(world, c);
    verbose(world,
            "%s: error %.3g bound %.3g loss %.3g gradients %.3g (bound %.3g) decisions %lld dropped %lld dispatch %.0f/%.0f | %s\n",
            c.name().c_str(), r.error, r.bound, r.loss_error, r.gradient_error, r.loss_bound,
            static_cast<long long>(r.decisions), static_cast<long long>(r.dropped), r.dispatch_bytes, r.dispatch_formula,
            r.message.c_str());
    EXPECT_TRUE(r.passed) << c.name() << ": " << r.message;
    ratios.note("parameters/" + c.precision, r.error, r.bound, world.size());
  });
  register_bound_tightness("moe_bounds", ratios, tolerance::kTrainingBoundSlack);
}
const bool registered = add_registrar(register_grid);

class MoeFaults : public MpiTest {};

// Each fault must fail its case: a token sent to the wrong rank, a gate not renormalised, a
// dropped token not left to the residual alone.
TEST_F(MoeFaults, AreCaught) {
  struct Fault {
    const char* name;
    int min_ep;
  };
  for (const Fault& f : {Fault{"wrong_rank", 2}, Fault{"no_renormalise", 1}, Fault{"drop_residual", 1}}) {
    cases::MoeCase c;
    c.ep = comm().size() % 2 == 0 ? 2 : 1;
    if (c.ep < f.min_ep) continue;
    c.capacity_factor = 0.5;  // tokens are dropped
    c.fault = f.name;
    const cases::MoeResult r = cases::run_moe_case(comm(), c);
    EXPECT_FALSE(r.passed) << f.name << " passed: " << r.message;
  }
}

TEST_F(MoeFaults, ExpertsNotDividingOverEpAreRefused) {
  cases::MoeCase c;
  c.ep = 3;
  c.experts = 4;
  model::GptConfig config = cases::moe_case_model(c);
  try {
    parallel::validate_expert_parallel(config, 3);
    ADD_FAILURE() << "4 experts over 3 ranks accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("do not divide"), std::string::npos) << e.what();
  }
}

// Experts split over tp: an FFN the size does not divide, and sequence parallelism (which MoE
// layers do not compose with here), each refused in one line.
TEST_F(MoeFaults, TensorParallelExpertsThatDoNotFitAreRefused) {
  model::GptConfig config = cases::moe_case_model(cases::MoeCase{});
  config.moe.expert_hidden = 25;
  try {
    parallel::validate_tensor_parallel(config, 2, false);
    ADD_FAILURE() << "an expert FFN of 25 split over 2 ranks accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("expert FFN 25"), std::string::npos) << e.what();
  }
  config.moe.expert_hidden = 24;
  EXPECT_NO_THROW(parallel::validate_tensor_parallel(config, 2, false));
  try {
    parallel::validate_tensor_parallel(config, 2, true);
    ADD_FAILURE() << "sequence parallelism with MoE layers accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("MoE"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace parity::test
