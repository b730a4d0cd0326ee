// The registry: one descriptor per (collective, algorithm). The reference algorithms register
// their own (their files in this folder); "native" runs the backend's own collective, and its
// prediction is the cheapest reference algorithm's, the choice an ideally tuned library would
// make.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
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

void run_native(Communicator& comm, const CollectiveCall& call) { comm.native(call); }

// The registered reference algorithms, in registration order (the files' initialisation).
std::vector<AlgorithmDescriptor>& registered() {
  static std::vector<AlgorithmDescriptor> list;
  return list;
}

std::vector<AlgorithmDescriptor> build_registry() {
  std::vector<AlgorithmDescriptor> list = registered();
  std::stable_sort(list.begin(), list.end(),
                   [](const AlgorithmDescriptor& a, const AlgorithmDescriptor& b) { return a.order < b.order; });
  // Natives first; their model is the best of their collective's reference algorithms.
  std::vector<AlgorithmDescriptor> registry;
  for (Collective c : kAllCollectives) {
    std::vector<AlgorithmDescriptor> family;
    for (const auto& d : list)
      if (d.collective == c) family.push_back(d);
    registry.push_back(AlgorithmDescriptor{
        "native", c, 0, "the backend's own collective (baseline); predicted as the best reference algorithm",
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
  const CollectiveDescriptor& d = describe(call.collective);
  const bool writes_recv = !d.root_writes_only || comm.rank() == call.root;
  CollectiveCall wide = call;
  if (is_in_place(call, comm.rank())) {
    const std::size_t whole = std::max(call.send.count, call.recv.count);
    const std::size_t count = d.count_is_chunk ? std::min(call.send.count, call.recv.count) : whole;
    place_in(wide, comm.scratch(whole, DataType::float32, algorithms::kScratchWideSend), count, comm.rank());
    convert_buffer(wide.send, call.send);
  } else {
    wide.send = comm.scratch(call.send.count, DataType::float32, algorithms::kScratchWideSend);
    wide.recv = comm.scratch(call.recv.count, DataType::float32, algorithms::kScratchWideRecv);
    convert_buffer(wide.send, call.send);
  }
  algorithm.run(comm, wide);
  if (writes_recv) convert_buffer(call.recv, wide.recv);
}

}  // namespace

RegisteredAlgorithm::RegisteredAlgorithm(AlgorithmDescriptor descriptor) {
  for (const auto& d : registered())
    if (d.collective == descriptor.collective && d.name == descriptor.name) {
      // Before main: no one could catch an exception; a duplicate is a programming error.
      std::fprintf(stderr, "parity: algorithm %s of %s registered twice\n", d.name.c_str(),
                   std::string(name_of(d.collective)).c_str());
      std::abort();
    }
  registered().push_back(std::move(descriptor));
}

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

std::string algorithm_names(std::string_view separator) {
  std::vector<std::string> names;
  for (const auto& d : algorithm_registry())
    if (std::find(names.begin(), names.end(), d.name) == names.end()) names.push_back(d.name);
  std::string text;
  for (const auto& name : names) text += (text.empty() ? "" : std::string(separator)) + name;
  return text;
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
  // Validated and scoped by the communicator (a native benchmark call passes here).
  if (algorithm.native && !widen) return comm.native(call);
  validate_collective(comm, call.collective, call.send, call.recv, call.root, false, call.send_counts, call.recv_counts);
  Watchdog::Scope scope(comm.watchdog(), collective_operation(call.collective, call.send, call.recv, algorithm.name.c_str()));
  if (widen)
    run_widened(comm, algorithm, call);
  else
    algorithm.run(comm, call);
}

}  // namespace parity
