// Tensor and sequence parallelism's formulas (see tensor.hpp).
#include "reference/theory/tensor.hpp"

namespace parity::theory {

TensorParallelBytes tensor_parallel_bytes_per_rank(const model::GptConfig& c, std::int64_t rows, int t,
                                                   bool sequence_parallel, double e, double e_stat) {
  TensorParallelBytes out;
  if (t <= 1) return out;
  const double share = static_cast<double>(t - 1) / t;
  const double a = static_cast<double>(rows) * static_cast<double>(c.sequence) * static_cast<double>(c.hidden);
  const double tokens = static_cast<double>(rows) * static_cast<double>(c.sequence);
  out.block = (sequence_parallel ? 10 : 8) * share * a * e;
  out.embedding = 2 * share * a * e;
  out.head = (sequence_parallel ? 3 : 2) * share * a * e;
  out.loss = 2 * share * 3 * tokens * e_stat;
  return out;
}

double tensor_parallel_predicted_seconds(const model::GptConfig& c, std::int64_t rows, int t, bool sequence_parallel,
                                         double e, double e_stat, AlphaBeta m, const TensorParallelEfficiency& eff,
                                         const TensorParallelMemory& memory) {
  if (t <= 1) return 0;
  const double a = static_cast<double>(rows) * static_cast<double>(c.sequence) * static_cast<double>(c.hidden) * e;
  const double tokens = static_cast<double>(rows) * static_cast<double>(c.sequence);
  const auto copy = [&](double bytes) { return memory.copy ? memory.copy(bytes) : 0.0; };
  const auto fetch = [&](double bytes) { return memory.fetch ? memory.fetch(bytes) : 0.0; };
  const double interleave = rows > 1 ? copy(a) : 0.0;  // the whole's blocks into place (SP)
  const double all_reduce = ring_all_reduce_seconds(t, a, m) / eff.all_reduce + fetch(a);
  const double all_gather = ring_chunked_seconds(t, a, m) / eff.all_gather + fetch(a + a / t) + copy(a / t) + interleave;
  const double reduce_scatter = ring_chunked_seconds(t, a, m) / eff.reduce_scatter + fetch(a + a / t) + interleave;
  const double block = sequence_parallel ? 6 * all_gather + 4 * reduce_scatter : 4 * all_reduce;
  const double embedding = sequence_parallel ? all_gather + reduce_scatter : all_reduce;
  const double head = sequence_parallel ? 2 * all_gather + reduce_scatter : all_reduce;
  const double loss =
      (ring_all_reduce_seconds(t, tokens * e_stat, m) + ring_all_reduce_seconds(t, 2 * tokens * e_stat, m)) / eff.all_reduce +
      fetch(tokens * e_stat) + fetch(2 * tokens * e_stat);
  return embedding + c.layers * block + head + loss;
}

double sequence_parallel_gradient_bytes_per_rank(const model::GptConfig& c, int t, double e) {
  if (t <= 1) return 0;
  const double elements = static_cast<double>(4 * c.hidden * c.layers + 2 * c.hidden + c.sequence * c.hidden);
  return 2.0 * (t - 1) / t * elements * e;
}

double sequence_parallel_gradient_seconds(const model::GptConfig& c, int t, double e, AlphaBeta m,
                                          double all_reduce_efficiency) {
  if (t <= 1) return 0;
  const double layer_norms = 2.0 * c.layers + 1;  // two a block and the final one, gamma and beta each
  const double h = static_cast<double>(c.hidden);
  return (2 * layer_norms * ring_all_reduce_seconds(t, h * e, m) +
          ring_all_reduce_seconds(t, static_cast<double>(c.sequence) * h * e, m)) /
         all_reduce_efficiency;
}

std::int64_t tensor_parallel_block_activation_bytes(std::int64_t s, std::int64_t b, std::int64_t h, std::int64_t a,
                                                    int t, bool sequence_parallel, std::int64_t e, std::int64_t r) {
  const std::int64_t probabilities = b * (a / t) * s * s;
  if (sequence_parallel) return e * (b * (s / t) * 16 * h + probabilities) + r * 4 * b * (s / t);
  return e * (b * s * (4 * h + 12 * h / t) + probabilities) + r * 4 * b * s;
}

std::int64_t tensor_parallel_block_activation_bytes(const model::GptConfig& c, std::int64_t rows, int t,
                                                    bool sequence_parallel) {
  return tensor_parallel_block_activation_bytes(c.sequence, rows, c.hidden, c.heads, t, sequence_parallel,
                                                static_cast<std::int64_t>(size_of(c.dtype)), statistic_bytes(c.dtype));
}

double korthikanti_tensor_parallel_activation_bytes(std::int64_t s, std::int64_t b, std::int64_t h, std::int64_t a,
                                                    int t, bool sequence_parallel) {
  const double sbh = static_cast<double>(s) * static_cast<double>(b) * static_cast<double>(h);
  const double attention = 5.0 * static_cast<double>(a) * static_cast<double>(s) / static_cast<double>(h);
  if (sequence_parallel) return sbh / t * (34 + attention);
  return sbh * (10 + 24.0 / t + attention / t);
}

std::int64_t tensor_parallel_parameters_per_rank(const model::GptConfig& c, int t) {
  const std::int64_t h = c.hidden, v = c.vocabulary;
  const std::int64_t block = 12 * h * h / t + 7 * h / t + 6 * h;
  return v * h / t + c.sequence * h + c.layers * block + 2 * h + (c.tied_embeddings ? 0 : v * h / t);
}

}  // namespace parity::theory
