// Reference collective algorithms, written only on the communicator's point-to-point calls,
// and the registry of their descriptors (name, bytes each rank sends, busbw factor,
// alpha-beta cost). Adding an algorithm: one file in algorithms/ and one registry entry.
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

struct CollectiveCall {
  Collective collective = Collective::all_reduce;
  BufferView send;
  BufferView recv;
  ReduceOp op = ReduceOp::sum;
  int root = 0;
  // all_to_all_v only: elements per peer in rank order, blocks packed (displacement = the sum
  // of the counts before it; see communicator.hpp). Empty for every other collective. Views,
  // like the buffers: the counts must outlive the call.
  std::span<const std::size_t> send_counts = {};
  std::span<const std::size_t> recv_counts = {};
};

struct AlgorithmDescriptor {
  std::string name;
  Collective collective;
  std::string summary;
  // Average bytes one rank sends, for a collective of `bytes` (theory::collective_bytes) on n ranks.
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

  double busbw_factor(int n) const { return theory::busbw_factor(collective, n); }
};

// Every algorithm, natives first ("native" is the backend's own collective).
const std::vector<AlgorithmDescriptor>& algorithm_registry();
// Throws UsageError naming the known algorithms of the collective.
const AlgorithmDescriptor& find_algorithm(Collective collective, std::string_view name);
std::vector<const AlgorithmDescriptor*> algorithms_for(Collective collective);

// Validates the call, applies the float16/bfloat16 mode, and runs the algorithm under a
// watchdog scope. The one entry point techniques and benchmarks use.
void run_collective(Communicator& comm, const AlgorithmDescriptor& algorithm, const CollectiveCall& call,
                    HalfAccumulate half = HalfAccumulate::float32);

// The reference algorithms (reference/comm/algorithms/).
namespace algorithms {
void ring_all_reduce(Communicator& comm, const CollectiveCall& call);
void naive_all_reduce(Communicator& comm, const CollectiveCall& call);
void recursive_doubling_all_reduce(Communicator& comm, const CollectiveCall& call);
void rabenseifner_all_reduce(Communicator& comm, const CollectiveCall& call);
void binomial_tree_reduce(Communicator& comm, const CollectiveCall& call);
void binomial_tree_broadcast(Communicator& comm, const CollectiveCall& call);
void ring_reduce_scatter(Communicator& comm, const CollectiveCall& call);
void ring_all_gather(Communicator& comm, const CollectiveCall& call);
void pairwise_all_to_all(Communicator& comm, const CollectiveCall& call);
void pairwise_all_to_all_v(Communicator& comm, const CollectiveCall& call);

// Element range [begin, end) of block i when count elements are split into `blocks` nearly
// equal blocks: block i starts at floor(count * i / blocks).
std::size_t block_begin(std::size_t count, int blocks, int i);
// Scratch slots reserved for the algorithms (0, 1) and for the 16-bit widening (2, 3).
inline constexpr int kScratchA = 0, kScratchB = 1, kScratchWideSend = 2, kScratchWideRecv = 3;
}  // namespace algorithms

}  // namespace parity
