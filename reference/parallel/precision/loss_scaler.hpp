// Loss scaling for 16-bit gradients (Micikevicius et al. 2018), in the role of PyTorch's
// GradScaler: the loss is multiplied by a power of two S before backward, so that small
// gradients keep their digits in float16's range instead of flushing to zero, and the
// optimizer step divides the float32 copy of the gradients by S again (exactly, S being a
// power of two; precision.hpp's update_through_master). Dynamic scaling: when the gradients of
// any rank hold inf or NaN, every rank skips the step and S halves; after `growth_interval`
// clean steps in a row S doubles. Without it, such gradients stop training with an error
// naming the step. Mixed precision always looks for them (precision.hpp's find_nonfinite); the
// LossScaler decides what follows.
#pragma once

#include <cstdint>
#include <string>

#include "reference/core/dtype.hpp"
#include "reference/parallel/precision/precision.hpp"

namespace parity::parallel {

struct LossScaling {
  bool dynamic = false;
  double initial_scale = 65536;  // 2^16
  int growth_interval = 2000;    // clean steps in a row before S doubles
  // Refuses an initial scale that is not a power of two in [2^-24, 2^100] or an interval below
  // 1 (UsageError).
  void validate() const;
  std::string describe() const;
};
// The smallest scale dynamic scaling goes down to: gradients that stay inf or NaN below it hold
// a NaN of their own, not an overflow, and training stops there with an error.
inline constexpr double kSmallestLossScale = 0x1p-24;
// The largest: growth stops there (and an initial scale above it is refused).
inline constexpr double kLargestLossScale = 0x1p100;

// The scale of the next step and the clean steps counted towards its growth.
class LossScaler {
 public:
  // Validates the settings (UsageError). Without dynamic scaling the scale is 1.
  explicit LossScaler(const LossScaling& settings = {});
  const LossScaling& settings() const { return settings_; }
  // What the next step's loss is multiplied by, and what its float32 gradients are multiplied
  // by before the update (exactly its inverse).
  double scale() const { return scale_; }
  double unscale() const { return 1 / scale_; }
  int clean_steps() const { return clean_steps_; }  // in a row, since the scale last changed
  // Whether step `step`, whose gradients (in `gradient_type`) the job found `found` in, applies
  // its update: yes when they are all finite; no when dynamic scaling skips it. Throws Error
  // naming the step when it cannot be skipped: without dynamic scaling, or when the scale
  // would fall below kSmallestLossScale.
  bool applies(const NonfiniteGradients& found, std::uint64_t step, DataType gradient_type) const;
  // After the step: an applied one counts a clean step (S doubles after growth_interval of
  // them, up to kLargestLossScale), a skipped one halves S; either way the count restarts when
  // S changes. Nothing changes without dynamic scaling.
  void update(bool applied);
  // Takes up a saved state (the training state's restore): the scale of the next step and the
  // clean steps counted towards its growth. Refuses (UsageError) a state these settings cannot
  // reach: a scale other than 1 without dynamic scaling, one that is not a power of two in
  // [kSmallestLossScale, kLargestLossScale], a count outside [0, growth_interval).
  void restore(double scale, int clean_steps);
  std::string describe() const { return settings_.describe(); }

 private:
  LossScaling settings_;
  double scale_ = 1;
  int clean_steps_ = 0;
};

}  // namespace parity::parallel
