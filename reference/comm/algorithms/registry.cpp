// The registry: one descriptor per (collective, algorithm). "native" runs the backend's own
// collective; its prediction is the cheapest reference algorithm's, the choice an ideally
// tuned library would make.
#include <algorithm>
#include <bit>
#include <limits>

#include "reference/comm/algorithms.hpp"
#include "reference/kernels/buffer_kernels.hpp"
#include "reference/core/error.hpp"

namespace parity {

std::string_view name_of(HalfAccumulate mode) { return mode == HalfAccumulate::float32 ? "float32" : "native"; }

HalfAccumulate parse_half_accumulate(std::string_view text) {
  if (text == "float32") return HalfAccumulate::float32;
  if (text == "native") return HalfAccumulate::native;
  throw UsageError("unknown --half-accumulate '" + std::string(text) + "' (known: float32, native)");
}

namespace {

using theory::AlphaBeta;

[[gnu::always_inline]] inline void run_native(Communicator& comm, const CollectiveCall& c) {
  switch (c.collective) {
    case Collective::all_reduce: return comm.all_reduce(c.send, c.recv, c.op);
    case Collective::reduce: return comm.reduce(c.send, c.recv, c.op, c.root);
    case Collective::broadcast: return comm.broadcast(c.send, c.recv, c.root);
    case Collective::all_gather: return comm.all_gather(c.send, c.recv);
    case Collective::reduce_scatter: return comm.reduce_scatter(c.send, c.recv, c.op);
    case Collective::all_to_all: return comm.all_to_all(c.send, c.recv);
    case Collective::all_to_all_v: return comm.all_to_all_v(c.send, c.send_counts, c.recv, c.recv_counts);
  }
}

AlgorithmDescriptor reference(std::string name, Collective collective, std::string summary,
                              double (*seconds)(int, double, AlphaBeta),
                              std::function<double(int, double)> bytes,
                              void (*run)(Communicator&, const CollectiveCall&)) {
  return {std::move(name), collective, std::move(summary), std::move(bytes),
          [seconds](int n, double b, AlphaBeta m) { return seconds(n, b, m); }, run};
}

double whole_buffer_tree(int n, double bytes) { return n > 1 ? bytes * (n - 1) / n : 0.0; }

std::vector<AlgorithmDescriptor> build_registry() {
  namespace t = theory;
  namespace a = algorithms;
  std::vector<AlgorithmDescriptor> list = {
      reference("ring", Collective::all_reduce,
                "reduce-scatter then all-gather around a ring, double-buffered; sends 2(n-1)/n of the buffer",
                t::ring_all_reduce_seconds, t::ring_all_reduce_bytes_per_rank, a::ring_all_reduce),
      reference("naive", Collective::all_reduce,
                "every rank sends to rank 0, which reduces in rank order and sends the result back",
                t::naive_all_reduce_seconds, [](int n, double b) { return 2.0 * (n - 1) / n * b; },
                a::naive_all_reduce),
      reference("recursive_doubling", Collective::all_reduce,
                "log2(n) whole-buffer exchanges across one bit each; non-powers of two fold first",
                t::recursive_doubling_all_reduce_seconds,
                [](int n, double b) {
                  const int p = t::power_of_two_floor(n);
                  const double rounds = std::bit_width(static_cast<unsigned>(p)) - 1;
                  // participants send every round; folded pairs add one message each way
                  return (p * rounds * b + 2.0 * (n - p) * b) / n;
                },
                a::recursive_doubling_all_reduce),
      reference("rabenseifner", Collective::all_reduce,
                "recursive halving reduce-scatter then recursive doubling all-gather; non-powers of two fold first",
                t::rabenseifner_all_reduce_seconds,
                [](int n, double b) {
                  const int p = t::power_of_two_floor(n);
                  return (p * 2.0 * (p - 1) / p * b + 2.0 * (n - p) * b) / n;
                },
                a::rabenseifner_all_reduce),
      reference("binomial_tree", Collective::reduce, "binomial tree towards the root, ceil(log2 n) rounds",
                t::binomial_tree_seconds, whole_buffer_tree, a::binomial_tree_reduce),
      reference("binomial_tree", Collective::broadcast, "binomial tree from the root, ceil(log2 n) rounds",
                t::binomial_tree_seconds, whole_buffer_tree, a::binomial_tree_broadcast),
      reference("ring", Collective::reduce_scatter, "partial sums travel n-1 steps round a ring",
                t::ring_chunked_seconds, t::ring_chunked_bytes_per_rank, a::ring_reduce_scatter),
      reference("ring", Collective::all_gather, "chunks travel n-1 steps round a ring",
                t::ring_chunked_seconds, t::ring_chunked_bytes_per_rank, a::ring_all_gather),
      reference("pairwise", Collective::all_to_all, "n-1 pairwise exchanges, partner (step - rank) mod n",
                t::pairwise_all_to_all_seconds, t::ring_chunked_bytes_per_rank, a::pairwise_all_to_all),
      reference("pairwise", Collective::all_to_all_v,
                "n-1 pairwise exchanges of per-peer blocks, partner (step - rank) mod n; empty blocks are not sent",
                t::pairwise_all_to_all_v_seconds, t::pairwise_all_to_all_v_bytes_per_rank, a::pairwise_all_to_all_v),
  };
  // Natives first; their model is the best of their collective's reference algorithms.
  std::vector<AlgorithmDescriptor> registry;
  for (Collective c : kAllCollectives) {
    std::vector<AlgorithmDescriptor> family;
    for (const auto& d : list)
      if (d.collective == c) family.push_back(d);
    registry.push_back(AlgorithmDescriptor{
        "native", c, "the backend's own collective (baseline); predicted as the best reference algorithm",
        [family](int n, double b) {
          double best = std::numeric_limits<double>::infinity();
          for (const auto& d : family) best = std::min(best, d.bytes_sent_per_rank(n, b));
          return best;
        },
        [family](int n, double b, AlphaBeta m) {
          double best = std::numeric_limits<double>::infinity();
          for (const auto& d : family) best = std::min(best, d.predicted_seconds(n, b, m));
          return best;
        },
        run_native, true});
  }
  registry.insert(registry.end(), list.begin(), list.end());
  return registry;
}

// The float32 working copies of a 16-bit call keep the caller's in-place layout.
void run_widened(Communicator& comm, const AlgorithmDescriptor& algorithm, const CollectiveCall& call) {
  const std::size_t rank = static_cast<std::size_t>(comm.rank());
  const bool in_place_chunk = call.collective == Collective::reduce_scatter &&
                              call.recv.data == call.send.slice(rank * call.recv.count, 0).data;
  const bool in_place = call.send.data == call.recv.data || in_place_chunk;
  const bool writes_recv = call.collective != Collective::reduce || comm.rank() == call.root;
  CollectiveCall wide = call;
  wide.send = comm.scratch(call.send.count, DataType::float32, algorithms::kScratchWideSend);
  convert_buffer(wide.send, call.send);
  if (!in_place) wide.recv = comm.scratch(call.recv.count, DataType::float32, algorithms::kScratchWideRecv);
  else if (in_place_chunk) wide.recv = wide.send.slice(rank * call.recv.count, call.recv.count);
  else wide.recv = wide.send;
  algorithm.run(comm, wide);
  if (writes_recv) convert_buffer(call.recv, wide.recv);
}

}  // namespace

const std::vector<AlgorithmDescriptor>& algorithm_registry() {
  static const std::vector<AlgorithmDescriptor> registry = build_registry();
  return registry;
}

std::vector<const AlgorithmDescriptor*> algorithms_for(Collective collective) {
  std::vector<const AlgorithmDescriptor*> out;
  for (const auto& d : algorithm_registry())
    if (d.collective == collective) out.push_back(&d);
  return out;
}

const AlgorithmDescriptor& find_algorithm(Collective collective, std::string_view name) {
  std::string known;
  for (const auto* d : algorithms_for(collective)) {
    if (d->name == name) return *d;
    known += (known.empty() ? "" : ", ") + d->name;
  }
  throw UsageError("unknown algorithm '" + std::string(name) + "' for " + std::string(name_of(collective)) +
                   " (known: " + known + ")");
}

void run_collective(Communicator& comm, const AlgorithmDescriptor& algorithm, const CollectiveCall& call,
                    HalfAccumulate half) {
  const bool widen = is_half(call.send.dtype) && is_reducing(call.collective) && half == HalfAccumulate::float32;
  // Validated and scoped by the communicator; called directly, not through the descriptor's
  // pointer, so the switch folds into this function (a native benchmark call passes here).
  if (algorithm.native && !widen) return run_native(comm, call);
  validate_collective(comm, call.collective, call.send, call.recv, call.root, false, call.send_counts, call.recv_counts);
  Watchdog::Scope scope(comm.watchdog(), collective_operation(call.collective, call.send, call.recv, algorithm.name.c_str()));
  if (widen)
    run_widened(comm, algorithm, call);
  else
    algorithm.run(comm, call);
}

}  // namespace parity
