// Data-parallel and ZeRO formulas (see parallel.hpp).
#include "reference/theory/parallel.hpp"

#include <cmath>

#include "reference/core/error.hpp"

namespace parity::theory {

ModelStateBytes zero_model_state_bytes(int stage, std::int64_t parameters, std::int64_t padded, int world,
                                       StateBytes b) {
  require(world > 0 && padded >= parameters && parameters >= 0, "zero_model_state_bytes: bad sizes");
  const double psi = static_cast<double>(parameters), p = static_cast<double>(padded), n = world;
  switch (stage) {
    case 0: return {b.parameter * psi, b.gradient * psi, b.optimizer * psi};
    case 1: return {b.parameter * p, b.gradient * p, b.optimizer * p / n};
    case 2: return {b.parameter * p, b.gradient * p / n, b.optimizer * p / n};
    case 3: return {b.parameter * p / n, b.gradient * p / n, b.optimizer * p / n};
    default: throw UsageError("ZeRO stage " + std::to_string(stage) + " is outside 0-3");
  }
}

double training_state_bytes(std::int64_t parameters, StateBytes b) {
  require(parameters >= 0, "training_state_bytes: a negative parameter count");
  const ModelStateBytes whole = zero_model_state_bytes(0, parameters, parameters, 1, b);
  return whole.parameters + whole.optimizer_state;
}

double zero_bytes_sent_per_rank(int stage, const std::vector<ShardedUnit>& units, int world, double element_bytes,
                                int micro_batches) {
  require(world > 0 && micro_batches > 0, "zero_bytes_sent_per_rank: bad sizes");
  double psi = 0, padded = 0, gathered = 0;
  for (const ShardedUnit& u : units) {
    psi += static_cast<double>(u.parameters);
    padded += static_cast<double>(u.padded);
    gathered += static_cast<double>(u.users) * static_cast<double>(u.padded);
  }
  const double share = (world - 1.0) / world * element_bytes, k = micro_batches;
  switch (stage) {
    case 0: return 2 * psi * share;
    case 1: return 2 * padded * share;
    case 2: return (k + 1) * padded * share;
    case 3: return k * (padded + 2 * gathered) * share;
    default: throw UsageError("ZeRO stage " + std::to_string(stage) + " is outside 0-3");
  }
}

double parallel_efficiency(double t1, double tn, int n) { return t1 / (n * tn); }

double amdahl_speedup(double s, int n) { return 1 / (s + (1 - s) / n); }

AmdahlFit fit_amdahl(const std::vector<int>& ranks, const std::vector<double>& step_seconds, double t1) {
  require(ranks.size() == step_seconds.size(), "fit_amdahl: sizes differ");
  // y - x = s (1 - x) with x = 1/N, y = T_N / T_1.
  double num = 0, den = 0;
  AmdahlFit fit;
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    if (ranks[i] <= 1) continue;
    const double x = 1.0 / ranks[i], y = step_seconds[i] / t1;
    num += (1 - x) * (y - x);
    den += (1 - x) * (1 - x);
    ++fit.points;
  }
  if (fit.points == 0) return fit;
  fit.serial_fraction = num / den;
  double r2 = 0;
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    if (ranks[i] <= 1) continue;
    const double x = 1.0 / ranks[i], y = step_seconds[i] / t1;
    const double r = y - (fit.serial_fraction + (1 - fit.serial_fraction) * x);
    r2 += r * r;
  }
  fit.rms_residual = std::sqrt(r2 / fit.points);
  return fit;
}

}  // namespace parity::theory
