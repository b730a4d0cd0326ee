// CUDA devices visible to this process. Compiled with nvcc where it is found; elsewhere the
// stubs report no device, so the rest of parity never needs #ifdefs. Kept to C++17 and the
// standard library so nvcc compiles it with any host compiler.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace parity::cuda {

bool compiled_with_cuda();
// Names of the visible GPUs ("NVIDIA H100 80GB HBM3"); empty without a driver or device.
std::vector<std::string> device_names();
// acc[i] += in[i] on device float32 buffers (the reduction reference algorithms apply to
// received chunks); throws std::runtime_error when CUDA is unavailable.
void reduce_sum_float32(float* acc, const float* in, std::size_t count);

}  // namespace parity::cuda
