// Backend-independent parts of the communicator: argument checks, watchdog scopes around
// every operation, traffic counters, and helpers built on the collectives.
#include "reference/comm/communicator.hpp"

#include <cstring>
#include <functional>
#include <thread>

#include "reference/core/error.hpp"
#include "reference/cuda/device.hpp"

namespace parity {

thread_local void (*yield_while_waiting)() = nullptr;

Operation collective_operation(Collective collective, const BufferView& send, const BufferView& recv, const char* algorithm) {
  const BufferView& larger = collective == Collective::reduce_scatter ? send : recv;
  // name_of returns views of string literals, so data() is null-terminated static text.
  return {name_of(collective).data(), algorithm, static_cast<std::int64_t>(larger.count), larger.dtype, {}};
}

Communicator::Communicator(std::shared_ptr<Watchdog> watchdog, MemorySpaces spaces)
    : spaces_(spaces), watchdog_(std::move(watchdog)) {
  require(watchdog_ != nullptr, "communicator created without a watchdog");
}

RequestPtr Communicator::isend(BufferView buffer, int peer, int tag) {
  if (peer < 0 || peer >= size()) throw Error("isend to rank " + std::to_string(peer) + " of " + std::to_string(size()));
  if (!accepts(buffer.space, true) && buffer.count != 0)
    throw Error("isend: a " + std::string(name_of(buffer.space)) + " buffer given to a " + std::string(backend()) + " communicator");
  RequestPtr request = do_isend(buffer, peer, tag);
  request->peer = peer;
  request->is_send = true;
  request->bytes = buffer.bytes();
  request->tag = tag;
  traffic_.bytes_sent += buffer.bytes();
  traffic_.messages_sent += 1;
  return request;
}

RequestPtr Communicator::irecv(BufferView buffer, int peer, int tag) {
  if (peer < 0 || peer >= size()) throw Error("irecv from rank " + std::to_string(peer) + " of " + std::to_string(size()));
  if (!accepts(buffer.space, true) && buffer.count != 0)
    throw Error("irecv: a " + std::string(name_of(buffer.space)) + " buffer given to a " + std::string(backend()) + " communicator");
  RequestPtr request = do_irecv(buffer, peer, tag);
  request->peer = peer;
  request->is_send = false;
  request->bytes = buffer.bytes();
  request->tag = tag;
  return request;
}

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
// over its counts). Which buffer a space problem concerns comes back in `culprit`. Inlined, so
// that a native entry's constant collective selects its own rules at compile time.
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
  const int size = comm.size();
  if (has_root(collective) && (root < 0 || root >= size)) return Invalid::root;
  const std::size_t n = static_cast<std::size_t>(size);
  bool counts = true;
  switch (collective) {
    case Collective::all_reduce: case Collective::reduce: case Collective::broadcast:
      counts = send.count == recv.count;
      break;
    case Collective::all_gather: counts = recv.count == send.count * n; break;
    case Collective::reduce_scatter: counts = send.count == recv.count * n; break;
    case Collective::all_to_all: counts = send.count == recv.count && send.count % n == 0; break;
    case Collective::all_to_all_v:
      if (send_counts.size() != n || recv_counts.size() != n) return Invalid::block_counts;
      counts = sum_of(send_counts) == send.count && sum_of(recv_counts) == recv.count;
      if (!counts) return Invalid::block_sums;
      // The one pair of counts a rank can check alone: what it sends itself is what it expects.
      if (send_counts[static_cast<std::size_t>(comm.rank())] != recv_counts[static_cast<std::size_t>(comm.rank())])
        return Invalid::self_block;
      break;
  }
  if (!counts) return Invalid::counts;
  if (!has_block_counts(collective) && (!send_counts.empty() || !recv_counts.empty())) return Invalid::stray_block_counts;
  // Partial overlap other than the documented in-place layout is a caller bug.
  const auto* s = static_cast<const std::byte*>(send.data);
  const auto* r = static_cast<const std::byte*>(recv.data);
  if (send.count && recv.count && s < r + recv.bytes() && r < s + send.bytes()) {
    const std::size_t rank = static_cast<std::size_t>(comm.rank());
    bool in_place = s == r && collective != Collective::all_to_all_v;  // which has no in-place form
    if (collective == Collective::all_gather) in_place = s == r + rank * send.bytes();
    if (collective == Collective::reduce_scatter) in_place = r == s + rank * recv.bytes();
    if (!in_place) return Invalid::overlap;
  }
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
    case Invalid::counts:
      text = collective == Collective::all_gather       ? "receive count must be size x send count"
             : collective == Collective::reduce_scatter ? "send count must be size x receive count"
             : collective == Collective::all_to_all     ? "send and receive counts must be equal multiples of the size"
                                                        : "send and receive counts differ";
      text += sizes();
      break;
    case Invalid::overlap:
      text = has_block_counts(collective) ? "send and receive buffers overlap; there is no in-place form"
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

template <Collective C>
Watchdog::Scope Communicator::enter_native(const BufferView& send, const BufferView& recv, int root,
                                           std::span<const std::size_t> send_counts,
                                           std::span<const std::size_t> recv_counts) {
  const BufferView* culprit = &send;
  const Invalid why = check_collective(*this, C, send, recv, root, true, send_counts, recv_counts, culprit);
  if (why != Invalid::none) reject_collective(*this, C, send, recv, root, true, send_counts, recv_counts, why, *culprit);
  return Watchdog::Scope(*watchdog_, collective_operation(C, send, recv, "native"), {Wait::every_rank});
}

void Communicator::all_reduce(const BufferView& send, const BufferView& recv, ReduceOp op) {
  const Watchdog::Scope scope = enter_native<Collective::all_reduce>(send, recv, 0);
  do_all_reduce(send, recv, op);
}
void Communicator::reduce(const BufferView& send, const BufferView& recv, ReduceOp op, int root) {
  const Watchdog::Scope scope = enter_native<Collective::reduce>(send, recv, root);
  do_reduce(send, recv, op, root);
}
void Communicator::broadcast(const BufferView& send, const BufferView& recv, int root) {
  const Watchdog::Scope scope = enter_native<Collective::broadcast>(send, recv, root);
  do_broadcast(send, recv, root);
}
void Communicator::all_gather(const BufferView& send, const BufferView& recv) {
  const Watchdog::Scope scope = enter_native<Collective::all_gather>(send, recv, 0);
  do_all_gather(send, recv);
}
void Communicator::reduce_scatter(const BufferView& send, const BufferView& recv, ReduceOp op) {
  const Watchdog::Scope scope = enter_native<Collective::reduce_scatter>(send, recv, 0);
  do_reduce_scatter(send, recv, op);
}
void Communicator::all_to_all(const BufferView& send, const BufferView& recv) {
  const Watchdog::Scope scope = enter_native<Collective::all_to_all>(send, recv, 0);
  do_all_to_all(send, recv);
}
void Communicator::all_to_all_v(const BufferView& send, std::span<const std::size_t> send_counts, const BufferView& recv,
                                std::span<const std::size_t> recv_counts) {
  const Watchdog::Scope scope = enter_native<Collective::all_to_all_v>(send, recv, 0, send_counts, recv_counts);
  do_all_to_all_v(send, send_counts, recv, recv_counts);
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

}  // namespace parity
