// Throwing parity::Error from code compiled as C++17 (nvcc: reference/cuda/, the CUDA op
// kernels), which cannot see error.hpp's std::source_location: the message still names the
// rank, host, call and the caller's file:line.
#pragma once

#include <string>

namespace parity {

// Throws Error(message, call) located at file:line. The defaults take the caller's location
// (GCC, Clang and nvcc's front end all provide the builtins).
[[noreturn]] void raise_error(const std::string& message, const std::string& call = "",
                              const char* file = __builtin_FILE(), int line = __builtin_LINE());

}  // namespace parity
