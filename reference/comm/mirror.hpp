// Copies of a collective's send and receive buffers in another memory space. Used to stage
// device buffers through pinned host memory (MPI that is not CUDA-aware), host buffers through
// device memory (NCCL), and to run the host-filled conformance cases on a device. Buffers that
// overlap (the in-place layouts) share one area and keep their offsets, so in place stays in
// place; `margin` bytes around each area are mirrored too (the cases' guard bytes).
#pragma once

#include <cstddef>
#include <functional>
#include <memory>

#include "reference/core/buffer.hpp"

namespace parity {

class Mirror {
 public:
  // Memory of at least `bytes` in the target space, freed (or returned to a pool) on release.
  using Allocate = std::function<std::shared_ptr<std::byte>(std::size_t bytes)>;
  // Copies both buffers (with margins) into `space`.
  Mirror(BufferView send, BufferView recv, MemorySpace space, std::size_t margin, const Allocate& allocate);
  BufferView send() const { return send_; }
  BufferView recv() const { return recv_; }
  // Copies the receive buffer back to the original.
  void copy_back_receive() const;
  // Copies every mirrored byte back (send, receive and margins), for checks of what the
  // collective touched.
  void copy_back_all() const;

 private:
  struct Area {
    std::byte* original = nullptr;
    std::size_t bytes = 0;
    std::shared_ptr<std::byte> copy;
  };
  Area areas_[2];
  MemorySpace original_space_, mirror_space_;
  BufferView original_recv_, send_, recv_;
};

// Plain allocations in `space` (aligned host memory, or cudaMalloc on the selected device).
Mirror::Allocate allocator_for(MemorySpace space);

}  // namespace parity
