// Mixed precision (Micikevicius et al. 2018): 16-bit parameters and gradients for the passes
// and the communication, float32 master weights and optimizer state for the update. This file
// holds the parts of a step that are mixed precision's own, used by the Trainer and the
// optimizer steps (parallel/trainer.hpp, parallel/step.hpp) rather than written inside them:
//   - the float32 master copy of a 16-bit parameter segment, and the update through it: the
//     16-bit gradient widened to float32 and multiplied by 1/S (the loss scale, a power of two,
//     so exactly), the master updated, the 16-bit value rounded from it;
//   - the search for inf and NaN in a rank's gradients, agreed over every rank that trains, on
//     which the step's update depends (loss_scaler.hpp decides what follows);
//   - how 16-bit gradients travel in reductions.
// It sits below the step (parallel/ includes it), so it knows tensors, communicators and the
// optimizer, never the step's parts.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "reference/comm/algorithms.hpp"
#include "reference/comm/communicator.hpp"
#include "reference/model/optimizer.hpp"
#include "reference/tensor/tensor.hpp"

namespace parity::parallel {

enum class Precision {
  model,  // parameters, gradients and optimizer state in the model's own type
  mixed,  // 16-bit parameters and gradients; float32 master weights and optimizer state
};
std::string_view name_of(Precision precision);
Precision parse_precision(std::string_view text);  // "model" / "float32" / "float64" -> model, "mixed"

// 16-bit gradients travel as 16-bit numbers (2 bytes per element, the paper's count), every
// partial sum rounded to 16 bits as NCCL's bfloat16 reductions do; widening to float32 would
// double the bytes on the wire.
inline constexpr HalfAccumulate kHalfReduction = HalfAccumulate::native;

// The float32 master copy of a 16-bit parameter segment (optimizer state in the memory count).
Tensor master_copy(const Tensor& value, const std::string& name);

// One optimizer update of a segment through its master copy at optimizer step `step`: the
// gradient widened to float32 and multiplied by `unscale` (1 / the loss scale), the master and
// `state` updated (with weight decay when `decay`), and `value` rounded from the master.
void update_through_master(const model::Optimizer& optimizer, Tensor& value, Tensor& master, const Tensor& grad,
                           std::vector<Tensor>& state, std::int64_t step, double unscale, const std::string& name,
                           bool decay);

// Gradient elements that are inf or NaN: this rank's count summed over a job, and how many of
// its ranks hold some.
struct NonfiniteGradients {
  double elements = 0;
  double ranks = 0;
  int job_ranks = 1;
  bool found() const { return elements != 0; }
};
// Counts the inf and NaN elements of `gradients` (on a device: one read for all of them) and
// agrees over `job` (collective: one all-reduce of two numbers), so that every rank takes the
// same decision.
NonfiniteGradients find_nonfinite(Communicator& job, const std::vector<BufferView>& gradients);

}  // namespace parity::parallel
