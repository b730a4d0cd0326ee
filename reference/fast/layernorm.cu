// The fast path's LayerNorm (fused with the residual add) and embedding (ops.hpp). A row op
// gives a set of rows to each block, the whole block (or, for aligned rows of C % 4 == 0, one
// warp) working on one row at a time with each thread's columns held in registers, so an input
// row is read from memory once; sums over a row are reduced in a fixed order (warp shuffles, then
// the warps in order), and sums over rows (the parameter gradients, the embedding gradients) go
// through per-block partials summed in a fixed order, never atomics: the step repeats bit for bit.
#include <cstdint>
#include <initializer_list>
#include <string>
#include <type_traits>
#include <utility>

#include "reference/fast/device_common.cuh"

namespace parity::fast {
namespace {

using detail::check_launch, detail::grid_for, detail::kRowThreads, detail::kWarpsPerRow, detail::stream,
    detail::Tensor16, std::int64_t;

constexpr int kMaxPerThread = 16;  // columns per thread: rows of up to 4096
constexpr int64_t kMaxColumns = int64_t{kRowThreads} * kMaxPerThread;
constexpr float kEps = 1e-5f;       // LayerNorm's, as reference/ops/ops.hpp

// Sum over the block of one value per thread, the same on every thread; `buffer` holds kWarpsPerRow floats.
__device__ float block_sum(float v, float* buffer) {
  v = detail::warp_sum(v);
  if (threadIdx.x % 32 == 0) buffer[threadIdx.x / 32] = v;
  __syncthreads();
  float total = 0.f;
#pragma unroll
  for (int w = 0; w < kWarpsPerRow; ++w) total += buffer[w];
  __syncthreads();
  return total;
}

template <typename T>
__global__ void __launch_bounds__(kRowThreads) embedding_forward_kernel(const std::int32_t* tokens, const T* wte,
                                                                        const T* wpe, float* resid, int64_t M,
                                                                        int64_t T_len, int64_t C) {
  FAST_GRID_STRIDE(i, M * C) {
    const int64_t row = i / C, c = i % C;
    resid[i] = Tensor16<T>::to_float(wte[static_cast<int64_t>(tokens[row]) * C + c]) +
               Tensor16<T>::to_float(wpe[(row % T_len) * C + c]);
  }
}

// PER: the columns each thread holds (C <= kRowThreads PER), a compile-time count so that they
// stay in registers and a narrow row does not pay for the widest.
template <typename T, int PER>
__global__ void __launch_bounds__(kRowThreads) layernorm_forward_kernel(const float* resid, const T* add,
                                                                        float* resid_out, const T* gamma,
                                                                        const T* beta, T* y, float* mean, float* rstd,
                                                                        int64_t M, int64_t C) {
  __shared__ float buffer[kWarpsPerRow];
  for (int64_t row = blockIdx.x; row < M; row += gridDim.x) {
    const float* r = resid + row * C;
    float x[PER], sum = 0.f;
#pragma unroll
    for (int i = 0; i < PER; ++i) {
      const int64_t c = threadIdx.x + int64_t{kRowThreads} * i;
      x[i] = 0.f;
      if (c < C) {
        x[i] = r[c];
        if (add) {
          x[i] += Tensor16<T>::to_float(add[row * C + c]);
          resid_out[row * C + c] = x[i];
        }
        sum += x[i];
      }
    }
    const float mu = block_sum(sum, buffer) / static_cast<float>(C);
    float squares = 0.f;
#pragma unroll
    for (int i = 0; i < PER; ++i)
      if (threadIdx.x + int64_t{kRowThreads} * i < C) squares += (x[i] - mu) * (x[i] - mu);
    const float rs = rsqrtf(block_sum(squares, buffer) / static_cast<float>(C) + kEps);
#pragma unroll
    for (int i = 0; i < PER; ++i) {
      const int64_t c = threadIdx.x + int64_t{kRowThreads} * i;
      if (c < C)
        y[row * C + c] = Tensor16<T>::from_float((x[i] - mu) * rs * Tensor16<T>::to_float(gamma[c]) +
                                                 Tensor16<T>::to_float(beta[c]));
    }
    if (threadIdx.x == 0) {
      mean[row] = mu;
      rstd[row] = rs;
    }
  }
}

// Four consecutive columns as one access: 16 bytes of float32, 8 bytes of 16-bit storage. The
// caller makes sure the address is aligned to it.
__device__ __forceinline__ void load4(const float* p, float v[4]) {
  const float4 x = *reinterpret_cast<const float4*>(p);
  v[0] = x.x, v[1] = x.y, v[2] = x.z, v[3] = x.w;
}
__device__ __forceinline__ void store4(float* p, const float v[4]) {
  *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
}
template <typename T> __device__ __forceinline__ void unpack4(uint2 x, float v[4]) {
  const T* e = reinterpret_cast<const T*>(&x);
#pragma unroll
  for (int i = 0; i < 4; ++i) v[i] = Tensor16<T>::to_float(e[i]);
}
template <typename T> __device__ __forceinline__ void load4(const T* p, float v[4]) {
  unpack4<T>(*reinterpret_cast<const uint2*>(p), v);
}
template <typename T> __device__ __forceinline__ void store4(T* p, const float v[4]) {
  *reinterpret_cast<uint2*>(p) = make_uint2(Tensor16<T>::pack(v[0], v[1]), Tensor16<T>::pack(v[2], v[3]));
}

// The same forward for rows of C % 4 == 0 columns on aligned buffers: a warp per row (no block
// barriers, kWarpsPerRow rows in flight per block), lane l holding the groups of four columns
// l + 32 j (j < VPL), each read and written as one vector access. Every read of a row is issued
// before the first value is used or anything is written (the buffers do not overlap: restrict),
// so a lane has all of its row's loads in flight at once.
template <typename T, int VPL>
__global__ void __launch_bounds__(kRowThreads, VPL > 4 && VPL <= 20 ? 2 : 1)
    layernorm_forward_rows_kernel(const float* __restrict__ resid, const T* __restrict__ add,
                                  float* __restrict__ resid_out, const T* __restrict__ gamma,
                                  const T* __restrict__ beta, T* __restrict__ y, float* __restrict__ mean,
                                  float* __restrict__ rstd, int64_t M, int64_t C) {
  const int lane = threadIdx.x % 32;
  const int64_t groups = C / 4, warps = static_cast<int64_t>(gridDim.x) * kWarpsPerRow;
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerRow + threadIdx.x / 32; row < M; row += warps) {
    float x[VPL][4];
    uint2 a[VPL];  // the addend's four 16-bit values, unpacked where they are added
#pragma unroll
    for (int j = 0; j < VPL; ++j) {
      const int64_t g = lane + 32 * j, at = row * C + 4 * g;
#pragma unroll
      for (int e = 0; e < 4; ++e) x[j][e] = 0.f;
      a[j] = make_uint2(0u, 0u);  // +0 in both 16-bit types
      if (g < groups) {
        load4(resid + at, x[j]);
        if (add) a[j] = *reinterpret_cast<const uint2*>(add + at);
      }
    }
    float sum = 0.f;
#pragma unroll
    for (int j = 0; j < VPL; ++j) {
      if (add) {
        float v[4];
        unpack4<T>(a[j], v);
#pragma unroll
        for (int e = 0; e < 4; ++e) x[j][e] += v[e];
      }
#pragma unroll
      for (int e = 0; e < 4; ++e) sum += x[j][e];
    }
    if (add)
#pragma unroll
      for (int j = 0; j < VPL; ++j)
        if (lane + 32 * j < groups) store4(resid_out + row * C + 4 * (lane + 32 * j), x[j]);
    const float mu = detail::warp_sum(sum) / static_cast<float>(C);
    float squares = 0.f;
#pragma unroll
    for (int j = 0; j < VPL; ++j)
      if (lane + 32 * j < groups)
#pragma unroll
        for (int e = 0; e < 4; ++e) squares += (x[j][e] - mu) * (x[j][e] - mu);
    const float rs = rsqrtf(detail::warp_sum(squares) / static_cast<float>(C) + kEps);
#pragma unroll
    for (int j = 0; j < VPL; ++j) {
      const int64_t g = lane + 32 * j;
      if (g < groups) {
        float gm[4], bt[4], out[4];
        load4(gamma + 4 * g, gm);
        load4(beta + 4 * g, bt);
#pragma unroll
        for (int e = 0; e < 4; ++e) out[e] = (x[j][e] - mu) * rs * gm[e] + bt[e];
        store4(y + row * C + 4 * g, out);
      }
    }
    if (lane == 0) {
      mean[row] = mu;
      rstd[row] = rs;
    }
  }
}

template <typename T, int PER>
__global__ void __launch_bounds__(kRowThreads) layernorm_backward_kernel(const float* resid, const float* mean,
                                                                         const float* rstd, const T* gamma, const T* dy,
                                                                         float* dresid, T* dresid16, float* partial,
                                                                         int64_t M, int64_t C) {
  __shared__ float buffer[kWarpsPerRow];
  float dgamma[PER] = {}, dbeta[PER] = {};
  for (int64_t row = blockIdx.x; row < M; row += gridDim.x) {
    const float mu = mean[row], rs = rstd[row];
    float xhat[PER], dxhat[PER], sum_dxhat = 0.f, sum_dxhat_xhat = 0.f;
#pragma unroll
    for (int i = 0; i < PER; ++i) {
      const int64_t c = threadIdx.x + int64_t{kRowThreads} * i;
      xhat[i] = dxhat[i] = 0.f;
      if (c < C) {
        const float g = Tensor16<T>::to_float(dy[row * C + c]);
        xhat[i] = (resid[row * C + c] - mu) * rs;
        dxhat[i] = g * Tensor16<T>::to_float(gamma[c]);
        dgamma[i] += g * xhat[i];
        dbeta[i] += g;
        sum_dxhat += dxhat[i];
        sum_dxhat_xhat += dxhat[i] * xhat[i];
      }
    }
    const float a = block_sum(sum_dxhat, buffer) / static_cast<float>(C);
    const float b = block_sum(sum_dxhat_xhat, buffer) / static_cast<float>(C);
#pragma unroll
    for (int i = 0; i < PER; ++i) {
      const int64_t c = threadIdx.x + int64_t{kRowThreads} * i;
      if (c < C) {
        const float d = dresid[row * C + c] + rs * (dxhat[i] - a - xhat[i] * b);
        dresid[row * C + c] = d;
        dresid16[row * C + c] = Tensor16<T>::from_float(d);
      }
    }
  }
#pragma unroll
  for (int i = 0; i < PER; ++i) {
    const int64_t c = threadIdx.x + int64_t{kRowThreads} * i;
    if (c < C) {
      partial[blockIdx.x * 2 * C + c] = dgamma[i];
      partial[blockIdx.x * 2 * C + C + c] = dbeta[i];
    }
  }
}

// The same backward for rows of C % 4 == 0 columns on aligned buffers: thread t holds the groups
// of four columns t + kRowThreads j (j < VPT), read and written as vectors; all three of a row's
// reads (dy, the saved input, the gradient it adds to) are issued before the first is used, and
// the row's two sums are reduced together behind one barrier (two alternating buffers, so that a
// fast warp writing the next row's sums cannot overwrite ones a slow warp still reads).
template <typename T, int VPT>
__global__ void __launch_bounds__(kRowThreads, VPT == 1 ? 5 : VPT == 2 ? 4 : 2)
    layernorm_backward_rows_kernel(const float* __restrict__ resid, const float* __restrict__ mean,
                                   const float* __restrict__ rstd, const T* __restrict__ gamma,
                                   const T* __restrict__ dy, float* __restrict__ dresid, T* __restrict__ dresid16,
                                   float* __restrict__ partial, int64_t M, int64_t C) {
  __shared__ float2 buffer[2][kWarpsPerRow];
  const int64_t groups = C / 4;
  float dgamma[VPT][4] = {}, dbeta[VPT][4] = {}, gm[VPT][4] = {};  // zeros past C: they add nothing
#pragma unroll
  for (int j = 0; j < VPT; ++j) {
    const int64_t g = threadIdx.x + int64_t{kRowThreads} * j;
    if (g < groups) load4(gamma + 4 * g, gm[j]);
  }
  int which = 0;
  for (int64_t row = blockIdx.x; row < M; row += gridDim.x, which ^= 1) {
    const float mu = mean[row], rs = rstd[row];
    float r[VPT][4], acc[VPT][4];
    uint2 dy16[VPT];  // dy's four 16-bit values, unpacked where they are used
#pragma unroll
    for (int j = 0; j < VPT; ++j) {
      const int64_t g = threadIdx.x + int64_t{kRowThreads} * j, at = row * C + 4 * g;
#pragma unroll
      for (int e = 0; e < 4; ++e) r[j][e] = acc[j][e] = 0.f;
      dy16[j] = make_uint2(0u, 0u);
      if (g < groups) {
        dy16[j] = *reinterpret_cast<const uint2*>(dy + at);
        load4(resid + at, r[j]);
        load4(dresid + at, acc[j]);
      }
    }
    float xhat[VPT][4], dxhat[VPT][4], sum_dxhat = 0.f, sum_dxhat_xhat = 0.f;
#pragma unroll
    for (int j = 0; j < VPT; ++j) {
      float d[4];
      unpack4<T>(dy16[j], d);
#pragma unroll
      for (int e = 0; e < 4; ++e) {  // columns past C hold zeros and add nothing
        xhat[j][e] = (r[j][e] - mu) * rs;
        dxhat[j][e] = d[e] * gm[j][e];
        dgamma[j][e] += d[e] * xhat[j][e];
        dbeta[j][e] += d[e];
        sum_dxhat += dxhat[j][e];
        sum_dxhat_xhat += dxhat[j][e] * xhat[j][e];
      }
    }
    sum_dxhat = detail::warp_sum(sum_dxhat);
    sum_dxhat_xhat = detail::warp_sum(sum_dxhat_xhat);
    if (threadIdx.x % 32 == 0) buffer[which][threadIdx.x / 32] = make_float2(sum_dxhat, sum_dxhat_xhat);
    __syncthreads();
    float a = 0.f, b = 0.f;
#pragma unroll
    for (int w = 0; w < kWarpsPerRow; ++w) {
      a += buffer[which][w].x;
      b += buffer[which][w].y;
    }
    a /= static_cast<float>(C);
    b /= static_cast<float>(C);
#pragma unroll
    for (int j = 0; j < VPT; ++j) {
      const int64_t g = threadIdx.x + int64_t{kRowThreads} * j, at = row * C + 4 * g;
      if (g < groups) {
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[j][e] += rs * (dxhat[j][e] - a - xhat[j][e] * b);
        store4(dresid + at, acc[j]);
        store4(dresid16 + at, acc[j]);
      }
    }
  }
#pragma unroll
  for (int j = 0; j < VPT; ++j) {
    const int64_t g = threadIdx.x + int64_t{kRowThreads} * j;
    if (g < groups) {
      store4(partial + blockIdx.x * 2 * C + 4 * g, dgamma[j]);
      store4(partial + blockIdx.x * 2 * C + C + 4 * g, dbeta[j]);
    }
  }
}

// dgamma, dbeta from the backward blocks' partials: a block takes 32 of the 2C columns, and its
// thread (x, y) sums the partial rows y, y + kParamGroups, ... of column x in order; the
// kParamGroups sums are then added in order of y. Fixed order, and 2C / 32 blocks in flight.
constexpr int kParamGroups = 16;
template <typename T>
__global__ void __launch_bounds__(32 * kParamGroups) layernorm_param_grads_kernel(const float* partial, T* dgamma,
                                                                                 T* dbeta, int64_t blocks, int64_t C) {
  __shared__ float sums[kParamGroups][33];
  const int64_t c = static_cast<int64_t>(blockIdx.x) * 32 + threadIdx.x;
  float sum = 0.f;
  if (c < 2 * C) {
#pragma unroll 8
    for (int64_t b = threadIdx.y; b < blocks; b += kParamGroups) sum += partial[b * 2 * C + c];
  }
  sums[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y != 0 || c >= 2 * C) return;
  float total = 0.f;
#pragma unroll
  for (int g = 0; g < kParamGroups; ++g) total += sums[g][threadIdx.x];
  if (c < C)
    dgamma[c] = Tensor16<T>::from_float(total);
  else
    dbeta[c - C] = Tensor16<T>::from_float(total);
}

template <typename T>
__global__ void position_gradient_kernel(const float* dresid, T* dwpe, int64_t B, int64_t T_len, int64_t C) {
  FAST_GRID_STRIDE(i, T_len * C) {
    float sum = 0.f;
    for (int64_t b = 0; b < B; ++b) sum += dresid[b * T_len * C + i];
    dwpe[i] = Tensor16<T>::from_float(sum);
  }
}

// One block per distinct token: its rows of dresid summed in row order, added to the table's row.
__global__ void token_gradient_kernel(const float* dresid, const std::int32_t* order, const std::int32_t* starts,
                                      const std::int32_t* unique, float* dwte32, int64_t C) {
  const int u = blockIdx.x;
  const int64_t row_of_table = unique[u];
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    float sum = 0.f;
    for (int j = starts[u]; j < starts[u + 1]; ++j) sum += dresid[static_cast<int64_t>(order[j]) * C + c];
    dwte32[row_of_table * C + c] += sum;
  }
}

void require_columns(int64_t C, const char* op) {
  if (C < 1 || C > kMaxColumns)
    raise_error(std::string("fast ") + op + ": rows of " + std::to_string(C) + " columns (1 to " +
                std::to_string(kMaxColumns) + " supported)");
}

// Calls f with std::integral_constant<int, PER> for the fewest columns per thread that hold C.
template <typename F> void with_columns_per_thread(int64_t C, F&& f) {
  const int64_t per = (C + kRowThreads - 1) / kRowThreads;
  if (per <= 1) f(std::integral_constant<int, 1>{});
  else if (per <= 2) f(std::integral_constant<int, 2>{});
  else if (per <= 4) f(std::integral_constant<int, 4>{});
  else if (per <= 8) f(std::integral_constant<int, 8>{});
  else if (per <= 12) f(std::integral_constant<int, 12>{});
  else f(std::integral_constant<int, kMaxPerThread>{});
}

// The vector kernels read and write through restrict pointers: each written buffer of `bytes`
// must not overlap any other buffer the op touches.
void require_disjoint(const char* op, std::initializer_list<std::pair<const void*, int64_t>> buffers) {
  for (auto a = buffers.begin(); a != buffers.end(); ++a)
    for (auto b = a + 1; b != buffers.end(); ++b) {
      if (a->first == nullptr || b->first == nullptr) continue;
      const auto x = reinterpret_cast<std::uintptr_t>(a->first), y = reinterpret_cast<std::uintptr_t>(b->first);
      if (x < y + static_cast<std::uintptr_t>(b->second) && y < x + static_cast<std::uintptr_t>(a->second))
        raise_error(std::string("fast ") + op + ": its buffers overlap (the op does not work in place)");
    }
}

unsigned row_grid(int64_t M) { return static_cast<unsigned>(layernorm_partial_rows(M)); }

// Whether the rows can go through the vector kernels: C a multiple of 4 and every pointer aligned
// to its type's four-column access.
bool vector_rows(int64_t C, std::initializer_list<const void*> floats, std::initializer_list<const void*> halves) {
  if (C % 4 != 0) return false;
  for (const void* p : floats)
    if (reinterpret_cast<std::uintptr_t>(p) % 16 != 0) return false;
  for (const void* p : halves)
    if (reinterpret_cast<std::uintptr_t>(p) % 8 != 0) return false;
  return true;
}
// Calls f with std::integral_constant<int, N> for the fewest groups of four columns per lane (warp
// per row: 32 lanes) or per thread (block per row) that hold C.
template <typename F> void with_groups_per_lane(int64_t C, F&& f) {
  const int64_t per = (C / 4 + 31) / 32;
  if (per <= 1) f(std::integral_constant<int, 1>{});
  else if (per <= 2) f(std::integral_constant<int, 2>{});
  else if (per <= 4) f(std::integral_constant<int, 4>{});
  else if (per <= 8) f(std::integral_constant<int, 8>{});
  else if (per <= 12) f(std::integral_constant<int, 12>{});
  else if (per <= 16) f(std::integral_constant<int, 16>{});
  else if (per <= 20) f(std::integral_constant<int, 20>{});
  else if (per <= 24) f(std::integral_constant<int, 24>{});
  else f(std::integral_constant<int, 32>{});
}
template <typename F> void with_groups_per_thread(int64_t C, F&& f) {
  const int64_t per = (C / 4 + kRowThreads - 1) / kRowThreads;
  if (per <= 1) f(std::integral_constant<int, 1>{});
  else if (per <= 2) f(std::integral_constant<int, 2>{});
  else if (per <= 3) f(std::integral_constant<int, 3>{});
  else f(std::integral_constant<int, 4>{});
}

}  // namespace

void embedding_forward(Storage s, const std::int32_t* tokens, const void* wte, const void* wpe, float* resid, int64_t B,
                       int64_t T, int64_t C) {
  detail::with_storage(s, [&](auto type) {
    using E = decltype(type);
    embedding_forward_kernel<E><<<grid_for(B * T * C), 256, 0, stream()>>>(
        tokens, static_cast<const E*>(wte), static_cast<const E*>(wpe), resid, B * T, T, C);
  });
  check_launch("embedding_forward_kernel");
}

void residual_layernorm_forward(Storage s, const float* resid, const void* add, float* resid_out, const void* gamma,
                                const void* beta, void* y, float* mean, float* rstd, int64_t M, int64_t C) {
  require_columns(C, "residual_layernorm_forward");
  require_disjoint("residual_layernorm_forward",
                   {{resid, M * C * 4}, {add, M * C * 2}, {resid_out, M * C * 4}, {y, M * C * 2}, {mean, M * 4},
                    {rstd, M * 4}});
  const bool vector = vector_rows(C, {resid, resid_out}, {add, gamma, beta, y});
  detail::with_storage(s, [&](auto type) {
    using E = decltype(type);
    if (vector) {
      const auto blocks = static_cast<unsigned>(std::min<int64_t>((M + kWarpsPerRow - 1) / kWarpsPerRow, 65535));
      with_groups_per_lane(C, [&](auto per) {
        layernorm_forward_rows_kernel<E, decltype(per)::value><<<blocks, kRowThreads, 0, stream()>>>(
            resid, static_cast<const E*>(add), resid_out, static_cast<const E*>(gamma), static_cast<const E*>(beta),
            static_cast<E*>(y), mean, rstd, M, C);
      });
      return;
    }
    with_columns_per_thread(C, [&](auto per) {
      layernorm_forward_kernel<E, decltype(per)::value><<<row_grid(M), kRowThreads, 0, stream()>>>(
          resid, static_cast<const E*>(add), resid_out, static_cast<const E*>(gamma), static_cast<const E*>(beta),
          static_cast<E*>(y), mean, rstd, M, C);
    });
  });
  check_launch("layernorm_forward_kernel");
}


void layernorm_backward(Storage s, const float* resid, const float* mean, const float* rstd, const void* gamma,
                        const void* dy, float* dresid, void* dresid16, float* partial, int64_t M, int64_t C) {
  require_columns(C, "layernorm_backward");
  require_disjoint("layernorm_backward", {{resid, M * C * 4}, {dy, M * C * 2}, {dresid, M * C * 4},
                                          {dresid16, M * C * 2}, {mean, M * 4}, {rstd, M * 4}});
  const bool vector = vector_rows(C, {resid, dresid, partial}, {gamma, dy, dresid16});
  detail::with_storage(s, [&](auto type) {
    using E = decltype(type);
    if (vector) {
      with_groups_per_thread(C, [&](auto per) {
        layernorm_backward_rows_kernel<E, decltype(per)::value><<<row_grid(M), kRowThreads, 0, stream()>>>(
            resid, mean, rstd, static_cast<const E*>(gamma), static_cast<const E*>(dy), dresid,
            static_cast<E*>(dresid16), partial, M, C);
      });
      return;
    }
    with_columns_per_thread(C, [&](auto per) {
      layernorm_backward_kernel<E, decltype(per)::value><<<row_grid(M), kRowThreads, 0, stream()>>>(
          resid, mean, rstd, static_cast<const E*>(gamma), static_cast<const E*>(dy), dresid,
          static_cast<E*>(dresid16), partial, M, C);
    });
  });
  check_launch("layernorm_backward_kernel");
}

void layernorm_param_grads(Storage s, const float* partial, void* dgamma, void* dbeta, int64_t M, int64_t C) {
  detail::with_storage(s, [&](auto type) {
    using E = decltype(type);
    const auto blocks = static_cast<unsigned>((2 * C + 31) / 32);
    layernorm_param_grads_kernel<E><<<blocks, dim3(32, kParamGroups), 0, stream()>>>(
        partial, static_cast<E*>(dgamma), static_cast<E*>(dbeta), layernorm_partial_rows(M), C);
  });
  check_launch("layernorm_param_grads_kernel");
}

void embedding_backward(Storage s, const float* dresid, const std::int32_t* order, const std::int32_t* starts,
                        const std::int32_t* unique, int64_t distinct, void* dwpe, float* dwte32, int64_t B, int64_t T,
                        int64_t C) {
  detail::with_storage(s, [&](auto type) {
    using E = decltype(type);
    position_gradient_kernel<E><<<grid_for(T * C), 256, 0, stream()>>>(dresid, static_cast<E*>(dwpe), B, T, C);
  });
  check_launch("position_gradient_kernel");
  if (distinct > 0) {
    token_gradient_kernel<<<static_cast<unsigned>(distinct), 256, 0, stream()>>>(dresid, order, starts, unique, dwte32,
                                                                               C);
    check_launch("token_gradient_kernel");
  }
}

}  // namespace parity::fast
