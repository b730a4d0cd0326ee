// The step's parts, the context a schedule runs in, and the parts every technique can use
// (see step.hpp).
#include "reference/parallel/step.hpp"

#include <algorithm>

#include "reference/core/error.hpp"

namespace parity::parallel {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// ---- optimizer steps ----

OptimizerStep::OptimizerStep(const model::Optimizer& optimizer, Precision precision)
    : optimizer_(optimizer), precision_(precision) {}

void OptimizerStep::add_segment(std::string name, Tensor value, Tensor grad, std::vector<SegmentPart> parts) {
  Segment s;
  s.name = std::move(name);
  s.parts = std::move(parts);
  for (int i = 0; i < optimizer_.state_count(); ++i)
    s.state.push_back(Tensor::zeros(s.name + ".state" + std::to_string(i), {value.numel()}, optimizer_.state_dtype(),
                                    MemoryCategory::optimizer_state, value.space()));
  if (precision_ == Precision::mixed) s.master = master_copy(value, s.name);
  s.value = std::move(value);
  s.grad = std::move(grad);
  segments_.push_back(std::move(s));
}

namespace {
// A stretch of a segment's elements in one weight-decay group.
struct DecayRun {
  std::int64_t first = 0, count = 0;
  bool decay = true;
};
// The segment's elements in runs of one group, in order and covering all of them (a ZeRO chunk
// may hold parameters of both groups; its padding, zeros that stay zero, joins a neighbour).
std::vector<DecayRun> decay_runs(const model::Optimizer& optimizer, const Segment& s) {
  const std::int64_t n = s.grad.numel();
  std::vector<const SegmentPart*> parts;
  for (const SegmentPart& part : s.parts) parts.push_back(&part);
  std::sort(parts.begin(), parts.end(), [](const SegmentPart* a, const SegmentPart* b) { return a->in_segment < b->in_segment; });
  std::vector<DecayRun> runs;
  for (const SegmentPart* part : parts) {
    const bool decay = optimizer.decays(part->parameter->name);
    const std::int64_t end = part->in_segment + part->count;
    if (runs.empty())
      runs.push_back({0, end, decay});
    else if (runs.back().decay == decay)
      runs.back().count = end - runs.back().first;
    else
      runs.push_back({runs.back().first + runs.back().count, end - (runs.back().first + runs.back().count), decay});
  }
  if (runs.empty()) runs.push_back({0, n, true});
  runs.back().count = n - runs.back().first;
  return runs;
}
}  // namespace

void OptimizerStep::apply(double unscale) {
  require(unscale == 1 || precision_ == Precision::mixed, "OptimizerStep: loss scaling without mixed precision");
  ++steps_;
  for (Segment& s : segments_) {
    for (const DecayRun& r : decay_runs(optimizer_, s)) {
      const bool whole = r.first == 0 && r.count == s.grad.numel();
      const auto part = [&](const Tensor& t) { return whole ? t : t.segment(t.name(), r.first, {r.count}); };
      Tensor value = part(s.value);
      const Tensor grad = part(s.grad);
      std::vector<Tensor> state;
      for (const Tensor& t : s.state) state.push_back(part(t));
      if (s.master.defined()) {
        Tensor master = part(s.master);
        update_through_master(optimizer_, value, master, grad, state, steps_, unscale, s.name, r.decay);
      } else {
        optimizer_.update(value, grad, state, steps_, r.decay);
      }
    }
  }
  finish_update();
}

void OptimizerStep::restore_steps(std::int64_t steps) {
  if (steps < 0) throw UsageError("a saved optimizer step count cannot be negative (" + std::to_string(steps) + ")");
  steps_ = steps;
}

std::vector<BufferView> OptimizerStep::gradients() const {
  std::vector<BufferView> grads;
  for (const Segment& s : segments_) grads.push_back(s.grad.view());
  return grads;
}

std::int64_t OptimizerStep::padded_parameters() const {
  std::int64_t total = 0;
  for (const theory::ShardedUnit& u : units()) total += u.padded;
  return total;
}

ReplicatedOptimizer::ReplicatedOptimizer(model::Model& model, const model::Optimizer& optimizer, Precision precision)
    : OptimizerStep(optimizer, precision) {
  for (model::Parameter* p : model.parameters()) {
    add_segment(p->name, p->value, p->gradient(), {{p, p->value.shape(), 0, 0, p->value.numel()}});
    parameters_ += p->value.numel();
  }
}

ParameterValues ReplicatedOptimizer::gathered(bool master) {
  ParameterValues out;
  for (const Segment& s : segments_) {
    out.names.push_back(s.name);
    out.values.push_back((master && s.master.defined() ? s.master : s.value).to_vector());
    auto& state = out.state.emplace_back();
    for (const Tensor& t : s.state) state.push_back(t.to_vector());
  }
  return out;
}

std::vector<theory::ShardedUnit> ReplicatedOptimizer::units() const { return {{parameters_, parameters_, 1}}; }

// ---- plain all-reduce ----

AllReduceSync::AllReduceSync(std::string what, Communicator& group, std::vector<model::Parameter*> parameters,
                             std::string algorithm)
    : what_(std::move(what)),
      group_(group),
      parameters_(std::move(parameters)),
      algorithm_(&find_algorithm(Collective::all_reduce, algorithm)) {}

std::string AllReduceSync::describe() const {
  return "all-reduce of " + what_ + " (" + std::to_string(parameters_.size()) + " parameters) over " +
         std::to_string(group_.size()) + " ranks (" + algorithm_->name + ")";
}

void AllReduceSync::finish() {
  if (group_.size() == 1) return;
  const auto start = std::chrono::steady_clock::now();
  for (model::Parameter* p : parameters_) {
    CollectiveCall call;
    call.send = call.recv = p->gradient().view();
    run_collective(group_, *algorithm_, call, kHalfReduction);
  }
  exposed_seconds += seconds_since(start);
}

// ---- the step's context and the sequential schedule ----

StepContext::StepContext(model::Model& model, std::uint64_t step, std::vector<MicroBatch> micro_batches,
                         const BatchSource& batches, std::int64_t global_rows, double loss_scale,
                         std::vector<GradientSync*> syncs)
    : model_(model),
      step_(step),
      micro_batches_(std::move(micro_batches)),
      batches_(batches),
      global_rows_(global_rows),
      loss_scale_(loss_scale),
      syncs_(std::move(syncs)) {}

model::Batch StepContext::batch(const MicroBatch& mb) const {
  model::Batch b = batches_(step_, mb.rows.first, mb.rows.rows, global_rows_).to(model_.space());
  b.normalizer /= loss_scale_;  // the loss times the loss scale, exactly (a power of two)
  return b;
}

model::PassContext StepContext::pass_context(const MicroBatch& mb) const {
  model::PassContext context{step_, mb.index, true, mb.rows.first};
  context.global_rows = global_rows_;
  context.loss_scale = loss_scale_;
  return context;
}

void StepContext::begin_backward(const MicroBatch& mb) const {
  for (GradientSync* sync : syncs_) sync->begin_backward(mb);
}

double SequentialSchedule::run(const StepContext& step) {
  model::Model& model = step.model();
  double loss = 0;
  for (const MicroBatch& mb : step.micro_batches()) {
    const model::Batch batch = step.batch(mb);
    const model::PassContext context = step.pass_context(mb);
    Tensor output = model.forward(batch.inputs, context);
    Tensor doutput;
    loss += model.loss(output, batch.targets, batch.normalizer, &doutput) + model.take_auxiliary_loss(context);
    output = Tensor();  // the loss made its gradient: the logits are not needed in backward
    step.begin_backward(mb);
    model.backward(doutput, context);
  }
  return loss;
}

}  // namespace parity::parallel
