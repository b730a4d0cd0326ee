// The loss scaler's decisions without ranks (the Trainer's tests in test_precision.cpp check
// them on real ranks through a step): the scale's cap at 2^100, the error when inf or NaN stay
// at the smallest scale, and no change and no skip without dynamic scaling.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "reference/core/error.hpp"
#include "reference/model/optimizer.hpp"
#include "reference/parallel/precision/loss_scaler.hpp"
#include "reference/parallel/precision/precision.hpp"
#include "reference/tensor/tensor.hpp"

namespace parity::test {
namespace {

using parallel::LossScaler;
using parallel::LossScaling;
using parallel::NonfiniteGradients;

LossScaling dynamic_from(double initial_scale, int growth_interval) {
  LossScaling s;
  s.dynamic = true;
  s.initial_scale = initial_scale;
  s.growth_interval = growth_interval;
  return s;
}

const NonfiniteGradients kNone{0, 0, 4};
const NonfiniteGradients kOneRanksInf{3, 1, 4};

std::string error_of(const LossScaler& scaler, std::uint64_t step) {
  try {
    scaler.applies(kOneRanksInf, step, DataType::float16);
  } catch (const Error& e) {
    return e.what();
  }
  return "(nothing thrown)";
}

// Growth stops at the largest scale instead of going on to infinity.
TEST(LossScaler, GrowthStopsAtTheLargestScale) {
  LossScaler scaler(dynamic_from(0x1p99, 1));
  ASSERT_TRUE(scaler.applies(kNone, 0, DataType::float16));
  scaler.update(true);
  EXPECT_EQ(scaler.scale(), 0x1p100);
  scaler.update(true);
  EXPECT_EQ(scaler.scale(), 0x1p100);
  EXPECT_EQ(scaler.unscale(), 0x1p-100);
}

// Inf or NaN that stay while the scale halves down to 2^-24 are no overflow: the step is not
// skipped again but training stops, naming the step and the ranks.
TEST(LossScaler, NonfiniteGradientsAtTheSmallestScaleStopTraining) {
  LossScaler scaler(dynamic_from(0x1p-23, 1000));
  EXPECT_FALSE(scaler.applies(kOneRanksInf, 5, DataType::float16));  // skipped: 2^-24 is still to try
  scaler.update(false);
  EXPECT_EQ(scaler.scale(), parallel::kSmallestLossScale);
  const std::string message = error_of(scaler, 6);
  EXPECT_NE(message.find("step 6: 3 gradient elements are inf or NaN on 1 of 4 ranks"), std::string::npos) << message;
  EXPECT_NE(message.find("a NaN of their own"), std::string::npos) << message;
}

// Without dynamic scaling the scale stays 1, clean steps are not counted, and inf or NaN stop
// training (a step cannot be skipped), naming the gradients' type.
TEST(LossScaler, WithoutDynamicScalingNothingChangesAndNothingIsSkipped) {
  LossScaling settings = dynamic_from(0x1p16, 1);
  settings.dynamic = false;
  LossScaler scaler(settings);
  EXPECT_EQ(scaler.scale(), 1);
  EXPECT_TRUE(scaler.applies(kNone, 0, DataType::float16));
  scaler.update(true);
  EXPECT_EQ(scaler.scale(), 1);
  EXPECT_EQ(scaler.clean_steps(), 0);
  const std::string message = error_of(scaler, 1);
  EXPECT_NE(message.find("float16 gradients overflowed"), std::string::npos) << message;
}

// Float16 gradients that are normal only while scaled: unscaled they lie below float16's
// smallest subnormal (2^-24), so the unscaling must happen in float32, and the float32 master
// moves by exactly lr g. SGD with lr 2^-3 on masters 2^-10: each update is one or a few float32
// ulps of the master, worked by hand; a gradient unscaled in 16 bits would vanish.
TEST(LossScaler, TinyUnscaledGradientsMoveTheFloat32MasterExactly) {
  const double scale = 65536;  // 2^16
  const std::vector<double> tiny = {std::ldexp(1.0, -30), 3 * std::ldexp(1.0, -28), -std::ldexp(1.0, -26)};
  Tensor value = Tensor::empty("w", {3}, DataType::float16, MemoryCategory::parameters);
  Tensor grad = Tensor::empty("w.grad", {3}, DataType::float16, MemoryCategory::gradients);
  for (std::int64_t i = 0; i < 3; ++i) {
    value.set(i, std::ldexp(1.0, -10));
    grad.set(i, tiny[static_cast<std::size_t>(i)] * scale);  // 2^-14, 3 2^-12, -2^-10: normal float16
  }
  ASSERT_EQ(grad.to_vector()[0], std::ldexp(1.0, -14));
  Tensor master = parallel::master_copy(value, "w.master");
  std::vector<Tensor> state;
  const model::Sgd sgd({.learning_rate = 0.125}, DataType::float32);
  parallel::update_through_master(sgd, value, master, grad, state, 1, 1 / scale, "w", true);
  const std::vector<double> moved = master.to_vector();
  for (std::size_t i = 0; i < 3; ++i) {
    const double expected = std::ldexp(1.0, -10) - 0.125 * tiny[i];  // exact in float32
    EXPECT_EQ(moved[i], expected) << i << ": moved by " << std::ldexp(1.0, -10) - moved[i];
    EXPECT_EQ(static_cast<double>(static_cast<float>(expected)), expected);
  }
  // The float16 copy rounds the master: 2^-10 less a few float32 ulps is 2^-10.
  for (double v : value.to_vector()) EXPECT_EQ(v, std::ldexp(1.0, -10));
}

TEST(LossScaler, RefusesBadSettings) { EXPECT_THROW(LossScaler(dynamic_from(3, 1)), UsageError); }

// A saved state holds at most growth_interval - 1 clean steps (the next one grows the scale
// and restarts the count), so a count equal to the interval is one these settings never save.
TEST(LossScaler, RestoreTakesCountsBelowTheGrowthInterval) {
  LossScaler scaler(dynamic_from(0x1p16, 4));
  scaler.restore(0x1p12, 3);
  EXPECT_EQ(scaler.scale(), 0x1p12);
  EXPECT_EQ(scaler.clean_steps(), 3);
  scaler.update(true);  // the fourth clean step: growth
  EXPECT_EQ(scaler.scale(), 0x1p13);
  EXPECT_THROW(scaler.restore(0x1p12, 4), UsageError);
  EXPECT_THROW(scaler.restore(0x1p12, -1), UsageError);
  EXPECT_EQ(scaler.scale(), 0x1p13);  // a refused state leaves the scaler as it was
  EXPECT_EQ(scaler.clean_steps(), 0);
}

}  // namespace
}  // namespace parity::test
