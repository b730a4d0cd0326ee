// Conformance of the CUDA ops (reference/ops/units/): every op, in every storage type it
// supports, against the CPU op in float64 on the same input values, as rows of one table (the
// op and its sizes; each output judged by the bound of its kind below). Outputs an op overwrites
// are poisoned first (0xFF bytes, NaN in every floating type), so an element the op does not
// write fails; gradients an op accumulates into start from non-zero values. The ops are called
// through parity::ops, so the dispatch of device tensors is tested with them.
//
// The rows that run the device ops skip where no GPU is visible; the same rows run on the host
// in float32 (the CPU in float32 against the CPU in float64, under the same bounds), so the
// table itself is exercised everywhere. The dropout mask's generator (a host-and-device port of
// Philox) is tested on the host.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <ostream>
#include <sstream>
#include <string>
#include <tuple>
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

// An output filled with 0xFF bytes: NaN in every floating type.
Tensor poisoned(const std::string& name, Shape shape, DataType dtype, MemorySpace space = MemorySpace::cuda) {
  Tensor t = Tensor::empty(name + ".poisoned", std::move(shape), dtype, kCategory, space);
  if (space == MemorySpace::cuda)
    cuda::poison(t.raw(), t.bytes());
  else
    std::memset(t.raw(), 0xFF, t.bytes());
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

// Whether the device ops can run here: empty when they can (the device is selected once),
// else why not.
std::string why_no_device() {
  if (!cuda::compiled_with_cuda()) return "this parity was built without CUDA: there are no device ops to run";
  if (cuda::devices().empty())
    return "no CUDA GPU visible (no driver or no device): the device ops are compiled but not run here";
  static const bool selected = [] {
    cuda::select_device(0);
    return true;
  }();
  (void)selected;
  return "";
}

// Runs the device ops; skips where there is no GPU to run them on.
class CudaDevice : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const std::string why = why_no_device(); !why.empty()) GTEST_SKIP() << why;
  }
};

// The same, once per storage type.
class CudaOps : public CudaDevice, public ::testing::WithParamInterface<DataType> {};

std::string type_name(const ::testing::TestParamInfo<DataType>& info) { return std::string(name_of(info.param)); }

// ---- The ops against the CPU, as rows ---------------------------------------------------------

// "0.3", "24": a row's parameter in its name.
std::string number(double v) {
  std::ostringstream out;
  out << v;
  return out.str();
}

DataType statistic_type(DataType storage) {
  return storage == DataType::float64 ? DataType::float64 : DataType::float32;
}

// Where a row runs its op. The reference is the CPU op in float64 on the inputs rounded to the
// storage type; the op under test runs in the storage type in `space`: on the device, or on
// the host, where the float32 CPU ops put the rows themselves to work without a GPU.
struct Placement {
  DataType storage;
  MemorySpace space;
  bool reference;

  // An input, from host float64 values exact in the storage type (values()); `type` for an
  // input kept in another type (statistics).
  Tensor in(const Tensor& host) const { return in(host, storage); }
  Tensor in(const Tensor& host, DataType type) const {
    if (reference) return host;
    Tensor t = cast(host, type, host.name() + ".cast", kCategory);
    return space == MemorySpace::host ? t : t.to(space, host.name() + ".device", kCategory);
  }
  Tensor indices(const Tensor& host) const {
    return space == MemorySpace::host ? host : host.to(space, host.name() + ".device", kCategory);
  }
  // An output the op overwrites: NaN until written.
  Tensor out(const std::string& name, Shape shape) const { return out(name, std::move(shape), storage); }
  Tensor out(const std::string& name, Shape shape, DataType type) const {
    return reference ? host_output(name, std::move(shape)) : poisoned(name, std::move(shape), type, space);
  }
  // A row statistic: float64 for float64 storage, else float32.
  Tensor statistic(const std::string& name, Shape shape) const {
    return out(name, std::move(shape), statistic_type(storage));
  }
  // A gradient the op accumulates into (+=), from non-zero start values.
  Tensor accumulator(const Tensor& start) const { return reference ? start.clone(start.name(), kCategory) : in(start); }
};

// How an output is judged against the reference's: `storage` within bound_for (the arithmetic
// and the rounding of the result to the storage type); `arithmetic` within arithmetic_bound (a
// result kept in the arithmetic type: statistics, losses summed in float64); `exact` equal (FLOP
// counts); `mask` zero at the same elements (dropout's mask).
enum class Judge { storage, arithmetic, exact, mask };

struct Result {
  std::string name;
  Judge judge;
  Tensor tensor;     // undefined for a number
  double value = 0;  // a loss or a count
};
using Results = std::vector<Result>;

// One op on one set of sizes (the variant), run forward and backward where it has one.
struct DeviceRow {
  std::string op, variant;
  std::function<Results(const Placement&)> run;
};

const std::vector<DeviceRow>& device_rows() {
  static const std::vector<DeviceRow> rows = [] {
    std::vector<DeviceRow> r;
    using J = Judge;
    const std::int64_t m = 5, n = 7, k = 48;
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (bool accumulate : {false, true})
          r.push_back({"matmul",
                       std::string(ta ? "a^T" : "a") + (tb ? " b^T" : " b") + (accumulate ? " accumulate" : ""),
                       [=](const Placement& p) {
            const Tensor a = values("mm.a", ta ? Shape{k, m} : Shape{m, k}, p.storage);
            const Tensor b = values("mm.b", tb ? Shape{n, k} : Shape{k, n}, p.storage);
            Tensor c = accumulate ? p.accumulator(values("mm.c", {m, n}, p.storage)) : p.out("mm.c", {m, n});
            const Tensor pa = p.in(a), pb = p.in(b);
            const ops::FlopScope flops;
            ops::matmul(pa, ta, pb, tb, c, accumulate);
            return Results{{"c", J::storage, c}, {"FLOPs", J::exact, {}, static_cast<double>(flops.matmul())}};
          }});
    const std::int64_t in = 16, out = 12;
    for (bool with_bias : {true, false})
      r.push_back({"linear", with_bias ? "with bias, and backward" : "without bias", [=](const Placement& p) {
        const Tensor x = values("lin.x", {2, 3, in}, p.storage), w = values("lin.w", {in, out}, p.storage, 0, 0.3);
        Tensor y = p.out("lin.y", {2, 3, out});
        ops::linear_forward(p.in(x), p.in(w), with_bias ? p.in(values("lin.bias", {out}, p.storage)) : Tensor{}, y);
        if (!with_bias) return Results{{"linear_forward y without bias", J::storage, y}};
        Tensor dx = p.out("lin.dx", {2, 3, in});
        Tensor dw = p.accumulator(values("lin.dw0", {in, out}, p.storage));
        Tensor dbias = p.accumulator(values("lin.dbias0", {out}, p.storage));
        ops::linear_backward(p.in(values("lin.dy", {2, 3, out}, p.storage)), p.in(x), p.in(w), dx, dw, dbias);
        return Results{{"linear_forward y", J::storage, y}, {"linear_backward dx", J::storage, dx},
                       {"linear_backward dw (+=)", J::storage, dw}, {"linear_backward dbias (+=)", J::storage, dbias}};
      }});
    r.push_back({"gelu", "[4, 33]", [](const Placement& p) {
      const Tensor x = values("gelu.x", {4, 33}, p.storage, 0, 2), dy = values("gelu.dy", {4, 33}, p.storage);
      Tensor y = p.out("gelu.y", {4, 33}), dx = p.out("gelu.dx", {4, 33});
      ops::gelu_forward(p.in(x), y);
      ops::gelu_backward(p.in(dy), p.in(x), dx);
      return Results{{"gelu_forward", J::storage, y}, {"gelu_backward", J::storage, dx}};
    }});
    r.push_back({"add", "[3, 50], and accumulate", [](const Placement& p) {
      const Tensor a = values("add.a", {3, 50}, p.storage), b = values("add.b", {3, 50}, p.storage);
      Tensor y = p.out("add.y", {3, 50});
      ops::add_forward(p.in(a), p.in(b), y);
      Tensor sum = p.accumulator(a);
      ops::accumulate(sum, p.in(b));
      return Results{{"add_forward", J::storage, y}, {"accumulate", J::storage, sum}};
    }});
    // Backward from the CPU's float64 statistics rounded to their type (softmax: y; attention:
    // the probabilities), the same on both sides.
    r.push_back({"layernorm", "x [2, 3, 32]", [](const Placement& p) {
      const std::int64_t rows = 6, c = 32;
      const DataType stat = statistic_type(p.storage);
      const Tensor x = values("ln.x", {2, 3, c}, p.storage, 0.5, 1.5);
      const Tensor gamma = values("ln.gamma", {c}, p.storage, 1, 0.5), beta = values("ln.beta", {c}, p.storage);
      Tensor y = p.out("ln.y", {2, 3, c}), mean = p.statistic("ln.mean", {rows}), rstd = p.statistic("ln.rstd", {rows});
      ops::layernorm_forward(p.in(x), p.in(gamma), p.in(beta), y, mean, rstd);
      Tensor y64 = host_output("ln.y", {2, 3, c}), mean64 = host_output("ln.mean", {rows}),
             rstd64 = host_output("ln.rstd", {rows});
      ops::layernorm_forward(x, gamma, beta, y64, mean64, rstd64);
      Tensor dx = p.out("ln.dx", {2, 3, c});
      Tensor dgamma = p.accumulator(values("ln.dgamma0", {c}, p.storage));
      Tensor dbeta = p.accumulator(values("ln.dbeta0", {c}, p.storage));
      ops::layernorm_backward(p.in(values("ln.dy", {2, 3, c}, p.storage)), p.in(x), p.in(gamma),
                              p.in(rounded(mean64, stat), stat), p.in(rounded(rstd64, stat), stat), dx,
                              dgamma, dbeta);
      return Results{{"layernorm_forward y", J::storage, y},          {"layernorm_forward mean", J::arithmetic, mean},
                     {"layernorm_forward rstd", J::arithmetic, rstd}, {"layernorm_backward dx", J::storage, dx},
                     {"layernorm_backward dgamma (+=)", J::storage, dgamma},
                     {"layernorm_backward dbeta (+=)", J::storage, dbeta}};
    }});
    r.push_back({"softmax", "[6, 40]", [](const Placement& p) {
      const Tensor x = values("softmax.x", {6, 40}, p.storage, 0, 2);
      Tensor y = p.out("softmax.y", {6, 40}), dx = p.out("softmax.dx", {6, 40});
      ops::softmax_forward(p.in(x), y);
      Tensor y64 = host_output("softmax.y", {6, 40});
      ops::softmax_forward(x, y64);
      ops::softmax_backward(p.in(values("softmax.dy", {6, 40}, p.storage)), p.in(rounded(y64, p.storage)), dx);
      return Results{{"softmax_forward", J::storage, y}, {"softmax_backward", J::storage, dx}};
    }});
    // In 16 bits the op widens its inputs to float32, runs the float32 kernels and rounds each
    // result once (reference/ops/units/attention.cpp), as on the CPU; the FLOPs are the two
    // products', as on the CPU.
    for (bool causal : {false, true})
      r.push_back({"attention", causal ? "causal" : "not causal", [=](const Placement& p) {
        const std::int64_t B = 2, T = 12, C = 16;
        const int H = 2;
        const Tensor qkv = values("attn.qkv", {B, T, 3 * C}, p.storage);
        Tensor out = p.out("attn.out", {B, T, C}), probs = p.out("attn.probs", {B, H, T, T});
        const Tensor pqkv = p.in(qkv);
        const ops::FlopScope flops;
        ops::attention_forward(pqkv, H, causal, out, probs);
        const auto forward_flops = static_cast<double>(flops.matmul());
        Tensor out64 = host_output("attn.out", {B, T, C}), probs64 = host_output("attn.probs", {B, H, T, T});
        ops::attention_forward(qkv, H, causal, out64, probs64);
        Tensor dqkv = p.out("attn.dqkv", {B, T, 3 * C});
        ops::attention_backward(p.in(values("attn.dout", {B, T, C}, p.storage)), pqkv,
                                p.in(rounded(probs64, p.storage)), H, dqkv);
        return Results{{"out", J::storage, out}, {"probs", J::storage, probs},
                       {"forward FLOPs", J::exact, {}, forward_flops}, {"dqkv", J::storage, dqkv}};
      }});
    const std::int64_t V = 10, B = 3, T = 5, C = 8, T_max = 7;
    for (DataType index_type : {DataType::int32, DataType::int64})
      for (bool positions : {true, false})
        r.push_back({"embedding", std::string(name_of(index_type)) + " tokens" + (positions ? ", with positions" : ""),
                     [=](const Placement& p) {
          // 15 tokens of 10: some repeat.
          const Tensor tokens = p.indices(indices("emb.tokens", {B, T}, V, index_type));
          const Tensor wpe = positions ? p.in(values("emb.wpe", {T_max, C}, p.storage)) : Tensor{};
          Tensor y = p.out("emb.y", {B, T, C});
          ops::embedding_forward(tokens, p.in(values("emb.wte", {V, C}, p.storage)), wpe, y);
          Tensor dwte = p.accumulator(values("emb.dwte0", {V, C}, p.storage));
          Tensor dwpe = positions ? p.accumulator(values("emb.dwpe0", {T_max, C}, p.storage)) : Tensor{};
          ops::embedding_backward(p.in(values("emb.dy", {B, T, C}, p.storage)), tokens, dwte, dwpe);
          Results results{{"forward", J::storage, y}, {"dwte (+=)", J::storage, dwte}};
          if (positions) results.push_back({"dwpe (+=)", J::storage, dwpe});
          return results;
        }});
    for (DataType index_type : {DataType::int32, DataType::int64})
      for (double normalizer : {6.0, 24.0})
        r.push_back({"cross_entropy", std::string(name_of(index_type)) + " targets, normalizer " + number(normalizer),
                     [=](const Placement& p) {
          const std::int64_t rows = 6, classes = 20;
          const Tensor logits = p.in(values("ce.logits", {rows, classes}, p.storage, 0, 2));
          const Tensor targets = p.indices(indices("ce.targets", {rows}, classes, index_type));
          Tensor dlogits = p.out("ce.dlogits", {rows, classes});
          const double loss = ops::cross_entropy_forward(logits, targets, normalizer);
          const double loss_backward = ops::cross_entropy_backward(logits, targets, normalizer, dlogits);
          EXPECT_EQ(loss_backward, loss) << "backward returns the forward's loss";
          // The loss is computed in the arithmetic type and summed in float64: no 16-bit rounding.
          return Results{{"forward loss", J::arithmetic, {}, loss}, {"dlogits", J::storage, dlogits}};
        }});
    r.push_back({"vocabulary shards", "classes [4, 9) of 12", [](const Placement& p) {
      const std::int64_t vocabulary = 12, first = 4, shard = 5, rows = 15, width = 8;
      // Some tokens inside [4, 9), some not.
      const Tensor tokens = p.indices(indices("vs.tokens", {3, 5}, vocabulary, DataType::int32));
      Tensor y = p.out("vs.y", {3, 5, width});
      ops::embedding_shard_forward(tokens, p.in(values("vs.wte", {shard, width}, p.storage)), first, vocabulary, y);
      Tensor dwte = p.accumulator(values("vs.dwte0", {shard, width}, p.storage));
      ops::embedding_shard_backward(p.in(values("vs.dy", {3, 5, width}, p.storage)), tokens, first, dwte);
      // Cross-entropy statistics and gradient of one shard of the classes.
      const Tensor logits = p.in(values("vs.logits", {rows, shard}, p.storage, 0, 2));
      const Tensor targets = p.indices(indices("vs.targets", {rows}, vocabulary, DataType::int64));
      Tensor row_max = p.statistic("vs.max", {rows}), sums = p.statistic("vs.sum", {rows}),
             z = p.statistic("vs.z", {rows}), d = p.out("vs.d", {rows, shard});
      ops::cross_entropy_shard_max(logits, row_max);
      ops::cross_entropy_shard_sums(logits, targets, first, vocabulary, row_max, sums, z);
      ops::cross_entropy_shard_backward(logits, targets, first, row_max, sums, 30.0, d);
      return Results{{"embedding shard forward", J::storage, y}, {"embedding shard dwte (+=)", J::storage, dwte},
                     {"cross-entropy shard row maxima", J::arithmetic, row_max},
                     {"cross-entropy shard sums of exponentials", J::arithmetic, sums},
                     {"cross-entropy shard target logits", J::arithmetic, z},
                     {"cross-entropy shard dlogits", J::storage, d}};
    }});
    for (double normalizer : {45.0, 7.0})
      r.push_back({"mse", "[5, 9], normalizer " + number(normalizer), [=](const Placement& p) {
        const Tensor prediction = p.in(values("mse.p", {5, 9}, p.storage));
        const Tensor target = p.in(values("mse.t", {5, 9}, p.storage));
        Tensor dp = p.out("mse.dp", {5, 9});
        const double loss = ops::mse_forward(prediction, target, normalizer);
        ops::mse_backward(prediction, target, normalizer, dp);
        return Results{{"loss", J::arithmetic, {}, loss}, {"dprediction", J::storage, dp}};
      }});
    for (double probability : {0.0, 0.3})
      r.push_back({"dropout", "[7, 37], p " + number(probability), [=](const Placement& p) {
        const ops::DropoutKey key{kSeed + 1, tensor_id("dropout.test"), 1000};
        const Tensor x = p.in(values("dropout.x", {7, 37}, p.storage));
        Tensor y = p.out("dropout.y", {7, 37}), dx = p.out("dropout.dx", {7, 37});
        ops::dropout_forward(x, probability, key, y);
        ops::dropout_backward(x, probability, key, dx);
        return Results{{"forward's mask", J::mask, y}, {"forward", J::storage, y},
                       {"backward's mask", J::mask, dx}, {"backward", J::storage, dx}};
      }});
    return r;
  }();
  return rows;
}

// A row in a storage type, on the device or (float32 only) on the host.
struct DeviceCase {
  const DeviceRow* row;
  DataType type;
  MemorySpace space;
};
std::ostream& operator<<(std::ostream& out, const DeviceCase& c) {
  return out << c.row->op << " " << c.row->variant << " in " << name_of(c.type);
}

std::vector<DeviceCase> device_cases(MemorySpace space) {
  std::vector<DeviceCase> cases;
  const std::vector<DataType> types = space == MemorySpace::cuda
                                          ? std::vector<DataType>{DataType::float64, DataType::float32,
                                                                  DataType::bfloat16, DataType::float16}
                                          : std::vector<DataType>{DataType::float32};
  for (const DeviceRow& row : device_rows())
    for (DataType type : types) cases.push_back({&row, type, space});
  return cases;
}

std::string case_name(const ::testing::TestParamInfo<DeviceCase>& info) {
  const DeviceCase& c = info.param;
  const std::string words = c.row->op + " " + c.row->variant + " " + std::string(name_of(c.type));
  std::string name;
  for (char c : words) {
    if (std::isalnum(static_cast<unsigned char>(c)) != 0) name += c;
    else if (!name.empty() && name.back() != '_') name += '_';
  }
  return name;
}

class OpsAgainstCpu : public ::testing::TestWithParam<DeviceCase> {};

}  // namespace

INSTANTIATE_TEST_SUITE_P(Types, CudaOps,
                         ::testing::Values(DataType::float64, DataType::float32, DataType::bfloat16, DataType::float16),
                         type_name);
INSTANTIATE_TEST_SUITE_P(Cuda, OpsAgainstCpu, ::testing::ValuesIn(device_cases(MemorySpace::cuda)), case_name);
INSTANTIATE_TEST_SUITE_P(Host, OpsAgainstCpu, ::testing::ValuesIn(device_cases(MemorySpace::host)), case_name);

TEST_P(OpsAgainstCpu, Row) {
  const DeviceCase& c = GetParam();
  if (c.space == MemorySpace::cuda)
    if (const std::string why = why_no_device(); !why.empty()) GTEST_SKIP() << why;
  const Results want = c.row->run({c.type, MemorySpace::host, true}), got = c.row->run({c.type, c.space, false});
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    const std::string what =
        c.row->op + " " + c.row->variant + ", " + got[i].name + " in " + std::string(name_of(c.type));
    switch (got[i].judge) {
      case Judge::storage: expect_close(got[i].tensor, want[i].tensor, bound_for(c.type), what); break;
      case Judge::arithmetic:
        if (got[i].tensor.defined())
          expect_close(got[i].tensor, want[i].tensor, arithmetic_bound(c.type), what);
        else
          expect_close(got[i].value, want[i].value, arithmetic_bound(c.type), what);
        break;
      case Judge::exact: EXPECT_EQ(got[i].value, want[i].value) << what; break;
      case Judge::mask: {
        const std::vector<double> device = got[i].tensor.to_vector(), reference = want[i].tensor.to_vector();
        std::int64_t mismatches = 0;
        for (std::size_t e = 0; e < device.size(); ++e) mismatches += (device[e] == 0) != (reference[e] == 0);
        EXPECT_EQ(mismatches, 0) << what << ": the mask differs from the CPU's at " << mismatches << " elements";
        break;
      }
    }
  }
}

// ---- Tests that run on the host -----------------------------------------------------------------

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
        reference->update(ref, cast(grad, ref_value, "opt.grad.reference", kCategory), ref_state_tensors, step, true);
        device->update(dev, device_copy(grad, value_type), dev_state_tensors, step, true);
      }
      expect_close(dev, ref, bound, what + ": parameters after 3 steps");
      for (std::size_t i = 0; i < dev_state_tensors.size(); ++i)
        expect_close(dev_state_tensors[i], ref_state_tensors[i], bound, what + ": state " + std::to_string(i));
    }
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

TEST_F(CudaDevice, CrossEntropyRefusesTargetsOutsideTheClasses) {
  const DataType dt = DataType::float32;
  Tensor targets = indices("ce.bad", {4}, 5, DataType::int32);
  targets.set(3, 5);
  const Tensor logits = device_copy(values("ce.logits", {4, 5}, dt), dt);
  expect_error_containing(
      [&] { ops::cross_entropy_forward(logits, targets.to(MemorySpace::cuda, "ce.bad", kCategory), 4); },
      "cross_entropy_forward: target 5 at row 3");
}

TEST_F(CudaDevice, MixedSpacesAreRefused) {
  const Tensor x = device_copy(values("mixed.x", {4}, DataType::float32), DataType::float32);
  Tensor host_y = host_output("mixed.y", {4}, DataType::float32);
  expect_error_containing([&] { ops::gelu_forward(x, host_y); }, "gelu_forward: mixed.y [4] float32 is in host memory");
}

// An op runs where its first tensor is (ops.hpp), and every other tensor must be there too:
// each call gets its first tensor in one memory space and the others in the other, and is
// refused naming the op and where the misplaced tensor is, before touching any data. (These
// calls once went straight to the device entry points with host tensors; the one dispatch of
// each op now checks placement for both devices.)
TEST_F(CudaDevice, OpsRefuseTensorsInAnotherSpace) {
  using M = MemorySpace;
  const auto t = [](const char* name, Shape shape, M space, DataType dtype = DataType::float64) {
    return Tensor::zeros(name, std::move(shape), dtype, kCategory, space);
  };
  const DataType i32 = DataType::int32;
  const std::vector<std::pair<std::string, std::function<void(M, M)>>> calls = {
      {"matmul", [&](M f, M r) {
         Tensor c = t("c", {2, 4}, r);
         ops::matmul(t("a", {2, 3}, f), false, t("b", {3, 4}, r), false, c, false);
       }},
      {"linear_forward", [&](M f, M r) {
         Tensor c = t("c", {2, 4}, r);
         ops::linear_forward(t("x", {2, 3}, f), t("b", {3, 4}, r), t("bias", {4}, r), c);
       }},
      {"linear_backward", [&](M f, M r) {
         Tensor dx = t("dx", {2, 3}, r), dw = t("dw", {3, 4}, r), dbias = t("dbias", {4}, r);
         ops::linear_backward(t("c", {2, 4}, f), t("x", {2, 3}, r), t("b", {3, 4}, r), dx, dw, dbias);
       }},
      {"gelu_forward", [&](M f, M r) { Tensor y = t("y", {2, 3}, r); ops::gelu_forward(t("x", {2, 3}, f), y); }},
      {"gelu_backward", [&](M f, M r) {
         Tensor dx = t("dx", {2, 3}, r);
         ops::gelu_backward(t("y", {2, 3}, f), t("x", {2, 3}, r), dx);
       }},
      {"add_forward", [&](M f, M r) {
         Tensor dx = t("dx", {2, 3}, r);
         ops::add_forward(t("x", {2, 3}, f), t("y", {2, 3}, r), dx);
       }},
      {"add_forward", [&](M f, M r) { Tensor y = t("y", {2, 3}, f); ops::accumulate(y, t("x", {2, 3}, r)); }},
      {"layernorm_forward", [&](M f, M r) {
         Tensor y = t("y", {2, 3}, r), mean = t("mean", {2}, r), rstd = t("rstd", {2}, r);
         ops::layernorm_forward(t("x", {2, 3}, f), t("g", {3}, r), t("g", {3}, r), y, mean, rstd);
       }},
      {"layernorm_backward", [&](M f, M r) {
         Tensor dx = t("dx", {2, 3}, r), dg = t("dg", {3}, r), db = t("db", {3}, r);
         ops::layernorm_backward(t("y", {2, 3}, f), t("x", {2, 3}, r), t("g", {3}, r), t("mean", {2}, r),
                                 t("rstd", {2}, r), dx, dg, db);
       }},
      {"softmax_forward", [&](M f, M r) { Tensor y = t("y", {2, 3}, r); ops::softmax_forward(t("x", {2, 3}, f), y); }},
      {"softmax_backward", [&](M f, M r) {
         Tensor dx = t("dx", {2, 3}, r);
         ops::softmax_backward(t("y", {2, 3}, f), t("x", {2, 3}, r), dx);
       }},
      {"attention_forward", [&](M f, M r) {
         Tensor out = t("out", {1, 2, 2}, r), probs = t("probs", {1, 1, 2, 2}, r);
         ops::attention_forward(t("qkv", {1, 2, 6}, f), 1, true, out, probs);
       }},
      {"attention_backward", [&](M f, M r) {
         Tensor dqkv = t("dqkv", {1, 2, 6}, r);
         ops::attention_backward(t("out", {1, 2, 2}, f), t("qkv", {1, 2, 6}, r), t("probs", {1, 1, 2, 2}, r), 1, dqkv);
       }},
      {"embedding_forward", [&](M f, M r) {
         Tensor out = t("out", {1, 2, 2}, r);
         ops::embedding_forward(t("tokens", {1, 2}, f, i32), t("wte", {3, 2}, r), t("wpe", {2, 2}, r), out);
       }},
      {"embedding_backward", [&](M f, M r) {
         Tensor wte = t("wte", {3, 2}, r), wpe = t("wpe", {2, 2}, r);
         ops::embedding_backward(t("out", {1, 2, 2}, f), t("tokens", {1, 2}, r, i32), wte, wpe);
       }},
      {"embedding_shard_forward", [&](M f, M r) {
         Tensor out = t("out", {1, 2, 2}, r);
         ops::embedding_shard_forward(t("tokens", {1, 2}, f, i32), t("wte", {3, 2}, r), 0, 3, out);
       }},
      {"embedding_shard_backward", [&](M f, M r) {
         Tensor wte = t("wte", {3, 2}, r);
         ops::embedding_shard_backward(t("out", {1, 2, 2}, f), t("tokens", {1, 2}, r, i32), 0, wte);
       }},
      {"cross_entropy_forward", [&](M f, M r) {
         ops::cross_entropy_forward(t("logits", {2, 3}, f), t("targets", {2}, r, i32), 2);
       }},
      {"cross_entropy_backward", [&](M f, M r) {
         Tensor dlogits = t("dlogits", {2, 3}, r);
         ops::cross_entropy_backward(t("logits", {2, 3}, f), t("targets", {2}, r, i32), 2, dlogits);
       }},
      {"cross_entropy_shard_max", [&](M f, M r) {
         Tensor m = t("m", {2}, r);
         ops::cross_entropy_shard_max(t("logits", {2, 3}, f), m);
       }},
      {"cross_entropy_shard_sums", [&](M f, M r) {
         Tensor s = t("s", {2}, r), z = t("z", {2}, r);
         ops::cross_entropy_shard_sums(t("logits", {2, 3}, f), t("targets", {2}, r, i32), 0, 3, t("m", {2}, r), s, z);
       }},
      {"cross_entropy_shard_backward", [&](M f, M r) {
         Tensor d = t("d", {2, 3}, r);
         ops::cross_entropy_shard_backward(t("logits", {2, 3}, f), t("targets", {2}, r, i32), 0, t("m", {2}, r),
                                           t("s", {2}, r), 2, d);
       }},
      {"mse_forward", [&](M f, M r) { ops::mse_forward(t("x", {2, 3}, f), t("y", {2, 3}, r), 6); }},
      {"mse_backward", [&](M f, M r) {
         Tensor dx = t("dx", {2, 3}, r);
         ops::mse_backward(t("x", {2, 3}, f), t("y", {2, 3}, r), 6, dx);
       }},
      {"dropout_forward", [&](M f, M r) {
         Tensor y = t("y", {2, 3}, r);
         ops::dropout_forward(t("x", {2, 3}, f), 0.5, {}, y);
       }},
      {"dropout_backward", [&](M f, M r) {
         Tensor y = t("y", {2, 3}, r);
         ops::dropout_backward(t("x", {2, 3}, f), 0.5, {}, y);
       }},
      {"sgd", [&](M f, M r) {
         Tensor value = t("value", {4}, f), m = t("m", {4}, r);
         ops::sgd_update(value, t("grad", {4}, r), &m, DataType::float64, 0.1, 0.9, 0.01);
       }},
      {"adamw", [&](M f, M r) {
         Tensor value = t("value", {4}, f), m = t("m", {4}, r), v = t("v", {4}, r);
         ops::adamw_update(value, t("grad", {4}, r), m, v, 1e-3, 0.9, 0.999, 1e-8, 0.01, 1);
       }},
  };
  for (const auto& [first, rest, refusal] :
       {std::tuple{M::cuda, M::host, "is in host memory"}, std::tuple{M::host, M::cuda, "is in device memory"}})
    for (const auto& [op, call] : calls) {
      SCOPED_TRACE(op + (first == M::cuda ? ", first tensor on the device" : ", first tensor on the host"));
      expect_error_containing([&] { call(first, rest); }, op + ": ");
      expect_error_containing([&] { call(first, rest); }, refusal);
    }
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
