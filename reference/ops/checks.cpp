// The vocabulary of the ops' argument checks (see checks.hpp).
#include "reference/ops/checks.hpp"

#include <limits>

#include "reference/core/error.hpp"

namespace parity::ops {

void fail(const char* op, const std::string& message) { throw Error(std::string(op) + ": " + message); }

void require_defined(const char* op, const Tensor& t, const char* role) {
  if (!t.defined()) fail(op, std::string(role) + " tensor is not allocated");
}

void require_floating(const char* op, const Tensor& t) {
  require_defined(op, t, "input");
  if (!is_floating(t.dtype())) fail(op, t.describe() + ": needs a floating-point tensor");
}

void require_same_space(const char* op, std::initializer_list<const Tensor*> tensors) {
  const MemorySpace space = (*tensors.begin())->space();
  for (const Tensor* t : tensors) {
    if (!t->defined() || t->space() == space) continue;
    if (space == MemorySpace::cuda)
      fail(op, t->describe() + " is in host memory; the CUDA op needs every tensor on the device " +
                   "(Tensor::to(MemorySpace::cuda, ...))");
    fail(op, t->describe() + " is in device memory; the CPU op needs every tensor in host memory " +
                 "(Tensor::to(MemorySpace::host, ...))");
  }
}

void same_type(const char* op, const Tensor& a, const Tensor& b) {
  require_defined(op, b, "second");
  if (a.dtype() != b.dtype()) fail(op, a.describe() + " and " + b.describe() + " have different data types");
}

void same_shape(const char* op, const Tensor& a, const Tensor& b) {
  same_type(op, a, b);
  if (a.shape() != b.shape()) fail(op, a.describe() + " and " + b.describe() + " have different shapes");
}

void require_shape(const char* op, const Tensor& t, const Shape& expected) {
  if (!t.defined())
    fail(op, "a tensor of shape " + to_string(expected) + " is needed but not allocated (" + t.describe() + ")");
  if (t.shape() != expected) fail(op, t.describe() + " should have shape " + to_string(expected));
}

void require_index_type(const char* op, const Tensor& t) {
  require_defined(op, t, "index");
  if (t.dtype() != DataType::int32 && t.dtype() != DataType::int64)
    fail(op, t.describe() + ": indices must be int32 or int64");
}

void require_vocabulary_shard(const char* op, const Tensor& shard, std::int64_t first, std::int64_t vocabulary,
                              int class_dim) {
  if (first < 0 || first + shard.dim(class_dim) > vocabulary)
    fail(op, shard.describe() + " starting at class " + std::to_string(first) + " does not fit a vocabulary of " +
                 std::to_string(vocabulary));
}

void require_row_statistic(const char* op, const Tensor& logits, const Tensor& statistic) {
  const DataType want = logits.dtype() == DataType::float64 ? DataType::float64 : DataType::float32;
  require_defined(op, statistic, "statistic");
  if (statistic.dtype() != want)
    fail(op, "statistics " + statistic.describe() + " must be " + std::string(name_of(want)) + " for " + logits.describe());
  require_shape(op, statistic, {logits.dim(0)});
}

std::int64_t rows_of(const Tensor& t) { return t.numel() / t.dim(-1); }

int blas_int(const char* op, std::int64_t v) {
  if (v > std::numeric_limits<int>::max()) fail(op, "dimension " + std::to_string(v) + " exceeds the BLAS integer range");
  return static_cast<int>(v);
}

RowMapSizes check_row_map(const char* op, const RowMap& map, const Tensor& token_rows, const Tensor& assigned_rows) {
  require_defined(op, token_rows, "token rows");
  require_defined(op, assigned_rows, "assignment rows");
  same_type(op, token_rows, assigned_rows);
  require_floating(op, token_rows);
  for (const Tensor* t : {&map.row_token, &map.token_offsets, &map.token_rows}) {
    require_defined(op, *t, "row map");
    if (t->dtype() != DataType::int64 || t->rank() != 1) fail(op, "row map " + t->describe() + " must be int64 [.]");
    if (t->space() != token_rows.space())
      fail(op, "row map " + t->describe() + " is not in the rows' memory space");
  }
  const std::int64_t C = token_rows.dim(-1), N = rows_of(token_rows), A = rows_of(assigned_rows);
  if (assigned_rows.dim(-1) != C)
    fail(op, token_rows.describe() + " and " + assigned_rows.describe() + " differ in channels");
  if (map.row_token.numel() != A || map.token_rows.numel() != A || map.token_offsets.numel() != N + 1)
    fail(op, "row map (" + map.row_token.describe() + ", " + map.token_offsets.describe() + ", " +
                 map.token_rows.describe() + ") does not fit " + std::to_string(N) + " tokens and " +
                 std::to_string(A) + " assignments");
  return {N, A, C};
}

void check_gates(const char* op, const Tensor& rows, const Tensor& gates, std::int64_t assignments) {
  require_defined(op, gates, "gates");
  same_type(op, rows, gates);
  require_shape(op, gates, {assignments});
}

}  // namespace parity::ops
