// The executor: runs a validated pipeline schedule on real ranks as the step's schedule part
// (parallel::Schedule, given the step's StepContext), so the Trainer's gradient
// synchronisations and optimizer step stay as they are. Rank i of the pipeline group runs row i of the schedule on its model, which holds
// the layers of its stages in stage order (model::build_gpt with their ranges). A forward of
// stage s receives stage s-1's output of the micro-batch (the first stage reads the tokens),
// runs the stage's layers and sends its output on (the last stage computes the loss instead);
// a backward receives stage s+1's input gradient (the last stage starts from the loss), runs
// the layers backwards, gradients accumulating over the micro-batches, and sends its own input
// gradient back. A split backward runs as I (the input gradient, sent on at once, each layer
// keeping its weight-gradient work and the tensors it reads) and later W (that work run, the
// gradients accumulating). Sends are non-blocking and matched by tag (stage, micro-batch, direction);
// between two stages on one rank (the turn of a V) the tensor is handed over in place.
//
// On request the executor records what the rank did (record_timeline): each action's work
// and each wait for a message, on the rank's steady clock (reference/comm/clock.hpp), with the
// activation bytes each forward left held for its backward; and the peak of activation bytes
// over the step.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <utility>
#include <vector>

#include "reference/model/model.hpp"
#include "reference/parallel/pipeline/schedule.hpp"
#include "reference/parallel/step.hpp"

namespace parity::parallel::pipeline {

// Contiguous stages over layers with these parameter counts, the largest stage as small as it
// can be (ties: earlier stages smaller); each stage gets at least one layer. Throws UsageError
// when there are more stages than layers.
std::vector<model::LayerRange> balance_stages(const std::vector<std::int64_t>& layer_parameters, int stages);
// The parameters of each of a whole model's top-level layers, what balance_stages balances.
std::vector<std::int64_t> layer_parameters(model::Model& whole);

// One interval of a rank's step.
struct Event {
  Action action;      // the action run, or the one whose input was awaited
  bool wait = false;  // waiting for the action's input; with stage -1, for the step's last sends and its loss
  double start = 0, end = 0;  // steady_seconds() of this rank
  // Forward: activation bytes the action left held until its backward (what its layers saved,
  // its received input), its output sent on excluded. I (input gradient): the change it made,
  // minus what it let go of (the saved tensors its W does not read).
  std::int64_t kept_bytes = 0;
};

class Executor : public parallel::Schedule {
 public:
  // The shape of what crosses a stage boundary for a micro-batch of `rows` rows (GPT:
  // {rows, sequence, hidden}); it travels in `dtype`.
  using BoundaryShape = std::function<Shape(std::int64_t rows)>;
  // `layers_per_stage[s]`: top-level layers of stage s (over every stage of the schedule).
  Executor(Communicator& pipeline, pipeline::Schedule schedule, std::vector<int> layers_per_stage, BoundaryShape shape,
           DataType dtype);
  std::string describe() const override;
  std::vector<Communicator*> communicators() override { return {&group_}; }
  // Runs this rank's actions for the step; returns the loss of the step's micro-batches (the
  // same on every rank of the pipeline group: the last stage's, summed over the group).
  double run(const StepContext& step) override;
  const pipeline::Schedule& schedule() const { return schedule_; }
  // Timeline of each later run (off by default: it costs a clock read per action).
  void record_timeline(bool on) { record_ = on; }
  const std::vector<Event>& timeline() const { return events_; }  // the last run's
  // Peak of activation bytes above the last run's start (on the model's memory space).
  std::int64_t peak_activation_bytes() const { return peak_activation_bytes_; }
  // Fault injection: `action` (on the rank that holds its stage) throws instead of running.
  void inject_failure(const Action& action) { failure_ = action; }

 private:
  struct Local {
    int first = 0;  // index of the stage's first layer in this rank's model
    int count = 0;
  };
  int tag(int stage, int micro_batch, bool gradient) const;
  Communicator& group_;
  pipeline::Schedule schedule_;
  std::vector<int> owner_;        // rank of each stage
  std::map<int, Local> local_;    // this rank's stages
  std::map<int, std::size_t> final_gradient_;  // per local stage: its last B or W in this rank's row
  BoundaryShape shape_;
  DataType dtype_;
  bool record_ = false;
  std::vector<Event> events_;
  std::int64_t peak_activation_bytes_ = 0;
  std::optional<Action> failure_;
};

}  // namespace parity::parallel::pipeline
