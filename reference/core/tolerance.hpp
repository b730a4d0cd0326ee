// Every tolerance parity checks against, with its reason. Exact comparisons are used where
// inputs are crafted so the result is exact in the type; elsewhere results are compared with
// a float64 reference under a bound derived from the precision and the reduction length.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "reference/core/dtype.hpp"

namespace parity::tolerance {

// gamma_n = n u / (1 - n u) (Higham, Accuracy and Stability of Numerical Algorithms, 3.1):
// a sum of n+1 terms computed in precision u, in any order (sequential, tree or ring), is off by
// at most gamma_n * sum|x_i|.
inline double gamma(int n, double u) { return n * u / (1.0 - n * u); }

// The CPU ops' row reductions (softmax's and cross-entropy's sums of exponentials, LayerNorm's
// means and variance, the backward passes' row dot products; reference/simd) take one blocked
// order on every instruction set: element j joins partial sum j mod 16, in order of j, and the
// 16 partials are added pairwise. A sum of n terms that way rounds at most ceil(n/16) - 1 times
// in a partial and 4 times combining, never more than the n - 1 of a sequential sum (with n <= 16
// the partials hold one term and the zeros added are exact), so every bound below that counts n
// (or n - 1) roundings for a reduction of n terms holds unchanged.

// Largest allowed |computed - reference| for one element of a sum or average over n ranks.
//   accumulate_u: unit roundoff of the arithmetic that combines partial results (float32 when
//                 16-bit data is widened, the 16-bit type itself in native mode);
//   storage_u:    unit roundoff of the stored result when it is rounded once more after
//                 accumulating (16-bit data widened to float32), else 0;
//   sum_abs:      sum over ranks of |x_i| for this element.
// n-1 additions plus, for avg, one division are n roundings in accumulate_u, so gamma_n; the
// final rounding to storage adds storage_u * |result| <= storage_u * (1 + gamma_n) * sum_abs;
// the float64 reference itself is within gamma_n(2^-53) * sum_abs. An average divides all of
// it by n.
inline double reduction_bound(int n, double accumulate_u, double storage_u, double sum_abs, bool average) {
  const double g = gamma(n, accumulate_u);
  const double bound = (g + storage_u * (1.0 + g) + gamma(n, unit_roundoff(DataType::float64))) * sum_abs;
  return average ? bound / n : bound;
}

// Finite differences: central differences (f(x+d) - f(x-d)) / 2d in float64 have truncation
// error O(d^2 f''') and rounding error O(u f / d); d = 1e-6 makes both about 1e-10 relative on
// inputs of order one, so analytic and numerical gradients must agree to this relative error
// to 1e-6, leaving four orders of margin.
inline constexpr double kFiniteDifferenceStep = 1e-6;
inline constexpr double kGradientRelativeError = 1e-6;

// float32 op against the same op in float64 on the same inputs, as a relative Frobenius error
// ||y32 - y64|| / ||y64||. Each output is built by at most `stages` chained reductions of at
// most n terms (a matmul is one stage of length k; attention is scores, softmax and weighted sum,
// three). One reduction errs by at most gamma_n * sum|x_i y_i|; for the zero-mean random test
// inputs sum|x_i y_i| is about sqrt(n) times |sum x_i y_i|, and the errors of chained stages add
// (every stage here is well conditioned: no cancellation beyond the reduction's). So
// stages * sqrt(n) * gamma_n(2^-24), plus 2^-24 for rounding the inputs themselves.
inline double float32_op_relative_bound(int n, int stages) {
  const double u32 = unit_roundoff(DataType::float32);
  return stages * std::sqrt(static_cast<double>(n)) * gamma(n, u32) + u32;
}
// Elementwise ops (no reduction) use the same bound with n = the roundings along one element's
// chain of operations and one stage: gamma_n covers n roundings (Higham 3.1), and the sqrt(n)
// factor only loosens it.

// 16-bit storage (float16, bfloat16) with float32 arithmetic, against float64 on the unrounded
// inputs: the float32 arithmetic's bound plus one 16-bit unit roundoff for every operand rounded
// to 16 bits and one for the stored result.
inline double half_storage_op_relative_bound(DataType type, int rounded_inputs, int n, int stages) {
  return float32_op_relative_bound(n, stages) + (rounded_inputs + 1) * unit_roundoff(type);
}

// Distributed training (data parallelism, accumulation, ZeRO) against the single-device run
// of the same steps, as relative Frobenius differences: of the parameters, relative to what
// training changed them by, and of the optimizer state.
//  - Each step's gradient is the same sum as on one device in another order: m terms (rows x
//    tokens) regrouped over ranks and micro-batches, plus n - 1 additions across ranks, in the
//    arithmetic's precision: gamma_{m+n}(u_a) times the sum's condition number kappa.
//  - 16-bit gradients are rounded once per partial result: on every rank and at each of the
//    n - 1 ring additions (native 16-bit reduction), and once on the single device: (n + 1) u_s.
//  - An optimizer step passes a relative gradient error on to the update at most doubled
//    (AdamW's m / sqrt(v): once through m, once through sqrt(v); SGD: once), and the errors of
//    N steps add.
// kappa = 4 is the stated assumption on conditioning: the gradients of these small synthetic
// tasks do not cancel by more than a factor of 4 (measured: the difference is 1 to 1.3 times
// gamma_{m+n} for float32 and float64).
inline constexpr double kTrainingConditioning = 4;
inline double training_relative_bound(DataType storage, std::int64_t reduction_terms, int world, int steps) {
  const DataType arithmetic = storage == DataType::float64 ? DataType::float64 : DataType::float32;
  const double reorder = kTrainingConditioning * gamma(static_cast<int>(reduction_terms) + world, unit_roundoff(arithmetic));
  const double rounding = is_half(storage) ? (world + 1) * unit_roundoff(storage) : 0;
  return 2.0 * steps * (reorder + rounding);
}

// How far below training_relative_bound the measured errors may sit at most: the largest
// error / bound over the training grid's cases of one optimizer and precision (at two ranks or
// more; one rank is the single-device run itself) must reach 1 / kTrainingBoundSlack, so a
// bound made useless by a large factor fails. The bound is a worst case: gamma_n = n u where
// real sums err like sqrt(n) u (a factor of about 13 for the 160 terms of a step here), times
// kappa = 4, times 2 N = 6 for the steps, about 300, and plain SGD's errors sit a few units in
// the last place below that. Measured at 2 and 3 ranks: largest error / bound 1.0e-3 to
// 1.5e-3 for SGD, 0.03 to 0.08 for AdamW and mixed precision. A bound 1000 times looser than
// the one above puts every group under 1 / 4000 (tried: largest 8.5e-5). The tensor, pipeline
// and context grids hold their gradient_relative_bound (one step's gradients) and parameter
// bounds to the same factor: measured at 2 to 4 ranks, largest error / bound 0.0073 to 0.014
// for the gradients in float32 and float64, 0.023 to 0.077 in 16 bits, 0.03 to 0.37 for the
// parameters; gradient_relative_bound made 100 times looser puts them at 1e-4 (tried).
inline constexpr double kTrainingBoundSlack = 4000;

// Mixed precision: 16-bit parameters, activations and gradients, float32 arithmetic, float32
// master weights and optimizer state.
//
// Against float64 training of the same model from the same start, a gradient element carries
// the 16-bit roundings along its chain through forward and backward: every op rounds its output
// once and its input gradient once. A GPT layer has at most 14 ops each way (two layer norms,
// three matmuls, attention, the activation, the dropouts and the residual adds), and the
// embeddings, the final norm, the tied head and the loss at most 11 more. Independent roundings
// add like a random walk, sqrt(R) u_s relative to the element's sum of absolute terms (the
// sqrt(n) model that the training bound's slack assumes, rather than the worst case R u_s).
inline int gpt_rounding_chain(int layers) { return 28 * layers + 11; }
inline double half_chain_noise(DataType storage, int chain) {
  return std::sqrt(static_cast<double>(chain)) * unit_roundoff(storage);
}
// Against the single-device run in the same precision, only the gradient sum is grouped
// differently: the float32 regrouping of its m terms and n ranks, and the (n + 1) roundings of
// 16-bit partial results (see training_relative_bound).
inline double half_regrouping_noise(DataType storage, std::int64_t reduction_terms, int world) {
  return gamma(static_cast<int>(reduction_terms) + world, unit_roundoff(DataType::float32)) +
         (world + 1) * unit_roundoff(storage);
}
// A linear optimizer (SGD) passes a gradient's relative error on to its update (kappa for the
// gradients' conditioning, as in training_relative_bound), doubled for safety as there, and the
// errors of N steps add.
inline double linear_training_bound(double noise, int steps) { return 2.0 * steps * kTrainingConditioning * noise; }
// AdamW divides every element's update by that element's own size (m / sqrt(v)), so an element
// whose gradient lies within the rounding noise of zero moves by up to lr either way, however
// small the noise. With 16-bit gradients the noise (u_s >= 2^-11 times gradients of 1e-4 and
// more) is far above AdamW's epsilon (1e-8) and such flips happen; in float32 and float64 it is
// far below, the update stays linear in the error and training_relative_bound holds. Assuming
// the elements' ratios |sum| / sum|terms| are no denser near zero than uniform, a fraction at
// most `noise` of them can flip in a step; a flip moves an element by at most 2 lr while an
// element moves by lr / 2 per step at least on average (the updates keep their sign over a few
// steps), so the relative Frobenius difference is at most 2 sqrt(noise) / (1/2) = 4 sqrt(noise).
// This grows like sqrt(u_s), not u_s: measured, bfloat16's errors are sqrt(8) times float16's.
// AdamW in 16 bits is held to the larger of this and the linear bound.
inline double sign_flip_bound(double noise) { return 4.0 * std::sqrt(noise); }
// An element whose exact gradient is zero (the key third of attention's qkv bias: softmax
// ignores the constant q . b_k added to a row of scores) has a computed gradient that is all
// rounding noise, and AdamW's step m / (sqrt(v) + eps) on it is not small relative to the noise:
// it is the noise over itself plus eps. The reasoning above (noise far below eps in float32 and
// float64) holds for elements with a real gradient, not for these; between two runs whose noise
// differs (float32 against float64) such an element can move by a full step either way. By
// Cauchy-Schwarz on m_t = (1 - b1) sum_i b1^(t-i) g_i and v_t = (1 - b2) sum_i b2^(t-i) g_i^2,
// |m_t| / sqrt(v_t) <= (1 - b1) / sqrt(1 - b2) sqrt(sum_{j<t} (b1^2 / b2)^j), and with the bias
// corrections a step moves it by at most lr (1 - b1) / (1 - b1^t) sqrt((1 - b2^t) / (1 - b2))
// sqrt(sum_{j<t} (b1^2 / b2)^j) (lr exactly at t = 1), weight decay aside (none on biases in
// GPT-2's groups). Two runs differ by at most twice the sum over the steps: an absolute bound.
inline double adamw_zero_gradient_bound(double lr, double beta1, double beta2, int steps) {
  double total = 0;
  for (int t = 1; t <= steps; ++t) {
    double geometric = 0;
    for (int j = 0; j < t; ++j) geometric += std::pow(beta1 * beta1 / beta2, j);
    total += lr * (1 - beta1) / (1 - std::pow(beta1, t)) * std::sqrt((1 - std::pow(beta2, t)) / (1 - beta2)) *
             std::sqrt(geometric);
  }
  return 2 * total;
}
// Tensor parallelism in 16 bits against one device in the same precision: besides the
// gradient sums' regrouping (half_regrouping_noise over the tp x dp ranks), every sum over the
// t ranks of a tensor-parallel group adds t 16-bit partial results and rounds the sum: (t + 1)
// u_s where the single device rounds once. A layer has four such sums (the row-parallel
// outputs of attention and MLP forward, the column-parallel input gradients of qkv and fc
// backward), the vocabulary-parallel head two more; they add like a random walk along the
// chain, sqrt(4L + 2) (t + 1) u_s. Pipelines (stages pass 16-bit activations unchanged) use it
// with their micro-batch partial sums as `world`.
inline double tensor_parallel_half_noise(DataType storage, std::int64_t reduction_terms, int world, int tp, int layers) {
  const double sums = tp > 1 ? std::sqrt(4.0 * layers + 2) * (tp + 1) * unit_roundoff(storage) : 0;
  return half_regrouping_noise(storage, reduction_terms, world) + sums;
}

// Tensor parallelism (and its composition with data parallelism and ZeRO) against the
// single-device run: the same sums, regrouped. A column-parallel layer computes each of its
// outputs as one device does (the reduction runs over whole input rows); a row-parallel layer
// sums t partial products of in/t terms and then the t partials; the vocabulary-parallel loss
// sums exponentials over V/t classes, then over the shards; sequence parallelism splits the
// weight gradients' sums over tokens between ranks. Every reduction is thus one of the
// single-device run's in another order, the longest of max(tokens of the global batch, FFN
// width 4h, vocabulary V) terms, plus the additions across the ranks: training_relative_bound
// with that length holds for parameters and optimizer state after N steps, and one step's
// gradients and loss (no optimizer to double the error) are within kappa gamma_{m+n}(u).
inline std::int64_t tensor_parallel_reduction_terms(std::int64_t tokens, std::int64_t hidden, std::int64_t vocabulary) {
  return std::max({tokens, 4 * hidden, vocabulary});
}
inline double gradient_relative_bound(DataType storage, std::int64_t reduction_terms, int world) {
  const DataType arithmetic = storage == DataType::float64 ? DataType::float64 : DataType::float32;
  return kTrainingConditioning * gamma(static_cast<int>(reduction_terms) + world, unit_roundoff(arithmetic));
}

// Restoring the training state (parallel/state) copies every saved element exactly, so a run
// trained k steps under layout A, saved, restored under layout B and trained n more differs
// from single-device training of k + n steps only by the sums the two layouts regroup: the
// bound of the looser layout's own cases over all k + n steps, at the larger world. The
// tensor-parallel reduction length covers the data-parallel sums too (it is at least the
// global batch's tokens); in 16 bits the tensor-parallel half noise at the larger tp (the
// regrouping alone when neither layout splits tensors), with AdamW's sign flips.
inline double restore_relative_bound(DataType storage, std::int64_t reduction_terms, int world, int tp, int layers,
                                     int steps, bool adamw) {
  if (!is_half(storage)) return training_relative_bound(storage, reduction_terms, world, steps);
  const double noise = tensor_parallel_half_noise(storage, reduction_terms, world, tp, layers);
  return std::max(linear_training_bound(noise, steps), adamw ? sign_flip_bound(noise) : 0.0);
}

// Expert parallelism (and its composition with data parallelism) against the single device
// running each rank's rows as its own pass (the routing groups are the same, so the decisions
// are identical bit for bit): an expert's weight gradient sums over rows that arrived from
// several ranks in one product instead of pass by pass, and the shared parameters' gradients
// are summed over the ranks. Each is one of the single-device sums in another order, the
// longest over the tokens of the global batch, an expert's hidden width or the vocabulary:
// training_relative_bound and gradient_relative_bound with that length.
inline std::int64_t expert_parallel_reduction_terms(std::int64_t tokens, std::int64_t expert_hidden,
                                                    std::int64_t vocabulary) {
  return std::max({tokens, expert_hidden, vocabulary});
}

// One sharded layer against the same layer whole, on the same inputs in the same type: each is
// within the single op's bound of the exact result (float32_op_relative_bound's argument, in
// the type's unit roundoff: stages * sqrt(n) * gamma_n(u) + u), so they differ by at most twice that.
inline double regrouped_op_relative_bound(DataType type, int n, int stages) {
  const double u = unit_roundoff(type);
  return 2 * (stages * std::sqrt(static_cast<double>(n)) * gamma(n, u) + u);
}

// exp of logits shifted by their maximum or logsumexp (softmax, cross-entropy, the router
// z-loss) in float64, for logits up to `largest` in magnitude: x - lse is rounded at the scale
// of `largest` (u |largest| absolute), which exp turns into as much relative error, on top of
// the closed form's `operations` roundings; doubled, as two results are compared.
inline double shifted_exp_relative_bound(double largest, int operations) {
  return 2 * (std::abs(largest) + operations) * unit_roundoff(DataType::float64);
}

// A closed-form formula evaluated in float64 (e.g. Megatron's 72BsLh^2(1 + s/6h + V/12hL))
// against an exact integer count: each of its `operations` roundings errs by at most 2^-53
// relative, so they differ by at most operations * 2^-53 relative (first order).
inline double closed_form_relative_bound(int operations) { return operations * unit_roundoff(DataType::float64); }

}  // namespace parity::tolerance
