// The MPI-aware GoogleTest harness: every rank runs every test, only rank 0 prints, and a
// failure on any rank fails the test on all of them with that rank's message. Tests should
// finish their communication before asserting, so that no rank leaves a collective early.
#pragma once

#include <gtest/gtest.h>

#include <cstdarg>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "reference/comm/communicator.hpp"

namespace parity::test {

// The world communicator (valid while tests run).
Communicator& world();
// Another MPI communicator over all ranks, in `space` (device tests use MemorySpace::cuda).
std::unique_ptr<Communicator> mpi_world(MemorySpace space);

// Base fixture: TearDown makes the ranks agree on the outcome.
class MpiTest : public ::testing::Test {
 protected:
  Communicator& comm() { return world(); }
  void TearDown() override;
};

// Lets a test file register tests that depend on the world size, once MPI is up.
using Registrar = void (*)(Communicator&);
bool add_registrar(Registrar registrar);

// Registers "<suite>.<case name>" for every case, each running `body` on the world with its case
// (the body runs the case and asserts on its result). For a grid that depends on the world
// size, call it from a Registrar.
template <typename Case>
void register_cases(const char* suite, const std::vector<Case>& cases, std::function<void(Communicator&, const Case&)> body) {
  class CaseTest : public MpiTest {
   public:
    CaseTest(Case c, std::function<void(Communicator&, const Case&)> body) : case_(std::move(c)), body_(std::move(body)) {}
    void TestBody() override { body_(comm(), case_); }

   private:
    Case case_;
    std::function<void(Communicator&, const Case&)> body_;
  };
  for (const Case& c : cases)
    ::testing::RegisterTest(suite, c.name().c_str(), nullptr, nullptr, __FILE__, __LINE__,
                            [c, body]() -> MpiTest* { return new CaseTest(c, body); });
}

// printf on rank 0 of `comm` when PARITY_VERBOSE is set (a case's figures beside its verdict).
void verbose(Communicator& comm, const char* format, ...) __attribute__((format(printf, 2, 3)));

// A bound that passes everything proves nothing. A grid's cases note their error against their
// bound per group (an optimizer and precision, ...); a test registered after the grid then
// requires the largest ratio of every group to reach 1 / slack (tolerance.hpp states each
// slack with its reason). At one rank the cases are the single device itself and note nothing.
class BoundRatios {
 public:
  void note(const std::string& group, double error, double bound, int world_size);
  const std::map<std::string, double>& largest() const { return largest_; }

 private:
  std::map<std::string, double> largest_;
};
// Registers "<suite>.WithinAStatedFactorOfTheMeasuredError" over `ratios` (call after the grid).
void register_bound_tightness(const char* suite, const BoundRatios& ratios, double slack);

}  // namespace parity::test
