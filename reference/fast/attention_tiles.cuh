// What the attention kernels of both families share (attention.cu's m16n8k16 kernels and
// attention_wgmma.cu's warpgroup kernels): the copies of the statistics, the accumulator
// layout (per warp, 16 rows: the m16n8k16 layout, which the warpgroup products keep for each of
// their four warps), its reductions, its conversion into A operands, and the store of the rows.
#pragma once

#include <cstdint>

#include "reference/fast/device_common.cuh"

namespace parity::fast::attention {

using detail::Tensor16;
using std::uint32_t;

inline constexpr float kLog2e = 1.4426950408889634f;

// Starts copying the float32 statistics [row0, row0 + n) of one head into `to` (zeros past T_len),
// in the same copy group as the tiles started beside it.
__device__ inline void start_stats(const float* src, int T_len, int row0, int n, float* to) {
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    const bool inside = row0 + i < T_len;
    const auto dst = static_cast<uint32_t>(__cvta_generic_to_shared(to + i));
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src + (inside ? row0 + i : 0)),
                 "r"(inside ? 4 : 0));
  }
}
__device__ __forceinline__ void commit() { asm volatile("cp.async.commit_group;\n" ::); }
__device__ __forceinline__ void wait_for_copies() { asm volatile("cp.async.wait_group 0;\n" ::: "memory"); }

// The A operand for k columns [16 j, 16 j + 16) from accumulator tiles acc[2j], acc[2j + 1].
template <typename T> __device__ void a_from_accumulators(const float (*acc)[4], int j, uint32_t a[4]) {
  a[0] = Tensor16<T>::pack(acc[2 * j][0], acc[2 * j][1]);
  a[1] = Tensor16<T>::pack(acc[2 * j][2], acc[2 * j][3]);
  a[2] = Tensor16<T>::pack(acc[2 * j + 1][0], acc[2 * j + 1][1]);
  a[3] = Tensor16<T>::pack(acc[2 * j + 1][2], acc[2 * j + 1][3]);
}

template <int N> __device__ void clear(float (*acc)[4]) {
#pragma unroll
  for (int i = 0; i < N; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.f;
}

// Element e (0..3) of accumulator tile n of a warp: its row (0..15) and column within the tile set.
__device__ __forceinline__ int acc_row(int e) { return (threadIdx.x % 32) / 4 + (e >= 2 ? 8 : 0); }
__device__ __forceinline__ int acc_col(int n, int e) { return 8 * n + 2 * (threadIdx.x % 4) + (e & 1); }

// Reduces a per-thread value over the 4 threads sharing an accumulator row.
__device__ __forceinline__ float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

// Writes a warp's 16 x D accumulator rows (times `scale`) to dst rows row0.. (rows < T_len).
template <typename T, int D>
__device__ void store_rows(const float (*acc)[4], float scale, T* dst, int ld, int T_len, int row0, int col0) {
#pragma unroll
  for (int n = 0; n < D / 8; ++n)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int r = row0 + acc_row(2 * half);
      if (r >= T_len) continue;
      const uint32_t v = Tensor16<T>::pack(acc[n][2 * half] * scale, acc[n][2 * half + 1] * scale);
      *reinterpret_cast<uint32_t*>(dst + static_cast<std::int64_t>(r) * ld + col0 + acc_col(n, 0)) = v;
    }
}

// The forward's online softmax (FlashAttention-2), on a warp's 16 rows from row0 against a tile of
// NT x 8 keys from key0, its scores in s. Masks, element by element, the keys after a row or past
// the sequence (-inf).
template <int NT> __device__ __forceinline__ void mask_later_keys(float (*s)[4], int key0, int row0, int T_len) {
#pragma unroll
  for (int n = 0; n < NT; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int key = key0 + acc_col(n, e), query = row0 + acc_row(e);
      if (key > query || key >= T_len) s[n][e] = -INFINITY;
    }
}
// Scales the scores by scale_log2, moves each row's running maximum m and sum l on to this
// tile, turns s into exp2(s - max) and returns in alpha the factor the rows' earlier output is
// to be multiplied by.
template <int NT>
__device__ __forceinline__ void online_softmax_step(float (*s)[4], float scale_log2, float m[2], float l[2], float alpha[2]) {
  float row_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
  for (int n = 0; n < NT; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      s[n][e] *= scale_log2;
      row_max[e / 2] = fmaxf(row_max[e / 2], s[n][e]);
    }
  float base_max[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const float m_new = fmaxf(m[i], quad_max(row_max[i]));
    base_max[i] = m_new == -INFINITY ? 0.f : m_new;
    alpha[i] = exp2f(m[i] - base_max[i]);
    m[i] = m_new;
    l[i] *= alpha[i];
  }
#pragma unroll
  for (int n = 0; n < NT; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      s[n][e] = exp2f(s[n][e] - base_max[e / 2]);
      l[e / 2] += s[n][e];
    }
}
template <int NT> __device__ __forceinline__ void scale_rows(float (*o)[4], const float f[2]) {
#pragma unroll
  for (int n = 0; n < NT; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) o[n][e] *= f[e / 2];
}
// The forward's end for a warp's 16 rows from row0: the output divided by each row's sum and
// stored at column col0 of out [T_len, C], and each row's log-sum-exp (base 2) at lse[row].
template <typename T, int D>
__device__ __forceinline__ void finish_forward(float (*o)[4], const float m[2], float l[2], T* out, int C, float* lse,
                                               int T_len, int row0, int col0) {
  float inv[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    l[i] = quad_sum(l[i]);
    inv[i] = l[i] > 0.f ? 1.f / l[i] : 0.f;
  }
  scale_rows<D / 8>(o, inv);
  store_rows<T, D>(o, 1.f, out, C, T_len, row0, col0);
  if (threadIdx.x % 4 == 0)
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int r = row0 + acc_row(2 * i);
      if (r < T_len) lse[r] = m[i] + log2f(l[i]);
    }
}

}  // namespace parity::fast::attention
