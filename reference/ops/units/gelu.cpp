// GeLU, tanh form (ops.hpp: gelu_forward, gelu_backward), written as x sigmoid(2u) with
// u = sqrt(2/pi) (x + 0.044715 x^3): the same function with exp, which costs a fraction of tanh;
// the derivative uses 1 - tanh(u)^2 = 4 s (1 - s) with s = sigmoid(2u).
#include "reference/ops/unit.hpp"

namespace parity::ops::device {
// y = gelu(x) and dx = dy gelu'(x) over `count` elements.
void gelu_forward(int dtype, const void* x, void* y, std::int64_t count);
void gelu_backward(int dtype, const void* dy, const void* x, void* dx, std::int64_t count);
}  // namespace parity::ops::device

#ifndef __CUDACC__

#include <array>

#include "reference/simd/simd.hpp"

namespace parity::ops {

namespace {
// The CPU body (vectorised: reference/simd): float32 and float64 in place; 16-bit storage
// widened to float32 a chunk at a time, computed in float32 and each result rounded once.
// `f` takes float or double arrays: (out, in...) pointers and a count.
template <typename F>
void gelu_on_cpu(const char* op, Tensor& out, F f, const Tensor& first, const Tensor* second = nullptr) {
  const std::int64_t n = first.numel();
  visit_floating(op, first, [&](auto tag) {
    using T = decltype(tag);
    using C = Acc<T>;
    if constexpr (std::is_same_v<T, C>) {
      f(out.data<T>(), first.data<T>(), second ? second->data<T>() : static_cast<const T*>(nullptr), n);
    } else {
      constexpr std::int64_t kChunk = 1024;
      std::array<C, kChunk> a{}, b{}, y{};
      for (std::int64_t i = 0; i < n; i += kChunk) {
        const std::int64_t count = std::min(kChunk, n - i);
        widen(first.data<T>() + i, a.data(), count);
        if (second) widen(second->data<T>() + i, b.data(), count);
        f(y.data(), a.data(), second ? b.data() : nullptr, count);
        narrow(y.data(), out.data<T>() + i, count);
      }
    }
  });
}
}  // namespace

void gelu_forward(const Tensor& x, Tensor& y) {
  const char* op = "gelu_forward";
  check_elementwise(op, y, x);
  if constexpr (kCudaBuilt) {
    if (on_device(x)) return device::gelu_forward(code(x), x.raw(), y.raw(), x.numel());
  }
  gelu_on_cpu(op, y, [](auto* out, const auto* in, const auto*, std::int64_t n) {
    simd::gelu_forward(in, out, static_cast<std::size_t>(n));
  }, x);
}

void gelu_backward(const Tensor& dy, const Tensor& x, Tensor& dx) {
  const char* op = "gelu_backward";
  check_elementwise(op, dx, dy, x);
  if constexpr (kCudaBuilt) {
    if (on_device(dy)) return device::gelu_backward(code(x), dy.raw(), x.raw(), dx.raw(), x.numel());
  }
  gelu_on_cpu(op, dx, [](auto* out, const auto* g, const auto* v, std::int64_t n) {
    simd::gelu_backward(g, v, out, static_cast<std::size_t>(n));
  }, dy, &x);
}

}  // namespace parity::ops

#else  // the device part

namespace parity::ops::device {
namespace {

// The CPU's form; 0.7978845608028654 is sqrt(2/pi).
template <typename C> __device__ inline C gelu_inner(C x) {
  return C(0.7978845608028654) * (x + C(0.044715) * x * x * x);
}
template <typename C> __device__ inline C gelu_value(C x) { return x / (C(1) + dexp(C(-2) * gelu_inner(x))); }
template <typename C> __device__ inline C gelu_derivative(C x) {
  const C s = C(1) / (C(1) + dexp(C(-2) * gelu_inner(x)));
  return s + C(2) * x * s * (C(1) - s) * C(0.7978845608028654) * (C(1) + C(3 * 0.044715) * x * x);
}

template <typename T> __global__ void gelu_forward_kernel(const T* x, T* y, int64_t n) {
  PARITY_GRID_STRIDE(i, n) store(y[i], gelu_value(load(x[i])));
}
template <typename T> __global__ void gelu_backward_kernel(const T* dy, const T* x, T* dx, int64_t n) {
  PARITY_GRID_STRIDE(i, n) store(dx[i], load(dy[i]) * gelu_derivative(load(x[i])));
}

}  // namespace

void gelu_forward(int dtype, const void* x, void* y, int64_t count) {
  visit_floating(dtype, "gelu_forward", [&](auto tag) {
    using T = decltype(tag);
    gelu_forward_kernel<T><<<blocks_for(count), kThreads, 0, stream()>>>(static_cast<const T*>(x), static_cast<T*>(y),
                                                                        count);
  });
  check_launch("gelu_forward_kernel");
}

void gelu_backward(int dtype, const void* dy, const void* x, void* dx, int64_t count) {
  visit_floating(dtype, "gelu_backward", [&](auto tag) {
    using T = decltype(tag);
    gelu_backward_kernel<T><<<blocks_for(count), kThreads, 0, stream()>>>(
        static_cast<const T*>(dy), static_cast<const T*>(x), static_cast<T*>(dx), count);
  });
  check_launch("gelu_backward_kernel");
}

}  // namespace parity::ops::device

#endif
