// Every tolerance parity checks against, with its reason. Exact comparisons are used where
// inputs are crafted so the result is exact in the type; elsewhere results are compared with
// a float64 reference under a bound derived from the precision and the reduction length.
#pragma once

#include "reference/tensor/dtype.hpp"

namespace parity::tolerance {

// gamma_n = n u / (1 - n u) (Higham, Accuracy and Stability of Numerical Algorithms, 3.1):
// a sum of n+1 terms computed in precision u, in any order (sequential, tree or ring), is off by
// at most gamma_n * sum|x_i|.
inline double gamma(int n, double u) { return n * u / (1.0 - n * u); }

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

}  // namespace parity::tolerance
