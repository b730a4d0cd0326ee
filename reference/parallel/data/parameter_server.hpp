// Asynchronous SGD with a parameter server (Dean et al. 2012, Downpour SGD; Li et al. 2014):
// rank 0 holds the parameters and the optimizer; every other rank is a worker that computes a
// gradient on its own batch with the parameters it last received, pushes it, and pulls the
// server's current parameters, never waiting for the other workers. The server applies
// gradients in the order they arrive, so a gradient may have been computed on parameters
// several updates old: its staleness (server version at apply - version the worker used) is
// recorded. With one worker the staleness is zero and the run is synchronous SGD exactly.
#pragma once

#include <cstdint>
#include <vector>

#include "reference/comm/communicator.hpp"
#include "reference/model/optimizer.hpp"
#include "reference/parallel/batches.hpp"

namespace parity::parallel {

struct ParameterServerConfig {
  int steps_per_worker = 3;
  std::int64_t batch = 8;  // rows per worker step
};

// One update as the server applied it: whose gradient, on which batch, computed on which
// parameter version. The order of these is the whole of the asynchrony: replayed on one device
// it gives the server's parameters bit for bit.
struct ParameterServerUpdate {
  int worker = 0;             // the worker's rank
  std::int64_t step = 0;      // the batch index it trained on
  std::int64_t version = 0;   // the parameter version its gradient was computed on
};

struct ParameterServerStats {
  // Server: staleness of each update, in the order applied. Workers: empty.
  std::vector<std::int64_t> staleness;
  // Server: every update in the order applied. Workers: empty.
  std::vector<ParameterServerUpdate> order;
  // Workers: loss of each of their steps. Server: empty.
  std::vector<double> losses;
  std::int64_t updates = 0;  // server: updates applied (workers x steps_per_worker)
};

// How the server waits for workers without starving them of a shared core: after `patience`
// polls in a row that found nothing it yields the core on every further empty poll, and a
// poll that served a worker starts the count again (a busy server never yields).
class PollBackoff {
 public:
  explicit PollBackoff(unsigned patience = 64) : patience_(patience) {}
  // Call once per poll; true when the caller should yield now.
  bool should_yield(bool served) {
    if (served) {
      idle_ = 0;
      return false;
    }
    return ++idle_ > patience_;
  }

 private:
  unsigned patience_;
  unsigned idle_ = 0;
};

// Worker w (rank w >= 1) trains on batches(step = t * workers + w - 1, 0, batch, batch) at its
// step t, so workers see different data and one worker sees steps 0, 1, 2, ... Collective:
// every rank of comm calls it; when it returns, every rank holds the server's final parameters.
// Throws UsageError on a world of one (no worker).
ParameterServerStats run_parameter_server(Communicator& comm, model::Model& model, model::Optimizer& optimizer,
                                          const BatchSource& batches, const ParameterServerConfig& config);

}  // namespace parity::parallel
