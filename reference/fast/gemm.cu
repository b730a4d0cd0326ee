// The fast path's matrix multiplies through cuBLASLt (ops.hpp): 16-bit operands, float32
// accumulation, bias, GeLU and their gradients fused into the product's epilogue where
// cuBLASLt offers a kernel for the shape; where it offers none, the same result comes from the
// plain product and a separate element-wise kernel (counted in `epilogue_fallbacks()`).
//
// parity's matrices are row-major; cuBLASLt's are column-major. A row-major [r, c] buffer read
// as column-major is its transpose [c, r], so each row-major product Y = X W is issued as the
// column-major Y^T = W^T X^T, with the operands swapped and nothing copied.

#include <atomic>
#include <cmath>
#include <map>
#include <mutex>
#include <tuple>

#include "reference/cuda/blas.hpp"
#include "reference/fast/device_common.cuh"

namespace parity::fast {
namespace {

using detail::check;
using detail::check_launch;
using detail::Tensor16;

std::atomic<std::int64_t> g_flops{0};
std::atomic<std::int64_t> g_fallbacks{0};

void check_lt(cublasStatus_t rc, const char* what) {
  if (rc != CUBLAS_STATUS_SUCCESS) raise_error(std::string("cuBLASLt: status ") + std::to_string(static_cast<int>(rc)), what);
}

cudaDataType_t cuda_type(Storage s) { return s == Storage::bfloat16 ? CUDA_R_16BF : CUDA_R_16F; }

// One product as cuBLASLt sees it (column-major): C[m, n] (+)= op(A)[m, k] op(B)[k, n].
struct Product {
  Storage s;
  bool ta, tb;
  std::int64_t m, n, k;
  const void* a;
  std::int64_t lda;
  const void* b;
  std::int64_t ldb;
  void* c;
  std::int64_t ldc;
  bool c_float32 = false;
  bool accumulate = false;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  void* bias = nullptr;  // bias (input) or bias gradient (output), m elements
  void* aux = nullptr;   // GeLU's pre-activation, m x n with leading dimension m
};

constexpr std::size_t kWorkspaceBytes = std::size_t{32} << 20;

// The handle, the workspace and, per shape and epilogue, the descriptors and the algorithm the
// heuristic chose (looked up once; a shape with no algorithm is remembered as such).
class Lt {
 public:
  static Lt& instance() {
    static Lt lt;
    return lt;
  }
  // False when cuBLASLt has no algorithm for the product with its epilogue.
  bool run(const Product& p) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (handle_ == nullptr) {
      check_lt(cuda::blas().lt_create(&handle_), "cublasLtCreate");
      check(cudaMalloc(&workspace_, kWorkspaceBytes), "cudaMalloc(cuBLASLt workspace)");
    }
    const auto key = std::make_tuple(static_cast<int>(p.s), p.ta, p.tb, p.m, p.n, p.k, p.c_float32, p.accumulate,
                                     static_cast<int>(p.epilogue));
    auto it = plans_.find(key);
    if (it == plans_.end()) it = plans_.emplace(key, make_plan(p)).first;
    Plan& plan = it->second;
    if (!plan.found) return false;
    if (p.bias)
      check_lt(cuda::blas().lt_matmul_desc_set_attribute(plan.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &p.bias, sizeof(p.bias)),
               "bias pointer");
    if (p.aux)
      check_lt(cuda::blas().lt_matmul_desc_set_attribute(plan.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &p.aux, sizeof(p.aux)),
               "aux pointer");
    const float alpha = 1.f, beta = p.accumulate ? 1.f : 0.f;
    check_lt(cuda::blas().lt_matmul(handle_, plan.op, &alpha, p.a, plan.a, p.b, plan.b, &beta, p.c, plan.c, p.c, plan.c,
                            &plan.algo, workspace_, kWorkspaceBytes, detail::stream()),
             "cublasLtMatmul");
    return true;
  }

 private:
  struct Plan {
    bool found = false;
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algo{};
  };
  Plan make_plan(const Product& p) {
    Plan plan;
    check_lt(cuda::blas().lt_matmul_desc_create(&plan.op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate");
    const cublasOperation_t ta = p.ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb = p.tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    check_lt(cuda::blas().lt_matmul_desc_set_attribute(plan.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)), "transa");
    check_lt(cuda::blas().lt_matmul_desc_set_attribute(plan.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)), "transb");
    check_lt(cuda::blas().lt_matmul_desc_set_attribute(plan.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &p.epilogue, sizeof(p.epilogue)),
             "epilogue");
    // Pointers for the heuristic's alignment checks; set again at each call.
    if (p.bias)
      check_lt(cuda::blas().lt_matmul_desc_set_attribute(plan.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &p.bias, sizeof(p.bias)), "bias");
    if (p.aux) {
      check_lt(cuda::blas().lt_matmul_desc_set_attribute(plan.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &p.aux, sizeof(p.aux)),
               "aux");
      const std::int64_t ld = p.m;
      check_lt(cuda::blas().lt_matmul_desc_set_attribute(plan.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof(ld)), "aux ld");
    }
    const cudaDataType_t t = cuda_type(p.s);
    check_lt(cuda::blas().lt_matrix_layout_create(&plan.a, t, p.ta ? p.k : p.m, p.ta ? p.m : p.k, p.lda), "layout a");
    check_lt(cuda::blas().lt_matrix_layout_create(&plan.b, t, p.tb ? p.n : p.k, p.tb ? p.k : p.n, p.ldb), "layout b");
    check_lt(cuda::blas().lt_matrix_layout_create(&plan.c, p.c_float32 ? CUDA_R_32F : t, p.m, p.n, p.ldc), "layout c");
    cublasLtMatmulPreference_t pref = nullptr;
    check_lt(cuda::blas().lt_preference_create(&pref), "cublasLtMatmulPreferenceCreate");
    check_lt(cuda::blas().lt_preference_set_attribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &kWorkspaceBytes,
                                                  sizeof(kWorkspaceBytes)),
             "workspace preference");
    cublasLtMatmulHeuristicResult_t result{};
    int count = 0;
    const cublasStatus_t rc =
        cuda::blas().lt_algo_get_heuristic(handle_, plan.op, plan.a, plan.b, plan.c, plan.c, pref, 1, &result, &count);
    cuda::blas().lt_preference_destroy(pref);
    if (rc == CUBLAS_STATUS_SUCCESS && count > 0) {
      plan.found = true;
      plan.algo = result.algo;
    } else if (p.epilogue == CUBLASLT_EPILOGUE_DEFAULT) {
      raise_error("cuBLASLt has no algorithm for a " + std::to_string(p.m) + " x " + std::to_string(p.n) + " x " +
                  std::to_string(p.k) + " product (status " + std::to_string(static_cast<int>(rc)) + ")");
    }
    return plan;
  }

  std::mutex mutex_;
  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  std::map<std::tuple<int, bool, bool, std::int64_t, std::int64_t, std::int64_t, bool, bool, int>, Plan> plans_;
};

// --- The separate kernels used where no fused epilogue is offered ---------------------------------

__device__ __forceinline__ float gelu(float x) {
  const float u = 0.7978845608028654f * (x + 0.044715f * x * x * x);
  return 0.5f * x * (1.f + tanhf(u));
}
__device__ __forceinline__ float gelu_grad(float x) {
  const float u = 0.7978845608028654f * (x + 0.044715f * x * x * x), t = tanhf(u);
  return 0.5f * (1.f + t) + 0.5f * x * (1.f - t * t) * 0.7978845608028654f * (1.f + 3.f * 0.044715f * x * x);
}

// y[r, c] = gelu(pre[r, c]) (rows of n columns), or y *= gelu'(pre) with `backward`.
template <typename T> __global__ void gelu_kernel(const T* pre, T* y, std::int64_t count, bool backward) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const float x = Tensor16<T>::to_float(pre[i]);
    y[i] = Tensor16<T>::from_float(backward ? Tensor16<T>::to_float(y[i]) * gelu_grad(x) : gelu(x));
  }
}
// y[r, c] += bias[c] for rows of n columns.
template <typename T> __global__ void bias_kernel(T* y, const T* bias, std::int64_t count, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    y[i] = Tensor16<T>::from_float(Tensor16<T>::to_float(y[i]) + Tensor16<T>::to_float(bias[i % n]));
}
// db[c] = sum over the rows of dy[rows, n] column c, in row order (one thread per column).
template <typename T> __global__ void column_sum_kernel(const T* dy, T* db, std::int64_t rows, std::int64_t n) {
  const std::int64_t c = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (c >= n) return;
  float sum = 0.f;
  for (std::int64_t r = 0; r < rows; ++r) sum += Tensor16<T>::to_float(dy[r * n + c]);
  db[c] = Tensor16<T>::from_float(sum);
}


void count(const Product& p) { g_flops += 2 * p.m * p.n * p.k; }

void run_plain(Product p) {
  p.epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  p.bias = nullptr;
  p.aux = nullptr;
  Lt::instance().run(p);
}

void require_sizes(std::int64_t M, std::int64_t K, std::int64_t N, const char* op) {
  if (M < 1 || K < 1 || N < 1 || K % 8 != 0 || N % 8 != 0)
    raise_error(std::string("fast ") + op + ": sizes M=" + std::to_string(M) + " K=" + std::to_string(K) +
                " N=" + std::to_string(N) + " must be positive, K and N multiples of 8");
}

}  // namespace

std::int64_t matmul_flops_issued() { return g_flops.load(); }
std::int64_t epilogue_fallbacks() { return g_fallbacks.load(); }

void linear_forward(Storage s, const void* x, const void* w, const void* bias, void* y, void* aux, std::int64_t M,
                    std::int64_t K, std::int64_t N, Epilogue epilogue) {
  require_sizes(M, K, N, "linear_forward");
  Product p{s, false, false, N, M, K, w, N, x, K, y, N};
  if (epilogue == Epilogue::bias) {
    p.epilogue = CUBLASLT_EPILOGUE_BIAS;
    p.bias = const_cast<void*>(bias);
  } else if (epilogue == Epilogue::bias_gelu) {
    p.epilogue = CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    p.bias = const_cast<void*>(bias);
    p.aux = aux;
  } else if (epilogue != Epilogue::none) {
    raise_error("fast linear_forward: the dgelu epilogue belongs to linear_backward_input");
  }
  count(p);
  if (Lt::instance().run(p)) return;
  ++g_fallbacks;
  detail::with_storage(s, [&](auto type) {
    using T = decltype(type);
    void* pre = epilogue == Epilogue::bias_gelu ? aux : y;
    Product plain = p;
    plain.c = pre;
    run_plain(plain);
    bias_kernel<T><<<detail::grid_for(M * N), 256, 0, detail::stream()>>>(static_cast<T*>(pre), static_cast<const T*>(bias),
                                                                   M * N, N);
    check_launch("bias_kernel");
    if (epilogue == Epilogue::bias_gelu) {
      gelu_kernel<T><<<detail::grid_for(M * N), 256, 0, detail::stream()>>>(static_cast<const T*>(pre), static_cast<T*>(y),
                                                                     M * N, false);
      check_launch("gelu_kernel");
    }
  });
}

void linear_backward_input(Storage s, const void* dy, const void* w, void* dx, const void* aux, std::int64_t M,
                           std::int64_t K, std::int64_t N, Epilogue epilogue) {
  require_sizes(M, K, N, "linear_backward_input");
  Product p{s, true, false, K, M, N, w, N, dy, N, dx, K};
  if (epilogue == Epilogue::dgelu) {
    p.epilogue = CUBLASLT_EPILOGUE_DGELU;
    p.aux = const_cast<void*>(aux);
  } else if (epilogue != Epilogue::none) {
    raise_error("fast linear_backward_input: only the dgelu epilogue applies");
  }
  count(p);
  if (Lt::instance().run(p)) return;
  ++g_fallbacks;
  run_plain(p);
  detail::with_storage(s, [&](auto type) {
    using T = decltype(type);
    gelu_kernel<T><<<detail::grid_for(M * K), 256, 0, detail::stream()>>>(static_cast<const T*>(aux), static_cast<T*>(dx),
                                                                   M * K, true);
    check_launch("gelu_kernel (backward)");
  });
}

void linear_backward_weight(Storage s, const void* x, const void* dy, void* dw, void* db, std::int64_t M,
                            std::int64_t K, std::int64_t N, bool accumulate) {
  require_sizes(M, K, N, "linear_backward_weight");
  Product p{s, false, true, N, K, M, dy, N, x, K, dw, N};
  p.accumulate = accumulate;
  if (db) {
    p.epilogue = CUBLASLT_EPILOGUE_BGRADA;
    p.bias = db;
  }
  count(p);
  if (Lt::instance().run(p)) return;
  ++g_fallbacks;
  run_plain(p);
  if (db == nullptr) return;
  detail::with_storage(s, [&](auto type) {
    using T = decltype(type);
    column_sum_kernel<T><<<static_cast<unsigned>((N + 255) / 256), 256, 0, detail::stream()>>>(
        static_cast<const T*>(dy), static_cast<T*>(db), M, N);
    check_launch("column_sum_kernel");
  });
}

void head_forward(Storage s, const void* x, const void* table, void* logits, std::int64_t M, std::int64_t h,
                  std::int64_t V) {
  require_sizes(M, h, V, "head_forward");
  Product p{s, true, false, V, M, h, table, h, x, h, logits, V};
  count(p);
  Lt::instance().run(p);
}

void head_backward_input(Storage s, const void* dlogits, const void* table, void* dx, std::int64_t M, std::int64_t h,
                         std::int64_t V) {
  require_sizes(M, h, V, "head_backward_input");
  Product p{s, false, false, h, M, V, table, h, dlogits, V, dx, h};
  count(p);
  Lt::instance().run(p);
}

void head_backward_table(Storage s, const void* dlogits, const void* x, float* dtable32, std::int64_t M,
                         std::int64_t h, std::int64_t V) {
  require_sizes(M, h, V, "head_backward_table");
  Product p{s, false, true, h, V, M, x, h, dlogits, V, dtable32, h};
  p.c_float32 = true;
  count(p);
  Lt::instance().run(p);
}

}  // namespace parity::fast
