// Conformance of the CUDA ops (reference/ops/cuda.hpp): every op, in every storage type it
// supports, against the CPU op in float64 on the same input values. Outputs an op overwrites are
// poisoned on the device first (0xFF bytes, NaN in every floating type), so an element the op
// does not write fails; gradients an op accumulates into start from non-zero values. The ops are
// called through parity::ops, so the dispatch of device tensors is tested with them.
//
// The tests that run the device ops skip where no GPU is visible. The dropout mask's generator
// (a host-and-device port of Philox) and the refusal of host tensors are tested on the host.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "reference/core/buffer.hpp"
#include "reference/core/error.hpp"
#include "reference/cuda/device.hpp"
#include "reference/kernels/buffer_kernels.hpp"
#include "reference/model/optimizer.hpp"
#include "reference/ops/dropout_mask.hpp"
#include "reference/ops/ops.hpp"
#include "reference/ops/flops.hpp"
#include "reference/ops/routing.hpp"
#include "reference/tensor/random.hpp"
#include "reference/tensor/tensor.hpp"

using namespace parity;

// Helpers have internal linkage: test_units links several test files into one program.
namespace {

constexpr std::uint64_t kSeed = 20250321;
constexpr auto kCategory = MemoryCategory::activations;

// How every result here is judged:
//
//   relative error = max_i |device_i - reference_i| / max_i |reference_i|
//
// with the reference the CPU op in float64 on the same input values: inputs are drawn in
// float64 and rounded to the storage type before either side sees them, so the error is the
// device's arithmetic and the rounding of its result, nothing else. A NaN or infinity anywhere
// fails (the comparisons are written `error < bound`, false for NaN, and every element is
// checked finite).
//
// float32 arithmetic: 1e-5, about 168 unit roundoffs u = 2^-24. Every output in these tests is
// at most three chained reductions of at most 64 terms (the sizes keep to this). A reduction of
// n terms errs by at most gamma_n ~ n u relative to the sum of its terms' magnitudes (Higham,
// Accuracy and Stability of Numerical Algorithms, 3.1): 64 u for one stage of 64 terms in the
// worst case; the errors of real sums grow like sqrt(n) u (Higham and Mary 2019), 3 * 8 u = 24 u
// for three stages. 168 u covers the worst case of one stage and the expected case of three
// with a margin of 7, and the few ulps of the device's exp and log; it is a tenth of 1e-4.
constexpr double kFloat32Bound = 1e-5;
// float64 arithmetic: the same count of its unit roundoff (2^-53), about 1.9e-14.
// 16-bit storage (float32 arithmetic): the float32 bound plus 2 u of the 16-bit type: u for the
// one rounding of the result, and u more where the reference is itself rounded to 16 bits (the
// optimizer with 16-bit parameters, whose CPU loop is the reference: the two may round one
// element to neighbours, one ulp = 2u apart). bfloat16: 7.8e-3, under 1e-2; float16: 9.9e-4.
double arithmetic_bound(DataType storage) {
  if (storage == DataType::float64)
    return kFloat32Bound * unit_roundoff(DataType::float64) / unit_roundoff(DataType::float32);
  return kFloat32Bound;
}
double bound_for(DataType storage) {
  return arithmetic_bound(storage) + (is_half(storage) ? 2 * unit_roundoff(storage) : 0.0);
}

// A float64 copy of `t` with every value rounded to `dtype` (host tensors).
Tensor rounded(const Tensor& t, DataType dtype) {
  Tensor out = t.clone(t.name(), kCategory);
  if (dtype != DataType::float64) copy_into(out, cast(t, dtype, t.name() + ".rounded", kCategory));
  return out;
}

// Host float64 values N(mean, stddev), a pure function of the name, exact in `dtype`.
Tensor values(const std::string& name, Shape shape, DataType dtype, double mean = 0, double stddev = 1) {
  Tensor t = Tensor::empty(name, std::move(shape), DataType::float64, kCategory);
  initialize(t, Init::normal(mean, stddev), kSeed);
  return rounded(t, dtype);
}

Tensor indices(const std::string& name, Shape shape, std::int64_t limit, DataType dtype) {
  Tensor t = Tensor::empty(name, std::move(shape), dtype, kCategory);
  initialize(t, Init::tokens(limit), kSeed);
  return t;
}

// A host float64 output for the reference, NaN until written.
Tensor host_output(const std::string& name, Shape shape, DataType dtype = DataType::float64) {
  Tensor t = Tensor::empty(name, std::move(shape), dtype, kCategory);
  t.fill(std::numeric_limits<double>::quiet_NaN());
  return t;
}

// A device copy of a host tensor, in `dtype`.
Tensor device_copy(const Tensor& host, DataType dtype) {
  return cast(host, dtype, host.name() + ".cast", kCategory).to(MemorySpace::cuda, host.name() + ".device", kCategory);
}

// A device output filled with 0xFF bytes: NaN in every floating type.
Tensor poisoned(const std::string& name, Shape shape, DataType dtype) {
  Tensor t = Tensor::empty(name + ".device", std::move(shape), dtype, kCategory, MemorySpace::cuda);
  cuda::poison(t.raw(), t.bytes());
  return t;
}

void expect_close(const Tensor& device, const Tensor& reference, double bound, const std::string& what) {
  ASSERT_EQ(device.numel(), reference.numel()) << what;
  const std::vector<double> got = device.to_vector(), want = reference.to_vector();
  double max_difference = 0, max_reference = 0;
  std::int64_t not_finite = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i])) ++not_finite;
    max_difference = std::max(max_difference, std::abs(got[i] - want[i]));
    max_reference = std::max(max_reference, std::abs(want[i]));
  }
  const double error = not_finite ? std::numeric_limits<double>::quiet_NaN() : max_difference / max_reference;
  EXPECT_EQ(not_finite, 0) << what << ": elements not finite (an unwritten output stays NaN)";
  EXPECT_TRUE(error < bound) << what << ": relative error " << error << " is not under " << bound;
}

void expect_close(double device, double reference, double bound, const std::string& what) {
  const double error = std::abs(device - reference) / std::abs(reference);
  EXPECT_TRUE(std::isfinite(device)) << what << ": " << device;
  EXPECT_TRUE(error < bound) << what << ": " << device << " against " << reference << ", relative error " << error
                             << " is not under " << bound;
}

void expect_error_containing(const std::function<void()>& call, const std::string& text) {
  try {
    call();
    ADD_FAILURE() << "no error; expected one containing \"" << text << "\"";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not a parity::Error: " << e.what();
  }
}

// Runs the device ops; skips where there is no GPU to run them on.
class CudaDevice : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda::compiled_with_cuda()) GTEST_SKIP() << "this parity was built without CUDA: there are no device ops to run";
    if (cuda::devices().empty())
      GTEST_SKIP() << "no CUDA GPU visible (no driver or no device): the device ops are compiled but not run here";
    static const bool selected = [] {
      cuda::select_device(0);
      return true;
    }();
    (void)selected;
  }
};

// The same, once per storage type.
class CudaOps : public CudaDevice, public ::testing::WithParamInterface<DataType> {};

std::string type_name(const ::testing::TestParamInfo<DataType>& info) { return std::string(name_of(info.param)); }

}  // namespace

INSTANTIATE_TEST_SUITE_P(Types, CudaOps,
                         ::testing::Values(DataType::float64, DataType::float32, DataType::bfloat16, DataType::float16),
                         type_name);

// ---- Tests that run on the host ------------------------------------------------------------------

// The dropout mask on the device is drawn by device::philox_uniform_open, compiled for host and
// device from one definition: equal to parity::uniform_open here means the same mask there.
TEST(CudaOpsHost, PhiloxPortMatchesTheCpuGenerator) {
  const std::uint64_t seeds[] = {0, 1, kSeed, 0xDEADBEEF12345678ull, ~0ull};
  const std::uint64_t streams[] = {0, 7, tensor_id("block.0.attention.dropout"), ~0ull};
  const std::uint64_t elements[] = {0, 1, 2, 3, 1000, 0xFFFFFFFFull, 0x100000000ull, (1ull << 40) + 7, ~0ull};
  for (auto seed : seeds)
    for (auto stream : streams)
      for (auto i : elements) {
        EXPECT_EQ(ops::device::philox_uniform_open(seed, stream, i), uniform_open(seed, stream, i))
            << "seed " << seed << ", stream " << stream << ", element " << i;
        const PhiloxCounter cpu = element_words(seed, stream, i);
        const ops::device::PhiloxWords port = ops::device::philox4x32_10(
            {{static_cast<std::uint32_t>(i), static_cast<std::uint32_t>(i >> 32), static_cast<std::uint32_t>(stream),
              static_cast<std::uint32_t>(stream >> 32)}},
            static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32));
        for (int w = 0; w < 4; ++w) EXPECT_EQ(port.w[w], cpu[static_cast<std::size_t>(w)]) << "word " << w;
      }
}

TEST(CudaOpsHost, DropoutMaskMatchesTheCpuMask) {
  const std::int64_t n = 4096;
  Tensor ones = Tensor::empty("ones", {n}, DataType::float64, kCategory);
  ones.fill(1.0);
  for (double p : {0.0, 0.1, 0.5, 0.9}) {
    const ops::DropoutKey key{kSeed, tensor_id("dropout.mask"), 12345};
    Tensor y = host_output("y", {n});
    ops::dropout_forward(ones, p, key, y);
    std::int64_t mismatches = 0, kept = 0;
    for (std::int64_t i = 0; i < n; ++i) {
      const bool cpu_keeps = y.at(i) != 0;
      kept += cpu_keeps;
      const std::uint64_t element = key.first_element + static_cast<std::uint64_t>(i);
      mismatches += cpu_keeps != ops::device::dropout_keeps(p, key.seed, key.stream, element);
    }
    EXPECT_EQ(mismatches, 0) << "p = " << p;
    if (p == 0) {
      EXPECT_EQ(kept, n);
    }
    if (p == 0.5) {
      EXPECT_TRUE(kept > 0 && kept < n) << "the mask should keep some and drop some";
    }
  }
}

TEST(CudaOpsHost, Tf32IsOffUnlessAskedFor) {
  EXPECT_FALSE(ops::tf32());
  ops::set_tf32(true);
  EXPECT_TRUE(ops::tf32());
  ops::set_tf32(false);
  EXPECT_FALSE(ops::tf32());
}

// ---- Tests that run the device ops -----------------------------------------------------------------

TEST_P(CudaOps, Matmul) {
  const DataType dt = GetParam();
  const std::int64_t m = 5, n = 7, k = 48;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (bool accumulate : {false, true}) {
        const std::string what = std::string("matmul") + (ta ? " a^T" : " a") + (tb ? " b^T" : " b") +
                                 (accumulate ? " accumulate" : "") + " " + std::string(name_of(dt));
        const Tensor a = values("mm.a", ta ? Shape{k, m} : Shape{m, k}, dt);
        const Tensor b = values("mm.b", tb ? Shape{n, k} : Shape{k, n}, dt);
        const Tensor c0 = values("mm.c", {m, n}, dt);
        Tensor reference = c0.clone("mm.reference", kCategory);
        ops::matmul(a, ta, b, tb, reference, accumulate);
        Tensor c = accumulate ? device_copy(c0, dt) : poisoned("mm.c", {m, n}, dt);
        const Tensor da = device_copy(a, dt), db = device_copy(b, dt);
        const ops::FlopScope flops;
        ops::matmul(da, ta, db, tb, c, accumulate);
        EXPECT_EQ(flops.matmul(), 2 * m * n * k) << what;
        expect_close(c, reference, bound_for(dt), what);
      }
}

TEST_F(CudaDevice, MatmulWithTf32StaysNearFloat32) {
  // TF32 rounds the inputs to 10-bit mantissas (u = 2^-11): two operands per product, so about
  // 2 u relative to the terms; 5e-3 leaves room for the 48-term sums.
  const Tensor a = values("tf32.a", {16, 48}, DataType::float32), b = values("tf32.b", {48, 24}, DataType::float32);
  Tensor reference = host_output("tf32.reference", {16, 24});
  ops::matmul(a, false, b, false, reference, false);
  Tensor c = poisoned("tf32.c", {16, 24}, DataType::float32);
  ops::set_tf32(true);
  ops::matmul(device_copy(a, DataType::float32), false, device_copy(b, DataType::float32), false, c, false);
  ops::set_tf32(false);
  expect_close(c, reference, 5e-3, "matmul with TF32");
}

TEST_P(CudaOps, Linear) {
  const DataType dt = GetParam();
  const std::int64_t in = 16, out = 12;
  const Tensor x = values("lin.x", {2, 3, in}, dt), w = values("lin.w", {in, out}, dt, 0, 0.3);
  const Tensor bias = values("lin.bias", {out}, dt), dy = values("lin.dy", {2, 3, out}, dt);
  const Tensor dw0 = values("lin.dw0", {in, out}, dt), dbias0 = values("lin.dbias0", {out}, dt);
  const double bound = bound_for(dt);
  for (bool with_bias : {true, false}) {
    Tensor y_ref = host_output("lin.y", {2, 3, out});
    ops::linear_forward(x, w, with_bias ? bias : Tensor{}, y_ref);
    Tensor y = poisoned("lin.y", {2, 3, out}, dt);
    ops::linear_forward(device_copy(x, dt), device_copy(w, dt), with_bias ? device_copy(bias, dt) : Tensor{}, y);
    expect_close(y, y_ref, bound, with_bias ? "linear_forward y" : "linear_forward y without bias");
  }
  Tensor dx_ref = host_output("lin.dx", {2, 3, in});
  Tensor dw_ref = dw0.clone("lin.dw", kCategory), dbias_ref = dbias0.clone("lin.dbias", kCategory);
  ops::linear_backward(dy, x, w, dx_ref, dw_ref, dbias_ref);
  Tensor dx = poisoned("lin.dx", {2, 3, in}, dt), dw = device_copy(dw0, dt), dbias = device_copy(dbias0, dt);
  ops::linear_backward(device_copy(dy, dt), device_copy(x, dt), device_copy(w, dt), dx, dw, dbias);
  expect_close(dx, dx_ref, bound, "linear_backward dx");
  expect_close(dw, dw_ref, bound, "linear_backward dw (+=)");
  expect_close(dbias, dbias_ref, bound, "linear_backward dbias (+=)");
}

TEST_P(CudaOps, Gelu) {
  const DataType dt = GetParam();
  const Tensor x = values("gelu.x", {4, 33}, dt, 0, 2), dy = values("gelu.dy", {4, 33}, dt);
  Tensor y_ref = host_output("gelu.y", {4, 33}), dx_ref = host_output("gelu.dx", {4, 33});
  ops::gelu_forward(x, y_ref);
  ops::gelu_backward(dy, x, dx_ref);
  Tensor y = poisoned("gelu.y", {4, 33}, dt), dx = poisoned("gelu.dx", {4, 33}, dt);
  const Tensor dev_x = device_copy(x, dt);
  ops::gelu_forward(dev_x, y);
  ops::gelu_backward(device_copy(dy, dt), dev_x, dx);
  expect_close(y, y_ref, bound_for(dt), "gelu_forward");
  expect_close(dx, dx_ref, bound_for(dt), "gelu_backward");
}

// The mixture-of-experts row ops on a routing that drops choices (tokens no expert took get a
// zero row): gather, combine and their backward against the CPU ops. Each token sums at most k =
// 2 rows in a fixed order, so the float32 bound is far from reached; every output is overwritten
// and starts poisoned.
TEST_P(CudaOps, RowGatherAndCombine) {
  const DataType dt = GetParam();
  const std::int64_t N = 37, E = 5, C = 19;
  const Tensor logits = values("rows.logits", {N, E}, DataType::float64);
  std::vector<double> probabilities = logits.to_vector();
  for (std::int64_t n = 0; n < N; ++n) {  // a softmax per token, on the host
    double sum = 0;
    for (std::int64_t e = 0; e < E; ++e) sum += probabilities[static_cast<std::size_t>(n * E + e)] =
                                               std::exp(probabilities[static_cast<std::size_t>(n * E + e)]);
    for (std::int64_t e = 0; e < E; ++e) probabilities[static_cast<std::size_t>(n * E + e)] /= sum;
  }
  const ops::Routing routing = ops::route(probabilities, N, E, {ops::RouterKind::top_k, 2, 0.4});
  ASSERT_GT(routing.unrouted_tokens(), 0) << "some token must lose all its choices, to test the zero rows";
  const std::int64_t A = routing.assignments();
  const std::vector<double> gate_values = ops::routing_gates(probabilities, routing);
  Tensor gates = Tensor::empty("rows.gates", {A}, DataType::float64, kCategory);
  std::copy(gate_values.begin(), gate_values.end(), gates.data<double>());
  gates = rounded(gates, dt);
  const Tensor x = values("rows.x", {N, C}, dt), dy_rows = values("rows.dy_rows", {A, C}, dt),
               dy = values("rows.dy", {N, C}, dt);
  const ops::RowMap host_map = ops::row_map(routing, MemorySpace::host);
  const ops::RowMap device_map = ops::row_map(routing, MemorySpace::cuda);

  Tensor rows_ref = host_output("rows.rows", {A, C}), dx_ref = host_output("rows.dx", {N, C});
  Tensor y_ref = host_output("rows.y", {N, C}), drows_ref = host_output("rows.drows", {A, C}),
         dgates_ref = host_output("rows.dgates", {A});
  ops::gather_rows_forward(x, host_map, rows_ref);
  ops::gather_rows_backward(dy_rows, host_map, dx_ref);
  ops::combine_rows_forward(dy_rows, gates, host_map, y_ref);
  ops::combine_rows_backward(dy, dy_rows, gates, host_map, drows_ref, dgates_ref);

  Tensor rows = poisoned("rows.rows", {A, C}, dt), dx = poisoned("rows.dx", {N, C}, dt);
  Tensor y = poisoned("rows.y", {N, C}, dt), drows = poisoned("rows.drows", {A, C}, dt),
         dgates = poisoned("rows.dgates", {A}, dt);
  const Tensor dev_rows = device_copy(dy_rows, dt), dev_gates = device_copy(gates, dt);
  ops::gather_rows_forward(device_copy(x, dt), device_map, rows);
  ops::gather_rows_backward(dev_rows, device_map, dx);
  ops::combine_rows_forward(dev_rows, dev_gates, device_map, y);
  ops::combine_rows_backward(device_copy(dy, dt), dev_rows, dev_gates, device_map, drows, dgates);
  expect_close(rows, rows_ref, bound_for(dt), "gather_rows_forward");
  expect_close(dx, dx_ref, bound_for(dt), "gather_rows_backward");
  expect_close(y, y_ref, bound_for(dt), "combine_rows_forward");
  expect_close(drows, drows_ref, bound_for(dt), "combine_rows_backward (rows)");
  expect_close(dgates, dgates_ref, bound_for(dt), "combine_rows_backward (gates)");
  // Tokens no expert took: exactly zero rows out of both sums.
  const std::vector<double> y_host = y.to_vector(), dx_host = dx.to_vector();
  const std::vector<std::uint8_t> routed = routing.routed_tokens();
  for (std::int64_t n = 0; n < N; ++n)
    if (!routed[static_cast<std::size_t>(n)])
      for (std::int64_t c = 0; c < C; ++c) {
        EXPECT_EQ(y_host[static_cast<std::size_t>(n * C + c)], 0.0) << "token " << n;
        EXPECT_EQ(dx_host[static_cast<std::size_t>(n * C + c)], 0.0) << "token " << n;
      }
}

TEST_P(CudaOps, AddAndAccumulate) {
  const DataType dt = GetParam();
  const Tensor a = values("add.a", {3, 50}, dt), b = values("add.b", {3, 50}, dt);
  Tensor reference = host_output("add.y", {3, 50});
  ops::add_forward(a, b, reference);
  Tensor y = poisoned("add.y", {3, 50}, dt);
  ops::add_forward(device_copy(a, dt), device_copy(b, dt), y);
  expect_close(y, reference, bound_for(dt), "add_forward");
  Tensor sum = device_copy(a, dt);
  ops::accumulate(sum, device_copy(b, dt));
  expect_close(sum, reference, bound_for(dt), "accumulate");
}

TEST_P(CudaOps, LayerNorm) {
  const DataType dt = GetParam();
  const DataType stat = dt == DataType::float64 ? DataType::float64 : DataType::float32;
  const std::int64_t n = 6, c = 32;
  const Tensor x = values("ln.x", {2, 3, c}, dt, 0.5, 1.5);
  const Tensor gamma = values("ln.gamma", {c}, dt, 1, 0.5), beta = values("ln.beta", {c}, dt);
  Tensor y_ref = host_output("ln.y", {2, 3, c}), mean_ref = host_output("ln.mean", {n}),
         rstd_ref = host_output("ln.rstd", {n});
  ops::layernorm_forward(x, gamma, beta, y_ref, mean_ref, rstd_ref);
  Tensor y = poisoned("ln.y", {2, 3, c}, dt), mean = poisoned("ln.mean", {n}, stat), rstd = poisoned("ln.rstd", {n}, stat);
  const Tensor dev_x = device_copy(x, dt), dev_gamma = device_copy(gamma, dt);
  ops::layernorm_forward(dev_x, dev_gamma, device_copy(beta, dt), y, mean, rstd);
  expect_close(y, y_ref, bound_for(dt), "layernorm_forward y");
  expect_close(mean, mean_ref, arithmetic_bound(dt), "layernorm_forward mean");
  expect_close(rstd, rstd_ref, arithmetic_bound(dt), "layernorm_forward rstd");

  // Backward from the statistics rounded to their type, the same on both sides.
  const Tensor mean_in = rounded(mean_ref, stat), rstd_in = rounded(rstd_ref, stat);
  const Tensor dy = values("ln.dy", {2, 3, c}, dt);
  const Tensor dgamma0 = values("ln.dgamma0", {c}, dt), dbeta0 = values("ln.dbeta0", {c}, dt);
  Tensor dx_ref = host_output("ln.dx", {2, 3, c});
  Tensor dgamma_ref = dgamma0.clone("ln.dgamma", kCategory), dbeta_ref = dbeta0.clone("ln.dbeta", kCategory);
  ops::layernorm_backward(dy, x, gamma, mean_in, rstd_in, dx_ref, dgamma_ref, dbeta_ref);
  Tensor dx = poisoned("ln.dx", {2, 3, c}, dt), dgamma = device_copy(dgamma0, dt), dbeta = device_copy(dbeta0, dt);
  ops::layernorm_backward(device_copy(dy, dt), dev_x, dev_gamma, device_copy(mean_in, stat), device_copy(rstd_in, stat),
                          dx, dgamma, dbeta);
  expect_close(dx, dx_ref, bound_for(dt), "layernorm_backward dx");
  expect_close(dgamma, dgamma_ref, bound_for(dt), "layernorm_backward dgamma (+=)");
  expect_close(dbeta, dbeta_ref, bound_for(dt), "layernorm_backward dbeta (+=)");
}

TEST_P(CudaOps, Softmax) {
  const DataType dt = GetParam();
  const Tensor x = values("softmax.x", {6, 40}, dt, 0, 2);
  Tensor y_ref = host_output("softmax.y", {6, 40});
  ops::softmax_forward(x, y_ref);
  Tensor y = poisoned("softmax.y", {6, 40}, dt);
  ops::softmax_forward(device_copy(x, dt), y);
  expect_close(y, y_ref, bound_for(dt), "softmax_forward");

  const Tensor y_in = rounded(y_ref, dt), dy = values("softmax.dy", {6, 40}, dt);
  Tensor dx_ref = host_output("softmax.dx", {6, 40});
  ops::softmax_backward(dy, y_in, dx_ref);
  Tensor dx = poisoned("softmax.dx", {6, 40}, dt);
  ops::softmax_backward(device_copy(dy, dt), device_copy(y_in, dt), dx);
  expect_close(dx, dx_ref, bound_for(dt), "softmax_backward");
}

// In 16 bits the op widens its inputs to float32 on the device, runs the float32 kernels and
// rounds each result once (reference/ops/cpu.cpp), as on the CPU.
TEST_P(CudaOps, Attention) {
  const DataType dt = GetParam();
  const std::int64_t B = 2, T = 12, C = 16;
  const int H = 2;
  for (bool causal : {false, true}) {
    const std::string what = std::string("attention") + (causal ? " causal" : "");
    const Tensor qkv = values("attn.qkv", {B, T, 3 * C}, dt);
    Tensor out_ref = host_output("attn.out", {B, T, C}), probs_ref = host_output("attn.probs", {B, H, T, T});
    ops::attention_forward(qkv, H, causal, out_ref, probs_ref);
    Tensor out = poisoned("attn.out", {B, T, C}, dt), probs = poisoned("attn.probs", {B, H, T, T}, dt);
    const Tensor dev_qkv = device_copy(qkv, dt);
    const ops::FlopScope flops;
    ops::attention_forward(dev_qkv, H, causal, out, probs);
    EXPECT_EQ(flops.matmul(), 2 * 2 * B * T * T * C) << what << ": the FLOPs of the two products, as on the CPU";
    expect_close(out, out_ref, bound_for(dt), what + " out");
    expect_close(probs, probs_ref, bound_for(dt), what + " probs");

    const Tensor probs_in = rounded(probs_ref, dt), dout = values("attn.dout", {B, T, C}, dt);
    Tensor dqkv_ref = host_output("attn.dqkv", {B, T, 3 * C});
    ops::attention_backward(dout, qkv, probs_in, H, dqkv_ref);
    Tensor dqkv = poisoned("attn.dqkv", {B, T, 3 * C}, dt);
    ops::attention_backward(device_copy(dout, dt), dev_qkv, device_copy(probs_in, dt), H, dqkv);
    expect_close(dqkv, dqkv_ref, bound_for(dt), what + " dqkv");
  }
}

TEST_P(CudaOps, Embedding) {
  const DataType dt = GetParam();
  const std::int64_t V = 10, B = 3, T = 5, C = 8, T_max = 7;
  for (DataType index_type : {DataType::int32, DataType::int64})
    for (bool positions : {true, false}) {
      const std::string what = std::string("embedding, ") + std::string(name_of(index_type)) + " tokens" +
                               (positions ? ", with positions" : "");
      const Tensor tokens = indices("emb.tokens", {B, T}, V, index_type);  // 15 tokens of 10: some repeat
      const Tensor wte = values("emb.wte", {V, C}, dt), wpe = positions ? values("emb.wpe", {T_max, C}, dt) : Tensor{};
      const Tensor dev_tokens = tokens.to(MemorySpace::cuda, "emb.tokens.device", kCategory);
      Tensor y_ref = host_output("emb.y", {B, T, C});
      ops::embedding_forward(tokens, wte, wpe, y_ref);
      Tensor y = poisoned("emb.y", {B, T, C}, dt);
      ops::embedding_forward(dev_tokens, device_copy(wte, dt), positions ? device_copy(wpe, dt) : Tensor{}, y);
      expect_close(y, y_ref, bound_for(dt), what + ": forward");

      const Tensor dy = values("emb.dy", {B, T, C}, dt);
      const Tensor dwte0 = values("emb.dwte0", {V, C}, dt), dwpe0 = values("emb.dwpe0", {T_max, C}, dt);
      Tensor dwte_ref = dwte0.clone("emb.dwte", kCategory);
      Tensor dwpe_ref = positions ? dwpe0.clone("emb.dwpe", kCategory) : Tensor{};
      ops::embedding_backward(dy, tokens, dwte_ref, dwpe_ref);
      Tensor dwte = device_copy(dwte0, dt), dwpe = positions ? device_copy(dwpe0, dt) : Tensor{};
      ops::embedding_backward(device_copy(dy, dt), dev_tokens, dwte, dwpe);
      expect_close(dwte, dwte_ref, bound_for(dt), what + ": dwte (+=)");
      if (positions) expect_close(dwpe, dwpe_ref, bound_for(dt), what + ": dwpe (+=)");
    }
}

TEST_F(CudaDevice, EmbeddingRefusesTokensOutsideTheVocabulary) {
  const DataType dt = DataType::float32;
  Tensor tokens = indices("emb.bad", {2, 4}, 10, DataType::int64);
  tokens.set(6, 10);
  Tensor y = poisoned("emb.y", {2, 4, 3}, dt);
  const Tensor wte = device_copy(values("emb.wte", {10, 3}, dt), dt);
  expect_error_containing(
      [&] { ops::embedding_forward(tokens.to(MemorySpace::cuda, "emb.bad", kCategory), wte, Tensor{}, y); },
      "embedding_forward: token 10 at position 6");
}

TEST_P(CudaOps, CrossEntropy) {
  const DataType dt = GetParam();
  const std::int64_t n = 6, classes = 20;
  const Tensor logits = values("ce.logits", {n, classes}, dt, 0, 2);
  for (DataType index_type : {DataType::int32, DataType::int64})
    for (double normalizer : {6.0, 24.0}) {
      const std::string what = "cross_entropy, " + std::string(name_of(index_type)) + " targets, normalizer " +
                               std::to_string(normalizer);
      const Tensor targets = indices("ce.targets", {n}, classes, index_type);
      Tensor dlogits_ref = host_output("ce.dlogits", {n, classes});
      const double loss_ref = ops::cross_entropy_backward(logits, targets, normalizer, dlogits_ref);
      const Tensor dev_logits = device_copy(logits, dt);
      const Tensor dev_targets = targets.to(MemorySpace::cuda, "ce.targets.device", kCategory);
      Tensor dlogits = poisoned("ce.dlogits", {n, classes}, dt);
      const double loss = ops::cross_entropy_forward(dev_logits, dev_targets, normalizer);
      const double loss_backward = ops::cross_entropy_backward(dev_logits, dev_targets, normalizer, dlogits);
      // The loss is computed in the arithmetic type and summed in float64: no 16-bit rounding.
      expect_close(loss, loss_ref, arithmetic_bound(dt), what + ": forward loss");
      EXPECT_EQ(loss_backward, loss) << what << ": backward returns the forward's loss";
      expect_close(dlogits, dlogits_ref, bound_for(dt), what + ": dlogits");
    }
}

TEST_F(CudaDevice, CrossEntropyRefusesTargetsOutsideTheClasses) {
  const DataType dt = DataType::float32;
  Tensor targets = indices("ce.bad", {4}, 5, DataType::int32);
  targets.set(3, 5);
  const Tensor logits = device_copy(values("ce.logits", {4, 5}, dt), dt);
  expect_error_containing(
      [&] { ops::cross_entropy_forward(logits, targets.to(MemorySpace::cuda, "ce.bad", kCategory), 4); },
      "cross_entropy_forward: target 5 at row 3");
}

TEST_P(CudaOps, VocabularyShards) {
  const DataType dt = GetParam();
  const std::int64_t V = 12, first = 4, shard = 5, B = 3, T = 5, C = 8, n = B * T;
  const Tensor tokens = indices("vs.tokens", {B, T}, V, DataType::int32);  // some inside [4, 9), some not
  const Tensor dev_tokens = tokens.to(MemorySpace::cuda, "vs.tokens.device", kCategory);
  const Tensor wte = values("vs.wte", {shard, C}, dt);
  Tensor y_ref = host_output("vs.y", {B, T, C});
  ops::embedding_shard_forward(tokens, wte, first, V, y_ref);
  Tensor y = poisoned("vs.y", {B, T, C}, dt);
  ops::embedding_shard_forward(dev_tokens, device_copy(wte, dt), first, V, y);
  expect_close(y, y_ref, bound_for(dt), "embedding shard: forward");
  const Tensor dy = values("vs.dy", {B, T, C}, dt), dwte0 = values("vs.dwte0", {shard, C}, dt);
  Tensor dwte_ref = dwte0.clone("vs.dwte", kCategory);
  ops::embedding_shard_backward(dy, tokens, first, dwte_ref);
  Tensor dwte = device_copy(dwte0, dt);
  ops::embedding_shard_backward(device_copy(dy, dt), dev_tokens, first, dwte);
  expect_close(dwte, dwte_ref, bound_for(dt), "embedding shard: dwte (+=)");

  // Cross-entropy statistics and gradient of one shard of the classes.
  const DataType stat = dt == DataType::float64 ? DataType::float64 : DataType::float32;
  const Tensor logits = values("vs.logits", {n, shard}, dt, 0, 2);
  const Tensor targets = indices("vs.targets", {n}, V, DataType::int64);
  const Tensor dev_logits = device_copy(logits, dt), dev_targets = targets.to(MemorySpace::cuda, "vs.t", kCategory);
  Tensor max_ref = host_output("vs.max", {n}), sum_ref = host_output("vs.sum", {n}), z_ref = host_output("vs.z", {n});
  ops::cross_entropy_shard_max(logits, max_ref);
  ops::cross_entropy_shard_sums(logits, targets, first, V, max_ref, sum_ref, z_ref);
  Tensor row_max = poisoned("vs.max", {n}, stat), sums = poisoned("vs.sum", {n}, stat), z = poisoned("vs.z", {n}, stat);
  ops::cross_entropy_shard_max(dev_logits, row_max);
  ops::cross_entropy_shard_sums(dev_logits, dev_targets, first, V, row_max, sums, z);
  expect_close(row_max, max_ref, arithmetic_bound(dt), "cross-entropy shard: row maxima");
  expect_close(sums, sum_ref, arithmetic_bound(dt), "cross-entropy shard: sums of exponentials");
  expect_close(z, z_ref, arithmetic_bound(dt), "cross-entropy shard: target logits");
  Tensor d_ref = host_output("vs.d", {n, shard});
  ops::cross_entropy_shard_backward(logits, targets, first, max_ref, sum_ref, 30.0, d_ref);
  Tensor d = poisoned("vs.d", {n, shard}, dt);
  ops::cross_entropy_shard_backward(dev_logits, dev_targets, first, row_max, sums, 30.0, d);
  expect_close(d, d_ref, bound_for(dt), "cross-entropy shard: dlogits");
}

TEST_P(CudaOps, MeanSquaredError) {
  const DataType dt = GetParam();
  const Tensor p = values("mse.p", {5, 9}, dt), t = values("mse.t", {5, 9}, dt);
  for (double normalizer : {45.0, 7.0}) {
    const std::string what = "mse, normalizer " + std::to_string(normalizer);
    Tensor dp_ref = host_output("mse.dp", {5, 9});
    const double loss_ref = ops::mse_forward(p, t, normalizer);
    ops::mse_backward(p, t, normalizer, dp_ref);
    const Tensor dev_p = device_copy(p, dt), dev_t = device_copy(t, dt);
    Tensor dp = poisoned("mse.dp", {5, 9}, dt);
    const double loss = ops::mse_forward(dev_p, dev_t, normalizer);
    ops::mse_backward(dev_p, dev_t, normalizer, dp);
    expect_close(loss, loss_ref, arithmetic_bound(dt), what + ": loss");
    expect_close(dp, dp_ref, bound_for(dt), what + ": dprediction");
  }
}

TEST_P(CudaOps, Dropout) {
  const DataType dt = GetParam();
  const std::int64_t n = 7 * 37;
  const Tensor x = values("dropout.x", {7, 37}, dt);
  for (double p : {0.0, 0.3}) {
    const ops::DropoutKey key{kSeed + 1, tensor_id("dropout.test"), 1000};
    const std::string what = "dropout p = " + std::to_string(p);
    Tensor y_ref = host_output("dropout.y", {7, 37}), dx_ref = host_output("dropout.dx", {7, 37});
    ops::dropout_forward(x, p, key, y_ref);
    ops::dropout_backward(x, p, key, dx_ref);
    Tensor y = poisoned("dropout.y", {7, 37}, dt), dx = poisoned("dropout.dx", {7, 37}, dt);
    const Tensor dev_x = device_copy(x, dt);
    ops::dropout_forward(dev_x, p, key, y);
    ops::dropout_backward(dev_x, p, key, dx);
    for (const Tensor* got : {&y, &dx}) {
      const std::vector<double> device = got->to_vector(), reference = y_ref.to_vector();
      std::int64_t mismatches = 0;
      for (std::int64_t i = 0; i < n; ++i)
        mismatches += (device[static_cast<std::size_t>(i)] == 0) != (reference[static_cast<std::size_t>(i)] == 0);
      EXPECT_EQ(mismatches, 0) << what << ": the device mask differs from the CPU's at " << mismatches << " elements";
    }
    expect_close(y, y_ref, bound_for(dt), what + ": forward");
    expect_close(dx, dx_ref, bound_for(dt), what + ": backward");
  }
}

// Three steps of each optimizer on device tensors (through Sgd::update and AdamW::update) against
// the CPU loop: in float64 for float32/float64 parameters, and in the same types for 16-bit
// parameters (whose result the CPU loop rounds to 16 bits each step, as the device does).
TEST_P(CudaOps, OptimizerUpdates) {
  const DataType value_type = GetParam();
  const Shape shape{5, 13};
  for (DataType state_type : {DataType::float32, DataType::float64}) {
    const DataType ref_value = is_half(value_type) ? value_type : DataType::float64;
    const DataType ref_state = is_half(value_type) ? state_type : DataType::float64;
    const double bound = is_half(value_type) ? bound_for(value_type)
                         : value_type == DataType::float64 && state_type == DataType::float64
                             ? arithmetic_bound(DataType::float64)
                             : kFloat32Bound;
    struct Case {
      std::string name;
      std::function<std::unique_ptr<model::Optimizer>(DataType)> make;
    };
    const std::vector<Case> cases = {
        {"sgd with momentum and weight decay",
         [](DataType s) { return std::make_unique<model::Sgd>(model::SgdConfig{0.05, 0.9, 0.01}, s); }},
        {"plain sgd", [](DataType s) { return std::make_unique<model::Sgd>(model::SgdConfig{0.05, 0, 0}, s); }},
        {"adamw",
         [](DataType s) { return std::make_unique<model::AdamW>(model::AdamWConfig{1e-2, 0.9, 0.999, 1e-8, 0.01}, s); }},
    };
    for (const Case& c : cases) {
      const std::string what = c.name + ", " + std::string(name_of(value_type)) + " values, " +
                               std::string(name_of(state_type)) + " state";
      const auto reference = c.make(ref_state);
      const auto device = c.make(state_type);
      const Tensor value0 = values("opt.value", shape, value_type);
      Tensor ref = cast(value0, ref_value, "opt.value.reference", MemoryCategory::parameters);
      Tensor dev = device_copy(value0, value_type);
      std::vector<Tensor> ref_state_tensors, dev_state_tensors;
      for (int i = 0; i < reference->state_count(); ++i) {
        ref_state_tensors.push_back(Tensor::zeros("opt.state" + std::to_string(i), shape, ref_state,
                                                  MemoryCategory::optimizer_state));
        dev_state_tensors.push_back(Tensor::zeros("opt.state" + std::to_string(i), shape, state_type,
                                                  MemoryCategory::optimizer_state, MemorySpace::cuda));
      }
      for (std::int64_t step = 1; step <= 3; ++step) {
        const Tensor grad = values("opt.grad" + std::to_string(step), shape, value_type);
        reference->update(ref, cast(grad, ref_value, "opt.grad.reference", kCategory), ref_state_tensors, step);
        device->update(dev, device_copy(grad, value_type), dev_state_tensors, step);
      }
      expect_close(dev, ref, bound, what + ": parameters after 3 steps");
      for (std::size_t i = 0; i < dev_state_tensors.size(); ++i)
        expect_close(dev_state_tensors[i], ref_state_tensors[i], bound, what + ": state " + std::to_string(i));
    }
  }
}

TEST_F(CudaDevice, MixedSpacesAreRefused) {
  const Tensor x = device_copy(values("mixed.x", {4}, DataType::float32), DataType::float32);
  Tensor host_y = host_output("mixed.y", {4}, DataType::float32);
  expect_error_containing([&] { ops::gelu_forward(x, host_y); }, "gelu_forward: mixed.y [4] float32 is in host memory");
}

// The element-wise reduction the reference algorithms apply to received chunks runs on 16-byte
// vectors with scalar ends (reference/cuda/device.cu): at every length up to a few vectors and
// every element offset, in every type and operation, it must equal the host's reduction bit for
// bit (both combine in the same widened type and round once), and write no byte outside.
TEST_F(CudaDevice, ReduceMatchesTheHostAtEveryLengthAndOffset) {
  constexpr std::size_t kMax = 1027 + 8;  // the longest case plus the largest offset
  constexpr std::size_t kGuard = 8;
  for (DataType dtype : kAllDataTypes) {
    const std::size_t element = size_of(dtype);
    // Inputs: small integers and halves, exact in every type; products stay in range.
    HostBuffer wide_a(kMax, DataType::float64), wide_b(kMax, DataType::float64);
    for (std::size_t i = 0; i < kMax; ++i) {
      wide_a.view().as<double>()[i] = static_cast<double>(static_cast<int>((i * 7919) % 23) - 11) / (is_floating(dtype) ? 2 : 1);
      wide_b.view().as<double>()[i] = static_cast<double>(static_cast<int>((i * 104729) % 19) - 9) / (is_floating(dtype) ? 4 : 1);
    }
    HostBuffer a(kMax, dtype), b(kMax, dtype);
    convert_buffer(a.view(), wide_a.view());
    convert_buffer(b.view(), wide_b.view());
    const std::size_t bytes = (kMax + kGuard) * element;
    void* da = cuda::allocate(bytes);
    void* db = cuda::allocate(bytes);
    void* dout = cuda::allocate(bytes);
    cuda::copy(da, a.data(), kMax * element);
    cuda::copy(db, b.data(), kMax * element);
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::prod, ReduceOp::max, ReduceOp::min}) {
      for (std::size_t offset = 0; offset < 4; ++offset) {
        for (std::size_t count : {std::size_t{1}, std::size_t{2}, std::size_t{3}, std::size_t{5}, std::size_t{7},
                                  std::size_t{8}, std::size_t{9}, std::size_t{15}, std::size_t{16}, std::size_t{17},
                                  std::size_t{31}, std::size_t{33}, std::size_t{64}, std::size_t{1027}}) {
          const std::string what = std::string(name_of(dtype)) + " " + std::string(name_of(op)) + ", offset " +
                                   std::to_string(offset) + ", count " + std::to_string(count);
          HostBuffer want(kMax + kGuard, dtype), got(kMax + kGuard, dtype);
          std::memset(want.data(), 0xFF, want.view().bytes());
          reduce_to(want.view().slice(offset, count), a.view().slice(offset, count), b.view().slice(offset, count), op);
          cuda::poison(dout, bytes);
          const BufferView device_a{da, kMax, dtype, MemorySpace::cuda}, device_b{db, kMax, dtype, MemorySpace::cuda};
          const BufferView device_out{dout, kMax + kGuard, dtype, MemorySpace::cuda};
          reduce_to(device_out.slice(offset, count), device_a.slice(offset, count), device_b.slice(offset, count), op);
          cuda::copy(got.data(), dout, bytes);
          cuda::synchronize();
          ASSERT_EQ(std::memcmp(got.data(), want.data(), bytes), 0) << what;
        }
      }
    }
    cuda::release(da);
    cuda::release(db);
    cuda::release(dout);
  }
}
