// Buffers that know their element type and memory space. Communicators take views, so one
// algorithm serves host memory (MPI) and device memory (NCCL, CUDA-aware MPI) alike.
#pragma once

#include <cstddef>
#include <memory>
#include <string_view>

#include "reference/core/dtype.hpp"

namespace parity {

enum class MemorySpace { host, cuda };
std::string_view name_of(MemorySpace space);

// A non-owning view: count elements of dtype at data, in space.
struct BufferView {
  void* data = nullptr;
  std::size_t count = 0;
  DataType dtype = DataType::float32;
  MemorySpace space = MemorySpace::host;

  std::size_t bytes() const { return count * size_of(dtype); }
  // Elements [offset, offset + n) of this view; a slice past its end is a bug in the caller (an
  // algorithm's block arithmetic) and throws, instead of reading or writing past the buffer.
  BufferView slice(std::size_t offset, std::size_t n) const {
    if (offset > count || n > count - offset) slice_out_of_range(offset, n);
    return {static_cast<std::byte*>(data) + offset * size_of(dtype), n, dtype, space};
  }
  template <typename T> T* as() const { return static_cast<T*>(data); }
  [[noreturn]] void slice_out_of_range(std::size_t offset, std::size_t n) const;
};

// Owning, 64-byte aligned host memory for count elements of dtype.
class HostBuffer {
 public:
  HostBuffer() = default;
  HostBuffer(std::size_t count, DataType dtype);
  BufferView view() const { return {data_.get(), count_, dtype_, MemorySpace::host}; }
  std::size_t count() const { return count_; }
  DataType dtype() const { return dtype_; }
  void* data() const { return data_.get(); }

 private:
  struct Free { void operator()(void* p) const; };
  std::unique_ptr<void, Free> data_;
  std::size_t count_ = 0;
  DataType dtype_ = DataType::float32;
};

}  // namespace parity
