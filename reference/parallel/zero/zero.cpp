// ZeRO stages 1-3 on flat, padded units (see zero.hpp).
#include "reference/parallel/zero/zero.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "reference/core/error.hpp"
#include "reference/kernels/buffer_kernels.hpp"
#include "reference/parallel/precision/precision.hpp"

namespace parity::parallel {

namespace {
// Copies each parameter's values into its place in `flat` (padding stays zero).
void pack(Tensor& flat, const std::vector<model::Parameter*>& parameters, const std::vector<std::int64_t>& offsets) {
  for (std::size_t i = 0; i < parameters.size(); ++i) {
    Tensor place = flat.segment(parameters[i]->name, offsets[i], {parameters[i]->value.numel()});
    copy_into(place, parameters[i]->value);
  }
}

// All-gathers every rank's chunk of a flat unit into one whole buffer (blocking, on comm).
Tensor gather_whole(Communicator& comm, const Tensor& chunk, std::int64_t padded, const std::string& name) {
  Tensor whole = Tensor::empty(name, {padded}, chunk.dtype(), MemoryCategory::workspace, chunk.space());
  Tensor mine = whole.segment(name + ".mine", comm.rank() * chunk.numel(), {chunk.numel()});
  copy_into(mine, chunk);
  comm.all_gather(mine.view(), whole.view());
  return whole;
}
}  // namespace

// The units and their buffers, shared by the two parts (see zero.hpp).
class ZeroShards {
 public:
  ZeroShards(Communicator& group, model::Model& model, const DataParallelConfig& config);
  struct Unit {
    std::string name;
    std::vector<model::Parameter*> parameters;
    std::vector<std::int64_t> offsets;  // of each parameter in the flat buffer
    std::vector<Shape> shapes;
    std::int64_t count = 0;             // parameter elements
    std::int64_t padded = 0;            // count rounded up to a multiple of n
    std::int64_t chunk = 0;             // padded / n
    Tensor flat_parameters;             // stages 1-2: the model's storage; stage 3: gathered around a pass
    Tensor parameter_chunk;             // stage 3: the rank's chunk (stages 1-2: a segment of the flat buffer)
    Tensor flat_gradients;              // stage 1: kept; stages 2-3: while backward produces it
    Tensor gradient_chunk;              // stages 2-3
    int users = 0;                      // top-level layers whose forward reads these parameters
    int pending = 0;                    // users whose backward has not run in this micro-batch
    int remaining = 0;                  // stage 1: backwards of users still to run in this step
    int gathered = 0;                   // stage 3: passes holding the gathered parameters
  };
  // The part of this rank's gradient chunk the optimizer reads (stage 1: a segment of the
  // full gradient).
  Tensor gradient_chunk_of(const Unit& u) const;
  void hook(model::Layer& layer, model::HookPoint point, double& exposed);
  void begin_step();
  void begin_backward();
  void finish_gradients(double& exposed);
  void share_parameters(double& exposed);  // stages 1-2, after the update
  std::vector<theory::ShardedUnit> units() const;
  const std::vector<Unit>& unit_list() const { return units_; }
  Communicator& group() { return group_; }
  CommStream& stream() { return stream_; }
  const DataParallelConfig& config() const { return config_; }

 private:
  void acquire_parameters(Unit& unit, double& exposed);  // stage 3
  void release_parameters(Unit& unit);                   // stage 3
  void ensure_gradients(Unit& unit);                     // stages 2-3
  void gradients_final(Unit& unit);
  void point_gradients(Unit& unit);                      // parameters' grads -> segments of flat_gradients
  // Runs a collective on the stream; returns at once when overlap is on (progress() later).
  CommStream::Ticket enqueue(std::string what, Collective collective, const std::string& algorithm, BufferView send,
                             BufferView recv);
  Communicator& group_;
  DataParallelConfig config_;
  CommStream stream_;
  std::vector<Unit> units_;
  std::map<const model::Layer*, std::vector<std::size_t>> needs_;  // top-level layer -> units it reads
};

namespace {

class ZeroSync : public GradientSync {
 public:
  explicit ZeroSync(std::shared_ptr<ZeroShards> shards) : shards_(std::move(shards)) {}
  std::string describe() const override {
    const int stage = shards_->config().zero_stage;
    return std::string(stage == 3 ? "parameters gathered around each pass, " : "") +
           "gradients reduce-scattered (" + shards_->config().reduce_scatter + ") over " +
           std::to_string(shards_->group().size()) + " ranks" + (stage == 1 ? " once per step" : " every micro-batch");
  }
  std::vector<CommStream*> streams() override { return {&shards_->stream()}; }
  void on_layer(model::Layer& layer, model::HookPoint point, const model::PassContext&) override {
    shards_->hook(layer, point, exposed_seconds);
  }
  void begin_step() override { shards_->begin_step(); }
  void begin_backward(const MicroBatch&) override { shards_->begin_backward(); }
  void finish() override { shards_->finish_gradients(exposed_seconds); }

 private:
  std::shared_ptr<ZeroShards> shards_;
};

class ZeroOptimizer : public OptimizerStep {
 public:
  ZeroOptimizer(std::shared_ptr<ZeroShards> shards, const model::Optimizer& optimizer)
      : OptimizerStep(optimizer, shards->config().precision), shards_(std::move(shards)) {
    const std::int64_t rank = shards_->group().rank();
    for (const auto& u : shards_->unit_list()) {
      // The parameters' elements within this rank's chunk [rank c, (rank + 1) c) of the unit.
      std::vector<SegmentPart> parts;
      const std::int64_t first = rank * u.chunk, last = first + u.chunk;
      for (std::size_t i = 0; i < u.parameters.size(); ++i) {
        const std::int64_t begin = std::max(first, u.offsets[i]);
        const std::int64_t end = std::min(last, u.offsets[i] + element_count(u.shapes[i]));
        if (begin < end) parts.push_back({u.parameters[i], u.shapes[i], begin - first, begin - u.offsets[i], end - begin});
      }
      add_segment(u.name, u.parameter_chunk, shards_->gradient_chunk_of(u), std::move(parts));
    }
  }
  std::string describe() const override {
    return "optimizer state sharded over " + std::to_string(shards_->group().size()) + " ranks" +
           (shards_->config().zero_stage < 3 ? ", parameters all-gathered (" + shards_->config().all_gather + ") after the update" : "");
  }
  std::vector<CommStream*> streams() override { return {&shards_->stream()}; }
  ParameterValues gathered(bool master) override;
  std::vector<theory::ShardedUnit> units() const override { return shards_->units(); }

 protected:
  void finish_update() override { shards_->share_parameters(exposed_seconds); }

 private:
  std::shared_ptr<ZeroShards> shards_;
};

}  // namespace

ZeroParts make_zero(Communicator& group, model::Model& model, const model::Optimizer& optimizer,
                    const DataParallelConfig& config) {
  auto shards = std::make_shared<ZeroShards>(group, model, config);
  ZeroParts parts;
  parts.sync = std::make_unique<ZeroSync>(shards);
  parts.optimizer = std::make_unique<ZeroOptimizer>(shards, optimizer);
  return parts;
}

ZeroShards::ZeroShards(Communicator& group, model::Model& model, const DataParallelConfig& config)
    : group_(group), config_(config), stream_(group) {
  const int n = group.size(), r = group.rank(), stage = config_.zero_stage;
  require(stage >= 1 && stage <= 3, "ZeRO: stages 1-3 (stage 0 is plain data parallelism)");
  std::map<const model::Parameter*, std::size_t> unit_of;
  for (model::Layer* layer : model.layers()) {
    if (layer->parameters().empty()) continue;
    Unit& u = units_.emplace_back();
    u.name = layer->name();
    for (model::Parameter* p : layer->parameters()) {
      u.parameters.push_back(p);
      u.offsets.push_back(u.count);
      u.shapes.push_back(p->value.shape());
      u.count += p->value.numel();
      unit_of[p] = units_.size() - 1;
    }
    u.padded = (u.count + n - 1) / n * n;
    u.chunk = u.padded / n;
  }
  // Which units each top-level layer's passes read: its own, and the owners of what it borrows.
  for (model::Layer* layer : model.layers()) {
    std::vector<std::size_t>& needs = needs_[layer];
    auto need = [&](const model::Parameter* p) {
      const std::size_t u = unit_of.at(p);
      if (std::find(needs.begin(), needs.end(), u) == needs.end()) needs.push_back(u);
    };
    for (model::Parameter* p : layer->parameters()) need(p);
    for (model::Layer* l : model::all_layers({layer}))
      for (model::Parameter* p : l->borrowed_parameters()) need(p);
    for (std::size_t u : needs) ++units_[u].users;
  }

  const DataType type = model.dtype();
  for (Unit& u : units_) {
    // The flat buffer replaces the model's own tensors (whose storage is then released).
    const MemoryCategory flat_category = stage == 3 ? MemoryCategory::communication : MemoryCategory::parameters;
    Tensor flat = Tensor::zeros(u.name + ".flat", {u.padded}, type, flat_category, model.space());
    pack(flat, u.parameters, u.offsets);
    if (stage == 3) {
      u.parameter_chunk = flat.segment(u.name + ".chunk", r * u.chunk, {u.chunk})
                              .clone(u.name + ".chunk", MemoryCategory::parameters);
      for (model::Parameter* p : u.parameters) {
        p->value = Tensor();
        p->grad = Tensor();
      }
    } else {
      u.flat_parameters = flat;
      u.parameter_chunk = flat.segment(u.name + ".chunk", r * u.chunk, {u.chunk});
      for (std::size_t i = 0; i < u.parameters.size(); ++i)
        u.parameters[i]->value = flat.segment(u.parameters[i]->name, u.offsets[i], u.shapes[i]);
    }
    if (stage == 1) {
      u.flat_gradients = Tensor::zeros(u.name + ".grads", {u.padded}, type, MemoryCategory::gradients, model.space());
      point_gradients(u);
    } else {
      for (model::Parameter* p : u.parameters) p->grad = Tensor();
      u.gradient_chunk = Tensor::zeros(u.name + ".grad_chunk", {u.chunk}, type, MemoryCategory::gradients, model.space());
    }
  }
}

Tensor ZeroShards::gradient_chunk_of(const Unit& u) const {
  if (config_.zero_stage != 1) return u.gradient_chunk;
  return u.flat_gradients.segment(u.name + ".grad_chunk", group_.rank() * u.chunk, {u.chunk});
}

CommStream::Ticket ZeroShards::enqueue(std::string what, Collective collective, const std::string& algorithm,
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

void ZeroShards::point_gradients(Unit& u) {
  for (std::size_t i = 0; i < u.parameters.size(); ++i) {
    model::Parameter* p = u.parameters[i];
    p->grad = u.flat_gradients.segment(p->name + ".grad", u.offsets[i], u.shapes[i]);
  }
}

std::vector<theory::ShardedUnit> ZeroShards::units() const {
  std::vector<theory::ShardedUnit> out;
  for (const Unit& u : units_) out.push_back({u.count, u.padded, u.users});
  return out;
}

void ZeroShards::hook(model::Layer& layer, model::HookPoint point, double& exposed) {
  auto it = needs_.find(&layer);
  if (it != needs_.end()) {
    const bool stage3 = config_.zero_stage == 3;
    for (std::size_t index : it->second) {
      Unit& u = units_[index];
      switch (point) {
        case model::HookPoint::before_forward:
          if (stage3) acquire_parameters(u, exposed);
          break;
        case model::HookPoint::after_forward:
          if (stage3) release_parameters(u);
          break;
        case model::HookPoint::before_backward:
          if (stage3) acquire_parameters(u, exposed);
          if (config_.zero_stage >= 2) ensure_gradients(u);
          break;
        case model::HookPoint::after_backward:
          if (stage3) release_parameters(u);
          // ZeRO-1 reduces once per step, after every user's backward of every micro-batch:
          // counted over the step, since a pipeline interleaves the micro-batches of its
          // stages. Stages 2-3 reduce each micro-batch's gradients after its last user.
          if (config_.zero_stage == 1 ? --u.remaining == 0 : --u.pending == 0) gradients_final(u);
          break;
      }
    }
  }
  if (point == model::HookPoint::after_backward && config_.overlap) stream_.progress();
}

void ZeroShards::acquire_parameters(Unit& u, double& exposed) {
  if (u.gathered++ > 0) return;
  const auto start = std::chrono::steady_clock::now();
  u.flat_parameters = Tensor::empty(u.name + ".gathered", {u.padded}, u.parameter_chunk.dtype(),
                                    MemoryCategory::communication, u.parameter_chunk.space());
  Tensor mine = u.flat_parameters.segment(u.name + ".mine", group_.rank() * u.chunk, {u.chunk});
  copy_into(mine, u.parameter_chunk);
  stream_.wait(enqueue("all_gather of " + u.name, Collective::all_gather, config_.all_gather, mine.view(),
                       u.flat_parameters.view()));
  exposed += seconds_since(start);
  for (std::size_t i = 0; i < u.parameters.size(); ++i) {
    model::Parameter* p = u.parameters[i];
    p->value = u.flat_parameters.segment(p->name, u.offsets[i], u.shapes[i]);
  }
}

void ZeroShards::release_parameters(Unit& u) {
  require(u.gathered > 0, "ZeRO-3: " + u.name + " released more often than gathered");
  if (--u.gathered > 0) return;
  for (model::Parameter* p : u.parameters) p->value = Tensor();
  u.flat_parameters = Tensor();
}

void ZeroShards::ensure_gradients(Unit& u) {
  if (u.flat_gradients.defined()) return;
  u.flat_gradients = Tensor::zeros(u.name + ".grads", {u.padded}, u.gradient_chunk.dtype(), MemoryCategory::communication,
                                   u.gradient_chunk.space());
  point_gradients(u);
}

void ZeroShards::gradients_final(Unit& u) {
  if (config_.zero_stage == 1) {  // once per step (see hook)
    Tensor chunk = u.flat_gradients.segment(u.name + ".grad_chunk", group_.rank() * u.chunk, {u.chunk});
    enqueue("reduce_scatter of " + u.name, Collective::reduce_scatter, config_.reduce_scatter, u.flat_gradients.view(),
            chunk.view());
    return;
  }
  // Stages 2-3: the full gradient lives only until its reduce-scatter; the stream adds the
  // rank's reduced chunk into the gradient it keeps and drops the buffer.
  Tensor full = std::move(u.flat_gradients);
  u.flat_gradients = Tensor();
  for (model::Parameter* p : u.parameters) p->grad = Tensor();
  const std::int64_t offset = group_.rank() * u.chunk;
  Tensor chunk = full.segment(u.name + ".reduced", offset, {u.chunk});
  Tensor keep = u.gradient_chunk;
  const AlgorithmDescriptor* a = &find_algorithm(Collective::reduce_scatter, config_.reduce_scatter);
  stream_.enqueue("reduce_scatter of " + u.name, [a, full, chunk, keep](Communicator& comm) {
    CollectiveCall call;
    call.collective = Collective::reduce_scatter;
    call.send = full.view();
    call.recv = chunk.view();
    run_collective(comm, *a, call, kHalfReduction);
    reduce_into(keep.view(), chunk.view(), ReduceOp::sum);
  });
  if (config_.overlap) stream_.progress();
}

void ZeroShards::begin_step() {
  for (Unit& u : units_) {
    u.remaining = u.users * config_.micro_batches;
    if (config_.zero_stage == 1)
      u.flat_gradients.zero();
    else
      u.gradient_chunk.zero();
  }
}

void ZeroShards::begin_backward() {
  for (Unit& u : units_) u.pending = u.users;
}

void ZeroShards::finish_gradients(double& exposed) {
  const auto start = std::chrono::steady_clock::now();
  stream_.synchronize();
  exposed += seconds_since(start);
  for (const Unit& u : units_)
    require((config_.zero_stage == 1 ? u.remaining : u.pending) == 0 && u.gathered == 0,
            "ZeRO: " + u.name + " did not finish its backward in this step");
}

void ZeroShards::share_parameters(double& exposed) {
  if (config_.zero_stage == 3) return;  // the chunks are the parameters
  const auto start = std::chrono::steady_clock::now();
  for (Unit& u : units_)
    enqueue("all_gather of " + u.name, Collective::all_gather, config_.all_gather, u.parameter_chunk.view(),
            u.flat_parameters.view());
  stream_.synchronize();
  exposed += seconds_since(start);
}

ParameterValues ZeroOptimizer::gathered(bool master) {
  Communicator& group = shards_->group();
  const auto& units_ = shards_->unit_list();
  ParameterValues out;
  for (std::size_t k = 0; k < units_.size(); ++k) {
    const ZeroShards::Unit& u = units_[k];
    const Segment& s = segments_[k];
    const Tensor values = gather_whole(group, master && s.master.defined() ? s.master : s.value, u.padded, u.name);
    std::vector<Tensor> state;
    for (const Tensor& t : s.state) state.push_back(gather_whole(group, t, u.padded, t.name()));
    for (std::size_t i = 0; i < u.parameters.size(); ++i) {
      const std::int64_t first = u.offsets[i];
      const std::int64_t count = (i + 1 < u.parameters.size() ? u.offsets[i + 1] : u.count) - first;
      out.names.push_back(u.parameters[i]->name);
      out.values.push_back(values.segment("value", first, {count}).to_vector());
      auto& st = out.state.emplace_back();
      for (const Tensor& t : state) st.push_back(t.segment("state", first, {count}).to_vector());
    }
  }
  return out;
}

}  // namespace parity::parallel
