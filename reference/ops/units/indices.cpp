// The index check of the embeddings and cross-entropies (unit_host.hpp: first_index_outside):
// token and target ids must lie in [0, limit), on whichever device they are.
#include "reference/ops/unit.hpp"

namespace parity::ops::device {
// Position of the first index outside [0, limit), or -1; scratch is one device int64. Waits.
std::int64_t first_invalid_index(const void* indices, int index_dtype, std::int64_t count, std::int64_t limit,
                                 void* scratch);
}  // namespace parity::ops::device

#ifndef __CUDACC__

namespace parity::ops {

IndexOutside first_index_outside(const Tensor& indices, std::int64_t limit) {
  if constexpr (kCudaBuilt) {
    if (on_device(indices)) {
      Tensor found = device_scratch(indices.name() + ".check", {1}, DataType::int64);
      const std::int64_t position =
          device::first_invalid_index(indices.raw(), code(indices), indices.numel(), limit, found.raw());
      if (position < 0) return {};
      return {position, static_cast<std::int64_t>(indices.at(position))};
    }
  }
  for (std::int64_t i = 0; i < indices.numel(); ++i) {
    const std::int64_t id = index_at(indices, i);
    if (id < 0 || id >= limit) return {i, id};
  }
  return {};
}

}  // namespace parity::ops

#else  // the device part

namespace parity::ops::device {
namespace {
template <typename I>
__global__ void first_invalid_kernel(const I* indices, int64_t n, int64_t limit, unsigned long long* first) {
  PARITY_GRID_STRIDE(i, n) {
    const int64_t v = static_cast<int64_t>(indices[i]);
    if (v < 0 || v >= limit) atomicMin(first, static_cast<unsigned long long>(i));
  }
}
}  // namespace

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

}  // namespace parity::ops::device

#endif
