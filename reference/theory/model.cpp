// Analytic models of model size, FLOPs and activation memory (see model.hpp).
#include "reference/theory/model.hpp"

#include <initializer_list>

#include "reference/core/error.hpp"

namespace parity::theory {

namespace {
// Exact counts are int64 (up to 9.2e18): a 1T-parameter configuration's step exceeds that, and
// an overflow must not pass as a number. megatron_step_flops (double) has no such limit.
std::int64_t product(std::initializer_list<std::int64_t> factors) {
  std::int64_t p = 1;
  for (auto f : factors)
    if (__builtin_mul_overflow(p, f, &p))
      throw UsageError("an exact FLOP count exceeds int64 for this configuration; use the floating-point formula");
  return p;
}
std::int64_t sum(std::int64_t a, std::int64_t b) {
  std::int64_t s = 0;
  if (__builtin_add_overflow(a, b, &s))
    throw UsageError("an exact FLOP count exceeds int64 for this configuration; use the floating-point formula");
  return s;
}
}  // namespace

std::int64_t gpt_block_parameters(std::int64_t h) { return 12 * h * h + 13 * h; }

std::int64_t gpt_parameters(const model::GptConfig& c) {
  const std::int64_t h = c.hidden;
  const std::int64_t table = c.vocabulary * h;
  return table + c.sequence * h + c.layers * gpt_block_parameters(h) + 2 * h + (c.tied_embeddings ? 0 : table);
}

std::int64_t mlp_parameters(const model::MlpConfig& c) {
  std::int64_t n = 0;
  for (int i = 0; i < c.layers; ++i) {
    const std::int64_t in = i == 0 ? c.inputs : c.width, out = i == c.layers - 1 ? c.outputs : c.width;
    n += in * out + out;
  }
  return n;
}

std::int64_t gpt_block_forward_flops(std::int64_t b, std::int64_t s, std::int64_t h) {
  return sum(product({24, b, s, h, h}), product({4, b, s, s, h}));
}

std::int64_t gpt_head_forward_flops(std::int64_t b, std::int64_t s, std::int64_t h, std::int64_t v) {
  return product({2, b, s, h, v});
}

std::int64_t gpt_step_flops(const model::GptConfig& c, std::int64_t batch) {
  const std::int64_t forward = sum(product({c.layers, gpt_block_forward_flops(batch, c.sequence, c.hidden)}),
                                   gpt_head_forward_flops(batch, c.sequence, c.hidden, c.vocabulary));
  return product({3, forward});
}

double megatron_step_flops(const model::GptConfig& c, std::int64_t batch) {
  const double b = static_cast<double>(batch), s = static_cast<double>(c.sequence), h = static_cast<double>(c.hidden),
               l = c.layers, v = static_cast<double>(c.vocabulary);
  return 72 * b * s * l * h * h * (1 + s / (6 * h) + v / (12 * h * l));
}

std::int64_t mlp_forward_flops(const model::MlpConfig& c, std::int64_t batch) {
  std::int64_t n = 0;
  for (int i = 0; i < c.layers; ++i) {
    const std::int64_t in = i == 0 ? c.inputs : c.width, out = i == c.layers - 1 ? c.outputs : c.width;
    n += 2 * batch * in * out;
  }
  return n;
}

double korthikanti_layer_activation_bytes(std::int64_t s, std::int64_t b, std::int64_t h, std::int64_t a) {
  const double sbh = static_cast<double>(s) * static_cast<double>(b) * static_cast<double>(h);
  return sbh * (34.0 + 5.0 * static_cast<double>(a) * static_cast<double>(s) / static_cast<double>(h));
}

std::int64_t parity_block_activation_bytes(std::int64_t s, std::int64_t b, std::int64_t h, std::int64_t a,
                                           std::int64_t e, std::int64_t r) {
  return e * (b * s * 16 * h + b * a * s * s) + r * 4 * b * s;
}

std::int64_t parity_block_activation_bytes(const model::GptConfig& c, std::int64_t rows) {
  return parity_block_activation_bytes(c.sequence, rows, c.hidden, c.heads, static_cast<std::int64_t>(size_of(c.dtype)),
                                       statistic_bytes(c.dtype));
}

}  // namespace parity::theory
