// What the fast path's kernels share (compiled by nvcc only, as C++17): errors, the process's
// stream, the 16-bit storage types with their tensor-core instruction, warp reductions.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "reference/core/raise.hpp"
#include "reference/cuda/device.hpp"
#include "reference/fast/ops.hpp"

namespace parity::fast::detail {

inline void check(cudaError_t rc, const char* what, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  if (rc != cudaSuccess) raise_error(std::string("CUDA: ") + cudaGetErrorString(rc), what, file, line);
}
inline void check_launch(const char* kernel, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  check(cudaGetLastError(), kernel, file, line);
}
inline cudaStream_t stream() { return static_cast<cudaStream_t>(::parity::cuda::stream()); }
// Blocks of 256 threads for a grid-stride loop over n elements.
inline unsigned grid_for(std::int64_t n) {
  return static_cast<unsigned>(std::max<std::int64_t>(1, std::min<std::int64_t>((n + 255) / 256, 65535 * 8)));
}

// Row ops (layernorm.cu, kernels.cu's cross-entropy): a block of kRowThreads threads to a row.
constexpr int kRowThreads = 256;
constexpr int kWarpsPerRow = kRowThreads / 32;

// A grid-stride loop over n elements: i runs over the elements of this thread.
#define FAST_GRID_STRIDE(i, n)                                                                          \
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n);                \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)

// The storage type's tensor-core multiply m16n8k16 (row-major A, column-major B, float32
// accumulators) and the packing of two floats into one A or B register (lower column first).
template <typename T> struct Tensor16;
template <> struct Tensor16<__nv_bfloat16> {
  static constexpr Storage storage = Storage::bfloat16;
  static __device__ __forceinline__ void mma(float c[4], const std::uint32_t a[4], const std::uint32_t b[2]) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
  static __device__ __forceinline__ std::uint32_t pack(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<std::uint32_t*>(&v);
  }
  static __device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
  static __device__ __forceinline__ __nv_bfloat16 from_float(float v) { return __float2bfloat16_rn(v); }
};
template <> struct Tensor16<__half> {
  static constexpr Storage storage = Storage::float16;
  static __device__ __forceinline__ void mma(float c[4], const std::uint32_t a[4], const std::uint32_t b[2]) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
  static __device__ __forceinline__ std::uint32_t pack(float lo, float hi) {
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<std::uint32_t*>(&v);
  }
  static __device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
  static __device__ __forceinline__ __half from_float(float v) { return __float2half_rn(v); }
};

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Calls f with the storage type of `storage`.
template <typename F> void with_storage(Storage storage, F&& f) {
  if (storage == Storage::bfloat16)
    f(__nv_bfloat16{});
  else
    f(__half{});
}

}  // namespace parity::fast::detail
