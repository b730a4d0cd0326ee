// Built instead of device.cu when CUDA is off or nvcc is not found.
#include <stdexcept>

#include "reference/cuda/device.hpp"

namespace parity::cuda {

bool compiled_with_cuda() { return false; }
std::vector<std::string> device_names() { return {}; }
void reduce_sum_float32(float*, const float*, std::size_t) {
  throw std::runtime_error("this parity was built without CUDA (configure with nvcc on PATH or -DPARITY_CUDA=ON)");
}

}  // namespace parity::cuda
