// The residual addition (ops.hpp: add_forward, accumulate): y = a + b; its backward passes dy to
// both operands, so there is no add_backward.
#include "reference/ops/unit.hpp"

namespace parity::ops::device {
// y = a + b over `count` elements; y may be a (accumulate).
void add(int dtype, const void* a, const void* b, void* y, std::int64_t count);
}  // namespace parity::ops::device

#ifndef __CUDACC__

namespace parity::ops {

void add_forward(const Tensor& a, const Tensor& b, Tensor& y) {
  const char* op = "add_forward";
  check_elementwise(op, y, a, b);
  if constexpr (kCudaBuilt) {
    if (on_device(a)) return device::add(code(a), a.raw(), b.raw(), y.raw(), a.numel());
  }
  elementwise_on_cpu(op, y, [](auto u, auto v) { return u + v; }, a, b);
}

void accumulate(Tensor& y, const Tensor& x) { add_forward(y, x, y); }

}  // namespace parity::ops

#else  // the device part

namespace parity::ops::device {
namespace {
// y may alias a: each element is read before it is written, by the same thread.
template <typename T> __global__ void add_kernel(const T* a, const T* b, T* y, int64_t n) {
  PARITY_GRID_STRIDE(i, n) store(y[i], load(a[i]) + load(b[i]));
}
}  // namespace

void add(int dtype, const void* a, const void* b, void* y, int64_t count) {
  visit_floating(dtype, "add", [&](auto tag) {
    using T = decltype(tag);
    add_kernel<T><<<blocks_for(count), kThreads, 0, stream()>>>(static_cast<const T*>(a), static_cast<const T*>(b),
                                                               static_cast<T*>(y), count);
  });
  check_launch("add_kernel");
}

}  // namespace parity::ops::device

#endif
