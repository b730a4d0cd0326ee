// Softmax over the last dimension (ops.hpp: softmax_forward, softmax_backward); backward
// dx = y (dy - sum(dy y)) per row.
#include "reference/ops/unit.hpp"

namespace parity::ops::device {
void softmax_forward(int dtype, const void* x, void* y, std::int64_t rows, std::int64_t cols);
void softmax_backward(int dtype, const void* dy, const void* y, void* dx, std::int64_t rows, std::int64_t cols);
}  // namespace parity::ops::device

#ifndef __CUDACC__

#include <vector>

namespace parity::ops {

void softmax_forward(const Tensor& x, Tensor& y) {
  const char* op = "softmax_forward";
  require_defined(op, x, "x");
  same_shape(op, x, y);
  require_same_space(op, {&x, &y});
  require_floating(op, x);
  const std::int64_t c = x.dim(-1), n = rows_of(x);
  if constexpr (kCudaBuilt) {
    if (on_device(x)) return device::softmax_forward(code(x), x.raw(), y.raw(), n, c);
  }
  visit_floating(op, x, [&](auto tag) {
    using T = decltype(tag);
    using C = Acc<T>;
    const T* in = x.data<T>();
    T* out = y.data<T>();
    std::vector<C> buffer(std::is_same_v<T, C> ? 0 : static_cast<std::size_t>(c));
    for (std::int64_t r = 0; r < n; ++r) {
      // float32 and float64 from the input into the output; 16-bit storage through a float32 row.
      if constexpr (std::is_same_v<T, C>) {
        softmax_row(in + r * c, out + r * c, c, c);
      } else {
        widen(in + r * c, buffer.data(), c);
        softmax_row(buffer.data(), buffer.data(), c, c);
        narrow(buffer.data(), out + r * c, c);
      }
    }
  });
}

void softmax_backward(const Tensor& dy, const Tensor& y, Tensor& dx) {
  const char* op = "softmax_backward";
  require_defined(op, y, "y");
  same_shape(op, y, dy);
  same_shape(op, y, dx);
  require_same_space(op, {&dy, &y, &dx});
  require_floating(op, y);
  const std::int64_t c = y.dim(-1), n = rows_of(y);
  if constexpr (kCudaBuilt) {
    if (on_device(dy)) return device::softmax_backward(code(y), dy.raw(), y.raw(), dx.raw(), n, c);
  }
  visit_floating(op, y, [&](auto tag) {
    using T = decltype(tag);
    using C = Acc<T>;
    const T* py = y.data<T>();
    const T* g = dy.data<T>();
    T* out = dx.data<T>();
    // dx = y * (dy - sum(dy * y)); 16-bit storage through float32 rows.
    std::vector<C> rows(std::is_same_v<T, C> ? 0 : 3 * static_cast<std::size_t>(c));
    for (std::int64_t r = 0; r < n; ++r) {
      const C* gr = reinterpret_cast<const C*>(g + r * c);
      const C* yr = reinterpret_cast<const C*>(py + r * c);
      C* dr = reinterpret_cast<C*>(out + r * c);
      if constexpr (!std::is_same_v<T, C>) {
        widen(g + r * c, rows.data(), c);
        widen(py + r * c, rows.data() + c, c);
        gr = rows.data();
        yr = rows.data() + c;
        dr = rows.data() + 2 * c;
      }
      const C dot = simd::row_dot(gr, yr, static_cast<std::size_t>(c));
      simd::softmax_backward_apply(gr, yr, dr, static_cast<std::size_t>(c), dot);
      if constexpr (!std::is_same_v<T, C>) narrow(dr, out + r * c, c);
    }
  });
}

}  // namespace parity::ops

#else  // the device part

namespace parity::ops::device {
namespace {

template <typename T> __global__ void softmax_forward_kernel(const T* x, T* y, int64_t rows, int64_t cols) {
  using C = Acc<T>;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* in = x + r * cols;
    const C m = block_row_max(in, cols);
    const C inv = C(1) / block_row_exp_sum(in, cols, m);
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) store(y[r * cols + j], dexp(load(in[j]) - m) * inv);
  }
}

template <typename T>
__global__ void softmax_backward_kernel(const T* dy, const T* y, T* dx, int64_t rows, int64_t cols) {
  using C = Acc<T>;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    C d = 0;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) d += load(dy[r * cols + j]) * load(y[r * cols + j]);
    const C dot = block_sum(d);
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x)
      store(dx[r * cols + j], load(y[r * cols + j]) * (load(dy[r * cols + j]) - dot));
  }
}

}  // namespace

void softmax_forward(int dtype, const void* x, void* y, int64_t rows, int64_t cols) {
  visit_floating(dtype, "softmax_forward", [&](auto tag) {
    using T = decltype(tag);
    softmax_forward_kernel<T><<<row_blocks(rows), kRowThreads, 0, stream()>>>(static_cast<const T*>(x),
                                                                              static_cast<T*>(y), rows, cols);
  });
  check_launch("softmax_forward_kernel");
}

void softmax_backward(int dtype, const void* dy, const void* y, void* dx, int64_t rows, int64_t cols) {
  visit_floating(dtype, "softmax_backward", [&](auto tag) {
    using T = decltype(tag);
    softmax_backward_kernel<T><<<row_blocks(rows), kRowThreads, 0, stream()>>>(
        static_cast<const T*>(dy), static_cast<const T*>(y), static_cast<T*>(dx), rows, cols);
  });
  check_launch("softmax_backward_kernel");
}

}  // namespace parity::ops::device

#endif
