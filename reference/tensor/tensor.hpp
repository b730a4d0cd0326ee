// Tensors: a contiguous row-major array with a shape, a data type, a memory space and a memory
// category its storage is charged to. Copies share storage (like a handle); clone() copies the
// data. Storage lives in host memory or on the process's CUDA device (reference/cuda/device.hpp);
// kernels get raw pointers, and the slow accessors (at, set, to_vector) copy through the host.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "reference/core/buffer.hpp"
#include "reference/core/dtype.hpp"
#include "reference/tensor/memory.hpp"

namespace parity {

using Shape = std::vector<std::int64_t>;
std::string to_string(const Shape& shape);  // "[2, 3, 4]"
std::int64_t element_count(const Shape& shape);

// Owns bytes and their charge to the tracker; freed (and released) with the last tensor.
class Storage {
 public:
  Storage(std::size_t bytes, MemoryCategory category, MemorySpace space);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  void* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }
  MemoryCategory category() const { return category_; }
  MemorySpace space() const { return space_; }

 private:
  void* data_ = nullptr;
  std::size_t bytes_;
  MemoryCategory category_;
  MemorySpace space_;
};

class Tensor {
 public:
  Tensor() = default;  // undefined: no storage
  // Uninitialised storage. Sizes must be positive.
  static Tensor empty(std::string name, Shape shape, DataType dtype, MemoryCategory category,
                      MemorySpace space = MemorySpace::host);
  static Tensor zeros(std::string name, Shape shape, DataType dtype, MemoryCategory category,
                      MemorySpace space = MemorySpace::host);
  // A tensor of the same shape, type and space with its own storage.
  static Tensor zeros_like(const Tensor& other, std::string name, MemoryCategory category);

  bool defined() const { return storage_ != nullptr; }
  const std::string& name() const { return name_; }
  const Shape& shape() const { return shape_; }
  int rank() const { return static_cast<int>(shape_.size()); }
  // Size of dimension d; negative d counts from the end.
  std::int64_t dim(int d) const;
  std::int64_t numel() const { return numel_; }
  DataType dtype() const { return dtype_; }
  MemorySpace space() const { return storage_ ? storage_->space() : MemorySpace::host; }
  MemoryCategory category() const;
  std::size_t bytes() const { return static_cast<std::size_t>(numel_) * size_of(dtype_); }
  // "name [2, 3] float32", for messages.
  std::string describe() const;

  void* raw() const {
    return storage_ ? static_cast<std::byte*>(storage_->data()) + offset_ * static_cast<std::int64_t>(size_of(dtype_))
                    : nullptr;
  }
  // Typed access; throws when T is not the tensor's type or the tensor is not on the host.
  template <typename T> T* data() const {
    check_access(data_type_of<T>::value);
    return static_cast<T*>(raw());
  }
  template <typename T> std::span<T> span() const { return {data<T>(), static_cast<std::size_t>(numel_)}; }
  BufferView view() const { return {raw(), static_cast<std::size_t>(numel_), dtype_, space()}; }

  // Same storage, another shape with the same element count.
  Tensor reshape(Shape shape) const;
  // Elements [first, first + numel(shape)) of this tensor as a tensor of `shape`, sharing the
  // storage: a parameter living inside a flat buffer, or a rank's shard of one (ZeRO, FSDP).
  Tensor segment(std::string name, std::int64_t first, Shape shape) const;
  Tensor clone(std::string name, MemoryCategory category) const;
  // A copy in another memory space (host <-> CUDA device).
  Tensor to(MemorySpace space, std::string name, MemoryCategory category) const;
  // Element i as double / set from double (rounded to the type); i is checked. These are the
  // slow, safe accessors for tests and set-up (a device tensor copies through the host);
  // kernels use data<T>() or raw().
  double at(std::int64_t i) const;
  void set(std::int64_t i, double value);
  void fill(double value);
  void zero();
  std::vector<double> to_vector() const;

 private:
  void check_access(DataType requested) const;
  void check_index(std::int64_t i) const;
  std::string name_;
  Shape shape_;
  std::int64_t numel_ = 0;
  std::int64_t offset_ = 0;  // elements into the storage (segment())
  DataType dtype_ = DataType::float32;
  std::shared_ptr<Storage> storage_;
};

// A copy of `source` converted to `dtype` (half types round to nearest even).
Tensor cast(const Tensor& source, DataType dtype, std::string name, MemoryCategory category);
// Copies values between tensors of the same element count, converting types.
void copy_into(Tensor& destination, const Tensor& source);

}  // namespace parity
