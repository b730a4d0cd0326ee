// The analytic models on hand-computed values.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <utility>

#include "bench/commands/presets.hpp"
#include "reference/comm/algorithms.hpp"
#include "reference/comm/collectives.hpp"
#include "reference/core/tolerance.hpp"
#include "reference/theory/collectives.hpp"
#include "reference/theory/gpus.hpp"
#include "reference/theory/model.hpp"
#include "reference/theory/tensor.hpp"

namespace parity::theory {
namespace {

// The collectives' descriptors (reference/comm/collectives/) hold the factors and sizes.
TEST(Theory, BusBandwidthFactors) {
  EXPECT_DOUBLE_EQ(describe(Collective::all_reduce).busbw_factor(4), 1.5);
  EXPECT_DOUBLE_EQ(describe(Collective::all_reduce).busbw_factor(1), 0.0);
  EXPECT_DOUBLE_EQ(describe(Collective::all_gather).busbw_factor(8), 7.0 / 8);
  EXPECT_DOUBLE_EQ(describe(Collective::reduce_scatter).busbw_factor(2), 0.5);
  EXPECT_DOUBLE_EQ(describe(Collective::all_to_all).busbw_factor(4), 0.75);
  EXPECT_DOUBLE_EQ(describe(Collective::all_to_all_v).busbw_factor(4), 0.75);
  EXPECT_DOUBLE_EQ(describe(Collective::broadcast).busbw_factor(8), 1.0);
  EXPECT_DOUBLE_EQ(describe(Collective::reduce).busbw_factor(8), 1.0);
  EXPECT_DOUBLE_EQ(collective_bytes(Collective::all_gather, 10, 4, 3), 120.0);
  EXPECT_DOUBLE_EQ(collective_bytes(Collective::all_reduce, 10, 4, 3), 40.0);
}

// all_to_all_v's count pattern is what its comment promises: uneven, zero somewhere at every
// n >= 2, the self block one chunk, never nothing both ways between two ranks, and n chunks
// per send and receive buffer on average, so that collective_bytes is all_to_all's.
TEST(Theory, AllToAllVCountPattern) {
  const std::size_t chunk = 7;
  EXPECT_EQ(all_to_all_v_count(chunk, 0, 0), chunk);  // one rank: all_to_all of chunk
  for (int n = 1; n <= 40; ++n) {
    std::size_t sent = 0, received = 0, zeros = 0;
    for (int r = 0; r < n; ++r) {
      EXPECT_EQ(all_to_all_v_count(chunk, r, r), chunk);
      sent += all_to_all_v_send_total(chunk, r, n);
      received += all_to_all_v_recv_total(chunk, r, n);
      for (int p = 0; p < n; ++p) {
        zeros += all_to_all_v_count(chunk, r, p) == 0 ? 1 : 0;
        EXPECT_GT(all_to_all_v_count(chunk, r, p) + all_to_all_v_count(chunk, p, r), 0u) << n << " " << r << " " << p;
      }
    }
    EXPECT_EQ(sent, chunk * static_cast<std::size_t>(n * n)) << n;
    EXPECT_EQ(received, sent) << n;
    if (n >= 2) {
      EXPECT_GT(zeros, 0u) << n;
    }
    EXPECT_DOUBLE_EQ(collective_bytes(Collective::all_to_all_v, chunk, 4, n), collective_bytes(Collective::all_to_all, chunk, 4, n));
  }
  EXPECT_EQ(all_to_all_v_send_total(chunk, 1, 2), chunk);      // 0 to rank 0, chunk to itself
  EXPECT_EQ(all_to_all_v_recv_total(chunk, 1, 2), 3 * chunk);  // 2 chunks from rank 0, its own
}

TEST(Theory, AlphaBetaCosts) {
  const AlphaBeta m{2e-6, 1e-9};  // 2 us per message, 1 GB/s
  const double M = 1 << 20;
  EXPECT_DOUBLE_EQ(ring_all_reduce_seconds(4, M, m), 6 * (2e-6 + M / 4 * 1e-9));
  EXPECT_DOUBLE_EQ(naive_all_reduce_seconds(4, M, m), 6 * (2e-6 + M * 1e-9));
  EXPECT_DOUBLE_EQ(recursive_doubling_all_reduce_seconds(8, M, m), 3 * (2e-6 + M * 1e-9));
  EXPECT_DOUBLE_EQ(recursive_doubling_all_reduce_seconds(6, M, m), (2 + 2) * (2e-6 + M * 1e-9));
  EXPECT_DOUBLE_EQ(rabenseifner_all_reduce_seconds(8, M, m), 6 * 2e-6 + 2.0 * 7 / 8 * M * 1e-9);
  EXPECT_DOUBLE_EQ(binomial_tree_seconds(5, M, m), 3 * (2e-6 + M * 1e-9));
  EXPECT_DOUBLE_EQ(ring_chunked_seconds(4, M, m), 3 * (2e-6 + M / 4 * 1e-9));
  EXPECT_DOUBLE_EQ(ring_all_reduce_bytes_per_rank(4, M), 1.5 * M);
  // all_to_all_v at 2 ranks: one step, rank 0 sends 2 chunks (M / 2 each), rank 1 none.
  EXPECT_DOUBLE_EQ(pairwise_all_to_all_v_seconds(2, M, m), 2e-6 + M * 1e-9);
  EXPECT_DOUBLE_EQ(pairwise_all_to_all_v_seconds(1, M, m), 0.0);
  // At 3 ranks each rank's two exchanges carry 2 chunks (M / 3 each) one way, none the other.
  EXPECT_DOUBLE_EQ(pairwise_all_to_all_v_seconds(3, M, m), 2 * (2e-6 + 2 * M / 3 * 1e-9));
  EXPECT_DOUBLE_EQ(pairwise_all_to_all_v_bytes_per_rank(4, M), 0.75 * M);
  // For large messages the ring's bandwidth term is independent of n and beats naive.
  EXPECT_LT(ring_all_reduce_seconds(8, 1e9, m), naive_all_reduce_seconds(8, 1e9, m));
}

TEST(Theory, AlphaBetaFit) {
  // Times on a line: the fit gives it back.
  const AlphaBeta line = fit_alpha_beta({8, 1024, 1 << 20}, {2e-6 + 8e-9, 2e-6 + 1024e-9, 2e-6 + (1 << 20) * 1e-9});
  EXPECT_DOUBLE_EQ(line.alpha_seconds, 2e-6 + 8e-9);
  EXPECT_NEAR(line.beta_seconds_per_byte, 1e-9, 1e-18);
  // Times off a line: alpha is the smallest message's time and beta the slope from the
  // smallest to the largest message, whatever the sizes between (a middle point's noise does
  // not tilt the bandwidth).
  const AlphaBeta bent = fit_alpha_beta({8, 1024, 1 << 20}, {1e-6, 9e-6, 5e-4});
  EXPECT_DOUBLE_EQ(bent.alpha_seconds, 1e-6);
  EXPECT_DOUBLE_EQ(bent.beta_seconds_per_byte, (5e-4 - 1e-6) / ((1 << 20) - 8));
  // The smallest message slower than the largest (noise on a loaded host): beta is the largest
  // message's time over its bytes, never zero or negative (an infinite bandwidth).
  const AlphaBeta noisy = fit_alpha_beta({8, 1 << 20}, {5e-4, 4e-4});
  EXPECT_DOUBLE_EQ(noisy.alpha_seconds, 5e-4);
  EXPECT_DOUBLE_EQ(noisy.beta_seconds_per_byte, 4e-4 / (1 << 20));
  const AlphaBeta flat = fit_alpha_beta({8, 1 << 20}, {4e-4, 4e-4});
  EXPECT_DOUBLE_EQ(flat.beta_seconds_per_byte, 4e-4 / (1 << 20));
  // One size: only the latency.
  const AlphaBeta one = fit_alpha_beta({64}, {3e-6});
  EXPECT_DOUBLE_EQ(one.alpha_seconds, 3e-6);
  EXPECT_DOUBLE_EQ(one.beta_seconds_per_byte, 0.0);
  EXPECT_THROW(fit_alpha_beta({}, {}), std::invalid_argument);
  EXPECT_THROW(fit_alpha_beta({8, 16}, {1e-6}), std::invalid_argument);
}

TEST(Theory, PowersOfTwo) {
  EXPECT_EQ(power_of_two_floor(1), 1);
  EXPECT_EQ(power_of_two_floor(5), 4);
  EXPECT_EQ(power_of_two_floor(8), 8);
  EXPECT_EQ(ceil_log2(1), 0);
  EXPECT_EQ(ceil_log2(5), 3);
  EXPECT_EQ(ceil_log2(8), 3);
}

// docs/tensor-parallelism.md: at 2 bytes per element, parity's block keeps Korthikanti et al.'s
// bytes minus the residual dropout masks (2sbh, over t with SP) and the attention dropout's mask
// and output (3as^2b/t), plus the LayerNorm statistics (8bs, over t with SP).
TEST(Theory, TensorParallelActivationsDifferFromKorthikantiAsDocumented) {
  for (auto [s, b, h, a] : {std::tuple{12, 3, 24, 12}, std::tuple{128, 4, 256, 8}, std::tuple{2048, 1, 4096, 32}})
    for (int t : {1, 2, 4})
      for (bool sp : {false, true}) {
        const double sbh = double(s) * b * h;
        const double korthikanti = korthikanti_tensor_parallel_activation_bytes(s, b, h, a, t, sp);
        const double shard = sp ? t : 1;
        // The LayerNorm statistics: 4 float32 values per token.
        const double explained = korthikanti - 2 * sbh / shard - 3.0 * a * s * s * b / t + 16.0 * s * b / shard;
        const double ours = static_cast<double>(tensor_parallel_block_activation_bytes(s, b, h, a, t, sp, 2, 4));
        EXPECT_NEAR(ours, explained, tolerance::closed_form_relative_bound(12) * korthikanti)
            << "s=" << s << " b=" << b << " h=" << h << " a=" << a << " t=" << t << (sp ? " sp" : "");
      }
  // One rank: the single-device accounting; SP divides everything by t.
  for (std::int64_t e : {2, 4, 8}) {
    const std::int64_t r = e == 8 ? 8 : 4;
    EXPECT_EQ(tensor_parallel_block_activation_bytes(12, 3, 24, 12, 1, false, e, r),
              parity_block_activation_bytes(12, 3, 24, 12, e, r));
    EXPECT_EQ(4 * tensor_parallel_block_activation_bytes(12, 3, 24, 12, 4, true, e, r),
              parity_block_activation_bytes(12, 3, 24, 12, e, r));
  }
}

// The predicted tensor-parallel communication time, term by term: with alpha 0 it is beta times
// the bytes a rank sends (the bytes formula, hand-checked above, which bench tensor checks
// against the bytes measured); with beta 0 it is alpha times the messages of the ring
// collectives on the critical path: 2 (t-1) per all-reduce, t-1 per all-gather or
// reduce-scatter. Counts per step: no SP, 4 all-reduces a block, one each for the embedding and
// head, two for the loss; SP, 10 all-gathers or reduce-scatters a block, 2 embedding, 3 head,
// and the loss's two all-reduces.
TEST(Theory, TensorParallelPredictedTimeIsItsAlphaAndBetaTerms) {
  const model::GptConfig c{.vocabulary = 48, .layers = 3, .hidden = 24, .heads = 12, .sequence = 12};
  for (int t : {2, 3, 4})
    for (bool sp : {false, true})
      for (double e : {2.0, 4.0}) {
        SCOPED_TRACE("t " + std::to_string(t) + (sp ? " SP" : "") + " e " + std::to_string(e));
        const double bytes = tensor_parallel_bytes_per_rank(c, 3, t, sp, e, 4).total(c.layers);
        EXPECT_NEAR(tensor_parallel_predicted_seconds(c, 3, t, sp, e, 4, {0, 1e-9}), bytes * 1e-9, 1e-12 * bytes * 1e-9);
        const double messages = sp ? (t - 1) * (10.0 * c.layers + 2 + 3) + 2 * 2.0 * (t - 1)
                                   : 2.0 * (t - 1) * (4.0 * c.layers + 1 + 1 + 2);
        EXPECT_NEAR(tensor_parallel_predicted_seconds(c, 3, t, sp, e, 4, {1e-6, 0}), messages * 1e-6, 1e-15);
      }
  EXPECT_EQ(tensor_parallel_predicted_seconds(c, 3, 1, true, 4, 4, {1e-6, 1e-9}), 0.0);
  // The sums of the sequence-sharded gradients: beta times their bytes, and 2 (t-1) messages for
  // each of the 2 (2L + 1) LayerNorm parameters and the position table, over the efficiency.
  for (int t : {2, 3, 4}) {
    SCOPED_TRACE("t " + std::to_string(t));
    EXPECT_NEAR(sequence_parallel_gradient_seconds(c, t, 2, {0, 1e-9}),
                sequence_parallel_gradient_bytes_per_rank(c, t, 2) * 1e-9, 1e-21);
    EXPECT_NEAR(sequence_parallel_gradient_seconds(c, t, 2, {1e-6, 0}, 0.5),
                2.0 * (t - 1) * (2 * (2.0 * c.layers + 1) + 1) * 1e-6 / 0.5, 1e-15);
  }
  EXPECT_EQ(sequence_parallel_gradient_seconds(c, 1, 2, {1e-6, 1e-9}), 0.0);
  // Each kind at its own efficiency: with alpha only, the messages of each kind over its own.
  // SP: 6 all-gathers and 4 reduce-scatters a block, the embedding one of each, the head 2 and 1.
  const TensorParallelEfficiency slow{.all_reduce = 0.8, .all_gather = 0.5, .reduce_scatter = 0.25};
  for (int t : {2, 4}) {
    const double gathers = 6.0 * c.layers + 1 + 2, scatters = 4.0 * c.layers + 1 + 1;
    EXPECT_NEAR(tensor_parallel_predicted_seconds(c, 3, t, true, 4, 4, {1e-6, 0}, slow),
                (t - 1) * 1e-6 * (gathers / 0.5 + scatters / 0.25) + 2 * 2.0 * (t - 1) * 1e-6 / 0.8, 1e-15);
    EXPECT_NEAR(tensor_parallel_predicted_seconds(c, 3, t, false, 4, 4, {1e-6, 0}, slow),
                2.0 * (t - 1) * (4.0 * c.layers + 1 + 1 + 2) * 1e-6 / 0.8, 1e-15);
  }
}

// The regions' memory traffic, counted by hand: with sequence parallelism every all-gather
// copies the shard (a / t bytes) and, with more than one row, every all-gather and reduce-scatter
// interleaves the whole (a); without it nothing is copied. Every collective touches its send and
// receive buffers: an all-reduce its one buffer in place.
TEST(Theory, TensorParallelPredictedTimeCountsTheRegionsCopiesAndBuffers) {
  const model::GptConfig c{.vocabulary = 48, .layers = 3, .hidden = 24, .heads = 12, .sequence = 12};
  const TensorParallelMemory copies{[](double bytes) { return bytes * 1e-9; }, {}};
  const TensorParallelMemory fetches{{}, [](double bytes) { return bytes * 1e-9; }};
  const double gathers = 6.0 * c.layers + 1 + 2, scatters = 4.0 * c.layers + 1 + 1, reduces = 4.0 * c.layers + 1 + 1;
  for (int t : {2, 4})
    for (std::int64_t rows : {1, 3}) {
      SCOPED_TRACE("t " + std::to_string(t) + " rows " + std::to_string(rows));
      const double a = static_cast<double>(rows * c.sequence * c.hidden) * 4, stats = static_cast<double>(rows * c.sequence) * 4;
      EXPECT_EQ(tensor_parallel_predicted_seconds(c, rows, t, false, 4, 4, {0, 0}, {}, copies), 0.0);
      const double interleaved = rows > 1 ? (gathers + scatters) * a : 0;
      EXPECT_NEAR(tensor_parallel_predicted_seconds(c, rows, t, true, 4, 4, {0, 0}, {}, copies),
                  (gathers * a / t + interleaved) * 1e-9, 1e-18);
      EXPECT_NEAR(tensor_parallel_predicted_seconds(c, rows, t, false, 4, 4, {0, 0}, {}, fetches),
                  (reduces * a + 3 * stats) * 1e-9, 1e-18);
      EXPECT_NEAR(tensor_parallel_predicted_seconds(c, rows, t, true, 4, 4, {0, 0}, {}, fetches),
                  ((gathers + scatters) * (a + a / t) + 3 * stats) * 1e-9, 1e-18);
    }
}

TEST(Theory, TensorParallelBytesAndParameters) {
  model::GptConfig c{.vocabulary = 48, .layers = 2, .hidden = 24, .heads = 12, .sequence = 12};
  // b = 3 sequences, t = 4, e = 4: A = 3 * 12 * 24 = 864 elements.
  const TensorParallelBytes plain = tensor_parallel_bytes_per_rank(c, 3, 4, false, 4, 4);
  EXPECT_DOUBLE_EQ(plain.block, 8 * 0.75 * 864 * 4);
  EXPECT_DOUBLE_EQ(plain.embedding, 2 * 0.75 * 864 * 4);
  EXPECT_DOUBLE_EQ(plain.head, 2 * 0.75 * 864 * 4);
  EXPECT_DOUBLE_EQ(plain.loss, 2 * 0.75 * 3 * 36 * 4);
  const TensorParallelBytes sp = tensor_parallel_bytes_per_rank(c, 3, 4, true, 4, 4);
  EXPECT_DOUBLE_EQ(sp.block, 10 * 0.75 * 864 * 4);
  EXPECT_DOUBLE_EQ(sp.head, 3 * 0.75 * 864 * 4);
  EXPECT_DOUBLE_EQ(tensor_parallel_bytes_per_rank(c, 3, 1, true, 4, 4).total(2), 0.0);
  // At t = 1 the sharded count is the whole model's.
  EXPECT_EQ(tensor_parallel_parameters_per_rank(c, 1), gpt_parameters(c));
  c.tied_embeddings = false;
  EXPECT_EQ(tensor_parallel_parameters_per_rank(c, 1), gpt_parameters(c));
  // t = 2: token table and head halved, blocks 12h^2/2 + 7h/2 + 6h, the rest whole.
  EXPECT_EQ(tensor_parallel_parameters_per_rank(c, 2), 2 * (48 * 24 / 2) + 12 * 24 + 2 * (6 * 576 + 84 + 144) + 48);
}

// Each CUDA device name maps to its row; names outside the table, to nothing.
TEST(GpuPeaks, DeviceNames) {
  const std::pair<const char*, const char*> names[] = {
      {"NVIDIA H100 80GB HBM3", "H100 SXM"},   {"NVIDIA H100 PCIe", "H100 PCIe"},
      {"NVIDIA H100 NVL", "H100 NVL"},         {"NVIDIA H200", "H200 SXM"},
      {"NVIDIA A100-SXM4-80GB", "A100 SXM"},   {"NVIDIA A100-SXM4-40GB", "A100 SXM"},
      {"NVIDIA A100-PCIE-40GB", "A100 PCIe"},  {"NVIDIA A100 80GB PCIe", "A100 PCIe"},
      {"nvidia h100 pcie", "H100 PCIe"},
  };
  for (const auto& [device, row] : names) {
    const GpuPeaks* g = find_gpu_peaks(device);
    ASSERT_NE(g, nullptr) << device;
    EXPECT_EQ(std::string(g->name), row) << device;
  }
  for (const char* unknown :
       {"NVIDIA GeForce RTX 4090", "", "NVIDIA RTX A1000", "NVIDIA GH200 480GB", "Tesla V100-SXM2-16GB"})
    EXPECT_EQ(find_gpu_peaks(unknown), nullptr) << unknown;
}

TEST(GpuPeaks, PeakFlops) {
  const GpuPeaks& h100 = *find_gpu_peaks("NVIDIA H100 80GB HBM3");
  EXPECT_DOUBLE_EQ(peak_flops(h100, DataType::bfloat16), 989.4e12);
  EXPECT_DOUBLE_EQ(peak_flops(h100, DataType::float16), 989.4e12);
  EXPECT_DOUBLE_EQ(peak_flops(h100, DataType::float32), 66.9e12);
  EXPECT_DOUBLE_EQ(peak_flops(h100, DataType::float64), 66.9e12);
  EXPECT_DOUBLE_EQ(h100.memory_GBps, 3350.0);
  EXPECT_TRUE(std::isnan(peak_flops(h100, DataType::int32)));
  EXPECT_TRUE(std::isnan(peak_flops(h100, DataType::int64)));
  const GpuPeaks& a100 = *find_gpu_peaks("NVIDIA A100-SXM4-80GB");
  EXPECT_DOUBLE_EQ(peak_flops(a100, DataType::bfloat16), 312e12);
  EXPECT_DOUBLE_EQ(peak_flops(a100, DataType::float64), 19.5e12);
  EXPECT_DOUBLE_EQ(find_gpu_peaks("NVIDIA H200")->memory_GBps, 4800.0);
  EXPECT_DOUBLE_EQ(peak_flops(*find_gpu_peaks("NVIDIA H100 PCIe"), DataType::bfloat16), 756.5e12);
  // The A100 datasheet's memory bandwidths: 2,039 GB/s for the 80GB SXM4, 1,935 GB/s for the
  // 80GB PCIe card (HBM2e at a lower clock).
  EXPECT_DOUBLE_EQ(find_gpu_peaks("NVIDIA A100-SXM4-80GB")->memory_GBps, 2039.0);
  EXPECT_DOUBLE_EQ(find_gpu_peaks("NVIDIA A100 80GB PCIe")->memory_GBps, 1935.0);
}

// Six rows, names unique, each with a source; the dense tensor rates fall bf16 = fp16 >= tf32
// >= fp32 (a swapped column breaks the order), and every figure is positive.
TEST(GpuPeaks, TableIsOrdered) {
  ASSERT_EQ(gpu_peaks().size(), 6u);
  for (std::size_t i = 0; i < gpu_peaks().size(); ++i) {
    const GpuPeaks& g = gpu_peaks()[i];
    SCOPED_TRACE(g.name);
    for (std::size_t j = 0; j < i; ++j) EXPECT_NE(std::string(g.name), gpu_peaks()[j].name);
    EXPECT_FALSE(std::string(g.source).empty());
    EXPECT_DOUBLE_EQ(g.bfloat16_TFLOPs, g.float16_TFLOPs);
    EXPECT_GE(g.bfloat16_TFLOPs, g.tf32_TFLOPs);
    EXPECT_GE(g.tf32_TFLOPs, g.float32_TFLOPs);
    EXPECT_GT(g.float32_TFLOPs, 0.0);
    EXPECT_GT(g.float64_TFLOPs, 0.0);
    EXPECT_GT(g.memory_GBps, 0.0);
  }
}

// The published GPT shapes: their numbers, and parameter counts (tied embeddings) by hand from
// V h + T h + L (12 h^2 + 13 h) + 2 h, which gpt_parameters must reproduce exactly and which
// are the advertised 355M, 1.31B and 2.65B to within 2%.
TEST(ModelPresets, PublishedGptShapes) {
  struct Expected {
    const char* name;
    std::int64_t vocabulary, layers, hidden, heads, sequence, parameters;
    double advertised;
  };
  const Expected expected[] = {
      {"gpt2-medium", 50304, 24, 1024, 16, 1024, 354'871'296, 355e6},
      {"gpt-1.3b", 50304, 24, 2048, 16, 2048, 1'315'819'520, 1.31e9},
      {"gpt-2.7b", 50304, 32, 2560, 32, 2048, 2'651'673'600, 2.65e9},
  };
  for (const Expected& e : expected) {
    SCOPED_TRACE(e.name);
    const model::GptConfig& c = cli::find_model_preset(e.name).config;
    EXPECT_EQ(c.vocabulary, e.vocabulary);
    EXPECT_EQ(c.layers, e.layers);
    EXPECT_EQ(c.hidden, e.hidden);
    EXPECT_EQ(c.heads, e.heads);
    EXPECT_EQ(c.sequence, e.sequence);
    EXPECT_EQ(c.vocabulary % 128, 0);
    EXPECT_TRUE(c.tied_embeddings);
    const std::int64_t h = c.hidden;
    EXPECT_EQ(c.vocabulary * h + c.sequence * h + c.layers * (12 * h * h + 13 * h) + 2 * h, e.parameters);
    EXPECT_EQ(gpt_parameters(c), e.parameters);
    EXPECT_NEAR(static_cast<double>(e.parameters), e.advertised, 0.02 * e.advertised);
  }
  // They follow the four small presets, which keep their places.
  ASSERT_GE(cli::model_presets().size(), 7u);
  EXPECT_EQ(cli::model_presets()[3].name, "large");
  EXPECT_EQ(cli::model_presets()[4].name, "gpt2-medium");
  EXPECT_NE(cli::model_presets_help().find("gpt-2.7b"), std::string::npos);
}

// Every registered algorithm's predicted time (bench collectives' predicted_time_us), term by
// term against its message pattern counted by hand from its description: with beta 0 the
// messages on the critical path times alpha, with alpha 0 the bytes on it times beta, at a
// power of two (4) and not (6), for a buffer of M bytes (chunked collectives: M the whole,
// n chunks). Native is the best of its collective's algorithms; hierarchical is predicted as
// the flat ring. An algorithm without a row here fails: its counts must be written down.
TEST(Theory, EveryAlgorithmsPredictionIsItsMessagesAndBytes) {
  struct Counts {
    double messages, bytes_of_M;
  };
  // "collective/algorithm" -> counts at n = 4 and at n = 6.
  const std::map<std::string, std::pair<Counts, Counts>> hand = {
      {"all_reduce/ring", {{6, 6.0 / 4}, {10, 10.0 / 6}}},             // 2(n-1) chunks of M/n
      {"all_reduce/hierarchical", {{6, 6.0 / 4}, {10, 10.0 / 6}}},     // as the ring
      {"all_reduce/naive", {{6, 6}, {10, 10}}},                        // n-1 in, n-1 out, whole
      {"all_reduce/recursive_doubling", {{2, 2}, {4, 4}}},             // log2 p, + fold in and out
      {"all_reduce/rabenseifner", {{4, 1.5}, {6, 1.5 + 2}}},           // 2 log2 p carrying 2(p-1)/p M, + fold
      {"reduce/binomial_tree", {{2, 2}, {3, 3}}},                      // ceil(log2 n) whole
      {"broadcast/binomial_tree", {{2, 2}, {3, 3}}},
      {"all_gather/ring", {{3, 3.0 / 4}, {5, 5.0 / 6}}},               // n-1 chunks
      {"reduce_scatter/ring", {{3, 3.0 / 4}, {5, 5.0 / 6}}},
      {"all_to_all/pairwise", {{3, 3.0 / 4}, {5, 5.0 / 6}}},
  };
  const double M = 1.2e6;
  for (Collective c : kAllCollectives) {
    const std::vector<const AlgorithmDescriptor*> family = algorithms_for(c);
    for (int n : {4, 6}) {
      Counts best{1e300, 1e300};
      for (const AlgorithmDescriptor* d : family) {
        const std::string key = std::string(name_of(c)) + "/" + d->name;
        const double alpha_only = d->predicted_seconds(n, M, {1e-6, 0}) / 1e-6;
        const double beta_only = d->predicted_seconds(n, M, {0, 1e-9}) / 1e-9 / M;
        if (d->native) continue;
        best = {std::min(best.messages, alpha_only), std::min(best.bytes_of_M, beta_only)};
        if (c == Collective::all_to_all_v) {
          // Pairwise exchanges with every other rank (this pattern sends each pair something).
          EXPECT_NEAR(alpha_only, n - 1, 1e-9) << key;
          continue;
        }
        const auto row = hand.find(key);
        ASSERT_NE(row, hand.end()) << key << ": write its message and byte counts here";
        const Counts& expected = n == 4 ? row->second.first : row->second.second;
        EXPECT_NEAR(alpha_only, expected.messages, 1e-9) << key << " n " << n;
        EXPECT_NEAR(beta_only, expected.bytes_of_M, 1e-9) << key << " n " << n;
      }
      for (const AlgorithmDescriptor* d : family)
        if (d->native) {
          EXPECT_NEAR(d->predicted_seconds(n, M, {1e-6, 0}) / 1e-6, best.messages, 1e-9) << name_of(c);
          EXPECT_NEAR(d->predicted_seconds(n, M, {0, 1e-9}) / 1e-9 / M, best.bytes_of_M, 1e-9) << name_of(c);
        }
    }
  }
}

}  // namespace
}  // namespace parity::theory
