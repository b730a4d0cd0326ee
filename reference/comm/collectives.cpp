// The collectives' descriptors, indexed by collective (see collectives.hpp).
#include "reference/comm/collectives.hpp"

#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <string>

namespace parity {
namespace {
constexpr std::size_t kCollectives = std::size(kAllCollectives);
}  // namespace

namespace detail {
// Constant-initialised (before any file's registration runs) and written only by those: a copy
// of each descriptor, and whether it has been given.
CollectiveDescriptor g_collective_descriptors[kCollectives] = {};
bool g_collective_registered[kCollectives] = {};

void missing_descriptor(Collective collective) {
  // A programming error, not an input one.
  std::fprintf(stderr, "parity: collective %s has no descriptor (reference/comm/collectives/)\n",
               std::string(name_of(collective)).c_str());
  std::abort();
}
}  // namespace detail

namespace {
[[noreturn, gnu::cold]] void fail(const char* what, Collective c) {
  // Before main: no one could catch an exception; a bad registration is a programming error.
  std::fprintf(stderr, "parity: collective %s %s\n", std::string(name_of(c)).c_str(), what);
  std::abort();
}
}  // namespace

RegisteredCollective::RegisteredCollective(const CollectiveDescriptor& descriptor) {
  const auto i = static_cast<std::size_t>(descriptor.collective);
  if (i >= kCollectives) fail("is not in kAllCollectives", descriptor.collective);
  if (detail::g_collective_registered[i]) fail("registered twice", descriptor.collective);
  if (!descriptor.send_count || !descriptor.recv_count || !descriptor.busbw_factor || !descriptor.source ||
      !descriptor.mpi || (!descriptor.counts_fit && !descriptor.block))
    fail("registered without its counts, bus bandwidth factor, sources or MPI call", descriptor.collective);
  detail::g_collective_descriptors[i] = descriptor;
  detail::g_collective_registered[i] = true;
}

double collective_bytes(Collective collective, std::size_t count, std::size_t element_bytes, int n) {
  const double bytes = static_cast<double>(count) * static_cast<double>(element_bytes);
  return describe(collective).count_is_chunk ? bytes * n : bytes;
}

void place_in(CollectiveCall& call, BufferView whole, std::size_t count, int rank) {
  const std::size_t block = static_cast<std::size_t>(rank) * count;
  call.send = call.recv = whole;
  switch (describe(call.collective).in_place) {
    case InPlace::send_in_recv: call.send = whole.slice(block, count); break;
    case InPlace::recv_in_send: call.recv = whole.slice(block, count); break;
    case InPlace::same: case InPlace::none: break;
  }
}

PeerCounts peer_counts(Collective collective, std::size_t count, int n, int rank) {
  PeerCounts out;
  if (const auto block = describe(collective).block)
    for (int p = 0; p < n; ++p) {
      out.send.push_back(block(count, rank, p));
      out.recv.push_back(block(count, p, rank));
    }
  return out;
}

bool is_in_place(const CollectiveCall& call, int rank) {
  const auto* s = static_cast<const std::byte*>(call.send.data);
  const auto* r = static_cast<const std::byte*>(call.recv.data);
  const std::size_t at = static_cast<std::size_t>(rank);
  switch (describe(call.collective).in_place) {
    case InPlace::same: return s == r;
    case InPlace::send_in_recv: return s == r + at * call.send.bytes();
    case InPlace::recv_in_send: return r == s + at * call.recv.bytes();
    case InPlace::none: break;
  }
  return false;
}

}  // namespace parity
