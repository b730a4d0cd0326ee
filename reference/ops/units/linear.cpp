// The linear layer (ops.hpp: linear_forward, linear_backward): its products go through
// ops::matmul on either device; this unit adds the bias (broadcast before an accumulating
// product) and its gradient (column sums).
#include "reference/ops/unit.hpp"

namespace parity::ops::device {
// out[r, :] = row for every r < rows (the bias before a linear layer's accumulating matmul).
void broadcast_rows(int dtype, const void* row, void* out, std::int64_t rows, std::int64_t cols);
// sum[j] += sum over r of x[r, j] (a bias gradient), summed in the arithmetic type, rounded once.
void column_sum_accumulate(int dtype, const void* x, std::int64_t rows, std::int64_t cols, void* sum);
}  // namespace parity::ops::device

#ifndef __CUDACC__

#include <vector>

namespace parity::ops {

namespace {
// Every row of y2 [n, c] set to the bias [c], before the product accumulates onto it.
void broadcast_bias(const char* op, const Tensor& bias, Tensor& y2) {
  const std::int64_t n = y2.dim(0), c = y2.dim(1);
  if constexpr (kCudaBuilt) {
    if (on_device(bias)) return device::broadcast_rows(code(bias), bias.raw(), y2.raw(), n, c);
  }
  visit_floating(op, y2, [&](auto tag) {
    using T = decltype(tag);
    T* out = y2.data<T>();
    const T* bv = bias.data<T>();
    for (std::int64_t r = 0; r < n; ++r) std::copy(bv, bv + c, out + r * c);
  });
}
}  // namespace

void linear_forward(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& y) {
  const char* op = "linear_forward";
  require_defined(op, x, "x");
  require_defined(op, w, "w");
  require_same_space(op, {&x, &w, &bias, &y});
  if (w.rank() != 2) fail(op, "weight " + w.describe() + " must be 2-D [in, out]");
  if (x.dim(-1) != w.dim(0))
    fail(op, "input " + x.describe() + " has last dimension " + std::to_string(x.dim(-1)) + " but weight " +
                 w.describe() + " expects " + std::to_string(w.dim(0)));
  same_type(op, x, w);
  Shape out_shape = x.shape();
  out_shape.back() = w.dim(1);
  require_shape(op, y, out_shape);
  same_type(op, x, y);
  require_floating(op, x);
  if (bias.defined()) {
    same_type(op, w, bias);
    require_shape(op, bias, {w.dim(1)});
  }
  const std::int64_t n = rows_of(x);
  Tensor y2 = y.reshape({n, w.dim(1)});
  const Tensor x2 = x.reshape({n, x.dim(-1)});
  if (bias.defined() && small_product_with_bias(x2, w, bias, y2)) return;  // the same bits in one pass
  if (bias.defined()) broadcast_bias(op, bias, y2);
  matmul(x2, false, w, false, y2, bias.defined());
}

void linear_backward(const Tensor& dy, const Tensor& x, const Tensor& w, Tensor& dx, Tensor& dw, Tensor& dbias) {
  const char* op = "linear_backward";
  require_defined(op, dy, "dy");
  require_defined(op, x, "x");
  require_defined(op, w, "w");
  require_same_space(op, {&dy, &x, &w, &dx, &dw, &dbias});
  if (dy.dim(-1) != w.dim(1) || x.dim(-1) != w.dim(0) || rows_of(dy) != rows_of(x))
    fail(op, "gradient " + dy.describe() + ", input " + x.describe() + " and weight " + w.describe() + " do not match");
  // Each part is skipped when its tensor is undefined (a split backward).
  if (dx.defined()) require_shape(op, dx, x.shape());
  if (dw.defined()) require_shape(op, dw, w.shape());
  if (dbias.defined()) {
    require_shape(op, dbias, {w.dim(1)});
    same_type(op, dy, dbias);
    require_floating(op, dy);
  }
  const std::int64_t n = rows_of(x), c = w.dim(1);
  const Tensor dy2 = dy.reshape({n, c});
  if (dx.defined()) {
    Tensor dx2 = dx.reshape({n, w.dim(0)});
    matmul(dy2, false, w, true, dx2, false);
  }
  if (dw.defined()) matmul(x.reshape({n, w.dim(0)}), true, dy2, false, dw, true);
  if (!dbias.defined()) return;
  if constexpr (kCudaBuilt) {
    if (on_device(dy)) return device::column_sum_accumulate(code(dy), dy2.raw(), n, c, dbias.raw());
  }
  visit_floating(op, dy, [&](auto tag) {
    using T = decltype(tag);
    // The column sums, rows in order, then onto dbias (vectorised across the columns for float32
    // and float64; the order of each column's sum is the scalar loop's).
    std::vector<Acc<T>> sum(static_cast<std::size_t>(c), Acc<T>(0));
    const T* g = dy2.data<T>();
    T* db = dbias.data<T>();
    if constexpr (std::is_same_v<T, Acc<T>>) {
      simd::accumulate_rows(g, static_cast<std::size_t>(n), static_cast<std::size_t>(c), sum.data());
      simd::accumulate_rows(sum.data(), 1, static_cast<std::size_t>(c), db);
    } else {
      for (std::int64_t r = 0; r < n; ++r)
        for (std::int64_t j = 0; j < c; ++j) sum[static_cast<std::size_t>(j)] += load(g[r * c + j]);
      for (std::int64_t j = 0; j < c; ++j) db[j] = store<T>(load(db[j]) + sum[static_cast<std::size_t>(j)]);
    }
  });
}

}  // namespace parity::ops

#else  // the device part

namespace parity::ops::device {
namespace {

template <typename T> __global__ void broadcast_rows_kernel(const T* row, T* out, int64_t count, int64_t cols) {
  PARITY_GRID_STRIDE(i, count) out[i] = row[i % cols];
}

template <typename T> __global__ void column_sum_accumulate_kernel(const T* x, int64_t rows, int64_t cols, T* sum) {
  using C = Acc<T>;
  PARITY_GRID_STRIDE(j, cols) {
    C s = 0;
    for (int64_t r = 0; r < rows; ++r) s += load(x[r * cols + j]);
    store(sum[j], load(sum[j]) + s);
  }
}

}  // namespace

void broadcast_rows(int dtype, const void* row, void* out, int64_t rows, int64_t cols) {
  visit_floating(dtype, "broadcast_rows", [&](auto tag) {
    using T = decltype(tag);
    broadcast_rows_kernel<T><<<blocks_for(rows * cols), kThreads, 0, stream()>>>(static_cast<const T*>(row),
                                                                                 static_cast<T*>(out), rows * cols, cols);
  });
  check_launch("broadcast_rows_kernel");
}

void column_sum_accumulate(int dtype, const void* x, int64_t rows, int64_t cols, void* sum) {
  visit_floating(dtype, "column_sum_accumulate", [&](auto tag) {
    using T = decltype(tag);
    column_sum_accumulate_kernel<T><<<blocks_for(cols), kThreads, 0, stream()>>>(static_cast<const T*>(x), rows, cols,
                                                                                static_cast<T*>(sum));
  });
  check_launch("column_sum_accumulate_kernel");
}

}  // namespace parity::ops::device

#endif
