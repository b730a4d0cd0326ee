// The trainer that runs a step's parts (see trainer.hpp).
#include "reference/parallel/trainer.hpp"

#include <map>
#include <set>

#include "reference/core/error.hpp"
#include "reference/cuda/device.hpp"

namespace parity::parallel {

Trainer::Trainer(model::Model& model, Communicator& data_parallel, std::int64_t global_batch, int micro_batches,
                 StepParts parts)
    : model_(model),
      data_parallel_(data_parallel),
      global_batch_(global_batch),
      micro_batches_(micro_batches),
      parts_(std::move(parts)),
      job_(&data_parallel) {
  require(parts_.schedule && parts_.optimizer, "Trainer: a step needs a schedule and an optimizer step");
  split_rows(batch_shard(global_batch_, data_parallel_.size() - 1, data_parallel_.size()), micro_batches_);
  for (model::Layer* layer : model::all_layers(model_.layers()))
    hooks_.emplace_back(layer, layer->add_hook([this](model::Layer& l, model::HookPoint point,
                                                      const model::PassContext& context) {
      for (auto& sync : parts_.syncs) sync->on_layer(l, point, context);
    }));
}

Trainer::~Trainer() {
  for (auto& [layer, id] : hooks_) layer->remove_hook(id);
}

void Trainer::add_sync(std::unique_ptr<GradientSync> sync) {
  require(sync != nullptr, "Trainer::add_sync: no synchronisation");
  parts_.syncs.push_back(std::move(sync));
}

std::vector<StepPart*> Trainer::all_parts() {
  std::vector<StepPart*> out = {parts_.schedule.get()};
  for (auto& s : parts_.syncs) out.push_back(s.get());
  out.push_back(parts_.optimizer.get());
  return out;
}

void Trainer::set_loss_scaling(const LossScaling& scaling, Communicator* job) {
  LossScaler scaler(scaling);  // validates
  require(!scaling.dynamic || parts_.optimizer->precision() == Precision::mixed,
          "Trainer: loss scaling without mixed precision");
  scaler_ = scaler;
  job_ = job != nullptr ? job : &data_parallel_;
}

bool Trainer::update_applies(std::uint64_t step) {
  if (parts_.optimizer->precision() != Precision::mixed) return true;
  // Agreed over every rank that trains the model, so that all skip or none.
  return scaler_.applies(find_nonfinite(*job_, parts_.optimizer->gradients()), step, model_.dtype());
}

StepStats Trainer::step(const BatchSource& batches, std::uint64_t step) {
  const auto start = std::chrono::steady_clock::now();
  // Every stream and communicator the parts use, once each, for the traffic and timing.
  std::set<CommStream*> streams;
  std::set<Communicator*> communicators;
  for (StepPart* part : all_parts()) {
    part->exposed_seconds = 0;
    for (CommStream* s : part->streams()) {
      streams.insert(s);
      communicators.insert(&s->communicator());
    }
    for (Communicator* c : part->communicators()) communicators.insert(c);
  }
  std::map<Communicator*, TrafficCounters> before;
  for (Communicator* c : communicators) before[c] = c->traffic();
  for (CommStream* s : streams) s->reset_busy();

  std::vector<GradientSync*> syncs;
  for (auto& sync : parts_.syncs) syncs.push_back(sync.get());
  const double scale = scaler_.scale();
  const StepContext context(model_, step,
                            micro_batches_of(global_batch_, data_parallel_.rank(), data_parallel_.size(), micro_batches_),
                            batches, global_batch_, scale, std::move(syncs));
  StepStats stats;
  for (auto& sync : parts_.syncs) sync->begin_step();
  const auto passes_start = std::chrono::steady_clock::now();
  stats.loss_scale = scale;
  double loss = parts_.schedule->run(context) / scale;
  const double passes = seconds_since(passes_start);
  // Communication run from the backward hooks, and waits inside the passes (ZeRO-3 gathers),
  // took time from the computation on this thread: exposed, not hidden.
  auto exposed_and_progress = [&] {
    double t = 0;
    for (StepPart* part : all_parts()) t += part->exposed_seconds;
    for (CommStream* s : streams) t += s->progress_seconds();
    return t;
  };
  stats.compute_seconds = passes - exposed_and_progress();
  for (auto& sync : parts_.syncs) sync->finish();
  const bool applies = update_applies(step);
  if (applies)
    parts_.optimizer->apply(scaler_.unscale());
  else
    stats.skipped = true;  // on every rank: the decision was agreed
  scaler_.update(applies);
  data_parallel_.all_reduce({&loss, 1, DataType::float64, MemorySpace::host},
                            {&loss, 1, DataType::float64, MemorySpace::host}, ReduceOp::sum);
  stats.loss = loss;
  if (model_.space() == MemorySpace::cuda) cuda::synchronize();  // the step ends when the GPU is done
  stats.seconds = seconds_since(start);
  stats.exposed_comm_seconds = exposed_and_progress();
  for (CommStream* s : streams) stats.stream_seconds += s->busy_seconds();
  for (Communicator* c : communicators) {
    stats.bytes_sent += c->traffic().bytes_sent - before[c].bytes_sent;
    stats.messages_sent += c->traffic().messages_sent - before[c].messages_sent;
  }
  return stats;
}

}  // namespace parity::parallel
