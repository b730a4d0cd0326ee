// Token and position embeddings (ops.hpp: embedding_forward, embedding_backward) and their
// vocabulary-parallel forms, where a shard holds rows [first, first + V_shard) of the table
// (embedding_shard_forward, embedding_shard_backward).
#include "reference/ops/unit.hpp"

namespace parity::ops::device {
// y[b, t, :] = wte[tokens[b, t], :] (+ wpe[t, :] when wpe is not null).
void embedding_forward(int dtype, const void* tokens, int index_dtype, const void* wte, const void* wpe, void* y,
                       std::int64_t B, std::int64_t T, std::int64_t C);
// dwte[tokens[b, t], :] += dy[b, t, :] (rows in order, no atomics; for 16-bit types through
// wte_scratch, V*C float32 values, so each element is rounded once); dwpe[t, :] += sum over b of
// dy[b, t, :] when dwpe is not null.
void embedding_backward(int dtype, const void* dy, const void* tokens, int index_dtype, void* dwte, void* dwpe,
                        float* wte_scratch, std::int64_t B, std::int64_t T, std::int64_t C, std::int64_t V);
// y[row] = wte_shard[tokens[row] - first] or zeros outside [first, first + shard_rows);
// dwte_shard[tokens - first] += dy (rows in order; 16-bit types through wte_scratch as above).
void embedding_shard_forward(int dtype, const void* tokens, int index_dtype, const void* wte_shard, void* y,
                             std::int64_t rows, std::int64_t C, std::int64_t first, std::int64_t shard_rows);
void embedding_shard_backward(int dtype, const void* dy, const void* tokens, int index_dtype, void* dwte_shard,
                              float* wte_scratch, std::int64_t rows, std::int64_t C, std::int64_t first,
                              std::int64_t shard_rows);
}  // namespace parity::ops::device

#ifndef __CUDACC__

namespace parity::ops {

namespace {
struct EmbeddingSizes {
  std::int64_t B, T, C, V;
};
// tokens [B, T], the table wte [V, C] (or its gradient), wpe [T_max >= T, C] when defined, and
// the rows [B, T, C] looked up (y, or their gradient dy) in the table's type. Token ids must lie
// in [0, vocabulary) (the table's rows when vocabulary is 0).
EmbeddingSizes embedding_sizes(const char* op, const Tensor& tokens, const Tensor& wte, const Tensor& wpe,
                               const Tensor& rows, std::int64_t vocabulary = 0) {
  require_index_type(op, tokens);
  require_defined(op, wte, "wte");
  if (tokens.rank() != 2) fail(op, "tokens " + tokens.describe() + " must be [B, T]");
  if (wte.rank() != 2) fail(op, "token embedding " + wte.describe() + " must be [V, C]");
  const EmbeddingSizes s{tokens.dim(0), tokens.dim(1), wte.dim(1), wte.dim(0)};
  if (wpe.defined()) {
    same_type(op, wte, wpe);
    if (wpe.rank() != 2 || wpe.dim(1) != s.C || wpe.dim(0) < s.T)
      fail(op, "position embedding " + wpe.describe() + " must be [T_max >= " + std::to_string(s.T) + ", " +
                   std::to_string(s.C) + "]");
  }
  require_floating(op, wte);
  same_type(op, wte, rows);
  require_shape(op, rows, {s.B, s.T, s.C});
  const IndexOutside bad = first_index_outside(tokens, vocabulary > 0 ? vocabulary : s.V);
  if (bad.position >= 0)
    fail(op, "token " + std::to_string(bad.value) + " at position " + std::to_string(bad.position) + " of " +
                 tokens.describe() + " is outside the vocabulary of " +
                 (vocabulary > 0 ? std::to_string(vocabulary) : wte.describe()));
  return s;
}

// A float32 copy of a 16-bit table's gradient on the device, for its sums to round once.
Tensor wide_gradient_scratch(const Tensor& table_gradient) {
  if (!is_half(table_gradient.dtype())) return Tensor();
  return device_scratch(table_gradient.name() + ".float32", table_gradient.shape(), DataType::float32);
}
float* float_data(const Tensor& t) { return t.defined() ? static_cast<float*>(t.raw()) : nullptr; }
}  // namespace

void embedding_forward(const Tensor& tokens, const Tensor& wte, const Tensor& wpe, Tensor& y) {
  const char* op = "embedding_forward";
  require_same_space(op, {&tokens, &wte, &wpe, &y});
  const EmbeddingSizes s = embedding_sizes(op, tokens, wte, wpe, y);
  if constexpr (kCudaBuilt) {
    if (on_device(tokens))
      return device::embedding_forward(code(wte), tokens.raw(), code(tokens), wte.raw(),
                                       wpe.defined() ? wpe.raw() : nullptr, y.raw(), s.B, s.T, s.C);
  }
  visit_floating(op, wte, [&](auto tag) {
    using T = decltype(tag);
    const T* e = wte.data<T>();
    const T* pos = wpe.defined() ? wpe.data<T>() : nullptr;
    T* out = y.data<T>();
    for (std::int64_t b = 0; b < s.B; ++b)
      for (std::int64_t t = 0; t < s.T; ++t) {
        const std::int64_t row = b * s.T + t;
        const T* er = e + index_at(tokens, row) * s.C;
        for (std::int64_t c = 0; c < s.C; ++c)
          out[row * s.C + c] = pos ? store<T>(load(er[c]) + load(pos[t * s.C + c])) : er[c];
      }
  });
}

void embedding_backward(const Tensor& dy, const Tensor& tokens, Tensor& dwte, Tensor& dwpe) {
  const char* op = "embedding_backward";
  require_same_space(op, {&dy, &tokens, &dwte, &dwpe});
  const EmbeddingSizes s = embedding_sizes(op, tokens, dwte, dwpe, dy);
  if constexpr (kCudaBuilt) {
    if (on_device(dy)) {
      const Tensor wide = wide_gradient_scratch(dwte);
      return device::embedding_backward(code(dy), dy.raw(), tokens.raw(), code(tokens), dwte.raw(),
                                        dwpe.defined() ? dwpe.raw() : nullptr, float_data(wide), s.B, s.T, s.C, s.V);
    }
  }
  visit_floating(op, dy, [&](auto tag) {
    using T = decltype(tag);
    const T* g = dy.data<T>();
    T* de = dwte.data<T>();
    T* dp = dwpe.defined() ? dwpe.data<T>() : nullptr;
    for (std::int64_t b = 0; b < s.B; ++b)
      for (std::int64_t t = 0; t < s.T; ++t) {
        const std::int64_t row = b * s.T + t;
        T* er = de + index_at(tokens, row) * s.C;
        for (std::int64_t c = 0; c < s.C; ++c) {
          er[c] = store<T>(load(er[c]) + load(g[row * s.C + c]));
          if (dp) dp[t * s.C + c] = store<T>(load(dp[t * s.C + c]) + load(g[row * s.C + c]));
        }
      }
  });
}

void embedding_shard_forward(const Tensor& tokens, const Tensor& wte_shard, std::int64_t first_token,
                             std::int64_t vocabulary, Tensor& y) {
  const char* op = "embedding_shard_forward";
  require_same_space(op, {&tokens, &wte_shard, &y});
  const EmbeddingSizes s = embedding_sizes(op, tokens, wte_shard, Tensor(), y, vocabulary);
  require_vocabulary_shard(op, wte_shard, first_token, vocabulary, 0);
  if constexpr (kCudaBuilt) {
    if (on_device(tokens))
      return device::embedding_shard_forward(code(wte_shard), tokens.raw(), code(tokens), wte_shard.raw(), y.raw(),
                                             s.B * s.T, s.C, first_token, s.V);
  }
  visit_floating(op, wte_shard, [&](auto tag) {
    using T = decltype(tag);
    const T* e = wte_shard.data<T>();
    T* out = y.data<T>();
    for (std::int64_t row = 0; row < s.B * s.T; ++row) {
      const std::int64_t id = index_at(tokens, row) - first_token;
      for (std::int64_t c = 0; c < s.C; ++c) out[row * s.C + c] = id >= 0 && id < s.V ? e[id * s.C + c] : T{};
    }
  });
}

void embedding_shard_backward(const Tensor& dy, const Tensor& tokens, std::int64_t first_token, Tensor& dwte_shard) {
  const char* op = "embedding_shard_backward";
  require_same_space(op, {&dy, &tokens, &dwte_shard});
  require_index_type(op, tokens);
  require_defined(op, dwte_shard, "dwte_shard");
  if (tokens.rank() != 2 || dwte_shard.rank() != 2)
    fail(op, "tokens " + tokens.describe() + " must be [B, T] and " + dwte_shard.describe() + " [V_shard, C]");
  same_type(op, dwte_shard, dy);
  require_floating(op, dy);
  const std::int64_t v = dwte_shard.dim(0), c = dwte_shard.dim(1), rows = tokens.numel();
  require_shape(op, dy, {tokens.dim(0), tokens.dim(1), c});
  if constexpr (kCudaBuilt) {
    if (on_device(dy)) {
      const Tensor wide = wide_gradient_scratch(dwte_shard);
      return device::embedding_shard_backward(code(dy), dy.raw(), tokens.raw(), code(tokens), dwte_shard.raw(),
                                              float_data(wide), rows, c, first_token, v);
    }
  }
  visit_floating(op, dy, [&](auto tag) {
    using T = decltype(tag);
    const T* g = dy.data<T>();
    T* de = dwte_shard.data<T>();
    for (std::int64_t row = 0; row < rows; ++row) {
      const std::int64_t id = index_at(tokens, row) - first_token;
      if (id < 0 || id >= v) continue;
      for (std::int64_t k = 0; k < c; ++k) de[id * c + k] = store<T>(load(de[id * c + k]) + load(g[row * c + k]));
    }
  });
}

}  // namespace parity::ops

#else  // the device part

#include <type_traits>

namespace parity::ops::device {
namespace {

template <typename T, typename I>
__global__ void embedding_forward_kernel(const I* tokens, const T* wte, const T* wpe, T* y, int64_t rows, int64_t T_,
                                         int64_t C) {
  PARITY_GRID_STRIDE(e, rows * C) {
    const int64_t row = e / C, c = e % C;
    const T value = wte[static_cast<int64_t>(tokens[row]) * C + c];
    if (wpe != nullptr)
      store(y[e], load(value) + load(wpe[(row % T_) * C + c]));
    else
      y[e] = value;
  }
}

// dwte += scratch, rounding each element once (16-bit types).
template <typename T> __global__ void add_float_scratch_kernel(T* dwte, const float* scratch, int64_t n) {
  PARITY_GRID_STRIDE(i, n) store(dwte[i], load(dwte[i]) + scratch[i]);
}

// dwpe[t, c] += sum over b of dy[b, t, c]: one thread per (t, c), no atomics.
template <typename T> __global__ void position_gradient_kernel(const T* dy, T* dwpe, int64_t B, int64_t T_, int64_t C) {
  using A = Acc<T>;
  PARITY_GRID_STRIDE(e, T_ * C) {
    A s = 0;
    for (int64_t b = 0; b < B; ++b) s += load(dy[b * T_ * C + e]);
    store(dwpe[e], load(dwpe[e]) + s);
  }
}

// Vocabulary shards: ids outside [first, first + shard_rows) give zero rows and no gradient.
template <typename T, typename I>
__global__ void embedding_shard_forward_kernel(const I* tokens, const T* wte, T* y, int64_t rows, int64_t C,
                                               int64_t first, int64_t shard_rows) {
  PARITY_GRID_STRIDE(e, rows * C) {
    const int64_t row = e / C, c = e % C;
    const int64_t id = static_cast<int64_t>(tokens[row]) - first;
    y[e] = id >= 0 && id < shard_rows ? wte[id * C + c] : T{};
  }
}

// Adds dy's rows into the table rows of their tokens, those in [first, first + table_rows)
// (the type of `target` is T, or float for 16-bit T). One thread per column walks the rows in
// order, so every element of the table is summed in the same order on every run (atomic adds
// would not be: a step recomputed under activation checkpointing must repeat bit for bit).
template <typename T, typename A, typename I>
__global__ void embedding_scatter_kernel(const T* dy, const I* tokens, A* target, int64_t rows, int64_t C,
                                         int64_t first, int64_t table_rows) {
  PARITY_GRID_STRIDE(c, C) {
    for (int64_t row = 0; row < rows; ++row) {
      const int64_t id = static_cast<int64_t>(tokens[row]) - first;
      if (id >= 0 && id < table_rows) target[id * C + c] += static_cast<A>(load(dy[row * C + c]));
    }
  }
}

// dtable[tokens - first] += dy[row] (embedding_scatter_kernel): directly for float32/float64;
// for 16-bit tables into the zeroed float32 scratch, then added to the table, so each element
// is rounded once.
template <typename F, typename I>
void scatter_into_table(const char* op, const void* dy, const void* tokens, void* table, float* scratch, int64_t rows,
                        int64_t C, int64_t first, int64_t table_rows) {
  const unsigned blocks = blocks_for(C);
  if constexpr (std::is_same<F, Acc<F>>::value) {
    embedding_scatter_kernel<F, F, I><<<blocks, kThreads, 0, stream()>>>(
        static_cast<const F*>(dy), static_cast<const I*>(tokens), static_cast<F*>(table), rows, C, first, table_rows);
    check_launch("embedding_scatter_kernel");
  } else {
    if (scratch == nullptr) raise_error(std::string(op) + ": 16-bit types need the float32 scratch");
    check(cudaMemsetAsync(scratch, 0, static_cast<std::size_t>(table_rows * C) * sizeof(float), stream()),
          "cudaMemsetAsync");
    embedding_scatter_kernel<F, float, I><<<blocks, kThreads, 0, stream()>>>(
        static_cast<const F*>(dy), static_cast<const I*>(tokens), scratch, rows, C, first, table_rows);
    check_launch("embedding_scatter_kernel");
    add_float_scratch_kernel<F><<<blocks_for(table_rows * C), kThreads, 0, stream()>>>(static_cast<F*>(table), scratch,
                                                                                       table_rows * C);
    check_launch("add_float_scratch_kernel");
  }
}

}  // namespace

void embedding_forward(int dtype, const void* tokens, int index_dtype, const void* wte, const void* wpe, void* y,
                       int64_t B, int64_t T, int64_t C) {
  visit_floating(dtype, "embedding_forward", [&](auto tag) {
    using F = decltype(tag);
    visit_index(index_dtype, "embedding_forward", [&](auto index_tag) {
      using I = decltype(index_tag);
      embedding_forward_kernel<F, I><<<blocks_for(B * T * C), kThreads, 0, stream()>>>(
          static_cast<const I*>(tokens), static_cast<const F*>(wte), static_cast<const F*>(wpe), static_cast<F*>(y),
          B * T, T, C);
    });
  });
  check_launch("embedding_forward_kernel");
}

void embedding_backward(int dtype, const void* dy, const void* tokens, int index_dtype, void* dwte, void* dwpe,
                        float* wte_scratch, int64_t B, int64_t T, int64_t C, int64_t V) {
  visit_floating(dtype, "embedding_backward", [&](auto tag) {
    using F = decltype(tag);
    visit_index(index_dtype, "embedding_backward", [&](auto index_tag) {
      scatter_into_table<F, decltype(index_tag)>("embedding_backward", dy, tokens, dwte, wte_scratch, B * T, C, 0, V);
    });
    if (dwpe != nullptr) {
      position_gradient_kernel<F><<<blocks_for(T * C), kThreads, 0, stream()>>>(static_cast<const F*>(dy),
                                                                               static_cast<F*>(dwpe), B, T, C);
      check_launch("position_gradient_kernel");
    }
  });
}

void embedding_shard_forward(int dtype, const void* tokens, int index_dtype, const void* wte_shard, void* y,
                             int64_t rows, int64_t C, int64_t first, int64_t shard_rows) {
  visit_floating(dtype, "embedding_shard_forward", [&](auto tag) {
    using F = decltype(tag);
    visit_index(index_dtype, "embedding_shard_forward", [&](auto index_tag) {
      using I = decltype(index_tag);
      embedding_shard_forward_kernel<F, I><<<blocks_for(rows * C), kThreads, 0, stream()>>>(
          static_cast<const I*>(tokens), static_cast<const F*>(wte_shard), static_cast<F*>(y), rows, C, first,
          shard_rows);
    });
  });
  check_launch("embedding_shard_forward_kernel");
}

void embedding_shard_backward(int dtype, const void* dy, const void* tokens, int index_dtype, void* dwte_shard,
                              float* wte_scratch, int64_t rows, int64_t C, int64_t first, int64_t shard_rows) {
  visit_floating(dtype, "embedding_shard_backward", [&](auto tag) {
    using F = decltype(tag);
    visit_index(index_dtype, "embedding_shard_backward", [&](auto index_tag) {
      scatter_into_table<F, decltype(index_tag)>("embedding_shard_backward", dy, tokens, dwte_shard, wte_scratch, rows, C,
                                                 first, shard_rows);
    });
  });
}

}  // namespace parity::ops::device

#endif
