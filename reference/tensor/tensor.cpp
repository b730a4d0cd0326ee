// Tensors and their storage (see tensor.hpp).
#include "reference/tensor/tensor.hpp"

#include <cstdlib>
#include <cstring>
#include <new>

#include "reference/kernels/buffer_kernels.hpp"
#include "reference/core/error.hpp"
#include "reference/cuda/device.hpp"

namespace parity {

std::string to_string(const Shape& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::int64_t element_count(const Shape& shape) {
  std::int64_t n = 1;
  for (auto d : shape)
    if (__builtin_mul_overflow(n, d, &n)) throw Error("shape " + to_string(shape) + " has more elements than int64 counts");
  return n;
}

Storage::Storage(std::size_t bytes, MemoryCategory category, MemorySpace space)
    : bytes_(bytes), category_(category), space_(space) {
  if (space == MemorySpace::cuda) {
    try {
      data_ = cuda::allocate(bytes);
    } catch (const std::exception& e) {
      throw Error(std::string(e.what()) + " (" + std::string(name_of(category)) + ")");
    }
  } else {
    const std::size_t rounded = (bytes + 63) / 64 * 64;
    data_ = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
    if (!data_) throw std::bad_alloc();
  }
  MemoryTracker::process().charge(category_, space_, bytes_);
}

Storage::~Storage() {
  MemoryTracker::process().release(category_, space_, bytes_);
  if (space_ == MemorySpace::cuda)
    cuda::release(data_);
  else
    std::free(data_);
}

Tensor Tensor::empty(std::string name, Shape shape, DataType dtype, MemoryCategory category, MemorySpace space) {
  for (auto d : shape) {
    if (d <= 0)
      throw Error("tensor " + name + " " + to_string(shape) + ": every dimension must be positive");
  }
  Tensor t;
  t.name_ = std::move(name);
  t.numel_ = element_count(shape);
  t.shape_ = std::move(shape);
  t.dtype_ = dtype;
  t.storage_ = std::make_shared<Storage>(t.bytes(), category, space);
  return t;
}

Tensor Tensor::zeros(std::string name, Shape shape, DataType dtype, MemoryCategory category, MemorySpace space) {
  Tensor t = empty(std::move(name), std::move(shape), dtype, category, space);
  t.zero();
  return t;
}

namespace {
void require_defined(const Tensor& t, const std::string& use) {
  if (!t.defined()) throw Error("tensor " + t.describe() + " is used (" + use + ") but holds no storage");
}
}  // namespace

Tensor Tensor::zeros_like(const Tensor& other, std::string name, MemoryCategory category) {
  require_defined(other, "as the model of " + name);
  return zeros(std::move(name), other.shape(), other.dtype(), category, other.space());
}

MemoryCategory Tensor::category() const {
  require_defined(*this, "for its memory category");
  return storage_->category();
}

std::int64_t Tensor::dim(int d) const {
  const int r = rank();
  const int index = d < 0 ? d + r : d;
  if (index < 0 || index >= r)
    throw Error("tensor " + describe() + ": no dimension " + std::to_string(d));
  return shape_[static_cast<std::size_t>(index)];
}

std::string Tensor::describe() const {
  if (!defined()) return name_.empty() ? "(undefined tensor)" : name_ + " (undefined)";
  return name_ + " " + to_string(shape_) + " " + std::string(name_of(dtype_));
}

void Tensor::check_access(DataType requested) const {
  if (!defined()) throw Error("tensor " + describe() + " is used before it was allocated");
  if (requested != dtype_)
    throw Error("tensor " + describe() + " read as " + std::string(name_of(requested)));
  if (space() != MemorySpace::host) throw Error("tensor " + describe() + " is not in host memory");
}

Tensor Tensor::reshape(Shape shape) const {
  require_defined(*this, "reshaped to " + to_string(shape));
  for (auto d : shape)
    if (d <= 0) throw Error("cannot reshape " + describe() + " to " + to_string(shape) + ": dimensions must be positive");
  if (element_count(shape) != numel_)
    throw Error("cannot reshape " + describe() + " to " + to_string(shape) + ": element counts differ");
  Tensor t = *this;
  t.shape_ = std::move(shape);
  return t;
}

Tensor Tensor::segment(std::string name, std::int64_t first, Shape shape) const {
  require_defined(*this, "segmented into " + name);
  for (auto d : shape)
    if (d <= 0) throw Error("segment " + name + " " + to_string(shape) + " of " + describe() + ": dimensions must be positive");
  const std::int64_t count = element_count(shape);
  if (first < 0 || first > numel_ || count > numel_ - first)
    throw Error("segment " + name + " of " + std::to_string(count) + " elements at " + std::to_string(first) +
                " does not fit in " + describe());
  Tensor t = *this;
  t.name_ = std::move(name);
  t.shape_ = std::move(shape);
  t.numel_ = count;
  t.offset_ = offset_ + first;
  return t;
}

Tensor Tensor::clone(std::string name, MemoryCategory category) const {
  require_defined(*this, "cloned into " + name);
  Tensor t = empty(std::move(name), shape_, dtype_, category, space());
  copy_into(t, *this);
  return t;
}

Tensor Tensor::to(MemorySpace space, std::string name, MemoryCategory category) const {
  require_defined(*this, "copied into " + name);
  Tensor t = empty(std::move(name), shape_, dtype_, category, space);
  copy_into(t, *this);
  return t;
}

void Tensor::check_index(std::int64_t i) const {
  if (i < 0 || i >= numel_)
    throw Error("element " + std::to_string(i) + " is outside tensor " + describe() + " (" + std::to_string(numel_) +
                " elements)");
}

double Tensor::at(std::int64_t i) const {
  check_index(i);
  if (space() == MemorySpace::cuda) return segment(name_, i, {1}).to_vector()[0];
  return visit_data_type(dtype_, [&](auto tag) {
    using T = decltype(tag);
    return to_double(data<T>()[i]);
  });
}

void Tensor::set(std::int64_t i, double value) {
  check_index(i);
  if (space() == MemorySpace::cuda) {
    Tensor element = segment(name_, i, {1});
    element.fill(value);
    return;
  }
  visit_data_type(dtype_, [&](auto tag) {
    using T = decltype(tag);
    data<T>()[i] = from_double<T>(value);
  });
}

void Tensor::fill(double value) {
  require_defined(*this, "filled");
  if (space() == MemorySpace::cuda) return cuda::fill(raw(), static_cast<std::size_t>(numel_), static_cast<int>(dtype_), value);
  visit_data_type(dtype_, [&](auto tag) {
    using T = decltype(tag);
    const T v = from_double<T>(value);
    for (T& x : span<T>()) x = v;
  });
}

void Tensor::zero() {
  require_defined(*this, "zeroed");
  if (space() == MemorySpace::cuda) return cuda::zero(raw(), bytes());
  std::memset(raw(), 0, bytes());
}

std::vector<double> Tensor::to_vector() const {
  require_defined(*this, "read");
  if (space() == MemorySpace::cuda) return to(MemorySpace::host, name_, MemoryCategory::workspace).to_vector();
  std::vector<double> v(static_cast<std::size_t>(numel_));
  for (std::int64_t i = 0; i < numel_; ++i) v[static_cast<std::size_t>(i)] = at(i);
  return v;
}

Tensor cast(const Tensor& source, DataType dtype, std::string name, MemoryCategory category) {
  Tensor t = Tensor::empty(std::move(name), source.shape(), dtype, category, source.space());
  copy_into(t, source);
  return t;
}

void copy_into(Tensor& destination, const Tensor& source) {
  if (destination.numel() != source.numel())
    throw Error("cannot copy " + source.describe() + " into " + destination.describe() + ": element counts differ");
  if (destination.dtype() == source.dtype()) {
    copy_between_spaces(destination.view(), source.view());
  } else if (destination.space() == source.space()) {
    convert_buffer(destination.view(), source.view());
  } else {
    // Across spaces: convert where the source lives, then move the bytes.
    Tensor converted = cast(source, destination.dtype(), source.name(), MemoryCategory::workspace);
    copy_between_spaces(destination.view(), converted.view());
  }
}

}  // namespace parity
