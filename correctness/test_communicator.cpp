// The communicator itself: point-to-point, splitting, argument checks, and traffic counts
// that must equal each algorithm's descriptor exactly.
#include <functional>
#include <numeric>
#include <string>
#include <vector>

#include "correctness/mpi_test.hpp"
#include "correctness/thrown.hpp"
#include "reference/comm/algorithms.hpp"
#include "reference/core/error.hpp"
#include "reference/theory/hierarchy.hpp"

namespace parity::test {
namespace {

class CommunicatorTest : public MpiTest {};

BufferView host(std::vector<double>& v) { return {v.data(), v.size(), DataType::float64, MemorySpace::host}; }
BufferView host(std::vector<std::int64_t>& v) { return {v.data(), v.size(), DataType::int64, MemorySpace::host}; }

TEST_F(CommunicatorTest, PointToPointAroundARing) {
  const int n = comm().size(), r = comm().rank();
  std::vector<double> mine(100, r), theirs(100, -1);
  comm().send_recv(host(mine), (r + 1) % n, host(theirs), (r + n - 1) % n, 5);
  for (double x : theirs) ASSERT_EQ(x, (r + n - 1) % n);
}

// A send or receive names itself and the ranks when its peer is no rank, or its buffer lies where
// the communicator cannot reach; sends count their bytes and messages, receives do not.
TEST_F(CommunicatorTest, PointToPointRefusalsAndTraffic) {
  const int n = comm().size(), r = comm().rank();
  std::vector<double> v(3, r);
  const std::string of = " of " + std::to_string(n);
  // Error adds the rank, host and source line around the words.
  const auto says = [](const std::string& message, const std::string& words) {
    EXPECT_NE(message.find(": " + words + " ("), std::string::npos) << message;
  };
  says(message_of([&] { comm().isend(host(v), n, 0); }), "isend to rank " + std::to_string(n) + of);
  says(message_of([&] { comm().irecv(host(v), -1, 0); }), "irecv from rank -1" + of);
  const BufferView device{v.data(), v.size(), DataType::float64, MemorySpace::cuda};
  says(message_of([&] { comm().isend(device, 0, 0); }), "isend: a cuda buffer given to a mpi communicator");
  says(message_of([&] { comm().irecv(device, 0, 0); }), "irecv: a cuda buffer given to a mpi communicator");
  comm().reset_traffic();
  std::vector<double> got(3, -1);
  RequestPtr recv = comm().irecv(host(got), (r + n - 1) % n, 7);
  EXPECT_EQ(comm().traffic().messages_sent, 0u);
  RequestPtr send = comm().isend(host(v), (r + 1) % n, 7);
  EXPECT_TRUE(send->is_send);
  EXPECT_FALSE(recv->is_send);
  EXPECT_EQ(recv->peer, (r + n - 1) % n);
  EXPECT_EQ(send->bytes, 3 * sizeof(double));
  comm().wait(send);
  comm().wait(recv);
  EXPECT_EQ(comm().traffic().messages_sent, 1u);
  EXPECT_EQ(comm().traffic().bytes_sent, 3 * sizeof(double));
  EXPECT_EQ(got, std::vector<double>(3, (r + n - 1) % n));
}

TEST_F(CommunicatorTest, SplitByColorAndKey) {
  const int n = comm().size(), r = comm().rank();
  // Two groups, even and odd ranks, ordered by descending world rank.
  auto group = comm().split(r % 2, -r);
  const int members = (n + 1 - r % 2) / 2;
  EXPECT_EQ(group->size(), members);
  std::vector<std::int64_t> one = {r}, all(static_cast<std::size_t>(group->size()));
  group->all_gather(host(one), host(all));
  for (std::size_t i = 0; i + 1 < all.size(); ++i) EXPECT_GT(all[i], all[i + 1]);
  for (auto x : all) EXPECT_EQ(x % 2, r % 2);
  EXPECT_EQ(all[static_cast<std::size_t>(group->rank())], r);
}

TEST_F(CommunicatorTest, SplitByHostGroupsEveryRankOnThisMachine) {
  auto local = comm().split_by_host();
  EXPECT_EQ(local->size(), comm().size());  // tests run on one host
  const auto names = comm().all_gather_strings("rank-" + std::to_string(comm().rank()));
  for (int i = 0; i < comm().size(); ++i) EXPECT_EQ(names[static_cast<std::size_t>(i)], "rank-" + std::to_string(i));
}

TEST_F(CommunicatorTest, RefusesMismatchedBuffers) {
  std::vector<double> a(8), b(7);
  EXPECT_THROW(comm().all_reduce(host(a), host(b), ReduceOp::sum), Error);
  EXPECT_THROW(comm().reduce(host(a), host(a), ReduceOp::sum, comm().size()), Error);
  std::vector<double> c(8 * static_cast<std::size_t>(comm().size()) + 1);
  EXPECT_THROW(comm().all_gather(host(a), host(c)), Error);
  BufferView device = host(a);
  device.space = MemorySpace::cuda;
  EXPECT_THROW(comm().all_reduce(device, device, ReduceOp::sum), Error);
  try {
    comm().all_reduce(host(a), host(b), ReduceOp::sum);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("all_reduce"), std::string::npos) << e.what();
    EXPECT_EQ(e.rank(), comm().rank());
  }
}

// all_to_all_v's counts are checked before anything moves, on every rank alike, and each
// refusal names the collective and the figures.
TEST_F(CommunicatorTest, RefusesBadAllToAllVCounts) {
  const int n = comm().size(), r = comm().rank();
  const std::size_t un = static_cast<std::size_t>(n);
  std::vector<std::size_t> ones(un, 1), short_counts(un + 1, 1);
  short_counts.pop_back();
  short_counts.pop_back();  // one fewer than the ranks
  std::vector<double> send(un), recv(un), larger(un + 1);
  const auto refusal = [&](const std::function<void()>& call) {
    try {
      call();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  const auto expect_refused = [&](const std::string& text, const std::vector<std::string>& parts) {
    EXPECT_NE(text.find("all_to_all_v"), std::string::npos) << text;
    for (const auto& part : parts) EXPECT_NE(text.find(part), std::string::npos) << "'" << part << "' not in: " << text;
  };
  const std::string ranks = std::to_string(n) + " ranks";
  // A counts span of the wrong length, on either side.
  expect_refused(refusal([&] { comm().all_to_all_v(host(send), short_counts, host(recv), ones); }),
                 {std::to_string(n - 1) + " send counts", ranks});
  expect_refused(refusal([&] { comm().all_to_all_v(host(send), ones, host(recv), short_counts); }),
                 {std::to_string(n - 1) + " receive counts", ranks});
  // Sums that do not match the buffers.
  expect_refused(refusal([&] { comm().all_to_all_v(host(larger), ones, host(recv), ones); }),
                 {"send counts sum to " + std::to_string(n), "send buffer of " + std::to_string(n + 1)});
  expect_refused(refusal([&] { comm().all_to_all_v(host(send), ones, host(larger), ones); }),
                 {"receive counts sum to " + std::to_string(n), "receive buffer of " + std::to_string(n + 1)});
  // In place (or any overlap): there is no in-place form.
  expect_refused(refusal([&] { comm().all_to_all_v(host(send), ones, host(send), ones); }), {"no in-place form"});
  // What a rank sends itself must be what it expects from itself.
  std::vector<std::size_t> self_more = ones, self_less = ones;
  self_more[static_cast<std::size_t>(r)] = 2;
  self_less[static_cast<std::size_t>((r + 1) % n)] = n > 1 ? 2 : 1;
  self_less[static_cast<std::size_t>(r)] = n > 1 ? 0 : 1;
  std::vector<double> send_plus_one(un + 1), recv_same(un);
  if (n > 1) {
    expect_refused(refusal([&] { comm().all_to_all_v(host(send_plus_one), self_more, host(recv_same), self_less); }),
                   {"rank " + std::to_string(r) + " sends itself 2 elements but expects 0"});
  }
  // The same rules hold on the reference algorithm's path.
  const AlgorithmDescriptor& pairwise = find_algorithm(Collective::all_to_all_v, "pairwise");
  expect_refused(refusal([&] {
                   run_collective(comm(), pairwise,
                                  {Collective::all_to_all_v, host(larger), host(recv), ReduceOp::sum, 0, ones, ones});
                 }),
                 {"send buffer of " + std::to_string(n + 1)});
  // Counts given to a collective that takes none are a caller's mistake too.
  const std::string stray = refusal([&] {
    run_collective(comm(), find_algorithm(Collective::all_to_all, "pairwise"),
                   {Collective::all_to_all, host(send), host(recv), ReduceOp::sum, 0, ones, ones});
  });
  EXPECT_NE(stray.find("all_to_all: per-peer counts given"), std::string::npos) << stray;
  // And good counts pass: every rank sends rank p one element and gets one from each.
  std::vector<double> mine(un, r), theirs(un, -1);
  comm().all_to_all_v(host(mine), ones, host(theirs), ones);
  for (int q = 0; q < n; ++q) EXPECT_EQ(theirs[static_cast<std::size_t>(q)], q);
}

// Bytes sent by each reference algorithm, counted by the communicator, equal the descriptor's
// formula exactly when the count divides evenly (840 = lcm(1..8) elements per block unit).
TEST_F(CommunicatorTest, TrafficMatchesEveryDescriptor) {
  const int n = comm().size();
  const std::size_t chunk = 840 * 4;
  for (const auto& d : algorithm_registry()) {
    if (d.name == "native") continue;
    // Per-peer counts in the descriptor's pattern, whose bytes the algorithm's formula assumes.
    const PeerCounts blocks = peer_counts(d.collective, chunk, n, comm().rank());
    const std::size_t send_count = describe(d.collective).send_count(chunk, n, comm().rank());
    const std::size_t recv_count = describe(d.collective).recv_count(chunk, n, comm().rank());
    std::vector<double> send(send_count, 1.0), recv(recv_count, 0.0);
    comm().reset_traffic();
    run_collective(comm(), d, {d.collective, host(send), host(recv), ReduceOp::sum, 0, blocks.send, blocks.recv});
    if (d.collective == Collective::all_to_all_v) {
      // A block of no elements is no message at all: one message per peer with a block.
      std::uint64_t blocks_to_peers = 0;
      for (int p = 0; p < n; ++p) blocks_to_peers += p != comm().rank() && blocks.send[static_cast<std::size_t>(p)] > 0;
      EXPECT_EQ(comm().traffic().messages_sent, blocks_to_peers) << d.name;
    }
    std::vector<double> sent = {static_cast<double>(comm().traffic().bytes_sent)};
    comm().all_reduce(host(sent), host(sent), ReduceOp::sum);
    const double bytes = collective_bytes(d.collective, chunk, sizeof(double), n);
    EXPECT_DOUBLE_EQ(sent[0] / n, d.bytes_sent_per_rank(n, bytes)) << name_of(d.collective) << " " << d.name;
  }
}

TEST_F(CommunicatorTest, RingAllReduceSendsTwoNMinusOneOverN) {
  const int n = comm().size();
  std::vector<double> data(840 * 16, 1.0);
  comm().reset_traffic();
  run_collective(comm(), find_algorithm(Collective::all_reduce, "ring"),
                 {Collective::all_reduce, host(data), host(data), ReduceOp::sum, 0});
  const double bytes = static_cast<double>(data.size() * sizeof(double));
  EXPECT_EQ(static_cast<double>(comm().traffic().bytes_sent), 2.0 * (n - 1) / n * bytes);
  EXPECT_EQ(comm().traffic().messages_sent, static_cast<std::uint64_t>(2 * (n - 1)));
  for (double x : data) ASSERT_EQ(x, n);
}

// The hierarchical all-reduce's bytes per level (theory/hierarchy.hpp), counted on the levels'
// own communicators, and the two adding up to what the whole communicator counted. All ranks on
// one machine are one host unless PARITY_RANKS_PER_HOST makes several: CTest runs this with 2
// per host at 3, 4 and 5 ranks (hosts of 2+1, 2+2 and 2+2+1).
TEST_F(CommunicatorTest, HierarchicalAllReduceSendsEachLevelsShare) {
  const int n = comm().size();
  const Communicator::Hierarchy& levels = comm().hierarchy();
  // Every host's size, from its first rank.
  std::vector<int> ranks_per_host;
  for (const std::string& size : comm().all_gather_strings(std::to_string(levels.host->rank() == 0 ? levels.host->size() : 0)))
    if (size != "0") ranks_per_host.push_back(std::stoi(size));
  ASSERT_EQ(static_cast<int>(ranks_per_host.size()), levels.hosts);
  ASSERT_EQ(std::accumulate(ranks_per_host.begin(), ranks_per_host.end(), 0), n);

  std::vector<double> data(840 * 8, 1.0);  // every block of every level the same size (n <= 8)
  comm().reset_traffic();
  levels.host->reset_traffic();
  levels.across->reset_traffic();
  run_collective(comm(), find_algorithm(Collective::all_reduce, "hierarchical"),
                 {Collective::all_reduce, host(data), host(data), ReduceOp::sum, 0});
  for (double x : data) ASSERT_EQ(x, n);
  std::vector<double> sent = {static_cast<double>(levels.host->traffic().bytes_sent),
                              static_cast<double>(levels.across->traffic().bytes_sent),
                              static_cast<double>(comm().traffic().bytes_sent)};
  comm().all_reduce(host(sent), host(sent), ReduceOp::sum);
  const double bytes = static_cast<double>(data.size() * sizeof(double));
  const theory::LevelBytes want = theory::hierarchical_all_reduce_bytes(ranks_per_host, bytes);
  EXPECT_DOUBLE_EQ(sent[0] / n, want.within_hosts);
  EXPECT_DOUBLE_EQ(sent[1] / n, want.across_hosts);
  EXPECT_DOUBLE_EQ(sent[2], sent[0] + sent[1]);
  EXPECT_DOUBLE_EQ(sent[2] / n, 2.0 * (n - 1) / n * bytes);  // the flat ring's, on any layout
}

// The naive all-reduce's root adds the values in rank order, as its summary says: with 1, 2^24
// and -2^24 on ranks 0, 1 and 2, float32 gives (1 + 2^24) - 2^24 = 0 (the 1 is lost to the
// rounding of 2^24 + 1); any other order keeps it.
TEST_F(CommunicatorTest, NaiveAllReduceAddsInRankOrder) {
  if (comm().size() < 3) GTEST_SKIP() << "three ranks make the order visible";
  const float first_three[] = {1.0f, 16777216.0f, -16777216.0f};
  const int r = comm().rank();
  std::vector<float> v(5, r < 3 ? first_three[r] : 0.0f);
  const BufferView buffer{v.data(), v.size(), DataType::float32, MemorySpace::host};
  run_collective(comm(), find_algorithm(Collective::all_reduce, "naive"),
                 {Collective::all_reduce, buffer, buffer, ReduceOp::sum, 0});
  for (float x : v) ASSERT_EQ(x, 0.0f);
}

// Send and receive buffers that touch end to end in one array do not overlap: every algorithm
// takes them, either way round; one element in common is refused.
TEST_F(CommunicatorTest, BuffersThatOnlyTouchAreNotAnOverlap) {
  const int n = comm().size();
  for (const AlgorithmDescriptor* a : algorithms_for(Collective::all_reduce)) {
    for (const bool receive_after : {true, false}) {
      std::vector<double> v(16, -1.0);
      double* const send = v.data() + (receive_after ? 0 : 8);
      double* const recv = v.data() + (receive_after ? 8 : 0);
      for (int i = 0; i < 8; ++i) send[i] = comm().rank() + 1 + i;
      run_collective(comm(), *a, {Collective::all_reduce, {send, 8, DataType::float64, MemorySpace::host},
                                  {recv, 8, DataType::float64, MemorySpace::host}, ReduceOp::sum, 0});
      for (int i = 0; i < 8; ++i) ASSERT_EQ(recv[i], n * (n + 1) / 2.0 + n * i) << a->name << " element " << i;
    }
    std::vector<double> v(15, 1.0);
    EXPECT_THROW(run_collective(comm(), *a, {Collective::all_reduce, {v.data(), 8, DataType::float64, MemorySpace::host},
                                             {v.data() + 7, 8, DataType::float64, MemorySpace::host}, ReduceOp::sum, 0}),
                 Error)
        << a->name;
  }
}

TEST_F(CommunicatorTest, ScratchIsReusedAndGrows) {
  BufferView a = comm().scratch(100, DataType::float32, 0);
  BufferView b = comm().scratch(50, DataType::float32, 0);
  EXPECT_EQ(a.data, b.data);
  BufferView c = comm().scratch(1000, DataType::float64, 0);
  EXPECT_EQ(c.count, 1000u);
  BufferView d = comm().scratch(10, DataType::float32, 1);
  EXPECT_NE(c.data, d.data);
}

}  // namespace
}  // namespace parity::test
