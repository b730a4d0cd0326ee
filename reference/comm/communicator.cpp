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

Operation collective_operation(Collective collective, BufferView send, BufferView recv, const char* algorithm) {
  const BufferView& larger = collective == Collective::reduce_scatter ? send : recv;
  // name_of returns views of string literals, so data() is null-terminated static text.
  return {name_of(collective).data(), algorithm, static_cast<std::int64_t>(larger.count), larger.dtype, {}};
}

Communicator::Communicator(std::shared_ptr<Watchdog> watchdog) : watchdog_(std::move(watchdog)) {
  require(watchdog_ != nullptr, "communicator created without a watchdog");
}

bool Communicator::accepts(MemorySpace space, bool) const { return space == memory_space(); }

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

void validate_collective(const Communicator& comm, Collective collective, BufferView send,
                         BufferView recv, int root, bool native) {
  // Runs on every call: no text is made unless a check fails.
  const std::size_t n = static_cast<std::size_t>(comm.size());
  auto fail = [&](const std::string& why) { throw Error(std::string(name_of(collective)) + ": " + why); };
  if (send.dtype != recv.dtype) fail("send and receive buffers differ in type");
  for (const BufferView* v : {&send, &recv}) {
    const bool accepted = native ? comm.accepts(v->space, false) : v->space == comm.memory_space();
    if (!accepted && v->count != 0)
      fail("a " + std::string(name_of(v->space)) + " buffer given to " + (native ? "a " : "a reference algorithm on a ") +
           std::string(comm.backend()) + " communicator in " + std::string(name_of(comm.memory_space())) + " memory");
  }
  if (send.space != recv.space && send.count != 0 && recv.count != 0)
    fail("send and receive buffers are in different memory spaces");
  if (has_root(collective) && (root < 0 || root >= comm.size()))
    fail("root " + std::to_string(root) + " outside 0.." + std::to_string(comm.size() - 1));
  const auto sizes = [&] { return " (send " + std::to_string(send.count) + ", receive " + std::to_string(recv.count) + ")"; };
  switch (collective) {
    case Collective::all_reduce: case Collective::reduce: case Collective::broadcast:
      if (send.count != recv.count) fail("send and receive counts differ" + sizes());
      break;
    case Collective::all_gather:
      if (recv.count != send.count * n) fail("receive count must be size x send count" + sizes());
      break;
    case Collective::reduce_scatter:
      if (send.count != recv.count * n) fail("send count must be size x receive count" + sizes());
      break;
    case Collective::all_to_all:
      if (send.count != recv.count || send.count % n != 0)
        fail("send and receive counts must be equal multiples of the size" + sizes());
      break;
  }
  // Partial overlap other than the documented in-place layout is a caller bug.
  const auto* s = static_cast<const std::byte*>(send.data);
  const auto* r = static_cast<const std::byte*>(recv.data);
  const bool overlap = send.count && recv.count && s < r + recv.bytes() && r < s + send.bytes();
  if (overlap) {
    const std::size_t rank = static_cast<std::size_t>(comm.rank());
    bool in_place = s == r;
    if (collective == Collective::all_gather) in_place = s == r + rank * send.bytes();
    if (collective == Collective::reduce_scatter) in_place = r == s + rank * recv.bytes();
    if (!in_place) fail("send and receive buffers overlap but are not the in-place layout");
  }
}

namespace {
}  // namespace

Watchdog::Scope Communicator::enter_native(Collective c, BufferView send, BufferView recv, int root) {
  validate_collective(*this, c, send, recv, root, true);
  return Watchdog::Scope(*watchdog_, collective_operation(c, send, recv, "native"), {Wait::every_rank});
}

void Communicator::all_reduce(BufferView send, BufferView recv, ReduceOp op) {
  const Watchdog::Scope scope = enter_native(Collective::all_reduce, send, recv, 0);
  do_all_reduce(send, recv, op);
}
void Communicator::reduce(BufferView send, BufferView recv, ReduceOp op, int root) {
  const Watchdog::Scope scope = enter_native(Collective::reduce, send, recv, root);
  do_reduce(send, recv, op, root);
}
void Communicator::broadcast(BufferView send, BufferView recv, int root) {
  const Watchdog::Scope scope = enter_native(Collective::broadcast, send, recv, root);
  do_broadcast(send, recv, root);
}
void Communicator::all_gather(BufferView send, BufferView recv) {
  const Watchdog::Scope scope = enter_native(Collective::all_gather, send, recv, 0);
  do_all_gather(send, recv);
}
void Communicator::reduce_scatter(BufferView send, BufferView recv, ReduceOp op) {
  const Watchdog::Scope scope = enter_native(Collective::reduce_scatter, send, recv, 0);
  do_reduce_scatter(send, recv, op);
}
void Communicator::all_to_all(BufferView send, BufferView recv) {
  const Watchdog::Scope scope = enter_native(Collective::all_to_all, send, recv, 0);
  do_all_to_all(send, recv);
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
