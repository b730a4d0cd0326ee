// CPU ops (reference/ops/cpu.hpp) under Google Benchmark, each read against a ceiling measured
// in the same run: matrix multiplies and attention against the single-core FMA peak
// (peak_fraction), the elementwise and row-wise ops against host copy bandwidth at the same
// size (copy_fraction). Ceilings are benchmarks registered before the ops that use them; they
// leave their result in a static, and are measured on demand when a filter skipped them.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <string>

#include <time.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define PARITY_BENCH_X86 1
#endif

#include "reference/ops/cpu.hpp"
#include "reference/simd/simd.hpp"
#include "reference/tensor/random.hpp"
#include "reference/tensor/tensor.hpp"

namespace {

using namespace parity;

// Seconds of CPU time this thread has used. Rates here are per CPU second, Google Benchmark's
// default and what kernels_bench.cpp reports: on a shared two-core machine, wall time also counts
// the stretches other processes hold the core, which would make the ceilings depend on the load.
// Every op here (BLAS included: one thread) runs on the calling thread, so nothing is missed.
// Each benchmark keeps this stopwatch over its own loop, so the fractions it computes agree with
// the rates Google Benchmark prints.
double thread_seconds() {
  timespec now{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
  return static_cast<double>(now.tv_sec) + 1e-9 * static_cast<double>(now.tv_nsec);
}
double seconds_since(double start) { return thread_seconds() - start; }

// How long a ceiling is measured for when a filter left its benchmark out of the run.
constexpr double kFallbackSeconds = 0.2;

// Runs `work` until `seconds` have passed; returns (what work returned, summed) per second. The
// clock is read after batches that double in size: reading the thread CPU clock is a system
// call, as long as a cache-resident copy, so reading it after every call would halve the rate.
template <typename F> double rate_over(double seconds, F&& work) {
  const double start = thread_seconds();
  double done = 0;
  for (std::int64_t batch = 1; seconds_since(start) < seconds; batch *= 2)
    for (std::int64_t i = 0; i < batch; ++i) done += work();
  return done / seconds_since(start);
}

// ---------------------------------------------------------------------------------------------
// Single-core FMA peak.
//
// peak = (FMAs per call * lanes * 2 flops) / time: each kernel call runs kRounds rounds of
// kChains independent chains acc = acc * m + a, one vector FMA per chain per round.
//
// One chain is a dependency chain: each FMA waits for the previous one (about 4 cycles) while a
// core starts up to two per cycle, so latency x throughput = 8 chains in flight keep both FMA
// pipes busy (Zen 2-4, Skylake to Golden Cove: 4 x 2; Haswell/Broadwell 5 x 2 = 10). 12 chains
// cover those with margin and, with the two constant operands, fit AVX2's 16 vector registers.
constexpr int kChains = 12;
constexpr std::int64_t kRounds = 4096;  // 49152 FMAs a call: microseconds, so call cost is noise
// x -> 0.999 x + 0.001 converges to 1: starting near it, the values stay normal numbers for any
// number of rounds (no overflow, no denormal slow path).
constexpr double kMultiplier = 0.999, kAddend = 0.001;

// The kernels' inputs, hidden from the optimizer. With them as constants GCC proves that the
// start value 1 is a fixed point of the chain and deletes the whole loop; with equal starts it
// could merge the chains into one. Distinct starts also converge to 1 and stay normal.
template <typename T> struct ChainInputs {
  T multiplier, addend, start[kChains];
};
template <typename T> ChainInputs<T> opaque_chain_inputs() {
  ChainInputs<T> in{static_cast<T>(kMultiplier), static_cast<T>(kAddend), {}};
  for (int c = 0; c < kChains; ++c) in.start[c] = static_cast<T>(1 + 0.01 * c);
  benchmark::DoNotOptimize(in);
  return in;
}

// Keeps the accumulators alive past the optimizer (the asm barrier reads them, so no chain can
// be deleted) and returns the sum of their lanes for the caller to consume.
template <typename V> double keep_and_sum(V (&acc)[kChains]) {
  double total = 0;
  for (auto& x : acc) {
    benchmark::DoNotOptimize(x);
    for (std::size_t i = 0; i < sizeof(V) / sizeof(x[0]); ++i) total += static_cast<double>(x[i]);
  }
  return total;
}

// Portable kernel in 16-byte vector extensions: plain SSE2 mulps/addps on baseline x86-64
// (Debian's default target has no FMA), an fmla where the target fuses a * b + c. Either way a
// lane does 2 flops per round, which is what is counted.
template <typename T> double fma_chains_portable(std::int64_t rounds) {
  typedef T Vec __attribute__((vector_size(16)));
  const auto in = opaque_chain_inputs<T>();
  const Vec m = Vec{} + in.multiplier, a = Vec{} + in.addend;
  Vec acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = Vec{} + in.start[c];
  for (std::int64_t r = 0; r < rounds; ++r)
    for (auto& x : acc) x = x * m + a;
  return keep_and_sum(acc);
}

#ifdef PARITY_BENCH_X86
// The wide kernels use intrinsics rather than a * b + c so the FMA instruction does not depend
// on the compiler's -ffp-contract default. The target attribute compiles them for AVX2/AVX-512
// in a binary built for baseline x86-64; they run only where the CPU says it has the ISA.
__attribute__((target("avx2,fma"))) double fma_chains_avx2_float32(std::int64_t rounds) {
  const auto in = opaque_chain_inputs<float>();
  const __m256 m = _mm256_set1_ps(in.multiplier), a = _mm256_set1_ps(in.addend);
  __m256 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm256_set1_ps(in.start[c]);
  for (std::int64_t r = 0; r < rounds; ++r)
    for (auto& x : acc) x = _mm256_fmadd_ps(x, m, a);
  return keep_and_sum(acc);
}

__attribute__((target("avx2,fma"))) double fma_chains_avx2_float64(std::int64_t rounds) {
  const auto in = opaque_chain_inputs<double>();
  const __m256d m = _mm256_set1_pd(in.multiplier), a = _mm256_set1_pd(in.addend);
  __m256d acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm256_set1_pd(in.start[c]);
  for (std::int64_t r = 0; r < rounds; ++r)
    for (auto& x : acc) x = _mm256_fmadd_pd(x, m, a);
  return keep_and_sum(acc);
}

__attribute__((target("avx512f"))) double fma_chains_avx512_float32(std::int64_t rounds) {
  const auto in = opaque_chain_inputs<float>();
  const __m512 m = _mm512_set1_ps(in.multiplier), a = _mm512_set1_ps(in.addend);
  __m512 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm512_set1_ps(in.start[c]);
  for (std::int64_t r = 0; r < rounds; ++r)
    for (auto& x : acc) x = _mm512_fmadd_ps(x, m, a);
  return keep_and_sum(acc);
}

__attribute__((target("avx512f"))) double fma_chains_avx512_float64(std::int64_t rounds) {
  const auto in = opaque_chain_inputs<double>();
  const __m512d m = _mm512_set1_pd(in.multiplier), a = _mm512_set1_pd(in.addend);
  __m512d acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm512_set1_pd(in.start[c]);
  for (std::int64_t r = 0; r < rounds; ++r)
    for (auto& x : acc) x = _mm512_fmadd_pd(x, m, a);
  return keep_and_sum(acc);
}
#endif

struct FmaKernel {
  const char* isa;
  int lanes;  // elements per vector
  double (*run)(std::int64_t rounds);
  double flops(std::int64_t rounds) const { return 2.0 * static_cast<double>(rounds * kChains * lanes); }
};

// The widest FMA the CPU runs. The denominator must be what an optimised BLAS can reach: on
// cores with two 512-bit FMA units (Xeon Gold/Platinum) AVX-512 doubles the AVX2 figure; on
// Zen 4, which splits 512-bit operations in two, both agree.
FmaKernel widest_fma_kernel(DataType type) {
  const bool f32 = type == DataType::float32;
#ifdef PARITY_BENCH_X86
  if (__builtin_cpu_supports("avx512f"))
    return f32 ? FmaKernel{"avx512f", 16, fma_chains_avx512_float32} : FmaKernel{"avx512f", 8, fma_chains_avx512_float64};
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    return f32 ? FmaKernel{"avx2+fma", 8, fma_chains_avx2_float32} : FmaKernel{"avx2+fma", 4, fma_chains_avx2_float64};
  constexpr const char* kPortable = "sse2 mul+add";  // no FMA: a lower bound on the peak
#else
  constexpr const char* kPortable = "portable 16-byte vectors";
#endif
  return f32 ? FmaKernel{kPortable, 4, fma_chains_portable<float>} : FmaKernel{kPortable, 2, fma_chains_portable<double>};
}

// Measured peak in flop/s, [0] float32 and [1] float64; 0 until measured.
double g_fma_peak[2] = {0, 0};
int peak_slot(DataType type) { return type == DataType::float64 ? 1 : 0; }

void BM_fma_peak(benchmark::State& state, DataType type) {
  const FmaKernel kernel = widest_fma_kernel(type);
  state.SetLabel(kernel.isa);
  const double start = thread_seconds();
  for (auto _ : state) benchmark::DoNotOptimize(kernel.run(kRounds));
  const double seconds = seconds_since(start);
  const double flops = kernel.flops(kRounds) * static_cast<double>(state.iterations());
  state.counters["GFLOPs"] = benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsRate);
  // The runner calls this function several times while it sizes the iteration count; the last
  // (longest, reported) run is the one that stays.
  g_fma_peak[peak_slot(type)] = flops / seconds;
}

double fma_peak(DataType type) {
  double& peak = g_fma_peak[peak_slot(type)];
  if (peak == 0) {
    const FmaKernel kernel = widest_fma_kernel(type);
    peak = rate_over(kFallbackSeconds, [&] {
      benchmark::DoNotOptimize(kernel.run(kRounds));
      return kernel.flops(kRounds);
    });
  }
  return peak;
}

// GFLOPs as a rate, and the fraction of the single-core peak of the same type (BLAS runs one
// thread: ops::configure_blas_once).
void report_flops(benchmark::State& state, double flops_per_iteration, double seconds, DataType type) {
  const double flops = flops_per_iteration * static_cast<double>(state.iterations());
  state.counters["GFLOPs"] = benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsRate);
  state.counters["peak_fraction"] = flops / seconds / fma_peak(type);
}

// ---------------------------------------------------------------------------------------------
// Inputs.
//
// Tensors are made once per (name, shape, type) and kept for the whole run: Philox draws cost
// far more than most ops, the runner calls each benchmark function several times, and keeping
// the outputs too means no timed iteration pays for first-touch page faults.
constexpr std::uint64_t kSeed = 2024;

Tensor cached(const std::string& name, const Shape& shape, DataType type, bool random) {
  static std::map<std::string, Tensor> tensors;
  const std::string key = name + to_string(shape) + std::string(name_of(type));
  auto it = tensors.find(key);
  if (it == tensors.end()) {
    Tensor t = Tensor::zeros(name, shape, type, random ? MemoryCategory::activations : MemoryCategory::workspace);
    if (random) initialize(t, Init::normal(0, 1), kSeed);
    it = tensors.emplace(key, t).first;
  }
  return it->second;
}
Tensor input(const std::string& name, const Shape& shape, DataType type) { return cached(name, shape, type, true); }
Tensor output(const std::string& name, const Shape& shape, DataType type) { return cached(name, shape, type, false); }

// ---------------------------------------------------------------------------------------------
// Matrix multiply: c = a b, 2 m n k flops.

void BM_matmul(benchmark::State& state, DataType type) {
  const std::int64_t m = state.range(0), k = state.range(1), n = state.range(2);
  const Tensor a = input("a", {m, k}, type), b = input("b", {k, n}, type);
  Tensor c = output("c", {m, n}, type);
  // Which code the product runs: small float32 products take the vectorised loops (simd.hpp).
  const bool small = type == DataType::float32 && simd::small_gemm_takes(static_cast<std::size_t>(m),
                                                                          static_cast<std::size_t>(n),
                                                                          static_cast<std::size_t>(k));
  state.SetLabel(small ? "small_gemm" : ops::blas_name());
  const double start = thread_seconds();
  for (auto _ : state) {
    ops::matmul(a, false, b, false, c, false);
    benchmark::ClobberMemory();
  }
  report_flops(state, 2.0 * static_cast<double>(m * n * k), seconds_since(start), type);
}

void matmul_shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"m", "k", "n"});
  for (std::int64_t s : {128, 256, 512, 1024}) b->Args({s, s, s});
  // GPT-2 small's MLP up-projection on 4096 tokens: [4096 x 768] x [768 x 3072].
  b->Args({4096, 768, 3072});
}

// ---------------------------------------------------------------------------------------------
// Host copy bandwidth: memcpy of `elements` float32, bytes read plus bytes written, as
// BM_memcpy in kernels_bench.cpp counts them. The ops below are read against it at the same
// element count (what matters is whether the working set sits in cache or in DRAM).

std::map<std::int64_t, double> g_copy_bandwidth;  // bytes/s by element count

void copy_once(const Tensor& from, Tensor& to) {
  std::memcpy(to.raw(), from.raw(), from.bytes());
  benchmark::ClobberMemory();
}

void BM_host_copy(benchmark::State& state) {
  const std::int64_t elements = state.range(0);
  const Tensor from = input("x", {elements}, DataType::float32);
  Tensor to = output("y", {elements}, DataType::float32);
  const double start = thread_seconds();
  for (auto _ : state) copy_once(from, to);
  const double seconds = seconds_since(start);
  const double bytes = 2.0 * static_cast<double>(from.bytes()) * static_cast<double>(state.iterations());
  state.SetBytesProcessed(static_cast<std::int64_t>(bytes));
  g_copy_bandwidth[elements] = bytes / seconds;
}

double copy_bandwidth(std::int64_t elements) {
  double& bandwidth = g_copy_bandwidth[elements];
  if (bandwidth == 0) {
    const Tensor from = input("x", {elements}, DataType::float32);
    Tensor to = output("y", {elements}, DataType::float32);
    bandwidth = rate_over(kFallbackSeconds, [&] {
      copy_once(from, to);
      return 2.0 * static_cast<double>(from.bytes());
    });
  }
  return bandwidth;
}

// ---------------------------------------------------------------------------------------------
// The vectorised exp's rate (reference/simd's float32 exp on the widest instruction set the CPU
// has), elements per second over `elements` float32 in place: the ceiling of the ops that take
// an exp per element (GeLU, softmax, cross-entropy), read as exp_fraction = the op's elements
// per second over it at the same size.

std::map<std::int64_t, double> g_exp_rate;  // elements/s by element count

void exp_once(Tensor& x) {
  benchmark::DoNotOptimize(simd::exp_sum(x.data<float>(), static_cast<std::size_t>(x.numel()), 1.0f, x.data<float>()));
  benchmark::ClobberMemory();
}

// Values that stay in (0, 1] however often exp is taken in place: each pass maps x to
// exp(x - 1), which takes (0, 1] into (0.37, 1] (its fixed point is 1).
Tensor exp_input(std::int64_t elements) {
  Tensor x = output("exp.x", {elements}, DataType::float32);
  float* p = x.data<float>();
  for (std::int64_t i = 0; i < elements; ++i) p[i] = -0.25f;
  return x;
}

void BM_exp(benchmark::State& state) {
  const std::int64_t elements = state.range(0);
  Tensor x = exp_input(elements);
  const double start = thread_seconds();
  for (auto _ : state) exp_once(x);
  const double seconds = seconds_since(start);
  const double done = static_cast<double>(elements) * static_cast<double>(state.iterations());
  state.counters["elements_per_second"] = benchmark::Counter(done, benchmark::Counter::kIsRate);
  state.SetLabel(simd::target());
  g_exp_rate[elements] = done / seconds;
}

double exp_rate(std::int64_t elements) {
  double& rate = g_exp_rate[elements];
  if (rate == 0) {
    Tensor x = exp_input(elements);
    rate = rate_over(kFallbackSeconds, [&] {
      exp_once(x);
      return static_cast<double>(elements);
    });
  }
  return rate;
}

// ---------------------------------------------------------------------------------------------
// Elementwise and row-wise ops on float32: bytes_per_second counts every tensor read once and
// every tensor written once, and copy_fraction is that over the host copy's rate. Row-wise ops
// re-read a row from cache, not from memory, so once per tensor is the memory traffic.

constexpr DataType kF32 = DataType::float32;
constexpr std::int64_t kRow = 1024;    // LayerNorm and softmax row length (a model width)
constexpr std::int64_t kVocab = 4096;  // cross-entropy classes; both divide every size below
// 64 KiB a tensor, three at most live: in L2 on any current core. 64 MiB a tensor: far beyond
// any L3 here (32 MiB), so the figure is DRAM bandwidth.
constexpr std::int64_t kCacheElements = std::int64_t{1} << 14, kMemoryElements = std::int64_t{1} << 24;

// exps: the exps an iteration takes per element (0: not an exp-heavy op, no exp_fraction).
void report_bytes(benchmark::State& state, std::int64_t elements, std::int64_t bytes_per_iteration, double seconds,
                  int exps = 0) {
  const double iterations = static_cast<double>(state.iterations());
  const double bytes = static_cast<double>(bytes_per_iteration) * iterations;
  state.SetBytesProcessed(static_cast<std::int64_t>(bytes));
  state.counters["copy_fraction"] = bytes / seconds / copy_bandwidth(elements);
  if (exps > 0)
    state.counters["exp_fraction"] = exps * static_cast<double>(elements) * iterations / seconds / exp_rate(elements);
}

constexpr std::int64_t kF32Bytes = 4;

// Runs `call` for every iteration the benchmark asks for; returns the thread seconds they took.
template <typename F> double time_iterations(benchmark::State& state, F&& call) {
  const double start = thread_seconds();
  for (auto _ : state) {
    call();
    benchmark::ClobberMemory();
  }
  return seconds_since(start);
}

void BM_gelu_forward(benchmark::State& state) {
  const std::int64_t n = state.range(0);
  const Tensor x = input("x", {n}, kF32);
  Tensor y = output("y", {n}, kF32);
  // x in, y out
  report_bytes(state, n, 2 * n * kF32Bytes, time_iterations(state, [&] { ops::gelu_forward(x, y); }), 1);
}

void BM_gelu_backward(benchmark::State& state) {
  const std::int64_t n = state.range(0);
  const Tensor x = input("x", {n}, kF32), dy = input("dy", {n}, kF32);
  Tensor dx = output("y", {n}, kF32);
  // dy, x in, dx out
  report_bytes(state, n, 3 * n * kF32Bytes, time_iterations(state, [&] { ops::gelu_backward(dy, x, dx); }), 1);
}

void BM_add_forward(benchmark::State& state) {
  const std::int64_t n = state.range(0);
  const Tensor a = input("x", {n}, kF32), b = input("dy", {n}, kF32);
  Tensor y = output("y", {n}, kF32);
  // a, b in, y out
  report_bytes(state, n, 3 * n * kF32Bytes, time_iterations(state, [&] { ops::add_forward(a, b, y); }));
}

void BM_layernorm_forward(benchmark::State& state) {
  const std::int64_t n = state.range(0), rows = n / kRow;
  const Tensor x = input("x", {n}, kF32).reshape({rows, kRow});
  const Tensor gamma = input("gamma", {kRow}, kF32), beta = input("beta", {kRow}, kF32);
  Tensor y = output("y", {n}, kF32).reshape({rows, kRow});
  Tensor mean = output("mean", {rows}, kF32), rstd = output("rstd", {rows}, kF32);
  // x, gamma, beta in; y, mean, rstd out
  const double seconds = time_iterations(state, [&] { ops::layernorm_forward(x, gamma, beta, y, mean, rstd); });
  report_bytes(state, n, (2 * n + 2 * kRow + 2 * rows) * kF32Bytes, seconds);
}

void BM_softmax_forward(benchmark::State& state) {
  const std::int64_t n = state.range(0), rows = n / kRow;
  const Tensor x = input("x", {n}, kF32).reshape({rows, kRow});
  Tensor y = output("y", {n}, kF32).reshape({rows, kRow});
  // x in, y out
  report_bytes(state, n, 2 * n * kF32Bytes, time_iterations(state, [&] { ops::softmax_forward(x, y); }), 1);
}

void BM_softmax_backward(benchmark::State& state) {
  const std::int64_t n = state.range(0), rows = n / kRow;
  const Tensor x = input("x", {n}, kF32).reshape({rows, kRow}), dy = input("dy", {n}, kF32).reshape({rows, kRow});
  Tensor y = output("y", {n}, kF32).reshape({rows, kRow}), dx = output("dx", {n}, kF32).reshape({rows, kRow});
  ops::softmax_forward(x, y);
  // dy, y in, dx out
  report_bytes(state, n, 3 * n * kF32Bytes, time_iterations(state, [&] { ops::softmax_backward(dy, y, dx); }));
}

void BM_layernorm_backward(benchmark::State& state) {
  const std::int64_t n = state.range(0), rows = n / kRow;
  const Tensor x = input("x", {n}, kF32).reshape({rows, kRow}), dy = input("dy", {n}, kF32).reshape({rows, kRow});
  const Tensor gamma = input("gamma", {kRow}, kF32), beta = input("beta", {kRow}, kF32);
  Tensor y = output("y", {n}, kF32).reshape({rows, kRow}), dx = output("dx", {n}, kF32).reshape({rows, kRow});
  Tensor mean = output("mean", {rows}, kF32), rstd = output("rstd", {rows}, kF32);
  Tensor dgamma = output("dgamma", {kRow}, kF32), dbeta = output("dbeta", {kRow}, kF32);
  ops::layernorm_forward(x, gamma, beta, y, mean, rstd);
  // dy, x, gamma, mean, rstd in; dx out; dgamma and dbeta read and written
  const double seconds =
      time_iterations(state, [&] { ops::layernorm_backward(dy, x, gamma, mean, rstd, dx, dgamma, dbeta); });
  report_bytes(state, n, (3 * n + 5 * kRow + 2 * rows) * kF32Bytes, seconds);
}

void BM_cross_entropy_forward(benchmark::State& state) {
  const std::int64_t n = state.range(0), rows = n / kVocab;
  const Tensor logits = input("x", {n}, kF32).reshape({rows, kVocab});
  Tensor targets = output("targets", {rows}, DataType::int32);
  initialize(targets, Init::tokens(kVocab), kSeed);
  const double start = thread_seconds();
  for (auto _ : state) benchmark::DoNotOptimize(ops::cross_entropy_forward(logits, targets, static_cast<double>(rows)));
  // logits and int32 targets in; the loss is a scalar
  report_bytes(state, n, (n + rows) * kF32Bytes, seconds_since(start), 1);
}

void BM_cross_entropy_backward(benchmark::State& state) {
  const std::int64_t n = state.range(0), rows = n / kVocab;
  const Tensor logits = input("x", {n}, kF32).reshape({rows, kVocab});
  Tensor dlogits = output("dx", {n}, kF32).reshape({rows, kVocab});
  Tensor targets = output("targets", {rows}, DataType::int32);
  initialize(targets, Init::tokens(kVocab), kSeed);
  // logits and int32 targets in, dlogits out
  const double seconds = time_iterations(state, [&] {
    benchmark::DoNotOptimize(ops::cross_entropy_backward(logits, targets, static_cast<double>(rows), dlogits));
  });
  report_bytes(state, n, (2 * n + rows) * kF32Bytes, seconds, 1);
}

// AdamW on n float32 parameters with float32 moments: parameter, gradient and both moments
// read, parameter and moments written.
void BM_adamw(benchmark::State& state) {
  const std::int64_t n = state.range(0);
  Tensor p = output("adamw.p", {n}, kF32), m = output("adamw.m", {n}, kF32), v = output("adamw.v", {n}, kF32);
  const Tensor g = input("dy", {n}, kF32);
  const double start = thread_seconds();
  std::int64_t step = 0;
  for (auto _ : state) {
    ops::adamw_update(p, g, m, v, 1e-3, 0.9, 0.999, 1e-8, 0.01, ++step);
    benchmark::ClobberMemory();
  }
  report_bytes(state, n, 7 * n * kF32Bytes, seconds_since(start));
}

// ---------------------------------------------------------------------------------------------
// Attention on a fused qkv [B, T, 3C]. Forward: q k^T and p v, 2 B T^2 C flops each, so
// 4 B T^2 C; backward: four such products (dP, dV, dQ, dK), 8 B T^2 C. Those are the model's
// FLOPs (the whole square): the CPU kernel skips the masked half, so its GFLOP/s and peak
// fraction are of model FLOPs, as MFU is, about twice the rate its multiply-adds run at.

// Causal attention at GPT-2 small's shape (one sequence of 1,024, hidden 768, 12 heads) and at
// the tiny preset's step (8 sequences of 64, hidden 64, 4 heads), whose per-head products are
// 64 x 64 x 16. FLOPs as the model counts them: 4 B T^2 C forward, twice that backward.
void attention_shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"B", "T", "C", "H"})->Args({1, 1024, 768, 12})->Args({8, 64, 64, 4});
}

void BM_attention_forward(benchmark::State& state, DataType type) {
  const std::int64_t B = state.range(0), T = state.range(1), C = state.range(2);
  const int heads = static_cast<int>(state.range(3));
  const Tensor qkv = input("qkv", {B, T, 3 * C}, type);
  Tensor out = output("attention.out", {B, T, C}, type);
  Tensor probs = output("attention.probs", {B, heads, T, T}, type);
  const double start = thread_seconds();
  for (auto _ : state) {
    ops::attention_forward(qkv, heads, true, out, probs);
    benchmark::ClobberMemory();
  }
  report_flops(state, 4.0 * B * T * T * C, seconds_since(start), type);
}

void BM_attention_backward(benchmark::State& state, DataType type) {
  const std::int64_t B = state.range(0), T = state.range(1), C = state.range(2);
  const int heads = static_cast<int>(state.range(3));
  const Tensor qkv = input("qkv", {B, T, 3 * C}, type), dout = input("attention.dout", {B, T, C}, type);
  Tensor out = output("attention.out", {B, T, C}, type);
  Tensor probs = output("attention.probs", {B, heads, T, T}, type);
  Tensor dqkv = output("attention.dqkv", {B, T, 3 * C}, type);
  ops::attention_forward(qkv, heads, true, out, probs);  // backward reads the forward's probabilities
  const double start = thread_seconds();
  for (auto _ : state) {
    ops::attention_backward(dout, qkv, probs, heads, dqkv);
    benchmark::ClobberMemory();
  }
  report_flops(state, 8.0 * B * T * T * C, seconds_since(start), type);
}

// A quarter second a case (the default is half) keeps the whole binary under a minute on two
// cores. The slowest cases (the float64 [4096 x 768] x [768 x 3072] multiply, GeLU on 64 MiB)
// take longer than that a call, so they report one timed call on warm buffers. The FMA peaks
// keep the default: every fraction divides by them.
constexpr double kMinTime = 0.25;

void elementwise_sizes(benchmark::internal::Benchmark* b) {
  b->ArgName("elements")->Arg(kCacheElements)->Arg(kMemoryElements)->MinTime(kMinTime);
}

}  // namespace

// Registration order is run order: the ceilings first, then what is read against them.
BENCHMARK_CAPTURE(BM_fma_peak, float32, DataType::float32);
BENCHMARK_CAPTURE(BM_fma_peak, float64, DataType::float64);
BENCHMARK_CAPTURE(BM_matmul, float32, DataType::float32)->Apply(matmul_shapes)->MinTime(kMinTime)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_matmul, float64, DataType::float64)->Apply(matmul_shapes)->MinTime(kMinTime)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_attention_forward, float32, DataType::float32)->Apply(attention_shapes)->MinTime(kMinTime)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_attention_backward, float32, DataType::float32)->Apply(attention_shapes)->MinTime(kMinTime)->Unit(benchmark::kMillisecond);

BENCHMARK(BM_host_copy)->Apply(elementwise_sizes);
BENCHMARK(BM_exp)->Apply(elementwise_sizes);
BENCHMARK(BM_gelu_forward)->Apply(elementwise_sizes);
BENCHMARK(BM_gelu_backward)->Apply(elementwise_sizes);
BENCHMARK(BM_add_forward)->Apply(elementwise_sizes);
BENCHMARK(BM_layernorm_forward)->Apply(elementwise_sizes);
BENCHMARK(BM_layernorm_backward)->Apply(elementwise_sizes);
BENCHMARK(BM_softmax_forward)->Apply(elementwise_sizes);
BENCHMARK(BM_softmax_backward)->Apply(elementwise_sizes);
BENCHMARK(BM_cross_entropy_forward)->Apply(elementwise_sizes);
BENCHMARK(BM_cross_entropy_backward)->Apply(elementwise_sizes);
BENCHMARK(BM_adamw)->Apply(elementwise_sizes);
