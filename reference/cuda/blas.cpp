// cuBLAS and cuBLASLt opened on first use (blas.hpp).
#include "reference/cuda/blas.hpp"

#include <dlfcn.h>

#include <string>

#include "reference/core/error.hpp"
#include "reference/cuda/device.hpp"

// A name as the headers spell it after their macros (cublasCreate_v2, 13).
#define PARITY_SYMBOL_NAME(f) PARITY_SYMBOL_TEXT(f)
#define PARITY_SYMBOL_TEXT(f) #f

namespace parity::cuda {
namespace {

struct Library {
  std::string name;
  void* handle;
};

Library open_library(const std::string& name) {
  if (void* handle = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL)) return {name, handle};
  const std::string searched = dlerror();
  const std::string built_with = std::string(PARITY_CUDA_LIBRARY_DIR) + "/" + name;
  if (void* handle = dlopen(built_with.c_str(), RTLD_NOW | RTLD_LOCAL)) return {name, handle};
  throw Error(name + " cannot be opened (" + searched + "; nor " + built_with +
              "): put the CUDA toolkit's libraries on LD_LIBRARY_PATH");
}

template <class Function>
void bind(Function& function, const Library& library, const char* symbol) {
  function = reinterpret_cast<Function>(dlsym(library.handle, symbol));
  if (function == nullptr) throw Error(library.name + " has no function " + symbol);
}

Blas open_blas() {
  const Library lt = open_library("libcublasLt.so." PARITY_SYMBOL_NAME(CUBLAS_VER_MAJOR));
  const Library blas = open_library("libcublas.so." PARITY_SYMBOL_NAME(CUBLAS_VER_MAJOR));
  Blas b{};
#define PARITY_BIND(library, member, function) bind(b.member, library, PARITY_SYMBOL_NAME(function))
  PARITY_BIND(blas, create, cublasCreate);
  PARITY_BIND(blas, set_stream, cublasSetStream);
  PARITY_BIND(blas, set_math_mode, cublasSetMathMode);
  PARITY_BIND(blas, gemm_ex, cublasGemmEx);
  PARITY_BIND(blas, status_string, cublasGetStatusString);
  PARITY_BIND(lt, lt_create, cublasLtCreate);
  PARITY_BIND(lt, lt_matmul, cublasLtMatmul);
  PARITY_BIND(lt, lt_matmul_desc_create, cublasLtMatmulDescCreate);
  PARITY_BIND(lt, lt_matmul_desc_set_attribute, cublasLtMatmulDescSetAttribute);
  PARITY_BIND(lt, lt_matrix_layout_create, cublasLtMatrixLayoutCreate);
  PARITY_BIND(lt, lt_preference_create, cublasLtMatmulPreferenceCreate);
  PARITY_BIND(lt, lt_preference_set_attribute, cublasLtMatmulPreferenceSetAttribute);
  PARITY_BIND(lt, lt_preference_destroy, cublasLtMatmulPreferenceDestroy);
  PARITY_BIND(lt, lt_algo_get_heuristic, cublasLtMatmulAlgoGetHeuristic);
#undef PARITY_BIND
  return b;
}

}  // namespace

const Blas& blas() {
  // A failed opening throws out of the initialiser, so a later call tries again.
  static const Blas opened = open_blas();
  return opened;
}

std::string blas_status_words(int status) { return blas().status_string(static_cast<cublasStatus_t>(status)); }

}  // namespace parity::cuda
