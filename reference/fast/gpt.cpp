// The fast path's host logic (gpt.hpp, ops.hpp): shapes, the parameter layout, memory and FLOP
// counts, the grouping of rows by token. Built with or without CUDA, and tested on CPU ranks.
#include <algorithm>
#include <numeric>

#include "reference/fast/gpt.hpp"

namespace parity::fast {

const char* name_of(Storage storage) { return storage == Storage::bfloat16 ? "bfloat16" : "float16"; }
std::size_t bytes_of(Storage) { return 2; }

bool attention_head_size_supported(int D) { return D == 16 || D == 32 || D == 64 || D == 80 || D == 96 || D == 128; }

namespace {
// The key tiles (of `tile` keys) a warp of 16 rows from row r0 visits: those up to its last row's.
std::int64_t warp_key_tiles(std::int64_t r0, std::int64_t T, std::int64_t tile) {
  return r0 >= T ? 0 : std::min(r0 + 15, T - 1) / tile + 1;
}
}  // namespace

const char* name_of(AttentionKernels kernels) { return kernels == AttentionKernels::wgmma ? "wgmma" : "mma"; }

constexpr std::int64_t kGroupRows = kAttentionGroupRows, kGroupStep = kAttentionGroupStep;

std::int64_t attention_forward_flops_executed(int B, int T, int C, int H, AttentionKernels kernels) {
  const std::int64_t D = C / H;
  std::int64_t visits = 0;  // (warp or warpgroup, key tile) pairs one head computes
  if (kernels == AttentionKernels::wgmma) {
    // A warpgroup of 64 queries visits the key tiles up to its last row's.
    for (std::int64_t r0 = 0; r0 < T; r0 += kGroupRows) visits += (std::min<std::int64_t>(r0 + kGroupRows, T) - 1) / kGroupStep + 1;
    return std::int64_t{B} * H * visits * 2 * (2 * kGroupRows * kGroupStep * D);
  }
  for (std::int64_t r0 = 0; r0 < T; r0 += 16) visits += warp_key_tiles(r0, T, kAttentionKeyTile);
  return std::int64_t{B} * H * visits * 2 * (2 * 16 * kAttentionKeyTile * D);
}

std::int64_t attention_backward_flops_executed(int B, int T, int C, int H, AttentionKernels kernels) {
  const std::int64_t D = C / H;
  if (kernels == AttentionKernels::wgmma) {
    std::int64_t kv = 0, q = 0;
    for (std::int64_t r0 = 0; r0 < T; r0 += kGroupRows) {
      kv += (T - r0 + kGroupStep - 1) / kGroupStep;              // dK/dV: the query tiles from its first key on
      q += (std::min<std::int64_t>(r0 + kGroupRows, T) - 1) / kGroupStep + 1;  // dQ: the key tiles up to its last query's
    }
    // dK/dV: S^T, dP^T, dV, dK per (block, query tile); dQ: S, dP, dQ per (block, key tile).
    return std::int64_t{B} * H * (kv * 4 + q * 3) * (2 * kGroupRows * kGroupStep * D);
  }
  std::int64_t kv = 0, q = 0;
  for (std::int64_t r0 = 0; r0 < T; r0 += 16) {
    // dK/dV: the warp of keys r0.. visits the query tiles from its block's first row on that hold
    // a query at or after its first key.
    const std::int64_t block0 = r0 / kAttentionRows * kAttentionRows;
    for (std::int64_t q0 = block0; q0 < T; q0 += kAttentionQueryTile)
      if (q0 + kAttentionQueryTile - 1 >= r0) ++kv;
    // dQ: the warp of queries r0.. visits its block's key tiles, up to the block's last row's.
    const std::int64_t last = std::min<std::int64_t>(block0 + kAttentionRows, T) - 1;
    q += last / kAttentionKeyTile + 1;
  }
  // dK/dV: S^T, dV, dP^T, dK per (warp, query tile); dQ: S, dP, dQ per (warp, key tile).
  return std::int64_t{B} * H *
         (kv * 4 * (2 * 16 * kAttentionQueryTile * D) + q * 3 * (2 * 16 * kAttentionKeyTile * D));
}

std::int64_t attention_forward_flops_executed(int B, int T, int C, int H) {
  return attention_forward_flops_executed(B, T, C, H, attention_kernels(C / H));
}
std::int64_t attention_backward_flops_executed(int B, int T, int C, int H) {
  return attention_backward_flops_executed(B, T, C, H, attention_kernels(C / H));
}

std::int64_t layernorm_partial_rows(std::int64_t M) { return std::max<std::int64_t>(1, std::min(M, kLayerNormBlocks)); }

std::int64_t GptShape::padded_vocabulary() const { return (vocabulary + 63) / 64 * 64; }

std::string unsupported_reason(const GptShape& s) {
  if (s.vocabulary < 1 || s.layers < 1 || s.hidden < 1 || s.heads < 1 || s.sequence < 1 || s.batch < 1)
    return "every size (vocabulary, layers, hidden, heads, sequence, batch) must be positive";
  if (s.hidden % s.heads != 0)
    return std::to_string(s.heads) + " heads do not divide hidden " + std::to_string(s.hidden);
  const std::int64_t d = s.hidden / s.heads;
  if (!attention_head_size_supported(static_cast<int>(d)))
    return "head size " + std::to_string(d) + " (hidden / heads) is not one the attention kernels have (16, 32, 64, 80, 96, 128)";
  if (s.hidden % 8 != 0 || s.hidden > 4096)
    return "hidden " + std::to_string(s.hidden) + " must be a multiple of 8, at most 4096";
  // (Compared by division first: batch x sequence must not overflow before it is compared.)
  if (s.batch > (std::int64_t{1} << 30) / s.sequence || s.rows() > (std::int64_t{1} << 30) ||
      s.vocabulary > (std::int64_t{1} << 40) / s.hidden || s.padded_vocabulary() * s.hidden > (std::int64_t{1} << 40))
    return "batch x sequence or the token table is too large for the kernels' indices";
  // The attention kernels' grid: B x H blocks in its second dimension (at most 65,535).
  if (s.batch * s.heads > 65535)
    return "batch x heads " + std::to_string(s.batch * s.heads) + " is more than the attention kernels' grid takes (65,535)";
  return "";
}

std::vector<ParameterSlot> parameter_layout(const GptShape& s) {
  std::vector<ParameterSlot> slots;
  std::int64_t offset = 0;
  auto add = [&](std::string name, std::vector<std::int64_t> shape, std::int64_t count) {
    slots.push_back({std::move(name), std::move(shape), offset, count});
    offset += (count + 63) / 64 * 64;
  };
  const std::int64_t h = s.hidden;
  add("embedding.wte", {s.vocabulary, h}, s.padded_vocabulary() * h);
  add("embedding.wpe", {s.sequence, h}, s.sequence * h);
  for (int l = 0; l < s.layers; ++l) {
    const std::string b = "blocks." + std::to_string(l);
    add(b + ".ln1.gamma", {h}, h);
    add(b + ".ln1.beta", {h}, h);
    add(b + ".attn.qkv.weight", {h, 3 * h}, 3 * h * h);
    add(b + ".attn.qkv.bias", {3 * h}, 3 * h);
    add(b + ".attn.proj.weight", {h, h}, h * h);
    add(b + ".attn.proj.bias", {h}, h);
    add(b + ".ln2.gamma", {h}, h);
    add(b + ".ln2.beta", {h}, h);
    add(b + ".mlp.fc.weight", {h, 4 * h}, 4 * h * h);
    add(b + ".mlp.fc.bias", {4 * h}, 4 * h);
    add(b + ".mlp.proj.weight", {4 * h, h}, 4 * h * h);
    add(b + ".mlp.proj.bias", {h}, h);
  }
  add("ln_f.gamma", {h}, h);
  add("ln_f.beta", {h}, h);
  return slots;
}

std::vector<GradientBucket> gradient_buckets(const GptShape& s) {
  const std::vector<ParameterSlot> slots = parameter_layout(s);
  // Slot 0 is the token table, 1 the position table, then 12 per block, then ln_f's two.
  const auto start = [&](int block) { return slots[static_cast<std::size_t>(2 + 12 * block)].offset; };
  std::vector<GradientBucket> buckets;
  buckets.push_back({"ln_f", start(s.layers), parameter_elements(s) - start(s.layers)});
  for (int l = s.layers - 1; l >= 0; --l)
    buckets.push_back({"blocks." + std::to_string(l), start(l), start(l + 1) - start(l)});
  buckets.push_back({"embedding.wpe", slots[1].offset, start(0) - slots[1].offset});
  return buckets;
}

std::int64_t parameter_elements(const GptShape& s) {
  const auto slots = parameter_layout(s);
  return slots.back().offset + (slots.back().count + 63) / 64 * 64;
}

std::size_t device_bytes(const GptShape& s, Storage storage) {
  const double e = static_cast<double>(bytes_of(storage)), h = static_cast<double>(s.hidden);
  const double M = static_cast<double>(s.rows()), L = s.layers, V = static_cast<double>(s.padded_vocabulary());
  const double heads_rows = static_cast<double>(s.batch) * s.heads * static_cast<double>(s.sequence);
  const double P = static_cast<double>(parameter_elements(s));
  const double parameters = P * (2 * e + 3 * 4) + V * h * 4;  // 16-bit values and gradients; masters, m, v; wte gradient
  // Per layer: two float32 residuals, LN outputs, qkv, attention output, GeLU input and output in
  // 16 bits; means, rstds and the log-sum-exp in float32.
  const double layer = M * h * (2 * 4 + e * (1 + 3 + 1 + 1 + 4 + 4)) + M * 4 * 4 + heads_rows * 4;
  // The final residual and LayerNorm, the logits, and backward's scratch.
  const double rest = M * h * (4 + e) + M * 8 + M * V * e + M * h * (4 + e * (1 + 1 + 1 + 3 + 4 + 1)) +
                      heads_rows * 4 + M * 4 * 6 +
                      static_cast<double>(layernorm_partial_rows(s.rows())) * 2 * h * 4 + (32 << 20);
  const double bytes = parameters + L * layer + rest;
  return bytes < 1.8e19 ? static_cast<std::size_t>(bytes) : static_cast<std::size_t>(-1);  // past size_t: the largest
}

TokenGroups group_rows_by_token(const std::int32_t* tokens, std::int64_t rows) {
  TokenGroups g;
  g.order.resize(static_cast<std::size_t>(rows));
  std::iota(g.order.begin(), g.order.end(), 0);
  std::stable_sort(g.order.begin(), g.order.end(), [&](std::int32_t a, std::int32_t b) { return tokens[a] < tokens[b]; });
  for (std::int64_t i = 0; i < rows; ++i) {
    const std::int32_t token = tokens[g.order[static_cast<std::size_t>(i)]];
    if (g.unique.empty() || g.unique.back() != token) {
      g.unique.push_back(token);
      g.starts.push_back(static_cast<std::int32_t>(i));
    }
  }
  g.starts.push_back(static_cast<std::int32_t>(rows));
  return g;
}

std::int64_t matmul_flops_per_step(const GptShape& s) {
  const std::int64_t M = s.rows(), h = s.hidden, V = s.padded_vocabulary();
  // Forward: qkv 3h^2, proj h^2, fc 4h^2, fc2 4h^2 per row and layer, the head h V; backward twice that.
  return 3 * (2 * M * 12 * h * h * s.layers + 2 * M * h * V);
}

std::int64_t model_flops_per_step(const GptShape& s) {
  // Attention's two products in full (2 T^2 h each, forward), backward twice forward.
  const std::int64_t attention = 3 * 4 * s.batch * s.sequence * s.sequence * s.hidden * s.layers;
  return matmul_flops_per_step(s) + attention;
}

std::int64_t hardware_flops_per_step(const GptShape& s) {
  const int B = static_cast<int>(s.batch), T = static_cast<int>(s.sequence), C = static_cast<int>(s.hidden);
  return matmul_flops_per_step(s) +
         s.layers * (attention_forward_flops_executed(B, T, C, s.heads) + attention_backward_flops_executed(B, T, C, s.heads));
}

}  // namespace parity::fast
