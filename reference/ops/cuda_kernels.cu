// The CUDA ops' kernels and their launches (see cuda_kernels.hpp). Simple, correct kernels
// first: element-wise ops are grid-stride loops; row ops (layernorm, softmax, cross-entropy,
// one attention row) give each row to one thread block, which reduces with warp shuffles; matrix
// multiplies go to cuBLAS. Reductions run in a fixed order for a fixed launch shape, so results
// repeat run to run, except the token-embedding gradient, whose repeated tokens add atomically.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>

#include "reference/cuda/device.hpp"
#include "reference/ops/cuda_kernels.hpp"
#include "reference/core/raise.hpp"

namespace parity::ops::kernels {
namespace {

using std::int64_t;

// --- Errors, stream, launch shapes ------------------------------------------------------------

// Each fails with the caller's file:line.
void check(cudaError_t rc, const char* what, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  if (rc != cudaSuccess) raise_error(std::string("CUDA: ") + cudaGetErrorString(rc), what, file, line);
}
void check_launch(const char* kernel, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  check(cudaGetLastError(), kernel, file, line);
}

void check_blas(cublasStatus_t rc, const char* what, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  if (rc != CUBLAS_STATUS_SUCCESS) raise_error(std::string("cuBLAS: ") + cublasGetStatusString(rc), what, file, line);
}

cudaStream_t stream() { return static_cast<cudaStream_t>(::parity::cuda::stream()); }

constexpr int kThreads = 256;      // element-wise kernels
constexpr int kRowThreads = 256;   // one block per row (a multiple of 32, at most 1024)
constexpr int kSumThreads = 1024;  // the final reduction of per-row or per-block partial sums
constexpr int kMaxMseBlocks = static_cast<int>(kMseScratch) - 1;
static_assert(kMaxMseBlocks == 1024, "mse_forward's scratch holds 1024 block sums and the total");

// Blocks for a grid-stride loop over n elements.
unsigned blocks_for(int64_t n) {
  const int64_t wanted = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>(wanted, int64_t{65535} * 16)));
}
// Blocks for a block-per-row loop over rows.
unsigned row_blocks(int64_t rows) {
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

// float32/float64 only (the ops whose CPU versions are).
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

template <typename F> void visit_state(int dtype, const char* op, F&& f) { visit_wide(dtype, op, f); }

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

// One block sums n doubles into *out.
__global__ void sum_doubles_kernel(const double* in, int64_t n, double* out) {
  double s = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) s += in[i];
  s = block_sum(s);
  if (threadIdx.x == 0) *out = s;
}

double read_double(const double* device_value) {
  double host = 0;
  check(cudaMemcpyAsync(&host, device_value, sizeof(double), cudaMemcpyDeviceToHost, stream()), "cudaMemcpyAsync");
  check(cudaStreamSynchronize(stream()), "cudaStreamSynchronize");
  return host;
}

// --- Matrix multiply (cuBLAS) -----------------------------------------------------------------

// One handle per process, made on first use (after the device is selected) and bound to the
// process's stream. It is never destroyed: a destructor at static destruction could run after
// the CUDA runtime has shut down, and the process's end frees it anyway.
cublasHandle_t blas_handle() {
  static cublasHandle_t handle = [] {
    cublasHandle_t h = nullptr;
    check_blas(cublasCreate(&h), "cublasCreate");
    check_blas(cublasSetStream(h, stream()), "cublasSetStream");
    return h;
  }();
  return handle;
}

// --- Element-wise kernels -----------------------------------------------------------------------

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

// GeLU in the CPU's form: x sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3).
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
// y may alias a: each element is read before it is written, by the same thread.
template <typename T> __global__ void add_kernel(const T* a, const T* b, T* y, int64_t n) {
  PARITY_GRID_STRIDE(i, n) store(y[i], load(a[i]) + load(b[i]));
}

// --- LayerNorm -------------------------------------------------------------------------------

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

// --- Softmax ---------------------------------------------------------------------------------

template <typename T> __global__ void softmax_forward_kernel(const T* x, T* y, int64_t rows, int64_t cols) {
  using C = Acc<T>;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* in = x + r * cols;
    C m = negative_infinity<C>();
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) m = load(in[j]) > m ? load(in[j]) : m;
    m = block_max(m);
    C s = 0;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) s += dexp(load(in[j]) - m);
    const C inv = C(1) / block_sum(s);
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

// --- Attention -------------------------------------------------------------------------------

struct Heads {
  int B, T, C, H, hs;
};

// Block (b, h, i) for a flat block index: i fastest.
struct HeadRow {
  int b, h, i;
};
__device__ inline HeadRow head_row(int64_t block, const Heads& s) {
  const int i = static_cast<int>(block % s.T);
  const int64_t bh = block / s.T;
  return {static_cast<int>(bh / s.H), static_cast<int>(bh % s.H), i};
}

// Row i of head (b, h): scores q_i k_j scale for the live j (j <= i when causal), their softmax
// into probs (zeros for masked j), then out_i = sum_j p_ij v_j.
template <typename C>
__global__ void attention_forward_kernel(const C* qkv, C* out, C* probs, Heads s, C scale, bool causal) {
  const HeadRow r = head_row(blockIdx.x, s);
  const int64_t ld = 3 * static_cast<int64_t>(s.C);
  const C* base = qkv + static_cast<int64_t>(r.b) * s.T * ld + static_cast<int64_t>(r.h) * s.hs;
  const C* q = base + r.i * ld;
  C* p = probs + ((static_cast<int64_t>(r.b) * s.H + r.h) * s.T + r.i) * s.T;
  const int valid = causal ? r.i + 1 : s.T;
  C m = negative_infinity<C>();
  for (int j = threadIdx.x; j < valid; j += blockDim.x) {
    const C* k = base + j * ld + s.C;
    C dot = 0;
    for (int d = 0; d < s.hs; ++d) dot += q[d] * k[d];
    const C score = dot * scale;
    p[j] = score;
    m = score > m ? score : m;
  }
  m = block_max(m);
  C sum = 0;
  for (int j = threadIdx.x; j < valid; j += blockDim.x) {
    const C e = dexp(p[j] - m);
    p[j] = e;
    sum += e;
  }
  const C inv = C(1) / block_sum(sum);
  for (int j = threadIdx.x; j < s.T; j += blockDim.x) p[j] = j < valid ? p[j] * inv : C(0);
  __syncthreads();  // the whole row of p is written before any thread reads it
  C* o = out + (static_cast<int64_t>(r.b) * s.T + r.i) * s.C + static_cast<int64_t>(r.h) * s.hs;
  for (int d = threadIdx.x; d < s.hs; d += blockDim.x) {
    C acc = 0;
    for (int j = 0; j < valid; ++j) acc += p[j] * base[j * ld + 2 * s.C + d];
    o[d] = acc;
  }
}

// Row i of head (b, h): dP_ij = dO_i v_j; dS_ij = P_ij (dP_ij - sum_j dP_ij P_ij) scale into
// scratch; dQ_i = sum_j dS_ij k_j.
template <typename C>
__global__ void attention_backward_rows_kernel(const C* dout, const C* qkv, const C* probs, C* dqkv, C* dscores,
                                               Heads s, C scale) {
  const HeadRow r = head_row(blockIdx.x, s);
  const int64_t ld = 3 * static_cast<int64_t>(s.C);
  const int64_t head = static_cast<int64_t>(r.b) * s.T * ld + static_cast<int64_t>(r.h) * s.hs;
  const C* base = qkv + head;
  const C* g = dout + (static_cast<int64_t>(r.b) * s.T + r.i) * s.C + static_cast<int64_t>(r.h) * s.hs;
  const int64_t row = ((static_cast<int64_t>(r.b) * s.H + r.h) * s.T + r.i) * s.T;
  const C* p = probs + row;
  C* ds = dscores + row;
  C partial = 0;
  for (int j = threadIdx.x; j < s.T; j += blockDim.x) {
    const C* v = base + j * ld + 2 * s.C;
    C dp = 0;
    for (int d = 0; d < s.hs; ++d) dp += g[d] * v[d];
    ds[j] = dp;
    partial += dp * p[j];
  }
  const C dot = block_sum(partial);
  for (int j = threadIdx.x; j < s.T; j += blockDim.x) ds[j] = p[j] * (ds[j] - dot) * scale;
  __syncthreads();  // the whole row of dS is written before any thread reads it
  C* dq = dqkv + head + r.i * ld;
  for (int d = threadIdx.x; d < s.hs; d += blockDim.x) {
    C acc = 0;
    for (int j = 0; j < s.T; ++j) acc += ds[j] * base[j * ld + s.C + d];
    dq[d] = acc;
  }
}

// Column j of head (b, h): dK_j = sum_i dS_ij q_i, dV_j = sum_i P_ij dO_i.
template <typename C>
__global__ void attention_backward_columns_kernel(const C* dout, const C* qkv, const C* probs, C* dqkv,
                                                  const C* dscores, Heads s) {
  const HeadRow r = head_row(blockIdx.x, s);
  const int j = r.i;
  const int64_t ld = 3 * static_cast<int64_t>(s.C);
  const int64_t head = static_cast<int64_t>(r.b) * s.T * ld + static_cast<int64_t>(r.h) * s.hs;
  const int64_t matrix = (static_cast<int64_t>(r.b) * s.H + r.h) * s.T * s.T;
  const C* g = dout + static_cast<int64_t>(r.b) * s.T * s.C + static_cast<int64_t>(r.h) * s.hs;
  for (int d = threadIdx.x; d < s.hs; d += blockDim.x) {
    C dk = 0, dv = 0;
    for (int i = 0; i < s.T; ++i) {
      const int64_t ij = matrix + static_cast<int64_t>(i) * s.T + j;
      dk += dscores[ij] * qkv[head + i * ld + d];
      dv += probs[ij] * g[static_cast<int64_t>(i) * s.C + d];
    }
    dqkv[head + j * ld + s.C + d] = dk;
    dqkv[head + j * ld + 2 * s.C + d] = dv;
  }
}

// --- Indices and embeddings ---------------------------------------------------------------------

template <typename I>
__global__ void first_invalid_kernel(const I* indices, int64_t n, int64_t limit, unsigned long long* first) {
  PARITY_GRID_STRIDE(i, n) {
    const int64_t v = static_cast<int64_t>(indices[i]);
    if (v < 0 || v >= limit) atomicMin(first, static_cast<unsigned long long>(i));
  }
}

template <typename T, typename I>
__global__ void embedding_forward_kernel(const I* tokens, const T* wte, const T* wpe, T* y, int64_t rows, int64_t T_,
                                         int64_t C) {
  PARITY_GRID_STRIDE(e, rows * C) {
    const int64_t row = e / C, c = e % C;
    const T value = wte[static_cast<int64_t>(tokens[row]) * C + c];
    if (wpe != nullptr)
      store(y[e], load(value) + load(wpe[(row % T_) * C + c]));
    else
      y[e] = value;
  }
}

// Adds dy's rows into the token rows (the type of `target` is T, or float for 16-bit T).
template <typename T, typename A, typename I>
__global__ void embedding_scatter_kernel(const T* dy, const I* tokens, A* target, int64_t rows, int64_t C) {
  PARITY_GRID_STRIDE(e, rows * C) {
    const int64_t row = e / C, c = e % C;
    atomicAdd(&target[static_cast<int64_t>(tokens[row]) * C + c], static_cast<A>(load(dy[e])));
  }
}

// dwte += scratch, rounding each element once (16-bit types).
template <typename T> __global__ void add_float_scratch_kernel(T* dwte, const float* scratch, int64_t n) {
  PARITY_GRID_STRIDE(i, n) store(dwte[i], load(dwte[i]) + scratch[i]);
}

// dwpe[t, c] += sum over b of dy[b, t, c]: one thread per (t, c), no atomics.
template <typename T> __global__ void position_gradient_kernel(const T* dy, T* dwpe, int64_t B, int64_t T_, int64_t C) {
  using A = Acc<T>;
  PARITY_GRID_STRIDE(e, T_ * C) {
    A s = 0;
    for (int64_t b = 0; b < B; ++b) s += load(dy[b * T_ * C + e]);
    store(dwpe[e], load(dwpe[e]) + s);
  }
}

// --- Losses ----------------------------------------------------------------------------------

template <typename T, typename I>
__global__ void cross_entropy_kernel(const T* logits, const I* targets, int64_t rows, int64_t classes,
                                     Acc<T> inv_normalizer, T* dlogits, double* row_loss) {
  using C = Acc<T>;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* x = logits + r * classes;
    C m = negative_infinity<C>();
    for (int64_t j = threadIdx.x; j < classes; j += blockDim.x) m = load(x[j]) > m ? load(x[j]) : m;
    m = block_max(m);
    C s = 0;
    for (int64_t j = threadIdx.x; j < classes; j += blockDim.x) s += dexp(load(x[j]) - m);
    s = block_sum(s);
    const int64_t target = static_cast<int64_t>(targets[r]);
    if (threadIdx.x == 0) row_loss[r] = static_cast<double>(dlog(s) + m - load(x[target]));
    if (dlogits != nullptr) {
      const C inv = C(1) / s;
      for (int64_t j = threadIdx.x; j < classes; j += blockDim.x) {
        C g = dexp(load(x[j]) - m) * inv;
        if (j == target) g -= C(1);
        store(dlogits[r * classes + j], g * inv_normalizer);
      }
    }
  }
}

// Block sums of (p - t)^2 in float64, one per block.
// Vocabulary shards: ids outside [first, first + shard_rows) give zero rows and no gradient.
template <typename T, typename I>
__global__ void embedding_shard_forward_kernel(const I* tokens, const T* wte, T* y, int64_t rows, int64_t C,
                                               int64_t first, int64_t shard_rows) {
  PARITY_GRID_STRIDE(e, rows * C) {
    const int64_t row = e / C, c = e % C;
    const int64_t id = static_cast<int64_t>(tokens[row]) - first;
    y[e] = id >= 0 && id < shard_rows ? wte[id * C + c] : T{};
  }
}

template <typename T, typename A, typename I>
__global__ void embedding_shard_scatter_kernel(const T* dy, const I* tokens, A* target, int64_t rows, int64_t C,
                                               int64_t first, int64_t shard_rows) {
  PARITY_GRID_STRIDE(e, rows * C) {
    const int64_t row = e / C, c = e % C;
    const int64_t id = static_cast<int64_t>(tokens[row]) - first;
    if (id >= 0 && id < shard_rows) atomicAdd(&target[id * C + c], static_cast<A>(load(dy[e])));
  }
}

template <typename T> __global__ void shard_max_kernel(const T* logits, int64_t rows, int64_t classes, Acc<T>* row_max) {
  using C = Acc<T>;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* x = logits + r * classes;
    C m = negative_infinity<C>();
    for (int64_t j = threadIdx.x; j < classes; j += blockDim.x) m = load(x[j]) > m ? load(x[j]) : m;
    m = block_max(m);
    if (threadIdx.x == 0) row_max[r] = m;
  }
}

template <typename T, typename I>
__global__ void shard_sums_kernel(const T* logits, const I* targets, int64_t rows, int64_t classes, int64_t first,
                                  const Acc<T>* row_max, Acc<T>* sum_exp, Acc<T>* target_logit) {
  using C = Acc<T>;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* x = logits + r * classes;
    const C m = row_max[r];
    C s = 0;
    for (int64_t j = threadIdx.x; j < classes; j += blockDim.x) s += dexp(load(x[j]) - m);
    s = block_sum(s);
    if (threadIdx.x == 0) {
      const int64_t target = static_cast<int64_t>(targets[r]) - first;
      sum_exp[r] = s;
      target_logit[r] = target >= 0 && target < classes ? load(x[target]) : C(0);
    }
  }
}

template <typename T, typename I>
__global__ void shard_backward_kernel(const T* logits, const I* targets, int64_t rows, int64_t classes, int64_t first,
                                      const Acc<T>* row_max, const Acc<T>* sum_exp, Acc<T> inv_normalizer, T* dlogits) {
  using C = Acc<T>;
  PARITY_GRID_STRIDE(e, rows * classes) {
    const int64_t r = e / classes, j = e % classes;
    C g = dexp(load(logits[e]) - row_max[r]) / sum_exp[r];
    if (j == static_cast<int64_t>(targets[r]) - first) g -= C(1);
    store(dlogits[e], g * inv_normalizer);
  }
}

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

// --- Dropout ---------------------------------------------------------------------------------

template <typename T>
__global__ void dropout_kernel(const T* in, T* out, int64_t n, double p, Acc<T> scale, std::uint64_t seed,
                               std::uint64_t stream_id, std::uint64_t first) {
  PARITY_GRID_STRIDE(i, n) {
    const bool keep = dropout_keeps(p, seed, stream_id, first + static_cast<std::uint64_t>(i));
    store(out[i], keep ? load(in[i]) * scale : Acc<T>(0));
  }
}

// --- Optimizers ------------------------------------------------------------------------------

// A parameter or gradient element as the state type S, through double as the CPU does.
template <typename S, typename V> __device__ inline S to_state(V v) {
  return static_cast<S>(static_cast<double>(load(v)));
}
// An updated value stored in V (16-bit types through float, as parity::from_double).
template <typename V> __device__ inline void store_value(V& dst, double x) {
  if constexpr (std::is_same<V, double>::value) dst = x;
  else store(dst, static_cast<float>(x));
}

template <typename V, typename S>
__global__ void sgd_kernel(V* value, const V* grad, S* buffer, int64_t n, S lr, S mu, S wd) {
  PARITY_GRID_STRIDE(i, n) {
    const S p = to_state<S>(value[i]);
    S d = to_state<S>(grad[i]) + wd * p;
    if (buffer != nullptr) d = buffer[i] = mu * buffer[i] + d;
    store_value(value[i], static_cast<double>(p - lr * d));
  }
}

template <typename V, typename S>
__global__ void adamw_kernel(V* value, const V* grad, S* m, S* v, int64_t n, S lr, S b1, S b2, S one_minus_b1,
                             S one_minus_b2, S eps, S wd, S correction1, S correction2) {
  PARITY_GRID_STRIDE(i, n) {
    S p = to_state<S>(value[i]);
    const S g = to_state<S>(grad[i]);
    p -= lr * wd * p;
    m[i] = b1 * m[i] + one_minus_b1 * g;
    v[i] = b2 * v[i] + one_minus_b2 * g * g;
    p -= lr * (m[i] / correction1) / (dsqrt(v[i] / correction2) + eps);
    store_value(value[i], static_cast<double>(p));
  }
}

}  // namespace

// --- Launch functions ---------------------------------------------------------------------------

void matmul(int dtype, bool transpose_a, bool transpose_b, int m, int n, int k, const void* a, int lda, const void* b,
            int ldb, void* c, int ldc, bool accumulate, bool allow_tf32) {
  cublasHandle_t handle = blas_handle();
  // Reductions inside cuBLAS (split-K) stay in the compute type even for 16-bit outputs, so the
  // result is rounded once, as on the CPU. TF32 only when asked for.
  const int math = (allow_tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH) |
                   CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION;
  check_blas(cublasSetMathMode(handle, static_cast<cublasMath_t>(math)), "cublasSetMathMode");
  // cuBLAS is column-major: a row-major matrix is its transpose there, so row-major
  // c = op(a) op(b) is column-major c^T = op(b)^T op(a)^T: swap the operands and m with n.
  const cublasOperation_t op_a = transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  cudaDataType_t type;
  cublasComputeType_t compute;
  switch (dtype) {
    case kFloat64: type = CUDA_R_64F; compute = CUBLAS_COMPUTE_64F; break;
    case kFloat32: type = CUDA_R_32F; compute = allow_tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F; break;
    case kFloat16: type = CUDA_R_16F; compute = CUBLAS_COMPUTE_32F; break;
    case kBFloat16: type = CUDA_R_16BF; compute = CUBLAS_COMPUTE_32F; break;
    default: raise_error("matmul: data type " + std::to_string(dtype) + " is not a floating-point type");
  }
  const double alpha64 = 1.0, beta64 = accumulate ? 1.0 : 0.0;
  const float alpha32 = 1.0f, beta32 = accumulate ? 1.0f : 0.0f;
  const void* alpha = dtype == kFloat64 ? static_cast<const void*>(&alpha64) : static_cast<const void*>(&alpha32);
  const void* beta = dtype == kFloat64 ? static_cast<const void*>(&beta64) : static_cast<const void*>(&beta32);
  check_blas(cublasGemmEx(handle, op_b, op_a, n, m, k, alpha, b, type, ldb, a, type, lda, beta, c, type, ldc, compute,
                          CUBLAS_GEMM_DEFAULT),
             "cublasGemmEx");
}

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

void add(int dtype, const void* a, const void* b, void* y, int64_t count) {
  visit_floating(dtype, "add", [&](auto tag) {
    using T = decltype(tag);
    add_kernel<T><<<blocks_for(count), kThreads, 0, stream()>>>(static_cast<const T*>(a), static_cast<const T*>(b),
                                                               static_cast<T*>(y), count);
  });
  check_launch("add_kernel");
}

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
    // A split backward leaves out one part (a null pointer): dx, or dgamma with dbeta.
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

namespace {
// One block per (b, h, row): B*H*T blocks, 128 threads (rows of T scores, hs outputs).
constexpr int kAttentionThreads = 128;
unsigned attention_blocks(const Heads& s) {
  const int64_t blocks = static_cast<int64_t>(s.B) * s.H * s.T;
  if (blocks > 0x7fffffff) raise_error("attention: B * H * T exceeds the CUDA grid");
  return static_cast<unsigned>(blocks);
}
}  // namespace

void attention_forward(int dtype, const void* qkv, void* out, void* probs, int B, int T, int C, int H, bool causal) {
  const Heads s{B, T, C, H, C / H};
  const double scale = 1.0 / std::sqrt(static_cast<double>(s.hs));
  visit_wide(dtype, "attention_forward", [&](auto tag) {
    using F = decltype(tag);
    attention_forward_kernel<F><<<attention_blocks(s), kAttentionThreads, 0, stream()>>>(
        static_cast<const F*>(qkv), static_cast<F*>(out), static_cast<F*>(probs), s, static_cast<F>(scale), causal);
  });
  check_launch("attention_forward_kernel");
}

void attention_backward(int dtype, const void* dout, const void* qkv, const void* probs, void* dqkv, void* scratch,
                        int B, int T, int C, int H) {
  const Heads s{B, T, C, H, C / H};
  const double scale = 1.0 / std::sqrt(static_cast<double>(s.hs));
  visit_wide(dtype, "attention_backward", [&](auto tag) {
    using F = decltype(tag);
    attention_backward_rows_kernel<F><<<attention_blocks(s), kAttentionThreads, 0, stream()>>>(
        static_cast<const F*>(dout), static_cast<const F*>(qkv), static_cast<const F*>(probs), static_cast<F*>(dqkv),
        static_cast<F*>(scratch), s, static_cast<F>(scale));
    check_launch("attention_backward_rows_kernel");
    attention_backward_columns_kernel<F><<<attention_blocks(s), kAttentionThreads, 0, stream()>>>(
        static_cast<const F*>(dout), static_cast<const F*>(qkv), static_cast<const F*>(probs), static_cast<F*>(dqkv),
        static_cast<const F*>(scratch), s);
    check_launch("attention_backward_columns_kernel");
  });
}

int64_t first_invalid_index(const void* indices, int index_dtype, int64_t count, int64_t limit, void* scratch) {
  auto* first = static_cast<unsigned long long*>(scratch);
  check(cudaMemsetAsync(first, 0xFF, sizeof(unsigned long long), stream()), "cudaMemsetAsync");
  visit_index(index_dtype, "first_invalid_index", [&](auto tag) {
    using I = decltype(tag);
    first_invalid_kernel<I><<<blocks_for(count), kThreads, 0, stream()>>>(static_cast<const I*>(indices), count, limit,
                                                                         first);
  });
  check_launch("first_invalid_kernel");
  unsigned long long host = 0;
  check(cudaMemcpyAsync(&host, first, sizeof host, cudaMemcpyDeviceToHost, stream()), "cudaMemcpyAsync");
  check(cudaStreamSynchronize(stream()), "cudaStreamSynchronize");
  return host == ~0ull ? -1 : static_cast<int64_t>(host);
}

void embedding_forward(int dtype, const void* tokens, int index_dtype, const void* wte, const void* wpe, void* y,
                       int64_t B, int64_t T, int64_t C) {
  visit_floating(dtype, "embedding_forward", [&](auto tag) {
    using F = decltype(tag);
    visit_index(index_dtype, "embedding_forward", [&](auto index_tag) {
      using I = decltype(index_tag);
      embedding_forward_kernel<F, I><<<blocks_for(B * T * C), kThreads, 0, stream()>>>(
          static_cast<const I*>(tokens), static_cast<const F*>(wte), static_cast<const F*>(wpe), static_cast<F*>(y),
          B * T, T, C);
    });
  });
  check_launch("embedding_forward_kernel");
}

void embedding_backward(int dtype, const void* dy, const void* tokens, int index_dtype, void* dwte, void* dwpe,
                        float* wte_scratch, int64_t B, int64_t T, int64_t C, int64_t V) {
  visit_floating(dtype, "embedding_backward", [&](auto tag) {
    using F = decltype(tag);
    visit_index(index_dtype, "embedding_backward", [&](auto index_tag) {
      using I = decltype(index_tag);
      const unsigned blocks = blocks_for(B * T * C);
      if constexpr (std::is_same<F, Acc<F>>::value) {
        embedding_scatter_kernel<F, F, I><<<blocks, kThreads, 0, stream()>>>(
            static_cast<const F*>(dy), static_cast<const I*>(tokens), static_cast<F*>(dwte), B * T, C);
        check_launch("embedding_scatter_kernel");
      } else {
        if (wte_scratch == nullptr) raise_error("embedding_backward: 16-bit types need the float32 scratch");
        check(cudaMemsetAsync(wte_scratch, 0, static_cast<std::size_t>(V * C) * sizeof(float), stream()),
              "cudaMemsetAsync");
        embedding_scatter_kernel<F, float, I><<<blocks, kThreads, 0, stream()>>>(
            static_cast<const F*>(dy), static_cast<const I*>(tokens), wte_scratch, B * T, C);
        check_launch("embedding_scatter_kernel");
        add_float_scratch_kernel<F><<<blocks_for(V * C), kThreads, 0, stream()>>>(static_cast<F*>(dwte), wte_scratch,
                                                                                  V * C);
        check_launch("add_float_scratch_kernel");
      }
    });
    if (dwpe != nullptr) {
      position_gradient_kernel<F><<<blocks_for(T * C), kThreads, 0, stream()>>>(static_cast<const F*>(dy),
                                                                               static_cast<F*>(dwpe), B, T, C);
      check_launch("position_gradient_kernel");
    }
  });
}

double cross_entropy(int dtype, const void* logits, const void* targets, int index_dtype, int64_t rows,
                     int64_t classes, double normalizer, void* dlogits, double* scratch) {
  visit_floating(dtype, "cross_entropy", [&](auto tag) {
    using F = decltype(tag);
    visit_index(index_dtype, "cross_entropy", [&](auto index_tag) {
      using I = decltype(index_tag);
      cross_entropy_kernel<F, I><<<row_blocks(rows), kRowThreads, 0, stream()>>>(
          static_cast<const F*>(logits), static_cast<const I*>(targets), rows, classes,
          static_cast<Acc<F>>(1.0 / normalizer), static_cast<F*>(dlogits), scratch);
    });
  });
  check_launch("cross_entropy_kernel");
  sum_doubles_kernel<<<1, kSumThreads, 0, stream()>>>(scratch, rows, scratch + rows);
  check_launch("sum_doubles_kernel");
  return read_double(scratch + rows) / normalizer;
}

void embedding_shard_forward(int dtype, const void* tokens, int index_dtype, const void* wte_shard, void* y,
                             int64_t rows, int64_t C, int64_t first, int64_t shard_rows) {
  visit_floating(dtype, "embedding_shard_forward", [&](auto tag) {
    using F = decltype(tag);
    visit_index(index_dtype, "embedding_shard_forward", [&](auto index_tag) {
      using I = decltype(index_tag);
      embedding_shard_forward_kernel<F, I><<<blocks_for(rows * C), kThreads, 0, stream()>>>(
          static_cast<const I*>(tokens), static_cast<const F*>(wte_shard), static_cast<F*>(y), rows, C, first,
          shard_rows);
    });
  });
  check_launch("embedding_shard_forward_kernel");
}

void embedding_shard_backward(int dtype, const void* dy, const void* tokens, int index_dtype, void* dwte_shard,
                              float* wte_scratch, int64_t rows, int64_t C, int64_t first, int64_t shard_rows) {
  visit_floating(dtype, "embedding_shard_backward", [&](auto tag) {
    using F = decltype(tag);
    visit_index(index_dtype, "embedding_shard_backward", [&](auto index_tag) {
      using I = decltype(index_tag);
      const unsigned blocks = blocks_for(rows * C);
      if constexpr (std::is_same<F, Acc<F>>::value) {
        embedding_shard_scatter_kernel<F, F, I><<<blocks, kThreads, 0, stream()>>>(
            static_cast<const F*>(dy), static_cast<const I*>(tokens), static_cast<F*>(dwte_shard), rows, C, first,
            shard_rows);
        check_launch("embedding_shard_scatter_kernel");
      } else {
        if (wte_scratch == nullptr) raise_error("embedding_shard_backward: 16-bit types need the float32 scratch");
        check(cudaMemsetAsync(wte_scratch, 0, static_cast<std::size_t>(shard_rows * C) * sizeof(float), stream()),
              "cudaMemsetAsync");
        embedding_shard_scatter_kernel<F, float, I><<<blocks, kThreads, 0, stream()>>>(
            static_cast<const F*>(dy), static_cast<const I*>(tokens), wte_scratch, rows, C, first, shard_rows);
        check_launch("embedding_shard_scatter_kernel");
        add_float_scratch_kernel<F><<<blocks_for(shard_rows * C), kThreads, 0, stream()>>>(
            static_cast<F*>(dwte_shard), wte_scratch, shard_rows * C);
        check_launch("add_float_scratch_kernel");
      }
    });
  });
}

void cross_entropy_shard_max(int dtype, const void* logits, int64_t rows, int64_t classes, void* row_max) {
  visit_floating(dtype, "cross_entropy_shard_max", [&](auto tag) {
    using F = decltype(tag);
    shard_max_kernel<F><<<row_blocks(rows), kRowThreads, 0, stream()>>>(static_cast<const F*>(logits), rows, classes,
                                                                         static_cast<Acc<F>*>(row_max));
  });
  check_launch("shard_max_kernel");
}

void cross_entropy_shard_sums(int dtype, const void* logits, const void* targets, int index_dtype, int64_t rows,
                              int64_t classes, int64_t first, const void* row_max, void* sum_exp, void* target_logit) {
  visit_floating(dtype, "cross_entropy_shard_sums", [&](auto tag) {
    using F = decltype(tag);
    visit_index(index_dtype, "cross_entropy_shard_sums", [&](auto index_tag) {
      using I = decltype(index_tag);
      shard_sums_kernel<F, I><<<row_blocks(rows), kRowThreads, 0, stream()>>>(
          static_cast<const F*>(logits), static_cast<const I*>(targets), rows, classes, first,
          static_cast<const Acc<F>*>(row_max), static_cast<Acc<F>*>(sum_exp), static_cast<Acc<F>*>(target_logit));
    });
  });
  check_launch("shard_sums_kernel");
}

void cross_entropy_shard_backward(int dtype, const void* logits, const void* targets, int index_dtype, int64_t rows,
                                  int64_t classes, int64_t first, const void* row_max, const void* sum_exp,
                                  double normalizer, void* dlogits) {
  visit_floating(dtype, "cross_entropy_shard_backward", [&](auto tag) {
    using F = decltype(tag);
    visit_index(index_dtype, "cross_entropy_shard_backward", [&](auto index_tag) {
      using I = decltype(index_tag);
      shard_backward_kernel<F, I><<<blocks_for(rows * classes), kThreads, 0, stream()>>>(
          static_cast<const F*>(logits), static_cast<const I*>(targets), rows, classes, first,
          static_cast<const Acc<F>*>(row_max), static_cast<const Acc<F>*>(sum_exp),
          static_cast<Acc<F>>(1.0 / normalizer), static_cast<F*>(dlogits));
    });
  });
  check_launch("shard_backward_kernel");
}

double mse_forward(int dtype, const void* prediction, const void* target, int64_t count, double normalizer,
                   double* scratch) {
  const unsigned blocks = std::min<unsigned>(blocks_for(count), kMaxMseBlocks);
  visit_floating(dtype, "mse_forward", [&](auto tag) {
    using F = decltype(tag);
    squared_error_kernel<F><<<blocks, kThreads, 0, stream()>>>(static_cast<const F*>(prediction),
                                                              static_cast<const F*>(target), count, scratch);
  });
  check_launch("squared_error_kernel");
  sum_doubles_kernel<<<1, kSumThreads, 0, stream()>>>(scratch, blocks, scratch + kMaxMseBlocks);
  check_launch("sum_doubles_kernel");
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

void dropout(int dtype, const void* in, void* out, int64_t count, double p, std::uint64_t seed, std::uint64_t stream_id,
             std::uint64_t first) {
  const double scale = 1.0 / (1.0 - p);
  visit_floating(dtype, "dropout", [&](auto tag) {
    using F = decltype(tag);
    dropout_kernel<F><<<blocks_for(count), kThreads, 0, stream()>>>(static_cast<const F*>(in), static_cast<F*>(out),
                                                                    count, p, static_cast<Acc<F>>(scale), seed,
                                                                    stream_id, first);
  });
  check_launch("dropout_kernel");
}

void sgd_update(int value_dtype, int state_dtype, void* value, const void* grad, void* buffer, int64_t count,
                double learning_rate, double momentum, double weight_decay) {
  visit_floating(value_dtype, "sgd_update", [&](auto value_tag) {
    using V = decltype(value_tag);
    visit_state(state_dtype, "sgd_update", [&](auto state_tag) {
      using S = decltype(state_tag);
      sgd_kernel<V, S><<<blocks_for(count), kThreads, 0, stream()>>>(
          static_cast<V*>(value), static_cast<const V*>(grad), static_cast<S*>(buffer), count,
          static_cast<S>(learning_rate), static_cast<S>(momentum), static_cast<S>(weight_decay));
    });
  });
  check_launch("sgd_kernel");
}

void adamw_update(int value_dtype, int state_dtype, void* value, const void* grad, void* m, void* v, int64_t count,
                  double learning_rate, double beta1, double beta2, double epsilon, double weight_decay,
                  double correction1, double correction2) {
  visit_floating(value_dtype, "adamw_update", [&](auto value_tag) {
    using V = decltype(value_tag);
    visit_state(state_dtype, "adamw_update", [&](auto state_tag) {
      using S = decltype(state_tag);
      adamw_kernel<V, S><<<blocks_for(count), kThreads, 0, stream()>>>(
          static_cast<V*>(value), static_cast<const V*>(grad), static_cast<S*>(m), static_cast<S*>(v), count,
          static_cast<S>(learning_rate), static_cast<S>(beta1), static_cast<S>(beta2),
          // 1 - beta in float64, rounded once (as on the CPU): in S it would cancel.
          static_cast<S>(1 - beta1), static_cast<S>(1 - beta2), static_cast<S>(epsilon),
          static_cast<S>(weight_decay), static_cast<S>(correction1), static_cast<S>(correction2));
    });
  });
  check_launch("adamw_kernel");
}

// --- Mixture-of-experts rows ----------------------------------------------------------------

template <typename T> __global__ void gather_rows_kernel(const T* x, const int64_t* row_token, T* y, int64_t A, int64_t C) {
  PARITY_GRID_STRIDE(e, A * C) y[e] = x[row_token[e / C] * C + e % C];
}

// One thread per (token, channel), summing the token's assignments in list order: deterministic.
template <typename T>
__global__ void sum_token_rows_kernel(const T* rows, const T* gates, const int64_t* offsets, const int64_t* token_rows,
                                      T* y, int64_t N, int64_t C) {
  using A = Acc<T>;
  PARITY_GRID_STRIDE(e, N * C) {
    const int64_t n = e / C, c = e % C;
    A sum = 0;
    for (int64_t i = offsets[n]; i < offsets[n + 1]; ++i) {
      const int64_t a = token_rows[i];
      sum += (gates != nullptr ? load(gates[a]) : A(1)) * load(rows[a * C + c]);
    }
    store(y[e], sum);
  }
}

// One thread per assignment: its gate's gradient (a dot product over C) and its row's.
template <typename T>
__global__ void combine_rows_backward_kernel(const T* dy, const T* rows, const T* gates, const int64_t* row_token,
                                             T* drows, T* dgates, int64_t A_, int64_t C) {
  using A = Acc<T>;
  PARITY_GRID_STRIDE(a, A_) {
    const T* g = dy + row_token[a] * C;
    const A w = load(gates[a]);
    A dot = 0;
    for (int64_t c = 0; c < C; ++c) {
      dot += load(g[c]) * load(rows[a * C + c]);
      store(drows[a * C + c], w * load(g[c]));
    }
    store(dgates[a], dot);
  }
}

void gather_rows(int dtype, const void* x, const int64_t* row_token, void* y, int64_t A, int64_t C) {
  visit_floating(dtype, "gather_rows", [&](auto tag) {
    using T = decltype(tag);
    gather_rows_kernel<T><<<blocks_for(A * C), kThreads, 0, stream()>>>(static_cast<const T*>(x), row_token,
                                                                       static_cast<T*>(y), A, C);
  });
  check_launch("gather_rows_kernel");
}

void sum_token_rows(int dtype, const void* rows, const void* gates, const int64_t* offsets, const int64_t* token_rows,
                    void* y, int64_t N, int64_t C) {
  visit_floating(dtype, "sum_token_rows", [&](auto tag) {
    using T = decltype(tag);
    sum_token_rows_kernel<T><<<blocks_for(N * C), kThreads, 0, stream()>>>(
        static_cast<const T*>(rows), static_cast<const T*>(gates), offsets, token_rows, static_cast<T*>(y), N, C);
  });
  check_launch("sum_token_rows_kernel");
}

void combine_rows_backward(int dtype, const void* dy, const void* rows, const void* gates, const int64_t* row_token,
                           void* drows, void* dgates, int64_t A, int64_t C) {
  visit_floating(dtype, "combine_rows_backward", [&](auto tag) {
    using T = decltype(tag);
    combine_rows_backward_kernel<T><<<blocks_for(A), kThreads, 0, stream()>>>(
        static_cast<const T*>(dy), static_cast<const T*>(rows), static_cast<const T*>(gates), row_token,
        static_cast<T*>(drows), static_cast<T*>(dgates), A, C);
  });
  check_launch("combine_rows_backward_kernel");
}

}  // namespace parity::ops::kernels
