// Causal attention on Hopper's warpgroup products (wgmma, sm_90a): the same algorithm and
// layout of work as attention.cu's m16n8k16 kernels (FlashAttention-2's tiling, the scores
// never in memory, a deterministic backward in two kernels), with each product issued by a
// warpgroup of four warps over 64 rows at once instead of by each warp over 16: its operands
// come from shared memory through matrix descriptors (or, for the second product of a pair, the
// A operand from the first's accumulators in registers), so a tile in shared memory is read once
// per warpgroup rather than once per warp, and the tensor cores run at Hopper's full rate.
//
// Tiles are stored as the hardware's 128-byte swizzle wants them: a tile of R rows and D columns
// is D / 64 panels of 64 columns, each R rows of 128 bytes, the 16-byte chunk c of row r at chunk
// c ^ (r % 8); panels start at multiples of 1024 bytes. The same tile serves as an operand whose
// k index runs along the rows (K-major: scores from queries and keys) and as one whose k index
// runs down the rows (MN-major, read transposed: the weighted sum of values, and the gradients
// that sum over queries or keys).
//
// Head sizes 64 and 128, compute capability 9.0 (attention.cu chooses these kernels there; the
// m16n8k16 kernels elsewhere). The accumulators keep the m16n8k16 layout in each warp, so the
// softmax, masking and stores are attention.cu's (attention_tiles.cuh).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "reference/fast/attention_tiles.cuh"
#include "reference/fast/attention_wgmma.hpp"

namespace parity::fast::detail {
namespace {

using namespace attention;

constexpr int kGroupRows = kAttentionGroupRows;  // rows of a warpgroup's products (the m of every wgmma here)
constexpr int kForwardRows = 2 * kGroupRows;       // forward: two warpgroups a block
constexpr int kStep = kAttentionGroupStep;         // keys a step (forward, dQ), queries a step (dK/dV)
static_assert(kGroupRows == 64 && kStep == 64, "the products' shapes (m64, n64) and the A operands' k steps assume 64");

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define PARITY_WGMMA 1
#endif


// Starts copying rows [row0, row0 + rows) x columns [col0, col0 + D) of a [T_len, ld] matrix into
// the swizzled tile at shared address `tile`, with 16-byte asynchronous copies (rows past T_len as
// zeros); complete after commit(), wait_for_copies(), copies_visible_to_products() and a barrier.
template <typename T, int D>
__device__ void start_swizzled(const T* src, int ld, int T_len, int row0, int rows, int col0, uint32_t tile) {
  constexpr int kChunks = D / 8;  // 16-byte chunks a row
  for (int i = threadIdx.x; i < rows * kChunks; i += blockDim.x) {
    const int r = i / kChunks, c = i % kChunks;
    const bool inside = row0 + r < T_len;
    const T* from = src + static_cast<std::int64_t>(inside ? row0 + r : 0) * ld + col0 + 8 * c;
    const uint32_t to = tile + (c / 8) * rows * 128 + r * 128 + (((c % 8) ^ (r % 8)) << 4);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(to), "l"(from), "r"(inside ? 16 : 0));
  }
}

#ifdef PARITY_WGMMA
__device__ __forceinline__ uint32_t shared_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
// The products read shared memory through the async proxy: what the copies wrote must be made
// visible to it (each thread for its own copies, before the barrier).
__device__ __forceinline__ void copies_visible_to_products() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
__device__ __forceinline__ void products_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void products_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
// Waits until at most `pending` of the committed groups are still running (groups finish in order).
template <int pending = 0> __device__ __forceinline__ void products_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(pending) : "memory");
}
// After products_wait(): the accumulators (and the A operands given from registers) are the
// products' until then; these keep the compiler from reading or reusing them earlier.
template <int N> __device__ __forceinline__ void settle(float (*d)[4]) {
#pragma unroll
  for (int i = 0; i < N; ++i)
#pragma unroll
    for (int e = 0; e < 4; ++e) asm volatile("" : "+f"(d[i][e])::"memory");
}
template <int N> __device__ __forceinline__ void settle(uint32_t (*a)[4]) {
#pragma unroll
  for (int i = 0; i < N; ++i)
#pragma unroll
    for (int e = 0; e < 4; ++e) asm volatile("" : "+r"(a[i][e])::"memory");
}

// A matrix descriptor with the 128-byte swizzle: start address, leading and stride byte offsets.
__device__ __forceinline__ std::uint64_t descriptor(uint32_t address, uint32_t leading, uint32_t stride) {
  return static_cast<std::uint64_t>((address & 0x3FFFF) >> 4) | (static_cast<std::uint64_t>((leading & 0x3FFFF) >> 4) << 16) |
         (static_cast<std::uint64_t>((stride & 0x3FFFF) >> 4) << 32) | (std::uint64_t{1} << 62);
}
// K-major: rows r0 .. of a tile of `rows` rows (r0 a multiple of 8), k columns [16 j, 16 j + 16):
// 8-row groups 1024 bytes apart, the k step 32 bytes into the panel's swizzled rows.
__device__ __forceinline__ std::uint64_t k_major(uint32_t tile, int rows, int r0, int j) {
  return descriptor(tile + (j / 4) * rows * 128 + r0 * 128 + (j % 4) * 32, 16, 1024);
}
// MN-major (read transposed): k rows [16 j, 16 j + 16) of a tile of `rows` rows, every column:
// panels of 64 columns `rows` x 128 bytes apart (leading), 8-row groups 1024 bytes apart (stride).
__device__ __forceinline__ std::uint64_t mn_major(uint32_t tile, int rows, int j) {
  return descriptor(tile + j * 16 * 128, rows * 128, 1024);
}

// The products' operands: a warpgroup's accumulators d[N / 8][4] as asm outputs, and the asm's
// names for the first 32 and 64 of them.
#define PARITY_ACC(i) "+f"(d[i][0]), "+f"(d[i][1]), "+f"(d[i][2]), "+f"(d[i][3])
#define PARITY_ACC_N64 \
  PARITY_ACC(0), PARITY_ACC(1), PARITY_ACC(2), PARITY_ACC(3), PARITY_ACC(4), PARITY_ACC(5), PARITY_ACC(6), PARITY_ACC(7)
#define PARITY_ACC_N128                                                                                      \
  PARITY_ACC_N64, PARITY_ACC(8), PARITY_ACC(9), PARITY_ACC(10), PARITY_ACC(11), PARITY_ACC(12), PARITY_ACC(13), \
      PARITY_ACC(14), PARITY_ACC(15)
#define PARITY_D32                                                                                               \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, " \
  "%24, %25, %26, %27, %28, %29, %30, %31"
#define PARITY_D64                                                                                                  \
  PARITY_D32 ", %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, " \
             "%52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
// D[64 x 64] += A[64 x 16] B[16 x 64], A and B from shared memory by descriptor (TYPE, PTX: the
// storage type and its name in the instruction).
#define PARITY_WGMMA_SS_N64(TYPE, PTX)                                                                         \
  __device__ __forceinline__ void ss_n64(TYPE, float (*d)[4], std::uint64_t a, std::uint64_t b) {            \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"                                               \
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32." PTX "." PTX " {" PARITY_D32                  \
                 "}, %32, %33, p, 1, 1, 0, 0;\n}\n"                                                         \
                 : PARITY_ACC_N64                                                                            \
                 : "l"(a), "l"(b), "r"(1));                                                                  \
  }
// D[64 x N] += A[64 x 16] B[16 x N], A from registers (the m16n8k16 A layout per warp), B from shared
// memory by descriptor, stored with N contiguous (read transposed). DLIST and ACCS name the
// accumulators, A the A registers and the descriptor, P the predicate's operand.
#define PARITY_WGMMA_RS(N, DLIST, ACCS, A, P, TYPE, PTX)                                                     \
  __device__ __forceinline__ void rs_n##N##_transposed_b(TYPE, float (*d)[4], const std::uint32_t a[4],     \
                                                          std::uint64_t b) {                                \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" P ", 0;\n"                                           \
                 "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." PTX "." PTX " {" DLIST "}, " A           \
                 ", p, 1, 1, 1;\n}\n"                                                                       \
                 : ACCS                                                                                      \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));                              \
  }
#define PARITY_WGMMA_RS_N64(TYPE, PTX) \
  PARITY_WGMMA_RS(64, PARITY_D32, PARITY_ACC_N64, "{%32, %33, %34, %35}, %36", "37", TYPE, PTX)
#define PARITY_WGMMA_RS_N128(TYPE, PTX) \
  PARITY_WGMMA_RS(128, PARITY_D64, PARITY_ACC_N128, "{%64, %65, %66, %67}, %68", "69", TYPE, PTX)
PARITY_WGMMA_SS_N64(__nv_bfloat16, "bf16")
PARITY_WGMMA_SS_N64(__half, "f16")
PARITY_WGMMA_RS_N64(__nv_bfloat16, "bf16")
PARITY_WGMMA_RS_N64(__half, "f16")
PARITY_WGMMA_RS_N128(__nv_bfloat16, "bf16")
PARITY_WGMMA_RS_N128(__half, "f16")
#undef PARITY_WGMMA_SS_N64
#undef PARITY_WGMMA_RS_N64
#undef PARITY_WGMMA_RS_N128
#undef PARITY_WGMMA_RS
#undef PARITY_ACC
#undef PARITY_ACC_N64
#undef PARITY_ACC_N128
#undef PARITY_D32
#undef PARITY_D64

// acc[64 x N] += A[64 x K] B[K x N], A rows r0.. of K-major tile `a` and B = rows of K-major tile
// `b` (its column n is b's row n), K = D: issued, not waited for.
template <typename T, int D>
__device__ __forceinline__ void issue_rows(uint32_t a, int a_rows, int r0, uint32_t b, int b_rows, float (*acc)[4]) {
#pragma unroll
  for (int j = 0; j < D / 16; ++j) ss_n64(T{}, acc, k_major(a, a_rows, r0, j), k_major(b, b_rows, 0, j));
}
// acc[64 x D] += A (from registers: a[j] holds k columns [16 j, 16 j + 16)) times rows 0 .. 16 K
// of tile `b` read transposed: issued, not waited for.
template <typename T, int D, int K>
__device__ __forceinline__ void issue_transposed(uint32_t (*a)[4], uint32_t b, int b_rows, float (*acc)[4]) {
#pragma unroll
  for (int j = 0; j < K / 16; ++j) {
    if constexpr (D == 64)
      rs_n64_transposed_b(T{}, acc, a[j], mn_major(b, b_rows, j));
    else
      rs_n128_transposed_b(T{}, acc, a[j], mn_major(b, b_rows, j));
  }
}
// The backward's two score products on 64-row tiles, each its own commit group: p = A1 B1^T and
// dp = A2 B2^T (A: rows of a tile of 64 rows, B: the rows of a step's tile), issued and not
// waited for: products_wait<1>() has p, products_wait() both.
template <typename T, int D>
__device__ __forceinline__ void issue_score_pair(uint32_t a1, uint32_t b1, uint32_t a2, uint32_t b2, float (*p)[4],
                                                 float (*dp)[4]) {
  clear<kStep / 8>(p);
  clear<kStep / 8>(dp);
  settle<kStep / 8>(p);
  settle<kStep / 8>(dp);
  products_fence();
  issue_rows<T, D>(a1, kGroupRows, 0, b1, kStep, p);
  products_commit();
  issue_rows<T, D>(a2, kGroupRows, 0, b2, kStep, dp);
  products_commit();
}
template <typename T, int K> __device__ __forceinline__ void to_operands(const float (*acc)[4], uint32_t (*a)[4]) {
#pragma unroll
  for (int j = 0; j < K / 16; ++j) a_from_accumulators<T>(acc, j, a[j]);
}
// The 1024-byte-aligned start of the dynamic shared memory (its size asks for 1024 more).
__device__ __forceinline__ unsigned char* aligned_shared(unsigned char* raw) {
  return raw + ((1024u - (shared_address(raw) & 1023u)) & 1023u);
}
#endif  // PARITY_WGMMA

template <int D> __host__ __device__ constexpr int tile_bytes(int rows) { return rows * D * 2; }
template <int D> constexpr std::size_t forward_smem() { return 1024 + tile_bytes<D>(kForwardRows) + 4 * tile_bytes<D>(kStep); }
template <int D> constexpr std::size_t backward_kv_smem() {
  return 1024 + 2 * tile_bytes<D>(kGroupRows) + 4 * tile_bytes<D>(kStep) + 4 * kStep * sizeof(float);
}
template <int D> constexpr std::size_t backward_q_smem() { return 1024 + 2 * tile_bytes<D>(kGroupRows) + 4 * tile_bytes<D>(kStep); }

// Forward. Grid (query tiles of 128, B H), the last query tiles (the most keys) first; two
// warpgroups of 64 queries a block share each key tile. Two blocks a multiprocessor (128
// registers, no spills: measured 3% faster attention than one block of up to 255 on the H200).
template <typename T, int D>
__global__ void __launch_bounds__(256, 2) forward_kernel(const T* qkv, T* out, float* lse, int T_len, int C, int H,
                                                         float scale_log2) {
#ifdef PARITY_WGMMA
  extern __shared__ unsigned char smem_raw[];
  const uint32_t qs = shared_address(aligned_shared(smem_raw));
  const auto key_tile = [&](int buffer, int which) {
    return qs + tile_bytes<D>(kForwardRows) + (2 * buffer + which) * tile_bytes<D>(kStep);
  };
  const int tile = gridDim.x - 1 - blockIdx.x;
  const int b = blockIdx.y / H, h = blockIdx.y % H, group = threadIdx.x / 128, warp = (threadIdx.x / 32) % 4;
  const int ld = 3 * C;
  const T* base = qkv + static_cast<std::int64_t>(b) * T_len * ld;
  const int q0 = tile * kForwardRows, qg = q0 + kGroupRows * group, qw = qg + 16 * warp;

  start_swizzled<T, D>(base, ld, T_len, q0, kForwardRows, h * D, qs);
  start_swizzled<T, D>(base, ld, T_len, 0, kStep, C + h * D, key_tile(0, 0));
  start_swizzled<T, D>(base, ld, T_len, 0, kStep, 2 * C + h * D, key_tile(0, 1));
  commit();
  float o[D / 8][4];
  clear<D / 8>(o);
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
  const int last_key_tile = min((q0 + kForwardRows - 1) / kStep, (T_len - 1) / kStep);
  // The last key tile this warpgroup's rows see (-1: its rows are all past the sequence's end).
  const int group_last_tile = qg < T_len ? min(qg + kGroupRows - 1, T_len - 1) / kStep : -1;
  for (int kt = 0; kt <= last_key_tile; ++kt) {
    wait_for_copies();
    copies_visible_to_products();
    __syncthreads();  // this tile is in; every warpgroup is done with the buffers the next copy overwrites
    if (kt < last_key_tile) {
      start_swizzled<T, D>(base, ld, T_len, (kt + 1) * kStep, kStep, C + h * D, key_tile((kt + 1) % 2, 0));
      start_swizzled<T, D>(base, ld, T_len, (kt + 1) * kStep, kStep, 2 * C + h * D, key_tile((kt + 1) % 2, 1));
    }
    commit();
    if (kt > group_last_tile) continue;  // the mask hides this whole tile from the warpgroup's rows
    float s[kStep / 8][4];
    clear<kStep / 8>(s);
    settle<kStep / 8>(s);  // (settle after every register write a product reads: it keeps them before the fence)
    products_fence();
    issue_rows<T, D>(qs, kForwardRows, kGroupRows * group, key_tile(kt % 2, 0), kStep, s);
    products_commit();
    products_wait();
    settle<kStep / 8>(s);
    // Element by element only where the tile's last key is past the warp's first row or the sequence.
    if ((kt + 1) * kStep - 1 > qw || (kt + 1) * kStep > T_len) mask_later_keys<kStep / 8>(s, kt * kStep, qw, T_len);
    float alpha[2];
    online_softmax_step<kStep / 8>(s, scale_log2, m, l, alpha);
    scale_rows<D / 8>(o, alpha);
    uint32_t p[kStep / 16][4];
    to_operands<T, kStep>(s, p);
    settle<D / 8>(o);
    settle<kStep / 16>(p);
    products_fence();
    issue_transposed<T, D, kStep>(p, key_tile(kt % 2, 1), kStep, o);
    products_commit();
    products_wait();
    settle<D / 8>(o);
    settle<kStep / 16>(p);
  }
  finish_forward<T, D>(o, m, l, out + static_cast<std::int64_t>(b) * T_len * C, C,
                       lse + (static_cast<std::int64_t>(b) * H + h) * T_len, T_len, qw, h * D);
#else
  (void)qkv, (void)out, (void)lse, (void)T_len, (void)C, (void)H, (void)scale_log2;
  __trap();
#endif
}

// dK, dV of a tile of 64 keys (one warpgroup), over the query tiles of 64 from its first key on.
template <typename T, int D>
__global__ void __launch_bounds__(128) backward_kv_kernel(const T* dout, const T* qkv, const float* lse, const float* delta,
                                                          T* dqkv, int T_len, int C, int H, float scale_log2, float scale) {
#ifdef PARITY_WGMMA
  extern __shared__ unsigned char smem_raw[];
  unsigned char* const start = aligned_shared(smem_raw);
  const uint32_t ks = shared_address(start), vs = ks + tile_bytes<D>(kGroupRows);
  // Buffer i: Q at 2 i, dO at 2 i + 1; then, per buffer, the query tile's log-sum-exps and deltas.
  const auto query_tile = [&](int i, int which) { return ks + 2 * tile_bytes<D>(kGroupRows) + (2 * i + which) * tile_bytes<D>(kStep); };
  float* const stats = reinterpret_cast<float*>(start + 2 * tile_bytes<D>(kGroupRows) + 4 * tile_bytes<D>(kStep));
  const auto lse_of = [&](int i) { return stats + 2 * i * kStep; };
  const auto delta_of = [&](int i) { return stats + (2 * i + 1) * kStep; };

  const int tile = gridDim.x - 1 - blockIdx.x;
  const int b = blockIdx.y / H, h = blockIdx.y % H, warp = threadIdx.x / 32;
  const int ld = 3 * C;
  const T* base = qkv + static_cast<std::int64_t>(b) * T_len * ld;
  const T* dbase = dout + static_cast<std::int64_t>(b) * T_len * C;
  const float* lse_h = lse + (static_cast<std::int64_t>(b) * H + h) * T_len;
  const float* delta_h = delta + (static_cast<std::int64_t>(b) * H + h) * T_len;
  const int k0 = tile * kGroupRows, kw = k0 + 16 * warp;

  start_swizzled<T, D>(base, ld, T_len, k0, kGroupRows, C + h * D, ks);
  start_swizzled<T, D>(base, ld, T_len, k0, kGroupRows, 2 * C + h * D, vs);
  start_swizzled<T, D>(base, ld, T_len, k0, kStep, h * D, query_tile(0, 0));
  start_swizzled<T, D>(dbase, C, T_len, k0, kStep, h * D, query_tile(0, 1));
  start_stats(lse_h, T_len, k0, kStep, lse_of(0));
  start_stats(delta_h, T_len, k0, kStep, delta_of(0));
  commit();
  float dk[D / 8][4], dv[D / 8][4];
  clear<D / 8>(dk);
  clear<D / 8>(dv);
  int buffer = 0;
  for (int q0 = k0; q0 < T_len; q0 += kStep, buffer ^= 1) {
    wait_for_copies();
    copies_visible_to_products();
    __syncthreads();
    if (q0 + kStep < T_len) {
      start_swizzled<T, D>(base, ld, T_len, q0 + kStep, kStep, h * D, query_tile(buffer ^ 1, 0));
      start_swizzled<T, D>(dbase, C, T_len, q0 + kStep, kStep, h * D, query_tile(buffer ^ 1, 1));
      start_stats(lse_h, T_len, q0 + kStep, kStep, lse_of(buffer ^ 1));
      start_stats(delta_h, T_len, q0 + kStep, kStep, delta_of(buffer ^ 1));
    }
    commit();
    const uint32_t qs = query_tile(buffer, 0), dos = query_tile(buffer, 1);
    const float *lse_s = lse_of(buffer), *delta_s = delta_of(buffer);
    // S^T (64 keys x 64 queries) = K Q^T and dP^T = V dO^T, issued together; P^T is made from the
    // first while the second runs, dV += P^T dO issued, and dS^T = P^T (dP^T - delta) made while
    // that runs; then dK += dS^T Q.
    float p[kStep / 8][4], ds[kStep / 8][4];
    issue_score_pair<T, D>(ks, qs, vs, dos, p, ds);
    products_wait<1>();
    settle<kStep / 8>(p);
#pragma unroll
    for (int n = 0; n < kStep / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) p[n][e] = exp2f(p[n][e] * scale_log2 - lse_s[acc_col(n, e)]);
    // Element by element only where a key of the warp comes after a query of the tile, or the
    // tile runs past the sequence.
    if (kw + 15 > q0 || q0 + kStep > T_len) {
#pragma unroll
      for (int n = 0; n < kStep / 8; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int key = kw + acc_row(e), query = q0 + acc_col(n, e);
          if (key > query || query >= T_len) p[n][e] = 0.f;
        }
    }
    uint32_t pa[kStep / 16][4], dsa[kStep / 16][4];
    to_operands<T, kStep>(p, pa);
    settle<kStep / 16>(pa);
    products_fence();
    issue_transposed<T, D, kStep>(pa, dos, kStep, dv);
    products_commit();
    products_wait<1>();  // dP^T is in (dV may still run)
    settle<kStep / 8>(ds);
#pragma unroll
    for (int n = 0; n < kStep / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) ds[n][e] = p[n][e] * (ds[n][e] - delta_s[acc_col(n, e)]);
    to_operands<T, kStep>(ds, dsa);
    settle<kStep / 16>(dsa);
    products_fence();
    issue_transposed<T, D, kStep>(dsa, qs, kStep, dk);
    products_commit();
    products_wait();  // before the barrier that lets the next copies overwrite these tiles
    settle<D / 8>(dv);
    settle<D / 8>(dk);
    settle<kStep / 16>(pa);
    settle<kStep / 16>(dsa);
  }
  T* out = dqkv + static_cast<std::int64_t>(b) * T_len * ld;
  store_rows<T, D>(dk, scale, out, ld, T_len, kw, C + h * D);
  store_rows<T, D>(dv, 1.f, out, ld, T_len, kw, 2 * C + h * D);
#else
  (void)dout, (void)qkv, (void)lse, (void)delta, (void)dqkv, (void)T_len, (void)C, (void)H, (void)scale_log2, (void)scale;
  __trap();
#endif
}

// dQ of a tile of 64 queries (one warpgroup), over the key tiles of 64 it sees.
template <typename T, int D>
__global__ void __launch_bounds__(128) backward_q_kernel(const T* dout, const T* qkv, const float* lse, const float* delta,
                                                         T* dqkv, int T_len, int C, int H, float scale_log2, float scale) {
#ifdef PARITY_WGMMA
  extern __shared__ unsigned char smem_raw[];
  const uint32_t qs = shared_address(aligned_shared(smem_raw)), dos = qs + tile_bytes<D>(kGroupRows);
  // Buffer i: K at 2 i, V at 2 i + 1.
  const auto key_tile = [&](int i, int which) { return qs + 2 * tile_bytes<D>(kGroupRows) + (2 * i + which) * tile_bytes<D>(kStep); };
  const int tile = gridDim.x - 1 - blockIdx.x;
  const int b = blockIdx.y / H, h = blockIdx.y % H, warp = threadIdx.x / 32;
  const int ld = 3 * C;
  const T* base = qkv + static_cast<std::int64_t>(b) * T_len * ld;
  const std::int64_t stats = (static_cast<std::int64_t>(b) * H + h) * T_len;
  const int q0 = tile * kGroupRows, qw = q0 + 16 * warp;

  start_swizzled<T, D>(base, ld, T_len, q0, kGroupRows, h * D, qs);
  start_swizzled<T, D>(dout + static_cast<std::int64_t>(b) * T_len * C, C, T_len, q0, kGroupRows, h * D, dos);
  start_swizzled<T, D>(base, ld, T_len, 0, kStep, C + h * D, key_tile(0, 0));
  start_swizzled<T, D>(base, ld, T_len, 0, kStep, 2 * C + h * D, key_tile(0, 1));
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
  const int last_key_tile = min((q0 + kGroupRows - 1) / kStep, (T_len - 1) / kStep);
  for (int kt = 0; kt <= last_key_tile; ++kt) {
    wait_for_copies();
    copies_visible_to_products();
    __syncthreads();
    if (kt < last_key_tile) {
      start_swizzled<T, D>(base, ld, T_len, (kt + 1) * kStep, kStep, C + h * D, key_tile((kt + 1) % 2, 0));
      start_swizzled<T, D>(base, ld, T_len, (kt + 1) * kStep, kStep, 2 * C + h * D, key_tile((kt + 1) % 2, 1));
    }
    commit();
    const uint32_t ks = key_tile(kt % 2, 0), vs = key_tile(kt % 2, 1);
    // S = Q K^T and dP = dO V^T issued together; P made from the first while the second runs.
    float p[kStep / 8][4], ds[kStep / 8][4];
    issue_score_pair<T, D>(qs, ks, dos, vs, p, ds);
    products_wait<1>();
    settle<kStep / 8>(p);
#pragma unroll
    for (int n = 0; n < kStep / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) p[n][e] = exp2f(p[n][e] * scale_log2 - row_lse[e / 2]);
    // Element by element only where the tile's last key is past the warp's first row, or the
    // tile or the warp's rows run past the sequence.
    if ((kt + 1) * kStep - 1 > qw || (kt + 1) * kStep > T_len || qw + 15 >= T_len) {
#pragma unroll
      for (int n = 0; n < kStep / 8; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int key = kt * kStep + acc_col(n, e), query = qw + acc_row(e);
          if (key > query || key >= T_len || query >= T_len) p[n][e] = 0.f;
        }
    }
    products_wait();
    settle<kStep / 8>(ds);
#pragma unroll
    for (int n = 0; n < kStep / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) ds[n][e] = p[n][e] * (ds[n][e] - row_delta[e / 2]);
    uint32_t dsa[kStep / 16][4];
    to_operands<T, kStep>(ds, dsa);
    settle<kStep / 16>(dsa);
    products_fence();
    issue_transposed<T, D, kStep>(dsa, ks, kStep, dq);
    products_commit();
    products_wait();
    settle<D / 8>(dq);
    settle<kStep / 16>(dsa);
  }
  store_rows<T, D>(dq, scale, dqkv + static_cast<std::int64_t>(b) * T_len * ld, ld, T_len, qw, h * D);
#else
  (void)dout, (void)qkv, (void)lse, (void)delta, (void)dqkv, (void)T_len, (void)C, (void)H, (void)scale_log2, (void)scale;
  __trap();
#endif
}

template <typename K> void allow_smem(K kernel, std::size_t bytes) {
  check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)),
        "cudaFuncSetAttribute(MaxDynamicSharedMemorySize)");
}

template <typename F> void with_wgmma_head_size(int D, F&& f) {
  if (D == 64)
    f(std::integral_constant<int, 64>{});
  else if (D == 128)
    f(std::integral_constant<int, 128>{});
  else
    raise_error("fast attention: the warpgroup kernels take head sizes 64 and 128, not " + std::to_string(D));
}

}  // namespace

void wgmma_attention_forward(Storage s, const void* qkv, void* out, float* lse, int B, int T_len, int C, int H) {
  with_storage(s, [&](auto type) {
    using Type = decltype(type);
    with_wgmma_head_size(C / H, [&](auto d) {
      constexpr int D = decltype(d)::value;
      constexpr std::size_t smem = forward_smem<D>();
      static const bool once = (allow_smem(forward_kernel<Type, D>, smem), true);
      (void)once;
      const dim3 grid((T_len + kForwardRows - 1) / kForwardRows, B * H);
      const float scale_log2 = kLog2e / sqrtf(static_cast<float>(D));
      forward_kernel<Type, D><<<grid, 256, smem, stream()>>>(static_cast<const Type*>(qkv), static_cast<Type*>(out), lse,
                                                            T_len, C, H, scale_log2);
      check_launch("attention forward_kernel (wgmma)");
    });
  });
}

void wgmma_attention_backward(Storage s, const void* dout, const void* qkv, const float* lse, const float* delta,
                              void* dqkv, int B, int T_len, int C, int H) {
  with_storage(s, [&](auto type) {
    using Type = decltype(type);
    with_wgmma_head_size(C / H, [&](auto d) {
      constexpr int D = decltype(d)::value;
      constexpr std::size_t kv_smem = backward_kv_smem<D>(), q_smem = backward_q_smem<D>();
      static const bool once = (allow_smem(backward_kv_kernel<Type, D>, kv_smem), allow_smem(backward_q_kernel<Type, D>, q_smem), true);
      (void)once;
      const dim3 grid((T_len + kGroupRows - 1) / kGroupRows, B * H);
      const float scale = 1.f / sqrtf(static_cast<float>(D)), scale_log2 = kLog2e * scale;
      const auto* dout_t = static_cast<const Type*>(dout);
      const auto* qkv_t = static_cast<const Type*>(qkv);
      backward_kv_kernel<Type, D><<<grid, 128, kv_smem, stream()>>>(dout_t, qkv_t, lse, delta, static_cast<Type*>(dqkv), T_len,
                                                                   C, H, scale_log2, scale);
      check_launch("attention backward_kv_kernel (wgmma)");
      backward_q_kernel<Type, D><<<grid, 128, q_smem, stream()>>>(dout_t, qkv_t, lse, delta, static_cast<Type*>(dqkv), T_len,
                                                                  C, H, scale_log2, scale);
      check_launch("attention backward_q_kernel (wgmma)");
    });
  });
}

}  // namespace parity::fast::detail
