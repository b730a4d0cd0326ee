// Host buffer allocation.
#include "reference/core/buffer.hpp"

#include <sys/mman.h>

#include <cstdlib>
#include <new>
#include <string>

#include "reference/core/error.hpp"

namespace parity {

std::string_view name_of(MemorySpace space) { return space == MemorySpace::host ? "host" : "cuda"; }

void BufferView::slice_out_of_range(std::size_t offset, std::size_t n) const {
  throw Error("a slice of elements [" + std::to_string(offset) + ", " + std::to_string(offset) + " + " + std::to_string(n) +
              ") of a view of " + std::to_string(count) + " " + std::string(name_of(dtype)) + " elements");
}

HostBuffer::HostBuffer(std::size_t count, DataType dtype) : count_(count), dtype_(dtype) {
  // A cache line, and enough for any vector load; a large buffer (a benchmark's message, the copy
  // bandwidth's 256 MiB) on 2 MiB pages, so that touching it first costs one fault per 2 MiB
  // rather than per 4 KiB (half a second per 256 MiB on a virtual machine, paid on every run).
  constexpr std::size_t kLine = 64, kHugePage = std::size_t{2} << 20;
  const std::size_t wanted = count * size_of(dtype);
  const std::size_t alignment = wanted >= 4 * kHugePage ? kHugePage : kLine;
  std::size_t bytes = (wanted + alignment - 1) / alignment * alignment;
  if (bytes == 0) bytes = alignment;  // a zero-count buffer still has a distinct address
  void* p = std::aligned_alloc(alignment, bytes);
  if (p == nullptr) throw std::bad_alloc();
#ifdef MADV_HUGEPAGE
  if (alignment == kHugePage) madvise(p, bytes, MADV_HUGEPAGE);  // advice only: 4 KiB pages if refused
#endif
  data_.reset(p);
}

void HostBuffer::Free::operator()(void* p) const { std::free(p); }

}  // namespace parity
