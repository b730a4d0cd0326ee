// Helpers of the single-process op tests (test_ops.cpp, test_op_precision.cpp,
// test_op_refusals.cpp, test_moe_ops.cpp): random float64 tensors as pure functions of their
// names, NaN-poisoned outputs, the relative Frobenius difference with the worst element,
// central finite differences, and the check that bad input is refused with a message naming the
// tensors. Tolerances come from reference/core/tolerance.hpp.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <ostream>
#include <source_location>
#include <sstream>
#include <string>
#include <vector>

#include "reference/core/error.hpp"
#include "reference/core/tolerance.hpp"
#include "reference/tensor/random.hpp"
#include "reference/tensor/tensor.hpp"

namespace parity::op_testing {


constexpr std::uint64_t kSeed = 20240611;
constexpr auto kCategory = MemoryCategory::activations;

// Standard-normal float64 values (or another mean/spread), a pure function of the name.
inline Tensor random_tensor(const std::string& name, Shape shape, double mean = 0, double stddev = 1) {
  Tensor t = Tensor::empty(name, std::move(shape), DataType::float64, kCategory);
  initialize(t, Init::normal(mean, stddev), kSeed);
  return t;
}

inline Tensor zeros(const std::string& name, Shape shape, DataType dtype = DataType::float64) {
  return Tensor::zeros(name, std::move(shape), dtype, kCategory);
}

// Outputs and input gradients are documented as overwritten: starting them at NaN makes an op
// that reads or keeps their old contents fail the comparison instead of passing by luck.
inline Tensor nans(const std::string& name, Shape shape, DataType dtype = DataType::float64) {
  Tensor t = Tensor::empty(name, std::move(shape), dtype, kCategory);
  t.fill(std::numeric_limits<double>::quiet_NaN());
  return t;
}

// Token ids in [0, vocabulary), int32 or int64.
inline Tensor token_tensor(const std::string& name, Shape shape, std::int64_t vocabulary, DataType dtype = DataType::int32) {
  Tensor t = Tensor::empty(name, std::move(shape), dtype, kCategory);
  initialize(t, Init::tokens(vocabulary), kSeed);
  return t;
}

inline Tensor to_type(const Tensor& t, DataType dtype) {
  return cast(t, dtype, t.name() + "." + std::string(name_of(dtype)), kCategory);
}

// L = sum(y * r): the scalar whose gradient with respect to y is r.
inline double project(const Tensor& y, const Tensor& r) {
  double sum = 0;
  for (std::int64_t i = 0; i < y.numel(); ++i) sum += y.at(i) * r.at(i);
  return sum;
}

inline std::string index_string(const Shape& shape, std::int64_t flat) {
  std::vector<std::int64_t> index(shape.size());
  for (std::size_t d = shape.size(); d-- > 0;) {
    index[d] = flat % shape[d];
    flat /= shape[d];
  }
  return to_string(index);
}

// How far `got` is from `expected`: the relative Frobenius error the checks bound, and the
// largest elementwise difference with where it is, for the failure message.
struct Difference {
  double relative = 0;  // ||got - expected||_F / ||expected||_F
  double largest = 0;   // max_i |got_i - expected_i| (NaN counts as infinite)
  std::int64_t index = -1;
  std::string where;
  double got = 0;
  double expected = 0;
};

inline Difference difference(const Tensor& got, const Tensor& expected) {
  Difference d;
  if (got.numel() != expected.numel()) {
    ADD_FAILURE() << got.describe() << " and " << expected.describe() << " differ in size";
    d.relative = std::numeric_limits<double>::infinity();
    return d;
  }
  double diff2 = 0, ref2 = 0;
  for (std::int64_t i = 0; i < got.numel(); ++i) {
    const double g = got.at(i), e = expected.at(i);
    const double delta = std::isnan(g - e) ? std::numeric_limits<double>::infinity() : std::fabs(g - e);
    diff2 += delta * delta;
    ref2 += e * e;
    if (d.index < 0 || delta > d.largest) {
      d.largest = delta;
      d.index = i;
      d.got = g;
      d.expected = e;
    }
  }
  d.where = index_string(expected.shape(), d.index);
  d.relative = ref2 > 0 ? std::sqrt(diff2 / ref2) : (diff2 > 0 ? std::numeric_limits<double>::infinity() : 0.0);
  return d;
}

inline std::ostream& operator<<(std::ostream& out, const Difference& d) {
  return out << "relative Frobenius error " << d.relative << "; largest difference " << d.largest << " at element "
             << d.where << " (flat " << d.index << "): got " << d.got << ", expected " << d.expected;
}

// Fails (non-fatally) when ||got - expected|| / ||expected|| is not below `bound`.
inline void expect_close(const Tensor& got, const Tensor& expected, double bound, const std::string& what) {
  const Difference d = difference(got, expected);
  EXPECT_LT(d.relative, bound) << what << " " << got.describe() << ": " << d << " (bound " << bound << ")";
}

// Central differences of loss() with respect to every element of the float64 tensor `input`,
// perturbed in place (tensors share storage) and restored.
inline Tensor numeric_gradient(Tensor input, const std::function<double()>& loss) {
  const double step = tolerance::kFiniteDifferenceStep;
  Tensor gradient = zeros(input.name() + ".numeric_gradient", input.shape());
  for (std::int64_t i = 0; i < input.numel(); ++i) {
    const double x = input.at(i);
    input.set(i, x + step);
    const double up = loss();
    input.set(i, x - step);
    const double down = loss();
    input.set(i, x);
    gradient.set(i, (up - down) / (2 * step));
  }
  return gradient;
}

// The analytic gradient of loss() with respect to `input` must match central differences.
inline void expect_gradient(const Tensor& analytic, const Tensor& input, const std::function<double()>& loss,
                     const std::string& what) {
  expect_close(analytic, numeric_gradient(input, loss), tolerance::kGradientRelativeError,
               what + " against central differences in " + input.describe() + ":");
}

// A float32 result against the float64 op on the unrounded inputs. n is the op's longest
// reduction and stages its number of chained reductions (tolerance.hpp). For elementwise ops
// (no reduction) n counts the rounded operations per element: a chain of n roundings without
// cancellation errs by at most gamma_n (Higham 3.1), which the bound covers with stages = 1.
inline void expect_float32_close(const Tensor& got32, const Tensor& expected64, int n, int stages, const std::string& what) {
  ASSERT_EQ(got32.dtype(), DataType::float32) << what;
  std::ostringstream label;
  label << what << " in float32 against float64 (n = " << n << ", stages = " << stages << ")";
  expect_close(got32, expected64, tolerance::float32_op_relative_bound(n, stages), label.str());
}

inline void expect_float32_scalar_close(double got32, double expected64, int n, int stages, const std::string& what) {
  const double bound = tolerance::float32_op_relative_bound(n, stages);
  EXPECT_LT(std::fabs(got32 - expected64) / std::fabs(expected64), bound)
      << what << " in float32 against float64 (n = " << n << ", stages = " << stages << "): got " << got32
      << ", expected " << expected64 << " (relative bound " << bound << ")";
}

// f must throw parity::Error whose message contains every one of `parts` (tensor names,
// shapes, types), so a user can tell which tensor was wrong without a debugger. Failures are
// reported at the caller's line.
template <typename F>
inline void expect_refused(F&& f, const std::vector<std::string>& parts,
                           std::source_location where = std::source_location::current()) {
  const ::testing::ScopedTrace trace(where.file_name(), static_cast<int>(where.line()), "expect_refused");
  try {
    f();
    std::string wanted;
    for (const std::string& p : parts) wanted += " \"" + p + "\"";
    ADD_FAILURE() << "expected a parity::Error naming" << wanted << ", but nothing was thrown";
  } catch (const Error& e) {
    const std::string message = e.what();
    for (const std::string& p : parts)
      if (message.find(p) == std::string::npos)
        ADD_FAILURE() << "the message \"" << message << "\" does not name \"" << p << "\"";
  }
}

inline std::int64_t rows_of(const Shape& shape) {
  std::int64_t n = 1;
  for (std::size_t d = 0; d + 1 < shape.size(); ++d) n *= shape[d];
  return n;
}

inline Shape with_last(Shape shape, std::int64_t last) {
  shape.back() = last;
  return shape;
}


}  // namespace parity::op_testing
