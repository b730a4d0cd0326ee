// The loss scaler (see loss_scaler.hpp).
#include "reference/parallel/precision/loss_scaler.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "reference/core/error.hpp"

namespace parity::parallel {
namespace {
std::string number(double x) {
  char text[32];
  std::snprintf(text, sizeof text, "%.17g", x);
  return text;
}
}  // namespace

void LossScaling::validate() const {
  int exponent = 0;
  const double mantissa = std::frexp(initial_scale, &exponent);
  if (!(initial_scale >= kSmallestLossScale && initial_scale <= kLargestLossScale) || mantissa != 0.5)
    throw UsageError("the initial loss scale must be a power of two from 2^-24 to 2^100 (so that scaling is exact), "
                     "not " + number(initial_scale));
  if (growth_interval < 1)
    throw UsageError("the loss scale's growth interval must be at least 1 clean step, not " + std::to_string(growth_interval));
}

std::string LossScaling::describe() const {
  if (!dynamic) return "no loss scaling";
  int exponent = 0;
  std::frexp(initial_scale, &exponent);
  return "dynamic loss scaling from 2^" + std::to_string(exponent - 1) + ", x2 after " + std::to_string(growth_interval) +
         " clean steps";
}

LossScaler::LossScaler(const LossScaling& settings) : settings_(settings) {
  settings_.validate();
  scale_ = settings_.dynamic ? settings_.initial_scale : 1;
}

bool LossScaler::applies(const NonfiniteGradients& found, std::uint64_t step, DataType gradient_type) const {
  if (!found.found()) return true;
  const std::string what = "step " + std::to_string(step) + ": " + number(found.elements) +
                           " gradient elements are inf or NaN on " + number(found.ranks) + " of " +
                           std::to_string(found.job_ranks) + " ranks";
  if (!settings_.dynamic)
    throw Error(what + ", and without loss scaling the step cannot be skipped: " + std::string(name_of(gradient_type)) +
                " gradients overflowed; train with dynamic loss scaling (DataParallelConfig::loss_scaling)");
  if (scale_ / 2 < kSmallestLossScale)
    throw Error(what + " at every loss scale down to 2^-24: a NaN of their own, not an overflow");
  return false;
}

void LossScaler::update(bool applied) {
  if (!settings_.dynamic) return;
  if (!applied) {
    scale_ /= 2;
    clean_steps_ = 0;
  } else if (++clean_steps_ == settings_.growth_interval) {
    scale_ = std::min(scale_ * 2, kLargestLossScale);
    clean_steps_ = 0;
  }
}

void LossScaler::restore(double scale, int clean_steps) {
  int exponent = 0;
  const double mantissa = std::frexp(scale, &exponent);
  if (!settings_.dynamic) {
    if (scale != 1 || clean_steps != 0)
      throw UsageError("a saved loss scale of " + number(scale) + " (" + std::to_string(clean_steps) +
                       " clean steps) cannot be restored without dynamic loss scaling");
    return;
  }
  if (!(scale >= kSmallestLossScale && scale <= kLargestLossScale) || mantissa != 0.5)
    throw UsageError("a saved loss scale must be a power of two from 2^-24 to 2^100, not " + number(scale));
  if (clean_steps < 0 || clean_steps >= settings_.growth_interval)
    throw UsageError("a saved count of " + std::to_string(clean_steps) + " clean steps is outside [0, " +
                     std::to_string(settings_.growth_interval) + ") for this growth interval");
  scale_ = scale;
  clean_steps_ = clean_steps;
}

}  // namespace parity::parallel
