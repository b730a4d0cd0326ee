// Reference collective algorithms, written only on the communicator's point-to-point calls,
// and the registry of their descriptors (name, bytes each rank sends, busbw factor,
// alpha-beta cost). Adding an algorithm is one file in algorithms/ that registers its
// descriptor:
//
//   const RegisteredAlgorithm kMine{{.name = "mine", .collective = Collective::all_reduce, .order = 60,
//                                    .summary = "...", .bytes_sent_per_rank = ..., .predicted_seconds = ...,
//                                    .run = mine_all_reduce}};
//
// and the conformance grid, the benchmark, `parity list` and the report take it from there.
#pragma once

#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "reference/comm/communicator.hpp"
#include "reference/theory/collectives.hpp"

namespace parity {

// How float16/bfloat16 reductions are computed.
//  float32: inputs are widened to float32, the whole algorithm runs in float32, and the
//           result is rounded to 16 bits once (round to nearest even). The default: its
//           error bound does not grow with the 16-bit unit roundoff per step.
//  native:  the algorithm runs on 16-bit buffers; every pairwise combination is computed in
//           float32 and rounded back to 16 bits, like a native 16-bit add.
enum class HalfAccumulate { float32, native };
std::string_view name_of(HalfAccumulate mode);
HalfAccumulate parse_half_accumulate(std::string_view text);

struct AlgorithmDescriptor {
  std::string name;
  Collective collective;
  int order = 0;  // place among its collective's algorithms (native first, then smallest)
  std::string summary;
  // Average bytes one rank sends, for a collective of `bytes` (collective_bytes) on n ranks.
  std::function<double(int n, double bytes)> bytes_sent_per_rank;
  // Alpha-beta predicted time in seconds.
  std::function<double(int n, double bytes, theory::AlphaBeta model)> predicted_seconds;
  // Runs the algorithm on buffers already validated for the collective. A plain function: the
  // native entry runs on every benchmark call, where a std::function's indirection shows.
  using Run = void (*)(Communicator&, const CollectiveCall&);
  Run run = nullptr;
  // The backend's own collective: the communicator's entry validates it and scopes it for the
  // watchdog itself, so run_collective does not do either a second time.
  bool native = false;

  double busbw_factor(int n) const { return describe(collective).busbw_factor(n); }
};

// Adds a reference algorithm to the registry for the life of the program (a namespace-scope
// constant of its file). A (collective, name) registered twice stops the program at start-up.
class RegisteredAlgorithm {
 public:
  explicit RegisteredAlgorithm(AlgorithmDescriptor descriptor);
};

// Every algorithm, natives first ("native" is the backend's own collective), then each
// collective's reference algorithms by order. Made on first use, after every registration.
const std::vector<AlgorithmDescriptor>& algorithm_registry();
// Throws UsageError naming the known algorithms of the collective.
const AlgorithmDescriptor& find_algorithm(Collective collective, std::string_view name);
std::vector<const AlgorithmDescriptor*> algorithms_for(Collective collective);
// Every algorithm's name once, in registry order ("native" first), joined by `separator`.
std::string algorithm_names(std::string_view separator);

// Validates the call, applies the float16/bfloat16 mode, and runs the algorithm under a
// watchdog scope. The one entry point techniques and benchmarks use.
void run_collective(Communicator& comm, const AlgorithmDescriptor& algorithm, const CollectiveCall& call,
                    HalfAccumulate half = HalfAccumulate::float32);

// What the reference algorithms (reference/comm/algorithms/) share.
namespace algorithms {
// Element range [begin, end) of block i when count elements are split into `blocks` nearly
// equal blocks: block i starts at floor(count * i / blocks).
std::size_t block_begin(std::size_t count, int blocks, int i);
// Block i of a buffer cut into `blocks` such blocks.
BufferView block_of(BufferView buffer, int blocks, int i);
// The ring's two halves on uneven blocks, for algorithms built of rings (ring.cpp): a
// reduce-scatter of `input` into `data` (n = comm.size() blocks each; they may be one buffer)
// after which block (rank + 1) mod n of `data` holds the full reduction, and an all-gather on
// `data` in place starting from block (rank + shift) mod n being complete.
void ring_reduce_scatter_blocks(Communicator& comm, BufferView input, BufferView data, ReduceOp op);
void ring_all_gather_in_place(Communicator& comm, BufferView data, int shift);
// Scratch slots reserved for the algorithms (0, 1) and for the 16-bit widening (2, 3).
inline constexpr int kScratchA = 0, kScratchB = 1, kScratchWideSend = 2, kScratchWideRecv = 3;
}  // namespace algorithms

}  // namespace parity
