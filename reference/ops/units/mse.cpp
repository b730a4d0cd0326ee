// Mean squared error (ops.hpp: mse_forward, mse_backward): sum (p - t)^2 / normalizer, the
// squares summed in float64; backward 2 (p - t) / normalizer.
#include "reference/ops/unit.hpp"

namespace parity::ops::device {
// Doubles of scratch mse_forward needs: up to 1024 block sums and their total.
inline constexpr std::int64_t kMseScratch = 1025;
// sum (p - t)^2 / normalizer, the squares summed in float64 in a fixed order (waits).
double mse_forward(int dtype, const void* prediction, const void* target, std::int64_t count, double normalizer,
                   double* scratch);
// dp = scale (p - t).
void mse_backward(int dtype, const void* prediction, const void* target, void* dprediction, std::int64_t count,
                  double scale);
}  // namespace parity::ops::device

#ifndef __CUDACC__

namespace parity::ops {

double mse_forward(const Tensor& prediction, const Tensor& target, double normalizer) {
  const char* op = "mse_forward";
  require_defined(op, prediction, "prediction");
  same_shape(op, prediction, target);
  if (!(normalizer > 0)) fail(op, "normalizer must be positive");
  require_same_space(op, {&prediction, &target});
  require_floating(op, prediction);
  if constexpr (kCudaBuilt) {
    if (on_device(prediction)) {
      Tensor sums = device_scratch("mse.block_sums", {device::kMseScratch}, DataType::float64);
      return device::mse_forward(code(prediction), prediction.raw(), target.raw(), prediction.numel(), normalizer,
                                 static_cast<double*>(sums.raw()));
    }
  }
  return visit_floating(op, prediction, [&](auto tag) {
    using T = decltype(tag);
    const T* p = prediction.data<T>();
    const T* t = target.data<T>();
    double total = 0;
    for (std::int64_t i = 0; i < prediction.numel(); ++i) {
      const auto d = static_cast<double>(load(p[i]) - load(t[i]));
      total += d * d;
    }
    return total / normalizer;
  });
}

void mse_backward(const Tensor& prediction, const Tensor& target, double normalizer, Tensor& dprediction) {
  const char* op = "mse_backward";
  if (!(normalizer > 0)) fail(op, "normalizer must be positive");
  check_elementwise(op, dprediction, prediction, target);
  const double scale = 2.0 / normalizer;
  if constexpr (kCudaBuilt) {
    if (on_device(prediction))
      return device::mse_backward(code(prediction), prediction.raw(), target.raw(), dprediction.raw(),
                                  prediction.numel(), scale);
  }
  elementwise_on_cpu(op, dprediction, [scale](auto p, auto t) { return static_cast<decltype(p)>(scale) * (p - t); },
                     prediction, target);
}

}  // namespace parity::ops

#else  // the device part

namespace parity::ops::device {
namespace {

constexpr int kMaxMseBlocks = static_cast<int>(kMseScratch) - 1;
static_assert(kMaxMseBlocks == 1024, "mse_forward's scratch holds 1024 block sums and the total");

// Block sums of (p - t)^2 in float64, one per block.
template <typename T> __global__ void squared_error_kernel(const T* p, const T* t, int64_t n, double* block_sums) {
  double s = 0;
  PARITY_GRID_STRIDE(i, n) {
    const auto d = static_cast<double>(load(p[i]) - load(t[i]));
    s += d * d;
  }
  s = block_sum(s);
  if (threadIdx.x == 0) block_sums[blockIdx.x] = s;
}

template <typename T> __global__ void mse_backward_kernel(const T* p, const T* t, T* dp, int64_t n, Acc<T> scale) {
  PARITY_GRID_STRIDE(i, n) store(dp[i], scale * (load(p[i]) - load(t[i])));
}

}  // namespace

double mse_forward(int dtype, const void* prediction, const void* target, int64_t count, double normalizer,
                   double* scratch) {
  const unsigned blocks = std::min<unsigned>(blocks_for(count), kMaxMseBlocks);
  visit_floating(dtype, "mse_forward", [&](auto tag) {
    using F = decltype(tag);
    squared_error_kernel<F><<<blocks, kThreads, 0, stream()>>>(static_cast<const F*>(prediction),
                                                              static_cast<const F*>(target), count, scratch);
  });
  check_launch("squared_error_kernel");
  sum_kernel<double><<<1, kSumThreads, 0, stream()>>>(scratch, blocks, scratch + kMaxMseBlocks);
  check_launch("sum_kernel");
  return read_double(scratch + kMaxMseBlocks) / normalizer;
}

void mse_backward(int dtype, const void* prediction, const void* target, void* dprediction, int64_t count,
                  double scale) {
  visit_floating(dtype, "mse_backward", [&](auto tag) {
    using F = decltype(tag);
    mse_backward_kernel<F><<<blocks_for(count), kThreads, 0, stream()>>>(
        static_cast<const F*>(prediction), static_cast<const F*>(target), static_cast<F*>(dprediction), count,
        static_cast<Acc<F>>(scale));
  });
  check_launch("mse_backward_kernel");
}

}  // namespace parity::ops::device

#endif
