// Host buffer allocation.
#include "reference/core/buffer.hpp"

#include <cstdlib>
#include <new>

namespace parity {

std::string_view name_of(MemorySpace space) { return space == MemorySpace::host ? "host" : "cuda"; }

HostBuffer::HostBuffer(std::size_t count, DataType dtype) : count_(count), dtype_(dtype) {
  constexpr std::size_t alignment = 64;  // a cache line, and enough for any vector load
  std::size_t bytes = (count * size_of(dtype) + alignment - 1) / alignment * alignment;
  if (bytes == 0) bytes = alignment;  // a zero-count buffer still has a distinct address
  void* p = std::aligned_alloc(alignment, bytes);
  if (p == nullptr) throw std::bad_alloc();
  data_.reset(p);
}

void HostBuffer::Free::operator()(void* p) const { std::free(p); }

}  // namespace parity
