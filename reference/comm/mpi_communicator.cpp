// MPI backend. Point-to-point goes in messages of at most 1 GiB (MPI counts are int);
// native collectives map to MPI's, with float16/bfloat16 carried as 2-byte types and reduced
// by user operations that compute in float32 and round each result to 16 bits; avg is sum
// followed by a division, since MPI has no average. Device buffers go through pinned host
// copies unless the library is CUDA-aware (16-bit reductions always do: their user operations
// run on the host).
#include "reference/comm/mpi_communicator.hpp"

#include <mpi.h>
#if __has_include(<mpi-ext.h>)
#include <mpi-ext.h>
#endif
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <thread>
#include <vector>

#include "reference/comm/mirror.hpp"
#include "reference/comm/mpi_native.hpp"
#include "reference/kernels/buffer_kernels.hpp"
#include "reference/core/error.hpp"
#include "reference/cuda/device.hpp"

namespace parity {
void mpi_failed(int rc, const char* call) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(rc, text, &length);
  throw Error(std::string(text, static_cast<std::size_t>(length)), call);
}

void mpi_count_too_large(std::size_t count, const char* what) {
  throw Error(std::string(what) + ": " + std::to_string(count) +
              " elements exceed what one MPI call takes (2^31-1); use a reference algorithm");
}

MpiHalfTypes g_mpi_half;

namespace {

template <typename T, ReduceOp Op>
void half_user_op(void* in, void* inout, int* len, MPI_Datatype*) {
  const BufferView a{inout, static_cast<std::size_t>(*len), data_type_of<T>::value, MemorySpace::host};
  const BufferView b{in, a.count, a.dtype, MemorySpace::host};
  reduce_into(a, b, Op);
}

template <typename T>
void create_half_ops(std::array<MPI_Op, 5>& ops) {
  check_mpi(MPI_Op_create(&half_user_op<T, ReduceOp::sum>, 1, &ops[0]), "MPI_Op_create");
  check_mpi(MPI_Op_create(&half_user_op<T, ReduceOp::prod>, 1, &ops[1]), "MPI_Op_create");
  check_mpi(MPI_Op_create(&half_user_op<T, ReduceOp::max>, 1, &ops[2]), "MPI_Op_create");
  check_mpi(MPI_Op_create(&half_user_op<T, ReduceOp::min>, 1, &ops[3]), "MPI_Op_create");
  ops[4] = ops[0];  // avg = sum, then divide
}

// Page-locked host buffers, kept and reused: cudaMallocHost costs milliseconds.
class PinnedPool : public std::enable_shared_from_this<PinnedPool> {
 public:
  ~PinnedPool() {
    for (auto& [bytes, p] : free_) cuda::release_pinned(p);
  }
  // A buffer of at least `bytes`, returned to the pool when the last holder lets go.
  std::shared_ptr<std::byte> acquire(std::size_t bytes) {
    void* p = nullptr;
    std::size_t capacity = bytes;
    if (auto it = free_.lower_bound(bytes); it != free_.end()) {
      capacity = it->first;
      p = it->second;
      free_.erase(it);
    } else {
      p = cuda::allocate_pinned(bytes);
    }
    std::weak_ptr<PinnedPool> pool = weak_from_this();
    return {static_cast<std::byte*>(p), [pool, capacity](std::byte* q) {
              if (auto live = pool.lock()) live->free_.emplace(capacity, q);
              else cuda::release_pinned(q);
            }};
  }

 private:
  std::multimap<std::size_t, void*> free_;
};

class MpiRequest final : public Request {
 public:
  std::vector<MPI_Request> parts;
  std::shared_ptr<std::byte> staging;  // pinned copy of a device buffer
  std::function<void()> on_complete;   // copies a staged receive to the device
  bool test() override {
    int done = 0;
    check_mpi(MPI_Testall(static_cast<int>(parts.size()), parts.data(), &done, MPI_STATUSES_IGNORE), "MPI_Testall");
    if (done && on_complete) {
      on_complete();
      on_complete = nullptr;
    }
    return done != 0;
  }
  ~MpiRequest() override {
    // A request abandoned by an exception must not leave MPI writing into freed memory.
    for (auto& p : parts)
      if (p != MPI_REQUEST_NULL) { MPI_Cancel(&p); MPI_Request_free(&p); }
  }
};

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator(MPI_Comm comm, bool owned, std::shared_ptr<Watchdog> watchdog, MemorySpace space)
      : Communicator(std::move(watchdog), {space, true, true}), comm_(comm), owned_(owned), space_(space),
        cuda_aware_(space == MemorySpace::cuda && MpiRuntime::cuda_aware()) {
    check_mpi(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
    check_mpi(MPI_Comm_size(comm_, &size_), "MPI_Comm_size");
  }
  ~MpiCommunicator() override {
    if (owned_) MPI_Comm_free(&comm_);
  }
  std::string_view backend() const override { return "mpi"; }

  std::unique_ptr<Communicator> split(int color, int key) override {
    MPI_Comm out;
    {
      // Collective over comm_: a rank cut off from the others stalls here like anywhere else.
      Watchdog::Scope scope(watchdog(), "split");
      check_mpi(MPI_Comm_split(comm_, color, key, &out), "MPI_Comm_split");
    }
    return std::make_unique<MpiCommunicator>(out, true, shared_watchdog(), space_);
  }
  void barrier() override {
    Watchdog::Scope scope(watchdog(), "barrier");
    check_mpi(MPI_Barrier(comm_), "MPI_Barrier");
  }

 protected:
  static constexpr std::size_t kMaxMessage = std::size_t{1} << 30;

  RequestPtr do_isend(BufferView buffer, int peer, int tag) override {
    auto request = std::make_unique<MpiRequest>();
    if (buffer.space == MemorySpace::cuda) {
      if (cuda_aware_) {
        cuda::synchronize();  // the kernels that wrote the buffer must have finished
      } else {
        request->staging = pinned_->acquire(buffer.bytes());
        cuda::copy(request->staging.get(), buffer.data, buffer.bytes());
        buffer = {request->staging.get(), buffer.count, buffer.dtype, MemorySpace::host};
      }
    }
    for_each_piece(buffer, [&](void* p, int n) {
      request->parts.emplace_back();
      check_mpi(MPI_Isend(p, n, MPI_BYTE, peer, tag, comm_, &request->parts.back()), "MPI_Isend");
    });
    return request;
  }
  RequestPtr do_irecv(BufferView buffer, int peer, int tag) override {
    auto request = std::make_unique<MpiRequest>();
    if (buffer.space == MemorySpace::cuda && !cuda_aware_) {
      request->staging = pinned_->acquire(buffer.bytes());
      const BufferView device = buffer;
      std::byte* host = request->staging.get();
      request->on_complete = [device, host] { cuda::copy(device.data, host, device.bytes()); };
      buffer = {host, buffer.count, buffer.dtype, MemorySpace::host};
    }
    for_each_piece(buffer, [&](void* p, int n) {
      request->parts.emplace_back();
      check_mpi(MPI_Irecv(p, n, MPI_BYTE, peer, tag, comm_, &request->parts.back()), "MPI_Irecv");
    });
    return request;
  }

  void do_native(const CollectiveDescriptor& d, const CollectiveCall& call) override {
    if (staged(call.send, call.recv, [&](BufferView s, BufferView r) {
          CollectiveCall host = call;
          host.send = s;
          host.recv = r;
          do_native(d, host);
        }))
      return;
    d.mpi({comm_, rank_, size_}, call);
  }

 private:
  // Runs a native collective on device buffers through pinned host copies when MPI cannot
  // read them (always for 16-bit types, whose user reductions run on the host); returns false
  // when the call can go to MPI as it is.
  // The host case is the inline test; the device case is out of line, so that a host call's
  // frame stays small (it is reloaded after every transfer).
  template <typename F>
  bool staged(const BufferView& send, const BufferView& recv, F&& call) {
    const bool device = (send.space == MemorySpace::cuda && send.count) || (recv.space == MemorySpace::cuda && recv.count);
    return device && staged_on_device(send, recv, call);
  }
  template <typename F>
  [[gnu::noinline]] bool staged_on_device(const BufferView& send, const BufferView& recv, F& call) {
    if (cuda_aware_ && !is_half(recv.dtype)) {
      cuda::synchronize();
      return false;
    }
    const Mirror host(send, recv, MemorySpace::host, 0, [this](std::size_t bytes) { return pinned_->acquire(bytes); });
    call(host.send(), host.recv());
    host.copy_back_receive();
    return true;
  }

  template <typename F>
  static void for_each_piece(BufferView buffer, F&& f) {
    auto* p = static_cast<std::byte*>(buffer.data);
    std::size_t left = buffer.bytes();
    do {
      const std::size_t n = std::min(left, kMaxMessage);
      f(p, static_cast<int>(n));
      p += n;
      left -= n;
    } while (left > 0);
  }

  MPI_Comm comm_;
  bool owned_;
  MemorySpace space_;
  bool cuda_aware_;
  std::shared_ptr<PinnedPool> pinned_ = std::make_shared<PinnedPool>();
};

// The world's copy that MpiRuntime::agreed_status reduces on (one runtime per process).
MPI_Comm g_arrivals = MPI_COMM_NULL;

std::string short_host_name() {
  char name[256] = {};
  gethostname(name, sizeof(name) - 1);
  return name;
}

}  // namespace

MpiRuntime::MpiRuntime(int* argc, char*** argv) {
  int provided = 0;
  // FUNNELED: only the main thread calls MPI; the watchdog thread never does.
  check_mpi(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  set_process_identity(rank, short_host_name());
  check_mpi(MPI_Type_contiguous(2, MPI_BYTE, &g_mpi_half.type), "MPI_Type_contiguous");
  check_mpi(MPI_Type_commit(&g_mpi_half.type), "MPI_Type_commit");
  create_half_ops<float16_t>(g_mpi_half.float16_ops);
  create_half_ops<bfloat16_t>(g_mpi_half.bfloat16_ops);
  check_mpi(MPI_Comm_dup(MPI_COMM_WORLD, &g_arrivals), "MPI_Comm_dup");
}

MpiRuntime::~MpiRuntime() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  if (g_arrivals != MPI_COMM_NULL) MPI_Comm_free(&g_arrivals);
  MPI_Finalize();
}

std::optional<int> MpiRuntime::agreed_status(int status, double patience_seconds) {
  // Static: a reduction left pending (below) still reads and writes them.
  static int mine = 0, agreed = 0;
  mine = status;
  MPI_Request request = MPI_REQUEST_NULL;
  if (g_arrivals == MPI_COMM_NULL ||
      MPI_Iallreduce(&mine, &agreed, 1, MPI_INT, MPI_MAX, g_arrivals, &request) != MPI_SUCCESS)
    return std::nullopt;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(patience_seconds);
  for (;;) {
    int done = 0;
    const bool failed = MPI_Test(&request, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS;
    if (done && !failed) return agreed;
    if (failed || std::chrono::steady_clock::now() > deadline) {
      // MPI cannot cancel a collective: the reduction stays pending (and may still complete in
      // MPI_Finalize) on a communicator left unfreed.
      g_arrivals = MPI_COMM_NULL;
      return std::nullopt;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

std::unique_ptr<Communicator> MpiRuntime::world(double timeout_seconds, MemorySpace space) {
  return std::make_unique<MpiCommunicator>(MPI_COMM_WORLD, false, std::make_shared<Watchdog>(timeout_seconds), space);
}

bool MpiRuntime::cuda_aware() {
  if (const char* forced = std::getenv("PARITY_MPI_CUDA_AWARE"); forced && *forced) return std::string(forced) != "0";
#if defined(OMPI_HAVE_MPI_EXT_CUDA) && OMPI_HAVE_MPI_EXT_CUDA
  return MPIX_Query_cuda_support() == 1;
#else
  return false;
#endif
}

std::string MpiRuntime::library_version() {
  char text[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int length = 0;
  MPI_Get_library_version(text, &length);
  std::string version(text, static_cast<std::size_t>(length));
  if (auto newline = version.find('\n'); newline != std::string::npos) version.resize(newline);
  return version;
}

void MpiRuntime::abort(const std::string& message, int code) {
  std::fprintf(stderr, "%s\n", message.c_str());
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

}  // namespace parity
