// The pipeline executor, and the balance of a model's layers over stages (see executor.hpp).
#include "reference/parallel/pipeline/executor.hpp"

#include <algorithm>
#include <limits>

#include "reference/comm/clock.hpp"
#include "reference/core/error.hpp"
#include "reference/tensor/memory.hpp"
#include "reference/parallel/pipeline/simulator.hpp"

namespace parity::parallel::pipeline {

std::vector<std::int64_t> layer_parameters(model::Model& whole) {
  std::vector<std::int64_t> out;
  for (model::Layer* layer : whole.layers()) {
    std::int64_t n = 0;
    for (model::Parameter* p : layer->parameters()) n += p->value.numel();
    out.push_back(n);
  }
  return out;
}

std::vector<model::LayerRange> balance_stages(const std::vector<std::int64_t>& layer_parameters, int stages) {
  const int n = static_cast<int>(layer_parameters.size());
  if (stages < 1 || stages > n)
    throw UsageError("pipeline: " + std::to_string(stages) + " stages for a model of " + std::to_string(n) +
                     " layers; each stage needs at least one layer");
  std::vector<std::int64_t> prefix(static_cast<std::size_t>(n) + 1, 0);
  for (int i = 0; i < n; ++i) prefix[static_cast<std::size_t>(i) + 1] = prefix[static_cast<std::size_t>(i)] + layer_parameters[static_cast<std::size_t>(i)];
  const auto sum = [&](int a, int b) { return prefix[static_cast<std::size_t>(b)] - prefix[static_cast<std::size_t>(a)]; };
  constexpr std::int64_t kNone = std::numeric_limits<std::int64_t>::max();
  // best[k][i]: the smallest largest stage over the first i layers in k stages; cut[k][i]: where
  // the k-th stage starts.
  std::vector<std::vector<std::int64_t>> best(static_cast<std::size_t>(stages) + 1,
                                              std::vector<std::int64_t>(static_cast<std::size_t>(n) + 1, kNone));
  std::vector<std::vector<int>> cut(best.size(), std::vector<int>(static_cast<std::size_t>(n) + 1, 0));
  best[0][0] = 0;
  for (int k = 1; k <= stages; ++k)
    for (int i = k; i <= n; ++i)
      for (int j = k - 1; j < i; ++j) {
        const std::int64_t before = best[static_cast<std::size_t>(k) - 1][static_cast<std::size_t>(j)];
        if (before == kNone) continue;
        const std::int64_t largest = std::max(before, sum(j, i));
        // <: the earliest cut that ties, so the last of the k stages takes the most layers a tie
        // allows and earlier stages fewer (they hold more micro-batches' activations in 1F1B).
        if (largest < best[static_cast<std::size_t>(k)][static_cast<std::size_t>(i)]) {
          best[static_cast<std::size_t>(k)][static_cast<std::size_t>(i)] = largest;
          cut[static_cast<std::size_t>(k)][static_cast<std::size_t>(i)] = j;
        }
      }
  std::vector<model::LayerRange> out(static_cast<std::size_t>(stages));
  for (int k = stages, end = n; k >= 1; --k) {
    const int begin = cut[static_cast<std::size_t>(k)][static_cast<std::size_t>(end)];
    out[static_cast<std::size_t>(k) - 1] = {begin, end};
    end = begin;
  }
  return out;
}

Executor::Executor(Communicator& pipeline, pipeline::Schedule schedule, std::vector<int> layers_per_stage,
                   BoundaryShape shape, DataType dtype)
    : group_(pipeline), schedule_(std::move(schedule)), shape_(std::move(shape)), dtype_(dtype) {
  validate(schedule_);  // UsageError naming rank, action and rule
  if (schedule_.rank_count() != group_.size())
    throw UsageError("pipeline schedule " + schedule_.name + " has " + std::to_string(schedule_.rank_count()) +
                     " ranks but the pipeline group has " + std::to_string(group_.size()));
  if (static_cast<int>(layers_per_stage.size()) != schedule_.stage_count())
    throw UsageError("pipeline schedule " + schedule_.name + " has " + std::to_string(schedule_.stage_count()) +
                     " stages but the model was split into " + std::to_string(layers_per_stage.size()));
  owner_ = schedule_.stage_ranks();
  // A stage's gradients are final after its last B or W on this rank (whatever its
  // micro-batch): that action tells the gradient syncs so.
  const auto& mine = schedule_.ranks[static_cast<std::size_t>(group_.rank())];
  for (std::size_t i = 0; i < mine.size(); ++i)
    if (mine[i].work == Work::backward || mine[i].work == Work::weight_grad) final_gradient_[mine[i].stage] = i;
  int first = 0;
  for (int s = 0; s < schedule_.stage_count(); ++s) {
    if (owner_[static_cast<std::size_t>(s)] != group_.rank()) continue;
    local_[s] = {first, layers_per_stage[static_cast<std::size_t>(s)]};
    first += layers_per_stage[static_cast<std::size_t>(s)];
  }
  // MPI guarantees tags up to 32767.
  if (tag(schedule_.stage_count() - 1, schedule_.micro_batches - 1, true) > 32767)
    throw UsageError("pipeline: " + std::to_string(schedule_.micro_batches) + " micro-batches x " +
                     std::to_string(schedule_.stage_count()) + " stages exceed the message tags MPI guarantees");
}

std::string Executor::describe() const {
  return "pipeline schedule " + schedule_.name + " (" + std::to_string(schedule_.rank_count()) + " ranks, " +
         std::to_string(schedule_.stage_count()) + " stages, " + std::to_string(schedule_.micro_batches) + " micro-batches)";
}

int Executor::tag(int stage, int micro_batch, bool gradient) const {
  return ((micro_batch * schedule_.stage_count()) + stage) * 2 + (gradient ? 1 : 0);
}

double Executor::run(const StepContext& step) {
  const std::vector<MicroBatch>& micro_batches = step.micro_batches();
  if (static_cast<int>(micro_batches.size()) != schedule_.micro_batches)
    throw Error("pipeline schedule " + schedule_.name + " is for " + std::to_string(schedule_.micro_batches) +
                " micro-batches, the step has " + std::to_string(micro_batches.size()));
  model::Model& model = step.model();
  const std::vector<model::Layer*> layers = model.layers();
  const int last = schedule_.stage_count() - 1, me = group_.rank();
  const MemorySpace space = model.space();
  const PeakScope peak(space);
  const auto activation_bytes = [space] {
    return MemoryTracker::process().usage(MemoryCategory::activations, space).current;
  };
  events_.clear();
  // What waits between actions: inputs handed over on this rank, the loss gradients of the
  // last stage, and sends in flight (their tensors kept alive until they complete).
  std::map<std::pair<int, int>, Tensor> handed_input, handed_gradient, loss_gradient;
  std::vector<std::pair<RequestPtr, Tensor>> sending;
  double loss = 0;
  double work_start = 0;  // the current action's work begins once its input is in hand
  const auto receive = [&](const Action& a, int from, bool gradient) {
    const MicroBatch& mb = micro_batches[static_cast<std::size_t>(a.micro_batch)];
    Tensor t = Tensor::empty(gradient ? "pipeline.grad_in" : "pipeline.activation_in", shape_(mb.rows.rows), dtype_,
                             gradient ? MemoryCategory::workspace : MemoryCategory::activations, space);
    RequestPtr r = group_.irecv(t.view(), from, tag(a.stage, a.micro_batch, gradient));
    const double waiting = record_ ? steady_seconds() : 0;
    group_.wait(r);
    if (record_) {
      work_start = steady_seconds();
      events_.push_back({a, true, waiting, work_start, 0});
    }
    return t;
  };
  const auto send = [&](Tensor t, int to, int stage, int b, bool gradient) {
    RequestPtr r = group_.isend(t.view(), to, tag(stage, b, gradient));
    sending.emplace_back(std::move(r), std::move(t));
  };
  const auto& actions = schedule_.ranks[static_cast<std::size_t>(me)];
  const auto run_action = [&](std::size_t index) {
    const Action& a = actions[index];
    if (failure_ && *failure_ == a) throw Error("an injected failure");
    if (record_) work_start = steady_seconds();
    const std::int64_t held_before = record_ ? activation_bytes() : 0;
    std::int64_t kept = 0;
    const MicroBatch& mb = micro_batches[static_cast<std::size_t>(a.micro_batch)];
    model::PassContext context = step.pass_context(mb);
    const Local& stage = local_.at(a.stage);
    const auto key = std::make_pair(a.stage, a.micro_batch);
    // Gradients accumulate in B and W: the syncs learn whether this is the stage's last.
    const auto begin_gradients = [&] {
      MicroBatch gradients = mb;
      gradients.last = index == final_gradient_.at(a.stage);
      step.begin_backward(gradients);
    };
    if (a.work == Work::weight_grad) {
      // W: the weight-gradient work the stage's I kept, latest layer first.
      begin_gradients();
      for (int i = stage.first + stage.count - 1; i >= stage.first; --i) layers[static_cast<std::size_t>(i)]->backward_weights(context);
    } else if (a.work == Work::forward) {
      Tensor x;
      model::Batch batch;
      if (a.stage == 0 || a.stage == last) batch = step.batch(mb);
      if (a.stage == 0) {
        x = batch.inputs;
      } else if (owner_[static_cast<std::size_t>(a.stage - 1)] == me) {
        x = std::move(handed_input.at(key));
        handed_input.erase(key);
      } else {
        x = receive(a, owner_[static_cast<std::size_t>(a.stage - 1)], false);
      }
      for (int i = stage.first; i < stage.first + stage.count; ++i) x = layers[static_cast<std::size_t>(i)]->forward(x, context);
      // Losses the stage's layers add themselves (MoE balancing) join the loss where they arise:
      // the group sums every rank's share below.
      for (int i = stage.first; i < stage.first + stage.count; ++i)
        loss += layers[static_cast<std::size_t>(i)]->take_auxiliary_loss(context);
      std::int64_t leaving = 0;  // the output, sent or handed on: not this stage's to keep
      if (a.stage == last) {
        Tensor doutput;
        loss += model.loss(x, batch.targets, batch.normalizer, &doutput);
        loss_gradient[key] = std::move(doutput);
        x = Tensor();
      } else if (owner_[static_cast<std::size_t>(a.stage + 1)] == me) {
        leaving = static_cast<std::int64_t>(x.bytes());
        handed_input[{a.stage + 1, a.micro_batch}] = std::move(x);
      } else {
        leaving = static_cast<std::int64_t>(x.bytes());
        send(std::move(x), owner_[static_cast<std::size_t>(a.stage + 1)], a.stage + 1, a.micro_batch, false);
      }
      batch = model::Batch();
      if (record_) kept = activation_bytes() - held_before - leaving;
    } else {
      Tensor dy;
      if (a.stage == last) {
        dy = std::move(loss_gradient.at(key));
        loss_gradient.erase(key);
      } else if (owner_[static_cast<std::size_t>(a.stage + 1)] == me) {
        dy = std::move(handed_gradient.at(key));
        handed_gradient.erase(key);
      } else {
        dy = receive(a, owner_[static_cast<std::size_t>(a.stage + 1)], true);
      }
      // B accumulates gradients now; I only computes the input gradient and keeps the rest.
      if (a.work == Work::backward)
        begin_gradients();
      else
        context.defer_weight_gradients = true;
      for (int i = stage.first + stage.count - 1; i >= stage.first; --i)
        dy = layers[static_cast<std::size_t>(i)]->backward(dy, context);
      if (a.stage > 0) {
        if (owner_[static_cast<std::size_t>(a.stage - 1)] == me)
          handed_gradient[{a.stage - 1, a.micro_batch}] = std::move(dy);
        else
          send(std::move(dy), owner_[static_cast<std::size_t>(a.stage - 1)], a.stage - 1, a.micro_batch, true);
      }
      // I lets go of what W does not read (gradients are workspace, not activations).
      if (record_ && a.work == Work::input_grad) kept = activation_bytes() - held_before;
    }
    if (record_) events_.push_back({a, false, work_start, steady_seconds(), kept});
    // Sends that finished release their tensors.
    sending.erase(std::remove_if(sending.begin(), sending.end(), [](auto& s) { return s.first->test(); }), sending.end());
  };
  for (std::size_t index = 0; index < actions.size(); ++index) {
    // A failing action is named with its rank: the job is then aborted by whoever catches it,
    // and its peers, blocked on its messages, do not wait for them.
    try {
      run_action(index);
    } catch (const UsageError&) {
      throw;
    } catch (const std::exception& e) {
      // Error names this rank itself; its own message is kept, its place in the schedule added.
      const Error* error = dynamic_cast<const Error*>(&e);
      const Action& a = actions[index];
      throw Error("pipeline schedule " + schedule_.name + ", pipeline rank " + std::to_string(me) + ", action " +
                  a.text() + " (stage " + std::to_string(a.stage) + ", micro-batch " + std::to_string(a.micro_batch) +
                  "): " + (error != nullptr ? error->message() : std::string(e.what())));
    }
  }
  const double finishing = record_ ? steady_seconds() : 0;
  for (auto& [request, tensor] : sending) group_.wait(request);
  // The loss lives on the last stage: every rank of the group returns it.
  group_.all_reduce({&loss, 1, DataType::float64, MemorySpace::host}, {&loss, 1, DataType::float64, MemorySpace::host},
                    ReduceOp::sum);
  if (record_) events_.push_back({Action{-1, Work::forward, -1}, true, finishing, steady_seconds(), 0});
  peak_activation_bytes_ = peak.peak_above_start(MemoryCategory::activations);
  return loss;
}

}  // namespace parity::parallel::pipeline
