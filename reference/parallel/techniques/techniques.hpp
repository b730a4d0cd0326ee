// The techniques: each a typed descriptor (its name, the parts its step is made of, and the
// formulas its measurements are set beside), listed once here. Conformance cases, benchmarks
// and `parity list` find techniques by name in this registry; a new technique is a folder in
// parallel/ and one entry here.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "reference/parallel/step.hpp"

namespace parity::parallel {

struct Technique {
  std::string name;            // "zero2": case names, --strategies
  std::string summary;         // one line, for parity list
  // The parts of its step, in words (the objects come from make_data_parallel_parts or the
  // technique's own builder).
  std::string schedule, gradient_sync, optimizer_step;
  int zero_stage = 0;          // state sharded over the data-parallel ranks: 0 none .. 3 parameters too
  int micro_batches = 1;       // gradient accumulation in the technique's conformance cases
  bool asynchronous = false;   // no synchronous step (the parameter server)
  // Bytes one rank sends per optimizer step: the units its optimizer step reports, `ranks`
  // data-parallel ranks, `element_bytes` per gradient element, `micro_batches` per step.
  std::function<double(const std::vector<theory::ShardedUnit>& units, int ranks, double element_bytes,
                       int micro_batches)>
      bytes_sent_per_rank;
  // Model-state bytes per rank (theory::zero_model_state_bytes for its stage).
  std::function<theory::ModelStateBytes(std::int64_t parameters, std::int64_t padded, int ranks,
                                        theory::StateBytes bytes)>
      model_state_bytes;
};

const std::vector<Technique>& techniques();
// Throws UsageError naming the known techniques (and, for zeroN, that N is outside 0-3).
const Technique& find_technique(std::string_view name);

// The gradient synchronisation and optimizer step of data parallelism over `group` (the
// data-parallel ranks): DDP buckets and a replicated step for stage 0, ZeRO's shared shards
// for stages 1-3; with the sequential schedule.
StepParts make_data_parallel_parts(Communicator& group, model::Model& model, const model::Optimizer& optimizer,
                                   const DataParallelConfig& config);
// A trainer of data parallelism or ZeRO (config.zero_stage) over every rank of `group`;
// refuses (UsageError) a configuration that does not fit before any collective.
std::unique_ptr<Trainer> make_trainer(Communicator& group, model::Model& model, const model::Optimizer& optimizer,
                                      const DataParallelConfig& config);

}  // namespace parity::parallel
