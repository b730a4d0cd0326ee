// Backend-independent parts of the communicator: argument checks, watchdog scopes around
// every operation, traffic counters, and helpers built on the collectives.
#include "reference/comm/communicator.hpp"

#include <cstdlib>
#include <cstring>
#include <functional>
#include <thread>

#include "reference/core/error.hpp"
#include "reference/cuda/device.hpp"

namespace parity {

thread_local void (*yield_while_waiting)() = nullptr;

Operation collective_operation(Collective collective, const BufferView& send, const BufferView& recv, const char* algorithm) {
  const BufferView& larger = send.count > recv.count ? send : recv;
  // name_of returns views of string literals, so data() is null-terminated static text.
  return {name_of(collective).data(), algorithm, static_cast<std::int64_t>(larger.count), larger.dtype, {}};
}

Communicator::Communicator(std::shared_ptr<Watchdog> watchdog, MemorySpaces spaces)
    : spaces_(spaces), watchdog_(std::move(watchdog)) {
  require(watchdog_ != nullptr, "communicator created without a watchdog");
}

RequestPtr Communicator::start_point_to_point(BufferView buffer, int peer, int tag, bool send) {
  const std::string what = send ? "isend" : "irecv";
  if (peer < 0 || peer >= size())
    throw Error(what + (send ? " to rank " : " from rank ") + std::to_string(peer) + " of " + std::to_string(size()));
  if (!accepts(buffer.space, true) && buffer.count != 0)
    throw Error(what + ": a " + std::string(name_of(buffer.space)) + " buffer given to a " + std::string(backend()) + " communicator");
  RequestPtr request = send ? do_isend(buffer, peer, tag) : do_irecv(buffer, peer, tag);
  request->peer = peer;
  request->is_send = send;
  request->bytes = buffer.bytes();
  request->tag = tag;
  return request;
}

RequestPtr Communicator::isend(BufferView buffer, int peer, int tag) {
  RequestPtr request = start_point_to_point(buffer, peer, tag, true);
  traffic_.bytes_sent += buffer.bytes();
  traffic_.messages_sent += 1;
  if (counts_to_ != nullptr) {
    counts_to_->traffic_.bytes_sent += buffer.bytes();
    counts_to_->traffic_.messages_sent += 1;
  }
  return request;
}

RequestPtr Communicator::irecv(BufferView buffer, int peer, int tag) { return start_point_to_point(buffer, peer, tag, false); }

void Communicator::wait(RequestPtr& request) {
  if (!request) return;
  Watchdog::Scope scope(*watchdog_, request->is_send ? "send" : "recv");
  watchdog_->waiting_for({request->is_send ? Wait::send_to : Wait::message_from, request->peer,
                          static_cast<std::int64_t>(request->bytes), request->tag});
  // Poll, yielding the core now and then: ranks may share cores (--oversubscribe). Inside a
  // communication stream, hand control back to the computation instead.
  for (unsigned spins = 0; !request->test(); ++spins) {
    if (yield_while_waiting)
      yield_while_waiting();
    else if (spins > 64)
      std::this_thread::yield();
  }
  request.reset();
}

void Communicator::wait_all(std::span<RequestPtr> requests) {
  for (auto& r : requests) wait(r);
}

void Communicator::send_recv(BufferView send, int to, BufferView recv, int from, int tag) {
  RequestPtr requests[2] = {irecv(recv, from, tag), isend(send, to, tag)};
  wait_all(requests);
}

namespace {

enum class Invalid { none, dtype, space, mixed_spaces, root, counts, overlap, block_counts, block_sums, self_block,
                     stray_block_counts };

std::size_t sum_of(std::span<const std::size_t> counts) {
  std::size_t sum = 0;
  for (std::size_t c : counts) sum += c;
  return sum;
}

// The rules, as comparisons only: this runs on every call (all_to_all_v's sums are one pass
// over its counts), the collective's own rules read from its descriptor. Which buffer a space
// problem concerns comes back in `culprit`.
[[gnu::always_inline]] inline Invalid check_collective(const Communicator& comm, Collective collective, const BufferView& send,
                         const BufferView& recv, int root, bool native, std::span<const std::size_t> send_counts,
                         std::span<const std::size_t> recv_counts, const BufferView*& culprit) {
  if (send.dtype != recv.dtype) return Invalid::dtype;
  // Empty buffers go anywhere; a receive buffer in the send buffer's space is checked with it.
  const auto accepted = [&](MemorySpace space) {
    return native ? comm.accepts(space, false) : space == comm.memory_space();
  };
  culprit = &send;
  if (send.count != 0 && !accepted(send.space)) return Invalid::space;
  culprit = &recv;
  if (recv.count != 0 && (send.count == 0 || recv.space != send.space) && !accepted(recv.space)) return Invalid::space;
  if (send.space != recv.space && send.count != 0 && recv.count != 0) return Invalid::mixed_spaces;
  const CollectiveDescriptor& d = describe(collective);
  const int size = comm.size();
  if (d.rooted && (root < 0 || root >= size)) return Invalid::root;
  const std::size_t n = static_cast<std::size_t>(size);
  if (d.block != nullptr) {
    if (send_counts.size() != n || recv_counts.size() != n) return Invalid::block_counts;
    if (sum_of(send_counts) != send.count || sum_of(recv_counts) != recv.count) return Invalid::block_sums;
    // The one pair of counts a rank can check alone: what it sends itself is what it expects.
    if (send_counts[static_cast<std::size_t>(comm.rank())] != recv_counts[static_cast<std::size_t>(comm.rank())])
      return Invalid::self_block;
  } else {
    if (!d.counts_fit(send.count, recv.count, n)) return Invalid::counts;
    if (!send_counts.empty() || !recv_counts.empty()) return Invalid::stray_block_counts;
  }
  // Partial overlap other than the documented in-place layout is a caller bug.
  const auto* s = static_cast<const std::byte*>(send.data);
  const auto* r = static_cast<const std::byte*>(recv.data);
  if (send.count && recv.count && s < r + recv.bytes() && r < s + send.bytes() &&
      !is_in_place({collective, send, recv}, comm.rank()))
    return Invalid::overlap;
  return Invalid::none;
}

// The text, made only when a rule is broken.
[[noreturn, gnu::cold]] void reject_collective(const Communicator& comm, Collective collective, const BufferView& send,
                                               const BufferView& recv, int root, bool native,
                                               std::span<const std::size_t> send_counts,
                                               std::span<const std::size_t> recv_counts, Invalid why,
                                               const BufferView& culprit) {
  std::string text;
  const auto sizes = [&] { return " (send " + std::to_string(send.count) + ", receive " + std::to_string(recv.count) + ")"; };
  const auto number = [](std::size_t x) { return std::to_string(x); };
  switch (why) {
    case Invalid::none: case Invalid::dtype: text = "send and receive buffers differ in type"; break;
    case Invalid::space:
      text = "a " + std::string(name_of(culprit.space)) + " buffer given to " +
             (native ? "a " : "a reference algorithm on a ") + std::string(comm.backend()) + " communicator in " +
             std::string(name_of(comm.memory_space())) + " memory";
      break;
    case Invalid::mixed_spaces: text = "send and receive buffers are in different memory spaces"; break;
    case Invalid::root: text = "root " + std::to_string(root) + " outside 0.." + std::to_string(comm.size() - 1); break;
    case Invalid::counts: text = std::string(describe(collective).counts_rule) + sizes(); break;
    case Invalid::overlap:
      text = describe(collective).in_place == InPlace::none ? "send and receive buffers overlap; there is no in-place form"
                                                            : "send and receive buffers overlap but are not the in-place layout";
      text += sizes();
      break;
    case Invalid::block_counts:
      text = number(send_counts.size()) + " send counts and " + number(recv_counts.size()) + " receive counts given for " +
             number(static_cast<std::size_t>(comm.size())) + " ranks (one of each per rank)";
      break;
    case Invalid::block_sums:
      text = "send counts sum to " + number(sum_of(send_counts)) + " for a send buffer of " + number(send.count) +
             ", receive counts sum to " + number(sum_of(recv_counts)) + " for a receive buffer of " + number(recv.count) +
             " (each must equal its buffer)";
      break;
    case Invalid::self_block:
      text = "rank " + std::to_string(comm.rank()) + " sends itself " +
             number(send_counts[static_cast<std::size_t>(comm.rank())]) + " elements but expects " +
             number(recv_counts[static_cast<std::size_t>(comm.rank())]) + " from itself";
      break;
    case Invalid::stray_block_counts:
      text = "per-peer counts given (" + number(send_counts.size()) + " send, " + number(recv_counts.size()) +
             " receive), which only all_to_all_v takes";
      break;
  }
  throw Error(std::string(name_of(collective)) + ": " + text);
}

}  // namespace

void validate_collective(const Communicator& comm, Collective collective, const BufferView& send,
                         const BufferView& recv, int root, bool native, std::span<const std::size_t> send_counts,
                         std::span<const std::size_t> recv_counts) {
  const BufferView* culprit = &send;
  const Invalid why = check_collective(comm, collective, send, recv, root, native, send_counts, recv_counts, culprit);
  if (why != Invalid::none)
    reject_collective(comm, collective, send, recv, root, native, send_counts, recv_counts, why, *culprit);
}

void Communicator::native(const CollectiveCall& call) {
  const BufferView* culprit = &call.send;
  const Invalid why = check_collective(*this, call.collective, call.send, call.recv, call.root, true, call.send_counts,
                                       call.recv_counts, culprit);
  if (why != Invalid::none)
    reject_collective(*this, call.collective, call.send, call.recv, call.root, true, call.send_counts, call.recv_counts,
                      why, *culprit);
  const Watchdog::Scope scope(*watchdog_, collective_operation(call.collective, call.send, call.recv, "native"),
                              {Wait::every_rank});
  do_native(describe(call.collective), call);
}

std::shared_ptr<void> Communicator::allocate(std::size_t bytes) {
  if (memory_space() == MemorySpace::cuda) return {cuda::allocate(bytes), cuda::release};
  auto buffer = std::make_shared<HostBuffer>((bytes + 7) / 8, DataType::float64);  // 8-byte units
  return {buffer, buffer->data()};
}

BufferView Communicator::scratch(std::size_t count, DataType dtype, int slot) {
  require(slot >= 0, "negative scratch slot");
  if (scratch_.size() <= static_cast<std::size_t>(slot)) scratch_.resize(static_cast<std::size_t>(slot) + 1);
  Scratch& s = scratch_[static_cast<std::size_t>(slot)];
  const std::size_t bytes = count * size_of(dtype);
  if (bytes > s.bytes) {
    s.memory.reset();  // release before allocating the larger one
    s.memory = allocate(bytes);
    s.bytes = bytes;
  }
  return {s.memory.get(), count, dtype, memory_space()};
}

std::vector<std::string> Communicator::all_gather_strings(const std::string& mine) {
  const int n = size();
  std::int64_t length = static_cast<std::int64_t>(mine.size());
  std::vector<std::int64_t> lengths(n);
  all_gather({&length, 1, DataType::int64, MemorySpace::host},
             {lengths.data(), lengths.size(), DataType::int64, MemorySpace::host});
  std::int64_t longest = 0;
  for (auto l : lengths) longest = std::max(longest, l);
  // Pad every string to the longest, carried as int64 words (8 characters each).
  const std::size_t words = static_cast<std::size_t>((longest + 7) / 8);
  std::vector<std::int64_t> padded(words, 0), all(words * n, 0);
  std::memcpy(padded.data(), mine.data(), mine.size());
  all_gather({padded.data(), words, DataType::int64, MemorySpace::host},
             {all.data(), all.size(), DataType::int64, MemorySpace::host});
  std::vector<std::string> out(n);
  for (int r = 0; r < n; ++r)
    out[r].assign(reinterpret_cast<const char*>(all.data() + r * words), static_cast<std::size_t>(lengths[r]));
  return out;
}

std::unique_ptr<Communicator> Communicator::split_by_host() {
  const auto hosts = all_gather_strings(process_host());
  int color = rank();
  for (int r = 0; r < size(); ++r)
    if (hosts[r] == hosts[rank()]) { color = r; break; }
  return split(color, rank());
}

const Communicator::Hierarchy& Communicator::hierarchy() {
  if (hierarchy_) return *hierarchy_;
  const int n = size();
  // Each rank's host, as the index of the first rank on it.
  std::vector<int> host_of(static_cast<std::size_t>(n));
  const char* per_host = std::getenv("PARITY_RANKS_PER_HOST");
  const int k = per_host != nullptr ? std::atoi(per_host) : 0;
  if (k > 0) {
    for (int r = 0; r < n; ++r) host_of[static_cast<std::size_t>(r)] = r / k * k;
  } else {
    const auto hosts = all_gather_strings(process_host());
    for (int r = 0; r < n; ++r) {
      int first = r;
      for (int q = 0; q < r; ++q)
        if (hosts[static_cast<std::size_t>(q)] == hosts[static_cast<std::size_t>(r)]) {
          first = q;
          break;
        }
      host_of[static_cast<std::size_t>(r)] = first;
    }
  }
  std::vector<int> ranks_on(static_cast<std::size_t>(n), 0), local(static_cast<std::size_t>(n), 0);
  std::vector<int> host_index(static_cast<std::size_t>(n), -1);
  int hosts = 0;
  for (int r = 0; r < n; ++r) {
    const auto h = static_cast<std::size_t>(host_of[static_cast<std::size_t>(r)]);
    if (host_index[h] < 0) host_index[h] = hosts++;
    local[static_cast<std::size_t>(r)] = ranks_on[h]++;
  }
  auto out = std::make_unique<Hierarchy>();
  out->hosts = hosts;
  for (int r = 0; r < n; ++r)
    out->uniform = out->uniform && ranks_on[static_cast<std::size_t>(host_of[static_cast<std::size_t>(r)])] ==
                                       ranks_on[static_cast<std::size_t>(host_of[0])];
  const auto me = static_cast<std::size_t>(rank());
  out->host = split(host_of[me], rank());
  const int place = local[me];
  // Uniform: one group per place, ordered by host. Otherwise the hosts' first ranks, and the
  // others together (a group that does no work).
  out->across = split(out->uniform ? place : (place == 0 ? 0 : 1), host_index[static_cast<std::size_t>(host_of[me])]);
  out->host->counts_to_ = this;
  out->across->counts_to_ = this;
  hierarchy_ = std::move(out);
  return *hierarchy_;
}

}  // namespace parity
