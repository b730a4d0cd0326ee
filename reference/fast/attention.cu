// Causal attention on tensor cores with FlashAttention-2's tiling (Dao, 2023): a block takes a
// tile of rows, walks the tiles of the other side that the causal mask leaves, and keeps scores
// and probabilities in registers; only the output and one log-sum-exp per row reach memory.
//
// Every product is the m16n8k16 tensor-core instruction on 16-bit operands with float32
// accumulators. A warp owns 16 rows; its A operand comes from shared memory or, for the second
// product of a pair, straight from the accumulators of the first (an accumulator tile of 16 x 8
// floats holds, per thread, exactly the elements the A operand of the next product needs). B
// operands are read from shared-memory tiles stored either as rows (when the product's k index
// runs along a row) or transposed (when it runs down a column), each row padded by 8 elements so
// that the eight rows one ldmatrix phase reads hit different banks; one ldmatrix loads an A
// operand, or the B operands of two column tiles.
//
// Backward is two kernels and no atomics, so it is deterministic: one takes a tile of keys and
// accumulates dK and dV over the query tiles, the other takes a tile of queries and accumulates
// dQ over the key tiles (recomputing the scores and dP = dO V^T: two more products than a
// single kernel with atomic dQ, in exchange for a fixed summation order).
#include <algorithm>
#include <array>
#include <atomic>
#include <cstdlib>
#include <string>
#include <type_traits>

#include "reference/fast/attention_tiles.cuh"
#include "reference/fast/attention_wgmma.hpp"

namespace parity::fast {
namespace {

using detail::check;
using detail::check_launch;
using detail::Tensor16;
using std::uint32_t;
using namespace attention;

constexpr int kWarps = 4;             // a backward block: 4 warps of 16 rows
constexpr int kRows = kAttentionRows;  // rows per backward block (queries in dQ, keys in dK/dV)
constexpr int kForwardWarps = kAttentionForwardRows / 16;  // a forward block: 8 warps of 16 queries
constexpr int kKeyTile = kAttentionKeyTile;      // keys per step in forward and dQ
constexpr int kQueryTile = kAttentionQueryTile;  // queries per step in dK/dV
static_assert(kRows == 16 * kWarps && kKeyTile == kRows, "a warp owns 16 rows; the dQ kernel's causal tiles are square");
static_assert(kAttentionForwardRows % kKeyTile == 0, "a forward block's rows end at a key tile's end");
constexpr int kPad = 8;               // elements of padding per shared-memory row

// A tile in shared memory: `rows` rows of `cols` 16-bit elements, row pitch cols + kPad.
template <typename T> struct Tile {
  T* base;
  int pitch;
  __device__ T* row(int r) const { return base + r * pitch; }
};

// Starts copying rows [row0, row0 + rows) x columns [col0, col0 + D) of a [T, ld] matrix into
// the row tile `tile` with 16-byte asynchronous copies (cp.async), rows past T as zeros. The copy
// is complete after commit() and wait_for_copies() (and a barrier, for the other threads' parts).
template <typename T, int D>
__device__ void start_tile(const T* src, int ld, int T_len, int row0, int rows, int col0, const Tile<T>& tile) {
  constexpr int kVec = 8;  // elements per 16 bytes
  for (int i = threadIdx.x; i < rows * (D / kVec); i += blockDim.x) {
    const int r = i / (D / kVec), c = (i % (D / kVec)) * kVec;
    const bool inside = row0 + r < T_len;
    const T* from = src + static_cast<std::int64_t>(inside ? row0 + r : 0) * ld + col0 + c;
    const auto to = static_cast<uint32_t>(__cvta_generic_to_shared(tile.row(r) + c));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(to), "l"(from), "r"(inside ? 16 : 0));
  }
}

// Four 8 x 8 matrices of 16-bit elements from shared memory in one instruction (ldmatrix):
// lane l gives the address of row l % 8 of matrix l / 8, and receives in x[i] the elements
// (l / 4, 2 (l % 4)) and (l / 4, 2 (l % 4) + 1) of matrix i: the register layout of the
// tensor-core operands.
template <typename T> __device__ __forceinline__ void load_matrices(const T* row_address, uint32_t x[4]) {
  const auto address = static_cast<uint32_t>(__cvta_generic_to_shared(row_address));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(x[0]), "=r"(x[1]), "=r"(x[2]), "=r"(x[3])
               : "r"(address));
}
// The A operand (16 rows x 16 columns from column k0) of rows r0.. of a row tile: the matrices
// (r0, k0), (r0 + 8, k0), (r0, k0 + 8), (r0 + 8, k0 + 8).
template <typename T> __device__ void a_fragment(const Tile<T>& t, int r0, int k0, uint32_t a[4]) {
  const int lane = threadIdx.x % 32, m = lane / 8;
  load_matrices(t.row(r0 + (m % 2) * 8 + lane % 8) + k0 + (m / 2) * 8, a);
}
// The B operands (k 16 x n 8) of two column tiles, n0 and n0 + 8, whose column n is row n0 + n of
// tile t, k running along the row from k0 (B[k][n] = t[n0 + n][k0 + k]): b[0], b[1] for the
// first, b[2], b[3] for the second; the matrices (n0, k0), (n0, k0 + 8), (n0 + 8, k0), (n0 + 8, k0 + 8).
template <typename T> __device__ void b_fragments(const Tile<T>& t, int n0, int k0, uint32_t b[4]) {
  const int lane = threadIdx.x % 32, m = lane / 8;
  load_matrices(t.row(n0 + (m / 2) * 8 + lane % 8) + k0 + (m % 2) * 8, b);
}
// The B operands of two column tiles n0 and n0 + 8 where k runs down the rows of tile t from
// row k0 (B[k][n] = t[k0 + k][n0 + n]): ldmatrix's transposing form on the matrices (k0, n0),
// (k0 + 8, n0), (k0, n0 + 8), (k0 + 8, n0 + 8).
template <typename T> __device__ void b_fragments_down(const Tile<T>& t, int k0, int n0, uint32_t b[4]) {
  const int lane = threadIdx.x % 32, m = lane / 8;
  const auto address = static_cast<uint32_t>(__cvta_generic_to_shared(t.row(k0 + (m % 2) * 8 + lane % 8) + n0 + (m / 2) * 8));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(b[0]), "=r"(b[1]), "=r"(b[2]), "=r"(b[3])
               : "r"(address));
}

// acc[n tiles of 8 columns] += rows r0.. of `a` (columns 0..K) times B from tile `b` (rows n0 + 8i).
template <typename T, int NT, int K>
__device__ void multiply_rows(const Tile<T>& a, int r0, const Tile<T>& b, float (*acc)[4]) {
  static_assert(NT % 2 == 0, "B operands are loaded two column tiles at a time");
#pragma unroll
  for (int k = 0; k < K; k += 16) {
    uint32_t af[4];
    a_fragment(a, r0, k, af);
#pragma unroll
    for (int n = 0; n < NT; n += 2) {
      uint32_t bf[4];
      b_fragments(b, 8 * n, k, bf);
      Tensor16<T>::mma(acc[n], af, bf);
      Tensor16<T>::mma(acc[n + 1], af, bf + 2);
    }
  }
}
// acc[NT tiles] += A (from accumulators p, K columns) times B = rows 0..K of row tile `b`.
template <typename T, int NT, int K>
__device__ void multiply_accumulators(const float (*p)[4], const Tile<T>& b, float (*acc)[4]) {
  static_assert(NT % 2 == 0, "B operands are loaded two column tiles at a time");
#pragma unroll
  for (int j = 0; j < K / 16; ++j) {
    uint32_t af[4];
    a_from_accumulators<T>(p, j, af);
#pragma unroll
    for (int n = 0; n < NT; n += 2) {
      uint32_t bf[4];
      b_fragments_down(b, 16 * j, 8 * n, bf);
      Tensor16<T>::mma(acc[n], af, bf);
      Tensor16<T>::mma(acc[n + 1], af, bf + 2);
    }
  }
}

template <int D> __host__ __device__ constexpr int row_pitch() { return D + kPad; }

// Forward. Grid (query tiles of kForwardWarps x 16 rows, B H); the last query tiles (the most keys)
// start first. Two blocks per multiprocessor (their registers and shared memory allow no more).
template <typename T, int D>
__global__ void __launch_bounds__(32 * kForwardWarps, 2) forward_kernel(const T* qkv, T* out, float* lse, int T_len,
                                                                       int C, int H, float scale_log2) {
  constexpr int kQueries = 16 * kForwardWarps;
  extern __shared__ __align__(16) unsigned char smem[];
  // The query tile, then two buffers of (K, V): the next key tile is copied while this one is used.
  Tile<T> qs{reinterpret_cast<T*>(smem), row_pitch<D>()};
  T* const buffers = qs.base + kQueries * row_pitch<D>();  // buffer i: K at 2 i, V at 2 i + 1 (key tiles)
  const auto key_tile = [&](int i, int which) { return Tile<T>{buffers + (2 * i + which) * kKeyTile * row_pitch<D>(), row_pitch<D>()}; };
  const int tile = gridDim.x - 1 - blockIdx.x;
  const int b = blockIdx.y / H, h = blockIdx.y % H, warp = threadIdx.x / 32;
  const int ld = 3 * C;
  const T* base = qkv + static_cast<std::int64_t>(b) * T_len * ld;
  const int q0 = tile * kQueries, qw = q0 + 16 * warp;

  start_tile<T, D>(base, ld, T_len, q0, kQueries, h * D, qs);
  start_tile<T, D>(base, ld, T_len, 0, kKeyTile, C + h * D, key_tile(0, 0));
  start_tile<T, D>(base, ld, T_len, 0, kKeyTile, 2 * C + h * D, key_tile(0, 1));
  commit();
  float o[D / 8][4];
  clear<D / 8>(o);
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
  const int last_key_tile = min((q0 + kQueries - 1) / kKeyTile, (T_len - 1) / kKeyTile);
  // The last key tile this warp's rows see (-1: its rows are all past the sequence's end).
  const int warp_last_tile = qw < T_len ? min(qw + 15, T_len - 1) / kKeyTile : -1;
  for (int kt = 0; kt <= last_key_tile; ++kt) {
    wait_for_copies();
    __syncthreads();  // this tile is in; every warp is done with the buffers the next copy overwrites
    if (kt < last_key_tile) {
      start_tile<T, D>(base, ld, T_len, (kt + 1) * kKeyTile, kKeyTile, C + h * D, key_tile((kt + 1) % 2, 0));
      start_tile<T, D>(base, ld, T_len, (kt + 1) * kKeyTile, kKeyTile, 2 * C + h * D, key_tile((kt + 1) % 2, 1));
    }
    commit();
    if (kt > warp_last_tile) continue;  // the mask hides this whole tile from the warp's rows
    const Tile<T> ks = key_tile(kt % 2, 0), vs = key_tile(kt % 2, 1);
    float s[kKeyTile / 8][4];
    clear<kKeyTile / 8>(s);
    multiply_rows<T, kKeyTile / 8, D>(qs, 16 * warp, ks, s);
    // Element by element only where the tile's last key is past the warp's first row or the sequence.
    if ((kt + 1) * kKeyTile - 1 > qw || (kt + 1) * kKeyTile > T_len) mask_later_keys<kKeyTile / 8>(s, kt * kKeyTile, qw, T_len);
    float alpha[2];
    online_softmax_step<kKeyTile / 8>(s, scale_log2, m, l, alpha);
    scale_rows<D / 8>(o, alpha);
    multiply_accumulators<T, D / 8, kKeyTile>(s, vs, o);
  }
  finish_forward<T, D>(o, m, l, out + static_cast<std::int64_t>(b) * T_len * C, C,
                       lse + (static_cast<std::int64_t>(b) * H + h) * T_len, T_len, qw, h * D);
}

// delta[b, h, t] = sum over the head's columns of dout * out (float32), one warp per row and head.
template <typename T, int D>
__global__ void delta_kernel(const T* dout, const T* out, float* delta, int B, int T_len, int C, int H) {
  const std::int64_t row = (static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  if (row >= static_cast<std::int64_t>(B) * H * T_len) return;
  const int t = static_cast<int>(row % T_len), h = static_cast<int>((row / T_len) % H);
  const int b = static_cast<int>(row / (static_cast<std::int64_t>(T_len) * H));
  const std::int64_t offset = (static_cast<std::int64_t>(b) * T_len + t) * C + h * D;
  float sum = 0.f;
  for (int c = threadIdx.x % 32; c < D; c += 32)
    sum += Tensor16<T>::to_float(dout[offset + c]) * Tensor16<T>::to_float(out[offset + c]);
  sum = detail::warp_sum(sum);
  if (threadIdx.x % 32 == 0) delta[row] = sum;
}

// dK, dV of a tile of keys, over the query tiles the causal mask lets see them.
template <typename T, int D>
__global__ void __launch_bounds__(32 * kWarps) backward_kv_kernel(const T* dout, const T* qkv, const float* lse,
                                                                  const float* delta, T* dqkv, int T_len, int C, int H,
                                                                  float scale_log2, float scale) {
  extern __shared__ __align__(16) unsigned char smem[];
  // The key tile's K and V, then two buffers of (Q, dO): the next query tile is copied while this one is used.
  Tile<T> ks{reinterpret_cast<T*>(smem), row_pitch<D>()};
  Tile<T> vs{ks.base + kRows * row_pitch<D>(), row_pitch<D>()};
  T* const buffers = vs.base + kRows * row_pitch<D>();  // buffer i: Q at 2 i, dO at 2 i + 1 (query tiles)
  const auto query_tile = [&](int i, int which) { return Tile<T>{buffers + (2 * i + which) * kQueryTile * row_pitch<D>(), row_pitch<D>()}; };
  // Then, per buffer, the query tile's log-sum-exps and deltas.
  float* const stats = reinterpret_cast<float*>(buffers + 4 * kQueryTile * row_pitch<D>());
  const auto lse_of = [&](int i) { return stats + 2 * i * kQueryTile; };
  const auto delta_of = [&](int i) { return stats + (2 * i + 1) * kQueryTile; };

  const int tile = gridDim.x - 1 - blockIdx.x;
  const int b = blockIdx.y / H, h = blockIdx.y % H, warp = threadIdx.x / 32;
  const int ld = 3 * C;
  const T* base = qkv + static_cast<std::int64_t>(b) * T_len * ld;
  const T* dbase = dout + static_cast<std::int64_t>(b) * T_len * C;
  const float* lse_h = lse + (static_cast<std::int64_t>(b) * H + h) * T_len;
  const float* delta_h = delta + (static_cast<std::int64_t>(b) * H + h) * T_len;
  const int k0 = tile * kRows, kw = k0 + 16 * warp;

  start_tile<T, D>(base, ld, T_len, k0, kRows, C + h * D, ks);
  start_tile<T, D>(base, ld, T_len, k0, kRows, 2 * C + h * D, vs);
  start_tile<T, D>(base, ld, T_len, k0, kQueryTile, h * D, query_tile(0, 0));
  start_tile<T, D>(dbase, C, T_len, k0, kQueryTile, h * D, query_tile(0, 1));
  start_stats(lse_h, T_len, k0, kQueryTile, lse_of(0));
  start_stats(delta_h, T_len, k0, kQueryTile, delta_of(0));
  commit();
  float dk[D / 8][4], dv[D / 8][4];
  clear<D / 8>(dk);
  clear<D / 8>(dv);
  int buffer = 0;
  for (int q0 = k0; q0 < T_len; q0 += kQueryTile, buffer ^= 1) {
    wait_for_copies();
    __syncthreads();
    if (q0 + kQueryTile < T_len) {
      start_tile<T, D>(base, ld, T_len, q0 + kQueryTile, kQueryTile, h * D, query_tile(buffer ^ 1, 0));
      start_tile<T, D>(dbase, C, T_len, q0 + kQueryTile, kQueryTile, h * D, query_tile(buffer ^ 1, 1));
      start_stats(lse_h, T_len, q0 + kQueryTile, kQueryTile, lse_of(buffer ^ 1));
      start_stats(delta_h, T_len, q0 + kQueryTile, kQueryTile, delta_of(buffer ^ 1));
    }
    commit();
    // The mask hides the whole tile from the warp's keys when they all come after its last query.
    if (kw >= T_len || kw > q0 + kQueryTile - 1) continue;
    const Tile<T> qs = query_tile(buffer, 0), dos = query_tile(buffer, 1);
    const float *lse_s = lse_of(buffer), *delta_s = delta_of(buffer);
    // S^T (16 keys x 32 queries) = K Q^T, then P^T; element by element masking only where a key
    // of the warp comes after a query of the tile, or the tile runs past the sequence.
    const bool masked = kw + 15 > q0 || q0 + kQueryTile > T_len;
    float p[kQueryTile / 8][4];
    clear<kQueryTile / 8>(p);
    multiply_rows<T, kQueryTile / 8, D>(ks, 16 * warp, qs, p);
#pragma unroll
    for (int n = 0; n < kQueryTile / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int qi = acc_col(n, e);
        p[n][e] = exp2f(p[n][e] * scale_log2 - lse_s[qi]);
      }
    if (masked) {
#pragma unroll
      for (int n = 0; n < kQueryTile / 8; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int key = kw + acc_row(e), query = q0 + acc_col(n, e);
          if (key > query || query >= T_len) p[n][e] = 0.f;
        }
    }
    // dV += P^T dO.
    multiply_accumulators<T, D / 8, kQueryTile>(p, dos, dv);
    // dP^T = V dO^T; dS^T = P^T (dP^T - delta).
    float ds[kQueryTile / 8][4];
    clear<kQueryTile / 8>(ds);
    multiply_rows<T, kQueryTile / 8, D>(vs, 16 * warp, dos, ds);
#pragma unroll
    for (int n = 0; n < kQueryTile / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) ds[n][e] = p[n][e] * (ds[n][e] - delta_s[acc_col(n, e)]);
    // dK += dS^T Q.
    multiply_accumulators<T, D / 8, kQueryTile>(ds, qs, dk);
  }
  T* dbase_out = dqkv + static_cast<std::int64_t>(b) * T_len * ld;
  store_rows<T, D>(dk, scale, dbase_out, ld, T_len, kw, C + h * D);
  store_rows<T, D>(dv, 1.f, dbase_out, ld, T_len, kw, 2 * C + h * D);
}

// dQ of a tile of queries, over the key tiles it sees.
template <typename T, int D>
__global__ void __launch_bounds__(32 * kWarps) backward_q_kernel(const T* dout, const T* qkv, const float* lse,
                                                                 const float* delta, T* dqkv, int T_len, int C, int H,
                                                                 float scale_log2, float scale) {
  extern __shared__ __align__(16) unsigned char smem[];
  // The query tile's Q and dO, then two buffers of (K, V): the next key tile is copied while this one is used.
  Tile<T> qs{reinterpret_cast<T*>(smem), row_pitch<D>()};
  Tile<T> dos{qs.base + kRows * row_pitch<D>(), row_pitch<D>()};
  T* const buffers = dos.base + kRows * row_pitch<D>();  // buffer i: K at 2 i, V at 2 i + 1 (key tiles)
  const auto key_tile = [&](int i, int which) { return Tile<T>{buffers + (2 * i + which) * kKeyTile * row_pitch<D>(), row_pitch<D>()}; };

  const int tile = gridDim.x - 1 - blockIdx.x;
  const int b = blockIdx.y / H, h = blockIdx.y % H, warp = threadIdx.x / 32;
  const int ld = 3 * C;
  const T* base = qkv + static_cast<std::int64_t>(b) * T_len * ld;
  const std::int64_t stats = (static_cast<std::int64_t>(b) * H + h) * T_len;
  const int q0 = tile * kRows, qw = q0 + 16 * warp;

  start_tile<T, D>(base, ld, T_len, q0, kRows, h * D, qs);
  start_tile<T, D>(dout + static_cast<std::int64_t>(b) * T_len * C, C, T_len, q0, kRows, h * D, dos);
  start_tile<T, D>(base, ld, T_len, 0, kKeyTile, C + h * D, key_tile(0, 0));
  start_tile<T, D>(base, ld, T_len, 0, kKeyTile, 2 * C + h * D, key_tile(0, 1));
  commit();
  float row_lse[2], row_delta[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int r = qw + acc_row(2 * i);
    row_lse[i] = r < T_len ? lse[stats + r] : 0.f;
    row_delta[i] = r < T_len ? delta[stats + r] : 0.f;
  }
  float dq[D / 8][4];
  clear<D / 8>(dq);
  const int last_key_tile = min((q0 + kRows - 1) / kKeyTile, (T_len - 1) / kKeyTile);
  for (int kt = 0; kt <= last_key_tile; ++kt) {
    wait_for_copies();
    __syncthreads();
    if (kt < last_key_tile) {
      start_tile<T, D>(base, ld, T_len, (kt + 1) * kKeyTile, kKeyTile, C + h * D, key_tile((kt + 1) % 2, 0));
      start_tile<T, D>(base, ld, T_len, (kt + 1) * kKeyTile, kKeyTile, 2 * C + h * D, key_tile((kt + 1) % 2, 1));
    }
    commit();
    if (qw >= T_len) continue;  // the warp's rows are all past the sequence's end
    const Tile<T> ks = key_tile(kt % 2, 0), vs = key_tile(kt % 2, 1);
    float p[kKeyTile / 8][4], ds[kKeyTile / 8][4];
    clear<kKeyTile / 8>(p);
    clear<kKeyTile / 8>(ds);
    multiply_rows<T, kKeyTile / 8, D>(qs, 16 * warp, ks, p);
    multiply_rows<T, kKeyTile / 8, D>(dos, 16 * warp, vs, ds);
#pragma unroll
    for (int n = 0; n < kKeyTile / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) p[n][e] = exp2f(p[n][e] * scale_log2 - row_lse[e / 2]);
    // Element by element only where the tile's last key is past the warp's first row, or the
    // tile or the warp's rows run past the sequence.
    if ((kt + 1) * kKeyTile - 1 > qw || (kt + 1) * kKeyTile > T_len || qw + 15 >= T_len) {
#pragma unroll
      for (int n = 0; n < kKeyTile / 8; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int key = kt * kKeyTile + acc_col(n, e), query = qw + acc_row(e);
          if (key > query || key >= T_len || query >= T_len) p[n][e] = 0.f;
        }
    }
#pragma unroll
    for (int n = 0; n < kKeyTile / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) ds[n][e] = p[n][e] * (ds[n][e] - row_delta[e / 2]);
    multiply_accumulators<T, D / 8, kKeyTile>(ds, ks, dq);
  }
  store_rows<T, D>(dq, scale, dqkv + static_cast<std::int64_t>(b) * T_len * ld, ld, T_len, qw, h * D);
}

template <int D> constexpr std::size_t forward_smem(std::size_t e) {
  return e * row_pitch<D>() * (kAttentionForwardRows + 4 * kKeyTile);
}
template <int D> constexpr std::size_t backward_kv_smem(std::size_t e) {
  return e * row_pitch<D>() * (2 * kRows + 4 * kQueryTile) + 4 * kQueryTile * sizeof(float);
}
template <int D> constexpr std::size_t backward_q_smem(std::size_t e) {
  return e * row_pitch<D>() * (2 * kRows + 4 * kKeyTile);
}

// Raises a kernel's dynamic shared-memory limit once (above 48 KiB needs the opt-in).
template <typename K> void allow_smem(K kernel, std::size_t bytes) {
  check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)),
        "cudaFuncSetAttribute(MaxDynamicSharedMemorySize)");
}

template <typename T, int D>
void forward_launch(const void* qkv, void* out, float* lse, int B, int T_len, int C, int H, AttentionKernels kernels) {
  if (kernels == AttentionKernels::wgmma) {
    detail::wgmma_attention_forward(Tensor16<T>::storage, qkv, out, lse, B, T_len, C, H);
    return;
  }
  const std::size_t smem = forward_smem<D>(sizeof(T));
  static const bool once = (allow_smem(forward_kernel<T, D>, smem), true);
  (void)once;
  const dim3 grid((T_len + kAttentionForwardRows - 1) / kAttentionForwardRows, B * H);
  const float scale_log2 = kLog2e / sqrtf(static_cast<float>(D));
  forward_kernel<T, D><<<grid, 32 * kForwardWarps, smem, detail::stream()>>>(static_cast<const T*>(qkv), static_cast<T*>(out),
                                                                     lse, T_len, C, H, scale_log2);
  check_launch("attention forward_kernel");
}

template <typename T, int D>
void backward_launch(const void* dout, const void* qkv, const void* out, const float* lse, float* delta, void* dqkv,
                     int B, int T_len, int C, int H, AttentionKernels kernels) {
  const std::int64_t rows = static_cast<std::int64_t>(B) * H * T_len;
  delta_kernel<T, D><<<static_cast<unsigned>((rows * 32 + 255) / 256), 256, 0, detail::stream()>>>(
      static_cast<const T*>(dout), static_cast<const T*>(out), delta, B, T_len, C, H);
  check_launch("attention delta_kernel");
  if (kernels == AttentionKernels::wgmma) {
    detail::wgmma_attention_backward(Tensor16<T>::storage, dout, qkv, lse, delta, dqkv, B, T_len, C, H);
    return;
  }
  const std::size_t kv_smem = backward_kv_smem<D>(sizeof(T)), q_smem = backward_q_smem<D>(sizeof(T));
  static const bool once =
      (allow_smem(backward_kv_kernel<T, D>, kv_smem), allow_smem(backward_q_kernel<T, D>, q_smem), true);
  (void)once;
  const dim3 grid((T_len + kRows - 1) / kRows, B * H);
  const float scale = 1.f / sqrtf(static_cast<float>(D)), scale_log2 = kLog2e * scale;
  backward_kv_kernel<T, D><<<grid, 32 * kWarps, kv_smem, detail::stream()>>>(
      static_cast<const T*>(dout), static_cast<const T*>(qkv), lse, delta, static_cast<T*>(dqkv), T_len, C, H,
      scale_log2, scale);
  check_launch("attention backward_kv_kernel");
  backward_q_kernel<T, D><<<grid, 32 * kWarps, q_smem, detail::stream()>>>(
      static_cast<const T*>(dout), static_cast<const T*>(qkv), lse, delta, static_cast<T*>(dqkv), T_len, C, H,
      scale_log2, scale);
  check_launch("attention backward_q_kernel");
}

// Calls f.template operator()<D>() for the head size D.
template <typename F> void with_head_size(int D, F&& f) {
  switch (D) {
    case 16: f(std::integral_constant<int, 16>{}); break;
    case 32: f(std::integral_constant<int, 32>{}); break;
    case 64: f(std::integral_constant<int, 64>{}); break;
    case 80: f(std::integral_constant<int, 80>{}); break;
    case 96: f(std::integral_constant<int, 96>{}); break;
    case 128: f(std::integral_constant<int, 128>{}); break;
    default: raise_error("fast attention: head size " + std::to_string(D) + " is not one of 16, 32, 64, 80, 96, 128");
  }
}

void check_sizes(int B, int T_len, int C, int H) {
  if (B < 1 || T_len < 1 || H < 1 || C % H != 0)
    raise_error("fast attention: B=" + std::to_string(B) + " T=" + std::to_string(T_len) + " C=" + std::to_string(C) +
                " H=" + std::to_string(H) + " (H must divide C)");
}

}  // namespace

AttentionKernels attention_kernels(int head_size) {
  // The device and the environment are the process's for its whole life: read once.
  // The current device's compute capability, read once per device (a process may select another
  // after its first question). No usable GPU (the host logic asks too, for the FLOP counts): 0,
  // the m16n8k16 kernels' answer.
  static std::array<std::atomic<int>, 64> known{};  // 0: not read yet, else capability + 1
  int device = 0, major = 0, minor = 0, compute_capability = 0;
  if (cudaGetDevice(&device) != cudaSuccess || device < 0) {
    (void)cudaGetLastError();
  } else if (device < static_cast<int>(known.size()) && known[static_cast<std::size_t>(device)].load() > 0) {
    compute_capability = known[static_cast<std::size_t>(device)].load() - 1;
  } else {
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess &&
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) == cudaSuccess)
      compute_capability = 10 * major + minor;
    else
      (void)cudaGetLastError();
    if (device < static_cast<int>(known.size())) known[static_cast<std::size_t>(device)].store(compute_capability + 1);
  }
  static const std::string asked = [] {
    const char* v = std::getenv("PARITY_FAST_ATTENTION");
    const std::string value = v ? v : "";
    if (!value.empty() && value != "auto" && value != "mma" && value != "wgmma")
      raise_error("PARITY_FAST_ATTENTION=" + value + " is not known (auto, mma, wgmma)");
    return value;
  }();
  const bool runs = compute_capability == 90 && (head_size == 64 || head_size == 128);
  if (asked == "wgmma" && !runs)
    raise_error("PARITY_FAST_ATTENTION=wgmma: the warpgroup kernels need compute capability 9.0 and head size 64 or 128 "
                "(this GPU: " + std::to_string(compute_capability / 10) + "." + std::to_string(compute_capability % 10) +
                ", head size " + std::to_string(head_size) + ")");
  return runs && asked != "mma" ? AttentionKernels::wgmma : AttentionKernels::mma;
}

void attention_forward(Storage s, const void* qkv, void* out, float* lse, int B, int T, int C, int H,
                       AttentionKernels kernels) {
  check_sizes(B, T, C, H);
  if (kernels == AttentionKernels::wgmma && attention_kernels(C / H) != AttentionKernels::wgmma)
    raise_error("fast attention: the warpgroup kernels do not run here (compute capability 9.0 and head size 64 or 128 "
                "needed, or PARITY_FAST_ATTENTION=mma is set)");
  detail::with_storage(s, [&](auto type) {
    using Type = decltype(type);
    with_head_size(C / H, [&](auto d) { forward_launch<Type, decltype(d)::value>(qkv, out, lse, B, T, C, H, kernels); });
  });
}

void attention_backward(Storage s, const void* dout, const void* qkv, const void* out, const float* lse, float* delta,
                        void* dqkv, int B, int T, int C, int H, AttentionKernels kernels) {
  check_sizes(B, T, C, H);
  if (kernels == AttentionKernels::wgmma && attention_kernels(C / H) != AttentionKernels::wgmma)
    raise_error("fast attention: the warpgroup kernels do not run here (compute capability 9.0 and head size 64 or 128 "
                "needed, or PARITY_FAST_ATTENTION=mma is set)");
  detail::with_storage(s, [&](auto type) {
    using Type = decltype(type);
    with_head_size(C / H, [&](auto d) {
      backward_launch<Type, decltype(d)::value>(dout, qkv, out, lse, delta, dqkv, B, T, C, H, kernels);
    });
  });
}

void attention_forward(Storage s, const void* qkv, void* out, float* lse, int B, int T, int C, int H) {
  check_sizes(B, T, C, H);
  attention_forward(s, qkv, out, lse, B, T, C, H, attention_kernels(C / H));
}

void attention_backward(Storage s, const void* dout, const void* qkv, const void* out, const float* lse, float* delta,
                        void* dqkv, int B, int T, int C, int H) {
  check_sizes(B, T, C, H);
  attention_backward(s, dout, qkv, out, lse, delta, dqkv, B, T, C, H, attention_kernels(C / H));
}

}  // namespace parity::fast
