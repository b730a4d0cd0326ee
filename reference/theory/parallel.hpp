// Analytic models of data parallelism and ZeRO (Rajbhandari et al. 2020): model-state bytes
// per rank, bytes each rank sends per step, and the scaling laws a measured run is set beside.
#pragma once

#include <cstdint>
#include <vector>

namespace parity::theory {

// Bytes per parameter element of each model state. The paper's mixed-precision Adam: 2
// (16-bit parameter), 2 (16-bit gradient), K = 12 (float32 master, m, v).
struct StateBytes {
  double parameter = 2;
  double gradient = 2;
  double optimizer = 12;  // K
};

struct ModelStateBytes {
  double parameters = 0;
  double gradients = 0;
  double optimizer_state = 0;
  double total() const { return parameters + gradients + optimizer_state; }
};

// Per rank, for `parameters` elements padded to `padded` (a multiple of world per unit) on
// `world` data-parallel ranks:
//   stage 0: (p+g+K) Psi; stage 1: (p+g) P + K P/n; stage 2: p P + (g+K) P/n; stage 3: (p+g+K) P/n.
// With padded == parameters these are the paper's formulas.
ModelStateBytes zero_model_state_bytes(int stage, std::int64_t parameters, std::int64_t padded, int world,
                                       StateBytes bytes);

// Bytes a training state saves (parallel/state): every parameter's value (p bytes) and its
// optimizer state (K: a float32 master with mixed precision and the moments) once, whatever the
// layout, and no gradients: (p + K) Psi, stage 0's model state without its gradients. Every rank
// writes its share of it.
double training_state_bytes(std::int64_t parameters, StateBytes bytes);

// A unit of sharding (a top-level layer): its parameter count, padded count, and how many
// top-level layers read it in forward (2 for a table shared with a tied LM head).
struct ShardedUnit {
  std::int64_t parameters = 0;
  std::int64_t padded = 0;
  int users = 1;
};

// Bytes one rank sends per optimizer step, for gradients of `element_bytes` per element,
// with ring collectives on `world` ranks and `micro_batches` micro-batches per step:
//   stage 0: 2 Psi (n-1)/n (all-reduce once per step; the mean over ranks: ring blocks of
//            unpadded buckets differ by one element between ranks);
//   stage 1: 2 P (n-1)/n (reduce-scatter once, all-gather once);
//   stage 2: (k + 1) P (n-1)/n (a reduce-scatter every micro-batch);
//   stage 3: k (P + 2 sum_u users_u P_u) (n-1)/n (per micro-batch: a gather before every
//            forward and backward that reads a unit, one reduce-scatter) = 3 P (n-1)/n for
//            k = 1 when no unit is shared.
double zero_bytes_sent_per_rank(int stage, const std::vector<ShardedUnit>& units, int world, double element_bytes,
                                int micro_batches);

// Scaling. Efficiency T1 / (N TN): T_N is already the time per rank, not to be divided by N again.
double parallel_efficiency(double t1, double tn, int n);
// Amdahl's law T_N / T_1 = s + (1 - s) / N, fitted to measured step times by least squares
// in (1/N, T_N/T_1); points at N = 1 carry no information about s and are skipped.
struct AmdahlFit {
  double serial_fraction = 0;
  double rms_residual = 0;  // of T_N / T_1
  int points = 0;
};
AmdahlFit fit_amdahl(const std::vector<int>& ranks, const std::vector<double>& step_seconds, double t1);
double amdahl_speedup(double serial_fraction, int n);

}  // namespace parity::theory
