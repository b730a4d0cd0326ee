// Device queries and the float32 reduction kernel, compiled by nvcc.
#include <cuda_runtime.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "reference/cuda/device.hpp"

namespace parity::cuda {
namespace {

void check_cuda(cudaError_t rc, const char* call) {
  if (rc != cudaSuccess) throw std::runtime_error(std::string(call) + ": " + cudaGetErrorString(rc));
}

__global__ void reduce_sum_kernel(float* acc, const float* in, std::size_t count) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < count; i += stride)
    acc[i] += in[i];
}

}  // namespace

bool compiled_with_cuda() { return true; }

std::vector<std::string> device_names() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" error
    return {};
  }
  std::vector<std::string> names;
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, i) == cudaSuccess) names.emplace_back(prop.name);
  }
  return names;
}

void reduce_sum_float32(float* acc, const float* in, std::size_t count) {
  if (count == 0) return;
  const int threads = 256;
  const int blocks = static_cast<int>(std::min<std::size_t>((count + threads - 1) / threads, 65535));
  reduce_sum_kernel<<<blocks, threads>>>(acc, in, count);
  check_cuda(cudaGetLastError(), "reduce_sum_kernel launch");
  check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
}

}  // namespace parity::cuda
