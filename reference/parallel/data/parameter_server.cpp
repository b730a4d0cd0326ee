// The parameter server and its workers (see parameter_server.hpp), on point-to-point messages:
// a worker sends a header (the parameter version it used) and its gradient; the server answers
// with the new parameters and their version.
#include "reference/parallel/data/parameter_server.hpp"

#include <array>
#include <thread>

#include "reference/core/error.hpp"

namespace parity::parallel {

namespace {
constexpr int kHeaderTag = 7100, kGradientTag = 7101, kParametersTag = 7102;

// All parameters (or gradients) of the model in one flat buffer, in model order.
std::int64_t total_elements(const std::vector<model::Parameter*>& parameters) {
  std::int64_t n = 0;
  for (const model::Parameter* p : parameters) n += p->value.numel();
  return n;
}

void flatten(Tensor& flat, const std::vector<model::Parameter*>& parameters, bool gradients) {
  std::int64_t offset = 0;
  for (model::Parameter* p : parameters) {
    Tensor place = flat.segment(p->name, offset, {p->value.numel()});
    copy_into(place, gradients ? p->gradient() : p->value);
    offset += p->value.numel();
  }
}

void unflatten(const Tensor& flat, const std::vector<model::Parameter*>& parameters, bool gradients) {
  std::int64_t offset = 0;
  for (model::Parameter* p : parameters) {
    copy_into(gradients ? p->gradient() : p->value, flat.segment(p->name, offset, p->value.shape()));
    offset += p->value.numel();
  }
}

BufferView header_view(std::int64_t* header) { return {header, 2, DataType::int64, MemorySpace::host}; }
}  // namespace

ParameterServerStats run_parameter_server(Communicator& comm, model::Model& model, model::Optimizer& optimizer,
                                          const BatchSource& batches, const ParameterServerConfig& config) {
  if (comm.size() < 2)
    throw UsageError("a parameter server needs at least two ranks (rank 0 serves, the others work); this world has 1");
  if (config.steps_per_worker < 1 || config.batch < 1)
    throw UsageError("parameter server: steps per worker and batch rows must be positive");
  if (!comm.accepts(MemorySpace::host, true))
    throw UsageError("the parameter server sends host headers point-to-point and polls for any worker, which the " +
                     std::string(comm.backend()) + " backend cannot do; use --backend mpi");
  const int workers = comm.size() - 1;
  const auto parameters = model.parameters();
  Tensor flat = Tensor::empty("parameter_server.flat", {total_elements(parameters)}, model.dtype(),
                              MemoryCategory::communication, model.space());
  ParameterServerStats stats;

  if (comm.rank() == 0) {
    std::int64_t version = 0;
    std::vector<std::array<std::int64_t, 2>> headers(static_cast<std::size_t>(workers));
    std::vector<RequestPtr> pending(static_cast<std::size_t>(workers));
    std::vector<int> remaining(static_cast<std::size_t>(workers), config.steps_per_worker);
    for (int w = 0; w < workers; ++w) pending[w] = comm.irecv(header_view(headers[w].data()), w + 1, kHeaderTag);
    int active = workers;
    PollBackoff backoff;
    while (active > 0) {
      bool served = false;
      for (int w = 0; w < workers; ++w) {
        if (!pending[w] || !pending[w]->test()) continue;
        pending[w].reset();
        RequestPtr gradient = comm.irecv(flat.view(), w + 1, kGradientTag);
        comm.wait(gradient);
        model.zero_grad();
        unflatten(flat, parameters, true);
        optimizer.step(parameters);  // its state lives on the server only
        stats.staleness.push_back(version - headers[w][0]);
        stats.order.push_back({w + 1, headers[w][1], headers[w][0]});
        ++version;
        ++stats.updates;
        flatten(flat, parameters, false);
        std::int64_t reply[2] = {version, 0};
        RequestPtr sends[2] = {comm.isend(header_view(reply), w + 1, kParametersTag),
                               comm.isend(flat.view(), w + 1, kParametersTag)};
        comm.wait_all(sends);
        if (--remaining[w] > 0)
          pending[w] = comm.irecv(header_view(headers[w].data()), w + 1, kHeaderTag);
        else
          --active;
        served = true;
      }
      if (backoff.should_yield(served)) std::this_thread::yield();  // workers may share the server's core
    }
  } else {
    const int w = comm.rank() - 1;
    std::int64_t version = 0;
    for (int t = 0; t < config.steps_per_worker; ++t) {
      const std::uint64_t step = static_cast<std::uint64_t>(t) * workers + w;
      model.zero_grad();
      stats.losses.push_back(model.forward_backward(batches(step, 0, config.batch, config.batch).to(model.space()), {step, 0, true, 0}));
      flatten(flat, parameters, true);
      std::int64_t header[2] = {version, static_cast<std::int64_t>(step)};
      RequestPtr sends[2] = {comm.isend(header_view(header), 0, kHeaderTag), comm.isend(flat.view(), 0, kGradientTag)};
      comm.wait_all(sends);
      std::int64_t reply[2] = {0, 0};
      RequestPtr receives[2] = {comm.irecv(header_view(reply), 0, kParametersTag),
                                comm.irecv(flat.view(), 0, kParametersTag)};
      comm.wait_all(receives);
      version = reply[0];
      unflatten(flat, parameters, false);
    }
  }
  // Every rank ends with the server's parameters.
  flatten(flat, parameters, false);
  comm.broadcast(flat.view(), flat.view(), 0);
  unflatten(flat, parameters, false);
  return stats;
}

}  // namespace parity::parallel
