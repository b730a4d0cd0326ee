// Single-rank kernels under Google Benchmark: the reductions the reference algorithms apply to
// received chunks and the 16-bit conversions, read against memcpy of the same bytes measured
// in the same run (bytes_per_second counts bytes read plus bytes written).
#include <benchmark/benchmark.h>

#include <cstring>

#include "reference/kernels/buffer_kernels.hpp"

namespace {

using namespace parity;

void fill(BufferView b) {
  visit_data_type(b.dtype, [&](auto tag) {
    using T = decltype(tag);
    for (std::size_t i = 0; i < b.count; ++i) b.as<T>()[i] = from_double<T>(static_cast<double>(i % 13) * 0.25);
  });
}

void BM_memcpy(benchmark::State& state) {
  const auto bytes = static_cast<std::size_t>(state.range(0));
  HostBuffer a(bytes, DataType::float32), b(bytes, DataType::float32);  // over-allocated 4x; only `bytes` used
  std::memset(a.data(), 1, bytes);
  std::memset(b.data(), 0, bytes);
  for (auto _ : state) {
    std::memcpy(b.data(), a.data(), bytes);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * static_cast<std::int64_t>(2 * bytes));
}

void BM_reduce_into(benchmark::State& state, DataType type, ReduceOp op) {
  const auto bytes = static_cast<std::size_t>(state.range(0));
  const std::size_t count = bytes / size_of(type);
  HostBuffer acc(count, type), in(count, type);
  fill(acc.view());
  fill(in.view());
  for (auto _ : state) {
    reduce_into(acc.view(), in.view(), op);
    benchmark::ClobberMemory();
  }
  // reads two buffers, writes one
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * static_cast<std::int64_t>(3 * bytes));
}

void BM_convert(benchmark::State& state, DataType from, DataType to) {
  const std::size_t count = static_cast<std::size_t>(state.range(0)) / size_of(from);
  HostBuffer src(count, from), dst(count, to);
  fill(src.view());
  for (auto _ : state) {
    convert_buffer(dst.view(), src.view());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) *
                          static_cast<std::int64_t>(count * (size_of(from) + size_of(to))));
}

constexpr std::int64_t kSmall = 1 << 16, kLarge = 64 << 20;

}  // namespace

BENCHMARK(BM_memcpy)->Arg(kSmall)->Arg(kLarge);
BENCHMARK_CAPTURE(BM_reduce_into, float32_sum, DataType::float32, ReduceOp::sum)->Arg(kSmall)->Arg(kLarge);
BENCHMARK_CAPTURE(BM_reduce_into, float64_sum, DataType::float64, ReduceOp::sum)->Arg(kSmall)->Arg(kLarge);
BENCHMARK_CAPTURE(BM_reduce_into, int32_max, DataType::int32, ReduceOp::max)->Arg(kSmall)->Arg(kLarge);
BENCHMARK_CAPTURE(BM_reduce_into, bfloat16_sum_native, DataType::bfloat16, ReduceOp::sum)->Arg(kSmall)->Arg(kLarge);
BENCHMARK_CAPTURE(BM_reduce_into, float16_sum_native, DataType::float16, ReduceOp::sum)->Arg(kSmall)->Arg(kLarge);
BENCHMARK_CAPTURE(BM_convert, bfloat16_to_float32, DataType::bfloat16, DataType::float32)->Arg(kLarge);
BENCHMARK_CAPTURE(BM_convert, float32_to_bfloat16, DataType::float32, DataType::bfloat16)->Arg(kLarge);
BENCHMARK_CAPTURE(BM_convert, float16_to_float32, DataType::float16, DataType::float32)->Arg(kLarge);

BENCHMARK_MAIN();
