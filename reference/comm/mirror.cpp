// Mirrored buffers (see mirror.hpp).
#include "reference/comm/mirror.hpp"

#include <algorithm>

#include "reference/kernels/buffer_kernels.hpp"
#include "reference/cuda/device.hpp"

namespace parity {

Mirror::Mirror(BufferView send, BufferView recv, MemorySpace space, std::size_t margin, const Allocate& allocate)
    : original_space_(send.count ? send.space : recv.space), mirror_space_(space), original_recv_(recv) {
  auto* s = static_cast<std::byte*>(send.data);
  auto* r = static_cast<std::byte*>(recv.data);
  const bool overlap = send.bytes() && recv.bytes() && s < r + recv.bytes() && r < s + send.bytes();
  // One area for overlapping buffers, else one each; an empty buffer needs none.
  auto make = [&](Area& area, std::byte* first, std::byte* last) {
    if (first == last) return;
    area.original = first - margin;
    area.bytes = static_cast<std::size_t>(last - first) + 2 * margin;
    area.copy = allocate(area.bytes);
    copy_bytes(area.copy.get(), space, area.original, original_space_, area.bytes);
  };
  auto place = [&](const Area& area, BufferView v) {
    BufferView out = v;
    out.space = space;
    out.data = v.count ? area.copy.get() + (static_cast<std::byte*>(v.data) - area.original) : nullptr;
    return out;
  };
  if (overlap) {
    make(areas_[0], std::min(s, r), std::max(s + send.bytes(), r + recv.bytes()));
    send_ = place(areas_[0], send);
    recv_ = place(areas_[0], recv);
  } else {
    if (send.bytes()) make(areas_[0], s, s + send.bytes());
    if (recv.bytes()) make(areas_[1], r, r + recv.bytes());
    send_ = place(areas_[0], send);
    recv_ = place(areas_[1], recv);
  }
}

void Mirror::copy_back_receive() const {
  copy_bytes(original_recv_.data, original_space_, recv_.data, mirror_space_, original_recv_.bytes());
}

void Mirror::copy_back_all() const {
  for (const Area& area : areas_)
    if (area.bytes) copy_bytes(area.original, original_space_, area.copy.get(), mirror_space_, area.bytes);
}

Mirror::Allocate allocator_for(MemorySpace space) {
  if (space == MemorySpace::cuda)
    return [](std::size_t bytes) { return std::shared_ptr<std::byte>(static_cast<std::byte*>(cuda::allocate(bytes)), cuda::release); };
  return [](std::size_t bytes) {
    auto buffer = std::make_shared<HostBuffer>(bytes, DataType::int32);  // 4 bytes per element: room to spare
    return std::shared_ptr<std::byte>(buffer, static_cast<std::byte*>(buffer->data()));
  };
}

}  // namespace parity
