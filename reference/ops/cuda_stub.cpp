// Built instead of cuda_kernels.cu when CUDA is off or nvcc is not found: every launch function
// throws. (No tensor can be on the device in such a build, so the CPU ops never get here.)
#include "reference/core/error.hpp"
#include "reference/ops/cuda_kernels.hpp"

namespace parity::ops::kernels {
namespace {
[[noreturn]] void no_cuda() {
  throw Error("this parity was built without CUDA (configure with nvcc on PATH or -DPARITY_CUDA=ON)");
}
}  // namespace

void matmul(int, bool, bool, int, int, int, const void*, int, const void*, int, void*, int, bool, bool) { no_cuda(); }
void broadcast_rows(int, const void*, void*, std::int64_t, std::int64_t) { no_cuda(); }
void column_sum_accumulate(int, const void*, std::int64_t, std::int64_t, void*) { no_cuda(); }
void gelu_forward(int, const void*, void*, std::int64_t) { no_cuda(); }
void gelu_backward(int, const void*, const void*, void*, std::int64_t) { no_cuda(); }
void add(int, const void*, const void*, void*, std::int64_t) { no_cuda(); }
void layernorm_forward(int, const void*, const void*, const void*, void*, void*, void*, std::int64_t, std::int64_t,
                       double) {
  no_cuda();
}
void layernorm_backward(int, const void*, const void*, const void*, const void*, const void*, void*, void*, void*,
                        std::int64_t, std::int64_t) {
  no_cuda();
}
void softmax_forward(int, const void*, void*, std::int64_t, std::int64_t) { no_cuda(); }
void softmax_backward(int, const void*, const void*, void*, std::int64_t, std::int64_t) { no_cuda(); }
void attention_forward(int, const void*, void*, void*, int, int, int, int, bool) { no_cuda(); }
void attention_backward(int, const void*, const void*, const void*, void*, void*, int, int, int, int) { no_cuda(); }
std::int64_t first_invalid_index(const void*, int, std::int64_t, std::int64_t, void*) { no_cuda(); }
void embedding_forward(int, const void*, int, const void*, const void*, void*, std::int64_t, std::int64_t,
                       std::int64_t) {
  no_cuda();
}
void embedding_backward(int, const void*, const void*, int, void*, void*, float*, std::int64_t, std::int64_t,
                        std::int64_t, std::int64_t) {
  no_cuda();
}
double cross_entropy(int, const void*, const void*, int, std::int64_t, std::int64_t, double, void*, double*) {
  no_cuda();
}
void embedding_shard_forward(int, const void*, int, const void*, void*, std::int64_t, std::int64_t, std::int64_t,
                             std::int64_t) {
  no_cuda();
}
void embedding_shard_backward(int, const void*, const void*, int, void*, float*, std::int64_t, std::int64_t,
                              std::int64_t, std::int64_t) {
  no_cuda();
}
void cross_entropy_shard_max(int, const void*, std::int64_t, std::int64_t, void*) { no_cuda(); }
void cross_entropy_shard_sums(int, const void*, const void*, int, std::int64_t, std::int64_t, std::int64_t,
                              const void*, void*, void*) {
  no_cuda();
}
void cross_entropy_shard_backward(int, const void*, const void*, int, std::int64_t, std::int64_t, std::int64_t,
                                  const void*, const void*, double, void*) {
  no_cuda();
}
double mse_forward(int, const void*, const void*, std::int64_t, double, double*) { no_cuda(); }
void mse_backward(int, const void*, const void*, void*, std::int64_t, double) { no_cuda(); }
void dropout(int, const void*, void*, std::int64_t, double, std::uint64_t, std::uint64_t, std::uint64_t) { no_cuda(); }
void sgd_update(int, int, void*, const void*, void*, std::int64_t, double, double, double) { no_cuda(); }
void adamw_update(int, int, void*, const void*, void*, void*, std::int64_t, double, double, double, double, double,
                  double, double) {
  no_cuda();
}

void gather_rows(int, const void*, const std::int64_t*, void*, std::int64_t, std::int64_t) { no_cuda(); }
void sum_token_rows(int, const void*, const void*, const std::int64_t*, const std::int64_t*, void*, std::int64_t,
                    std::int64_t) {
  no_cuda();
}
void combine_rows_backward(int, const void*, const void*, const void*, const std::int64_t*, void*, void*,
                           std::int64_t, std::int64_t) {
  no_cuda();
}

}  // namespace parity::ops::kernels
