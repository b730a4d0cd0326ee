// The step in parts and the trainer that runs them (see step.hpp).
#include "reference/parallel/step.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>

#include "reference/core/error.hpp"
#include "reference/cuda/device.hpp"
#include "reference/kernels/buffer_kernels.hpp"

namespace parity::parallel {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// ---- batches ----

BatchSource batches_of(const model::GptConfig& config) {
  return [config](std::uint64_t step, std::int64_t first, std::int64_t rows, std::int64_t global) {
    return model::gpt_batch(config, step, first, rows, global);
  };
}

BatchSource batches_of(const model::MlpConfig& config) {
  return [config](std::uint64_t step, std::int64_t first, std::int64_t rows, std::int64_t global) {
    return model::mlp_batch(config, step, first, rows, global);
  };
}

RowRange batch_shard(std::int64_t global_rows, int rank, int world) {
  require(world > 0 && rank >= 0 && rank < world, "batch_shard: rank outside the world");
  if (global_rows < world)
    throw UsageError("the global batch (" + std::to_string(global_rows) + " rows) is smaller than the world (" +
                     std::to_string(world) + " data-parallel ranks): every rank needs at least one row");
  const std::int64_t base = global_rows / world, extra = global_rows % world;
  return {rank * base + std::min<std::int64_t>(rank, extra), base + (rank < extra ? 1 : 0)};
}

std::vector<RowRange> split_rows(RowRange shard, int count) {
  if (count < 1) throw UsageError("micro-batches per step must be at least 1, not " + std::to_string(count));
  if (shard.rows < count)
    throw UsageError("a rank with " + std::to_string(shard.rows) + " rows cannot split them into " +
                     std::to_string(count) + " micro-batches");
  std::vector<RowRange> out;
  for (int i = 0; i < count; ++i) {
    const RowRange part = batch_shard(shard.rows, i, count);
    out.push_back({shard.first + part.first, part.rows});
  }
  return out;
}

std::string_view name_of(Precision precision) { return precision == Precision::mixed ? "mixed" : "model"; }

Precision parse_precision(std::string_view text) {
  if (text == "mixed") return Precision::mixed;
  if (text == "model" || text == "float32" || text == "float64") return Precision::model;
  throw UsageError("unknown precision '" + std::string(text) + "' (known: mixed, float32, float64)");
}

// ---- loss scaling ----

namespace {
std::string number(double x) {
  char text[32];
  std::snprintf(text, sizeof text, "%.17g", x);
  return text;
}
}  // namespace

void LossScaling::validate() const {
  int exponent = 0;
  const double mantissa = std::frexp(initial_scale, &exponent);
  if (!(initial_scale >= kSmallestLossScale && initial_scale <= 0x1p100) || mantissa != 0.5)
    throw UsageError("the initial loss scale must be a power of two from 2^-24 to 2^100 (so that scaling is exact), "
                     "not " + number(initial_scale));
  if (growth_interval < 1)
    throw UsageError("the loss scale's growth interval must be at least 1 clean step, not " + std::to_string(growth_interval));
}

std::string LossScaling::describe() const {
  if (!dynamic) return "no loss scaling";
  int exponent = 0;
  std::frexp(initial_scale, &exponent);
  return "dynamic loss scaling from 2^" + std::to_string(exponent - 1) + ", x2 after " + std::to_string(growth_interval) +
         " clean steps";
}

// ---- data-parallel configuration ----

void DataParallelConfig::validate(int world) const {
  if (zero_stage < 0 || zero_stage > 3)
    throw UsageError("ZeRO stage " + std::to_string(zero_stage) + " is outside 0-3 (0 is plain data parallelism)");
  if (bucket_bytes == 0) throw UsageError("the gradient bucket size must be positive, not 0 bytes");
  const RowRange smallest = batch_shard(global_batch, world - 1, world);  // the last rank has the fewest rows
  split_rows(smallest, micro_batches);
  find_algorithm(Collective::all_reduce, all_reduce);
  find_algorithm(Collective::reduce_scatter, reduce_scatter);
  find_algorithm(Collective::all_gather, all_gather);
}

std::string DataParallelConfig::describe() const {
  std::string s = zero_stage == 0 ? "data parallel" : "ZeRO-" + std::to_string(zero_stage);
  s += ", global batch " + std::to_string(global_batch) + ", " + std::to_string(micro_batches) + " micro-batch" +
       (micro_batches > 1 ? "es" : "") + ", " + std::string(name_of(precision)) + " precision";
  if (precision == Precision::mixed) s += ", " + loss_scaling.describe();
  if (zero_stage == 0) s += ", buckets of " + std::to_string(bucket_bytes) + " bytes (" + all_reduce + ")";
  s += overlap ? ", overlapped" : ", not overlapped";
  return s;
}

DataParallelConfig checked_config(DataParallelConfig config, int world, const model::Model& model,
                                  const model::Optimizer& optimizer) {
  config.validate(world);
  const DataType type = model.dtype();
  if (config.loss_scaling.dynamic && config.precision != Precision::mixed)
    throw UsageError("loss scaling is for 16-bit gradients: it needs --precision mixed");
  config.loss_scaling.validate();
  if (config.precision == Precision::mixed) {
    if (!is_half(type))
      throw UsageError("mixed precision needs a model in float16 or bfloat16, not " + std::string(name_of(type)));
    if (optimizer.state_dtype() != DataType::float32)
      throw UsageError("mixed precision keeps float32 master weights and optimizer state (K = 12 bytes per "
                       "parameter with Adam); the optimizer's state is " +
                       std::string(name_of(optimizer.state_dtype())));
  } else if (type != DataType::float32 && type != DataType::float64) {
    throw UsageError("a " + std::string(name_of(type)) + " model needs --precision mixed (float32 master weights)");
  }
  return config;
}

// ---- optimizer steps ----

OptimizerStep::OptimizerStep(const model::Optimizer& optimizer, Precision precision)
    : optimizer_(optimizer), precision_(precision) {}

void OptimizerStep::add_segment(std::string name, Tensor value, Tensor grad) {
  Segment s;
  s.name = std::move(name);
  for (int i = 0; i < optimizer_.state_count(); ++i)
    s.state.push_back(Tensor::zeros(s.name + ".state" + std::to_string(i), {value.numel()}, optimizer_.state_dtype(),
                                    MemoryCategory::optimizer_state, value.space()));
  if (precision_ == Precision::mixed)
    s.master = cast(value, DataType::float32, s.name + ".master", MemoryCategory::optimizer_state);
  s.value = std::move(value);
  s.grad = std::move(grad);
  segments_.push_back(std::move(s));
}

void OptimizerStep::apply(double unscale) {
  require(unscale == 1 || precision_ == Precision::mixed, "OptimizerStep: loss scaling without mixed precision");
  ++steps_;
  for (Segment& s : segments_) {
    if (s.master.defined()) {
      Tensor grad = cast(s.grad, DataType::float32, s.name + ".grad32", MemoryCategory::workspace);
      if (unscale != 1) scale_buffer(grad.view(), unscale);
      optimizer_.update(s.master, grad, s.state, steps_);
      copy_into(s.value, s.master);
    } else {
      optimizer_.update(s.value, s.grad, s.state, steps_);
    }
  }
  finish_update();
}

std::size_t OptimizerStep::nonfinite_gradients() const {
  std::vector<BufferView> grads;
  for (const Segment& s : segments_) grads.push_back(s.grad.view());
  return count_nonfinite(grads);  // on a device: one read for all segments
}

std::int64_t OptimizerStep::padded_parameters() const {
  std::int64_t total = 0;
  for (const theory::ShardedUnit& u : units()) total += u.padded;
  return total;
}

ReplicatedOptimizer::ReplicatedOptimizer(model::Model& model, const model::Optimizer& optimizer, Precision precision)
    : OptimizerStep(optimizer, precision) {
  for (model::Parameter* p : model.parameters()) {
    add_segment(p->name, p->value, p->gradient());
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

// ---- schedule ----

double SequentialSchedule::run(Trainer& trainer, const std::vector<MicroBatch>& micro_batches, std::uint64_t) {
  model::Model& model = trainer.model();
  double loss = 0;
  for (const MicroBatch& mb : micro_batches) {
    const model::Batch batch = trainer.batch(mb);
    const model::PassContext context = trainer.context(mb);
    Tensor output = model.forward(batch.inputs, context);
    Tensor doutput;
    loss += model.loss(output, batch.targets, batch.normalizer, &doutput) + model.take_auxiliary_loss(context);
    output = Tensor();  // the loss made its gradient: the logits are not needed in backward
    trainer.begin_backward(mb);
    model.backward(doutput, context);
  }
  return loss;
}

// ---- trainer ----

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

model::Batch Trainer::batch(const MicroBatch& mb) const {
  require(batches_ != nullptr, "Trainer: batch() outside step()");
  model::Batch b = (*batches_)(step_, mb.rows.first, mb.rows.rows, global_batch_).to(model_.space());
  b.normalizer /= scale_;  // the loss times the loss scale, exactly (a power of two)
  return b;
}

model::PassContext Trainer::context(const MicroBatch& mb) const {
  model::PassContext context{step_, mb.index, true, mb.rows.first};
  context.global_rows = global_batch_;
  context.loss_scale = scale_;
  return context;
}

void Trainer::set_loss_scaling(const LossScaling& scaling, Communicator* job) {
  scaling.validate();
  require(!scaling.dynamic || parts_.optimizer->precision() == Precision::mixed,
          "Trainer: loss scaling without mixed precision");
  scaling_ = scaling;
  scale_ = scaling.dynamic ? scaling.initial_scale : 1;
  clean_steps_ = 0;
  job_ = job != nullptr ? job : &data_parallel_;
}

bool Trainer::gradients_finite(std::uint64_t step) {
  if (parts_.optimizer->precision() != Precision::mixed) return true;
  // Agreed over every rank that trains the model: [non-finite elements, ranks that hold some].
  const double mine = static_cast<double>(parts_.optimizer->nonfinite_gradients());
  double found[2] = {mine, mine > 0 ? 1.0 : 0.0};
  job_->all_reduce({found, 2, DataType::float64, MemorySpace::host}, {found, 2, DataType::float64, MemorySpace::host},
                   ReduceOp::sum);
  if (found[0] == 0) return true;
  const std::string what = "step " + std::to_string(step) + ": " + number(found[0]) +
                           " gradient elements are inf or NaN on " + number(found[1]) + " of " +
                           std::to_string(job_->size()) + " ranks";
  if (!scaling_.dynamic)
    throw Error(what + ", and without loss scaling the step cannot be skipped: " +
                std::string(name_of(model_.dtype())) + " gradients overflowed; train with dynamic loss scaling "
                "(DataParallelConfig::loss_scaling)");
  if (scale_ / 2 < kSmallestLossScale)
    throw Error(what + " at every loss scale down to 2^-24: a NaN of their own, not an overflow");
  return false;
}

void Trainer::begin_backward(const MicroBatch& mb) {
  for (auto& sync : parts_.syncs) sync->begin_backward(mb);
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

  std::vector<MicroBatch> micro;
  const auto rows = split_rows(batch_shard(global_batch_, data_parallel_.rank(), data_parallel_.size()), micro_batches_);
  for (std::size_t i = 0; i < rows.size(); ++i) micro.push_back({static_cast<int>(i), rows[i], i + 1 == rows.size()});

  batches_ = &batches;
  step_ = step;
  StepStats stats;
  for (auto& sync : parts_.syncs) sync->begin_step();
  const auto passes_start = std::chrono::steady_clock::now();
  stats.loss_scale = scale_;
  double loss = parts_.schedule->run(*this, micro, step) / scale_;
  const double passes = seconds_since(passes_start);
  batches_ = nullptr;
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
  if (gradients_finite(step)) {
    parts_.optimizer->apply(1 / scale_);
    if (scaling_.dynamic && ++clean_steps_ == scaling_.growth_interval) {
      scale_ = std::min(scale_ * 2, 0x1p100);
      clean_steps_ = 0;
    }
  } else {
    stats.skipped = true;  // on every rank: the decision was agreed
    scale_ /= 2;
    clean_steps_ = 0;
  }
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
