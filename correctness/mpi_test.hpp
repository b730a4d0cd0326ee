// The MPI-aware GoogleTest harness: every rank runs every test, only rank 0 prints, and a
// failure on any rank fails the test on all of them with that rank's message. Tests should
// finish their communication before asserting, so that no rank leaves a collective early.
#pragma once

#include <gtest/gtest.h>

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

}  // namespace parity::test
