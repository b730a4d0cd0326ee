// What the device parts of the op units use (see unit.hpp; compiled by nvcc only, as C++17):
// errors, the process's stream, launch shapes, the storage and arithmetic types, block
// reductions. Simple, correct kernels first: element-wise ops are grid-stride loops; row ops
// (layernorm, softmax, cross-entropy, one attention row) give each row to one thread block,
// which reduces with warp shuffles; matrix multiplies go to cuBLAS. Reductions run in a fixed
// order for a fixed launch shape, so results repeat run to run (no atomics: the token-embedding
// gradient walks the rows in order, one thread per column). Arithmetic is done as on the CPU: in the
// storage type for float32/float64, in float32 for 16-bit storage, rounding the result once.
// Every launch goes on the process's stream and returns without waiting, except those that
// return a value to the host, which wait for the stream.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "reference/core/raise.hpp"
#include "reference/cuda/device.hpp"

namespace parity::ops::device {

using std::int64_t;

// parity::DataType's integer values (checked in unit_host.hpp).
enum DataTypeCode : int { kFloat64 = 0, kFloat32 = 1, kFloat16 = 2, kBFloat16 = 3, kInt32 = 4, kInt64 = 5 };

// --- Errors, stream, launch shapes ------------------------------------------------------------

// Each fails with the caller's file:line.
inline void check(cudaError_t rc, const char* what, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  if (rc != cudaSuccess) raise_error(std::string("CUDA: ") + cudaGetErrorString(rc), what, file, line);
}
inline void check_launch(const char* kernel, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  check(cudaGetLastError(), kernel, file, line);
}

inline cudaStream_t stream() { return static_cast<cudaStream_t>(::parity::cuda::stream()); }

constexpr int kThreads = 256;      // element-wise kernels
constexpr int kRowThreads = 256;   // one block per row (a multiple of 32, at most 1024)
constexpr int kSumThreads = 1024;  // the final reduction of per-row or per-block partial sums

// Blocks for a grid-stride loop over n elements.
inline unsigned blocks_for(int64_t n) {
  const int64_t wanted = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>(wanted, int64_t{65535} * 16)));
}
// Blocks for a block-per-row loop over rows.
inline unsigned row_blocks(int64_t rows) {
  return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>(rows, int64_t{1} << 20)));
}

#define PARITY_GRID_STRIDE(i, n)                                                                      \
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n);              \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)

// --- Storage and arithmetic types -------------------------------------------------------------

// Arithmetic type: the storage type itself for float32/float64, float32 for 16-bit storage.
template <typename T> struct AccOf { using type = T; };
template <> struct AccOf<__half> { using type = float; };
template <> struct AccOf<__nv_bfloat16> { using type = float; };
template <typename T> using Acc = typename AccOf<T>::type;

__device__ inline double load(double v) { return v; }
__device__ inline float load(float v) { return v; }
__device__ inline float load(__half v) { return __half2float(v); }
__device__ inline float load(__nv_bfloat16 v) { return __bfloat162float(v); }

// Rounds to nearest even, as parity::float_to_half / float_to_bf16.
__device__ inline void store(double& dst, double v) { dst = v; }
__device__ inline void store(float& dst, float v) { dst = v; }
__device__ inline void store(__half& dst, float v) { dst = __float2half_rn(v); }
__device__ inline void store(__nv_bfloat16& dst, float v) { dst = __float2bfloat16_rn(v); }

__device__ inline float dexp(float x) { return expf(x); }
__device__ inline double dexp(double x) { return exp(x); }
__device__ inline float dlog(float x) { return logf(x); }
__device__ inline double dlog(double x) { return log(x); }
__device__ inline float dsqrt(float x) { return sqrtf(x); }
__device__ inline double dsqrt(double x) { return sqrt(x); }

template <typename C> __device__ inline C negative_infinity();
template <> __device__ inline float negative_infinity<float>() { return __int_as_float(static_cast<int>(0xff800000u)); }
template <> __device__ inline double negative_infinity<double>() {
  return __longlong_as_double(static_cast<long long>(0xfff0000000000000ull));
}

// f(T{}) for a floating storage type code; f(double{}) or f(float{}) for the ops whose CPU
// versions are float32/float64 only; f(I{}) for an index type code.
template <typename F> void visit_floating(int dtype, const char* op, F&& f) {
  switch (dtype) {
    case kFloat64: f(double{}); return;
    case kFloat32: f(float{}); return;
    case kFloat16: f(__half{}); return;
    case kBFloat16: f(__nv_bfloat16{}); return;
    default: break;
  }
  raise_error(std::string(op) + ": data type " + std::to_string(dtype) + " is not a floating-point type");
}
template <typename F> void visit_wide(int dtype, const char* op, F&& f) {
  if (dtype == kFloat64) return f(double{});
  if (dtype == kFloat32) return f(float{});
  raise_error(std::string(op) + ": supported in float32 and float64 only");
}
template <typename F> void visit_index(int dtype, const char* op, F&& f) {
  if (dtype == kInt32) return f(std::int32_t{});
  if (dtype == kInt64) return f(std::int64_t{});
  raise_error(std::string(op) + ": indices must be int32 or int64");
}

// --- Block reductions -------------------------------------------------------------------------

template <typename C> __device__ inline C warp_sum(C v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}
template <typename C> __device__ inline C warp_max(C v) {
  for (int offset = 16; offset > 0; offset >>= 1) {
    const C other = __shfl_xor_sync(0xffffffffu, v, offset);
    v = other > v ? other : v;
  }
  return v;
}

// Sum (or max) over the block, returned to every thread. Every thread of the block must call
// it; blockDim.x is a multiple of 32. The order is fixed by the block size, so results repeat.
template <typename C> __device__ C block_sum(C v) {
  __shared__ C partial[32];
  const unsigned lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = warp_sum(v);
  __syncthreads();  // an earlier call's readers are done with `partial`
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  return warp_sum(lane < warps ? partial[lane] : C(0));
}
template <typename C> __device__ C block_max(C v) {
  __shared__ C partial[32];
  const unsigned lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  return warp_max(lane < warps ? partial[lane] : negative_infinity<C>());
}

// The two passes over a row of `cols` values that softmax and cross-entropy begin with, each
// result returned to every thread of the block: the row's maximum, and sum_j exp(x_j - m).
template <typename T> __device__ Acc<T> block_row_max(const T* x, int64_t cols) {
  Acc<T> m = negative_infinity<Acc<T>>();
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) m = load(x[j]) > m ? load(x[j]) : m;
  return block_max(m);
}
template <typename T> __device__ Acc<T> block_row_exp_sum(const T* x, int64_t cols, Acc<T> m) {
  Acc<T> s = 0;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) s += dexp(load(x[j]) - m);
  return block_sum(s);
}

// One block sums n values into *out (the losses sum their partial sums in float64).
template <typename C> __global__ void sum_kernel(const C* in, int64_t n, C* out) {
  C s = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) s += in[i];
  s = block_sum(s);
  if (threadIdx.x == 0) *out = s;
}

// The value of one device double, after the work queued before it (waits).
inline double read_double(const double* device_value) {
  double host = 0;
  check(cudaMemcpyAsync(&host, device_value, sizeof(double), cudaMemcpyDeviceToHost, stream()), "cudaMemcpyAsync");
  check(cudaStreamSynchronize(stream()), "cudaStreamSynchronize");
  return host;
}

}  // namespace parity::ops::device
