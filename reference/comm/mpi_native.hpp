// What a collective's MPI call needs (reference/comm/collectives/): the communicator, this
// rank and the size, and MPI's names for parity's types and reductions. float16/bfloat16 are a
// 2-byte type reduced by user operations in float32 (made by MpiRuntime); avg is MPI_SUM, the
// division done by the caller (MPI has no average).
#pragma once

#include <mpi.h>

#include <array>
#include <climits>
#include <cstddef>

#include "reference/core/buffer.hpp"

namespace parity {

struct MpiNative {
  MPI_Comm comm;
  int rank;
  int size;
};

[[noreturn]] void mpi_failed(int rc, const char* call);
// Throws Error naming the MPI call and MPI's own text for rc, unless rc is MPI_SUCCESS.
inline void check_mpi(int rc, const char* call) {
  if (rc != MPI_SUCCESS) mpi_failed(rc, call);
}

// 16-bit floating types: a 2-byte contiguous MPI type and one user operation per reduction
// (filled by MpiRuntime before any call).
struct MpiHalfTypes {
  MPI_Datatype type = MPI_DATATYPE_NULL;
  std::array<MPI_Op, 5> float16_ops{};
  std::array<MPI_Op, 5> bfloat16_ops{};
};
extern MpiHalfTypes g_mpi_half;

// Inline, as every native call looks both up.
inline MPI_Datatype mpi_type(DataType type) {
  switch (type) {
    case DataType::float64: return MPI_DOUBLE;
    case DataType::float32: return MPI_FLOAT;
    case DataType::int32: return MPI_INT32_T;
    case DataType::int64: return MPI_INT64_T;
    case DataType::float16: case DataType::bfloat16: return g_mpi_half.type;
  }
  return MPI_DATATYPE_NULL;
}

inline MPI_Op mpi_op(ReduceOp op, DataType type) {
  const auto index = static_cast<std::size_t>(op);
  if (type == DataType::float16) return g_mpi_half.float16_ops[index];
  if (type == DataType::bfloat16) return g_mpi_half.bfloat16_ops[index];
  if (op == ReduceOp::sum) return MPI_SUM;  // the common case, without the switch's table
  switch (op) {
    case ReduceOp::sum: case ReduceOp::avg: return MPI_SUM;
    case ReduceOp::prod: return MPI_PROD;
    case ReduceOp::max: return MPI_MAX;
    case ReduceOp::min: return MPI_MIN;
  }
  return MPI_OP_NULL;
}

[[noreturn]] void mpi_count_too_large(std::size_t count, const char* what);
// A count as MPI's int, or Error naming `what` when it does not fit.
inline int mpi_count(std::size_t count, const char* what) {
  if (count > static_cast<std::size_t>(INT_MAX)) mpi_count_too_large(count, what);
  return static_cast<int>(count);
}

}  // namespace parity
