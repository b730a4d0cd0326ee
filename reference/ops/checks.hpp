// The vocabulary of the ops' argument checks: each throws parity::Error reading
// "op: <tensor description> ...". Every op unit (reference/ops/units/) builds its one check,
// run before either device's body, from these.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>

#include "reference/ops/ops.hpp"
#include "reference/tensor/tensor.hpp"

namespace parity::ops {

[[noreturn]] void fail(const char* op, const std::string& message);
void require_defined(const char* op, const Tensor& t, const char* role);
void require_floating(const char* op, const Tensor& t);
// Where the op runs: the first tensor decides (ops.hpp), and every other allocated tensor must
// be in the same memory space (unallocated optional tensors are skipped).
void require_same_space(const char* op, std::initializer_list<const Tensor*> tensors);
void same_type(const char* op, const Tensor& a, const Tensor& b);
void same_shape(const char* op, const Tensor& a, const Tensor& b);
void require_shape(const char* op, const Tensor& t, const Shape& expected);
void require_index_type(const char* op, const Tensor& t);
// A vocabulary shard starting at class `first` whose dimension `class_dim` must fit inside a
// vocabulary of `vocabulary` classes (the vocabulary-parallel ops).
void require_vocabulary_shard(const char* op, const Tensor& shard, std::int64_t first, std::int64_t vocabulary,
                              int class_dim);
// A per-row statistic of logits [N, V]: [N], float64 for float64 logits, else float32.
void require_row_statistic(const char* op, const Tensor& logits, const Tensor& statistic);
// Rows of a tensor whose last dimension is the channels.
std::int64_t rows_of(const Tensor& t);
// A dimension as a BLAS int, refused beyond its range.
int blas_int(const char* op, std::int64_t v);

// A row map (ops.hpp's RowMap) between token rows [N, C] and assignment rows [A, C] of one
// floating type: its three int64 vectors must fit N and A.
struct RowMapSizes {
  std::int64_t N, A, C;
};
RowMapSizes check_row_map(const char* op, const RowMap& map, const Tensor& token_rows, const Tensor& assigned_rows);
// Gates (or their gradients) [A] in the rows' type.
void check_gates(const char* op, const Tensor& rows, const Tensor& gates, std::int64_t assignments);

}  // namespace parity::ops
