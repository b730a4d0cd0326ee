// The fast path (reference/fast/): its host logic everywhere, and on a GPU every fast op against
// the CPU ops in float64 on the same 16-bit input values, the whole step's gradients against the
// reference GPT's, 50 steps of training against the reference in float32, and determinism.
// The device tests skip where no GPU is visible.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "reference/core/dtype.hpp"
#include "reference/core/error.hpp"
#include "reference/core/half.hpp"
#include "reference/cuda/device.hpp"
#include "reference/fast/gpt.hpp"
#include "reference/model/model.hpp"
#include "reference/model/optimizer.hpp"
#include "reference/ops/ops.hpp"
#include "reference/tensor/tensor.hpp"
#include "reference/theory/model.hpp"

using namespace parity;

namespace {

// ---- How the results are judged ------------------------------------------------------------------
//
// relative error = max_i |fast_i - reference_i| / max_i |reference_i|, the reference computed in
// float64 on the very values the fast op reads (inputs are drawn, rounded to bfloat16, and the
// rounded values given to both), so the error is the fast op's own arithmetic.
//
// bfloat16 keeps 8 significant bits: a rounding errs by at most u = 2^-8 relative. The fast ops
// accumulate in float32 (error ~1e-7 x reduction length, negligible next to u at these sizes), so
// their error is u times the number of 16-bit roundings on the path from input to output, each
// bounded relative to the output's scale:
//   1 rounding  (the output):               a product with its epilogue, LayerNorm, the loss gradient;
//   2 roundings (probabilities, output):    attention forward;
//   3 roundings (P or dS, dP's input, out): attention backward (dS = P (dP - delta) is rounded
//                                           before it multiplies Q or K; dO rounded by the caller).
// Each bound is that count times u, doubled for the GeLU and exp evaluated in float32 near a
// rounding boundary. A NaN fails every comparison.
constexpr double kU = 1.0 / 256;
constexpr double kOneRounding = 2 * kU;
constexpr double kAttentionForward = 2 * 2 * kU;
constexpr double kAttentionBackward = 2 * 3 * kU;
// A whole step's gradients: through L blocks each input to a parameter's gradient has been
// rounded at most 4 times per block it crosses (two LayerNorm outputs, attention, GeLU) plus the
// logits' gradient: 4 L + 2 roundings, doubled as above.
double step_gradient_bound(int layers) { return 2 * (4.0 * layers + 2) * kU; }
// AdamW on one element is about ten float32 operations (decay, two moments, two corrections, a
// square root, a division, the update), each rounding by at most 2^-24 relative; measured against
// float64 relative to the largest master, over k steps: k x 10 x 2^-24.
double adamw_bound(int steps) { return steps * 10.0 * std::ldexp(1.0, -24); }
// 50 steps of training: the loss of the fast step against the float32 reference, relative to the
// loss, within the same count of roundings (the forward's path: 4 L + 2) times u, doubled; AdamW
// normalises each update (m / sqrt(v)), so the parameters' 16-bit rounding moves an update by a
// relative u, and over 50 steps at learning rate 1e-3 (weights ~0.02) the loss drifts by less
// than the forward's own rounding: the bound is not widened with the step count.
double training_loss_bound(int layers) { return 2 * (4.0 * layers + 2) * kU; }

double relative_error(const std::vector<double>& got, const std::vector<double>& want) {
  double worst = 0, scale = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    worst = std::max(worst, std::abs(got[i] - want[i]));
    scale = std::max(scale, std::abs(want[i]));
  }
  return scale > 0 ? worst / scale : worst;
}

std::string why_no_device() {
  if (!fast::compiled()) return "this parity was built without CUDA: the fast path is compiled out";
  if (cuda::devices().empty()) return "no CUDA GPU visible: the fast kernels are compiled but not run here";
  static const bool selected = [] {
    if (cuda::selected_device() < 0) cuda::select_device(0);
    return true;
  }();
  (void)selected;
  return "";
}

class FastDevice : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const std::string why = why_no_device(); !why.empty()) GTEST_SKIP() << why;
  }
};

// bfloat16 round trip on the host.
double round_bf16(double v) { return static_cast<double>(bf16_to_float(float_to_bf16(static_cast<float>(v)))); }

// n values N(0, std) rounded to bfloat16 (as doubles), from a seed.
std::vector<double> draw(std::size_t n, double std, unsigned seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0, std);
  std::vector<double> x(n);
  for (double& v : x) v = round_bf16(normal(rng));
  return x;
}

// A device buffer of bfloat16 values, or of float32.
struct DeviceBuffer {
  void* p = nullptr;
  std::size_t bytes = 0;
  explicit DeviceBuffer(std::size_t b) : p(cuda::allocate(b == 0 ? 1 : b)), bytes(b) { cuda::poison(p, bytes); }
  ~DeviceBuffer() { cuda::release(p); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  template <typename T> T* as() const { return static_cast<T*>(p); }
};
// Values (bfloat16-exact, so float16-exact too at these magnitudes) to the device in storage s, and back.
std::unique_ptr<DeviceBuffer> to_device(const std::vector<double>& x, fast::Storage s = fast::Storage::bfloat16) {
  std::vector<std::uint16_t> h(x.size());
  for (std::size_t i = 0; i < x.size(); ++i)
    h[i] = s == fast::Storage::bfloat16 ? float_to_bf16(static_cast<float>(x[i])).bits
                                        : float_to_half(static_cast<float>(x[i])).bits;
  auto d = std::make_unique<DeviceBuffer>(h.size() * 2);
  cuda::copy(d->p, h.data(), h.size() * 2);
  return d;
}
std::vector<double> from_device(const DeviceBuffer& d, std::size_t n, fast::Storage s = fast::Storage::bfloat16) {
  std::vector<std::uint16_t> h(n);
  cuda::copy(h.data(), d.p, n * 2);
  std::vector<double> x(n);
  for (std::size_t i = 0; i < n; ++i)
    x[i] = s == fast::Storage::bfloat16 ? bf16_to_float(bfloat16_t{h[i]}) : half_to_float(float16_t{h[i]});
  return x;
}
Tensor host_tensor(const std::vector<double>& x, Shape shape) {
  Tensor t = Tensor::empty("x", std::move(shape), DataType::float64, MemoryCategory::workspace);
  std::copy(x.begin(), x.end(), t.data<double>());
  return t;
}
std::vector<double> values(const Tensor& t) { return {t.data<double>(), t.data<double>() + t.numel()}; }

// ---- Host logic (everywhere) ----------------------------------------------------------------------

model::GptConfig tiny_config() {
  return {.vocabulary = 256, .layers = 2, .hidden = 64, .heads = 4, .sequence = 64, .dtype = DataType::float32};
}
fast::GptShape shape_of(const model::GptConfig& c, std::int64_t batch) {
  return {c.vocabulary, c.layers, c.hidden, c.heads, c.sequence, batch};
}

TEST(FastGpt, LayoutHoldsTheReferenceModelsParameters) {
  const model::GptConfig c = tiny_config();
  auto reference = model::build_gpt(c);
  const auto layout = fast::parameter_layout(shape_of(c, 2));
  ASSERT_EQ(layout.size(), reference->parameters().size());
  for (const model::Parameter* p : reference->parameters()) {
    auto it = std::find_if(layout.begin(), layout.end(), [&](const fast::ParameterSlot& s) { return s.name == p->name; });
    ASSERT_NE(it, layout.end()) << p->name << " has no slot";
    EXPECT_EQ(it->shape, p->value.shape()) << p->name;
  }
  for (std::size_t i = 0; i + 1 < layout.size(); ++i) {
    EXPECT_EQ(layout[i].offset % 64, 0);
    EXPECT_GE(layout[i + 1].offset, layout[i].offset + layout[i].count) << layout[i].name << " overlaps the next";
  }
  EXPECT_EQ(layout.front().name, "embedding.wte");  // the float32-gradient slot comes first (ops.hpp: adamw)
}

// The data-parallel buckets: every 16-bit gradient slot but the token table's (float32, summed
// last) in exactly one bucket, each bucket one part of the model whole, in the order backward
// finishes them.
TEST(FastGpt, GradientBucketsCoverEverySixteenBitGradientOnceInBackwardsOrder) {
  for (int layers : {1, 2, 5}) {
    model::GptConfig c = tiny_config();
    c.layers = layers;
    const fast::GptShape shape = shape_of(c, 2);
    const auto layout = fast::parameter_layout(shape);
    const auto buckets = fast::gradient_buckets(shape);
    ASSERT_EQ(buckets.size(), static_cast<std::size_t>(layers) + 2);
    std::vector<std::string> names;
    for (const fast::GradientBucket& b : buckets) names.push_back(b.what);
    std::vector<std::string> expected{"ln_f"};
    for (int l = layers - 1; l >= 0; --l) expected.push_back("blocks." + std::to_string(l));
    expected.push_back("embedding.wpe");
    EXPECT_EQ(names, expected);
    for (const fast::ParameterSlot& slot : layout) {
      int holders = 0;
      std::string holder;
      for (const fast::GradientBucket& b : buckets)
        if (slot.offset >= b.offset && slot.offset + slot.count <= b.offset + b.count) ++holders, holder = b.what;
      if (slot.name == "embedding.wte") {
        EXPECT_EQ(holders, 0) << "the token table's gradient is float32, summed on its own";
        continue;
      }
      EXPECT_EQ(holders, 1) << slot.name;
      const std::string part = slot.name.rfind("blocks.", 0) == 0 ? slot.name.substr(0, slot.name.find('.', 7))
                               : slot.name.rfind("ln_f", 0) == 0 ? "ln_f"
                                                                  : slot.name;
      EXPECT_EQ(holder, part) << slot.name;
    }
    // Disjoint, and together [the position table, the end of the flat buffers).
    std::int64_t covered = 0;
    for (std::size_t i = 0; i < buckets.size(); ++i) {
      covered += buckets[i].count;
      for (std::size_t j = i + 1; j < buckets.size(); ++j)
        EXPECT_TRUE(buckets[i].offset + buckets[i].count <= buckets[j].offset ||
                    buckets[j].offset + buckets[j].count <= buckets[i].offset)
            << buckets[i].what << " overlaps " << buckets[j].what;
    }
    EXPECT_EQ(covered, fast::parameter_elements(shape) - layout[1].offset);
  }
}

TEST(FastGpt, FlopsMatchTheFormula) {
  for (const model::GptConfig& c : {tiny_config(), model::GptConfig{.vocabulary = 50304, .layers = 24, .hidden = 2048,
                                                                    .heads = 16, .sequence = 2048}}) {
    const fast::GptShape s = shape_of(c, 3);
    EXPECT_EQ(fast::model_flops_per_step(s), theory::gpt_step_flops(c, 3)) << c.describe();
    // Backward's two kernels run 7 products where the model counts 4 (forward 2 of 2): 9/6 of
    // attention in full, halved by skipping the tiles above the diagonal (all but the diagonal's).
    const double attention = static_cast<double>(fast::model_flops_per_step(s) - fast::matmul_flops_per_step(s));
    const double executed = static_cast<double>(fast::hardware_flops_per_step(s) - fast::matmul_flops_per_step(s));
    EXPECT_GE(executed, 0.75 * attention);
    EXPECT_LE(executed, 1.5 * attention);
  }
}

// The attention kernels' executed products, counted by hand for one head of 128 rows and head
// size 64. The m16n8k16 kernels: forward, 8 warps of 16 queries, the first four see key tile 0,
// the others tiles 0 and 1 (12 visits of two 16 x 64 x 64 products); dK/dV, the warps of keys 0,
// 16, 32, 48 visit the query tiles of 32 from 0 that hold a query at or after their first key (4,
// 4, 3, 3), those of 64.. the tiles from 64 (2, 2, 1, 1): 20 visits of four 16 x 32 x 64
// products; dQ, the first block's four warps one key tile, the second's two: 12 visits of three
// 16 x 64 x 64 products. The warpgroup kernels, 64 rows at a time: forward, the warpgroup of
// queries 0.. sees key tile 0, that of 64.. tiles 0 and 1 (3 visits of two 64 x 64 x 64
// products); dK/dV, the keys 0.. visit query tiles 0 and 64, the keys 64.. tile 64 (3 visits of
// four); dQ, the queries 0.. key tile 0, the queries 64.. tiles 0 and 1 (3 visits of three).
TEST(FastGpt, AttentionCountsTheProductsItRuns) {
  using fast::AttentionKernels;
  const std::int64_t tile64 = 2 * 16 * 64 * 64, tile32 = 2 * 16 * 32 * 64, group = 2 * 64 * 64 * 64;
  EXPECT_EQ(fast::attention_forward_flops_executed(1, 128, 64, 1, AttentionKernels::mma), 12 * 2 * tile64);
  EXPECT_EQ(fast::attention_backward_flops_executed(1, 128, 64, 1, AttentionKernels::mma), 20 * 4 * tile32 + 12 * 3 * tile64);
  EXPECT_EQ(fast::attention_forward_flops_executed(1, 128, 64, 1, AttentionKernels::wgmma), 3 * 2 * group);
  EXPECT_EQ(fast::attention_backward_flops_executed(1, 128, 64, 1, AttentionKernels::wgmma), 3 * 4 * group + 3 * 3 * group);
  // Batch and heads multiply; a sequence that ends inside a tile drops the warps past its end (a
  // warpgroup computes its whole tile).
  EXPECT_EQ(fast::attention_forward_flops_executed(3, 128, 128, 2, AttentionKernels::mma), 6 * 12 * 2 * tile64);
  EXPECT_EQ(fast::attention_forward_flops_executed(3, 128, 128, 2, AttentionKernels::wgmma), 6 * 3 * 2 * group);
  EXPECT_EQ(fast::attention_forward_flops_executed(1, 40, 64, 1, AttentionKernels::mma), 3 * 2 * tile64);
  EXPECT_EQ(fast::attention_forward_flops_executed(1, 40, 64, 1, AttentionKernels::wgmma), 1 * 2 * group);
  EXPECT_EQ(fast::attention_backward_flops_executed(1, 40, 64, 1, AttentionKernels::wgmma), 1 * 4 * group + 1 * 3 * group);
}

TEST(FastGpt, GroupsRowsByToken) {
  const std::vector<std::int32_t> tokens = {5, 2, 5, 7, 2, 5};
  const fast::TokenGroups g = fast::group_rows_by_token(tokens.data(), 6);
  EXPECT_EQ(g.order, (std::vector<std::int32_t>{1, 4, 0, 2, 5, 3}));
  EXPECT_EQ(g.unique, (std::vector<std::int32_t>{2, 5, 7}));
  EXPECT_EQ(g.starts, (std::vector<std::int32_t>{0, 2, 5, 6}));
}

TEST(FastGpt, RefusesShapesItCannotTrain) {
  fast::GptShape s = shape_of(tiny_config(), 2);
  EXPECT_EQ(fast::unsupported_reason(s), "");
  s.heads = 3;
  EXPECT_NE(fast::unsupported_reason(s).find("divide"), std::string::npos);
  s = shape_of(tiny_config(), 2);
  s.heads = 1;  // head size 64 is fine
  EXPECT_EQ(fast::unsupported_reason(s), "");
  s.hidden = 48;
  s.heads = 1;  // head size 48: no kernel
  EXPECT_NE(fast::unsupported_reason(s).find("head size 48"), std::string::npos);
  s = shape_of(tiny_config(), 0);
  EXPECT_NE(fast::unsupported_reason(s), "");
  // A batch at the top of int64 is refused before batch x sequence could wrap past the check.
  s = shape_of(tiny_config(), std::numeric_limits<std::int64_t>::max());
  EXPECT_NE(fast::unsupported_reason(s).find("too large"), std::string::npos);
  // More sequences x heads than the attention kernels' grid takes.
  s = shape_of(tiny_config(), 65536 / s.heads + 1);
  EXPECT_NE(fast::unsupported_reason(s).find("grid"), std::string::npos);
}

TEST(FastGpt, RefusedWithoutCudaInOneLine) {
  if (fast::compiled()) GTEST_SKIP() << "built with CUDA";
  try {
    fast::Gpt gpt(shape_of(tiny_config(), 2), fast::Storage::bfloat16, {}, 1);
    FAIL() << "made a fast GPT without CUDA";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("needs parity built with CUDA"), std::string::npos) << e.what();
  }
}

// ---- The ops on a GPU -----------------------------------------------------------------------------

struct AttentionCase {
  int B, T, C, H;
};

// Attention forward and backward on the GPU in both storage types against the CPU op in float64
// (the kernels attention_kernels() chooses, or those named), within the bounds above.
void expect_attention_matches_float64(const AttentionCase& k, unsigned seed,
                                      std::optional<fast::AttentionKernels> kernels = std::nullopt) {
  SCOPED_TRACE("B=" + std::to_string(k.B) + " T=" + std::to_string(k.T) + " C=" + std::to_string(k.C) +
               " H=" + std::to_string(k.H));
  const std::size_t rows = static_cast<std::size_t>(k.B) * k.T;
  const auto qkv = draw(rows * 3 * k.C, 1.0, seed), dout = draw(rows * k.C, 1.0, seed + 1);
  // Reference: the CPU op in float64.
  Tensor q = host_tensor(qkv, {k.B, k.T, 3 * k.C});
  Tensor out = Tensor::empty("out", {k.B, k.T, k.C}, DataType::float64, MemoryCategory::workspace);
  Tensor probs = Tensor::empty("p", {k.B, k.H, k.T, k.T}, DataType::float64, MemoryCategory::workspace);
  ops::attention_forward(q, k.H, true, out, probs);
  Tensor dq = Tensor::empty("dq", {k.B, k.T, 3 * k.C}, DataType::float64, MemoryCategory::workspace);
  ops::attention_backward(host_tensor(dout, {k.B, k.T, k.C}), q, probs, k.H, dq);
  // Fast, in both storage types (float16 keeps more bits than bfloat16: the bounds hold a fortiori).
  const fast::AttentionKernels family = kernels.value_or(fast::attention_kernels(k.C / k.H));
  for (const fast::Storage s : {fast::Storage::bfloat16, fast::Storage::float16}) {
    auto d_qkv = to_device(qkv, s), d_dout = to_device(dout, s);
    DeviceBuffer d_out(rows * k.C * 2), d_lse(static_cast<std::size_t>(k.B) * k.H * k.T * 4),
        d_delta(static_cast<std::size_t>(k.B) * k.H * k.T * 4), d_dqkv(rows * 3 * k.C * 2);
    fast::attention_forward(s, d_qkv->p, d_out.p, d_lse.as<float>(), k.B, k.T, k.C, k.H, family);
    fast::attention_backward(s, d_dout->p, d_qkv->p, d_out.p, d_lse.as<float>(), d_delta.as<float>(), d_dqkv.p, k.B, k.T,
                             k.C, k.H, family);
    const double e_out = relative_error(from_device(d_out, rows * k.C, s), values(out));
    const double e_dqkv = relative_error(from_device(d_dqkv, rows * 3 * k.C, s), values(dq));
    EXPECT_LT(e_out, kAttentionForward) << fast::name_of(family) << " " << fast::name_of(s);
    EXPECT_LT(e_dqkv, kAttentionBackward) << fast::name_of(family) << " " << fast::name_of(s);
    std::printf("[fast attention %s] %s B=%d T=%d C=%d H=%d: forward %.2e (bound %.2e), backward %.2e (bound %.2e)\n",
                fast::name_of(family), fast::name_of(s), k.B, k.T, k.C, k.H, e_out, kAttentionForward, e_dqkv,
                kAttentionBackward);
  }
}

TEST_F(FastDevice, AttentionMatchesFloat64ForwardAndBackward) {
  // Head sizes 16, 64, 80, 128; lengths that are and are not multiples of the 64-row tiles.
  for (const AttentionCase k : {AttentionCase{2, 64, 64, 4}, AttentionCase{2, 100, 128, 2}, AttentionCase{1, 130, 160, 2},
                                AttentionCase{1, 77, 128, 1}})
    expect_attention_matches_float64(k, 11);
}

// On a GPU where Hopper's warpgroup kernels run, both families against float64 on the head sizes
// they share (64 and 128), at lengths that end inside a tile and span several; within the same
// bounds (the warpgroup kernels round the same values: P, dS and the outputs).
TEST_F(FastDevice, BothAttentionKernelFamiliesMatchFloat64) {
  if (fast::attention_kernels(128) != fast::AttentionKernels::wgmma)
    GTEST_SKIP() << "the warpgroup attention kernels do not run on this GPU (compute capability 9.0 needed)";
  for (const AttentionCase k : {AttentionCase{1, 300, 256, 2}, AttentionCase{2, 192, 128, 2}, AttentionCase{1, 64, 128, 1},
                                AttentionCase{2, 33, 128, 2}})
    for (const fast::AttentionKernels kernels : {fast::AttentionKernels::mma, fast::AttentionKernels::wgmma})
      expect_attention_matches_float64(k, 21, kernels);
}

TEST_F(FastDevice, LinearWithBiasGeluAndItsGradients) {
  const std::int64_t M = 96, K = 64, N = 128;
  const auto x = draw(M * K, 1.0, 21), w = draw(K * N, 0.1, 22), b = draw(N, 0.1, 23), dy = draw(M * N, 1.0, 24);
  // Reference: pre = x w + b, y = gelu(pre); dpre = dy gelu'(pre); dx = dpre w^T; dw = x^T dpre; db = sum dpre.
  Tensor tx = host_tensor(x, {M, K}), tw = host_tensor(w, {K, N}), tb = host_tensor(b, {N});
  Tensor pre = Tensor::empty("pre", {M, N}, DataType::float64, MemoryCategory::workspace);
  Tensor y = Tensor::empty("y", {M, N}, DataType::float64, MemoryCategory::workspace);
  ops::linear_forward(tx, tw, tb, pre);
  ops::gelu_forward(pre, y);
  Tensor dpre = Tensor::empty("dpre", {M, N}, DataType::float64, MemoryCategory::workspace);
  // The fast path rounds the pre-activation it saves to bfloat16: the reference's gradient uses
  // that rounded value too, so that the comparison measures the kernel.
  std::vector<double> pre16 = values(pre);
  for (double& v : pre16) v = round_bf16(v);
  ops::gelu_backward(host_tensor(dy, {M, N}), host_tensor(pre16, {M, N}), dpre);
  Tensor dx = Tensor::empty("dx", {M, K}, DataType::float64, MemoryCategory::workspace);
  Tensor dw = Tensor::zeros("dw", {K, N}, DataType::float64, MemoryCategory::workspace);
  Tensor db = Tensor::zeros("db", {N}, DataType::float64, MemoryCategory::workspace);
  // The weight gradient's input is the rounded dpre the fast path multiplies.
  std::vector<double> dpre16 = values(dpre);
  for (double& v : dpre16) v = round_bf16(v);
  ops::linear_backward(host_tensor(dpre16, {M, N}), tx, tw, dx, dw, db);

  auto dx_ = to_device(x), dw_ = to_device(w), db_ = to_device(b), ddy = to_device(dy);
  DeviceBuffer d_pre(M * N * 2), d_y(M * N * 2), d_dpre(M * N * 2), d_dx(M * K * 2), d_dw(K * N * 2), d_db(N * 2);
  const auto s = fast::Storage::bfloat16;
  fast::linear_forward(s, dx_->p, dw_->p, db_->p, d_y.p, d_pre.p, M, K, N, fast::Epilogue::bias_gelu);
  // dpre = dy gelu'(pre): as the backward of a product whose output is y (w2 = identity would need
  // a square product; instead the DGELU epilogue is checked through dx = (dy I) gelu'(pre) with I = eye(N)).
  std::vector<double> eye(static_cast<std::size_t>(N * N), 0.0);
  for (std::int64_t i = 0; i < N; ++i) eye[static_cast<std::size_t>(i * N + i)] = 1;
  auto d_eye = to_device(eye);
  fast::linear_backward_input(s, ddy->p, d_eye->p, d_dpre.p, d_pre.p, M, N, N, fast::Epilogue::dgelu);
  auto d_dpre16 = to_device(dpre16);  // the reference's rounded dpre, so each product is judged alone
  fast::linear_backward_weight(s, dx_->p, d_dpre16->p, d_dw.p, d_db.p, M, K, N, false);
  fast::linear_backward_input(s, d_dpre16->p, dw_->p, d_dx.p, nullptr, M, K, N, fast::Epilogue::none);

  EXPECT_LT(relative_error(from_device(d_pre, M * N), values(pre)), kOneRounding);
  EXPECT_LT(relative_error(from_device(d_y, M * N), values(y)), kOneRounding);
  EXPECT_LT(relative_error(from_device(d_dpre, M * N), values(dpre)), kOneRounding);
  EXPECT_LT(relative_error(from_device(d_dw, K * N), values(dw)), kOneRounding);
  EXPECT_LT(relative_error(from_device(d_db, N), values(db)), kOneRounding);
  EXPECT_LT(relative_error(from_device(d_dx, M * K), values(dx)), kOneRounding);
  std::printf("[fast linear] epilogues fused by cuBLASLt: %s\n", fast::epilogue_fallbacks() == 0 ? "all" : "not all");
}

// Every width the presets use (64: the tests' GPT; 1024, 2048, 2560: gpt2-medium, gpt-1.3b,
// gpt-2.7b), so each columns-per-thread variant of the kernels is checked; more rows than the
// kernels' blocks (kLayerNormBlocks), so blocks take several rows.
TEST_F(FastDevice, ResidualLayerNormForwardAndBackwardMatchFloat64) {
  const std::int64_t M = fast::kLayerNormBlocks + 37;
  for (const std::int64_t C : {30, 64, 768, 1024, 2048, 2560}) {  // 30: the scalar kernels; the rest: the vector ones
    SCOPED_TRACE("C=" + std::to_string(C));
    const auto resid = draw(M * C, 1.0, 31), add = draw(M * C, 1.0, 32), gamma = draw(C, 1.0, 33),
               beta = draw(C, 0.5, 34), dy = draw(M * C, 1.0, 35), d0 = draw(M * C, 1.0, 36);
    // Reference in float64: x = resid + add, y = LayerNorm(x); dx, dgamma, dbeta from dy.
    std::vector<double> x(resid.size());
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = resid[i] + add[i];
    Tensor tx = host_tensor(x, {M, C}), tg = host_tensor(gamma, {C}), tb = host_tensor(beta, {C});
    Tensor y = Tensor::empty("y", {M, C}, DataType::float64, MemoryCategory::workspace);
    Tensor mean = Tensor::empty("mean", {M}, DataType::float64, MemoryCategory::workspace);
    Tensor rstd = Tensor::empty("rstd", {M}, DataType::float64, MemoryCategory::workspace);
    ops::layernorm_forward(tx, tg, tb, y, mean, rstd);
    Tensor dx = Tensor::empty("dx", {M, C}, DataType::float64, MemoryCategory::workspace);
    Tensor dgamma = Tensor::zeros("dgamma", {C}, DataType::float64, MemoryCategory::workspace);
    Tensor dbeta = Tensor::zeros("dbeta", {C}, DataType::float64, MemoryCategory::workspace);
    ops::layernorm_backward(host_tensor(dy, {M, C}), tx, tg, mean, rstd, dx, dgamma, dbeta);
    std::vector<double> dresid_want = values(dx);
    for (std::size_t i = 0; i < dresid_want.size(); ++i) dresid_want[i] += d0[i];

    const auto s = fast::Storage::bfloat16;
    const auto to_f32 = [](const std::vector<double>& v) {
      std::vector<float> f(v.begin(), v.end());
      auto d = std::make_unique<DeviceBuffer>(f.size() * 4);
      cuda::copy(d->p, f.data(), f.size() * 4);
      return d;
    };
    const auto from_f32 = [](const DeviceBuffer& d, std::size_t n) {
      std::vector<float> f(n);
      cuda::copy(f.data(), d.p, n * 4);
      return std::vector<double>(f.begin(), f.end());
    };
    auto d_resid = to_f32(resid), d_dresid = to_f32(d0);
    auto d_add = to_device(add), d_gamma = to_device(gamma), d_beta = to_device(beta), d_dy = to_device(dy);
    const auto n = static_cast<std::size_t>(M * C);
    DeviceBuffer d_out(n * 4), d_y(n * 2), d_mean(static_cast<std::size_t>(M) * 4), d_rstd(static_cast<std::size_t>(M) * 4),
        d_dres16(n * 2), d_partial(static_cast<std::size_t>(fast::layernorm_partial_rows(M) * 2 * C) * 4),
        d_dgamma(static_cast<std::size_t>(C) * 2), d_dbeta(static_cast<std::size_t>(C) * 2);
    fast::residual_layernorm_forward(s, d_resid->as<float>(), d_add->p, d_out.as<float>(), d_gamma->p, d_beta->p,
                                     d_y.p, d_mean.as<float>(), d_rstd.as<float>(), M, C);
    fast::layernorm_backward(s, d_out.as<float>(), d_mean.as<float>(), d_rstd.as<float>(), d_gamma->p, d_dy->p,
                             d_dresid->as<float>(), d_dres16.p, d_partial.as<float>(), M, C);
    fast::layernorm_param_grads(s, d_partial.as<float>(), d_dgamma.p, d_dbeta.p, M, C);
    EXPECT_LT(relative_error(from_f32(d_out, n), x), kOneRounding);
    EXPECT_LT(relative_error(from_device(d_y, n), values(y)), kOneRounding);
    EXPECT_LT(relative_error(from_f32(*d_dresid, n), dresid_want), kOneRounding);
    EXPECT_LT(relative_error(from_device(d_dres16, n), dresid_want), kOneRounding);
    EXPECT_LT(relative_error(from_device(d_dgamma, static_cast<std::size_t>(C)), values(dgamma)), kOneRounding);
    EXPECT_LT(relative_error(from_device(d_dbeta, static_cast<std::size_t>(C)), values(dbeta)), kOneRounding);
    // Neither op works in place: overlapping buffers are refused before a kernel runs.
    EXPECT_THROW(fast::residual_layernorm_forward(s, d_out.as<float>(), d_add->p, d_out.as<float>() + C, d_gamma->p,
                                                  d_beta->p, d_y.p, d_mean.as<float>(), d_rstd.as<float>(), M, C),
                 Error);
    EXPECT_THROW(fast::layernorm_backward(s, d_out.as<float>(), d_mean.as<float>(), d_rstd.as<float>(), d_gamma->p,
                                          d_dy->p, d_out.as<float>(), d_dres16.p, d_partial.as<float>(), M, C),
                 Error);
  }
}

// Cross-entropy over [M, V] logits with V - valid padding columns, against float64: the loss per
// row (float32 arithmetic, no 16-bit rounding: bound u / 16) and the gradient (one rounding),
// padding columns exactly 0. V = 64: the eight-column kernel; V = 50304 (gpt2's padded vocabulary):
// the same kernel taking several eights a thread at once, the last group cut by the row's end and
// by the padding; V = 30: the scalar one.
TEST_F(FastDevice, CrossEntropyMatchesFloat64) {
  for (const auto& [M, V, valid] :
       {std::tuple<std::int64_t, std::int64_t, std::int64_t>{37, 64, 50}, {9, 50304, 50257}, {37, 30, 27}}) {
    SCOPED_TRACE("V=" + std::to_string(V) + " valid=" + std::to_string(valid));
    const auto logits = draw(static_cast<std::size_t>(M * V), 3.0, 41);
    std::vector<std::int32_t> targets(static_cast<std::size_t>(M));
    for (std::int64_t r = 0; r < M; ++r) targets[static_cast<std::size_t>(r)] = static_cast<std::int32_t>((r * 7) % valid);
    const double normalizer = 2.0 * M, grad_scale = 4.0;
    std::vector<double> want_loss(static_cast<std::size_t>(M)), want_grad(static_cast<std::size_t>(M * V), 0.0);
    for (std::int64_t r = 0; r < M; ++r) {
      const double* x = logits.data() + r * V;
      double top = -INFINITY, sum = 0;
      for (std::int64_t c = 0; c < valid; ++c) top = std::max(top, x[c]);
      for (std::int64_t c = 0; c < valid; ++c) sum += std::exp(x[c] - top);
      const std::int64_t t = targets[static_cast<std::size_t>(r)];
      want_loss[static_cast<std::size_t>(r)] = (top + std::log(sum) - x[t]) / normalizer;
      for (std::int64_t c = 0; c < valid; ++c)
        want_grad[static_cast<std::size_t>(r * V + c)] =
            (std::exp(x[c] - top) / sum - (c == t ? 1.0 : 0.0)) * grad_scale / normalizer;
    }
    auto d_logits = to_device(logits);
    DeviceBuffer d_targets(targets.size() * 4), d_loss(static_cast<std::size_t>(M) * 4);
    cuda::copy(d_targets.p, targets.data(), targets.size() * 4);
    fast::cross_entropy(fast::Storage::bfloat16, d_logits->p, d_targets.as<std::int32_t>(), d_loss.as<float>(), M, V,
                        valid, static_cast<float>(normalizer), static_cast<float>(grad_scale));
    std::vector<float> loss(static_cast<std::size_t>(M));
    cuda::copy(loss.data(), d_loss.p, loss.size() * 4);
    const auto grad = from_device(*d_logits, static_cast<std::size_t>(M * V));
    EXPECT_LT(relative_error(std::vector<double>(loss.begin(), loss.end()), want_loss), kU / 16);
    EXPECT_LT(relative_error(grad, want_grad), kOneRounding);
    for (std::int64_t r = 0; r < M; ++r)
      for (std::int64_t c = valid; c < V; ++c) EXPECT_EQ(grad[static_cast<std::size_t>(r * V + c)], 0.0) << r << "," << c;
  }
}

// ---- The whole step on a GPU ----------------------------------------------------------------------

// The reference GPT's parameters copied into the fast one.
void copy_parameters(const model::Model& reference, fast::Gpt& gpt) {
  for (const model::Parameter* p : reference.parameters()) {
    std::vector<float> v(static_cast<std::size_t>(p->value.numel()));
    const Tensor host = p->value.to(MemorySpace::host, "copy", MemoryCategory::workspace);
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(host.at(static_cast<std::int64_t>(i)));
    gpt.set_parameter(p->name, v);
  }
}

std::vector<std::int32_t> ints(const Tensor& t) {
  std::vector<std::int32_t> v(static_cast<std::size_t>(t.numel()));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<std::int32_t>(t.at(static_cast<std::int64_t>(i)));
  return v;
}

class FastStorage : public FastDevice, public ::testing::WithParamInterface<fast::Storage> {};
INSTANTIATE_TEST_SUITE_P(Fast, FastStorage, ::testing::Values(fast::Storage::bfloat16, fast::Storage::float16),
                         [](const ::testing::TestParamInfo<fast::Storage>& info) { return std::string(fast::name_of(info.param)); });

// float16 with its loss scale (2^16 on the first step): the gradients come back unscaled.
TEST_P(FastStorage, StepGradientsMatchTheReferenceGpt) {
  model::GptConfig c = tiny_config();
  c.dtype = DataType::float64;
  const std::int64_t B = 4;
  auto reference = model::build_gpt(c);
  fast::Gpt gpt(shape_of(c, B), GetParam(), {}, 7);
  copy_parameters(*reference, gpt);
  const model::Batch batch = model::gpt_batch(c, 0, 0, B, B);
  reference->zero_grad();
  const double want_loss = reference->forward_backward(batch, {0, 0, true});
  const auto tokens = ints(batch.inputs), targets = ints(batch.targets);
  const fast::StepResult got = gpt.step(tokens.data(), targets.data(), /*update=*/false);
  ASSERT_FALSE(got.skipped) << "the first step overflowed at loss scale " << gpt.loss_scale();
  const double bound = step_gradient_bound(c.layers);
  EXPECT_LT(std::abs(got.loss - want_loss) / want_loss, bound) << got.loss << " vs " << want_loss;
  for (const model::Parameter* p : reference->parameters()) {
    const std::vector<float> g = gpt.gradient(p->name);
    std::vector<double> got_g(g.begin(), g.end()), want_g = values(p->grad);
    const double e = relative_error(got_g, want_g);
    EXPECT_LT(e, bound) << p->name;
  }
}

// The optimizer reads four elements a thread: an element count that is not a multiple of four
// (the tail) and a float32 gradient region ending inside a group of four check every path.
TEST_F(FastDevice, AdamWMatchesFloat64OnEveryElement) {
  const std::int64_t n = 1031, n32 = 6;
  const int steps = 3;
  const float loss_scale = 4;
  const fast::AdamWHyper hyper{.learning_rate = 1e-2f, .beta1 = 0.9f, .beta2 = 0.99f, .epsilon = 1e-8f, .weight_decay = 0.1f};
  const std::vector<double> start = draw(static_cast<std::size_t>(n), 0.02, 31);
  const std::vector<double> g16 = draw(static_cast<std::size_t>(n), 0.05, 32);
  std::vector<float> g32(static_cast<std::size_t>(n32));
  for (std::size_t i = 0; i < g32.size(); ++i) g32[i] = static_cast<float>(0.3 * (static_cast<double>(i) - 2.5));
  std::vector<float> masters(start.begin(), start.end());
  DeviceBuffer d_masters(4 * n), d_m(4 * n), d_v(4 * n), d_g32(4 * n32);
  auto d_params = to_device(std::vector<double>(static_cast<std::size_t>(n), 0.0));
  auto d_g16 = to_device(g16);
  cuda::copy(d_masters.p, masters.data(), 4 * masters.size());
  cuda::copy(d_g32.p, g32.data(), 4 * g32.size());
  cuda::zero(d_m.p, 4 * n);
  cuda::zero(d_v.p, 4 * n);
  for (int k = 1; k <= steps; ++k)
    fast::adamw(fast::Storage::bfloat16, d_params->p, d_masters.as<float>(), d_m.as<float>(), d_v.as<float>(), d_g16->p,
                d_g32.as<float>(), n, n32, hyper, k, loss_scale, nullptr);
  std::vector<float> got(static_cast<std::size_t>(n));
  cuda::copy(got.data(), d_masters.p, 4 * got.size());
  const std::vector<double> params = from_device(*d_params, static_cast<std::size_t>(n));
  // float64, the same rule (reference/model/optimizer.hpp), every gradient divided by the scale.
  std::vector<double> want(start), m(want.size(), 0.0), v(want.size(), 0.0);
  const double lr = hyper.learning_rate, b1 = hyper.beta1, b2 = hyper.beta2, eps = hyper.epsilon, wd = hyper.weight_decay;
  for (int k = 1; k <= steps; ++k)
    for (std::size_t i = 0; i < want.size(); ++i) {
      const double g = (static_cast<std::int64_t>(i) < n32 ? static_cast<double>(g32[i]) : g16[i]) / loss_scale;
      want[i] -= lr * wd * want[i];
      m[i] = b1 * m[i] + (1 - b1) * g;
      v[i] = b2 * v[i] + (1 - b2) * g * g;
      want[i] -= lr * (m[i] / (1 - std::pow(b1, k))) / (std::sqrt(v[i] / (1 - std::pow(b2, k))) + eps);
    }
  EXPECT_LT(relative_error(std::vector<double>(got.begin(), got.end()), want), adamw_bound(steps));
  for (std::size_t i = 0; i < got.size(); ++i)
    ASSERT_EQ(params[i], round_bf16(got[i])) << "element " << i << ": the 16-bit copy is not the rounded master";
  // Moved by about lr per step (m / sqrt(v) is about 1), in the direction against the gradient.
  for (std::int64_t i : {std::int64_t{0}, n32 - 1, n32, n - 1})
    EXPECT_GT(std::abs(got[static_cast<std::size_t>(i)] - start[static_cast<std::size_t>(i)]), 0.5 * lr * steps) << i;
}

TEST_F(FastDevice, FiftyBfloat16StepsFollowTheFloat32Reference) {
  const model::GptConfig c = tiny_config();
  const std::int64_t B = 4;
  auto reference = model::build_gpt(c);
  model::AdamW optimizer(model::AdamWConfig{}, DataType::float32);
  fast::Gpt gpt(shape_of(c, B), fast::Storage::bfloat16, {}, 7);
  copy_parameters(*reference, gpt);
  const double bound = training_loss_bound(c.layers);
  double first = 0, last = 0;
  for (int step = 0; step < 50; ++step) {
    const model::Batch batch = model::gpt_batch(c, static_cast<std::uint64_t>(step), 0, B, B);
    const double want = model::train_step(*reference, optimizer, batch, static_cast<std::uint64_t>(step));
    const auto tokens = ints(batch.inputs), targets = ints(batch.targets);
    const double got = gpt.step(tokens.data(), targets.data()).loss;
    EXPECT_LT(std::abs(got - want) / want, bound) << "step " << step << ": " << got << " vs " << want;
    if (step == 0) first = got;
    last = got;
  }
  EXPECT_LT(last, first) << "the fast GPT did not learn the task";
  EXPECT_EQ(gpt.updates(), 50);
}

TEST_F(FastDevice, StepsRepeatBitForBit) {
  const model::GptConfig c = tiny_config();
  const std::int64_t B = 4;
  std::vector<std::vector<float>> runs;
  std::vector<std::vector<double>> losses(2);
  for (int run = 0; run < 2; ++run) {
    fast::Gpt gpt(shape_of(c, B), fast::Storage::bfloat16, {}, 99);
    for (int step = 0; step < 3; ++step) {
      const model::Batch batch = model::gpt_batch(c, static_cast<std::uint64_t>(step), 0, B, B);
      const auto tokens = ints(batch.inputs), targets = ints(batch.targets);
      losses[static_cast<std::size_t>(run)].push_back(gpt.step(tokens.data(), targets.data()).loss);
    }
    runs.push_back(gpt.parameter("blocks.1.attn.qkv.weight"));
  }
  EXPECT_EQ(losses[0], losses[1]);
  EXPECT_TRUE(runs[0] == runs[1]) << "the fast step is not deterministic";
}

// A stand-in for two replicas that saw the same tokens: their sum is each bucket doubled (exact in
// bfloat16 and float32), so after the optimizer divides by the two replicas every parameter must
// equal, to the bit, that of a model without a sync. A bucket not handed over, handed over twice,
// or summed after the optimizer has read it would change the update.
class DoublingSync final : public fast::GradientSync {
 public:
  explicit DoublingSync(bool overlap) : overlap_(overlap) {}
  int replicas() const override { return 2; }
  bool overlaps() const override { return overlap_; }
  void sum(void* data, std::int64_t count, bool float32, void* stream) override {
    EXPECT_EQ(stream == cuda::stream(), !overlap_) << "an overlapping sum is queued on a stream of its own";
    fast::multiply(fast::Storage::bfloat16, data, count, float32, 2.f, stream);
    ++calls;
    elements += count;
  }
  int calls = 0;
  std::int64_t elements = 0;

 private:
  bool overlap_;
};

class FastSync : public FastDevice, public ::testing::WithParamInterface<bool> {};

TEST_P(FastSync, DataParallelReplicasOfOneBatchTrainAsOneModel) {
  const model::GptConfig c = tiny_config();
  const fast::GptShape shape = shape_of(c, 4);
  fast::Gpt alone(shape, fast::Storage::bfloat16, {}, 21), replica(shape, fast::Storage::bfloat16, {}, 21);
  DoublingSync sync(GetParam());
  replica.set_gradient_sync(&sync);
  replica.set_profiling(true);
  const int steps = 3;
  for (int step = 0; step < steps; ++step) {
    const model::Batch batch = model::gpt_batch(c, static_cast<std::uint64_t>(step), 0, 4, 4);
    const auto tokens = ints(batch.inputs), targets = ints(batch.targets);
    EXPECT_EQ(replica.step(tokens.data(), targets.data()).loss, alone.step(tokens.data(), targets.data()).loss) << step;
  }
  // In order, the sums are time the step spends; overlapped, only what backward did not hide,
  // which may round to nothing, so only the in-order step's time is asserted.
  if (!GetParam()) {
    EXPECT_GT(replica.last_parts().sync_ms, 0);
  }
  EXPECT_EQ(sync.calls, steps * (c.layers + 3));  // ln_f, each block, the two tables
  EXPECT_EQ(sync.elements, steps * (fast::parameter_elements(shape) - fast::parameter_layout(shape)[1].offset +
                                    shape.padded_vocabulary() * shape.hidden));
  for (const fast::ParameterSlot& slot : fast::parameter_layout(shape)) {
    EXPECT_TRUE(replica.parameter(slot.name) == alone.parameter(slot.name)) << slot.name;
    EXPECT_TRUE(replica.gradient(slot.name) == alone.gradient(slot.name)) << slot.name << ": the mean over replicas";
  }
}
INSTANTIATE_TEST_SUITE_P(Fast, FastSync, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "overlapping" : "in_order"; });

TEST_F(FastDevice, StepAllocatesNothing) {
  const model::GptConfig c = tiny_config();
  fast::Gpt gpt(shape_of(c, 4), fast::Storage::bfloat16, {}, 3);
  const model::Batch batch = model::gpt_batch(c, 0, 0, 4, 4);
  const auto tokens = ints(batch.inputs), targets = ints(batch.targets);
  gpt.step(tokens.data(), targets.data());  // cuBLASLt's plans are made on first use
  const std::size_t before = cuda::memory_info().free_bytes;
  for (int i = 0; i < 3; ++i) gpt.step(tokens.data(), targets.data());
  EXPECT_EQ(cuda::memory_info().free_bytes, before);
}

TEST_F(FastDevice, ProfiledStepSaysWhereTheTimeWent) {
  const model::GptConfig c = tiny_config();
  fast::Gpt gpt(shape_of(c, 4), fast::Storage::bfloat16, {}, 5);
  const model::Batch batch = model::gpt_batch(c, 0, 0, 4, 4);
  const auto tokens = ints(batch.inputs), targets = ints(batch.targets);
  gpt.set_profiling(true);
  const double loss = gpt.step(tokens.data(), targets.data()).loss;
  const fast::StepParts parts = gpt.last_parts();
  EXPECT_GT(parts.products_ms, 0);
  EXPECT_GT(parts.attention_ms, 0);
  EXPECT_GT(parts.layernorm_ms, 0);
  EXPECT_GT(parts.loss_ms, 0);
  EXPECT_GT(parts.embedding_ms, 0);
  EXPECT_GT(parts.optimizer_ms, 0);
  gpt.set_profiling(false);
  // The same step without events computes the same loss from the same (updated) state as a
  // second model that never profiled.
  fast::Gpt plain(shape_of(c, 4), fast::Storage::bfloat16, {}, 5);
  EXPECT_EQ(plain.step(tokens.data(), targets.data()).loss, loss);
}

TEST_F(FastDevice, RefusesTokensOutsideTheVocabulary) {
  const model::GptConfig c = tiny_config();
  fast::Gpt gpt(shape_of(c, 1), fast::Storage::bfloat16, {}, 3);
  std::vector<std::int32_t> tokens(64, 1), targets(64, 2);
  tokens[5] = 256;
  try {
    gpt.step(tokens.data(), targets.data());
    FAIL() << "a token outside the vocabulary was accepted";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("outside the vocabulary"), std::string::npos) << e.what();
  }
}

}  // namespace
