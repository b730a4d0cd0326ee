// One descriptor per collective: what a call looks like (counts of each rank's buffers, the
// in-place layout, root and reduction), what it computes (where each output element comes
// from), how the benchmark reports it (size and bus bandwidth factor), and the backends' own
// calls (MPI, NCCL). The communicator's checks, the conformance grid's inputs and expected
// values, the benchmark's buffers and `parity list` read it; nothing else switches on the
// collective. Adding a collective is its name in reference/core/collective.hpp and one file in
// reference/comm/collectives/ that registers its descriptor:
//
//   const RegisteredCollective kMine{{.collective = Collective::mine, .summary = "...", ...}};
//
// after which its native call runs on the MPI backend (and on NCCL where the descriptor gives
// its NCCL call), and the algorithms' registry, the conformance grid, the benchmark and the
// report take it, with "native" as its one algorithm until reference algorithms are written.
// Its test rows: its algorithms in the registry test (correctness/test_collectives.cpp).
#pragma once

#include <cstddef>
#include <span>
#include <string_view>
#include <vector>

#include "reference/core/buffer.hpp"
#include "reference/core/collective.hpp"

namespace parity {

struct CollectiveCall {
  Collective collective = Collective::all_reduce;
  BufferView send;
  BufferView recv;
  ReduceOp op = ReduceOp::sum;
  int root = 0;
  // Per-peer counts (all_to_all_v): elements per peer in rank order, blocks packed (a block's
  // displacement is the sum of the counts before it). Empty for a collective without them.
  // Views, like the buffers: the counts must outlive the call.
  std::span<const std::size_t> send_counts = {};
  std::span<const std::size_t> recv_counts = {};
};

// Where the in-place form puts the send buffer (NCCL's conventions, so that device backends
// need no copies).
enum class InPlace {
  same,          // send.data == recv.data
  send_in_recv,  // send is this rank's block of recv: send.data == recv.data + rank * send.count
  recv_in_send,  // recv is this rank's block of send: recv.data == send.data + rank * recv.count
  none,          // no in-place form: buffers must not overlap
};

// Element j of a rank's output is input element `index` of rank `rank`, or, with rank
// kReduced, the reduction over every rank of their input elements `index`; kNowhere: j is
// beyond the output (no expected value).
struct Source {
  static constexpr int kReduced = -1, kNowhere = -2;
  int rank;
  std::size_t index;
};

struct MpiNative;   // reference/comm/mpi_native.hpp
struct NcclNative;  // reference/comm/nccl_native.hpp (CUDA builds)

struct CollectiveDescriptor {
  Collective collective = Collective::all_reduce;
  std::string_view summary;  // what it computes, for `parity list`
  bool reducing = false;     // takes a reduction (op)
  bool rooted = false;       // takes a root
  bool root_writes_only = false;  // only the root's receive buffer is written (reduce)
  // The count a call is described by (the benchmark's and the grid's count column) is the
  // per-rank chunk, not the whole buffer: the size the benchmark reports is n chunks.
  bool count_is_chunk = false;
  // Elements of rank `rank`'s send and receive buffers for a call of `count` on n ranks.
  std::size_t (*send_count)(std::size_t count, int n, int rank) = nullptr;
  std::size_t (*recv_count)(std::size_t count, int n, int rank) = nullptr;
  // Per-peer counts, for a collective that takes them: what rank `from` sends rank `to` in the
  // pattern parity checks and benchmarks (uneven, some empty). Null for the others.
  std::size_t (*block)(std::size_t count, int from, int to) = nullptr;
  std::string_view block_pattern;  // the pattern in words
  // Whether a call's buffer counts fit each other on n ranks (collectives without per-peer
  // counts), and the rule in words for the error message.
  bool (*counts_fit)(std::size_t send, std::size_t recv, std::size_t n) = nullptr;
  std::string_view counts_rule;
  InPlace in_place = InPlace::same;
  // Bus bandwidth = algorithm bandwidth x factor (nccl-tests' convention), and the factor in words.
  double (*busbw_factor)(int n) = nullptr;
  std::string_view busbw_text;
  // What element j of rank r's output is, for a call of `count` on n ranks.
  Source (*source)(std::size_t count, int n, int root, int r, std::size_t j) = nullptr;
  // The backends' own calls, on buffers already checked and in memory they take.
  void (*mpi)(const MpiNative& backend, const CollectiveCall& call) = nullptr;
  void (*nccl)(const NcclNative& backend, const CollectiveCall& call) = nullptr;  // null without CUDA
};

// Adds a collective's descriptor for the life of the program (a namespace-scope constant of its
// file). A collective described twice stops the program at start-up.
class RegisteredCollective {
 public:
  explicit RegisteredCollective(const CollectiveDescriptor& descriptor);
};

namespace detail {
extern CollectiveDescriptor g_collective_descriptors[];
extern bool g_collective_registered[];
[[noreturn]] void missing_descriptor(Collective collective);
}  // namespace detail

// The collective's descriptor. A collective named in collective.hpp but never registered stops
// the program with a message on first use. Inline: every native call reads it.
inline const CollectiveDescriptor& describe(Collective collective) {
  const auto i = static_cast<std::size_t>(collective);
  if (!detail::g_collective_registered[i]) [[unlikely]]
    detail::missing_descriptor(collective);
  return detail::g_collective_descriptors[i];
}

inline bool is_reducing(Collective c) { return describe(c).reducing; }
inline bool has_root(Collective c) { return describe(c).rooted; }
// True when a call carries per-peer send and receive counts (all_to_all_v).
inline bool has_block_counts(Collective c) { return describe(c).block != nullptr; }

// The bytes a call of `count` elements moves as the benchmark reports its size (nccl-tests'
// "size"): the whole buffer, or n chunks; all_to_all_v's is the ranks' mean send buffer.
double collective_bytes(Collective collective, std::size_t count, std::size_t element_bytes, int n);

// The send and receive views of an in-place call on `whole` (max(send, recv) elements), for
// rank `rank` and a call of `count`.
void place_in(CollectiveCall& call, BufferView whole, std::size_t count, int rank);

// Rank `rank`'s per-peer counts in the descriptor's pattern: what it sends each peer, what each
// sends it (both empty for a collective without per-peer counts).
struct PeerCounts {
  std::vector<std::size_t> send, recv;
};
PeerCounts peer_counts(Collective collective, std::size_t count, int n, int rank);

// Whether the call's buffers are its collective's in-place layout (rank: the caller's).
bool is_in_place(const CollectiveCall& call, int rank);

// Parts that several collectives' descriptors share.
namespace collective_parts {
inline std::size_t count_as_is(std::size_t count, int, int) { return count; }
inline std::size_t n_chunks(std::size_t count, int n, int) { return count * static_cast<std::size_t>(n); }
inline bool counts_equal(std::size_t send, std::size_t recv, std::size_t) { return send == recv; }
inline double busbw_one(int) { return 1.0; }
inline double busbw_n_minus_one_over_n(int n) { return static_cast<double>(n - 1) / n; }
inline Source reduced_in_place(std::size_t, int, int, int, std::size_t j) { return {Source::kReduced, j}; }
}  // namespace collective_parts

// In a collective's file: its NCCL call where CUDA is built, null elsewhere.
#if defined(PARITY_HAVE_CUDA) && PARITY_HAVE_CUDA
#define PARITY_NCCL_CALL(call) call
#else
#define PARITY_NCCL_CALL(call) nullptr
#endif

}  // namespace parity
