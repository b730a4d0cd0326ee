// Conformance cases for collectives, written once and run by two runners: GoogleTest under
// CTest (correctness/test_collectives.cpp) and `parity check` on a cluster. A case runs one
// algorithm and checks it against the expected result, exactly for crafted inputs, within a
// derived bound for random ones. Inputs depend on
// the case but not on the algorithm, so every algorithm, native included, is held to the same
// exact expected values; with random inputs the native collective also runs in the same case.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "correctness/cases/family.hpp"
#include "reference/comm/algorithms.hpp"
#include "reference/record/table.hpp"

namespace parity::cases {

// The result groups it writes (docs/results-schema.md).
inline const record::TableSpec kCollectiveCasesTable = check_table("collectives",
    "conformance cases of the collectives (docs/results-schema.md)",
    {{"collective", ColumnType::string}, {"algorithm", ColumnType::string}, {"dtype", ColumnType::string},
     {"redop", ColumnType::string}, {"count", ColumnType::int64}, {"in_place", ColumnType::int64},
     {"input", ColumnType::string}, {"world_size", ColumnType::int64}, {"max_abs_error", ColumnType::float64},
     {"max_rel_error", ColumnType::float64}, {"tolerance", ColumnType::float64}, {"wrong", ColumnType::int64},
     {"guard_ok", ColumnType::int64}});

enum class InputKind {
  exact,   // small integers chosen so every partial result is exact in the type (nccl-tests' way)
  random,  // uniform in [-1, 1), rounded to the type; compared with float64 under a bound
};

struct CollectiveCase {
  Collective collective = Collective::all_reduce;
  std::string algorithm = "native";
  DataType dtype = DataType::float32;
  ReduceOp op = ReduceOp::sum;      // ignored by non-reducing collectives
  // Whole buffer, or per-rank chunk for chunked collectives; for all_to_all_v the chunk of the
  // per-peer counts theory::all_to_all_v_count(count, rank, peer).
  std::size_t count = 0;
  bool in_place = false;            // never for all_to_all_v, which has no in-place form
  InputKind input = InputKind::exact;
  int root = 0;
  // "all_reduce/ring/float32/sum/1021/in_place/exact"; non-reducing collectives say "none".
  std::string name() const;
};

// The conformance grid at world size n (options.include_large: 1 MiB + 3 elements and 64 MiB,
// float32 and bfloat16, sum only): every collective x algorithm x type x reduction x
// count in {0, 1, n-1, n, n+1, 1021} x placement, exact inputs; random inputs for floating
// types with sum and avg; and the large sizes. all_to_all_v: out of place only, no large sizes.
std::vector<CollectiveCase> conformance_grid(int world_size, const GridOptions& options = {});

struct CaseResult {
  double max_abs_error = 0;
  double max_rel_error = 0;
  double tolerance = 0;        // largest bound of any element (0 for exact inputs)
  std::int64_t wrong = 0;      // over all ranks, algorithm and native results
  bool guard_ok = true;        // guards untouched, out-of-place inputs unchanged
  bool passed = false;
  std::string message;         // first mismatches of the lowest failing rank
};

// Runs one case on every rank of comm (collectively); every rank returns the same result.
// with_native: for random inputs, also run the native collective on the same inputs and check
// it under the same bound.
CaseResult run_case(Communicator& comm, const CollectiveCase& c, HalfAccumulate half = HalfAccumulate::float32,
                    bool with_native = true);

// The same with an explicit algorithm (c.algorithm only names it): lets tests prove that a
// broken algorithm is caught.
CaseResult run_case(Communicator& comm, const CollectiveCase& c, const AlgorithmDescriptor& algorithm,
                    HalfAccumulate half, bool with_native);

// Bytes one rank allocates for a case (buffers, guards, scratch), to refuse oversized runs.
std::size_t case_bytes_per_rank(const CollectiveCase& c, int world_size);

}  // namespace parity::cases
