// The calibration of bench/commands/calibration.hpp: the primitives timed on every rank at once.
#include "bench/commands/calibration.hpp"

#include "bench/commands/collective_timing.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <iterator>

#include "bench/cli/progress.hpp"
#include "bench/cli/shared.hpp"
#include "reference/core/error.hpp"
#include "reference/kernels/buffer_kernels.hpp"
#include "reference/ops/ops.hpp"
#include "reference/simd/simd.hpp"
#include "reference/tensor/random.hpp"

namespace parity::cli {
namespace {

using Clock = std::chrono::steady_clock;

// Seconds of one call: after a warm-up call (timed, to size the batches; being the first, it is
// the slowest), three batches of as many calls as fill about 1 ms (at least one), the median
// batch's time per call. The operands stay where the call left them: in the caches that hold
// them (the step's model adds the cost of fetching them from farther, StreamSample).
double time_call(MemorySpace space, const std::function<void()>& call) {
  auto t0 = Clock::now();
  call();
  wait_for_device(space);
  const double once = std::max(seconds_since(t0), 1e-9);
  const int calls = static_cast<int>(std::clamp(0.001 / once, 1.0, 10000.0));
  std::vector<double> batches;
  for (int b = 0; b < 3; ++b) {
    t0 = Clock::now();
    for (int i = 0; i < calls; ++i) call();
    wait_for_device(space);
    batches.push_back(seconds_since(t0) / calls);
  }
  return percentile(batches, 0.5);
}

Tensor random_tensor(const char* name, Shape shape, DataType dtype, MemorySpace space, std::uint64_t seed,
                     Init init = Init::uniform(-1, 1)) {
  Tensor t = Tensor::empty(name, std::move(shape), dtype, MemoryCategory::workspace);
  initialize(t, init, seed);
  return space == MemorySpace::host ? t : t.to(space, name, MemoryCategory::workspace);
}

// The operands of the ops at one element count, drawn once and shared by every op (each takes
// them in its own row shape): drawing them costs more than timing the op.
struct Operands {
  Operands(std::int64_t elements, DataType dtype, MemorySpace space)
      : a(random_tensor("calibrate.a", {elements}, dtype, space, 1)),
        b(random_tensor("calibrate.b", {elements}, dtype, space, 2)),
        y(random_tensor("calibrate.y", {elements}, dtype, space, 3)),
        m(random_tensor("calibrate.m", {elements}, dtype, space, 11)),
        v(random_tensor("calibrate.v", {elements}, dtype, space, 12, Init::uniform(0, 1))) {}
  Tensor a, b, y, m, v;
};

// One op over the operands' elements (rows of calibrated_row_length(op) for the row ops), timed.
double time_op(const std::string& op, const Operands& in, DataType dtype, MemorySpace space) {
  const std::int64_t elements = in.a.numel(), row = theory::calibrated_row_length(op), rows = elements / row;
  const Shape shape = row > 1 ? Shape{rows, row} : Shape{elements};
  Tensor a = in.a.reshape(shape), b = in.b.reshape(shape), y = in.y.reshape(shape);
  if (op == "add") return time_call(space, [&] { ops::add_forward(a, b, y); });
  if (op == "fill") return time_call(space, [&] { y.zero(); });
  if (op == "gelu_forward") return time_call(space, [&] { ops::gelu_forward(a, y); });
  if (op == "gelu_backward") return time_call(space, [&] { ops::gelu_backward(b, a, y); });
  if (op == "softmax_forward") return time_call(space, [&] { ops::softmax_forward(a, y); });
  if (op == "softmax_backward") {
    ops::softmax_forward(a, b);
    return time_call(space, [&] { ops::softmax_backward(a, b, y); });
  }
  if (op.rfind("layernorm", 0) == 0) {
    Tensor gamma = random_tensor("calibrate.gamma", {row}, dtype, space, 4), beta = random_tensor("calibrate.beta", {row}, dtype, space, 5);
    Tensor dgamma = random_tensor("calibrate.dgamma", {row}, dtype, space, 6), dbeta = random_tensor("calibrate.dbeta", {row}, dtype, space, 7);
    Tensor mean = random_tensor("calibrate.mean", {rows}, dtype, space, 8), rstd = random_tensor("calibrate.rstd", {rows}, dtype, space, 9);
    ops::layernorm_forward(a, gamma, beta, y, mean, rstd);
    if (op == "layernorm_forward") return time_call(space, [&] { ops::layernorm_forward(a, gamma, beta, y, mean, rstd); });
    return time_call(space, [&] { ops::layernorm_backward(b, a, gamma, mean, rstd, y, dgamma, dbeta); });
  }
  if (op.rfind("cross_entropy", 0) == 0) {
    Tensor targets = random_tensor("calibrate.targets", {rows}, DataType::int64, space, 10, Init::tokens(row));
    if (op == "cross_entropy_forward")
      return time_call(space, [&] { ops::cross_entropy_forward(a, targets, static_cast<double>(rows)); });
    return time_call(space, [&] { ops::cross_entropy_backward(a, targets, static_cast<double>(rows), y); });
  }
  if (op == "dropout_forward") return time_call(space, [&] { ops::dropout_forward(a, 0.1, {1, 2, 0}, y); });
  if (op == "dropout_backward") return time_call(space, [&] { ops::dropout_backward(a, 0.1, {1, 2, 0}, y); });
  if (op == "adamw") {
    Tensor m = in.m.reshape(shape), v = in.v.reshape(shape);
    std::int64_t step = 0;
    return time_call(space, [&] { ops::adamw_update(y, a, m, v, 1e-3, 0.9, 0.999, 1e-8, 0.01, ++step); });
  }
  throw Error("bench calibrate: no measurement for op " + op);
}

double time_product(std::int64_t m, std::int64_t n, std::int64_t k, DataType dtype, MemorySpace space) {
  Tensor a = random_tensor("calibrate.a", {m, k}, dtype, space, 1), b = random_tensor("calibrate.b", {k, n}, dtype, space, 2);
  Tensor c = Tensor::empty("calibrate.c", {m, n}, dtype, MemoryCategory::workspace, space);
  return time_call(space, [&] { ops::matmul(a, false, b, false, c, false); });
}

// The add over three zeroed arrays of `elements` (their values do not change its time).
double time_stream(std::int64_t elements, DataType dtype, MemorySpace space) {
  Tensor a = Tensor::zeros("calibrate.stream.a", {elements}, dtype, MemoryCategory::workspace, space);
  Tensor b = Tensor::zeros("calibrate.stream.b", {elements}, dtype, MemoryCategory::workspace, space);
  Tensor y = Tensor::zeros("calibrate.stream.y", {elements}, dtype, MemoryCategory::workspace, space);
  return time_call(space, [&] { ops::add_forward(a, b, y); });
}

// The ceilings the ops are read against in the report (not part of theory::Calibration): a
// memcpy of the operands' elements (kind "copy", op "memcpy": bytes read plus bytes written) and
// the vectorised exp over them in place (kind "exp", op "exp": reference/simd, the CPU's widest
// instruction set; on a GPU not timed, NaN).
double time_copy(const Operands& in, MemorySpace space) {
  Tensor y = in.y;
  return time_call(space, [&] { copy_buffer(y.view(), in.a.view()); });
}
double time_exp(const Operands& in, DataType dtype, MemorySpace space) {
  if (space != MemorySpace::host) return std::nan("");
  Tensor y = in.y;
  copy_buffer(y.view(), in.a.view());  // uniform in [-1, 1]: exp stays within [1/e, e] however often taken
  const auto n = static_cast<std::size_t>(y.numel());
  if (dtype == DataType::float64)
    return time_call(space, [&] { simd::exp_sum(y.data<double>(), n, 1.0, y.data<double>()); });
  return time_call(space, [&] { simd::exp_sum(y.data<float>(), n, 1.0f, y.data<float>()); });
}

constexpr std::size_t kProducts = std::size(theory::kGemmSides) * std::size(theory::kGemmSides) * std::size(theory::kGemmSides);
constexpr std::size_t kOps = std::size(theory::kCalibratedOps) * std::size(theory::kOpElements);
constexpr std::size_t kStreams = std::size(theory::kStreamElements);
constexpr std::size_t kCeilings = 2 * std::size(theory::kOpElements);  // copy, exp at each size
constexpr std::size_t kSamples = kProducts + kOps + kStreams + kCeilings;

}  // namespace

theory::Calibration measure_calibration(Session& session, DataType dtype, record::Table& table) {
  if (dtype != DataType::float32 && dtype != DataType::float64)
    throw UsageError(std::string("calibration runs in float32 or float64, not ") + std::string(name_of(dtype)));
  Communicator& world = session.world();
  const MemorySpace space = session.space();
  const std::size_t first = table.rows();
  const std::string type = std::string(name_of(dtype));
  const RowKey by_type = [](const record::Table& t, std::size_t row) { return t.get_str("dtype")[row]; };
  // --resume: the interrupted run's calibration of this type (its predictions were made with it).
  if (session.restore_rows("/bench/calibrate", type, by_type, kSamples * static_cast<std::size_t>(world.size()), table).found) {
    std::vector<double> seconds(kSamples * static_cast<std::size_t>(world.size()));
    if (session.is_root())
      for (std::size_t i = 0; i < seconds.size(); ++i) seconds[i] = table.get_f64("seconds")[first + i];
    const BufferView all{seconds.data(), seconds.size(), DataType::float64, MemorySpace::host};
    session.host_world().broadcast(all, all, 0);
    theory::Calibration c;
    c.dtype = type;
    const std::size_t mine = kSamples * static_cast<std::size_t>(world.rank());
    std::size_t i = 0;
    for (const std::int64_t m : theory::kGemmSides)
      for (const std::int64_t n : theory::kGemmSides)
        for (const std::int64_t k : theory::kGemmSides) c.gemm.push_back({m, n, k, seconds[mine + i++]});
    for (const char* op : theory::kCalibratedOps)
      for (const std::int64_t e : theory::kOpElements) c.ops.push_back({op, e, seconds[mine + i++]});
    for (const std::int64_t e : theory::kStreamElements) c.stream.push_back({e, seconds[mine + i++]});
    c.validate();
    return c;
  }
  Progress progress("calibrate " + type, kSamples, session.is_root() && !session.options().quiet);
  theory::Calibration c;
  c.dtype = type;
  world.barrier();  // every rank measures at once: the rates under the load the benchmarks run with
  std::size_t done = 0;
  for (const std::int64_t m : theory::kGemmSides)
    for (const std::int64_t n : theory::kGemmSides)
      for (const std::int64_t k : theory::kGemmSides) {
        progress.update(done++, "product " + std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k));
        c.gemm.push_back({m, n, k, time_product(m, n, k, dtype, space)});
      }
  // Measured size by size (the rows keep the op-major order of kCalibratedOps x kOpElements).
  std::vector<theory::OpSample> by_size;
  std::vector<double> copies, exps;  // the ceilings at each size
  for (const std::int64_t e : theory::kOpElements) {
    const Operands operands(e, dtype, space);
    for (const char* op : theory::kCalibratedOps) {
      progress.update(done++, std::string(op) + " over " + std::to_string(e));
      by_size.push_back({op, e, time_op(op, operands, dtype, space)});
    }
    progress.update(done++, "memcpy over " + std::to_string(e));
    copies.push_back(time_copy(operands, space));
    progress.update(done++, "exp over " + std::to_string(e));
    exps.push_back(time_exp(operands, dtype, space));
  }
  const std::size_t sizes = std::size(theory::kOpElements);
  for (std::size_t o = 0; o < std::size(theory::kCalibratedOps); ++o)
    for (std::size_t e = 0; e < sizes; ++e) c.ops.push_back(by_size[e * std::size(theory::kCalibratedOps) + o]);
  for (const std::int64_t e : theory::kStreamElements) {
    progress.update(done++, "stream over " + std::to_string(e));
    c.stream.push_back({e, time_stream(e, dtype, space)});
  }
  c.validate();
  // Every rank's rows, rank by rank (one all-gather a sample), named as a step of the calibration
  // (a rank done first waits here for the others: an interruption or a stall says so).
  progress.update(done > 0 ? done - 1 : 0, "gathering over " + std::to_string(world.size()) + " ranks");
  std::vector<std::vector<double>> seconds;
  for (const auto& g : c.gemm) seconds.push_back(gather_from_ranks(world, g.seconds));
  for (const auto& o : c.ops) seconds.push_back(gather_from_ranks(world, o.seconds));
  for (const auto& o : c.stream) seconds.push_back(gather_from_ranks(world, o.seconds));
  for (const double x : copies) seconds.push_back(gather_from_ranks(world, x));
  for (const double x : exps) seconds.push_back(gather_from_ranks(world, x));
  progress.finish();
  if (session.is_root()) {
    for (int r = 0; r < world.size(); ++r) {
      const auto rank = static_cast<std::size_t>(r);
      for (std::size_t i = 0; i < kSamples; ++i) {
        // The products, the ops, the stream's adds (kind "stream", op "add"), then the ceilings:
        // memcpy at each op size (kind "copy"), the exp at each (kind "exp").
        const bool product = i < kProducts, op = !product && i < kProducts + kOps;
        const bool stream = i >= kProducts + kOps && i < kProducts + kOps + kStreams;
        const std::size_t ceiling = i - (kProducts + kOps + kStreams);  // when neither of the above
        const bool copy = !product && !op && !stream && ceiling < std::size(theory::kOpElements);
        const double s = seconds[i][rank];
        table.put({{"rank", r}, {"host", session.hosts()[rank]}, {"dtype", type},
                   {"kind", product ? "gemm" : op ? "op" : stream ? "stream" : copy ? "copy" : "exp"},
                   {"op", product ? "matmul" : op ? c.ops[i - kProducts].op : stream ? "add" : copy ? "memcpy" : "exp"}});
        const theory::GemmSample g = product ? c.gemm[i] : theory::GemmSample{};
        table.put({{"m", g.m}, {"n", g.n}, {"k", g.k}});
        const std::int64_t elements = product ? 0
                                      : op    ? c.ops[i - kProducts].elements
                                      : stream ? c.stream[i - kProducts - kOps].elements
                                               : theory::kOpElements[ceiling % std::size(theory::kOpElements)];
        table.put({{"elements", elements}, {"seconds", s}});
        table.f64("GFLOPs", "GFLOP/s")
            .push_back(product ? 2.0 * static_cast<double>(g.m * g.n * g.k) / s / 1e9 : std::nan(""));
        table.f64("ns_per_element", "ns").push_back(product ? std::nan("") : s / static_cast<double>(elements) * 1e9);
        // What the call reads and writes once: a product its three matrices, an op its arrays,
        // the stream's add three, a copy or the exp in place two.
        const double arrays = product ? 0.0 : op ? theory::calibrated_op_arrays(c.ops[i - kProducts].op) : stream ? 3.0 : 2.0;
        const double moved = product ? static_cast<double>(g.m * g.k + g.k * g.n + g.m * g.n) : arrays * static_cast<double>(elements);
        table.i64("bytes", "B").push_back(std::llround(moved * static_cast<double>(size_of(dtype))));
      }
    }
  }
  session.record_rows("/bench/calibrate", table, first);
  return c;
}

CollectiveEfficiency measure_collective_efficiency(Session& session, Communicator& group, const std::string& level,
                                                   const theory::AlphaBeta& link, record::Table& links, record::Table& fits) {
  CollectiveEfficiency out;
  if (group.size() < 2) return out;
  // The sizes that give every rank at least one float32 element (on very large groups the
  // smallest sizes do not).
  std::vector<std::size_t> sizes;
  for (const std::size_t size : kCollectiveSizes)
    if (size >= 4 * static_cast<std::size_t>(group.size())) sizes.push_back(size);
  if (sizes.empty()) return out;
  const std::size_t first = links.rows(), count = sizes.size() * std::size(theory::kCalibratedCollectives);
  // (bytes, seconds) by collective and size, every rank the same.
  std::vector<double> points(2 * count);
  const RowKey by_level = [](const record::Table& t, std::size_t row) { return t.get_str("level")[row]; };
  // --resume: the interrupted run's figures (its predictions were made with them).
  const bool restored = session.restore_rows("/bench/calibrate_links", level, by_level, count, links).found;
  if (restored) {
    if (session.is_root())
      for (std::size_t i = 0; i < count; ++i) {
        points[2 * i] = static_cast<double>(links.get_i64("size_bytes")[first + i]);
        points[2 * i + 1] = links.get_f64("time_s")[first + i];
      }
    const BufferView all{points.data(), points.size(), DataType::float64, MemorySpace::host};
    session.world().broadcast(all, all, 0);
  } else {
    std::size_t i = 0;
    for (const char* collective : theory::kCalibratedCollectives)
      for (const SweepPoint& p : time_native_sweep(group, parse_collective(collective), sizes, 2, 10, session.half(), session.on_gpu())) {
        points[2 * i] = p.bytes;
        points[2 * i + 1] = p.seconds;
        ++i;
      }
    if (i != count) throw Error("bench calibrate: the collectives' sweep came to " + std::to_string(i) + " points, not " + std::to_string(count));
  }
  const int n = group.size();
  std::size_t i = 0;
  for (const char* collective : theory::kCalibratedCollectives) {
    std::vector<std::size_t> fit_bytes;
    std::vector<double> fit_seconds;
    for (std::size_t k = 0; k < sizes.size(); ++k, ++i) {
      const double bytes = points[2 * i], t = points[2 * i + 1];
      const double model = theory::collective_model_seconds(collective, n, bytes, link.alpha_seconds, link.beta_seconds_per_byte);
      const double efficiency = std::min(1.0, model / t);
      out[(level == "world" ? "" : level + ":") + collective].emplace_back(bytes, efficiency);
      fit_bytes.push_back(static_cast<std::size_t>(bytes));
      fit_seconds.push_back(t);
      if (restored) continue;  // taken back: the rows are there
      links.put({{"level", level}, {"collective", collective}, {"size_bytes", static_cast<std::int64_t>(bytes)},
                 {"ranks", n}, {"time_s", t}, {"ring_model_s", model},
                 {"bus_GBps", (std::string(collective) == "all_reduce" ? 2.0 : 1.0) * (n - 1) / n * bytes / t / 1e9},
                 {"efficiency", efficiency}});
    }
    // The collective's own alpha and beta, fitted as the ping-pong's: the smallest size's time,
    // and the slope from there to the largest.
    const theory::AlphaBeta fit = theory::fit_alpha_beta(fit_bytes, fit_seconds);
    fits.put({{"level", level}, {"collective", collective}, {"ranks", n}, {"alpha_us", fit.alpha_seconds * 1e6},
              {"beta_us_per_byte", fit.beta_seconds_per_byte * 1e6},
              {"bandwidth_GBps", 1e-9 / fit.beta_seconds_per_byte}});
  }
  if (!restored) session.record_rows("/bench/calibrate_links", links, first);
  return out;
}

theory::Calibration calibration_of_rank(const record::Table& t, const std::string& dtype, int rank) {
  theory::Calibration c;
  c.dtype = dtype;
  for (std::size_t r = 0; r < t.rows(); ++r) {
    if (t.get_i64("rank")[r] != rank || t.get_str("dtype")[r] != dtype) continue;
    const std::string kind = t.get_str("kind")[r];
    if (kind == "gemm")
      c.gemm.push_back({t.get_i64("m")[r], t.get_i64("n")[r], t.get_i64("k")[r], t.get_f64("seconds")[r]});
    else if (kind == "stream")
      c.stream.push_back({t.get_i64("elements")[r], t.get_f64("seconds")[r]});
    else if (kind == "op")
      c.ops.push_back({t.get_str("op")[r], t.get_i64("elements")[r], t.get_f64("seconds")[r]});
    // kinds copy and exp: the report's ceilings, not the model's
  }
  return c;
}

}  // namespace parity::cli
