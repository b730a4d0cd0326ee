// parity pipeline validate|simulate|run: one schedule checked, timed, or trained on real ranks.
#pragma once

#include <limits>
#include <string>

#include "bench/cli/session.hpp"
#include "reference/parallel/pipeline/schedule.hpp"

namespace parity::cli {

// The most micro-batches a step of a generated schedule takes (pipeline validate, simulate, run
// and bench pipeline): each is run or simulated, and a schedule is made whole before it runs.
inline constexpr int kMostMicroBatches = 100000;

struct PipelineOptions {
  std::string schedule_file;  // a CSV, one row per rank; else a generated schedule:
  std::string name = "1f1b";
  int stages = 4;
  int micro_batches = 8;
  int chunks = 2;  // per rank, interleaved
  std::string write_csv;
  // simulate: seconds per action, and the link (alpha + bytes / bandwidth per message)
  double forward = 1, backward = 2, input_grad = 1, weight_grad = 1;
  double alpha_us = 0, bandwidth_GBps = 1e9, message_bytes = 0;
  bool timeline = false;
  int columns = 96;
  // run: training steps on real ranks against one device, in this precision
  int steps = 3;
  std::string dtype = "float64";
  std::string inject_failure;  // an action ("1B2") that throws instead of running
};
// Throws UsageError for a cost that is negative or not finite, a bandwidth <= 0.
void check_pipeline_options(const PipelineOptions& options);
int pipeline_validate(const PipelineOptions& options);
// B = I + W, the costs given decide the rest: B alone splits in halves, B and one part give the
// other, I and W alone give B; all three must agree (UsageError otherwise). Flags: which were given.
void split_backward(PipelineOptions& options, bool backward, bool input_grad, bool weight_grad);
int pipeline_simulate(const PipelineOptions& options);
// The schedule `pipeline run` trains on `world` ranks: generated for them, or read and required
// to have that many; validated. Throws UsageError naming what is wrong.
parallel::pipeline::Schedule load_pipeline_schedule(const PipelineOptions& options, int world);
// The closed form of a generated schedule's bubble over the ideal (theory/pipeline.hpp), with
// forward, input-gradient and weight-gradient costs f, i, w (ZB-H1); NaN where there is none.
struct PipelineClosedForm {
  double over_ideal = std::numeric_limits<double>::quiet_NaN();
  const char* expression = "";
  const char* holds_for = "";
};
PipelineClosedForm pipeline_closed_form(const parallel::pipeline::Schedule& schedule, int chunks, double f, double i, double w);
// `parity pipeline run`: the options' schedule (generated for every rank of the world, or read)
// trains the conformance cases' GPT for --steps steps against one device; one row of
// /check/pipeline. Returns the exit status.
int pipeline_run(Session& session, const PipelineOptions& options);

}  // namespace parity::cli
