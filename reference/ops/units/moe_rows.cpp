// Mixture-of-experts row movement (ops.hpp: gather_rows_forward, gather_rows_backward,
// combine_rows_forward, combine_rows_backward) through a row map (ops.hpp's RowMap; which rows
// go where is decided by ops/routing.hpp). A sum over a token's assignments runs in the map's
// order on both devices, without atomics, so the results do not depend on thread timing.
#include "reference/ops/unit.hpp"

namespace parity::ops::device {
// y[a] = x[row_token[a]] for a < A.
void gather_rows(int dtype, const void* x, const std::int64_t* row_token, void* y, std::int64_t A, std::int64_t C);
// y[n] = sum over i in [offsets[n], offsets[n+1]) of (gates ? gates[a] : 1) rows[a], a = token_rows[i],
// in that order (gather_rows' backward without gates, the combine with them).
void sum_token_rows(int dtype, const void* rows, const void* gates, const std::int64_t* offsets,
                    const std::int64_t* token_rows, void* y, std::int64_t N, std::int64_t C);
// drows[a] = gates[a] dy[row_token[a]]; dgates[a] = dy[row_token[a]] . rows[a].
void combine_rows_backward(int dtype, const void* dy, const void* rows, const void* gates,
                           const std::int64_t* row_token, void* drows, void* dgates, std::int64_t A, std::int64_t C);
}  // namespace parity::ops::device

#ifndef __CUDACC__

namespace parity::ops {

namespace {
const std::int64_t* indices(const Tensor& t) { return static_cast<const std::int64_t*>(t.raw()); }
}  // namespace

void gather_rows_forward(const Tensor& x, const RowMap& map, Tensor& y) {
  const char* op = "gather_rows_forward";
  const RowMapSizes s = check_row_map(op, map, x, y);
  require_same_space(op, {&x, &y});
  if constexpr (kCudaBuilt) {
    if (on_device(x)) return device::gather_rows(code(x), x.raw(), indices(map.row_token), y.raw(), s.A, s.C);
  }
  const std::int64_t* token = map.row_token.data<std::int64_t>();
  visit_floating(op, x, [&](auto tag) {
    using T = decltype(tag);
    const T* in = x.data<T>();
    T* out = y.data<T>();
    for (std::int64_t a = 0; a < s.A; ++a) std::copy_n(in + token[a] * s.C, s.C, out + a * s.C);
  });
}

void gather_rows_backward(const Tensor& dy, const RowMap& map, Tensor& dx) {
  const char* op = "gather_rows_backward";
  const RowMapSizes s = check_row_map(op, map, dx, dy);
  require_same_space(op, {&dy, &dx});
  if constexpr (kCudaBuilt) {
    if (on_device(dy))
      return device::sum_token_rows(code(dy), dy.raw(), nullptr, indices(map.token_offsets), indices(map.token_rows),
                                    dx.raw(), s.N, s.C);
  }
  const std::int64_t* offsets = map.token_offsets.data<std::int64_t>();
  const std::int64_t* rows = map.token_rows.data<std::int64_t>();
  visit_floating(op, dy, [&](auto tag) {
    using T = decltype(tag);
    using C = Acc<T>;
    const T* g = dy.data<T>();
    T* out = dx.data<T>();
    // Each token's rows summed in order, element by element; float32 and float64 a row at a time
    // (vectorised, the same order).
    if constexpr (std::is_same_v<T, C>) {
      const auto width = static_cast<std::size_t>(s.C);
      for (std::int64_t n = 0; n < s.N; ++n) {
        std::fill(out + n * s.C, out + (n + 1) * s.C, C(0));
        for (std::int64_t i = offsets[n]; i < offsets[n + 1]; ++i) simd::accumulate_rows(g + rows[i] * s.C, 1, width, out + n * s.C);
      }
      return;
    }
    for (std::int64_t n = 0; n < s.N; ++n)
      for (std::int64_t c = 0; c < s.C; ++c) {
        C sum = 0;
        for (std::int64_t i = offsets[n]; i < offsets[n + 1]; ++i) sum += load(g[rows[i] * s.C + c]);
        out[n * s.C + c] = store<T>(sum);
      }
  });
}

void combine_rows_forward(const Tensor& rows, const Tensor& gates, const RowMap& map, Tensor& y) {
  const char* op = "combine_rows_forward";
  const RowMapSizes s = check_row_map(op, map, y, rows);
  check_gates(op, rows, gates, s.A);
  require_same_space(op, {&rows, &gates, &y});
  if constexpr (kCudaBuilt) {
    if (on_device(rows))
      return device::sum_token_rows(code(rows), rows.raw(), gates.raw(), indices(map.token_offsets),
                                    indices(map.token_rows), y.raw(), s.N, s.C);
  }
  const std::int64_t* offsets = map.token_offsets.data<std::int64_t>();
  const std::int64_t* assigned = map.token_rows.data<std::int64_t>();
  visit_floating(op, rows, [&](auto tag) {
    using T = decltype(tag);
    using C = Acc<T>;
    const T* in = rows.data<T>();
    const T* g = gates.data<T>();
    T* out = y.data<T>();
    // Each token's rows weighted by their gates and summed in order; float32 and float64 a row at
    // a time (vectorised).
    if constexpr (std::is_same_v<T, C>) {
      const auto width = static_cast<std::size_t>(s.C);
      for (std::int64_t n = 0; n < s.N; ++n) {
        std::fill(out + n * s.C, out + (n + 1) * s.C, C(0));
        for (std::int64_t i = offsets[n]; i < offsets[n + 1]; ++i)
          simd::add_scaled(out + n * s.C, in + assigned[i] * s.C, width, g[assigned[i]]);
      }
      return;
    }
    for (std::int64_t n = 0; n < s.N; ++n)
      for (std::int64_t c = 0; c < s.C; ++c) {
        C sum = 0;
        for (std::int64_t i = offsets[n]; i < offsets[n + 1]; ++i) {
          const std::int64_t a = assigned[i];
          sum += load(g[a]) * load(in[a * s.C + c]);
        }
        out[n * s.C + c] = store<T>(sum);
      }
  });
}

void combine_rows_backward(const Tensor& dy, const Tensor& rows, const Tensor& gates, const RowMap& map,
                           Tensor& drows, Tensor& dgates) {
  const char* op = "combine_rows_backward";
  const RowMapSizes s = check_row_map(op, map, dy, rows);
  check_gates(op, rows, gates, s.A);
  same_shape(op, rows, drows);
  check_gates(op, rows, dgates, s.A);
  require_same_space(op, {&dy, &rows, &gates, &drows, &dgates});
  if constexpr (kCudaBuilt) {
    if (on_device(dy))
      return device::combine_rows_backward(code(rows), dy.raw(), rows.raw(), gates.raw(), indices(map.row_token),
                                           drows.raw(), dgates.raw(), s.A, s.C);
  }
  const std::int64_t* token = map.row_token.data<std::int64_t>();
  visit_floating(op, rows, [&](auto tag) {
    using T = decltype(tag);
    using C = Acc<T>;
    const T* g = dy.data<T>();
    const T* in = rows.data<T>();
    const T* gate = gates.data<T>();
    T* dr = drows.data<T>();
    T* dg = dgates.data<T>();
    if constexpr (std::is_same_v<T, C>) {  // float32 and float64: vectorised, the dot in the blocked order
      const auto width = static_cast<std::size_t>(s.C);
      for (std::int64_t a = 0; a < s.A; ++a) {
        const T* gy = g + token[a] * s.C;
        dg[a] = simd::row_dot(gy, in + a * s.C, width);
        std::fill(dr + a * s.C, dr + (a + 1) * s.C, C(0));
        simd::add_scaled(dr + a * s.C, gy, width, gate[a]);
      }
      return;
    }
    for (std::int64_t a = 0; a < s.A; ++a) {
      const T* gy = g + token[a] * s.C;
      const C w = load(gate[a]);
      C dot = 0;
      for (std::int64_t c = 0; c < s.C; ++c) {
        dot += load(gy[c]) * load(in[a * s.C + c]);
        dr[a * s.C + c] = store<T>(w * load(gy[c]));
      }
      dg[a] = store<T>(dot);
    }
  });
}

}  // namespace parity::ops

#else  // the device part

namespace parity::ops::device {
namespace {

template <typename T> __global__ void gather_rows_kernel(const T* x, const int64_t* row_token, T* y, int64_t A, int64_t C) {
  PARITY_GRID_STRIDE(e, A * C) y[e] = x[row_token[e / C] * C + e % C];
}

// One thread per (token, channel), summing the token's assignments in list order: deterministic.
template <typename T>
__global__ void sum_token_rows_kernel(const T* rows, const T* gates, const int64_t* offsets, const int64_t* token_rows,
                                      T* y, int64_t N, int64_t C) {
  using A = Acc<T>;
  PARITY_GRID_STRIDE(e, N * C) {
    const int64_t n = e / C, c = e % C;
    A sum = 0;
    for (int64_t i = offsets[n]; i < offsets[n + 1]; ++i) {
      const int64_t a = token_rows[i];
      sum += (gates != nullptr ? load(gates[a]) : A(1)) * load(rows[a * C + c]);
    }
    store(y[e], sum);
  }
}

// One thread per assignment: its gate's gradient (a dot product over C) and its row's.
template <typename T>
__global__ void combine_rows_backward_kernel(const T* dy, const T* rows, const T* gates, const int64_t* row_token,
                                             T* drows, T* dgates, int64_t A_, int64_t C) {
  using A = Acc<T>;
  PARITY_GRID_STRIDE(a, A_) {
    const T* g = dy + row_token[a] * C;
    const A w = load(gates[a]);
    A dot = 0;
    for (int64_t c = 0; c < C; ++c) {
      dot += load(g[c]) * load(rows[a * C + c]);
      store(drows[a * C + c], w * load(g[c]));
    }
    store(dgates[a], dot);
  }
}

}  // namespace

void gather_rows(int dtype, const void* x, const int64_t* row_token, void* y, int64_t A, int64_t C) {
  visit_floating(dtype, "gather_rows", [&](auto tag) {
    using T = decltype(tag);
    gather_rows_kernel<T><<<blocks_for(A * C), kThreads, 0, stream()>>>(static_cast<const T*>(x), row_token,
                                                                       static_cast<T*>(y), A, C);
  });
  check_launch("gather_rows_kernel");
}

void sum_token_rows(int dtype, const void* rows, const void* gates, const int64_t* offsets, const int64_t* token_rows,
                    void* y, int64_t N, int64_t C) {
  visit_floating(dtype, "sum_token_rows", [&](auto tag) {
    using T = decltype(tag);
    sum_token_rows_kernel<T><<<blocks_for(N * C), kThreads, 0, stream()>>>(
        static_cast<const T*>(rows), static_cast<const T*>(gates), offsets, token_rows, static_cast<T*>(y), N, C);
  });
  check_launch("sum_token_rows_kernel");
}

void combine_rows_backward(int dtype, const void* dy, const void* rows, const void* gates, const int64_t* row_token,
                           void* drows, void* dgates, int64_t A, int64_t C) {
  visit_floating(dtype, "combine_rows_backward", [&](auto tag) {
    using T = decltype(tag);
    combine_rows_backward_kernel<T><<<blocks_for(A), kThreads, 0, stream()>>>(
        static_cast<const T*>(dy), static_cast<const T*>(rows), static_cast<const T*>(gates), row_token,
        static_cast<T*>(drows), static_cast<T*>(dgates), A, C);
  });
  check_launch("combine_rows_backward_kernel");
}

}  // namespace parity::ops::device

#endif
