// Data parallelism: the shared step loop and the stage-0 (bucketed all-reduce) trainer. See
// data_parallel.hpp.
#include "reference/parallel/data_parallel.hpp"

#include <algorithm>
#include <chrono>

#include "reference/core/error.hpp"
#include "reference/cuda/device.hpp"
#include "reference/parallel/zero.hpp"

namespace parity::parallel {

double DataParallelTrainer::seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

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
                     std::to_string(world) + " ranks): every rank needs at least one row");
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
  if (zero_stage == 0) s += ", buckets of " + std::to_string(bucket_bytes) + " bytes (" + all_reduce + ")";
  s += overlap ? ", overlapped" : ", not overlapped";
  return s;
}

// ---- the shared trainer ----

namespace {
// The configuration, refused before any collective when it or the model does not fit.
DataParallelConfig checked(DataParallelConfig config, int world, const model::Model& model,
                           const model::Optimizer& optimizer) {
  config.validate(world);
  const DataType type = model.dtype();
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
}  // namespace

DataParallelTrainer::DataParallelTrainer(Communicator& world, model::Model& model, const model::Optimizer& optimizer,
                                         DataParallelConfig config)
    : world_(world),
      model_(model),
      optimizer_(optimizer),
      config_(checked(std::move(config), world.size(), model, optimizer)),
      stream_(world) {}

DataParallelTrainer::~DataParallelTrainer() { *alive_ = false; }

void DataParallelTrainer::add_hooks(const model::Hook& hook) {
  // Hooks stay on the model's layers; they do nothing once this trainer is gone.
  std::weak_ptr<bool> alive = alive_;
  for (model::Layer* layer : model::all_layers(model_.layers()))
    layer->add_hook([alive, hook](model::Layer& l, model::HookPoint point, const model::PassContext& context) {
      if (auto a = alive.lock(); a && *a) hook(l, point, context);
    });
}

void DataParallelTrainer::add_segment(std::string name, Tensor value, Tensor grad) {
  Segment s;
  s.name = std::move(name);
  for (int i = 0; i < optimizer_.state_count(); ++i)
    s.state.push_back(Tensor::zeros(s.name + ".state" + std::to_string(i), {value.numel()}, optimizer_.state_dtype(),
                                    MemoryCategory::optimizer_state, value.space()));
  if (config_.precision == Precision::mixed)
    s.master = cast(value, DataType::float32, s.name + ".master", MemoryCategory::optimizer_state);
  s.value = std::move(value);
  s.grad = std::move(grad);
  segments_.push_back(std::move(s));
}

CommStream::Ticket DataParallelTrainer::enqueue(std::string what, Collective collective, const std::string& algorithm,
                                                BufferView send, BufferView recv) {
  const AlgorithmDescriptor* a = &find_algorithm(collective, algorithm);
  CollectiveCall call;
  call.collective = collective;
  call.send = send;
  call.recv = recv;
  const CommStream::Ticket ticket =
      stream_.enqueue(std::move(what), [a, call](Communicator& comm) { run_collective(comm, *a, call, kHalfReduction); });
  if (config_.overlap) stream_.progress();
  return ticket;
}

StepStats DataParallelTrainer::step(const BatchSource& batches, std::uint64_t step) {
  const auto start = std::chrono::steady_clock::now();
  const TrafficCounters before = stream_.communicator().traffic();
  stream_.reset_busy();
  exposed_ = 0;
  const auto micro = split_rows(batch_shard(config_.global_batch, world_.rank(), world_.size()), config_.micro_batches);
  StepStats stats;
  begin_step();
  double loss = 0, passes = 0;
  for (std::size_t i = 0; i < micro.size(); ++i) {
    micro_batch_ = static_cast<int>(i);
    last_micro_batch_ = i + 1 == micro.size();
    begin_micro_batch(last_micro_batch_);
    const model::Batch batch = batches(step, micro[i].first, micro[i].rows, config_.global_batch).to(model_.space());
    const auto compute = std::chrono::steady_clock::now();
    loss += model_.forward_backward(batch, {step, micro_batch_, true, micro[i].first});
    passes += seconds_since(compute);
  }
  // Communication run from the backward hooks, and parameter gathers waited for there, took
  // time from the computation on this thread: exposed, not hidden.
  const double in_passes = exposed_ + stream_.progress_seconds();
  stats.compute_seconds = passes - in_passes;
  finish_gradients();
  apply_optimizer();
  finish_step();
  world_.all_reduce({&loss, 1, DataType::float64, MemorySpace::host}, {&loss, 1, DataType::float64, MemorySpace::host},
                    ReduceOp::sum);
  stats.loss = loss;
  if (model_.space() == MemorySpace::cuda) cuda::synchronize();  // the step ends when the GPU is done
  stats.seconds = seconds_since(start);
  stats.exposed_comm_seconds = exposed_ + stream_.progress_seconds();
  stats.stream_seconds = stream_.busy_seconds();
  stats.bytes_sent = stream_.communicator().traffic().bytes_sent - before.bytes_sent;
  stats.messages_sent = stream_.communicator().traffic().messages_sent - before.messages_sent;
  return stats;
}

void DataParallelTrainer::apply_optimizer() {
  ++steps_;
  for (Segment& s : segments_) {
    if (s.master.defined()) {
      const Tensor grad = cast(s.grad, DataType::float32, s.name + ".grad32", MemoryCategory::workspace);
      optimizer_.update(s.master, grad, s.state, steps_);
      copy_into(s.value, s.master);
    } else {
      optimizer_.update(s.value, s.grad, s.state, steps_);
    }
  }
}

// ---- stage 0 ----

DataParallel::DataParallel(Communicator& world, model::Model& model, const model::Optimizer& optimizer,
                           DataParallelConfig config)
    : DataParallelTrainer(world, model, optimizer, std::move(config)) {
  std::vector<model::Parameter*> parameters = model.parameters();
  std::reverse(parameters.begin(), parameters.end());  // backward produces gradients last layer first
  std::vector<std::vector<model::Parameter*>> groups(1);
  std::size_t bytes = 0;
  for (model::Parameter* p : parameters) {
    if (bytes >= config_.bucket_bytes) {
      groups.emplace_back();
      bytes = 0;
    }
    groups.back().push_back(p);
    bytes += p->value.bytes();
    parameters_ += p->value.numel();
  }
  for (auto& group : groups) {
    if (group.empty()) continue;
    Bucket& b = buckets_.emplace_back();
    std::int64_t count = 0;
    for (model::Parameter* p : group) count += p->value.numel();
    b.grads = Tensor::zeros("bucket" + std::to_string(buckets_.size() - 1) + ".grads", {count}, model.dtype(),
                            MemoryCategory::gradients, model.space());
    std::int64_t offset = 0;
    for (model::Parameter* p : group) {
      p->grad = b.grads.segment(p->name + ".grad", offset, p->value.shape());
      offset += p->value.numel();
      bucket_of_[p] = buckets_.size() - 1;
      b.parameters.push_back(p);
    }
  }
  for (model::Layer* layer : model::all_layers(model.layers())) {
    for (model::Parameter* p : layer->own_parameters()) ++users_[p];
    for (model::Parameter* p : layer->borrowed_parameters()) ++users_[p];
  }
  // Optimizer segments in model order.
  for (model::Parameter* p : model.parameters()) add_segment(p->name, p->value, p->grad);

  add_hooks([this](model::Layer& layer, model::HookPoint point, const model::PassContext&) {
    if (point != model::HookPoint::after_backward) return;
    if (last_micro_batch_) {
      for (model::Parameter* p : layer.own_parameters()) parameter_final(p);
      for (model::Parameter* p : layer.borrowed_parameters()) parameter_final(p);
    }
    if (config_.overlap) stream_.progress();
  });
}

void DataParallel::begin_step() {
  for (Bucket& b : buckets_) {
    b.grads.zero();
    b.launched = false;
  }
}

void DataParallel::begin_micro_batch(bool last) {
  if (!last) return;
  pending_ = users_;
  for (Bucket& b : buckets_) b.pending = static_cast<int>(b.parameters.size());
}

void DataParallel::parameter_final(model::Parameter* p) {
  auto it = pending_.find(p);
  if (it == pending_.end() || --it->second != 0) return;
  Bucket& b = buckets_[bucket_of_.at(p)];
  if (--b.pending == 0 && config_.overlap) launch(b);
}

void DataParallel::launch(Bucket& b) {
  b.launched = true;
  enqueue("all_reduce of " + b.grads.describe(), Collective::all_reduce, config_.all_reduce, b.grads.view(),
          b.grads.view());
}

void DataParallel::finish_gradients() {
  const auto start = std::chrono::steady_clock::now();
  // Without overlap every bucket starts here; with it, only a bucket holding a parameter that
  // no backward touched (the same on every rank, so the order stays common).
  for (Bucket& b : buckets_)
    if (!b.launched) launch(b);
  stream_.synchronize();
  exposed_ += seconds_since(start);
}

std::vector<std::vector<std::string>> DataParallel::bucket_parameters() const {
  std::vector<std::vector<std::string>> out;
  for (const Bucket& b : buckets_) {
    auto& names = out.emplace_back();
    for (const model::Parameter* p : b.parameters) names.push_back(p->name);
  }
  return out;
}

ParameterValues DataParallel::gathered(bool master) {
  ParameterValues out;
  for (const Segment& s : segments_) {
    out.names.push_back(s.name);
    out.values.push_back((master && s.master.defined() ? s.master : s.value).to_vector());
    auto& state = out.state.emplace_back();
    for (const Tensor& t : s.state) state.push_back(t.to_vector());
  }
  return out;
}

std::unique_ptr<DataParallelTrainer> make_trainer(Communicator& world, model::Model& model,
                                                  const model::Optimizer& optimizer, const DataParallelConfig& config) {
  config.validate(world.size());
  if (config.zero_stage == 0) return std::make_unique<DataParallel>(world, model, optimizer, config);
  return std::make_unique<Zero>(world, model, optimizer, config);
}

}  // namespace parity::parallel
