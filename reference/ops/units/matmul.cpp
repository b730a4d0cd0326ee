// Matrix multiply (ops.hpp: matmul, set_tf32) and the BLAS product that attention's CPU body
// shares (unit_host.hpp: gemm): OpenBLAS on the CPU, cuBLAS on the device.
#include "reference/ops/unit.hpp"

namespace parity::ops::device {
// Row-major c[m, n] (+)= op(a) op(b) by cuBLAS; lda, ldb, ldc are the row lengths of a, b, c as
// stored. float32/float64, or float16/bfloat16 with float32 accumulation and one rounding of
// the result. allow_tf32 lets float32 products use TF32 tensor cores (10-bit mantissas).
void matmul(int dtype, bool transpose_a, bool transpose_b, int m, int n, int k, const void* a, int lda, const void* b,
            int ldb, void* c, int ldc, bool accumulate, bool allow_tf32);
}  // namespace parity::ops::device

#ifndef __CUDACC__

#include <cblas.h>

#include <atomic>
#include <mutex>

#include <cstdlib>
#include <string>

#ifdef PARITY_OPENBLAS
extern "C" void openblas_set_num_threads(int);
extern "C" char* openblas_get_corename();
extern "C" char* openblas_get_config();
#endif

namespace parity::ops {

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

std::string blas_description() {
#ifdef PARITY_OPENBLAS
  std::string text = std::string(openblas_get_config()) + "; kernels " + openblas_get_corename();
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr) text += " (OPENBLAS_CORETYPE)";
#else
  std::string text = blas_name();
#endif
  return text + "; small float32 products (k <= " + std::to_string(simd::kSmallGemmDepth) + ", m k <= " +
         std::to_string(simd::kSmallGemmLeft) + ", n <= " + std::to_string(simd::kSmallGemmColumns) +
         (simd::small_gemm_takes(1, 16, 1) ? ") by simd::small_gemm" : ") by the BLAS too: this CPU's vectors are short");
}

namespace {
std::atomic<bool> g_allow_tf32{false};
}  // namespace

void set_tf32(bool allow) { g_allow_tf32.store(allow); }
bool tf32() { return g_allow_tf32.load(); }

void gemm(bool ta, bool tb, int m, int n, int k, double alpha, const double* a, int lda, const double* b, int ldb,
          double beta, double* c, int ldc) {
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda,
              b, ldb, beta, c, ldc);
  flop_counter().matmul += 2LL * m * n * k;
}
void gemm(bool ta, bool tb, int m, int n, int k, float alpha, const float* a, int lda, const float* b, int ldb,
          float beta, float* c, int ldc) {
  // Small products by the vectorised loops, which spend nothing on packing (simd.hpp); the rest,
  // and any alpha or beta but 1 and 0 or 1, by BLAS.
  if (alpha == 1.f && (beta == 0.f || beta == 1.f) && m > 0 && n > 0 && k > 0 &&
      simd::small_gemm(ta, tb, static_cast<std::size_t>(m), static_cast<std::size_t>(n), static_cast<std::size_t>(k), a,
                       static_cast<std::size_t>(lda), b, static_cast<std::size_t>(ldb), beta == 1.f, c,
                       static_cast<std::size_t>(ldc))) {
    flop_counter().matmul += 2LL * m * n * k;
    return;
  }
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda,
              b, ldb, beta, c, ldc);
  flop_counter().matmul += 2LL * m * n * k;
}

namespace {
// The product's sizes as BLAS integers: M, N, K and the stored row lengths of a and b.
struct MatmulSizes {
  int M, N, K, lda, ldb;
};

MatmulSizes check_matmul(const char* op, const Tensor& a, bool transpose_a, const Tensor& b, bool transpose_b,
                         const Tensor& c) {
  require_defined(op, a, "a");
  same_type(op, a, b);
  same_type(op, a, c);
  require_same_space(op, {&a, &b, &c});
  require_floating(op, a);
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
  return {blas_int(op, m), blas_int(op, n), blas_int(op, k), blas_int(op, a.dim(1)), blas_int(op, b.dim(1))};
}
}  // namespace

bool small_product_with_bias(const Tensor& a, const Tensor& b, const Tensor& bias, Tensor& c) {
  const MatmulSizes s = check_matmul("matmul", a, false, b, false, c);
  if (a.dtype() != DataType::float32 || on_device(a) || c.raw() == bias.raw()) return false;
  if (!simd::small_gemm(false, false, static_cast<std::size_t>(s.M), static_cast<std::size_t>(s.N),
                        static_cast<std::size_t>(s.K), a.data<float>(), static_cast<std::size_t>(s.lda), b.data<float>(),
                        static_cast<std::size_t>(s.ldb), false, c.data<float>(), static_cast<std::size_t>(s.N),
                        bias.data<float>()))
    return false;
  flop_counter().matmul += 2LL * s.M * s.N * s.K;
  return true;
}

void matmul(const Tensor& a, bool transpose_a, const Tensor& b, bool transpose_b, Tensor& c, bool accumulate) {
  const char* op = "matmul";
  const MatmulSizes s = check_matmul(op, a, transpose_a, b, transpose_b, c);
  const int M = s.M, N = s.N, K = s.K, lda = s.lda, ldb = s.ldb;
  if constexpr (kCudaBuilt) {
    if (on_device(a)) {
      device::matmul(code(a), transpose_a, transpose_b, M, N, K, a.raw(), lda, b.raw(), ldb, c.raw(), N, accumulate,
                     tf32());
      flop_counter().matmul += 2LL * M * N * K;
      return;
    }
  }
  configure_blas_once();
  switch (a.dtype()) {
    case DataType::float64:
      gemm(transpose_a, transpose_b, M, N, K, 1.0, a.data<double>(), lda, b.data<double>(), ldb, accumulate ? 1.0 : 0.0,
           c.data<double>(), N);
      return;
    case DataType::float32:
      gemm(transpose_a, transpose_b, M, N, K, 1.0f, a.data<float>(), lda, b.data<float>(), ldb, accumulate ? 1.f : 0.f,
           c.data<float>(), N);
      return;
    default: {  // 16-bit storage (the check refused integer tensors)
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
  }
}

}  // namespace parity::ops

#else  // the device part

#include "reference/cuda/blas.hpp"

namespace parity::ops::device {
namespace {

void check_blas(cublasStatus_t rc, const char* what, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  if (rc != CUBLAS_STATUS_SUCCESS) raise_error(std::string("cuBLAS: ") + cuda::blas().status_string(rc), what, file, line);
}

// One handle per process, made on first use (after the device is selected) and bound to the
// process's stream. It is never destroyed: a destructor at static destruction could run after
// the CUDA runtime has shut down, and the process's end frees it anyway.
cublasHandle_t blas_handle() {
  static cublasHandle_t handle = [] {
    cublasHandle_t h = nullptr;
    check_blas(cuda::blas().create(&h), "cublasCreate");
    check_blas(cuda::blas().set_stream(h, stream()), "cublasSetStream");
    return h;
  }();
  return handle;
}

}  // namespace

void matmul(int dtype, bool transpose_a, bool transpose_b, int m, int n, int k, const void* a, int lda, const void* b,
            int ldb, void* c, int ldc, bool accumulate, bool allow_tf32) {
  cublasHandle_t handle = blas_handle();
  // Reductions inside cuBLAS (split-K) stay in the compute type even for 16-bit outputs, so the
  // result is rounded once, as on the CPU. TF32 only when asked for.
  const int math = (allow_tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH) |
                   CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION;
  check_blas(cuda::blas().set_math_mode(handle, static_cast<cublasMath_t>(math)), "cublasSetMathMode");
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
  check_blas(cuda::blas().gemm_ex(handle, op_b, op_a, n, m, k, alpha, b, type, ldb, a, type, lda, beta, c, type, ldc, compute,
                          CUBLAS_GEMM_DEFAULT),
             "cublasGemmEx");
}

}  // namespace parity::ops::device

#endif
