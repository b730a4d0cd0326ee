#include "reference/theory/pipeline.hpp"

#include <algorithm>

namespace parity::theory {

double pipeline_bubble_fraction(int p, int m) { return static_cast<double>(p - 1) / (m + p - 1); }

double pipeline_bubble_over_ideal(int p, int m) { return static_cast<double>(p - 1) / m; }

double interleaved_bubble_over_ideal(int p, int m, int v) { return static_cast<double>(p - 1) / (static_cast<double>(v) * m); }

double zb_h1_bubble_over_ideal(int p, int m, double f, double i, double w) {
  return (p - 1) * (f + i - w) / (m * (f + i + w));
}

int gpipe_in_flight(int m) { return m; }

int one_f_one_b_in_flight(int p, int m, int stage) { return std::min(m, p - stage); }

int interleaved_in_flight(int p, int m, int v, int rank) { return std::min(m * v, 2 * (p - rank - 1) + (v - 1) * p + 1); }

}  // namespace parity::theory
