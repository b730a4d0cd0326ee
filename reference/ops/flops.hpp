// FLOP counting: the ops add what they compute to a per-thread counter, so measured counts can
// be checked against the analytic formulas in reference/theory/model.hpp. Only matrix
// multiplies are counted (2*m*n*k each, including the attention score and weighted-sum
// products): the formulas count exactly these, and every other op is O(elements).
#pragma once

#include <cstdint>

namespace parity::ops {

struct FlopCounter {
  std::int64_t matmul = 0;
};

// The calling thread's counter (an inline function's static: one per thread in the program).
inline FlopCounter& flop_counter() {
  thread_local FlopCounter counter;
  return counter;
}

// Matmul FLOPs counted on this thread during the scope's life.
class FlopScope {
 public:
  FlopScope() : start_(flop_counter().matmul) {}
  std::int64_t matmul() const { return flop_counter().matmul - start_; }

 private:
  std::int64_t start_;
};

}  // namespace parity::ops
