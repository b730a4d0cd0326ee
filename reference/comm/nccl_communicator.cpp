// NCCL backend (see nccl_communicator.hpp).
#include "reference/comm/nccl_communicator.hpp"

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "reference/comm/mirror.hpp"
#include "reference/comm/nccl_native.hpp"
#include "reference/kernels/buffer_kernels.hpp"
#include "reference/core/error.hpp"
#include "reference/cuda/device.hpp"
#include "reference/comm/placement.hpp"

namespace parity {
void check_nccl(ncclResult_t rc, const char* call, ncclComm_t comm) {
  if (rc == ncclSuccess || rc == ncclInProgress) return;
  std::string text = ncclGetErrorString(rc);
  if (const char* last = ncclGetLastError(comm); last && *last) text += ": " + std::string(last);
  throw Error(text, call);
}

ncclDataType_t nccl_type(DataType type) {
  switch (type) {
    case DataType::float64: return ncclFloat64;
    case DataType::float32: return ncclFloat32;
    case DataType::float16: return ncclFloat16;
    case DataType::bfloat16: return ncclBfloat16;
    case DataType::int32: return ncclInt32;
    case DataType::int64: return ncclInt64;
  }
  return ncclFloat32;
}

ncclRedOp_t nccl_op(ReduceOp op, DataType type) {
  switch (op) {
    case ReduceOp::sum: return ncclSum;
    case ReduceOp::prod: return ncclProd;
    case ReduceOp::max: return ncclMax;
    case ReduceOp::min: return ncclMin;
    case ReduceOp::avg: return is_floating(type) ? ncclAvg : ncclSum;
  }
  return ncclSum;
}

namespace {

cudaStream_t stream() { return static_cast<cudaStream_t>(cuda::stream()); }

// Sends and receives posted since the last launch, and the event that marks their completion.
struct Group {
  struct Op {
    bool send;
    void* data;
    std::size_t bytes;
    int peer;
  };
  std::vector<Op> ops;
  bool launched = false;
  std::unique_ptr<cuda::Event> done;
};

class NcclCommunicator;

class NcclRequest final : public Request {
 public:
  NcclRequest(NcclCommunicator& comm, std::shared_ptr<Group> group) : comm_(comm), group_(std::move(group)) {}
  bool test() override;

 private:
  NcclCommunicator& comm_;
  std::shared_ptr<Group> group_;
};

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(ncclComm_t comm, std::shared_ptr<Watchdog> watchdog) : Communicator(std::move(watchdog), {MemorySpace::cuda, true, false}), comm_(comm) {
    check_nccl(ncclCommUserRank(comm_, &rank_), "ncclCommUserRank", comm_);
    check_nccl(ncclCommCount(comm_, &size_), "ncclCommCount", comm_);
  }
  ~NcclCommunicator() override {
    // Work still queued (an exception mid-collective) is abandoned, not waited for.
    if (comm_) ncclCommDestroy(comm_);
  }
  std::string_view backend() const override { return "nccl"; }

  std::unique_ptr<Communicator> split(int color, int key) override {
    ncclComm_t out = nullptr;
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    check_nccl(ncclCommSplit(comm_, color, key, &out, &config), "ncclCommSplit", comm_);
    return std::make_unique<NcclCommunicator>(out, shared_watchdog());
  }

  void barrier() override {
    Watchdog::Scope scope(watchdog(), "barrier");
    const BufferView token = scratch(1, DataType::float32, kBarrierSlot);
    check_nccl(ncclAllReduce(token.data, token.data, 1, ncclFloat32, ncclSum, comm_, stream()), "ncclAllReduce", comm_);
    wait_for_stream();
  }

  bool all_reduce_on_stream(const BufferView& buffer, void* cuda_stream) override {
    if (buffer.space != MemorySpace::cuda) throw Error("all_reduce_on_stream: the buffer is not device memory");
    if (pending_) launch_pending();  // point-to-point posted earlier keeps its place
    check_nccl(ncclAllReduce(buffer.data, buffer.data, buffer.count, nccl_type(buffer.dtype), ncclSum, comm_,
                             static_cast<cudaStream_t>(cuda_stream)),
               "ncclAllReduce", comm_);
    return true;
  }

  // Launches the pending group (once) and reports whether `group` has completed.
  bool progress(Group& group) {
    if (!group.launched) launch_pending();
    if (group.done->done()) return true;
    ncclResult_t async = ncclSuccess;
    check_nccl(ncclCommGetAsyncError(comm_, &async), "ncclCommGetAsyncError", comm_);
    check_nccl(async, "NCCL (asynchronous error)", comm_);
    return false;
  }

 protected:
  RequestPtr do_isend(BufferView buffer, int peer, int tag) override { return post(true, buffer, peer, tag); }
  RequestPtr do_irecv(BufferView buffer, int peer, int tag) override { return post(false, buffer, peer, tag); }

  void do_native(const CollectiveDescriptor& d, const CollectiveCall& call) override {
    if (d.nccl == nullptr) throw Error(std::string(name_of(call.collective)) + " has no NCCL call in its descriptor");
    on_device(call.send, call.recv, [&](BufferView s, BufferView r) {
      CollectiveCall device = call;
      device.send = s;
      device.recv = r;
      d.nccl({comm_, stream(), rank_, size_, *this}, device);
    });
  }

 private:
  // Scratch slots of the backend itself, after those of the reference algorithms (0-3): two
  // for host buffers staged on the device (8, 9), then the collectives' own (kNcclScratchSlot,
  // 10), a barrier token.
  static constexpr int kHostStaging = 8, kBarrierSlot = 11;

  RequestPtr post(bool send, BufferView buffer, int peer, int) {
    if (!pending_) {
      pending_ = std::make_shared<Group>();
      pending_->done = std::make_unique<cuda::Event>();
    }
    pending_->ops.push_back({send, buffer.data, buffer.bytes(), peer});
    return std::make_unique<NcclRequest>(*this, pending_);
  }

  void launch_pending() {
    std::shared_ptr<Group> group = std::move(pending_);
    check_nccl(ncclGroupStart(), "ncclGroupStart");
    for (const Group::Op& op : group->ops) {
      if (op.send)
        check_nccl(ncclSend(op.data, op.bytes, ncclUint8, op.peer, comm_, stream()), "ncclSend", comm_);
      else
        check_nccl(ncclRecv(op.data, op.bytes, ncclUint8, op.peer, comm_, stream()), "ncclRecv", comm_);
    }
    check_nccl(ncclGroupEnd(), "ncclGroupEnd", comm_);
    group->done->record();
    group->launched = true;
  }

  // Waits for the stream, yielding the core (ranks may share cores and GPUs) and watching
  // for NCCL's asynchronous errors instead of blocking in cudaStreamSynchronize.
  void wait_for_stream() {
    cuda::Event done;
    done.record();
    while (!done.done()) {
      ncclResult_t async = ncclSuccess;
      check_nccl(ncclCommGetAsyncError(comm_, &async), "ncclCommGetAsyncError", comm_);
      check_nccl(async, "NCCL (asynchronous error)", comm_);
      if (yield_while_waiting)
        yield_while_waiting();
      else
        std::this_thread::yield();
    }
  }

  // Runs a native collective on device buffers; host buffers are staged through device
  // scratch (host bookkeeping such as all_gather_strings), keeping in-place layouts in place.
  template <typename F>
  void on_device(BufferView send, BufferView recv, F&& call) {
    if (pending_) launch_pending();  // point-to-point posted earlier keeps its place in the stream
    const bool host = (send.space == MemorySpace::host && send.count) || (recv.space == MemorySpace::host && recv.count);
    if (!host) {
      call(send, recv);
      wait_for_stream();
      return;
    }
    int slot = kHostStaging;
    const Mirror device(send, recv, MemorySpace::cuda, 0, [&](std::size_t bytes) {
      // Scratch stays owned by the communicator: the pointer is lent, not freed.
      auto* p = static_cast<std::byte*>(scratch((bytes + 3) / 4, DataType::int32, slot++).data);
      return std::shared_ptr<std::byte>(p, [](std::byte*) {});
    });
    call(device.send(), device.recv());
    wait_for_stream();
    device.copy_back_receive();
  }

  ncclComm_t comm_ = nullptr;
  std::shared_ptr<Group> pending_;
};

bool NcclRequest::test() { return comm_.progress(*group_); }

}  // namespace

bool compiled_with_nccl() { return true; }

int nccl_version() {
  int version = 0;
  if (ncclGetVersion(&version) != ncclSuccess) return 0;
  return version;
}

std::unique_ptr<Communicator> make_nccl_communicator(Communicator& bootstrap) {
  const int device = cuda::selected_device();
  require(device >= 0, "make_nccl_communicator: select a CUDA device first (cuda::select_device_for)");
  // Ranks on the same host and GPU, counted from every rank's "host/device".
  const auto where = bootstrap.all_gather_strings(process_host() + "/" + std::to_string(device));
  int sharing = 0;
  for (const auto& w : where) sharing += w == where[static_cast<std::size_t>(bootstrap.rank())] ? 1 : 0;
  const std::string problem = cuda::sharing_problem("nccl", sharing, nccl_version(), std::getenv(cuda::kNcclMultiRankVariable));
  if (!problem.empty()) throw UsageError("--backend nccl: " + problem);

  ncclUniqueId id{};
  static_assert(sizeof(id) % sizeof(std::int64_t) == 0);
  if (bootstrap.rank() == 0) check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
  bootstrap.broadcast({&id, sizeof(id) / sizeof(std::int64_t), DataType::int64, MemorySpace::host},
                      {&id, sizeof(id) / sizeof(std::int64_t), DataType::int64, MemorySpace::host}, 0);
  ncclComm_t comm = nullptr;
  check_nccl(ncclCommInitRank(&comm, bootstrap.size(), id, bootstrap.rank()), "ncclCommInitRank");
  return std::make_unique<NcclCommunicator>(comm, bootstrap.shared_watchdog());
}

}  // namespace parity
