// The ping-pong and its alpha-beta fit (point_to_point.hpp).
#include "bench/commands/point_to_point.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <optional>

#include "bench/cli/shared.hpp"
#include "reference/comm/mirror.hpp"

namespace parity::cli {
namespace {
using Clock = std::chrono::steady_clock;
PointToPoint fit_point_to_point(PointToPoint out, const std::vector<std::size_t>& sizes, const std::vector<double>& medians) {
  out.model = theory::fit_alpha_beta(sizes, medians);
  out.measured = true;
  return out;
}
// Half round trips between rank 0 and `peer` at each size, the median of each on every rank.
std::vector<double> ping_pong(Session& session, HostBuffer& buffer, const std::vector<std::size_t>& sizes, int peer) {
  Communicator& comm = session.world();
  // On a GPU the message lives in device memory (what a collective's chunks are).
  std::optional<Mirror> device;
  // The buffer holds count() float64s; its first count() bytes are the messages.
  BufferView whole{buffer.data(), buffer.count() / 4, DataType::float32, MemorySpace::host};
  if (session.on_gpu()) {
    device.emplace(whole, BufferView{}, MemorySpace::cuda, 0, allocator_for(MemorySpace::cuda));
    whole = device->send();
  }
  std::vector<double> medians;
  for (const std::size_t size : sizes) {
    const BufferView message = whole.slice(0, size / 4);
    const int iterations = size >= (std::size_t{1} << 24) ? 5 : 20;
    std::vector<double> halves;
    comm.barrier();
    for (int it = 0; it < iterations + 2; ++it) {
      const auto t0 = Clock::now();
      if (comm.rank() == 0) {
        RequestPtr s = comm.isend(message, peer, 7);
        comm.wait(s);
        RequestPtr r = comm.irecv(message, peer, 8);
        comm.wait(r);
      } else if (comm.rank() == peer) {
        RequestPtr r = comm.irecv(message, 0, 7);
        comm.wait(r);
        RequestPtr s = comm.isend(message, 0, 8);
        comm.wait(s);
      }
      if (it >= 2) halves.push_back(std::chrono::duration<double>(Clock::now() - t0).count() / 2);
    }
    double median = percentile(halves, 0.5);
    comm.broadcast({&median, 1, DataType::float64, MemorySpace::host}, {&median, 1, DataType::float64, MemorySpace::host}, 0);
    medians.push_back(median);
  }
  return medians;
}
}  // namespace

PointToPoint measure_point_to_point(Session& session, std::size_t max_bytes) {
  Communicator& comm = session.world();
  PointToPoint out;
  if (comm.size() < 2) return out;
  const std::size_t top = std::max<std::size_t>(8, std::min<std::size_t>(max_bytes, std::size_t{64} << 20));
  HostBuffer buffer(top, DataType::float64);
  std::memset(buffer.data(), 0, top);
  std::vector<std::size_t> sizes;
  for (std::size_t s = 8; s <= top; s *= 4) sizes.push_back(s);
  std::vector<double> medians(sizes.size());
  // --resume: the interrupted run's ping-pong, so that the rows taken from it and the rows
  // measured now share one alpha-beta model.
  if (session.restore_rows("/bench/point_to_point", "", kWholeTable, sizes.size(), out.table).found) {
    if (comm.rank() == 0)
      for (std::size_t i = 0; i < sizes.size(); ++i) medians[i] = out.table.get_f64("time_us")[i] * 1e-6;
    comm.broadcast({medians.data(), medians.size(), DataType::float64, MemorySpace::host},
                   {medians.data(), medians.size(), DataType::float64, MemorySpace::host}, 0);
    return fit_point_to_point(std::move(out), sizes, medians);
  }
  const std::vector<double> measured = ping_pong(session, buffer, sizes, 1);
  for (std::size_t k = 0; k < sizes.size(); ++k) {
    medians[k] = measured[k];
    out.table.put({{"size_bytes", static_cast<std::int64_t>(sizes[k])}, {"time_us", measured[k] * 1e6}});
  }
  session.record_rows("/bench/point_to_point", out.table, 0);  // kept if the run is cut short
  return fit_point_to_point(std::move(out), sizes, medians);
}

theory::AlphaBeta measure_ping_pong(Session& session, int peer, std::size_t max_bytes) {
  std::vector<std::size_t> sizes;
  for (std::size_t s = 8; s <= max_bytes; s *= 4) sizes.push_back(s);
  HostBuffer buffer(sizes.back(), DataType::float64);
  std::memset(buffer.data(), 0, sizes.back());
  return theory::fit_alpha_beta(sizes, ping_pong(session, buffer, sizes, peer));
}

void record_point_to_point(Session& session, const PointToPoint& p2p) {
  if (!session.is_root() || !p2p.measured) return;
  auto& file = session.results();
  file.write_table(p2p.table);
  file.set_attribute("/bench/point_to_point", "alpha_us", p2p.model.alpha_seconds * 1e6);
  file.set_attribute("/bench/point_to_point", "beta_us_per_byte", p2p.model.beta_seconds_per_byte * 1e6);
}

}  // namespace parity::cli
