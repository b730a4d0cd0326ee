// The message of the exception a test provokes, for tests that check what a refusal says.
#pragma once

#include <string>

#include "reference/core/error.hpp"

namespace parity::test {

// The message of the E that `f` throws, or "(nothing thrown)" when it returns: the caller then
// fails on the wording it expected.
template <typename E = Error, typename F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  return "(nothing thrown)";
}

}  // namespace parity::test
