// parity bench model --path fast: the fast GPT step (reference/fast/gpt.hpp) on every rank's GPU,
// in the rows of /bench/model. Beside each step time: the rate of a large cuBLASLt product in the
// same type on the same GPU in the same run (mfu), and the GPU's dense datasheet peak
// (mfu_of_peak, hfu_of_peak; NaN for a GPU the table lacks). On several ranks the ranks are one
// data-parallel job: each steps on its own sequences and the gradients are summed every step,
// layer by layer as backward finishes them (CommunicatorSync).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>

#include "bench/cli/progress.hpp"
#include "bench/cli/shared.hpp"
#include "bench/commands/bench_model.hpp"
#include "bench/commands/fast_data_parallel.hpp"
#include "reference/core/error.hpp"
#include "reference/cuda/device.hpp"
#include "reference/fast/gpt.hpp"
#include "reference/model/model.hpp"
#include "reference/theory/gpus.hpp"
#include "reference/theory/model.hpp"

namespace parity::cli {
namespace {


// The product rate (GFLOP/s) of n x n x n cuBLASLt products in the storage type, on random
// values, median of 10 after 3 untimed.
double measure_product_GFLOPs(fast::Storage s, std::int64_t n) {
  const std::size_t bytes = static_cast<std::size_t>(n * n) * 2;
  void* a = cuda::allocate(bytes);
  void* b = cuda::allocate(bytes);
  void* c = cuda::allocate(bytes);
  fast::normal_init(s, a, nullptr, n * n, 1.f, 1);
  fast::normal_init(s, b, nullptr, n * n, 1.f, 2);
  std::vector<double> ms;
  cuda::Event start, stop;
  for (int rep = 0; rep < 13; ++rep) {
    start.record();
    fast::linear_forward(s, a, b, nullptr, c, nullptr, n, n, n, fast::Epilogue::none);
    stop.record();
    stop.wait();
    if (rep >= 3) ms.push_back(cuda::Event::elapsed_ms(start, stop));
  }
  cuda::release(a);
  cuda::release(b);
  cuda::release(c);
  return 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n) / (percentile(ms, 0.5) / 1e3) / 1e9;
}

// Causal attention forward plus backward at the model's shape, on random values (GFLOP/s, median
// of 5 after 2 untimed), counted as FlashAttention counts it: the forward's two products over the
// causal half (2 B T^2 C), backward 2.5 times that.
double measure_attention_GFLOPs(fast::Storage s, const fast::GptShape& shape) {
  const int B = static_cast<int>(shape.batch), T = static_cast<int>(shape.sequence), C = static_cast<int>(shape.hidden),
            H = shape.heads;
  const std::int64_t rows = std::int64_t{B} * T, stats = std::int64_t{B} * H * T;
  void* qkv = cuda::allocate(static_cast<std::size_t>(rows * 3 * C) * 2);
  void* out = cuda::allocate(static_cast<std::size_t>(rows * C) * 2);
  void* dout = cuda::allocate(static_cast<std::size_t>(rows * C) * 2);
  void* dqkv = cuda::allocate(static_cast<std::size_t>(rows * 3 * C) * 2);
  auto* lse = static_cast<float*>(cuda::allocate(static_cast<std::size_t>(stats) * 4));
  auto* delta = static_cast<float*>(cuda::allocate(static_cast<std::size_t>(stats) * 4));
  fast::normal_init(s, qkv, nullptr, rows * 3 * C, 1.f, 3);
  fast::normal_init(s, dout, nullptr, rows * C, 1.f, 4);
  std::vector<double> ms;
  cuda::Event start, stop;
  for (int rep = 0; rep < 7; ++rep) {
    start.record();
    fast::attention_forward(s, qkv, out, lse, B, T, C, H);
    fast::attention_backward(s, dout, qkv, out, lse, delta, dqkv, B, T, C, H);
    stop.record();
    stop.wait();
    if (rep >= 2) ms.push_back(cuda::Event::elapsed_ms(start, stop));
  }
  for (void* p : {qkv, out, dout, dqkv, static_cast<void*>(lse), static_cast<void*>(delta)}) cuda::release(p);
  const double forward = 2.0 * B * static_cast<double>(T) * T * C;
  return 3.5 * forward / (percentile(ms, 0.5) / 1e3) / 1e9;
}

}  // namespace

std::size_t fast_model_bench_bytes(const ModelBenchPlan& plan) {
  std::size_t most = 0;
  for (const auto& m : plan.models) {
    const fast::GptShape shape = fast_shape_of(m.config, plan.batch);
    const std::string why = fast::unsupported_reason(shape);
    if (!why.empty()) throw UsageError("--path fast cannot train " + m.name + ": " + why);
    most = std::max(most, fast::device_bytes(shape, fast_storage_of(plan.dtype)));
  }
  return most;
}

ModelBenchOutcome run_fast_model_bench(Session& session, const ModelBenchPlan& plan, const ModelBenchOptions& options) {
  Communicator& world = session.world();
  ModelBenchOutcome out;
  const fast::Storage storage = fast_storage_of(plan.dtype);
  const std::size_t steps_per_model = static_cast<std::size_t>(options.warmup + options.steps);
  Progress progress("bench model", plan.models.size() * steps_per_model, session.is_root() && !session.options().quiet);
  std::size_t done = 0;
  const int device = cuda::selected_device();
  const std::string gpu_name = cuda::devices().at(static_cast<std::size_t>(device)).name;
  const theory::GpuPeaks* peaks = theory::find_gpu_peaks(gpu_name);
  const double peak_GFLOPs = peaks ? theory::peak_flops(*peaks, plan.dtype) / 1e9 : std::nan("");
  for (const ModelPreset& preset : plan.models) {
    const model::GptConfig& c = preset.config;
    const fast::GptShape shape = fast_shape_of(c, plan.batch);
    const std::size_t first_row = out.table.rows();
    world.barrier();
    const double product_GFLOPs = measure_product_GFLOPs(storage, 8192);
    const double attention_GFLOPs = measure_attention_GFLOPs(storage, shape);
    const FastSteps run = run_fast_steps(world, c, plan.batch, plan.dtype, plan.overlap, options.warmup, options.steps, [&](int step) {
      progress.update(done++, preset.name + " step " + std::to_string(step + 1));
    });
    const double last_loss = run.last_loss;
    const fast::StepParts& parts = run.parts;
    const bool data_parallel = run.data_parallel;
    if (!std::isfinite(last_loss)) throw Error("bench model " + preset.name + ": the fast step's loss is not finite");
    const double step_seconds = percentile(run.seconds, 0.5);
    const std::int64_t model_flops = fast::model_flops_per_step(shape);
    const std::int64_t formula = theory::gpt_step_flops(c, plan.batch);
    if (shape.padded_vocabulary() == c.vocabulary && model_flops != formula)
      throw Error("bench model " + preset.name + ": the fast step's products come to " + std::to_string(model_flops) +
                  " FLOPs but the formula gives " + std::to_string(formula));
    const double hardware = static_cast<double>(fast::hardware_flops_per_step(shape));
    const auto all_times = gather_from_ranks(world, step_seconds);
    const auto all_products = gather_from_ranks(world, product_GFLOPs);
    const auto all_attention = gather_from_ranks(world, attention_GFLOPs);
    const auto all_part_products = gather_from_ranks(world, parts.products_ms / parts.total_ms());
    const auto all_part_attention = gather_from_ranks(world, parts.attention_ms / parts.total_ms());
    const auto all_part_other = gather_from_ranks(world, parts.other_ms() / parts.total_ms());
    const auto all_part_sync = gather_from_ranks(world, parts.sync_ms / parts.total_ms());

    const std::size_t bytes = fast::device_bytes(shape, storage);
    // The fast path allocates everything up front, outside the memory tracker: its plan's bytes,
    // all counted as workspace.
    std::vector<std::int64_t> peak_bytes;
    for (MemoryCategory category : kAllMemoryCategories)
      peak_bytes.push_back(category == MemoryCategory::workspace ? static_cast<std::int64_t>(bytes) : 0);
    for (int r = 0; r < world.size(); ++r) {
      const auto i = static_cast<std::size_t>(r);
      ModelRow row = model_row(session, preset, plan.batch, r);
      row.config += " fast " + options.dtype;
      row.path = "fast";
      row.step_flops = model_flops;
      row.hardware_step_flops = hardware;
      row.step_time_s = all_times[i];
      row.matmul_GFLOPs = all_products[i];
      row.peak_bytes = peak_bytes;
      row.peak_GFLOPs = peak_GFLOPs;
      row.products_fraction = all_part_products[i];
      row.attention_fraction = all_part_attention[i];
      row.other_fraction = all_part_other[i];
      row.attention_GFLOPs = all_attention[i];
      row.replicas = data_parallel ? world.size() : 1;
      row.sync_fraction = data_parallel ? all_part_sync[i] : std::nan("");
      add_model_row(out.table, row);
    }
    session.record_rows("/bench/model", out.table, first_row);
    if (session.is_root() && !session.options().quiet) {
      std::fprintf(stderr,
                   "[bench model] %s: step time in products %.2f, attention %.2f, other %.2f (LayerNorm %.1f ms, loss "
                   "%.1f, embeddings %.1f, optimizer %.1f, waiting for the gradients' sum %.1f of %.1f); attention "
                   "forward+backward %.0f TFLOP/s (%.2f of peak, %s kernels)\n",
                   preset.name.c_str(), all_part_products[0], all_part_attention[0], all_part_other[0],
                   parts.layernorm_ms, parts.loss_ms, parts.embedding_ms, parts.optimizer_ms, parts.sync_ms, parts.total_ms(),
                   all_attention[0] / 1e3, all_attention[0] / peak_GFLOPs,
                   fast::name_of(fast::attention_kernels(static_cast<int>(c.hidden / c.heads))));
      std::fprintf(stderr,
                   "[bench model] %s fast %s B=%lld on %s: %.0f tokens/s, %.1f TFLOP/s, MFU %.3f of the %.0f TFLOP/s "
                   "peak, %.3f of the measured %.0f TFLOP/s product (rank 0)\n",
                   preset.name.c_str(), options.dtype.c_str(), static_cast<long long>(plan.batch), gpu_name.c_str(),
                   static_cast<double>(plan.batch * c.sequence) / all_times[0], static_cast<double>(model_flops) / all_times[0] / 1e12,
                   static_cast<double>(model_flops) / all_times[0] / 1e9 / peak_GFLOPs, peak_GFLOPs / 1e3,
                   static_cast<double>(model_flops) / all_times[0] / 1e9 / all_products[0], all_products[0] / 1e3);
    }
  }
  progress.finish();
  return out;
}

}  // namespace parity::cli
