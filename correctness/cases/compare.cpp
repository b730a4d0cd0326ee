// Shared helpers of the training cases (see compare.hpp).
#include "correctness/cases/compare.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "reference/core/error.hpp"
#include "reference/kernels/buffer_kernels.hpp"
#include "reference/parallel/tensor/tensor_parallel.hpp"

namespace parity::cases {

// Parameters and optimizer state of a single-device model, in model order.
parallel::ParameterValues values_of(model::Model& m, const model::Optimizer* optimizer,
                                    const std::map<std::string, std::vector<Tensor>>* state,
                                    const std::map<std::string, Tensor>* master) {
  parallel::ParameterValues out;
  for (model::Parameter* p : m.parameters()) {
    out.names.push_back(p->name);
    out.values.push_back(master ? master->at(p->name).to_vector() : p->value.to_vector());
    auto& s = out.state.emplace_back();
    const std::vector<Tensor>& tensors = state ? state->at(p->name) : optimizer->state_of(p->name);
    for (const Tensor& t : tensors) s.push_back(t.to_vector());
  }
  return out;
}

parallel::ParameterValues gradients_of(model::Model& m) {
  parallel::ParameterValues out;
  for (model::Parameter* p : m.parameters()) {
    out.names.push_back(p->name);
    out.values.push_back(p->gradient().to_vector());
    out.state.emplace_back();
  }
  return out;
}

parallel::ParameterValues zeros_like(const parallel::ParameterValues& values) {
  parallel::ParameterValues out = values;
  for (auto& v : out.values) std::fill(v.begin(), v.end(), 0.0);
  for (auto& s : out.state)
    for (auto& v : s) std::fill(v.begin(), v.end(), 0.0);
  return out;
}

Difference compare(const parallel::ParameterValues& a, const parallel::ParameterValues& b,
                   const parallel::ParameterValues& origin) {
  require(a.names == b.names && a.names == origin.names, "compare: parameters differ in name or order");
  double d2 = 0, c2 = 0, s2 = 0, r2 = 0, worst = -1;
  Difference out;
  for (std::size_t i = 0; i < a.names.size(); ++i) {
    require(a.values[i].size() == b.values[i].size(), "compare: " + a.names[i] + " differs in size");
    double local = 0;
    for (std::size_t k = 0; k < a.values[i].size(); ++k) {
      const double d = a.values[i][k] - b.values[i][k], c = b.values[i][k] - origin.values[i][k];
      d2 += d * d;
      c2 += c * c;
      local = std::max(local, std::abs(d));
    }
    if (local > worst) {
      worst = local;
      out.where = a.names[i];
    }
    require(a.state[i].size() == b.state[i].size(), "compare: optimizer state of " + a.names[i] + " differs");
    for (std::size_t t = 0; t < a.state[i].size(); ++t)
      for (std::size_t k = 0; k < a.state[i][t].size(); ++k) {
        const double d = a.state[i][t][k] - b.state[i][t][k];
        s2 += d * d;
        r2 += b.state[i][t][k] * b.state[i][t][k];
      }
  }
  out.parameters = c2 > 0 ? std::sqrt(d2 / c2) : std::sqrt(d2);
  out.state = r2 > 0 ? std::sqrt(s2 / r2) : std::sqrt(s2);
  return out;
}

double forward_backward_per_data_rank(model::Model& m, const parallel::BatchSource& source, int step, std::int64_t rows,
                                      int data_ranks) {
  double loss = 0;
  for (int rank = 0; rank < data_ranks; ++rank) {
    const parallel::RowRange shard = parallel::batch_shard(rows, rank, data_ranks);
    model::PassContext context{static_cast<std::uint64_t>(step), rank, true, shard.first};
    context.global_rows = rows;
    loss += m.forward_backward(source(static_cast<std::uint64_t>(step), shard.first, shard.rows, rows), context);
  }
  return loss;
}

MixedRun train_mixed_single_device(model::Model& m, model::Optimizer& optimizer, const parallel::BatchSource& source,
                                   std::int64_t rows, int steps, double loss_scale) {
  std::map<std::string, Tensor> master;
  std::map<std::string, std::vector<Tensor>> state;
  for (model::Parameter* p : m.parameters()) {
    master[p->name] = cast(p->value, DataType::float32, p->name + ".master", MemoryCategory::optimizer_state);
    for (int i = 0; i < optimizer.state_count(); ++i)
      state[p->name].push_back(Tensor::zeros(p->name + ".state", {p->value.numel()}, DataType::float32,
                                             MemoryCategory::optimizer_state));
  }
  MixedRun out;
  for (int step = 0; step < steps; ++step) {
    m.zero_grad();
    model::Batch batch = source(static_cast<std::uint64_t>(step), 0, rows, rows);
    batch.normalizer /= loss_scale;
    model::PassContext context{static_cast<std::uint64_t>(step), 0, true, 0};
    context.loss_scale = loss_scale;
    out.losses.push_back(m.forward_backward(batch, context) / loss_scale);
    if (step == 0) {
      out.first_gradients = gradients_of(m);
      for (auto& v : out.first_gradients.values)
        for (double& x : v) x /= loss_scale;
    }
    for (model::Parameter* p : m.parameters()) {
      Tensor grad = cast(p->gradient(), DataType::float32, p->name + ".grad32", MemoryCategory::workspace);
      scale_buffer(grad.view(), 1 / loss_scale);
      optimizer.update(master[p->name], grad, state[p->name], step + 1, optimizer.decays(p->name));
      copy_into(p->value, master[p->name]);
    }
  }
  out.values = values_of(m, nullptr, &state, &master);
  return out;
}

FirstStep first_step(model::Model& m, const parallel::BatchSource& source, parallel::RowRange mine, std::int64_t rows,
                     Communicator& summed, Communicator& loss_ranks, const parallel::TensorParallel* tp,
                     double loss_scale, std::vector<std::string>* disagreeing) {
  model::Batch batch = source(0, mine.first, mine.rows, rows).to(m.space());
  batch.normalizer /= loss_scale;
  model::PassContext context{0, 0, true, mine.first};
  context.loss_scale = loss_scale;
  FirstStep out;
  out.loss = sum_over_ranks(loss_ranks, m.forward_backward(batch, context)) / loss_scale;
  for (model::Parameter* p : m.parameters()) summed.all_reduce(p->gradient().view(), p->gradient().view(), ReduceOp::sum);
  if (tp)
    for (model::Parameter* p : parallel::sequence_sharded_gradients(m, *tp))
      tp->group().all_reduce(p->gradient().view(), p->gradient().view(), ReduceOp::sum);
  out.gradients = tp ? parallel::gather_tensor_parallel(gradients_of(m), m.parameters(), tp->group(), disagreeing)
                     : gradients_of(m);
  for (auto& v : out.gradients.values)
    for (double& x : v) x /= loss_scale;
  return out;
}

namespace {
// Copies the segments' gradients once, when the first step's synchronisations have finished.
class CaptureGradients : public parallel::GradientSync {
 public:
  CaptureGradients(const parallel::OptimizerStep& optimizer, std::shared_ptr<std::vector<std::vector<double>>> into)
      : optimizer_(optimizer), into_(std::move(into)) {}
  std::string describe() const override { return "a copy of the first step's gradients (conformance)"; }
  void finish() override {
    if (!into_->empty()) return;
    for (const parallel::Segment& s : optimizer_.segments()) into_->push_back(s.grad.to_vector());
  }

 private:
  const parallel::OptimizerStep& optimizer_;
  std::shared_ptr<std::vector<std::vector<double>>> into_;
};
}  // namespace

UpdateGradients::UpdateGradients(parallel::Trainer& trainer)
    : optimizer_(*trainer.parts().optimizer), segments_(std::make_shared<std::vector<std::vector<double>>>()) {
  trainer.add_sync(std::make_unique<CaptureGradients>(optimizer_, segments_));
}

parallel::ParameterValues UpdateGradients::whole(model::Model& m, Communicator& sharing, double unscale) const {
  require(taken(), "UpdateGradients: no step has run");
  const std::vector<parallel::Segment>& segments = optimizer_.segments();
  require(segments.size() == segments_->size(), "UpdateGradients: the optimizer's segments changed");
  // Each parameter's elements and, beside them, how many ranks hold each (summed over `sharing`).
  std::vector<model::Parameter*> parameters = m.parameters();
  std::vector<double> flat, held;
  std::map<const model::Parameter*, std::int64_t> offset;
  for (model::Parameter* p : parameters) {
    offset[p] = static_cast<std::int64_t>(flat.size());
    flat.resize(flat.size() + static_cast<std::size_t>(p->value.numel()), 0.0);
  }
  held.assign(flat.size(), 0.0);
  for (std::size_t s = 0; s < segments.size(); ++s)
    for (const parallel::SegmentPart& part : segments[s].parts) {
      const auto at = offset.find(part.parameter);
      require(at != offset.end(), "UpdateGradients: a segment holds a parameter the model lacks");
      for (std::int64_t k = 0; k < part.count; ++k) {
        const auto i = static_cast<std::size_t>(at->second + part.in_parameter + k);
        flat[i] += (*segments_)[s][static_cast<std::size_t>(part.in_segment + k)];
        held[i] += 1;
      }
    }
  const std::size_t n = flat.size();
  sharing.all_reduce({flat.data(), n, DataType::float64, MemorySpace::host}, {flat.data(), n, DataType::float64, MemorySpace::host},
                     ReduceOp::sum);
  sharing.all_reduce({held.data(), n, DataType::float64, MemorySpace::host}, {held.data(), n, DataType::float64, MemorySpace::host},
                     ReduceOp::sum);
  parallel::ParameterValues out;
  for (model::Parameter* p : parameters) {
    out.names.push_back(p->name);
    auto& v = out.values.emplace_back();
    out.state.emplace_back();
    for (std::int64_t k = 0; k < p->value.numel(); ++k) {
      const auto i = static_cast<std::size_t>(offset[p] + k);
      require(held[i] > 0, "UpdateGradients: no rank holds an element of " + p->name);
      v.push_back(flat[i] / held[i] * unscale);
    }
  }
  return out;
}

std::string training_failures(const Difference& d, double bound, const std::vector<std::string>& disagreeing,
                              const std::string& between) {
  std::string out;
  if (!(d.parameters <= bound && d.state <= bound))
    out += "parameters or state differ from one device beyond " + format(bound) + " (largest at " + d.where + "); ";
  if (!disagreeing.empty()) out += "whole parameters differ between " + between + " (" + disagreeing.front() + "); ";
  return out;
}

double sum_over_ranks(Communicator& comm, double x) {
  comm.all_reduce({&x, 1, DataType::float64, MemorySpace::host}, {&x, 1, DataType::float64, MemorySpace::host},
                  ReduceOp::sum);
  return x;
}
namespace {
template <typename T> void broadcast_vector(Communicator& comm, std::vector<T>& v, DataType type) {
  std::int64_t n = static_cast<std::int64_t>(v.size());
  comm.broadcast({&n, 1, DataType::int64, MemorySpace::host}, {&n, 1, DataType::int64, MemorySpace::host}, 0);
  v.resize(static_cast<std::size_t>(n));
  if (n > 0)
    comm.broadcast({v.data(), static_cast<std::size_t>(n), type, MemorySpace::host},
                   {v.data(), static_cast<std::size_t>(n), type, MemorySpace::host}, 0);
}
}  // namespace

void broadcast_from_first(Communicator& comm, std::vector<double>& values) {
  broadcast_vector(comm, values, DataType::float64);
}

void broadcast_from_first(Communicator& comm, parallel::ParameterValues& values) {
  // The names one to a line; then each parameter's length and state lengths; then the numbers.
  std::string names;
  for (const std::string& name : values.names) names += name + "\n";
  names = comm.all_gather_strings(comm.rank() == 0 ? names : "").front();
  std::vector<std::int64_t> shape;
  std::vector<double> flat;
  if (comm.rank() == 0) {
    for (std::size_t i = 0; i < values.names.size(); ++i) {
      shape.push_back(static_cast<std::int64_t>(values.values[i].size()));
      flat.insert(flat.end(), values.values[i].begin(), values.values[i].end());
      const auto* state = i < values.state.size() ? &values.state[i] : nullptr;
      shape.push_back(state ? static_cast<std::int64_t>(state->size()) : -1);
      for (std::size_t k = 0; state && k < state->size(); ++k) {
        shape.push_back(static_cast<std::int64_t>((*state)[k].size()));
        flat.insert(flat.end(), (*state)[k].begin(), (*state)[k].end());
      }
    }
    shape.push_back(static_cast<std::int64_t>(values.state.size()));
  }
  broadcast_vector(comm, shape, DataType::int64);
  broadcast_vector(comm, flat, DataType::float64);
  if (comm.rank() == 0) return;
  values = {};
  for (std::size_t start = 0, end; (end = names.find('\n', start)) != std::string::npos; start = end + 1)
    values.names.push_back(names.substr(start, end - start));
  std::size_t at = 0, next = 0;
  auto take = [&](std::int64_t n) {
    std::vector<double> part(flat.begin() + static_cast<std::ptrdiff_t>(next), flat.begin() + static_cast<std::ptrdiff_t>(next + n));
    next += static_cast<std::size_t>(n);
    return part;
  };
  std::vector<std::vector<std::vector<double>>> state;
  for (std::size_t i = 0; i < values.names.size(); ++i) {
    values.values.push_back(take(shape[at++]));
    const std::int64_t tensors = shape[at++];
    state.emplace_back();
    for (std::int64_t k = 0; k < tensors; ++k) state.back().push_back(take(shape[at++]));
  }
  state.resize(static_cast<std::size_t>(shape[at]));  // rank 0's count: none, or one a parameter
  values.state = std::move(state);
}

double max_over_ranks(Communicator& comm, double x) {
  comm.all_reduce({&x, 1, DataType::float64, MemorySpace::host}, {&x, 1, DataType::float64, MemorySpace::host},
                  ReduceOp::max);
  return x;
}

std::string format(double x) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3g", x);
  return text;
}

std::string failed_on_any_rank(Communicator& comm, const std::string& what, const std::string& here) {
  if (max_over_ranks(comm, here.empty() ? 0 : 1) == 0) return "";
  return what + (here.empty() ? std::string(" on another rank") : ": " + here) + "; ";
}

bool agreed_verdict(Communicator& comm, const std::string& failures, const std::string& compared, std::string& message) {
  const bool passed = max_over_ranks(comm, failures.empty() ? 0 : 1) == 0;
  message = passed ? compared : (failures.empty() ? std::string("failed on another rank; ") : failures) + compared;
  return passed;
}

}  // namespace parity::cases
