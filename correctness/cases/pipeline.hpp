// Conformance cases for pipeline parallelism, written once and run by GoogleTest
// (correctness/test_pipeline.cpp): a GPT split into stages (balanced by parameter count) trains
// for a few optimizer steps with a schedule on every rank of the communicator, and every rank
// compares its stages' parameters and optimizer state with the same model trained whole on one
// device on the whole batch (dropout on, the tied table's two copies kept equal).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "correctness/cases/training.hpp"
#include "reference/comm/communicator.hpp"

namespace parity::cases {

struct PipelineCase {
  std::string schedule = "1f1b";  // pipeline::schedule_names() the executor runs
  int micro_batches = 2;
  int chunks = 2;                 // per rank, interleaved
  int data_parallel = 1;          // replicas of the pipeline (grid pp x dp; dp varies fastest)
  std::string precision = "float64";  // float64, float32
  int steps = 3;
  // "pipeline/1f1b/m4/float64", "pipeline/1f1b/dp2/m4/float64"
  std::string name() const;
};

// At world size p (the stages): gpipe and 1f1b at m in {1, p, 2p + 1}, interleaved (2 chunks)
// at m in {p, 2p}, each in float64 and float32; at an even world of 4 or more also 1f1b and
// interleaved on p/2 stages composed with data parallelism over 2 replicas.
std::vector<PipelineCase> pipeline_grid(int world_size);

// Collective over comm: the grid pp x dp over it, the schedule on each pp group, data
// parallelism (DDP buckets) over each dp group.
TrainingResult run_pipeline_case(Communicator& comm, const PipelineCase& c);

}  // namespace parity::cases
