// CPU ops (see cpu.hpp). Kernels are templates over the storage type T; arithmetic is done in
// Acc<T>: T itself for float32/float64, float32 for float16/bfloat16 storage.
#include "reference/ops/cpu.hpp"

#include <cblas.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <mutex>
#include <numbers>
#include <string>
#include <tuple>
#include <vector>

#include "reference/core/error.hpp"
#include "reference/ops/cuda.hpp"
#include "reference/ops/checks.hpp"
#include "reference/ops/flops.hpp"
#include "reference/tensor/random.hpp"

#ifdef PARITY_OPENBLAS
extern "C" void openblas_set_num_threads(int);
#endif

namespace parity::ops {

FlopCounter& flop_counter() {
  thread_local FlopCounter counter;
  return counter;
}

void configure_blas_once() {
  static std::once_flag once;
  std::call_once(once, [] {
#ifdef PARITY_OPENBLAS
    openblas_set_num_threads(1);
#endif
  });
}

const char* blas_name() {
#ifdef PARITY_OPENBLAS
  return "OpenBLAS";
#else
  return "BLAS";
#endif
}

namespace {

template <typename T> struct AccOf { using type = T; };
template <> struct AccOf<float16_t> { using type = float; };
template <> struct AccOf<bfloat16_t> { using type = float; };
template <typename T> using Acc = typename AccOf<T>::type;

template <typename T> inline Acc<T> load(T v) { return v; }
template <> inline float load(float16_t v) { return half_to_float(v); }
template <> inline float load(bfloat16_t v) { return bf16_to_float(v); }
template <typename T> inline T store(Acc<T> v) { return v; }
template <> inline float16_t store<float16_t>(float v) { return float_to_half(v); }
template <> inline bfloat16_t store<bfloat16_t>(float v) { return float_to_bf16(v); }

// Calls f(T{}) for a floating storage type; refuses integer tensors.
template <typename F> decltype(auto) visit_floating(const char* op, const Tensor& t, F&& f) {
  require_defined(op, t, "input");
  if (!is_floating(t.dtype())) fail(op, t.describe() + ": needs a floating-point tensor");
  switch (t.dtype()) {
    case DataType::float64: return f(double{});
    case DataType::float16: return f(float16_t{});
    case DataType::bfloat16: return f(bfloat16_t{});
    default: break;
  }
  return f(float{});
}

std::int64_t index_at(const Tensor& t, std::int64_t i) {
  return t.dtype() == DataType::int32 ? t.data<std::int32_t>()[i] : t.data<std::int64_t>()[i];
}

// Row-major GEMM C = alpha op(A) op(B) + beta C with leading dimensions; counts 2mnk FLOPs.
void gemm(bool ta, bool tb, int m, int n, int k, double alpha, const double* a, int lda, const double* b, int ldb,
          double beta, double* c, int ldc) {
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda,
              b, ldb, beta, c, ldc);
  flop_counter().matmul += 2LL * m * n * k;
}
void gemm(bool ta, bool tb, int m, int n, int k, float alpha, const float* a, int lda, const float* b, int ldb,
          float beta, float* c, int ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda,
              b, ldb, beta, c, ldc);
  flop_counter().matmul += 2LL * m * n * k;
}

}  // namespace

void matmul(const Tensor& a, bool transpose_a, const Tensor& b, bool transpose_b, Tensor& c, bool accumulate) {
  if (on_device(a)) return cuda::matmul(a, transpose_a, b, transpose_b, c, accumulate);
  const char* op = "matmul";
  configure_blas_once();
  require_defined(op, a, "a");
  same_type(op, a, b);
  same_type(op, a, c);
  if (a.rank() != 2 || b.rank() != 2 || c.rank() != 2)
    fail(op, a.describe() + ", " + b.describe() + ", " + c.describe() + ": matrices must be 2-D");
  const std::int64_t m = transpose_a ? a.dim(1) : a.dim(0), k = transpose_a ? a.dim(0) : a.dim(1);
  const std::int64_t kb = transpose_b ? b.dim(1) : b.dim(0), n = transpose_b ? b.dim(0) : b.dim(1);
  if (k != kb)
    fail(op, a.describe() + (transpose_a ? " (transposed)" : "") + " times " + b.describe() +
                 (transpose_b ? " (transposed)" : "") + ": inner dimensions " + std::to_string(k) + " and " +
                 std::to_string(kb) + " differ");
  require_shape(op, c, {m, n});
  // BLAS reads a and b while writing c: they must not share storage.
  if (c.raw() == a.raw() || c.raw() == b.raw())
    fail(op, "output " + c.describe() + " shares storage with an input (" + a.describe() + ", " + b.describe() + ")");
  const int M = blas_int(op, m), N = blas_int(op, n), K = blas_int(op, k);
  const int lda = blas_int(op, a.dim(1)), ldb = blas_int(op, b.dim(1));
  switch (a.dtype()) {
    case DataType::float64:
      gemm(transpose_a, transpose_b, M, N, K, 1.0, a.data<double>(), lda, b.data<double>(), ldb, accumulate ? 1.0 : 0.0,
           c.data<double>(), N);
      return;
    case DataType::float32:
      gemm(transpose_a, transpose_b, M, N, K, 1.0f, a.data<float>(), lda, b.data<float>(), ldb, accumulate ? 1.f : 0.f,
           c.data<float>(), N);
      return;
    case DataType::float16:
    case DataType::bfloat16: {
      // Widen to float32 workspace, multiply in float32, round the result once.
      const Tensor a32 = cast(a, DataType::float32, a.name() + ".float32", MemoryCategory::workspace);
      const Tensor b32 = cast(b, DataType::float32, b.name() + ".float32", MemoryCategory::workspace);
      Tensor c32 = accumulate ? cast(c, DataType::float32, c.name() + ".float32", MemoryCategory::workspace)
                              : Tensor::empty(c.name() + ".float32", c.shape(), DataType::float32, MemoryCategory::workspace);
      gemm(transpose_a, transpose_b, M, N, K, 1.0f, a32.data<float>(), lda, b32.data<float>(), ldb,
           accumulate ? 1.f : 0.f, c32.data<float>(), N);
      copy_into(c, c32);
      return;
    }
    default: fail(op, a.describe() + ": needs a floating-point tensor");
  }
}

void linear_forward(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& y) {
  if (on_device(x)) return cuda::linear_forward(x, w, bias, y);
  const char* op = "linear_forward";
  require_defined(op, x, "x");
  require_defined(op, w, "w");
  if (w.rank() != 2) fail(op, "weight " + w.describe() + " must be 2-D [in, out]");
  if (x.dim(-1) != w.dim(0))
    fail(op, "input " + x.describe() + " has last dimension " + std::to_string(x.dim(-1)) + " but weight " +
                 w.describe() + " expects " + std::to_string(w.dim(0)));
  same_type(op, x, w);
  Shape out_shape = x.shape();
  out_shape.back() = w.dim(1);
  require_shape(op, y, out_shape);
  same_type(op, x, y);
  const std::int64_t n = rows_of(x);
  Tensor y2 = y.reshape({n, w.dim(1)});
  if (bias.defined()) {
    same_type(op, w, bias);
    require_shape(op, bias, {w.dim(1)});
    visit_floating(op, y, [&](auto tag) {
      using T = decltype(tag);
      T* out = y2.data<T>();
      const T* bv = bias.data<T>();
      const std::int64_t c = w.dim(1);
      for (std::int64_t r = 0; r < n; ++r) std::copy(bv, bv + c, out + r * c);
    });
  }
  matmul(x.reshape({n, x.dim(-1)}), false, w, false, y2, bias.defined());
}

void linear_backward(const Tensor& dy, const Tensor& x, const Tensor& w, Tensor& dx, Tensor& dw, Tensor& dbias) {
  if (on_device(dy)) return cuda::linear_backward(dy, x, w, dx, dw, dbias);
  const char* op = "linear_backward";
  require_defined(op, dy, "dy");
  require_defined(op, x, "x");
  require_defined(op, w, "w");
  if (dy.dim(-1) != w.dim(1) || x.dim(-1) != w.dim(0) || rows_of(dy) != rows_of(x))
    fail(op, "gradient " + dy.describe() + ", input " + x.describe() + " and weight " + w.describe() + " do not match");
  const std::int64_t n = rows_of(x);
  const Tensor dy2 = dy.reshape({n, w.dim(1)});
  if (dx.defined()) {
    require_shape(op, dx, x.shape());
    Tensor dx2 = dx.reshape({n, w.dim(0)});
    matmul(dy2, false, w, true, dx2, false);
  }
  if (dw.defined()) {
    require_shape(op, dw, w.shape());
    matmul(x.reshape({n, w.dim(0)}), true, dy2, false, dw, true);
  }
  if (dbias.defined()) {
    require_shape(op, dbias, {w.dim(1)});
    same_type(op, dy, dbias);
    visit_floating(op, dy, [&](auto tag) {
      using T = decltype(tag);
      const std::int64_t c = w.dim(1);
      std::vector<Acc<T>> sum(static_cast<std::size_t>(c), Acc<T>(0));
      const T* g = dy2.data<T>();
      for (std::int64_t r = 0; r < n; ++r)
        for (std::int64_t j = 0; j < c; ++j) sum[static_cast<std::size_t>(j)] += load(g[r * c + j]);
      T* db = dbias.data<T>();
      for (std::int64_t j = 0; j < c; ++j) db[j] = store<T>(load(db[j]) + sum[static_cast<std::size_t>(j)]);
    });
  }
}

namespace {
// 0.5 x (1 + tanh(u)) = x * sigmoid(2u) with u = sqrt(2/pi) (x + 0.044715 x^3): the same function
// written with exp, which costs a fraction of tanh; the derivative uses 1 - tanh(u)^2 = 4 s (1 - s)
// with s = sigmoid(2u).
template <typename C> inline C gelu_inner(C x) {
  const C k = static_cast<C>(std::sqrt(2.0 / std::numbers::pi));
  return k * (x + C(0.044715) * x * x * x);
}
template <typename C> inline C gelu_value(C x) { return x / (C(1) + std::exp(C(-2) * gelu_inner(x))); }
template <typename C> inline C gelu_derivative(C x) {
  const C k = static_cast<C>(std::sqrt(2.0 / std::numbers::pi));
  const C s = C(1) / (C(1) + std::exp(C(-2) * gelu_inner(x)));
  return s + C(2) * x * s * (C(1) - s) * k * (C(1) + C(3 * 0.044715) * x * x);
}
}  // namespace

namespace {
// y[i] = f(first[i], rest[i]...) computed in Acc<T>, after checking that every tensor has
// first's shape and type. f is generic over the arithmetic type.
template <typename F, typename... Rest>
void elementwise(const char* op, Tensor& y, F f, const Tensor& first, const Rest&... rest) {
  require_defined(op, first, "input");
  (same_shape(op, first, rest), ...);
  same_shape(op, first, y);
  visit_floating(op, first, [&](auto tag) {
    using T = decltype(tag);
    T* out = y.data<T>();
    const T* in = first.data<T>();
    const std::array<const T*, sizeof...(Rest)> more{rest.template data<T>()...};
    for (std::int64_t i = 0; i < first.numel(); ++i)
      out[i] = store<T>(std::apply([&](auto*... p) { return f(load(in[i]), load(p[i])...); }, more));
  });
}
}  // namespace

void gelu_forward(const Tensor& x, Tensor& y) {
  if (on_device(x)) return cuda::gelu_forward(x, y);
  elementwise("gelu_forward", y, [](auto v) { return gelu_value(v); }, x);
}

void gelu_backward(const Tensor& dy, const Tensor& x, Tensor& dx) {
  if (on_device(dy)) return cuda::gelu_backward(dy, x, dx);
  elementwise("gelu_backward", dx, [](auto v, auto g) { return g * gelu_derivative(v); }, x, dy);
}

void add_forward(const Tensor& a, const Tensor& b, Tensor& y) {
  if (on_device(a)) return cuda::add_forward(a, b, y);
  elementwise("add_forward", y, [](auto u, auto v) { return u + v; }, a, b);
}

void accumulate(Tensor& y, const Tensor& x) { add_forward(y, x, y); }

void layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& y, Tensor& mean,
                       Tensor& rstd) {
  if (on_device(x)) return cuda::layernorm_forward(x, gamma, beta, y, mean, rstd);
  const char* op = "layernorm_forward";
  require_defined(op, x, "x");
  const std::int64_t c = x.dim(-1), n = rows_of(x);
  same_type(op, x, gamma);
  same_type(op, x, beta);
  require_shape(op, gamma, {c});
  require_shape(op, beta, {c});
  same_shape(op, x, y);
  const DataType stat = x.dtype() == DataType::float64 ? DataType::float64 : DataType::float32;
  if (!mean.defined() || !rstd.defined() || mean.dtype() != stat || rstd.dtype() != stat)
    fail(op, "statistics " + mean.describe() + " and " + rstd.describe() + " must be " + std::string(name_of(stat)) +
                 " for " + x.describe());
  require_shape(op, mean, {n});
  require_shape(op, rstd, {n});
  visit_floating(op, x, [&](auto tag) {
    using T = decltype(tag);
    using C = Acc<T>;
    const T* in = x.data<T>();
    const T* g = gamma.data<T>();
    const T* b = beta.data<T>();
    T* out = y.data<T>();
    C* mu = mean.data<C>();
    C* rs = rstd.data<C>();
    for (std::int64_t r = 0; r < n; ++r) {
      const T* row = in + r * c;
      C m = 0;
      for (std::int64_t j = 0; j < c; ++j) m += load(row[j]);
      m /= static_cast<C>(c);
      C var = 0;
      for (std::int64_t j = 0; j < c; ++j) {
        const C d = load(row[j]) - m;
        var += d * d;
      }
      var /= static_cast<C>(c);
      const C s = C(1) / std::sqrt(var + static_cast<C>(kLayerNormEps));
      for (std::int64_t j = 0; j < c; ++j) out[r * c + j] = store<T>((load(row[j]) - m) * s * load(g[j]) + load(b[j]));
      mu[r] = m;
      rs[r] = s;
    }
  });
}

void layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                        const Tensor& rstd, Tensor& dx, Tensor& dgamma, Tensor& dbeta) {
  if (on_device(dy)) return cuda::layernorm_backward(dy, x, gamma, mean, rstd, dx, dgamma, dbeta);
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
  require_shape(op, gamma, {c});
  require_shape(op, mean, {n});
  require_shape(op, rstd, {n});
  visit_floating(op, x, [&](auto tag) {
    using T = decltype(tag);
    using C = Acc<T>;
    const T* in = x.data<T>();
    const T* g = gamma.data<T>();
    const T* grad = dy.data<T>();
    const C* mu = mean.data<C>();
    const C* rs = rstd.data<C>();
    T* out = input_part ? dx.data<T>() : nullptr;
    std::vector<C> dg(static_cast<std::size_t>(c), C(0)), db(static_cast<std::size_t>(c), C(0));
    for (std::int64_t r = 0; r < n; ++r) {
      // dxhat = dy * gamma; dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)).
      C mean_dxhat = 0, mean_dxhat_xhat = 0;
      for (std::int64_t j = 0; j < c; ++j) {
        const C xhat = (load(in[r * c + j]) - mu[r]) * rs[r];
        if (input_part) {
          const C dxhat = load(grad[r * c + j]) * load(g[j]);
          mean_dxhat += dxhat;
          mean_dxhat_xhat += dxhat * xhat;
        }
        if (weight_part) {
          dg[static_cast<std::size_t>(j)] += load(grad[r * c + j]) * xhat;
          db[static_cast<std::size_t>(j)] += load(grad[r * c + j]);
        }
      }
      if (!input_part) continue;
      mean_dxhat /= static_cast<C>(c);
      mean_dxhat_xhat /= static_cast<C>(c);
      for (std::int64_t j = 0; j < c; ++j) {
        const C xhat = (load(in[r * c + j]) - mu[r]) * rs[r];
        const C dxhat = load(grad[r * c + j]) * load(g[j]);
        out[r * c + j] = store<T>(rs[r] * (dxhat - mean_dxhat - xhat * mean_dxhat_xhat));
      }
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

namespace {
// Softmax of one row of length c, with the first `valid` entries live and the rest zero.
// Returns log(sum_j exp(row_j)) over the live entries (the cross-entropy needs it).
template <typename C> C softmax_row(C* row, std::int64_t c, std::int64_t valid) {
  C m = -std::numeric_limits<C>::infinity();
  for (std::int64_t j = 0; j < valid; ++j) m = std::max(m, row[j]);
  C sum = 0;
  for (std::int64_t j = 0; j < valid; ++j) {
    row[j] = std::exp(row[j] - m);
    sum += row[j];
  }
  const C inv = C(1) / sum;
  for (std::int64_t j = 0; j < valid; ++j) row[j] *= inv;
  for (std::int64_t j = valid; j < c; ++j) row[j] = 0;
  return m + std::log(sum);
}
}  // namespace

void softmax_forward(const Tensor& x, Tensor& y) {
  if (on_device(x)) return cuda::softmax_forward(x, y);
  const char* op = "softmax_forward";
  require_defined(op, x, "x");
  same_shape(op, x, y);
  visit_floating(op, x, [&](auto tag) {
    using T = decltype(tag);
    using C = Acc<T>;
    const std::int64_t c = x.dim(-1), n = rows_of(x);
    const T* in = x.data<T>();
    T* out = y.data<T>();
    std::vector<C> row(static_cast<std::size_t>(c));
    for (std::int64_t r = 0; r < n; ++r) {
      for (std::int64_t j = 0; j < c; ++j) row[static_cast<std::size_t>(j)] = load(in[r * c + j]);
      softmax_row(row.data(), c, c);
      for (std::int64_t j = 0; j < c; ++j) out[r * c + j] = store<T>(row[static_cast<std::size_t>(j)]);
    }
  });
}

void softmax_backward(const Tensor& dy, const Tensor& y, Tensor& dx) {
  if (on_device(dy)) return cuda::softmax_backward(dy, y, dx);
  const char* op = "softmax_backward";
  require_defined(op, y, "y");
  same_shape(op, y, dy);
  same_shape(op, y, dx);
  visit_floating(op, y, [&](auto tag) {
    using T = decltype(tag);
    using C = Acc<T>;
    const std::int64_t c = y.dim(-1), n = rows_of(y);
    const T* py = y.data<T>();
    const T* g = dy.data<T>();
    T* out = dx.data<T>();
    for (std::int64_t r = 0; r < n; ++r) {
      C dot = 0;  // dx = y * (dy - sum(dy * y))
      for (std::int64_t j = 0; j < c; ++j) dot += load(g[r * c + j]) * load(py[r * c + j]);
      for (std::int64_t j = 0; j < c; ++j)
        out[r * c + j] = store<T>(load(py[r * c + j]) * (load(g[r * c + j]) - dot));
    }
  });
}

namespace {
struct AttentionSizes {
  int B, T, C, H, hs;
};
AttentionSizes attention_sizes(const char* op, const Tensor& qkv, int heads) {
  require_blas_type(op, qkv);
  if (qkv.rank() != 3 || qkv.dim(2) % 3 != 0)
    fail(op, "qkv " + qkv.describe() + " must be [B, T, 3C]");
  const std::int64_t c = qkv.dim(2) / 3;
  if (heads <= 0 || c % heads != 0)
    fail(op, std::to_string(heads) + " heads do not divide the hidden size " + std::to_string(c) + " of " + qkv.describe());
  return {blas_int(op, qkv.dim(0)), blas_int(op, qkv.dim(1)), blas_int(op, c), heads, blas_int(op, c / heads)};
}

template <typename T>
void attention_forward_impl(const AttentionSizes& s, bool causal, const T* qkv, T* out, T* probs) {
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(s.hs)));
  const int ld = 3 * s.C;
  for (int b = 0; b < s.B; ++b) {
    for (int h = 0; h < s.H; ++h) {
      const T* q = qkv + static_cast<std::int64_t>(b) * s.T * ld + h * s.hs;
      const T* k = q + s.C;
      const T* v = q + 2 * s.C;
      T* p = probs + (static_cast<std::int64_t>(b) * s.H + h) * s.T * s.T;
      // Scores for all T x T pairs (the masked half too): the FLOP formulas count 2 T^2 hs.
      gemm(false, true, s.T, s.T, s.hs, scale, q, ld, k, ld, T(0), p, s.T);
      for (int i = 0; i < s.T; ++i) softmax_row(p + static_cast<std::int64_t>(i) * s.T, s.T, causal ? i + 1 : s.T);
      gemm(false, false, s.T, s.hs, s.T, T(1), p, s.T, v, ld, T(0), out + static_cast<std::int64_t>(b) * s.T * s.C + h * s.hs,
           s.C);
    }
  }
}

template <typename T>
void attention_backward_impl(const AttentionSizes& s, const T* dout, const T* qkv, const T* probs, T* dqkv) {
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(s.hs)));
  const int ld = 3 * s.C;
  std::vector<T> dp(static_cast<std::size_t>(s.T) * s.T);
  for (int b = 0; b < s.B; ++b) {
    for (int h = 0; h < s.H; ++h) {
      const std::int64_t base = static_cast<std::int64_t>(b) * s.T * ld + h * s.hs;
      const T* q = qkv + base;
      const T* k = q + s.C;
      const T* v = q + 2 * s.C;
      T* dq = dqkv + base;
      T* dk = dq + s.C;
      T* dv = dq + 2 * s.C;
      const T* p = probs + (static_cast<std::int64_t>(b) * s.H + h) * s.T * s.T;
      const T* g = dout + static_cast<std::int64_t>(b) * s.T * s.C + h * s.hs;
      gemm(false, true, s.T, s.T, s.hs, T(1), g, s.C, v, ld, T(0), dp.data(), s.T);  // dP = dO V^T
      gemm(true, false, s.T, s.hs, s.T, T(1), p, s.T, g, s.C, T(0), dv, ld);         // dV = P^T dO
      for (int i = 0; i < s.T; ++i) {  // dS = P * (dP - rowsum(dP * P)) * scale
        T* row = dp.data() + static_cast<std::int64_t>(i) * s.T;
        const T* prow = p + static_cast<std::int64_t>(i) * s.T;
        T dot = 0;
        for (int j = 0; j < s.T; ++j) dot += row[j] * prow[j];
        for (int j = 0; j < s.T; ++j) row[j] = prow[j] * (row[j] - dot) * scale;
      }
      gemm(false, false, s.T, s.hs, s.T, T(1), dp.data(), s.T, k, ld, T(0), dq, ld);  // dQ = dS K
      gemm(true, false, s.T, s.hs, s.T, T(1), dp.data(), s.T, q, ld, T(0), dk, ld);   // dK = dS^T Q
    }
  }
}
}  // namespace

namespace {
// 16-bit storage, on either device: the inputs widened to float32 workspace, the attention
// computed in float32, each result rounded to 16 bits once. Backward reads the probabilities
// as a 16-bit model stores them, rounded.
Tensor widened(const Tensor& t) { return cast(t, DataType::float32, t.name() + ".float32", MemoryCategory::workspace); }
Tensor wide_like(const Tensor& t) {
  return Tensor::empty(t.name() + ".float32", t.shape(), DataType::float32, MemoryCategory::workspace, t.space());
}
}  // namespace

void attention_forward(const Tensor& qkv, int heads, bool causal, Tensor& out, Tensor& probs) {
  const char* op = "attention_forward";
  if (qkv.defined() && is_half(qkv.dtype())) {
    same_type(op, qkv, out);
    same_type(op, qkv, probs);
    Tensor out32 = wide_like(out), probs32 = wide_like(probs);
    attention_forward(widened(qkv), heads, causal, out32, probs32);
    copy_into(out, out32);
    copy_into(probs, probs32);
    return;
  }
  if (on_device(qkv)) return cuda::attention_forward(qkv, heads, causal, out, probs);
  configure_blas_once();
  const AttentionSizes s = attention_sizes(op, qkv, heads);
  same_type(op, qkv, out);
  same_type(op, qkv, probs);
  require_shape(op, out, {s.B, s.T, s.C});
  require_shape(op, probs, {s.B, s.H, s.T, s.T});
  if (qkv.dtype() == DataType::float64)
    attention_forward_impl(s, causal, qkv.data<double>(), out.data<double>(), probs.data<double>());
  else
    attention_forward_impl(s, causal, qkv.data<float>(), out.data<float>(), probs.data<float>());
}

void attention_backward(const Tensor& dout, const Tensor& qkv, const Tensor& probs, int heads, Tensor& dqkv) {
  const char* op = "attention_backward";
  if (qkv.defined() && is_half(qkv.dtype())) {
    same_type(op, qkv, dout);
    same_type(op, qkv, probs);
    same_type(op, qkv, dqkv);
    Tensor dqkv32 = wide_like(dqkv);
    attention_backward(widened(dout), widened(qkv), widened(probs), heads, dqkv32);
    copy_into(dqkv, dqkv32);
    return;
  }
  if (on_device(dout)) return cuda::attention_backward(dout, qkv, probs, heads, dqkv);
  configure_blas_once();
  const AttentionSizes s = attention_sizes(op, qkv, heads);
  same_type(op, qkv, dout);
  same_shape(op, qkv, dqkv);
  require_shape(op, dout, {s.B, s.T, s.C});
  require_shape(op, probs, {s.B, s.H, s.T, s.T});
  same_type(op, qkv, probs);
  if (qkv.dtype() == DataType::float64)
    attention_backward_impl(s, dout.data<double>(), qkv.data<double>(), probs.data<double>(), dqkv.data<double>());
  else
    attention_backward_impl(s, dout.data<float>(), qkv.data<float>(), probs.data<float>(), dqkv.data<float>());
}

namespace {
struct EmbeddingSizes {
  std::int64_t B, T, C, V;
};
// Token ids must lie in [0, vocabulary) (the table's rows when vocabulary is 0).
EmbeddingSizes embedding_sizes(const char* op, const Tensor& tokens, const Tensor& wte, const Tensor& wpe,
                               std::int64_t vocabulary = 0) {
  require_index_type(op, tokens);
  require_defined(op, wte, "wte");
  if (tokens.rank() != 2) fail(op, "tokens " + tokens.describe() + " must be [B, T]");
  if (wte.rank() != 2) fail(op, "token embedding " + wte.describe() + " must be [V, C]");
  const EmbeddingSizes s{tokens.dim(0), tokens.dim(1), wte.dim(1), wte.dim(0)};
  if (wpe.defined()) {
    same_type(op, wte, wpe);
    if (wpe.rank() != 2 || wpe.dim(1) != s.C || wpe.dim(0) < s.T)
      fail(op, "position embedding " + wpe.describe() + " must be [T_max >= " + std::to_string(s.T) + ", " +
                   std::to_string(s.C) + "]");
  }
  const std::int64_t limit = vocabulary > 0 ? vocabulary : s.V;
  for (std::int64_t i = 0; i < tokens.numel(); ++i) {
    const std::int64_t id = index_at(tokens, i);
    if (id < 0 || id >= limit)
      fail(op, "token " + std::to_string(id) + " at position " + std::to_string(i) + " of " + tokens.describe() +
                   " is outside the vocabulary of " +
                   (vocabulary > 0 ? std::to_string(vocabulary) : wte.describe()));
  }
  return s;
}
}  // namespace

void embedding_forward(const Tensor& tokens, const Tensor& wte, const Tensor& wpe, Tensor& y) {
  if (on_device(tokens)) return cuda::embedding_forward(tokens, wte, wpe, y);
  const char* op = "embedding_forward";
  const EmbeddingSizes s = embedding_sizes(op, tokens, wte, wpe);
  same_type(op, wte, y);
  require_shape(op, y, {s.B, s.T, s.C});
  visit_floating(op, wte, [&](auto tag) {
    using T = decltype(tag);
    const T* e = wte.data<T>();
    const T* pos = wpe.defined() ? wpe.data<T>() : nullptr;
    T* out = y.data<T>();
    for (std::int64_t b = 0; b < s.B; ++b)
      for (std::int64_t t = 0; t < s.T; ++t) {
        const std::int64_t row = b * s.T + t;
        const T* er = e + index_at(tokens, row) * s.C;
        for (std::int64_t c = 0; c < s.C; ++c)
          out[row * s.C + c] = pos ? store<T>(load(er[c]) + load(pos[t * s.C + c])) : er[c];
      }
  });
}

void embedding_backward(const Tensor& dy, const Tensor& tokens, Tensor& dwte, Tensor& dwpe) {
  if (on_device(dy)) return cuda::embedding_backward(dy, tokens, dwte, dwpe);
  const char* op = "embedding_backward";
  const EmbeddingSizes s = embedding_sizes(op, tokens, dwte, dwpe);
  same_type(op, dwte, dy);
  require_shape(op, dy, {s.B, s.T, s.C});
  visit_floating(op, dy, [&](auto tag) {
    using T = decltype(tag);
    const T* g = dy.data<T>();
    T* de = dwte.data<T>();
    T* dp = dwpe.defined() ? dwpe.data<T>() : nullptr;
    for (std::int64_t b = 0; b < s.B; ++b)
      for (std::int64_t t = 0; t < s.T; ++t) {
        const std::int64_t row = b * s.T + t;
        T* er = de + index_at(tokens, row) * s.C;
        for (std::int64_t c = 0; c < s.C; ++c) {
          er[c] = store<T>(load(er[c]) + load(g[row * s.C + c]));
          if (dp) dp[t * s.C + c] = store<T>(load(dp[t * s.C + c]) + load(g[row * s.C + c]));
        }
      }
  });
}

namespace {
void check_classification(const char* op, const Tensor& logits, const Tensor& targets, double normalizer) {
  require_defined(op, logits, "logits");
  require_index_type(op, targets);
  if (logits.rank() != 2 || targets.rank() != 1 || targets.dim(0) != logits.dim(0))
    fail(op, "logits " + logits.describe() + " must be [N, V] and targets " + targets.describe() + " [N]");
  if (!(normalizer > 0)) fail(op, "normalizer must be positive");
  for (std::int64_t i = 0; i < targets.numel(); ++i) {
    const std::int64_t t = index_at(targets, i);
    if (t < 0 || t >= logits.dim(1))
      fail(op, "target " + std::to_string(t) + " at row " + std::to_string(i) + " is outside the " +
                   std::to_string(logits.dim(1)) + " classes of " + logits.describe());
  }
}
}  // namespace

double cross_entropy_forward(const Tensor& logits, const Tensor& targets, double normalizer) {
  if (on_device(logits)) return cuda::cross_entropy_forward(logits, targets, normalizer);
  const char* op = "cross_entropy_forward";
  check_classification(op, logits, targets, normalizer);
  return visit_floating(op, logits, [&](auto tag) {
    using T = decltype(tag);
    using C = Acc<T>;
    const std::int64_t n = logits.dim(0), v = logits.dim(1);
    double total = 0;
    for (std::int64_t r = 0; r < n; ++r) {
      const T* row = logits.data<T>() + r * v;
      C m = -std::numeric_limits<C>::infinity();
      for (std::int64_t j = 0; j < v; ++j) m = std::max(m, load(row[j]));
      C sum = 0;
      for (std::int64_t j = 0; j < v; ++j) sum += std::exp(load(row[j]) - m);
      total += static_cast<double>(std::log(sum) + m - load(row[index_at(targets, r)]));
    }
    return total / normalizer;
  });
}

double cross_entropy_backward(const Tensor& logits, const Tensor& targets, double normalizer, Tensor& dlogits) {
  if (on_device(logits)) return cuda::cross_entropy_backward(logits, targets, normalizer, dlogits);
  const char* op = "cross_entropy_backward";
  check_classification(op, logits, targets, normalizer);
  same_shape(op, logits, dlogits);
  return visit_floating(op, logits, [&](auto tag) {
    using T = decltype(tag);
    using C = Acc<T>;
    const std::int64_t n = logits.dim(0), v = logits.dim(1);
    const C inv = static_cast<C>(1.0 / normalizer);
    const T* in = logits.data<T>();
    T* out = dlogits.data<T>();
    std::vector<C> row(static_cast<std::size_t>(v));
    double total = 0;
    for (std::int64_t r = 0; r < n; ++r) {
      const auto target = static_cast<std::size_t>(index_at(targets, r));
      for (std::int64_t j = 0; j < v; ++j) row[static_cast<std::size_t>(j)] = load(in[r * v + j]);
      const C target_logit = row[target];
      // The same sums in the same order as cross_entropy_forward: the same loss, bit for bit.
      total += static_cast<double>(softmax_row(row.data(), v, v) - target_logit);
      row[target] -= C(1);
      for (std::int64_t j = 0; j < v; ++j) out[r * v + j] = store<T>(row[static_cast<std::size_t>(j)] * inv);
    }
    return total / normalizer;
  });
}

namespace {
// Ids of the whole vocabulary: refused outside [0, vocabulary).
void check_ids(const char* op, const Tensor& ids, std::int64_t vocabulary, const char* what) {
  require_index_type(op, ids);
  if (vocabulary <= 0) fail(op, "the vocabulary must be positive, not " + std::to_string(vocabulary));
  for (std::int64_t i = 0; i < ids.numel(); ++i) {
    const std::int64_t id = index_at(ids, i);
    if (id < 0 || id >= vocabulary)
      fail(op, std::string(what) + " " + std::to_string(id) + " at " + std::to_string(i) + " of " + ids.describe() +
                   " is outside the vocabulary of " + std::to_string(vocabulary));
  }
}
}  // namespace

void embedding_shard_forward(const Tensor& tokens, const Tensor& wte_shard, std::int64_t first_token,
                             std::int64_t vocabulary, Tensor& y) {
  if (on_device(tokens)) return cuda::embedding_shard_forward(tokens, wte_shard, first_token, vocabulary, y);
  const char* op = "embedding_shard_forward";
  const EmbeddingSizes s = embedding_sizes(op, tokens, wte_shard, Tensor(), vocabulary);
  require_vocabulary_shard(op, wte_shard, first_token, vocabulary, 0);
  same_type(op, wte_shard, y);
  require_shape(op, y, {s.B, s.T, s.C});
  visit_floating(op, wte_shard, [&](auto tag) {
    using T = decltype(tag);
    const T* e = wte_shard.data<T>();
    T* out = y.data<T>();
    for (std::int64_t row = 0; row < s.B * s.T; ++row) {
      const std::int64_t id = index_at(tokens, row) - first_token;
      for (std::int64_t c = 0; c < s.C; ++c) out[row * s.C + c] = id >= 0 && id < s.V ? e[id * s.C + c] : T{};
    }
  });
}

void embedding_shard_backward(const Tensor& dy, const Tensor& tokens, std::int64_t first_token, Tensor& dwte_shard) {
  if (on_device(dy)) return cuda::embedding_shard_backward(dy, tokens, first_token, dwte_shard);
  const char* op = "embedding_shard_backward";
  require_index_type(op, tokens);
  require_defined(op, dwte_shard, "dwte_shard");
  if (tokens.rank() != 2 || dwte_shard.rank() != 2)
    fail(op, "tokens " + tokens.describe() + " must be [B, T] and " + dwte_shard.describe() + " [V_shard, C]");
  same_type(op, dwte_shard, dy);
  const std::int64_t v = dwte_shard.dim(0), c = dwte_shard.dim(1), rows = tokens.numel();
  require_shape(op, dy, {tokens.dim(0), tokens.dim(1), c});
  visit_floating(op, dy, [&](auto tag) {
    using T = decltype(tag);
    const T* g = dy.data<T>();
    T* de = dwte_shard.data<T>();
    for (std::int64_t row = 0; row < rows; ++row) {
      const std::int64_t id = index_at(tokens, row) - first_token;
      if (id < 0 || id >= v) continue;
      for (std::int64_t k = 0; k < c; ++k) de[id * c + k] = store<T>(load(de[id * c + k]) + load(g[row * c + k]));
    }
  });
}

void cross_entropy_shard_max(const Tensor& logits_shard, Tensor& row_max) {
  if (on_device(logits_shard)) return cuda::cross_entropy_shard_max(logits_shard, row_max);
  const char* op = "cross_entropy_shard_max";
  require_defined(op, logits_shard, "logits");
  if (logits_shard.rank() != 2) fail(op, "logits " + logits_shard.describe() + " must be [N, V_shard]");
  require_row_statistic(op, logits_shard, row_max);
  visit_floating(op, logits_shard, [&](auto tag) {
    using T = decltype(tag);
    using C = Acc<T>;
    const std::int64_t n = logits_shard.dim(0), v = logits_shard.dim(1);
    const T* in = logits_shard.data<T>();
    C* out = row_max.data<C>();
    for (std::int64_t r = 0; r < n; ++r) {
      C m = -std::numeric_limits<C>::infinity();
      for (std::int64_t j = 0; j < v; ++j) m = std::max(m, load(in[r * v + j]));
      out[r] = m;
    }
  });
}

void cross_entropy_shard_sums(const Tensor& logits_shard, const Tensor& targets, std::int64_t first_class,
                              std::int64_t vocabulary, const Tensor& row_max, Tensor& sum_exp, Tensor& target_logit) {
  if (on_device(logits_shard))
    return cuda::cross_entropy_shard_sums(logits_shard, targets, first_class, vocabulary, row_max, sum_exp, target_logit);
  const char* op = "cross_entropy_shard_sums";
  require_defined(op, logits_shard, "logits");
  if (logits_shard.rank() != 2 || targets.rank() != 1 || targets.dim(0) != logits_shard.dim(0))
    fail(op, "logits " + logits_shard.describe() + " must be [N, V_shard] and targets " + targets.describe() + " [N]");
  check_ids(op, targets, vocabulary, "target");
  require_vocabulary_shard(op, logits_shard, first_class, vocabulary, 1);
  require_row_statistic(op, logits_shard, row_max);
  require_row_statistic(op, logits_shard, sum_exp);
  require_row_statistic(op, logits_shard, target_logit);
  visit_floating(op, logits_shard, [&](auto tag) {
    using T = decltype(tag);
    using C = Acc<T>;
    const std::int64_t n = logits_shard.dim(0), v = logits_shard.dim(1);
    const T* in = logits_shard.data<T>();
    const C* m = row_max.data<C>();
    C* s = sum_exp.data<C>();
    C* z = target_logit.data<C>();
    for (std::int64_t r = 0; r < n; ++r) {
      C sum = 0;
      for (std::int64_t j = 0; j < v; ++j) sum += std::exp(load(in[r * v + j]) - m[r]);
      s[r] = sum;
      const std::int64_t target = index_at(targets, r) - first_class;
      z[r] = target >= 0 && target < v ? load(in[r * v + target]) : C(0);
    }
  });
}

void cross_entropy_shard_backward(const Tensor& logits_shard, const Tensor& targets, std::int64_t first_class,
                                  const Tensor& row_max, const Tensor& sum_exp, double normalizer,
                                  Tensor& dlogits_shard) {
  if (on_device(logits_shard))
    return cuda::cross_entropy_shard_backward(logits_shard, targets, first_class, row_max, sum_exp, normalizer,
                                              dlogits_shard);
  const char* op = "cross_entropy_shard_backward";
  require_defined(op, logits_shard, "logits");
  require_index_type(op, targets);
  if (logits_shard.rank() != 2 || targets.rank() != 1 || targets.dim(0) != logits_shard.dim(0))
    fail(op, "logits " + logits_shard.describe() + " must be [N, V_shard] and targets " + targets.describe() + " [N]");
  if (!(normalizer > 0)) fail(op, "normalizer must be positive");
  same_shape(op, logits_shard, dlogits_shard);
  same_type(op, logits_shard, dlogits_shard);
  require_row_statistic(op, logits_shard, row_max);
  require_row_statistic(op, logits_shard, sum_exp);
  visit_floating(op, logits_shard, [&](auto tag) {
    using T = decltype(tag);
    using C = Acc<T>;
    const std::int64_t n = logits_shard.dim(0), v = logits_shard.dim(1);
    const C inv = static_cast<C>(1.0 / normalizer);
    const T* in = logits_shard.data<T>();
    const C* m = row_max.data<C>();
    const C* s = sum_exp.data<C>();
    T* out = dlogits_shard.data<T>();
    for (std::int64_t r = 0; r < n; ++r) {
      const C inv_sum = C(1) / s[r];
      const std::int64_t target = index_at(targets, r) - first_class;
      for (std::int64_t j = 0; j < v; ++j) {
        C g = std::exp(load(in[r * v + j]) - m[r]) * inv_sum;
        if (j == target) g -= C(1);
        out[r * v + j] = store<T>(g * inv);
      }
    }
  });
}

double mse_forward(const Tensor& prediction, const Tensor& target, double normalizer) {
  if (on_device(prediction)) return cuda::mse_forward(prediction, target, normalizer);
  const char* op = "mse_forward";
  require_defined(op, prediction, "prediction");
  same_shape(op, prediction, target);
  if (!(normalizer > 0)) fail(op, "normalizer must be positive");
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
  if (on_device(prediction)) return cuda::mse_backward(prediction, target, normalizer, dprediction);
  const char* op = "mse_backward";
  if (!(normalizer > 0)) fail(op, "normalizer must be positive");
  const double scale = 2.0 / normalizer;
  elementwise(op, dprediction, [scale](auto p, auto t) { return static_cast<decltype(p)>(scale) * (p - t); },
              prediction, target);
}

namespace {
void dropout_apply(const char* op, const Tensor& in, double p, DropoutKey key, Tensor& out) {
  require_defined(op, in, "input");
  same_shape(op, in, out);
  if (!(p >= 0 && p < 1)) fail(op, "dropout probability " + std::to_string(p) + " must be in [0, 1)");
  visit_floating(op, in, [&](auto tag) {
    using T = decltype(tag);
    using C = Acc<T>;
    const C scale = static_cast<C>(1.0 / (1.0 - p));
    const T* src = in.data<T>();
    T* dst = out.data<T>();
    for (std::int64_t i = 0; i < in.numel(); ++i) {
      const bool keep =
          p == 0 || uniform_open(key.seed, key.stream, key.first_element + static_cast<std::uint64_t>(i)) >= p;
      dst[i] = keep ? store<T>(load(src[i]) * scale) : store<T>(C(0));
    }
  });
}
}  // namespace

void dropout_forward(const Tensor& x, double p, DropoutKey key, Tensor& y) {
  if (on_device(x)) return cuda::dropout_forward(x, p, key, y);
  dropout_apply("dropout_forward", x, p, key, y);
}
void dropout_backward(const Tensor& dy, double p, DropoutKey key, Tensor& dx) {
  if (on_device(dy)) return cuda::dropout_backward(dy, p, key, dx);
  dropout_apply("dropout_backward", dy, p, key, dx);
}


void gather_rows_forward(const Tensor& x, const RowMap& map, Tensor& y) {
  if (on_device(x)) return cuda::gather_rows_forward(x, map, y);
  const RowMapSizes s = check_row_map("gather_rows_forward", map, x, y);
  const std::int64_t* token = map.row_token.data<std::int64_t>();
  visit_floating("gather_rows_forward", x, [&](auto tag) {
    using T = decltype(tag);
    const T* in = x.data<T>();
    T* out = y.data<T>();
    for (std::int64_t a = 0; a < s.A; ++a) std::copy_n(in + token[a] * s.C, s.C, out + a * s.C);
  });
}

void gather_rows_backward(const Tensor& dy, const RowMap& map, Tensor& dx) {
  if (on_device(dy)) return cuda::gather_rows_backward(dy, map, dx);
  const RowMapSizes s = check_row_map("gather_rows_backward", map, dx, dy);
  const std::int64_t* offsets = map.token_offsets.data<std::int64_t>();
  const std::int64_t* rows = map.token_rows.data<std::int64_t>();
  visit_floating("gather_rows_backward", dy, [&](auto tag) {
    using T = decltype(tag);
    using C = Acc<T>;
    const T* g = dy.data<T>();
    T* out = dx.data<T>();
    for (std::int64_t n = 0; n < s.N; ++n)
      for (std::int64_t c = 0; c < s.C; ++c) {
        C sum = 0;
        for (std::int64_t i = offsets[n]; i < offsets[n + 1]; ++i) sum += load(g[rows[i] * s.C + c]);
        out[n * s.C + c] = store<T>(sum);
      }
  });
}

void combine_rows_forward(const Tensor& rows, const Tensor& gates, const RowMap& map, Tensor& y) {
  if (on_device(rows)) return cuda::combine_rows_forward(rows, gates, map, y);
  const char* op = "combine_rows_forward";
  const RowMapSizes s = check_row_map(op, map, y, rows);
  check_gates(op, rows, gates, s.A);
  const std::int64_t* offsets = map.token_offsets.data<std::int64_t>();
  const std::int64_t* assigned = map.token_rows.data<std::int64_t>();
  visit_floating(op, rows, [&](auto tag) {
    using T = decltype(tag);
    using C = Acc<T>;
    const T* in = rows.data<T>();
    const T* g = gates.data<T>();
    T* out = y.data<T>();
    for (std::int64_t n = 0; n < s.N; ++n)
      for (std::int64_t c = 0; c < s.C; ++c) {
        C sum = 0;
        for (std::int64_t i = offsets[n]; i < offsets[n + 1]; ++i) {
          const std::int64_t a = assigned[i];
          sum += load(g[a]) * load(in[a * s.C + c]);
        }
        out[n * s.C + c] = store<T>(sum);
      }
  });
}

void combine_rows_backward(const Tensor& dy, const Tensor& rows, const Tensor& gates, const RowMap& map,
                           Tensor& drows, Tensor& dgates) {
  if (on_device(dy)) return cuda::combine_rows_backward(dy, rows, gates, map, drows, dgates);
  const char* op = "combine_rows_backward";
  const RowMapSizes s = check_row_map(op, map, dy, rows);
  check_gates(op, rows, gates, s.A);
  same_shape(op, rows, drows);
  check_gates(op, rows, dgates, s.A);
  const std::int64_t* token = map.row_token.data<std::int64_t>();
  visit_floating(op, rows, [&](auto tag) {
    using T = decltype(tag);
    using C = Acc<T>;
    const T* g = dy.data<T>();
    const T* in = rows.data<T>();
    const T* gate = gates.data<T>();
    T* dr = drows.data<T>();
    T* dg = dgates.data<T>();
    for (std::int64_t a = 0; a < s.A; ++a) {
      const T* gy = g + token[a] * s.C;
      const C w = load(gate[a]);
      C dot = 0;
      for (std::int64_t c = 0; c < s.C; ++c) {
        dot += load(gy[c]) * load(in[a * s.C + c]);
        dr[a * s.C + c] = store<T>(w * load(gy[c]));
      }
      dg[a] = store<T>(dot);
    }
  });
}

}  // namespace parity::ops
