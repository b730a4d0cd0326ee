// parity bench collectives: an nccl-tests style sweep over sizes for chosen collectives and
// algorithms, with the native collective as the baseline in the same run, per-rank times kept,
// and the host copy bandwidth and alpha-beta constants measured alongside.
#include "bench/commands/bench_collectives.hpp"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <optional>

#include "bench/cli/progress.hpp"
#include "bench/cli/shared.hpp"
#include "bench/commands/collective_timing.hpp"
#include "bench/commands/command.hpp"
#include "correctness/cases/collectives.hpp"
#include "reference/comm/mirror.hpp"
#include "reference/kernels/buffer_kernels.hpp"
#include "reference/core/error.hpp"
#include "reference/cuda/device.hpp"

namespace parity::cli {
namespace {

using Clock = std::chrono::steady_clock;

// A collective with an in-place form is timed both ways.
int placements(Collective c) { return describe(c).in_place == InPlace::none ? 1 : 2; }

// The bytes each rank's send buffer holds in a row: what size_bytes counts for every rank of a
// uniform collective; with per-peer counts each rank's own sum of the pattern (size_bytes is
// their mean, collective_bytes).
std::vector<double> rank_bytes(Collective c, std::size_t count, DataType type, int n) {
  std::vector<double> out;
  for (int r = 0; r < n; ++r)
    out.push_back(has_block_counts(c) ? static_cast<double>(describe(c).send_count(count, n, r) * size_of(type))
                                      : collective_bytes(c, count, size_of(type), n));
  return out;
}

// Device-to-device copy and the element-wise reduction (a += b, as the reference algorithms
// apply to received chunks) on 256 MiB buffers, best of 5 each, timed with CUDA events.
// Bandwidth counts bytes read plus written: 2 per element byte for a copy, 3 for a reduction.
void measure_device_kernels(Session& session, record::Table& table, bool measure) {
  constexpr std::size_t kBytes = std::size_t{256} << 20;
  std::vector<double> rows;  // copy, reduce float32, reduce bfloat16
  if (measure) {
    auto a = allocator_for(MemorySpace::cuda)(kBytes), b = allocator_for(MemorySpace::cuda)(kBytes);
    for (auto* p : {a.get(), b.get()}) cuda::fill(p, kBytes / 4, static_cast<int>(DataType::float32), 1.0);
    auto best_of = [&](double moved, const std::function<void()>& kernel) {
      double best = 0;
      for (int rep = 0; rep < 6; ++rep) {
        cuda::Event start, stop;
        start.record();
        kernel();
        stop.record();
        stop.wait();
        if (rep > 0) best = std::max(best, moved / (cuda::Event::elapsed_ms(start, stop) * 1e-3) / 1e9);  // first: warm-up
      }
      return best;
    };
    rows.push_back(best_of(2.0 * kBytes, [&] { cuda::copy(b.get(), a.get(), kBytes); }));
    for (DataType type : {DataType::float32, DataType::bfloat16}) {
      const BufferView acc{b.get(), kBytes / size_of(type), type, MemorySpace::cuda};
      const BufferView in{a.get(), acc.count, type, MemorySpace::cuda};
      rows.push_back(best_of(3.0 * kBytes, [&] { reduce_into(acc, in, ReduceOp::sum); }));
    }
  }
  // Rank 0 records every measuring rank's rows.
  Communicator& world = session.world();
  const std::vector<double> copies = gather_from_ranks(world, rows.empty() ? 0.0 : rows[0]);
  for (std::size_t i = 0; i < 3; ++i) {
    const std::vector<double> all = gather_from_ranks(world, i < rows.size() ? rows[i] : 0.0);
    for (int r = 0; r < world.size(); ++r) {
      const double GBps = all[static_cast<std::size_t>(r)];
      if (GBps <= 0) continue;
      table.put({{"host", session.hosts()[static_cast<std::size_t>(r)]}, {"rank", r},
                 {"kernel", i == 0 ? "copy" : "reduce_sum"},
                 {"dtype", name_of(i == 2 ? DataType::bfloat16 : DataType::float32)},
                 {"size_bytes", static_cast<std::int64_t>(kBytes)}, {"bandwidth_GBps", GBps},
                 {"ratio_vs_copy", GBps / copies[static_cast<std::size_t>(r)]}});
      if (session.is_root() && i > 0)
        std::printf("# GPU of rank %d: reduce_sum %s %.1f GB/s = %.3f x device copy %.1f GB/s (target >= 0.9)\n", r,
                    i == 2 ? "bfloat16" : "float32", GBps, GBps / copies[static_cast<std::size_t>(r)],
                    copies[static_cast<std::size_t>(r)]);
    }
  }
}

}  // namespace

BenchPlan plan_bench(BenchOptions& options) {
  BenchPlan plan;
  options.sweep.min_bytes = parse_size(options.min_bytes, "-b/--minbytes");
  options.sweep.max_bytes = parse_size(options.max_bytes, "-e/--maxbytes");
  options.sweep.step_bytes = parse_size(options.step_bytes, "-i/--stepbytes");
  plan.sizes = options.sweep.sizes();
  if (options.iterations < 1) throw UsageError("-n/--iters must be at least 1");
  if (options.warmup < 0) throw UsageError("-w/--warmup_iters must not be negative");
  if (options.check_iterations < 0) throw UsageError("-c/--check must not be negative");
  if (options.average < 0 || options.average > 3) throw UsageError("-a/--average takes 0 (rank 0), 1 (mean), 2 (min) or 3 (max)");
  if (options.root < 0) throw UsageError("-r/--root must not be negative");

  std::vector<Collective> collectives;
  for (const auto& name : split_names(options.collectives, "--coll")) {
    if (name == "all") collectives.assign(std::begin(kAllCollectives), std::end(kAllCollectives));
    else collectives.push_back(parse_collective(name));
  }
  if (collectives.empty()) throw UsageError("--coll names no collective");
  refuse_repeats(collectives, "--coll");
  const auto requested = split_names(options.algorithms, "--algo");
  if (requested.empty()) throw UsageError("--algo names no algorithm (native always runs; all for every one)");
  // "all" is every algorithm: beside a name it would run that one twice (as --coll and -d say).
  if (requested.size() > 1 && std::find(requested.begin(), requested.end(), "all") != requested.end())
    throw UsageError("--algo names all beside other algorithms (all is every one)");
  for (const auto& name : requested) {
    if (name == "all") continue;
    const auto& all = algorithm_registry();
    if (std::none_of(all.begin(), all.end(), [&](const AlgorithmDescriptor& d) { return d.name == name; }))
      throw UsageError("unknown algorithm '" + name + "' (known: " + algorithm_names(", ") + ")");
  }
  // An algorithm asked for by name must apply to some collective asked for: `--coll broadcast
  // --algo ring` would otherwise time native alone and look like a ring result.
  for (const auto& name : requested) {
    if (name == "all" || name == "native") continue;
    const bool applies = std::any_of(collectives.begin(), collectives.end(), [&](Collective c) {
      const auto algorithms = algorithms_for(c);
      return std::any_of(algorithms.begin(), algorithms.end(), [&](const AlgorithmDescriptor* d) { return d->name == name; });
    });
    if (!applies) {
      std::string which;
      for (Collective c : collectives) {
        std::string names;
        for (const AlgorithmDescriptor* d : algorithms_for(c)) names += (names.empty() ? "" : " ") + d->name;
        which += (which.empty() ? "" : "; ") + std::string(name_of(c)) + ": " + names;
      }
      throw UsageError("--algo " + name + " does not apply to --coll " + options.collectives + " (algorithms: " + which + ")");
    }
  }
  for (Collective c : collectives) {
    BenchPlanEntry entry{c, {}};
    for (const AlgorithmDescriptor* d : algorithms_for(c)) {
      const bool wanted = d->name == "native" ||
                          std::any_of(requested.begin(), requested.end(),
                                      [&](const std::string& a) { return a == "all" || a == d->name; });
      if (wanted) entry.algorithms.push_back(d);
    }
    plan.entries.push_back(entry);
  }
  for (const auto& name : split_names(options.datatypes, "-d/--datatype")) {
    if (name == "all") plan.datatypes.assign(std::begin(kAllDataTypes), std::end(kAllDataTypes));
    else plan.datatypes.push_back(parse_data_type(name));
  }
  for (const auto& name : split_names(options.ops, "-o/--op")) {
    if (name == "all") plan.ops.assign(std::begin(kAllReduceOps), std::end(kAllReduceOps));
    else plan.ops.push_back(parse_reduce_op(name));
  }
  if (plan.datatypes.empty()) throw UsageError("-d/--datatype names no type");
  if (plan.ops.empty()) throw UsageError("-o/--op names no reduction");
  refuse_repeats(plan.datatypes, "-d/--datatype");
  refuse_repeats(plan.ops, "-o/--op");
  return plan;
}

std::uint64_t bench_result_bytes(const BenchPlan& plan) {
  // Rows: every size, algorithm, type, reduction and placement; about 30 columns of 8 bytes,
  // and 4 MiB for the other tables, attributes and HDF5's own structure.
  std::uint64_t rows = 0;
  for (const auto& e : plan.entries)
    rows += e.algorithms.size() * plan.sizes.size() * plan.datatypes.size() * (is_reducing(e.collective) ? plan.ops.size() : 1) *
            static_cast<std::size_t>(placements(e.collective));
  return (4ull << 20) + rows * 30 * 8;
}

std::size_t bench_bytes_per_rank(const BenchPlan& plan, int n) {
  std::size_t largest = 0;
  for (const auto& e : plan.entries)
    for (DataType t : plan.datatypes) {
      cases::CollectiveCase c;
      c.collective = e.collective;
      c.dtype = t;
      c.count = count_for(e.collective, plan.sizes.back(), t, n);
      largest = std::max(largest, cases::case_bytes_per_rank(c, n));
    }
  return largest;
}

HostCopy measure_host_copy(Session& session) {
  Communicator& world = session.world();
  HostCopy out;
  // --resume: the interrupted run's copy bandwidth, which the rows taken from it were set beside.
  if (session.restore_rows("/host/copy_bandwidth", "", kWholeTable, Session::kAnyCount, out.table).found) {
    session.restore_rows("/bench/device_kernels", "", kWholeTable, Session::kAnyCount, out.device_kernels);
    if (session.is_root())
      for (double GBps : out.table.get_f64("bandwidth_GBps")) out.best_GBps = std::max(out.best_GBps, GBps);
    world.broadcast({&out.best_GBps, 1, DataType::float64, MemorySpace::host},
                    {&out.best_GBps, 1, DataType::float64, MemorySpace::host}, 0);
    return out;
  }
  auto local = world.split_by_host();
  constexpr std::size_t kBytes = std::size_t{256} << 20;  // well beyond any cache
  double best = 0;
  // One host at a time would serialise the cluster; hosts measure concurrently, and within a
  // host only its first rank copies while the others wait.
  if (local->rank() == 0) {
    HostBuffer a(kBytes, DataType::float64), b(kBytes, DataType::float64);  // 8x: touch only kBytes
    std::memset(a.data(), 1, kBytes);
    std::memset(b.data(), 2, kBytes);
    for (int rep = 0; rep < 5; ++rep) {
      const auto t0 = Clock::now();
      std::memcpy(b.data(), a.data(), kBytes);
      const double s = std::chrono::duration<double>(Clock::now() - t0).count();
      best = std::max(best, static_cast<double>(kBytes) / s / 1e9);
    }
  }
  local->barrier();
  const std::vector<double> all = gather_from_ranks(world, best);
  if (session.on_gpu()) {
    measure_device_kernels(session, out.device_kernels, local->rank() == 0);
    local->barrier();
  }
  for (int r = 0; r < world.size(); ++r) {
    if (all[static_cast<std::size_t>(r)] <= 0) continue;
    out.table.put({{"host", session.hosts()[static_cast<std::size_t>(r)]}, {"rank", r},
                   {"size_bytes", static_cast<std::int64_t>(kBytes)},
                   {"bandwidth_GBps", all[static_cast<std::size_t>(r)]}});
    out.best_GBps = std::max(out.best_GBps, all[static_cast<std::size_t>(r)]);
  }
  session.record_rows("/host/copy_bandwidth", out.table, 0);  // kept if the run is cut short
  session.record_rows("/bench/device_kernels", out.device_kernels, 0);
  return out;
}

namespace {

// --resume: a row of /bench/collectives is found by what it measured.
std::string bench_key(const std::string& collective, const std::string& algorithm, const std::string& dtype,
                      const std::string& redop, std::int64_t in_place, std::int64_t count, std::int64_t iterations) {
  return collective + "|" + algorithm + "|" + dtype + "|" + redop + "|" + std::to_string(in_place) + "|" +
         std::to_string(count) + "|" + std::to_string(iterations);
}

std::string bench_row_key(const record::Table& t, std::size_t row) {
  return bench_key(t.get_str("collective")[row], t.get_str("algorithm")[row], t.get_str("dtype")[row],
                   t.get_str("redop")[row], t.get_i64("in_place")[row], t.get_i64("count")[row],
                   t.get_i64("iterations")[row]);
}

// Copies the per-rank times of row `from_row` of the resumed file as those of row `to_row`;
// each rank's bytes are the row's own (`bytes`, by rank), so a file from before that column
// resumes too.
void restore_rank_times(Session& session, std::size_t from_row, std::size_t to_row, const std::vector<double>& bytes,
                        record::Table& into) {
  const record::Table* resumed = session.resumed("/bench/collectives_rank_times");
  if (resumed == nullptr) return;
  const auto& rows = resumed->get_i64("row");
  for (std::size_t i = 0; i < rows.size(); ++i) {
    if (rows[i] != static_cast<std::int64_t>(from_row)) continue;
    into.put({{"row", static_cast<std::int64_t>(to_row)}, {"rank", resumed->get_i64("rank")[i]},
              {"host", resumed->get_str("host")[i]}, {"time_us", resumed->get_f64("time_us")[i]},
              {"size_bytes", static_cast<std::int64_t>(bytes[static_cast<std::size_t>(resumed->get_i64("rank")[i])])}});
    session.take_resumed("/bench/collectives_rank_times", i);
  }
}

void print_header(const BenchPlanEntry& e, DataType type, ReduceOp op, int n, std::size_t iterations) {
  std::printf("#\n# %s  %s%s%s  ranks %d  iterations %zu  baseline: native\n", std::string(name_of(e.collective)).c_str(),
              std::string(name_of(type)).c_str(), is_reducing(e.collective) ? " " : "",
              is_reducing(e.collective) ? std::string(name_of(op)).c_str() : "", n, iterations);
  std::printf("# %12s %12s %8s %6s %5s %-18s %-6s %10s %8s %8s %6s %10s %10s %10s %10s %7s\n", "size(B)", "count", "type",
              "redop", "root", "algorithm", "place", "time(us)", "algbw", "busbw", "#wrong", "p50(us)", "p95(us)",
              "rankmin", "rankmax", "/native");
}

}  // namespace

// What parity's wrapper (validation, the watchdog scope) adds to a native call: the same
// MPI_Allreduce timed directly and through run_collective, in pairs of calls in alternating
// order (direct first, then wrapped first), so that drift in the machine hits both alike; the
// overhead is the median of the per-pair differences, averaged over ranks. Target: under
// 0.1 us per call.
//
// Measured twice: on the world, which is what a benchmark pays, and on a one-rank
// communicator, which is the wrapper's own cost with no other rank's timing in it. On the
// world at 64 KiB the wrapper runs after a transfer that has pushed its code and data out of
// the first-level caches, so it costs more there than at 8 B (a plain 50 ns delay in its place
// comes back as 50 ns: the protocol does not magnify a late arrival).
constexpr double kHarnessTargetUs = 0.1;
constexpr std::size_t kHarnessSizes[] = {8, 64, 512, 4096, 65536};

namespace {

struct HarnessTimes {
  double direct_us = 0, wrapped_us = 0;  // median per call of each
  double overhead_us = 0;                // median of the per-pair differences (wrapped - direct)
  double spread_us = 0;                  // how far that median differs between the two halves of the pairs
};

// The wrapper's cost is the shift between the two variants of a pair: the median of the
// per-pair differences, which cancels what drifts slower than a pair (the difference of the
// two medians does not).
HarnessTimes time_harness(Communicator& comm, MPI_Comm mpi, const AlgorithmDescriptor& native, HalfAccumulate half,
                          const CollectiveCall& call, int pairs) {
  const int warmup = 50, count = static_cast<int>(call.send.count);
  std::vector<double> direct_us(static_cast<std::size_t>(pairs)), wrapped_us(static_cast<std::size_t>(pairs));
  const auto time_one = [&](bool wrapped) {
    const auto t0 = Clock::now();
    if (wrapped)
      run_collective(comm, native, call, half);
    else
      MPI_Allreduce(call.send.data, call.recv.data, count, MPI_FLOAT, MPI_SUM, mpi);
    return std::chrono::duration<double>(Clock::now() - t0).count() * 1e6;
  };
  comm.barrier();
  for (int i = -warmup; i < pairs; ++i) {
    const bool wrapped_first = (i & 1) != 0;
    const double first = time_one(wrapped_first), second = time_one(!wrapped_first);
    if (i < 0) continue;
    direct_us[static_cast<std::size_t>(i)] = wrapped_first ? second : first;
    wrapped_us[static_cast<std::size_t>(i)] = wrapped_first ? first : second;
  }
  std::vector<double> shift(direct_us.size());
  for (std::size_t i = 0; i < shift.size(); ++i) shift[i] = wrapped_us[i] - direct_us[i];
  const auto mid = shift.begin() + static_cast<std::ptrdiff_t>(shift.size() / 2);
  const double first = percentile(std::vector<double>(shift.begin(), mid), 0.5);
  const double second = percentile(std::vector<double>(mid, shift.end()), 0.5);
  return {percentile(direct_us, 0.5), percentile(wrapped_us, 0.5), percentile(shift, 0.5), std::abs(first - second)};
}

}  // namespace

void measure_harness_overhead(Communicator& comm, HalfAccumulate half, record::Table& table, bool print) {
  const AlgorithmDescriptor& native = find_algorithm(Collective::all_reduce, "native");
  HostBuffer send(std::size_t{64} << 10, DataType::float32), recv(std::size_t{64} << 10, DataType::float32);
  fill_small_values(send.view(), comm.rank());
  const std::unique_ptr<Communicator> self = comm.split(comm.rank(), 0);  // this rank alone
  double worst = 0, worst_own = 0;
  for (std::size_t bytes : kHarnessSizes) {
    const std::size_t count = bytes / 4;
    const CollectiveCall call{Collective::all_reduce, send.view().slice(0, count), recv.view().slice(0, count), ReduceOp::sum, 0};
    const int pairs = 2000;
    // The host world is MPI_COMM_WORLD's group in rank order; `self` is MPI_COMM_SELF's.
    const HarnessTimes world = time_harness(comm, MPI_COMM_WORLD, native, half, call, pairs);
    const HarnessTimes own = time_harness(*self, MPI_COMM_SELF, native, half, call, pairs);
    double sums[7] = {world.direct_us, world.wrapped_us, world.overhead_us, world.spread_us,
                      own.direct_us,   own.wrapped_us,   own.overhead_us};
    comm.all_reduce({sums, 7, DataType::float64, MemorySpace::host}, {sums, 7, DataType::float64, MemorySpace::host},
                    ReduceOp::sum);
    for (double& x : sums) x /= comm.size();
    table.put({{"size_bytes", static_cast<std::int64_t>(bytes)}, {"direct_us", sums[0]}, {"wrapped_us", sums[1]},
               {"overhead_us", sums[2]}, {"halves_spread_us", sums[3]}, {"own_direct_us", sums[4]},
               {"own_wrapped_us", sums[5]}, {"own_overhead_us", sums[6]}, {"calls", pairs}});
    worst = std::max(worst, sums[2]);
    worst_own = std::max(worst_own, sums[6]);
  }
  if (print)
    std::printf("# harness overhead per native call (8 B - 64 KiB): at most %.3f us at %d ranks, the wrapper's own "
                "cost (one rank) at most %.3f us (target < %.1f us)\n",
                worst, comm.size(), worst_own, kHarnessTargetUs);
}

void check_bench_root(const BenchOptions& options, int world_size) {
  if (options.root >= world_size)
    throw UsageError("-r/--root " + std::to_string(options.root) + " is not a rank of " + std::to_string(world_size));
}

BenchOutcome run_bench(Session& session, const BenchPlan& plan, const BenchOptions& options, const PointToPoint& p2p,
                       double copy_GBps) {
  Communicator& comm = session.world();
  const int n = comm.size();
  const bool root_prints = session.is_root();
  BenchOutcome out;
  // --resume: taken whole when the interrupted run measured it; else measured and kept if the
  // run is cut short (record_bench writes it whole at the end).
  if (!session.restore_rows("/bench/harness_overhead", "", kWholeTable, std::size(kHarnessSizes), out.harness).found) {
    measure_harness_overhead(session.host_world(), session.half(), out.harness, root_prints);
    session.record_rows("/bench/harness_overhead", out.harness, 0);
  }
  record::Table& t = out.rows;

  std::size_t total = 0;
  for (const auto& e : plan.entries)
    total += e.algorithms.size() * static_cast<std::size_t>(placements(e.collective)) * plan.sizes.size() *
             plan.datatypes.size() * (is_reducing(e.collective) ? plan.ops.size() : 1);
  Progress progress("bench", total, root_prints && !session.options().quiet);
  std::size_t done = 0;
  // busbw of the target comparison: all_reduce ring against native, messages >= 16 MiB.
  std::vector<double> ring_ratio;

  for (const auto& e : plan.entries) {
    const std::vector<ReduceOp> ops = is_reducing(e.collective) ? plan.ops : std::vector<ReduceOp>{ReduceOp::sum};
    for (DataType type : plan.datatypes)
      for (ReduceOp op : ops) {
        if (root_prints) print_header(e, type, op, n, static_cast<std::size_t>(options.iterations));
        std::vector<std::size_t> counts;
        for (std::size_t size : plan.sizes) counts.push_back(count_for(e.collective, size, type, n));
        counts.erase(std::unique(counts.begin(), counts.end()), counts.end());
        std::vector<double> avg_busbw_sum(e.algorithms.size(), 0.0);
        std::vector<int> avg_busbw_rows(e.algorithms.size(), 0);
        for (std::size_t count : counts) {
          const double bytes = collective_bytes(e.collective, count, size_of(type), n);
          const std::vector<double> bytes_by_rank = rank_bytes(e.collective, count, type, n);
          double native_busbw[2] = {0, 0};
          for (std::size_t a = 0; a < e.algorithms.size(); ++a) {
            const AlgorithmDescriptor& algorithm = *e.algorithms[a];
            for (int placement = 0; placement < placements(e.collective); ++placement) {
              const bool in_place = placement == 1;
              progress.update(done++, std::string(name_of(e.collective)) + " " + algorithm.name + " " +
                                          format_size(static_cast<std::size_t>(bytes)) + (in_place ? " in-place" : ""));
              const std::string redop_name = is_reducing(e.collective) ? std::string(name_of(op)) : "none";
              const std::size_t first_time = out.rank_times.rows();
              double restored_busbw = 0;
              const Session::Restored restored = session.restore_row(
                  "/bench/collectives",
                  bench_key(std::string(name_of(e.collective)), algorithm.name, std::string(name_of(type)), redop_name,
                            in_place ? 1 : 0, static_cast<std::int64_t>(count), options.iterations),
                  bench_row_key, t, [&](const record::Table& from, std::size_t row) -> std::int64_t {
                    restore_rank_times(session, row, t.rows() - 1, bytes_by_rank, out.rank_times);
                    restored_busbw = from.get_f64("busbw_GBps")[row];
                    return 0;
                  });
              if (restored.found) {
                session.record_rows("/bench/collectives_rank_times", out.rank_times, first_time);
                if (a == 0) native_busbw[placement] = restored_busbw;
                avg_busbw_sum[a] += restored_busbw;
                avg_busbw_rows[a] += 1;
                continue;
              }
              cases::CollectiveCase shape{e.collective, algorithm.name, type, op, count, in_place,
                                          cases::InputKind::exact, options.root};
              const RowBuffers buffers(comm, e.collective, type, op, options.root, count, in_place, session.on_gpu());
              const Timing timing =
                  time_collective(comm, algorithm, buffers.call, session.half(), options.warmup, options.iterations);
              // Correctness of this row: -c check runs of the same case with crafted inputs.
              std::int64_t wrong = -1;
              if (options.check_iterations > 0) {
                wrong = 0;
                for (int c = 0; c < options.check_iterations; ++c) wrong += cases::run_case(comm, shape, session.half(), false).wrong;
              }
              double time_s = 0;
              const auto& means = timing.rank_means;
              switch (options.average) {
                case 0: time_s = means[0]; break;
                case 1: time_s = std::accumulate(means.begin(), means.end(), 0.0) / static_cast<double>(means.size()); break;
                case 2: time_s = *std::min_element(means.begin(), means.end()); break;
                default: time_s = *std::max_element(means.begin(), means.end()); break;
              }
              const double algbw = time_s > 0 ? bytes / time_s / 1e9 : 0;
              const double busbw = algbw * algorithm.busbw_factor(n);
              if (a == 0) native_busbw[placement] = busbw;
              const double ratio = native_busbw[placement] > 0 ? busbw / native_busbw[placement] : std::nan("");
              if (e.collective == Collective::all_reduce && algorithm.name == "ring" && bytes >= (16 << 20) && n > 1)
                ring_ratio.push_back(ratio);
              avg_busbw_sum[a] += busbw;
              avg_busbw_rows[a] += 1;
              const double predicted = p2p.measured ? algorithm.predicted_seconds(n, bytes, p2p.model) : std::nan("");
              const double p50 = percentile(timing.slowest, 0.5), p95 = percentile(timing.slowest, 0.95);
              const double rank_min = *std::min_element(means.begin(), means.end());
              const double rank_max = *std::max_element(means.begin(), means.end());
              if (root_prints) {
                std::printf("  %12.0f %12zu %8s %6s %5d %-18s %-6s %10.2f %8.3f %8.3f %6lld %10.2f %10.2f %10.2f %10.2f %7.3f\n", bytes,
                            count, std::string(name_of(type)).c_str(),
                            is_reducing(e.collective) ? std::string(name_of(op)).c_str() : "none",
                            has_root(e.collective) ? options.root : -1, algorithm.name.c_str(), in_place ? "in" : "out",
                            time_s * 1e6, algbw, busbw, static_cast<long long>(wrong), p50 * 1e6, p95 * 1e6, rank_min * 1e6,
                            rank_max * 1e6, ratio);
                std::fflush(stdout);
              }
              const std::size_t row = t.rows();
              t.put({{"collective", name_of(e.collective)}, {"algorithm", algorithm.name}, {"dtype", name_of(type)},
                     {"redop", redop_name}, {"root", has_root(e.collective) ? options.root : -1},
                     {"in_place", in_place ? 1 : 0}, {"size_bytes", static_cast<std::int64_t>(bytes)},
                     {"count", static_cast<std::int64_t>(count)}, {"world_size", n}, {"iterations", options.iterations},
                     {"time_us", time_s * 1e6}, {"time_p50_us", p50 * 1e6}, {"time_p95_us", p95 * 1e6},
                     {"time_min_rank_us", rank_min * 1e6}, {"time_max_rank_us", rank_max * 1e6}, {"algbw_GBps", algbw},
                     {"busbw_GBps", busbw}, {"busbw_vs_native", ratio}, {"wrong", wrong},
                     {"predicted_time_us", predicted * 1e6},
                     {"predicted_busbw_GBps", predicted > 0 ? bytes / predicted / 1e9 * algorithm.busbw_factor(n) : std::nan("")}});
              for (int rank = 0; rank < n; ++rank) {
                out.rank_times.put({{"row", static_cast<std::int64_t>(row)}, {"rank", rank},
                                    {"host", session.hosts()[static_cast<std::size_t>(rank)]},
                                    {"time_us", means[static_cast<std::size_t>(rank)] * 1e6},
                                    {"size_bytes", static_cast<std::int64_t>(bytes_by_rank[static_cast<std::size_t>(rank)])}});
              }
              session.record_rows({{"/bench/collectives", &t, row},
                                   {"/bench/collectives_rank_times", &out.rank_times, first_time}});
            }
          }
        }
        if (root_prints) {
          for (std::size_t a = 0; a < e.algorithms.size(); ++a)
            std::printf("# Avg bus bandwidth    : %8.3f GB/s  (%s)\n",
                        avg_busbw_rows[a] ? avg_busbw_sum[a] / avg_busbw_rows[a] : 0.0, e.algorithms[a]->name.c_str());
        }
      }
  }
  progress.finish();
  if (root_prints) {
    if (copy_GBps > 0) std::printf("#\n# host memcpy bandwidth: %.2f GB/s (the ceiling for busbw on one host)\n", copy_GBps);
    if (session.on_gpu() && n == 1)
      std::printf("# one rank: native and reference algorithms time their local copies and the launch, not a network\n");
    if (p2p.measured)
      std::printf("# alpha-beta from ping-pong: alpha %.2f us, beta %.4f us/KB (%.2f GB/s)\n", p2p.model.alpha_seconds * 1e6,
                  p2p.model.beta_seconds_per_byte * 1e9, p2p.model.beta_seconds_per_byte > 0 ? 1e-9 / p2p.model.beta_seconds_per_byte : 0.0);
    if (!ring_ratio.empty()) {
      std::printf("# target: ring all_reduce busbw / native busbw for messages >= 16 MiB: min %.3f, mean %.3f over %zu rows (target >= 0.9)\n",
                  *std::min_element(ring_ratio.begin(), ring_ratio.end()),
                  std::accumulate(ring_ratio.begin(), ring_ratio.end(), 0.0) / static_cast<double>(ring_ratio.size()),
                  ring_ratio.size());
    }
    std::fflush(stdout);
  }
  return out;
}

void record_bench(Session& session, const HostCopy& copy, const BenchOutcome& bench, const BenchOptions& options) {
  if (!session.is_root()) return;
  auto& file = session.results();
  file.write_table(copy.table);
  if (copy.device_kernels.rows()) file.write_table(copy.device_kernels);
  file.write_table(bench.rows);
  file.set_attribute("/bench/collectives", "average", static_cast<std::int64_t>(options.average));
  file.set_attribute("/bench/collectives", "warmup_iterations", static_cast<std::int64_t>(options.warmup));
  file.set_attribute("/bench/collectives", "check_iterations", static_cast<std::int64_t>(options.check_iterations));
  file.write_table(bench.rank_times);
  if (bench.harness.rows()) {
    file.write_table(bench.harness);
    file.set_attribute("/bench/harness_overhead", "target_us", kHarnessTargetUs);
  }
}

namespace {

class BenchCollectives final : public CommandWith<BenchOptions> {
 public:
  BenchCollectives()
      : CommandWith({.name = "bench collectives",
                     .help = "Sweep message sizes for collectives and algorithms (nccl-tests options and columns); native is "
                             "the baseline, host copy bandwidth and alpha-beta constants are measured in the same run",
                     .order = 20,
                     .half_accumulate = true,
                     .in_run = true,
                     .tables = {&kCollectivesBenchTable, &kCollectivesRankTimesTable, &kHostCopyTable, &kDeviceKernelsTable,
                                &kPointToPointTable, &kHarnessOverheadTable},
                     .parent_help = "Benchmarks",
                     .resume_probe = ResumeProbe{{"-q", "--np", "2", "-e", "64K", "-n", "2", "--coll", "all_reduce,all_gather"},
                                                 "bench/collectives",
                                                 "collective,algorithm,dtype,redop,in_place,count,size_bytes",
                                                 {5, 60},
                                                 "TERM",
                                                 {"bench/point_to_point", "host/copy_bandwidth", "bench/harness_overhead"}}}) {}

  void declare(CommandOptions& o) override {
    BenchOptions& b = options_;
    o.add("-b,--minbytes", b.min_bytes, "Smallest message size in bytes (K, M, G suffixes)", {"1K", "1K"});
    o.add("-e,--maxbytes", b.max_bytes, "Largest message size", {"1M", "64M"});
    o.add("-i,--stepbytes", b.step_bytes, "Size increment when -f is 1");
    o.add("-f,--stepfactor", b.sweep.step_factor, "Size multiplication factor (1 = add -i instead)", {4, 4});
    o.add("-n,--iters", b.iterations, "Timed iterations per size", {10, 10}).range(1, 1 << 30);
    o.add("-w,--warmup_iters", b.warmup, "Untimed warm-up iterations per size", {3, 3}).range(0, 1 << 30);
    o.add("-c,--check", b.check_iterations,
          "Check iterations per size with crafted inputs; #wrong counts wrong elements over all ranks (0 = off)")
        .range(0, 1 << 30);
    o.add("-d,--datatype", b.datatypes, "Types, comma-separated, or all: float64 float32 float16 bfloat16 int32 int64");
    o.add("-o,--op", b.ops, "Reductions, comma-separated, or all: sum prod max min avg");
    o.add("-r,--root", b.root, "Root rank of reduce and broadcast");
    o.add("-a,--average", b.average, "Time reported across ranks: 0 rank 0, 1 mean, 2 min, 3 max");
    o.add("--coll", b.collectives,
          "Collectives, comma-separated, or all: " + collective_names(" ") +
              ". all_to_all_v's counts are uneven, " + std::string(describe(Collective::all_to_all_v).block_pattern) +
              " (0, 1 or 2 chunks: 0 for some pairs at 2 ranks or more, a rank's own block 1 chunk), chunk = "
              "size / ranks as all_to_all's; out of place only; size_bytes is the ranks' mean send buffer (n "
              "chunks), each rank's own is in /bench/collectives_rank_times",
          {"all", "all"});
    o.add("--algo", b.algorithms,
          "Algorithms, comma-separated, or all (native always runs as the baseline): " + algorithm_names(" "),
          {"all", "all"});
  }

  std::optional<int> prepare(std::optional<int>) override {
    common().result_bytes = bench_result_bytes(plan_bench(options_));
    return std::nullopt;
  }

  int execute(Job& job) override {
    Session& s = job.session;
    const BenchPlan plan = plan_bench(options_);
    check_bench_root(options_, s.world().size());
    s.admit(bench_bytes_per_rank(plan, s.world().size()), "the benchmark at -e " + options_.max_bytes);
    const HostCopy copy = measure_host_copy(s);
    const PointToPoint& p2p = job.point_to_point(plan.sizes.back());
    const BenchOutcome outcome = run_bench(s, plan, options_, p2p, copy.best_GBps);
    record_bench(s, copy, outcome, options_);
    return kExitOk;
  }
};

const RegisteredCommand<BenchCollectives> kBenchCollectives;

}  // namespace
}  // namespace parity::cli
