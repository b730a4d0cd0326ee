// Closed forms of pipeline parallelism: p stages (ranks), m micro-batches, every stage's
// forward and backward taking the same time. "Bubble fraction" is idle time over the step
// time of a rank; "bubble over ideal" is idle time over the busy time m (F + B).
//   GPipe and 1F1B (PipeDream-Flush, Narayanan et al. 2019/2021):
//       fraction (p-1)/(m+p-1), over ideal (p-1)/m;
//   interleaved 1F1B, v chunks per rank: over ideal (p-1)/(v m);
//   ZB-H1 (Qi et al. 2023), backward split into I (input gradient) and W (weight gradient):
//       bubble (p-1)(F + I - W), which is (p-1)/(3m) over ideal when F = I = W.
// Activations in flight (micro-batches whose forward ran and whose backward, B or I, has not)
// on stage s: GPipe m; 1F1B min(m, p - s).
// One synchronous step cannot do better than (p-1) F of idle per rank: the last stage cannot
// start before p-1 forwards have passed, nor the first end before the last backward comes back.
// ZB-H1 reaches it when F = I = W; Qi et al.'s zero-bubble ZB-H2 also overlaps consecutive
// steps (optimizer post-validation), which one step does not show.
#pragma once

namespace parity::theory {

double pipeline_bubble_fraction(int p, int m);                  // GPipe, 1F1B
double pipeline_bubble_over_ideal(int p, int m);                // GPipe, 1F1B
double interleaved_bubble_over_ideal(int p, int m, int v);
// ZB-H1 with forward, input-gradient and weight-gradient times f, i, w per micro-batch:
// bubble (p-1)(f + i - w) over the ideal m (f + i + w).
double zb_h1_bubble_over_ideal(int p, int m, double f, double i, double w);
int gpipe_in_flight(int m);
int one_f_one_b_in_flight(int p, int m, int stage);
// Interleaved 1F1B, in chunk activations (each 1/v of a stage's) on rank r: its warm-up
// forwards 2(p - r - 1) + (v - 1) p, plus the one in the steady state, at most m v. On rank 0
// that is p v + p - 1 chunks, p (1 + (p-1)/(p v)) stages' worth: Narayanan et al.'s factor.
int interleaved_in_flight(int p, int m, int v, int rank);

}  // namespace parity::theory
