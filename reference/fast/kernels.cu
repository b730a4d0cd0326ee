// The fast path's loss, optimizer and conversions (ops.hpp). The cross-entropy gives a row to a
// block and reduces its maximum and sum in a fixed order (warp shuffles, then the warps in
// order), never atomics, so the step repeats bit for bit run to run; the optimizer and
// conversions are grid-stride loops over the elements.
#include <cmath>
#include <cstdint>
#include <string>

#include "reference/fast/device_common.cuh"

namespace parity::fast {
namespace {

using detail::check_launch, detail::grid_for, detail::kRowThreads, detail::kWarpsPerRow, detail::stream,
    detail::Tensor16, std::int64_t;

// (max, sum of exp(x - max)) of two parts of a row, combined.
__device__ __forceinline__ void combine(float& m, float& s, float m2, float s2) {
  const float mm = fmaxf(m, m2);
  if (mm == -INFINITY) return;
  s = s * __expf(m - mm) + s2 * __expf(m2 - mm);
  m = mm;
}

// Eight consecutive 16-bit values as one 16-byte access (the caller makes sure of the alignment).
template <typename T> __device__ __forceinline__ void unpack8(uint4 x, float v[8]) {
  const T* e = reinterpret_cast<const T*>(&x);
#pragma unroll
  for (int i = 0; i < 8; ++i) v[i] = Tensor16<T>::to_float(e[i]);
}
template <typename T> __device__ __forceinline__ void load8(const T* p, float v[8]) {
  unpack8<T>(*reinterpret_cast<const uint4*>(p), v);
}
template <typename T> __device__ __forceinline__ void store8(T* p, const float v[8]) {
  *reinterpret_cast<uint4*>(p) = make_uint4(Tensor16<T>::pack(v[0], v[1]), Tensor16<T>::pack(v[2], v[3]),
                                            Tensor16<T>::pack(v[4], v[5]), Tensor16<T>::pack(v[6], v[7]));
}

// VEC: rows of V % 8 == 0 columns on a 16-byte aligned buffer, read and written eight columns at a
// time; each pass over the row takes kChunks such eights a thread at once (their reads all issued
// before the first is used), each eight folded into the running maximum and sum as it is unpacked.
constexpr int kChunks = 4;
constexpr int64_t kStride = 8 * int64_t{kRowThreads};  // columns between a thread's eights
// A thread's eights at c0, c0 + kStride, ... (kChunks of them) that start below `end`, loaded
// together, raw.
template <typename T>
__device__ __forceinline__ void load_chunks(const T* x, int64_t c0, int64_t end, uint4 raw[kChunks]) {
#pragma unroll
  for (int k = 0; k < kChunks; ++k)
    if (c0 + k * kStride < end) raw[k] = *reinterpret_cast<const uint4*>(x + c0 + k * kStride);
}
template <typename T, bool VEC>
__global__ void __launch_bounds__(kRowThreads, 4) cross_entropy_kernel(T* logits, const std::int32_t* targets,
                                                                    float* row_loss, int64_t M, int64_t V,
                                                                    int64_t valid, float normalizer, float grad_scale) {
  __shared__ float ms[kWarpsPerRow], ss[kWarpsPerRow];
  for (int64_t row = blockIdx.x; row < M; row += gridDim.x) {
    T* x = logits + row * V;
    float m = -INFINITY, s = 0.f;
    if constexpr (VEC) {
      for (int64_t c0 = 8 * int64_t{threadIdx.x}; c0 < valid; c0 += kChunks * kStride) {
        uint4 raw[kChunks];  // eight 16-bit values each, unpacked where they are used
        load_chunks(x, c0, valid, raw);
#pragma unroll
        for (int k = 0; k < kChunks; ++k) {
          if (c0 + k * kStride >= valid) continue;
          float v[8], top = -INFINITY, part = 0.f;
          unpack8<T>(raw[k], v);
#pragma unroll
          for (int i = 0; i < 8; ++i)
            if (c0 + k * kStride + i < valid) top = fmaxf(top, v[i]);
#pragma unroll
          for (int i = 0; i < 8; ++i)
            if (c0 + k * kStride + i < valid) part += __expf(v[i] - top);
          combine(m, s, top, part);
        }
      }
    } else {
      for (int64_t c = threadIdx.x; c < valid; c += kRowThreads) combine(m, s, Tensor16<T>::to_float(x[c]), 1.f);
    }
    for (int o = 16; o > 0; o >>= 1) combine(m, s, __shfl_xor_sync(0xffffffffu, m, o), __shfl_xor_sync(0xffffffffu, s, o));
    if (threadIdx.x % 32 == 0) {
      ms[threadIdx.x / 32] = m;
      ss[threadIdx.x / 32] = s;
    }
    __syncthreads();
    m = ms[0];
    s = ss[0];
#pragma unroll
    for (int w = 1; w < kWarpsPerRow; ++w) combine(m, s, ms[w], ss[w]);
    __syncthreads();
    const int64_t target = targets[row];
    const float log_sum = m + logf(s);
    if (threadIdx.x == 0) row_loss[row] = (log_sum - Tensor16<T>::to_float(x[target])) / normalizer;
    __syncthreads();  // x[target] is read before it is overwritten
    const float scale = grad_scale / normalizer, inv_s = 1.f / s;
    if constexpr (VEC) {
      for (int64_t c0 = 8 * int64_t{threadIdx.x}; c0 < V; c0 += kChunks * kStride) {
        uint4 raw[kChunks];
        load_chunks(x, c0, V, raw);
#pragma unroll
        for (int k = 0; k < kChunks; ++k) {
          if (c0 + k * kStride >= V) continue;
          float v[8];
          unpack8<T>(raw[k], v);
#pragma unroll
          for (int i = 0; i < 8; ++i) {
            const int64_t c = c0 + k * kStride + i;
            v[i] = c < valid ? (__expf(v[i] - m) * inv_s - (c == target ? 1.f : 0.f)) * scale : 0.f;
          }
          store8(x + c0 + k * kStride, v);
        }
      }
    } else {
      for (int64_t c = threadIdx.x; c < V; c += kRowThreads) {
        float g = 0.f;
        if (c < valid) g = (__expf(Tensor16<T>::to_float(x[c]) - m) * inv_s - (c == target ? 1.f : 0.f)) * scale;
        x[c] = Tensor16<T>::from_float(g);
      }
    }
  }
}

__global__ void sum_kernel(const float* x, float* out, int64_t n) {
  __shared__ float buffer[32];
  float s = 0.f;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) s += x[i];
  s = detail::warp_sum(s);
  if (threadIdx.x % 32 == 0) buffer[threadIdx.x / 32] = s;
  __syncthreads();
  if (threadIdx.x == 0) {
    float total = 0.f;
    for (int w = 0; w < static_cast<int>(blockDim.x / 32); ++w) total += buffer[w];
    out[0] = total;
  }
}

struct AdamWStep {
  float lr, beta1, beta2, one_minus_beta1, one_minus_beta2, epsilon, weight_decay, correction1, correction2;
};

// One element's update; the same arithmetic in the vector and the scalar loop.
__device__ __forceinline__ float adamw_element(float& p, float& m, float& v, float g, const AdamWStep& a) {
  p -= a.lr * a.weight_decay * p;
  m = a.beta1 * m + a.one_minus_beta1 * g;
  v = a.beta2 * v + a.one_minus_beta2 * g * g;
  p -= a.lr * (m / a.correction1) / (sqrtf(v / a.correction2) + a.epsilon);
  return p;
}

// Memory-bound (28 to 30 bytes an element): four elements a thread per access (16-byte loads of
// masters and moments, 8-byte ones of the 16-bit values), the last n % 4 one by one.
template <typename T>
__global__ void adamw_kernel(T* params16, float* masters, float* m, float* v, const T* grad16, const float* grad32,
                             int64_t n, int64_t n32, AdamWStep a, float inv_scale, const int* nonfinite) {
  if (nonfinite && *nonfinite) return;
  struct alignas(8) Four16 {
    T x[4];
  };
  const int64_t groups = n / 4;
  FAST_GRID_STRIDE(q, groups) {
    const int64_t i = 4 * q;
    float g[4];
    if (i + 4 <= n32) {
      const float4 w = reinterpret_cast<const float4*>(grad32)[q];
      g[0] = w.x, g[1] = w.y, g[2] = w.z, g[3] = w.w;
    } else if (i >= n32) {
      const Four16 w = reinterpret_cast<const Four16*>(grad16)[q];
      for (int k = 0; k < 4; ++k) g[k] = Tensor16<T>::to_float(w.x[k]);
    } else {
      for (int k = 0; k < 4; ++k) g[k] = i + k < n32 ? grad32[i + k] : Tensor16<T>::to_float(grad16[i + k]);
    }
    float4 p4 = reinterpret_cast<float4*>(masters)[q], m4 = reinterpret_cast<float4*>(m)[q],
           v4 = reinterpret_cast<float4*>(v)[q];
    float* const p = &p4.x;
    float* const mm = &m4.x;
    float* const vv = &v4.x;
    Four16 out;
    for (int k = 0; k < 4; ++k) out.x[k] = Tensor16<T>::from_float(adamw_element(p[k], mm[k], vv[k], g[k] * inv_scale, a));
    reinterpret_cast<float4*>(masters)[q] = p4;
    reinterpret_cast<float4*>(m)[q] = m4;
    reinterpret_cast<float4*>(v)[q] = v4;
    reinterpret_cast<Four16*>(params16)[q] = out;
  }
  FAST_GRID_STRIDE(j, n - 4 * groups) {
    const int64_t i = 4 * groups + j;
    const float g = (i < n32 ? grad32[i] : Tensor16<T>::to_float(grad16[i])) * inv_scale;
    params16[i] = Tensor16<T>::from_float(adamw_element(masters[i], m[i], v[i], g, a));
  }
}

template <typename T>
__global__ void find_nonfinite_kernel(const T* grad16, int64_t n, const float* grad32, int64_t n32, int* flag) {
  bool bad = false;
  FAST_GRID_STRIDE(i, n) bad |= !isfinite(Tensor16<T>::to_float(grad16[i]));
  FAST_GRID_STRIDE(i, n32) bad |= !isfinite(grad32[i]);
  if (bad) *flag = 1;
}

template <typename T> __global__ void multiply_kernel(T* x, int64_t n, float factor) {
  FAST_GRID_STRIDE(i, n) x[i] = Tensor16<T>::from_float(Tensor16<T>::to_float(x[i]) * factor);
}
__global__ void multiply_float_kernel(float* x, int64_t n, float factor) {
  FAST_GRID_STRIDE(i, n) x[i] *= factor;
}

template <typename T> __global__ void to_storage_kernel(const float* x, T* y, int64_t n) {
  FAST_GRID_STRIDE(i, n) y[i] = Tensor16<T>::from_float(x[i]);
}
template <typename T> __global__ void from_storage_kernel(const T* x, float* y, int64_t n) {
  FAST_GRID_STRIDE(i, n) y[i] = Tensor16<T>::to_float(x[i]);
}

__device__ __forceinline__ std::uint64_t splitmix64(std::uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

template <typename T>
__global__ void normal_init_kernel(T* x16, float* x32, int64_t n, float std, std::uint64_t seed) {
  FAST_GRID_STRIDE(i, n) {
    const std::uint64_t r = splitmix64(seed ^ splitmix64(static_cast<std::uint64_t>(i)));
    const float u1 = (static_cast<float>(r >> 40) + 0.5f) * (1.f / 16777216.f);
    const float u2 = static_cast<float>((r >> 16) & 0xFFFFFF) * (1.f / 16777216.f);
    const float value = std * sqrtf(-2.f * logf(u1)) * cospif(2.f * u2);
    if (x32) x32[i] = value;
    if (x16) x16[i] = Tensor16<T>::from_float(value);
  }
}

template <typename T> __global__ void fill_kernel(T* x16, float* x32, int64_t n, float value) {
  FAST_GRID_STRIDE(i, n) {
    if (x32) x32[i] = value;
    if (x16) x16[i] = Tensor16<T>::from_float(value);
  }
}

}  // namespace

bool compiled() { return true; }

void cross_entropy(Storage s, void* logits, const std::int32_t* targets, float* row_loss, int64_t M, int64_t V,
                   int64_t valid, float normalizer, float grad_scale) {
  if (valid < 1 || valid > V) raise_error("fast cross_entropy: valid columns " + std::to_string(valid) + " of " + std::to_string(V));
  detail::with_storage(s, [&](auto type) {
    using E = decltype(type);
    const unsigned grid = static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>(M, 65535)));
    if (V % 8 == 0 && reinterpret_cast<std::uintptr_t>(logits) % 16 == 0)
      cross_entropy_kernel<E, true><<<grid, kRowThreads, 0, stream()>>>(static_cast<E*>(logits), targets, row_loss, M,
                                                                        V, valid, normalizer, grad_scale);
    else
      cross_entropy_kernel<E, false><<<grid, kRowThreads, 0, stream()>>>(static_cast<E*>(logits), targets, row_loss,
                                                                         M, V, valid, normalizer, grad_scale);
  });
  check_launch("cross_entropy_kernel");
}

void sum(const float* x, float* out, int64_t n) {
  sum_kernel<<<1, 1024, 0, stream()>>>(x, out, n);
  check_launch("sum_kernel");
}

void adamw(Storage s, void* params16, float* masters, float* m, float* v, const void* grad16, const float* grad32,
           int64_t n, int64_t n32, const AdamWHyper& h, int step, float loss_scale, const int* nonfinite) {
  if (step < 1) raise_error("fast adamw: step counts from 1");
  for (const void* p : {static_cast<const void*>(params16), static_cast<const void*>(masters), static_cast<const void*>(m),
                        static_cast<const void*>(v), grad16, static_cast<const void*>(grad32)})
    if (reinterpret_cast<std::uintptr_t>(p) % 16 != 0) raise_error("fast adamw: every buffer must start on 16 bytes");
  // 1 - beta and the bias corrections in double, rounded once (as the reference optimizer).
  const AdamWStep a{h.learning_rate,
                    h.beta1,
                    h.beta2,
                    static_cast<float>(1.0 - static_cast<double>(h.beta1)),
                    static_cast<float>(1.0 - static_cast<double>(h.beta2)),
                    h.epsilon,
                    h.weight_decay,
                    static_cast<float>(1.0 - std::pow(static_cast<double>(h.beta1), step)),
                    static_cast<float>(1.0 - std::pow(static_cast<double>(h.beta2), step))};
  detail::with_storage(s, [&](auto type) {
    using E = decltype(type);
    adamw_kernel<E><<<grid_for((n + 3) / 4), 256, 0, stream()>>>(static_cast<E*>(params16), masters, m, v,
                                                      static_cast<const E*>(grad16), grad32, n, n32, a, 1.f / loss_scale,
                                                      nonfinite);
  });
  check_launch("adamw_kernel");
}

void find_nonfinite(Storage s, const void* grad16, int64_t n, const float* grad32, int64_t n32, int* flag) {
  detail::with_storage(s, [&](auto type) {
    using E = decltype(type);
    find_nonfinite_kernel<E><<<grid_for(n), 256, 0, stream()>>>(static_cast<const E*>(grad16), n, grad32, n32, flag);
  });
  check_launch("find_nonfinite_kernel");
}

void multiply(Storage s, void* x, int64_t n, bool float32, float factor, void* on) {
  cudaStream_t st = on ? static_cast<cudaStream_t>(on) : stream();
  if (float32) {
    multiply_float_kernel<<<grid_for(n), 256, 0, st>>>(static_cast<float*>(x), n, factor);
  } else {
    detail::with_storage(s, [&](auto type) {
      using E = decltype(type);
      multiply_kernel<E><<<grid_for(n), 256, 0, st>>>(static_cast<E*>(x), n, factor);
    });
  }
  check_launch("multiply_kernel");
}

void to_storage(Storage s, const float* x, void* y, int64_t n) {
  detail::with_storage(s, [&](auto type) {
    using E = decltype(type);
    to_storage_kernel<E><<<grid_for(n), 256, 0, stream()>>>(x, static_cast<E*>(y), n);
  });
  check_launch("to_storage_kernel");
}

void from_storage(Storage s, const void* x, float* y, int64_t n) {
  detail::with_storage(s, [&](auto type) {
    using E = decltype(type);
    from_storage_kernel<E><<<grid_for(n), 256, 0, stream()>>>(static_cast<const E*>(x), y, n);
  });
  check_launch("from_storage_kernel");
}

void normal_init(Storage s, void* x16, float* x32, int64_t n, float std, std::uint64_t seed) {
  detail::with_storage(s, [&](auto type) {
    using E = decltype(type);
    normal_init_kernel<E><<<grid_for(n), 256, 0, stream()>>>(static_cast<E*>(x16), x32, n, std, seed);
  });
  check_launch("normal_init_kernel");
}

void fill(Storage s, void* x16, float* x32, int64_t n, float value) {
  detail::with_storage(s, [&](auto type) {
    using E = decltype(type);
    fill_kernel<E><<<grid_for(n), 256, 0, stream()>>>(static_cast<E*>(x16), x32, n, value);
  });
  check_launch("fill_kernel");
}

}  // namespace parity::fast
