// LayerNorm over the last dimension (ops.hpp: layernorm_forward, layernorm_backward):
// y = (x - mean) rstd gamma + beta, with the row statistics saved for backward.
#include "reference/ops/unit.hpp"

namespace parity::ops::device {
// mean and rstd are float64 for float64 x, else float32.
void layernorm_forward(int dtype, const void* x, const void* gamma, const void* beta, void* y, void* mean, void* rstd,
                       std::int64_t rows, std::int64_t cols, double eps);
// dx overwritten; dgamma, dbeta accumulated (+=). A split backward leaves out one part (null
// pointers): dx, or dgamma with dbeta.
void layernorm_backward(int dtype, const void* dy, const void* x, const void* gamma, const void* mean,
                        const void* rstd, void* dx, void* dgamma, void* dbeta, std::int64_t rows, std::int64_t cols);
}  // namespace parity::ops::device

#ifndef __CUDACC__

#include <vector>

namespace parity::ops {

namespace {
// mean and rstd: float64 for float64 x, else float32.
void require_statistics(const char* op, const Tensor& x, const Tensor& mean, const Tensor& rstd) {
  const DataType stat = x.dtype() == DataType::float64 ? DataType::float64 : DataType::float32;
  if (!mean.defined() || !rstd.defined() || mean.dtype() != stat || rstd.dtype() != stat)
    fail(op, "statistics " + mean.describe() + " and " + rstd.describe() + " must be " + std::string(name_of(stat)) +
                 " for " + x.describe());
}
}  // namespace

void layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& y, Tensor& mean,
                       Tensor& rstd) {
  const char* op = "layernorm_forward";
  require_defined(op, x, "x");
  const std::int64_t c = x.dim(-1), n = rows_of(x);
  same_type(op, x, gamma);
  same_type(op, x, beta);
  require_shape(op, gamma, {c});
  require_shape(op, beta, {c});
  same_shape(op, x, y);
  require_statistics(op, x, mean, rstd);
  require_shape(op, mean, {n});
  require_shape(op, rstd, {n});
  require_same_space(op, {&x, &gamma, &beta, &y, &mean, &rstd});
  require_floating(op, x);
  if constexpr (kCudaBuilt) {
    if (on_device(x))
      return device::layernorm_forward(code(x), x.raw(), gamma.raw(), beta.raw(), y.raw(), mean.raw(), rstd.raw(), n,
                                       c, kLayerNormEps);
  }
  visit_floating(op, x, [&](auto tag) {
    using T = decltype(tag);
    using C = Acc<T>;
    const T* in = x.data<T>();
    const T* g = gamma.data<T>();
    const T* b = beta.data<T>();
    T* out = y.data<T>();
    C* mu = mean.data<C>();
    C* rs = rstd.data<C>();
    // Vectorised (reference/simd, its sums in the blocked order); 16-bit storage through float32
    // rows, gamma and beta widened once.
    const std::size_t width = static_cast<std::size_t>(c);
    std::vector<C> wide(std::is_same_v<T, C> ? 0 : 4 * width);
    const C* gw = reinterpret_cast<const C*>(g);
    const C* bw = reinterpret_cast<const C*>(b);
    if constexpr (!std::is_same_v<T, C>) {
      widen(g, wide.data() + 2 * width, c);
      widen(b, wide.data() + 3 * width, c);
      gw = wide.data() + 2 * width;
      bw = wide.data() + 3 * width;
    }
    for (std::int64_t r = 0; r < n; ++r) {
      const C* row = reinterpret_cast<const C*>(in + r * c);
      C* yr = reinterpret_cast<C*>(out + r * c);
      if constexpr (!std::is_same_v<T, C>) {
        widen(in + r * c, wide.data(), c);
        row = wide.data();
        yr = wide.data() + width;
      }
      const C m = simd::row_sum(row, width) / static_cast<C>(c);
      const C var = simd::squared_deviation_sum(row, width, m) / static_cast<C>(c);
      const C s = C(1) / std::sqrt(var + static_cast<C>(kLayerNormEps));
      simd::layernorm_apply(row, gw, bw, yr, width, m, s);
      if constexpr (!std::is_same_v<T, C>) narrow(yr, out + r * c, c);
      mu[r] = m;
      rs[r] = s;
    }
  });
}

void layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                        const Tensor& rstd, Tensor& dx, Tensor& dgamma, Tensor& dbeta) {
  const char* op = "layernorm_backward";
  require_defined(op, x, "x");
  const std::int64_t c = x.dim(-1), n = rows_of(x);
  // Either part may be left out (undefined): dx, or dgamma with dbeta (a split backward).
  const bool input_part = dx.defined(), weight_part = dgamma.defined() || dbeta.defined();
  same_shape(op, x, dy);
  if (input_part) same_shape(op, x, dx);
  if (weight_part) {
    same_shape(op, gamma, dgamma);
    same_shape(op, gamma, dbeta);
  }
  same_type(op, x, gamma);
  require_shape(op, gamma, {c});
  require_shape(op, mean, {n});
  require_shape(op, rstd, {n});
  require_statistics(op, x, mean, rstd);
  require_same_space(op, {&dy, &x, &gamma, &mean, &rstd, &dx, &dgamma, &dbeta});
  require_floating(op, x);
  if constexpr (kCudaBuilt) {
    if (on_device(dy))
      return device::layernorm_backward(code(x), dy.raw(), x.raw(), gamma.raw(), mean.raw(), rstd.raw(), dx.raw(),
                                        dgamma.raw(), dbeta.raw(), n, c);
  }
  visit_floating(op, x, [&](auto tag) {
    using T = decltype(tag);
    using C = Acc<T>;
    const T* in = x.data<T>();
    const T* g = gamma.data<T>();
    const T* grad = dy.data<T>();
    const C* mu = mean.data<C>();
    const C* rs = rstd.data<C>();
    T* out = input_part ? dx.data<T>() : nullptr;
    const std::size_t width = static_cast<std::size_t>(c);
    std::vector<C> dg(width, C(0)), db(width, C(0));
    // Vectorised (reference/simd, its sums in the blocked order); 16-bit storage through float32
    // rows, gamma widened once.
    std::vector<C> wide(std::is_same_v<T, C> ? 0 : 4 * width);
    const C* gw = reinterpret_cast<const C*>(g);
    if constexpr (!std::is_same_v<T, C>) {
      widen(g, wide.data() + 3 * width, c);
      gw = wide.data() + 3 * width;
    }
    for (std::int64_t r = 0; r < n; ++r) {
      const C* xr = reinterpret_cast<const C*>(in + r * c);
      const C* gr = reinterpret_cast<const C*>(grad + r * c);
      C* dr = input_part ? reinterpret_cast<C*>(out + r * c) : nullptr;
      if constexpr (!std::is_same_v<T, C>) {
        widen(in + r * c, wide.data(), c);
        widen(grad + r * c, wide.data() + width, c);
        xr = wide.data();
        gr = wide.data() + width;
        dr = wide.data() + 2 * width;
      }
      // dxhat = dy * gamma; dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)).
      C sums[2] = {0, 0};
      simd::layernorm_backward_sums(gr, xr, gw, width, mu[r], rs[r], input_part ? sums : nullptr,
                                    weight_part ? dg.data() : nullptr, weight_part ? db.data() : nullptr);
      if (!input_part) continue;
      simd::layernorm_backward_dx(gr, xr, gw, dr, width, mu[r], rs[r], sums[0] / static_cast<C>(c),
                                  sums[1] / static_cast<C>(c));
      if constexpr (!std::is_same_v<T, C>) narrow(dr, out + r * c, c);
    }
    if (!weight_part) return;
    T* pg = dgamma.data<T>();
    T* pb = dbeta.data<T>();
    for (std::int64_t j = 0; j < c; ++j) {
      pg[j] = store<T>(load(pg[j]) + dg[static_cast<std::size_t>(j)]);
      pb[j] = store<T>(load(pb[j]) + db[static_cast<std::size_t>(j)]);
    }
  });
}

}  // namespace parity::ops

#else  // the device part

namespace parity::ops::device {
namespace {

template <typename T>
__global__ void layernorm_forward_kernel(const T* x, const T* gamma, const T* beta, T* y, Acc<T>* mean, Acc<T>* rstd,
                                         int64_t rows, int64_t cols, Acc<T> eps) {
  using C = Acc<T>;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* in = x + r * cols;
    C s = 0;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) s += load(in[j]);
    const C m = block_sum(s) / static_cast<C>(cols);
    C v = 0;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      const C d = load(in[j]) - m;
      v += d * d;
    }
    const C var = block_sum(v) / static_cast<C>(cols);
    const C rs = C(1) / dsqrt(var + eps);
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x)
      store(y[r * cols + j], (load(in[j]) - m) * rs * load(gamma[j]) + load(beta[j]));
    if (threadIdx.x == 0) {
      mean[r] = m;
      rstd[r] = rs;
    }
  }
}

// dx = rstd (dxhat - mean(dxhat) - xhat mean(dxhat xhat)) with dxhat = dy gamma.
template <typename T>
__global__ void layernorm_backward_dx_kernel(const T* dy, const T* x, const T* gamma, const Acc<T>* mean,
                                             const Acc<T>* rstd, T* dx, int64_t rows, int64_t cols) {
  using C = Acc<T>;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const C mu = mean[r], rs = rstd[r];
    C a = 0, b = 0;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      const C xhat = (load(x[r * cols + j]) - mu) * rs;
      const C dxhat = load(dy[r * cols + j]) * load(gamma[j]);
      a += dxhat;
      b += dxhat * xhat;
    }
    const C mean_dxhat = block_sum(a) / static_cast<C>(cols);
    const C mean_dxhat_xhat = block_sum(b) / static_cast<C>(cols);
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      const C xhat = (load(x[r * cols + j]) - mu) * rs;
      const C dxhat = load(dy[r * cols + j]) * load(gamma[j]);
      store(dx[r * cols + j], rs * (dxhat - mean_dxhat - xhat * mean_dxhat_xhat));
    }
  }
}

// dgamma[j] += sum_r dy xhat, dbeta[j] += sum_r dy: one thread per column, no atomics.
template <typename T>
__global__ void layernorm_backward_params_kernel(const T* dy, const T* x, const Acc<T>* mean, const Acc<T>* rstd,
                                                 T* dgamma, T* dbeta, int64_t rows, int64_t cols) {
  using C = Acc<T>;
  PARITY_GRID_STRIDE(j, cols) {
    C g = 0, b = 0;
    for (int64_t r = 0; r < rows; ++r) {
      const C grad = load(dy[r * cols + j]);
      g += grad * ((load(x[r * cols + j]) - mean[r]) * rstd[r]);
      b += grad;
    }
    store(dgamma[j], load(dgamma[j]) + g);
    store(dbeta[j], load(dbeta[j]) + b);
  }
}

}  // namespace

void layernorm_forward(int dtype, const void* x, const void* gamma, const void* beta, void* y, void* mean, void* rstd,
                       int64_t rows, int64_t cols, double eps) {
  visit_floating(dtype, "layernorm_forward", [&](auto tag) {
    using T = decltype(tag);
    using C = Acc<T>;
    layernorm_forward_kernel<T><<<row_blocks(rows), kRowThreads, 0, stream()>>>(
        static_cast<const T*>(x), static_cast<const T*>(gamma), static_cast<const T*>(beta), static_cast<T*>(y),
        static_cast<C*>(mean), static_cast<C*>(rstd), rows, cols, static_cast<C>(eps));
  });
  check_launch("layernorm_forward_kernel");
}

void layernorm_backward(int dtype, const void* dy, const void* x, const void* gamma, const void* mean,
                        const void* rstd, void* dx, void* dgamma, void* dbeta, int64_t rows, int64_t cols) {
  visit_floating(dtype, "layernorm_backward", [&](auto tag) {
    using T = decltype(tag);
    using C = Acc<T>;
    if (dx != nullptr) {
      layernorm_backward_dx_kernel<T><<<row_blocks(rows), kRowThreads, 0, stream()>>>(
          static_cast<const T*>(dy), static_cast<const T*>(x), static_cast<const T*>(gamma),
          static_cast<const C*>(mean), static_cast<const C*>(rstd), static_cast<T*>(dx), rows, cols);
      check_launch("layernorm_backward_dx_kernel");
    }
    if (dgamma != nullptr) {
      layernorm_backward_params_kernel<T><<<blocks_for(cols), kThreads, 0, stream()>>>(
          static_cast<const T*>(dy), static_cast<const T*>(x), static_cast<const C*>(mean),
          static_cast<const C*>(rstd), static_cast<T*>(dgamma), static_cast<T*>(dbeta), rows, cols);
      check_launch("layernorm_backward_params_kernel");
    }
  });
}

}  // namespace parity::ops::device

#endif
