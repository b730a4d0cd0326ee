// Analytic models of model size, FLOPs and activation memory (see model.hpp).
#include "reference/theory/model.hpp"

namespace parity::theory {

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
  return 24 * b * s * h * h + 4 * b * s * s * h;
}

std::int64_t gpt_head_forward_flops(std::int64_t b, std::int64_t s, std::int64_t h, std::int64_t v) {
  return 2 * b * s * h * v;
}

std::int64_t gpt_step_flops(const model::GptConfig& c, std::int64_t batch) {
  return 3 * (c.layers * gpt_block_forward_flops(batch, c.sequence, c.hidden) +
              gpt_head_forward_flops(batch, c.sequence, c.hidden, c.vocabulary));
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
                                           std::int64_t e) {
  return e * (b * s * (16 * h + 4) + b * a * s * s);
}

}  // namespace parity::theory
