// cuBLAS and cuBLASLt, opened at their first use instead of linked. A linked cuBLASLt runs its
// initialisers in every process as it starts (about half a second each, with a GPU or without),
// and parity starts many processes that never touch a GPU: every rank of every CPU run and test.
// Only where CUDA is: this header needs the toolkit's.
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>

namespace parity::cuda {

// The functions parity calls, each the library's function of the same name (cublas_v2.h's
// names: create is cublasCreate_v2).
struct Blas {
  decltype(&::cublasCreate) create;
  decltype(&::cublasSetStream) set_stream;
  decltype(&::cublasSetMathMode) set_math_mode;
  // The C function (the headers add a C++ overload taking the compute type as a cudaDataType).
  cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*,
                            const void*, cudaDataType, int, const void*, cudaDataType, int, const void*, void*,
                            cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);
  decltype(&::cublasGetStatusString) status_string;
  decltype(&::cublasLtCreate) lt_create;
  decltype(&::cublasLtMatmul) lt_matmul;
  decltype(&::cublasLtMatmulDescCreate) lt_matmul_desc_create;
  decltype(&::cublasLtMatmulDescSetAttribute) lt_matmul_desc_set_attribute;
  decltype(&::cublasLtMatrixLayoutCreate) lt_matrix_layout_create;
  decltype(&::cublasLtMatmulPreferenceCreate) lt_preference_create;
  decltype(&::cublasLtMatmulPreferenceSetAttribute) lt_preference_set_attribute;
  decltype(&::cublasLtMatmulPreferenceDestroy) lt_preference_destroy;
  decltype(&::cublasLtMatmulAlgoGetHeuristic) lt_algo_get_heuristic;
};

// Opens both libraries once (the loader's search: LD_LIBRARY_PATH, the executable's run path,
// the cache; then the toolkit parity was built with). Throws an Error naming the library and
// the loader's words when one cannot be opened or lacks a function.
const Blas& blas();

}  // namespace parity::cuda
