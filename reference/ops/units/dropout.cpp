// Inverted dropout with a replayable mask (ops.hpp: dropout_forward, dropout_backward): element i
// is kept when uniform(seed, stream, first_element + i) >= p and scaled by 1/(1-p). Backward
// applies the same mask to dy. The device draws the mask with dropout_mask.hpp's port of the
// CPU's Philox generator.
#include "reference/ops/unit.hpp"

namespace parity::ops::device {
// out[i] = keep(first + i) ? in[i] / (1 - p) : 0.
void dropout(int dtype, const void* in, void* out, std::int64_t count, double p, std::uint64_t seed,
             std::uint64_t stream, std::uint64_t first);
}  // namespace parity::ops::device

#ifndef __CUDACC__

#include "reference/tensor/random.hpp"

namespace parity::ops {

namespace {
// Forward and backward are the same map: out = mask(in) / (1 - p).
void dropout_apply(const char* op, const Tensor& in, double p, DropoutKey key, Tensor& out) {
  require_defined(op, in, "input");
  same_shape(op, in, out);
  if (!(p >= 0 && p < 1)) fail(op, "dropout probability " + std::to_string(p) + " must be in [0, 1)");
  require_same_space(op, {&in, &out});
  require_floating(op, in);
  if constexpr (kCudaBuilt) {
    if (on_device(in))
      return device::dropout(code(in), in.raw(), out.raw(), in.numel(), p, key.seed, key.stream, key.first_element);
  }
  visit_floating(op, in, [&](auto tag) {
    using T = decltype(tag);
    using C = Acc<T>;
    const C scale = static_cast<C>(1.0 / (1.0 - p));
    const T* src = in.data<T>();
    T* dst = out.data<T>();
    if constexpr (std::is_same_v<T, C>) {  // float32 and float64: the mask drawn vectorised, the same bits
      return simd::dropout(src, dst, static_cast<std::size_t>(in.numel()), key.seed, key.stream, key.first_element,
                           uniform_open_threshold(p), scale);
    }
    for (std::int64_t i = 0; i < in.numel(); ++i) {
      const bool keep =
          p == 0 || uniform_open(key.seed, key.stream, key.first_element + static_cast<std::uint64_t>(i)) >= p;
      dst[i] = keep ? store<T>(load(src[i]) * scale) : store<T>(C(0));
    }
  });
}
}  // namespace

void dropout_forward(const Tensor& x, double p, DropoutKey key, Tensor& y) { dropout_apply("dropout_forward", x, p, key, y); }
void dropout_backward(const Tensor& dy, double p, DropoutKey key, Tensor& dx) {
  dropout_apply("dropout_backward", dy, p, key, dx);
}

}  // namespace parity::ops

#else  // the device part

#include "reference/ops/dropout_mask.hpp"

namespace parity::ops::device {
namespace {
template <typename T>
__global__ void dropout_kernel(const T* in, T* out, int64_t n, double p, Acc<T> scale, std::uint64_t seed,
                               std::uint64_t stream_id, std::uint64_t first) {
  PARITY_GRID_STRIDE(i, n) {
    const bool keep = dropout_keeps(p, seed, stream_id, first + static_cast<std::uint64_t>(i));
    store(out[i], keep ? load(in[i]) * scale : Acc<T>(0));
  }
}
}  // namespace

void dropout(int dtype, const void* in, void* out, int64_t count, double p, std::uint64_t seed, std::uint64_t stream_id,
             std::uint64_t first) {
  const double scale = 1.0 / (1.0 - p);
  visit_floating(dtype, "dropout", [&](auto tag) {
    using F = decltype(tag);
    dropout_kernel<F><<<blocks_for(count), kThreads, 0, stream()>>>(static_cast<const F*>(in), static_cast<F*>(out),
                                                                    count, p, static_cast<Acc<F>>(scale), seed,
                                                                    stream_id, first);
  });
  check_launch("dropout_kernel");
}

}  // namespace parity::ops::device

#endif
