// ZeRO stages 1-3 on flat, padded units (see zero.hpp).
#include "reference/parallel/zero.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "reference/kernels/buffer_kernels.hpp"
#include "reference/core/error.hpp"

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

Zero::Zero(Communicator& world, model::Model& model, const model::Optimizer& optimizer, DataParallelConfig config)
    : DataParallelTrainer(world, model, optimizer, std::move(config)) {
  const int n = world.size(), r = world.rank(), stage = config_.zero_stage;
  require(stage >= 1 && stage <= 3, "Zero: stages 1-3 (stage 0 is DataParallel)");
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
      add_segment(u.name, u.parameter_chunk, u.flat_gradients.segment(u.name + ".grad_chunk", r * u.chunk, {u.chunk}));
    } else {
      for (model::Parameter* p : u.parameters) p->grad = Tensor();
      u.gradient_chunk = Tensor::zeros(u.name + ".grad_chunk", {u.chunk}, type, MemoryCategory::gradients, model.space());
      add_segment(u.name, u.parameter_chunk, u.gradient_chunk);
    }
  }
  add_hooks([this](model::Layer& layer, model::HookPoint point, const model::PassContext&) { hook(layer, point); });
}

void Zero::point_gradients(Unit& u) {
  for (std::size_t i = 0; i < u.parameters.size(); ++i) {
    model::Parameter* p = u.parameters[i];
    p->grad = u.flat_gradients.segment(p->name + ".grad", u.offsets[i], u.shapes[i]);
  }
}

std::int64_t Zero::padded_parameters() const {
  std::int64_t total = 0;
  for (const Unit& u : units_) total += u.padded;
  return total;
}

std::vector<theory::ShardedUnit> Zero::units() const {
  std::vector<theory::ShardedUnit> out;
  for (const Unit& u : units_) out.push_back({u.count, u.padded, u.users});
  return out;
}

void Zero::hook(model::Layer& layer, model::HookPoint point) {
  auto it = needs_.find(&layer);
  if (it != needs_.end()) {
    const bool stage3 = config_.zero_stage == 3;
    for (std::size_t index : it->second) {
      Unit& u = units_[index];
      switch (point) {
        case model::HookPoint::before_forward:
          if (stage3) acquire_parameters(u);
          break;
        case model::HookPoint::after_forward:
          if (stage3) release_parameters(u);
          break;
        case model::HookPoint::before_backward:
          if (stage3) acquire_parameters(u);
          if (config_.zero_stage >= 2) ensure_gradients(u);
          break;
        case model::HookPoint::after_backward:
          if (stage3) release_parameters(u);
          if (--u.pending == 0) gradients_final(u);
          break;
      }
    }
  }
  if (point == model::HookPoint::after_backward && config_.overlap) stream_.progress();
}

void Zero::acquire_parameters(Unit& u) {
  if (u.gathered++ > 0) return;
  const auto start = std::chrono::steady_clock::now();
  u.flat_parameters = Tensor::empty(u.name + ".gathered", {u.padded}, u.parameter_chunk.dtype(),
                                    MemoryCategory::communication, u.parameter_chunk.space());
  Tensor mine = u.flat_parameters.segment(u.name + ".mine", world_.rank() * u.chunk, {u.chunk});
  copy_into(mine, u.parameter_chunk);
  stream_.wait(enqueue("all_gather of " + u.name, Collective::all_gather, config_.all_gather, mine.view(),
                       u.flat_parameters.view()));
  exposed_ += seconds_since(start);
  for (std::size_t i = 0; i < u.parameters.size(); ++i) {
    model::Parameter* p = u.parameters[i];
    p->value = u.flat_parameters.segment(p->name, u.offsets[i], u.shapes[i]);
  }
}

void Zero::release_parameters(Unit& u) {
  require(u.gathered > 0, "ZeRO-3: " + u.name + " released more often than gathered");
  if (--u.gathered > 0) return;
  for (model::Parameter* p : u.parameters) p->value = Tensor();
  u.flat_parameters = Tensor();
}

void Zero::ensure_gradients(Unit& u) {
  if (u.flat_gradients.defined()) return;
  u.flat_gradients = Tensor::zeros(u.name + ".grads", {u.padded}, u.gradient_chunk.dtype(), MemoryCategory::communication,
                                   u.gradient_chunk.space());
  point_gradients(u);
}

void Zero::gradients_final(Unit& u) {
  if (config_.zero_stage == 1) {
    if (!last_micro_batch_) return;  // accumulate locally; one reduce-scatter per step
    Tensor chunk = u.flat_gradients.segment(u.name + ".grad_chunk", world_.rank() * u.chunk, {u.chunk});
    enqueue("reduce_scatter of " + u.name, Collective::reduce_scatter, config_.reduce_scatter, u.flat_gradients.view(),
            chunk.view());
    return;
  }
  // Stages 2-3: the full gradient lives only until its reduce-scatter; the stream adds the
  // rank's reduced chunk into the gradient it keeps and drops the buffer.
  Tensor full = std::move(u.flat_gradients);
  u.flat_gradients = Tensor();
  for (model::Parameter* p : u.parameters) p->grad = Tensor();
  const std::int64_t offset = world_.rank() * u.chunk;
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

void Zero::begin_step() {
  for (Unit& u : units_) {
    if (config_.zero_stage == 1)
      u.flat_gradients.zero();
    else
      u.gradient_chunk.zero();
  }
}

void Zero::begin_micro_batch(bool) {
  for (Unit& u : units_) u.pending = u.users;
}

void Zero::finish_gradients() {
  const auto start = std::chrono::steady_clock::now();
  stream_.synchronize();
  exposed_ += seconds_since(start);
  for (const Unit& u : units_)
    require(u.pending == 0 && u.gathered == 0, "ZeRO: " + u.name + " did not finish its backward in this step");
}

void Zero::finish_step() {
  if (config_.zero_stage == 3) return;  // the chunks are the parameters
  const auto start = std::chrono::steady_clock::now();
  for (Unit& u : units_)
    enqueue("all_gather of " + u.name, Collective::all_gather, config_.all_gather, u.parameter_chunk.view(),
            u.flat_parameters.view());
  stream_.synchronize();
  exposed_ += seconds_since(start);
}

ParameterValues Zero::gathered(bool master) {
  ParameterValues out;
  for (std::size_t k = 0; k < units_.size(); ++k) {
    const Unit& u = units_[k];
    const Segment& s = segments_[k];
    const Tensor values = gather_whole(world_, master && s.master.defined() ? s.master : s.value, u.padded, u.name);
    std::vector<Tensor> state;
    for (const Tensor& t : s.state) state.push_back(gather_whole(world_, t, u.padded, t.name()));
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
