// Collective conformance cases: crafted inputs, guarded buffers, expected results computed
// element by element from the same input function every rank can evaluate for any rank.
#include "correctness/cases/collectives.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <span>

#include "correctness/cases/family.hpp"
#include "reference/comm/mirror.hpp"
#include "reference/kernels/buffer_kernels.hpp"
#include "reference/core/error.hpp"
#include "reference/core/tolerance.hpp"
#include "reference/simd/simd.hpp"

namespace parity::cases {
namespace {

constexpr std::size_t kGuardBytes = 256;
constexpr std::uint8_t kGuardByte = 0xA5;
constexpr std::int64_t kValueCap = std::int64_t{1} << 20;  // keeps every crafted value exact in float64
constexpr int kMessagesShown = 4;
// Elements the exact check compares at once before looking at them one by one.
constexpr std::size_t kCheckChunk = 1024;

// A cheap, well-mixed hash (splitmix64's finaliser) of an element's coordinates.
std::uint64_t hash(std::uint64_t salt, std::uint64_t rank, std::uint64_t index) {
  std::uint64_t h = index * 0x9E3779B97F4A7C15ULL + rank * 0xC2B2AE3D27D4EB4FULL + salt;
  h ^= h >> 30;
  h *= 0xBF58476D1CE4E5B9ULL;
  h ^= h >> 27;
  h *= 0x94D049BB133111EBULL;
  return h ^ (h >> 31);
}

double round_to(DataType type, double x) {
  return visit_data_type(type, [x](auto tag) { return to_double(from_double<decltype(tag)>(x)); });
}

// The value rank k puts at index i of its send buffer. Evaluated n times per output element
// for the expected results, so kept cheap: no division, no calls.
struct Inputs {
  enum class Pattern { random, integers, sums, products, averages };
  CollectiveCase c;
  int n;
  std::uint64_t salt;
  std::uint64_t width;  // crafted integers lie in [-range, range]; width = 2 * range + 1
  std::int64_t range;
  Pattern pattern;
  // Sums: v(k, i) = base(i) + g(k, i), with g small and periodic in i (period kPeriod), so the
  // expected sum n * base(i) + sum_k g(k, i mod kPeriod) costs O(1) per element, not O(n).
  static constexpr std::uint64_t kPeriod = 61;
  std::int64_t spread = 0;
  std::vector<double> spread_sums;

  Inputs(const CollectiveCase& cc, int world) : c(cc), n(world) {
    // The algorithm is left out of the seed: every algorithm of a case, native included, sees
    // the same inputs and must produce the same exact results.
    CollectiveCase same_inputs = c;
    same_inputs.algorithm.clear();
    salt = std::hash<std::string>{}(same_inputs.name());
    const std::int64_t limit = std::min(exact_integer_limit(c.dtype), kValueCap);
    // Partial sums of up to n terms stay within the exact range; avg values carry a +-e pair
    // on top of the base value (below), so they get half the room.
    const bool reducing = is_reducing(c.collective);
    if (!reducing || c.op == ReduceOp::max || c.op == ReduceOp::min) range = limit;
    else if (c.op == ReduceOp::avg) range = limit / (2 * n);
    else range = limit / n;
    width = static_cast<std::uint64_t>(2 * range + 1);
    if (c.input == InputKind::random) pattern = Pattern::random;
    else if (reducing && c.op == ReduceOp::prod) pattern = Pattern::products;
    else if (reducing && c.op == ReduceOp::avg) pattern = Pattern::averages;
    else if (reducing && c.op == ReduceOp::sum) pattern = Pattern::sums;
    else pattern = Pattern::integers;
    if (pattern == Pattern::sums) {
      // |base| + |g| <= limit / n keeps every partial sum exact.
      spread = std::min<std::int64_t>(8, range / 2);
      range -= spread;
      width = static_cast<std::uint64_t>(2 * range + 1);
      spread_sums.assign(kPeriod, 0.0);
      for (std::uint64_t m = 0; m < kPeriod; ++m)
        for (int k = 0; k < n; ++k) spread_sums[m] += static_cast<double>(spread_term(k, m));
    }
  }

  std::int64_t spread_term(int k, std::uint64_t i) const {
    const auto period = static_cast<std::uint64_t>(2 * spread + 1);
    return static_cast<std::int64_t>((static_cast<std::uint64_t>(k + 1) * (i % kPeriod + 1)) % period) - spread;
  }
  double base(std::size_t i) const { return static_cast<double>(integer(hash(salt, 1u << 31, i))); }

  // The exact reduction over all ranks where it has a closed form; NaN where it has none.
  double closed_form(std::size_t i) const {
    if (pattern == Pattern::sums) return n * base(i) + spread_sums[i % kPeriod];
    if (pattern == Pattern::averages) return base(i);  // the +-e pairs cancel
    return std::numeric_limits<double>::quiet_NaN();
  }

  // Uniform in [-range, range] from the top 32 bits of h (multiply-shift, no division).
  std::int64_t integer(std::uint64_t h) const {
    return static_cast<std::int64_t>(((h >> 32) * width) >> 32) - range;
  }

  double value(int k, std::size_t i) const {
    const std::uint64_t h = hash(salt, static_cast<std::uint64_t>(k), i);
    switch (pattern) {
      case Pattern::random: return round_to(c.dtype, static_cast<double>(h >> 11) * 0x1p-52 - 1.0);
      case Pattern::integers: return static_cast<double>(integer(h));
      case Pattern::sums: return base(i) + static_cast<double>(spread_term(k, i));
      case Pattern::products: {
        // +-1 or +-2, with 2 only on the first 7 ranks: |product| <= 2^7, exact in every type.
        const double magnitude = (k < 7 && (h & 3) == 0) ? 2.0 : 1.0;
        return (h >> 8) & 1 ? -magnitude : magnitude;
      }
      case Pattern::averages: break;
    }
    // base(i) + e on rank 2j and - e on rank 2j+1: the sum is exactly n * base(i), so the
    // average is exact too, in any reduction order.
    const double b = base(i);
    if (k % 2 == 0 && k + 1 >= n) return b;  // an odd rank count leaves the last alone
    const double e = static_cast<double>(integer(hash(salt, static_cast<std::uint64_t>(k / 2) + (1u << 30), i)));
    return k % 2 == 0 ? b + e : b - e;
  }
};

struct Expected {
  double value;
  double sum_abs;  // for the error bound of random inputs
};

// What element j of rank r's output must be: an input element of some rank, or the reduction
// of every rank's at one index (the collective's descriptor says which).
Expected expected(const Inputs& in, int r, std::size_t j) {
  const CollectiveCase& c = in.c;
  const Source from = describe(c.collective).source(c.count, in.n, c.root, r, j);
  if (from.rank == Source::kNowhere) return {std::numeric_limits<double>::quiet_NaN(), 0};  // matches nothing
  if (from.rank >= 0) return {in.value(from.rank, from.index), 0};
  const std::size_t index = from.index;
  if (const double closed = in.closed_form(index); !std::isnan(closed)) return {closed, 0};
  double acc = in.value(0, index), sum_abs = std::fabs(acc);
  for (int k = 1; k < in.n; ++k) {
    const double x = in.value(k, index);
    sum_abs += std::fabs(x);
    switch (c.op) {
      case ReduceOp::sum: case ReduceOp::avg: acc += x; break;
      case ReduceOp::prod: acc *= x; break;
      case ReduceOp::max: acc = std::max(acc, x); break;
      case ReduceOp::min: acc = std::min(acc, x); break;
    }
  }
  if (c.op == ReduceOp::avg) acc = is_floating(c.dtype) ? acc / in.n : std::trunc(acc / in.n);
  return {acc, sum_abs};
}

// Host memory kept between cases: the large cases would otherwise spend much of their time
// in the kernel, zeroing fresh pages for every buffer. Buffers come back on destruction.
class PooledMemory {
 public:
  explicit PooledMemory(std::size_t bytes) {
    auto& pool = free_list();
    // Smallest free buffer that fits.
    auto best = pool.end();
    for (auto it = pool.begin(); it != pool.end(); ++it)
      if (it->count() * 8 >= bytes && (best == pool.end() || it->count() < best->count())) best = it;
    if (best != pool.end()) {
      buffer_ = std::move(*best);
      pool.erase(best);
    } else {
      buffer_ = HostBuffer((bytes + 7) / 8, DataType::float64);
    }
  }
  ~PooledMemory() {
    auto& pool = free_list();
    pool.push_back(std::move(buffer_));
    if (pool.size() > kKept) pool.erase(pool.begin());  // oldest first
  }
  PooledMemory(const PooledMemory&) = delete;
  PooledMemory& operator=(const PooledMemory&) = delete;
  void* data() const { return buffer_.data(); }

 private:
  static constexpr std::size_t kKept = 6;
  // Never destroyed: buffers held by other statics (the kept inputs and expected values) come
  // back to it as the process ends, whatever the order of static destruction.
  static std::vector<HostBuffer>& free_list() {
    static auto* list = new std::vector<HostBuffer>;
    return *list;
  }
  HostBuffer buffer_;
};

// A buffer with guard bytes on both sides; payload elements start poisoned (NaN, or the
// smallest integer) so an element the collective never writes cannot pass.
class GuardedBuffer {
 public:
  GuardedBuffer(std::size_t count, DataType type)
      : storage_(2 * kGuardBytes + count * size_of(type)), count_(count), type_(type) {
    auto* bytes = static_cast<std::uint8_t*>(storage_.data());
    std::memset(bytes, kGuardByte, kGuardBytes);
    std::memset(bytes + kGuardBytes + count * size_of(type), kGuardByte, kGuardBytes);
    visit_data_type(type, [&](auto tag) {
      using T = decltype(tag);
      T poison;
      if constexpr (std::is_integral_v<T>) poison = std::numeric_limits<T>::min();
      else poison = from_double<T>(std::numeric_limits<double>::quiet_NaN());
      std::fill_n(view().template as<T>(), count, poison);
    });
  }
  BufferView view() const {
    return {static_cast<std::uint8_t*>(storage_.data()) + kGuardBytes, count_, type_, MemorySpace::host};
  }
  bool guards_intact() const {
    const auto* bytes = static_cast<const std::uint8_t*>(storage_.data());
    const std::size_t tail = kGuardBytes + count_ * size_of(type_);
    for (std::size_t i = 0; i < kGuardBytes; ++i)
      if (bytes[i] != kGuardByte || bytes[tail + i] != kGuardByte) return false;
    return true;
  }

 private:
  PooledMemory storage_;
  std::size_t count_;
  DataType type_;
};

struct LocalCheck {
  double max_abs = 0, max_rel = 0, tolerance = 0;
  std::int64_t wrong = 0;
  bool guard_ok = true;
  std::string message;
};

void note(LocalCheck& check, const std::string& text) {
  if (check.wrong <= kMessagesShown) check.message += (check.message.empty() ? "" : "; ") + text;
}

std::string format_number(double x) {
  char text[40];
  std::snprintf(text, sizeof(text), "%.9g", x);
  return text;
}

template <typename T>
void fill_inputs(BufferView target, const Inputs& in, int rank, std::size_t first_index) {
  T* p = target.as<T>();
  for (std::size_t i = 0; i < target.count; ++i) p[i] = from_double<T>(in.value(rank, first_index + i));
}

// Exact expected values of this rank's output, computed once per case and shared by the
// algorithm's check and the native one (n input evaluations per element; the large cases
// would otherwise spend most of their time here). Stored as float: crafted results are
// integers of magnitude at most 2^20 (kValueCap), exact in float's 24-bit significand. In
// pooled memory, as the buffers are: a fresh 128 MiB vector zeroed for every large case cost
// more than its values.
class ExactExpectations {
 public:
  ExactExpectations(const Inputs& in, int rank, std::size_t count) : memory_(count * sizeof(float)), count_(count) {
    float* values = static_cast<float*>(memory_.data());
    for (std::size_t j = 0; j < count; ++j) values[j] = static_cast<float>(expected(in, rank, j).value);
  }
  std::span<const float> values() const { return {static_cast<const float*>(memory_.data()), count_}; }

 private:
  PooledMemory memory_;
  std::size_t count_;
};

// Whether got[j] equals want[j] for every j < n (a NaN equals nothing).
template <typename T>
bool all_equal(const T* got, const float* want, std::size_t n) {
  bool same = true;
  if constexpr (std::is_same_v<T, float16_t> || std::is_same_v<T, bfloat16_t>) {
    float widened[kCheckChunk];
    simd::widen(got, widened, n);
    for (std::size_t j = 0; j < n; ++j) same &= widened[j] == want[j];
  } else {
    for (std::size_t j = 0; j < n; ++j) same &= to_double(got[j]) == static_cast<double>(want[j]);
  }
  return same;
}

// What the cases of one set of inputs share, kept from the last case for the next when it has
// the same inputs (every algorithm of a case sees the same: the large cases of a collective run
// their algorithms one after another, conformance_grid): this rank's exact expected values and
// its filled send buffer. Keyed by everything of the case but its algorithm (its name without
// the algorithm, as Inputs seeds, and its root, which the name leaves out), the world, the rank
// and the element count.
struct KeptKey {
  std::string inputs;
  int root = 0, n = 0, rank = -1;
  std::size_t count = 0;
  bool operator==(const KeptKey&) const = default;
};

KeptKey kept_key(const Inputs& in, int rank, std::size_t count) {
  CollectiveCase same_inputs = in.c;
  same_inputs.algorithm.clear();
  return {same_inputs.name(), in.c.root, in.n, rank, count};
}

// The value kept for `key`: the last one make() gave at this call site when the key is the same,
// else a new one from make(), kept in its place (the old one's memory back to the pool first).
template <typename Make>
auto kept_for(KeptKey key, Make make) {
  static KeptKey last_key;
  static decltype(make()) kept;
  if (!kept || !(last_key == key)) {
    kept.reset();
    kept = make();
    last_key = std::move(key);
  }
  return kept;
}

std::shared_ptr<const ExactExpectations> exact_expectations(const Inputs& in, int rank, std::size_t count) {
  return kept_for(kept_key(in, rank, count),
                  [&] { return std::make_shared<const ExactExpectations>(in, rank, count); });
}

// Fills target with this rank's inputs (by fill), copied from the last case's when it had the
// same; the copy is taken before any collective runs on them.
void fill_kept_inputs(BufferView target, const Inputs& in, int rank,
                      void (*fill)(BufferView, const Inputs&, int, std::size_t)) {
  bool filled = false;
  const auto copy = kept_for(kept_key(in, rank, target.count), [&] {
    fill(target, in, rank, 0);
    filled = true;
    auto made = std::make_shared<const PooledMemory>(target.bytes());
    if (target.count) std::memcpy(made->data(), target.data, target.bytes());
    return made;
  });
  if (!filled && target.count) std::memcpy(target.data, copy->data(), target.bytes());
}

template <typename T>
void check_output(LocalCheck& check, BufferView out, const Inputs& in, int rank, HalfAccumulate half,
                  const std::string& label, std::span<const float> exact) {
  const T* p = out.as<const T>();
  const bool random = in.c.input == InputKind::random;
  // Accumulation precision: widened 16-bit data is combined in float32 and rounded once.
  const bool widened = is_half(in.c.dtype) && half == HalfAccumulate::float32;
  const double accumulate_u = widened ? unit_roundoff(DataType::float32) : unit_roundoff(in.c.dtype);
  const double storage_u = widened ? unit_roundoff(in.c.dtype) : 0.0;
  // Exact inputs pass a chunk at once where every element equals its expectation (the loop
  // below would find no error there and note nothing); it looks at the others element by element.
  for (std::size_t first = 0; first < out.count; first += kCheckChunk) {
    const std::size_t end = std::min(out.count, first + kCheckChunk);
    if (!random && all_equal(p + first, exact.data() + first, end - first)) continue;
    for (std::size_t j = first; j < end; ++j) {
      const Expected e = random ? expected(in, rank, j) : Expected{exact[j], 0};
      const double got = to_double(p[j]);
      const double error = std::fabs(got - e.value);
      double bound = 0;
      if (random)
        bound = tolerance::reduction_bound(in.n, accumulate_u, storage_u, e.sum_abs, in.c.op == ReduceOp::avg);
      check.tolerance = std::max(check.tolerance, bound);
      if (!(error <= bound)) {  // NaN (an unwritten element) fails here
        ++check.wrong;
        note(check, label + " rank " + std::to_string(rank) + " [" + std::to_string(j) + "] got " +
                        format_number(got) + " expected " + format_number(e.value));
      }
      if (std::isfinite(error)) {
        check.max_abs = std::max(check.max_abs, error);
        if (e.value != 0) check.max_rel = std::max(check.max_rel, error / std::fabs(e.value));
      } else {
        check.max_abs = std::numeric_limits<double>::infinity();
      }
    }
  }
}

// A copy of an input buffer, to prove afterwards that the collective left it alone.
class Snapshot {
 public:
  explicit Snapshot(BufferView b) : copy_(b.bytes()) {
    if (b.count) std::memcpy(copy_.data(), b.data, b.bytes());
  }
  bool unchanged(BufferView b) const { return b.count == 0 || std::memcmp(b.data, copy_.data(), b.bytes()) == 0; }

 private:
  PooledMemory copy_;
};

// Buffer sizes of rank r (all_to_all_v's depend on the rank).
std::size_t send_count(const CollectiveCase& c, int n, int r) { return describe(c.collective).send_count(c.count, n, r); }
std::size_t recv_count(const CollectiveCase& c, int n, int r) { return describe(c.collective).recv_count(c.count, n, r); }

// Runs the collective where the communicator's memory is. On a device, the host-filled,
// guarded buffers are mirrored there (guards included) and copied back whole for the checks.
void run_in_space(Communicator& comm, const AlgorithmDescriptor& algorithm, CollectiveCall call, HalfAccumulate half) {
  if (comm.memory_space() == MemorySpace::host) return run_collective(comm, algorithm, call, half);
  const Mirror device(call.send, call.recv, comm.memory_space(), kGuardBytes, allocator_for(comm.memory_space()));
  call.send = device.send();
  call.recv = device.recv();
  run_collective(comm, algorithm, call, half);
  device.copy_back_all();
}

// Runs `algorithm` once on freshly filled, guarded buffers and checks what it wrote.
void run_and_check(Communicator& comm, const AlgorithmDescriptor& algorithm, const Inputs& in, HalfAccumulate half,
                   std::span<const float> exact, LocalCheck& check) {
  const CollectiveCase& c = in.c;
  const int n = comm.size(), r = comm.rank();
  const std::size_t sc = send_count(c, n, r), rc = recv_count(c, n, r);
  const std::string label = algorithm.name;
  const PeerCounts blocks = peer_counts(c.collective, c.count, n, r);
  visit_data_type(c.dtype, [&](auto tag) {
    using T = decltype(tag);
    CollectiveCall call{c.collective, {}, {}, c.op, c.root, blocks.send, blocks.recv};
    const bool writes_output = !describe(c.collective).root_writes_only || r == c.root;
    if (c.in_place) {
      GuardedBuffer region(std::max(sc, rc), c.dtype);
      place_in(call, region.view(), c.count, r);
      fill_kept_inputs(call.send, in, r, &fill_inputs<T>);
      const Snapshot input(writes_output ? call.send.slice(0, 0) : call.send);
      run_in_space(comm, algorithm, call, half);
      if (writes_output) check_output<T>(check, call.recv, in, r, half, label, exact);
      else if (!input.unchanged(call.send)) {
        check.guard_ok = false;
        note(check, label + " rank " + std::to_string(r) + ": non-root buffer of an in-place reduce was modified");
      }
      if (!region.guards_intact()) {
        check.guard_ok = false;
        note(check, label + " rank " + std::to_string(r) + ": guard region around the buffer overwritten");
      }
    } else {
      GuardedBuffer send(sc, c.dtype), recv(rc, c.dtype);
      call.send = send.view();
      call.recv = recv.view();
      fill_kept_inputs(call.send, in, r, &fill_inputs<T>);
      const Snapshot input(call.send);
      GuardedBuffer untouched(writes_output ? 0 : rc, c.dtype);  // poisoned like recv
      run_in_space(comm, algorithm, call, half);
      if (writes_output) check_output<T>(check, call.recv, in, r, half, label, exact);
      else if (std::memcmp(call.recv.data, untouched.view().data, call.recv.bytes()) != 0) {
        check.guard_ok = false;
        note(check, label + " rank " + std::to_string(r) + ": reduce wrote the receive buffer of a non-root rank");
      }
      if (!input.unchanged(call.send)) {
        check.guard_ok = false;
        note(check, label + " rank " + std::to_string(r) + ": out-of-place send buffer was modified");
      }
      if (!send.guards_intact() || !recv.guards_intact()) {
        check.guard_ok = false;
        note(check, label + " rank " + std::to_string(r) + ": guard region overwritten");
      }
    }
  });
}

}  // namespace

std::string CollectiveCase::name() const {
  return std::string(parity::name_of(collective)) + "/" + algorithm + "/" + std::string(parity::name_of(dtype)) + "/" +
         (is_reducing(collective) ? std::string(parity::name_of(op)) : "none") + "/" + std::to_string(count) + "/" +
         (in_place ? "in_place" : "out_of_place") + "/" + (input == InputKind::exact ? "exact" : "random");
}

std::vector<CollectiveCase> conformance_grid(int world_size, const GridOptions& options) {
  const std::size_t n = static_cast<std::size_t>(world_size);
  std::vector<std::size_t> counts = {0, 1, n - 1, n, n + 1, 1021};
  std::sort(counts.begin(), counts.end());
  counts.erase(std::unique(counts.begin(), counts.end()), counts.end());
  std::vector<CollectiveCase> grid;
  auto add = [&](CollectiveCase c) {
    c.root = world_size / 2;
    for (bool in_place : {false, true}) {
      if (in_place && describe(c.collective).in_place == InPlace::none) continue;
      c.in_place = in_place;
      grid.push_back(c);
    }
  };
  for (Collective collective : kAllCollectives) {
    const std::vector<ReduceOp> ops = is_reducing(collective)
                                          ? std::vector<ReduceOp>(std::begin(kAllReduceOps), std::end(kAllReduceOps))
                                          : std::vector<ReduceOp>{ReduceOp::sum};
    for (const AlgorithmDescriptor* algorithm : algorithms_for(collective)) {
      for (DataType dtype : kAllDataTypes)
        for (ReduceOp op : ops)
          for (std::size_t count : counts) {
            add({collective, algorithm->name, dtype, op, count, false, InputKind::exact, 0});
            if (is_reducing(collective) && is_floating(dtype) && (op == ReduceOp::sum || op == ReduceOp::avg))
              add({collective, algorithm->name, dtype, op, count, false, InputKind::random, 0});
          }
    }
    // all_to_all_v's uneven blocks are exercised by the small counts (zero-count blocks at
    // every world size >= 2); large sizes would only repeat all_to_all's.
    if (!options.include_large || has_block_counts(collective)) continue;
    // The algorithms innermost: their cases share inputs, so each large case's expected values
    // are computed once for all of them (run_case keeps the last).
    for (DataType dtype : {DataType::float32, DataType::bfloat16})
      for (std::size_t bytes : {std::size_t{1} << 20, std::size_t{64} << 20}) {
        // Whole-buffer sizes; chunked collectives split them across the ranks. The 1 MiB size
        // is 3 elements over, so blocks do not divide evenly.
        std::size_t count = bytes / size_of(dtype) / (describe(collective).count_is_chunk ? n : 1);
        if (bytes == (std::size_t{1} << 20)) count += 3;
        for (bool in_place : {false, true}) {
          if (in_place && describe(collective).in_place == InPlace::none) continue;
          for (const AlgorithmDescriptor* algorithm : algorithms_for(collective))
            grid.push_back({collective, algorithm->name, dtype, ReduceOp::sum, count, in_place, InputKind::exact,
                            world_size / 2});
        }
      }
  }
  return grid;
}

CaseResult run_case(Communicator& comm, const CollectiveCase& c, HalfAccumulate half, bool with_native) {
  return run_case(comm, c, find_algorithm(c.collective, c.algorithm), half, with_native);
}

CaseResult run_case(Communicator& comm, const CollectiveCase& c, const AlgorithmDescriptor& algorithm,
                    HalfAccumulate half, bool with_native) {
  const Inputs in(c, comm.size());
  const bool writes_output = !describe(c.collective).root_writes_only || comm.rank() == c.root;
  std::shared_ptr<const ExactExpectations> expectations;
  if (c.input == InputKind::exact && writes_output)
    expectations = exact_expectations(in, comm.rank(), recv_count(c, comm.size(), comm.rank()));
  const std::span<const float> exact = expectations ? expectations->values() : std::span<const float>{};
  LocalCheck check;
  run_and_check(comm, algorithm, in, half, exact, check);
  // With exact inputs both results are compared bit for bit with the same expected values (and
  // native has its own cases); random inputs also run native here, under the same bound.
  if (with_native && c.algorithm != "native" && c.input == InputKind::random)
    run_and_check(comm, find_algorithm(c.collective, "native"), in, half, exact, check);

  // Agree across ranks: totals, worst errors, and the first failing rank's messages.
  std::int64_t counts[2] = {check.wrong, check.guard_ok ? 0 : 1};
  double worst[3] = {check.max_abs, check.max_rel, check.tolerance};
  comm.all_reduce({counts, 2, DataType::int64, MemorySpace::host}, {counts, 2, DataType::int64, MemorySpace::host},
                  ReduceOp::sum);
  comm.all_reduce({worst, 3, DataType::float64, MemorySpace::host}, {worst, 3, DataType::float64, MemorySpace::host},
                  ReduceOp::max);
  CaseResult result;
  result.wrong = counts[0];
  result.guard_ok = counts[1] == 0;
  result.max_abs_error = worst[0];
  result.max_rel_error = worst[1];
  result.tolerance = worst[2];
  result.passed = result.wrong == 0 && result.guard_ok;
  if (!result.passed) {
    for (const auto& m : comm.all_gather_strings(check.message))
      if (!m.empty()) { result.message = m; break; }
    result.message = std::to_string(result.wrong) + " wrong" + (result.guard_ok ? "" : ", guards or inputs damaged") +
                     ": " + result.message;
  }
  return result;
}

namespace {
// The most elements a rank's send or receive buffer holds (all_to_all_v's differ by rank).
std::size_t largest_count(const CollectiveCase& c, int world_size) {
  std::size_t largest = 0;
  for (int r = 0; r < (has_block_counts(c.collective) ? world_size : 1); ++r)
    largest = std::max({largest, send_count(c, world_size, r), recv_count(c, world_size, r)});
  return largest;
}
}  // namespace

std::size_t case_bytes_per_rank(const CollectiveCase& c, int world_size) {
  const std::size_t element = size_of(c.dtype);
  // A count whose buffers would not fit in a size (bench collectives -e 8E): more than any host
  // holds, which the memory check refuses, instead of a sum that wraps to a few bytes.
  const std::size_t most = std::numeric_limits<std::size_t>::max() / 16 / std::max<std::size_t>(element, 4) /
                           static_cast<std::size_t>(std::max(world_size, 1));
  if (c.count > most) return std::numeric_limits<std::size_t>::max();
  const std::size_t largest = largest_count(c, world_size);
  std::size_t bytes = 2 * largest * element + 4 * kGuardBytes;  // send and receive
  bytes += 2 * largest * element;                               // algorithm scratch (two slots)
  if (is_half(c.dtype)) bytes += 2 * largest * size_of(DataType::float32);  // widened copies
  return bytes;
}


// The family `parity check` runs (family.hpp).
const RegisteredFamily kCollectiveFamily{FamilyDefinition<CollectiveCase, CaseResult>{
    .table = &kCollectiveCasesTable, .label = "", .order = 10, .grid = conformance_grid,
    .run = [](const CaseContext& context, const CollectiveCase& c) { return run_case(context.world, c, context.half); },
    .columns =
        [](record::Table& t, const CaseContext& context, const CollectiveCase& c, const CaseResult& r) {
          t.put({{"collective", name_of(c.collective)}, {"algorithm", c.algorithm}, {"dtype", name_of(c.dtype)},
                 {"redop", is_reducing(c.collective) ? name_of(c.op) : "none"},
                 {"count", static_cast<std::int64_t>(c.count)}, {"in_place", c.in_place ? 1 : 0},
                 {"input", c.input == InputKind::exact ? "exact" : "random"}, {"world_size", context.world.size()},
                 {"max_abs_error", r.max_abs_error}, {"max_rel_error", r.max_rel_error}, {"tolerance", r.tolerance},
                 {"wrong", r.wrong}, {"guard_ok", r.guard_ok ? 1 : 0}});
        },
    // The case's buffers, and what run_case keeps for the next case with the same inputs: the
    // exact expected values (a float each) and a copy of the filled send buffer.
    .bytes_per_rank =
        [](const CollectiveCase& c, int world_size) {
          const std::size_t buffers = case_bytes_per_rank(c, world_size);
          const std::size_t kept = largest_count(c, world_size) * (sizeof(float) + size_of(c.dtype));
          return buffers > std::numeric_limits<std::size_t>::max() / 2 ? buffers : buffers + kept;
        }}};

}  // namespace parity::cases
