// Host reduction kernels: plain element-wise loops that g++ -O3 vectorises (with a run-time
// overlap check, since out may alias an input); the kernel benchmark reads them against the
// host copy bandwidth.
#include "reference/kernels/buffer_kernels.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "reference/core/error.hpp"
#include "reference/cuda/device.hpp"
#include "reference/simd/simd.hpp"

namespace parity {
namespace {

template <typename T, typename Op>
void combine(T* out, const T* a, const T* b, std::size_t n, Op op) {
  if constexpr (std::is_same_v<T, float16_t> || std::is_same_v<T, bfloat16_t>) {
    // Each result computed in float32 and rounded once, a chunk at a time.
    constexpr std::size_t kChunk = 1024;
    float x[kChunk], y[kChunk];
    for (std::size_t i = 0; i < n; i += kChunk) {
      const std::size_t count = std::min(kChunk, n - i);
      simd::widen(a + i, x, count);
      simd::widen(b + i, y, count);
      for (std::size_t j = 0; j < count; ++j) x[j] = op(x[j], y[j]);
      simd::narrow(x, out + i, count);
    }
  } else {
    for (std::size_t i = 0; i < n; ++i) out[i] = op(a[i], b[i]);
  }
}

// float16/bfloat16 conversions are cheap enough to inline; route them through float.
template <typename T>
void combine_op(T* out, const T* a, const T* b, std::size_t n, ReduceOp op) {
  if constexpr (std::is_same_v<T, float16_t> || std::is_same_v<T, bfloat16_t>) {
    if (op == ReduceOp::sum || op == ReduceOp::avg) {  // the common case, fused (reference/simd)
      const auto* x = reinterpret_cast<const std::uint16_t*>(a);
      const auto* y = reinterpret_cast<const std::uint16_t*>(b);
      auto* z = reinterpret_cast<std::uint16_t*>(out);
      return std::is_same_v<T, float16_t> ? simd::half_add(x, y, z, n) : simd::bf16_add(x, y, z, n);
    }
  }
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::avg: combine(out, a, b, n, [](auto x, auto y) { return x + y; }); break;
    case ReduceOp::prod: combine(out, a, b, n, [](auto x, auto y) { return x * y; }); break;
    case ReduceOp::max: combine(out, a, b, n, [](auto x, auto y) { return std::max(x, y); }); break;
    case ReduceOp::min: combine(out, a, b, n, [](auto x, auto y) { return std::min(x, y); }); break;
  }
}

// The device kernels take parity's enums as integers (reference/cuda/device.hpp).
static_assert(static_cast<int>(DataType::float64) == 0 && static_cast<int>(DataType::float32) == 1 &&
              static_cast<int>(DataType::float16) == 2 && static_cast<int>(DataType::bfloat16) == 3 &&
              static_cast<int>(DataType::int32) == 4 && static_cast<int>(DataType::int64) == 5);
static_assert(static_cast<int>(ReduceOp::sum) == 0 && static_cast<int>(ReduceOp::prod) == 1 &&
              static_cast<int>(ReduceOp::max) == 2 && static_cast<int>(ReduceOp::min) == 3 &&
              static_cast<int>(ReduceOp::avg) == 4);

// True when the kernel runs on the device; a mix of spaces is a caller bug.
bool on_device(const char* what, std::initializer_list<BufferView> views) {
  const MemorySpace space = views.begin()->space;
  for (const BufferView& v : views)
    require(v.space == space, std::string(what) + ": host and device buffers mixed");
  return space == MemorySpace::cuda;
}

}  // namespace

void reduce_to(BufferView out, BufferView a, BufferView b, ReduceOp op) {
  require(out.count == a.count && a.count == b.count && out.dtype == a.dtype && a.dtype == b.dtype,
          "reduce_to: buffers differ in count or type");
  if (on_device("reduce_to", {out, a, b}))
    return cuda::reduce(out.data, a.data, b.data, out.count, static_cast<int>(out.dtype), static_cast<int>(op));
  visit_data_type(out.dtype, [&](auto tag) {
    using T = decltype(tag);
    combine_op(out.as<T>(), a.as<const T>(), b.as<const T>(), out.count, op);
  });
}

void reduce_into(BufferView acc, BufferView in, ReduceOp op) { reduce_to(acc, acc, in, op); }

void finish_average(BufferView buf, int n) {
  if (on_device("finish_average", {buf})) return cuda::divide(buf.data, buf.count, static_cast<int>(buf.dtype), n);
  visit_data_type(buf.dtype, [&](auto tag) {
    using T = decltype(tag);
    T* p = buf.as<T>();
    if constexpr (std::is_same_v<T, float16_t> || std::is_same_v<T, bfloat16_t>) {
      for (std::size_t i = 0; i < buf.count; ++i)
        p[i] = from_double<T>(static_cast<float>(to_double(p[i])) / static_cast<float>(n));
    } else {
      for (std::size_t i = 0; i < buf.count; ++i) p[i] = static_cast<T>(p[i] / static_cast<T>(n));
    }
  });
}

void scale_buffer(BufferView buf, double factor) {
  require(is_floating(buf.dtype), "scale_buffer: " + std::string(name_of(buf.dtype)) + " buffers are not scaled");
  if (on_device("scale_buffer", {buf})) return cuda::scale(buf.data, buf.count, static_cast<int>(buf.dtype), factor);
  visit_data_type(buf.dtype, [&](auto tag) {
    using T = decltype(tag);
    T* p = buf.as<T>();
    if constexpr (std::is_same_v<T, float16_t> || std::is_same_v<T, bfloat16_t>) {
      const float f = static_cast<float>(factor);
      for (std::size_t i = 0; i < buf.count; ++i) p[i] = from_double<T>(static_cast<float>(to_double(p[i])) * f);
    } else if constexpr (!std::is_integral_v<T>) {
      const T f = static_cast<T>(factor);
      for (std::size_t i = 0; i < buf.count; ++i) p[i] *= f;
    }
  });
}

std::size_t count_nonfinite(const std::vector<BufferView>& bufs) {
  std::vector<const void*> device;
  std::vector<std::size_t> device_counts;
  std::vector<int> device_types;
  std::size_t count = 0;
  for (const BufferView& buf : bufs) {
    if (on_device("count_nonfinite", {buf})) {
      device.push_back(buf.data);
      device_counts.push_back(buf.count);
      device_types.push_back(static_cast<int>(buf.dtype));
      continue;
    }
    visit_data_type(buf.dtype, [&](auto tag) {
      using T = decltype(tag);
      if constexpr (!std::is_integral_v<T>) {
        const T* p = buf.as<const T>();
        for (std::size_t i = 0; i < buf.count; ++i) count += std::isfinite(to_double(p[i])) ? 0 : 1;
      }
    });
  }
  if (!device.empty()) count += cuda::count_nonfinite(device.data(), device_counts.data(), device_types.data(), device.size());
  return count;
}

void copy_buffer(BufferView dst, BufferView src) {
  require(dst.count == src.count && dst.dtype == src.dtype, "copy_buffer: buffers differ in count or type");
  if (on_device("copy_buffer", {dst, src})) return cuda::copy(dst.data, src.data, dst.bytes());
  if (dst.data != src.data && dst.count != 0) std::memmove(dst.data, src.data, dst.bytes());
}

void copy_between_spaces(BufferView dst, BufferView src) {
  require(dst.count == src.count && dst.dtype == src.dtype, "copy_between_spaces: buffers differ in count or type");
  copy_bytes(dst.data, dst.space, src.data, src.space, dst.bytes());
}

void copy_bytes(void* dst, MemorySpace dst_space, const void* src, MemorySpace src_space, std::size_t bytes) {
  if (bytes == 0 || dst == src) return;
  if (dst_space == MemorySpace::host && src_space == MemorySpace::host)
    std::memmove(dst, src, bytes);
  else
    cuda::copy(dst, src, bytes);
}

void convert_buffer(BufferView dst, BufferView src) {
  require(dst.count == src.count, "convert_buffer: buffers differ in count");
  if (dst.dtype == src.dtype) return copy_buffer(dst, src);
  if (on_device("convert_buffer", {dst, src}))
    return cuda::convert(dst.data, static_cast<int>(dst.dtype), src.data, static_cast<int>(src.dtype), dst.count);
  // float32 to and from 16 bits: vectorised, bit for bit the scalar conversions below.
  const std::size_t n = dst.count;
  if (dst.dtype == DataType::float32 && src.dtype == DataType::float16)
    return simd::widen(src.as<const float16_t>(), dst.as<float>(), n);
  if (dst.dtype == DataType::float32 && src.dtype == DataType::bfloat16)
    return simd::widen(src.as<const bfloat16_t>(), dst.as<float>(), n);
  if (dst.dtype == DataType::float16 && src.dtype == DataType::float32)
    return simd::narrow(src.as<const float>(), dst.as<float16_t>(), n);
  if (dst.dtype == DataType::bfloat16 && src.dtype == DataType::float32)
    return simd::narrow(src.as<const float>(), dst.as<bfloat16_t>(), n);
  visit_data_type(dst.dtype, [&](auto dst_tag) {
    using D = decltype(dst_tag);
    visit_data_type(src.dtype, [&](auto src_tag) {
      using S = decltype(src_tag);
      D* d = dst.as<D>();
      const S* s = src.as<const S>();
      for (std::size_t i = 0; i < dst.count; ++i) d[i] = from_double<D>(to_double(s[i]));
    });
  });
}

}  // namespace parity
