// The step model of `parity plan` (reference/theory/planner.hpp), the terms test_planner.cpp
// checks by direction or difference only, here against hand counts and closed forms: forward
// FLOPs of grouped-query attention and of a top-2 mixture of experts, activations kept under full
// recompute and by an MoE layer, what full recompute and sp do to the collectives, the GPUs
// behind MFU with context parallelism, the ranks ZeRO shards over, the tensor-parallel sizes a
// search tries, the key/value heads tp must split, the presets' published figures, negative
// figures refused, and the rates of a step the schedule simulator retimed.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "bench/commands/plan.hpp"
#include "reference/core/error.hpp"
#include "reference/theory/planner.hpp"

namespace parity::theory {
namespace {

// A preset, as `parity plan --model NAME` and `--cluster NAME` read it.
PlanModel preset(const std::string& name) { return parse_plan_model(name); }
PlanCluster cluster(const std::string& name) { return parse_plan_cluster(name); }

// A layer's forward FLOPs by hand, 2 per multiply-add: the query and output projections
// 2 s h^2 each, the key and value projections 2 s h (kv x head size) each (with grouped-query
// attention narrower than h), the MLP's matrices (SwiGLU: three of h x f), and the scores and
// weighted sum 4 s^2 h. Llama 3 8B: 8 key/value heads of 128 (1024 wide) beside 4096; its head
// 2 s h V.
TEST(PlannerTerms, GroupedQueryAttentionFlopsOnAHandCount) {
  const PlanModel m = preset("llama3-8b");
  ASSERT_EQ(m.kv(), 8);
  const double s = 8192, h = 4096, kv = 1024, f = 14336, V = 128256;
  const double layer = 2 * s * h * h + 2 * (2 * s * h * kv) + 2 * s * h * h + 3 * (2 * s * h * f) + 4 * s * s * h;
  EXPECT_NEAR(plan_layer_forward_flops(m), layer, 1e-12 * layer);
  EXPECT_NEAR(plan_layers_forward_flops(m), 32 * layer, 1e-12 * 32 * layer);
  EXPECT_NEAR(plan_head_forward_flops(m), 2 * s * h * V, 1e-12 * 2 * s * h * V);
}

// Mixtral 8x7B (Jiang et al. 2024): 8 experts, each token through the top 2, so an MoE layer's
// forward runs two SwiGLU MLPs a token and the 4096 x 8 router, beside Llama-style attention
// with 8 key/value heads of 128 (sequence 4096).
TEST(PlannerTerms, MixtralRoutesEachTokenToTwoExperts) {
  const PlanModel m = preset("mixtral-8x7b");
  EXPECT_EQ(m.experts, 8);
  EXPECT_EQ(m.top_k, 2);
  const double s = 4096, h = 4096, kv = 1024, f = 14336;
  const double layer = 2 * s * h * (h + 2 * kv) + 2 * s * h * h + 2 * 3 * (2 * s * h * f) + 2 * s * h * 8 + 4 * s * s * h;
  EXPECT_NEAR(plan_layer_forward_flops(m, true), layer, 1e-12 * layer);
  EXPECT_NEAR(plan_layers_forward_flops(m), 32 * layer, 1e-12 * 32 * layer);
}

// Full recompute keeps each layer's 16-bit input (2 s b h, split over tp with sp) and one layer's
// working set at a time (Korthikanti et al. 2022): s b h (10 + 24/t) without sp, s b h 34/t with,
// and 5 a s/(h t) more with the scores stored (unfused). Four layers of h 1024, 8 heads, s 1024,
// f 4h, dropout, tp 2, one stage and micro-batch: 4 x 2 + 22 = 30 s h bytes; with sp 4 + 17 = 21;
// unfused, the scores' 5 x 8 x 1024 / (1024 x 2) = 20 more: 50.
TEST(PlannerTerms, FullRecomputeKeepsInputsAndOneLayer) {
  const PlanCluster c = cluster("a100-80gb-dgx");
  const PlanModel m = parse_plan_model("layers=4,hidden=1024,heads=8,vocab=256,sequence=1024");
  const double sh = 1024.0 * 1024;
  const PlanLayout flash{2, 1, 1, false, 1, 1, 0, Recompute::full, true};
  PlanLayout sp = flash, unfused = flash;
  sp.sp = true;
  unfused.flash = false;
  EXPECT_DOUBLE_EQ(plan_predict(m, c, flash, 1).activation_bytes, 30 * sh);
  EXPECT_DOUBLE_EQ(plan_predict(m, c, sp, 1).activation_bytes, 21 * sh);
  EXPECT_DOUBLE_EQ(plan_predict(m, c, unfused, 1).activation_bytes, 50 * sh);
}

// An MoE layer keeps its MLP's activations (16 s b h for an MLP of 4h: 16 of Korthikanti's 34)
// for the top_k x capacity-factor rows each token becomes; the rest of the layer as a dense one
// (10 whole, 8 of attention). Top 2 at capacity 1.25, tp 1: 10 + 8 + 16 x 2.5 = 58 s h a layer.
// At top 1 and capacity 1 each token is one row: the dense layer's 34.
TEST(PlannerTerms, ExpertActivationsScaleWithTheRowsEachTokenBecomes) {
  const PlanCluster c = cluster("a100-80gb-dgx");
  const std::string shape = "layers=4,hidden=1024,heads=8,vocab=256,sequence=1024";
  const double sh = 1024.0 * 1024;
  const PlanLayout l{1, 1, 1, false, 1, 1, 0, Recompute::none, true};
  const auto activations = [&](const std::string& extra) {
    return plan_predict(parse_plan_model(shape + extra), c, l, 1).activation_bytes;
  };
  EXPECT_DOUBLE_EQ(activations(""), 4 * 34 * sh);
  EXPECT_DOUBLE_EQ(activations(",experts=8,top_k=2,capacity_factor=1.25,moe_every=1"), 4 * 58 * sh);
  EXPECT_DOUBLE_EQ(activations(",experts=8,top_k=1,capacity_factor=1,moe_every=1"), 4 * 34 * sh);
}

// Full recompute runs each layer's forward again in backward, its collectives included: the
// expert all-to-alls (dispatch and combine, forward 2, backward 2, recompute 2) become 1.5 times
// those without recompute, as the tensor-parallel all-reduces do.
TEST(PlannerTerms, FullRecomputeRepeatsTheExpertAllToAlls) {
  const PlanCluster c = cluster("a100-80gb-dgx");
  const PlanModel m =
      parse_plan_model("layers=4,hidden=1024,heads=8,vocab=256,sequence=1024,experts=8,top_k=2,moe_every=1");
  PlanLayout none{1, 1, 4, false, 1, 1, 0, Recompute::none, true, 2}, full = none;
  full.recompute = Recompute::full;
  const PlanPrediction a = plan_predict(m, c, none, 32), b = plan_predict(m, c, full, 32);
  ASSERT_GT(a.ep_comm_s, 0);
  EXPECT_NEAR(b.ep_comm_s, 1.5 * a.ep_comm_s, 1e-12 * b.ep_comm_s);
}

// Sequence parallelism replaces each all-reduce of a tensor-parallel region by an all-gather and
// a reduce-scatter: (n-1)/n of the bytes and n-1 latencies each, together the ring all-reduce's
// 2(n-1)/n and 2(n-1) (Korthikanti et al. 2022, Section 4.2.2). With one efficiency for every
// collective (the presets) the tensor-parallel time is the same with sp and without.
TEST(PlannerTerms, SequenceParallelismMovesTheAllReducesBytes) {
  const PlanCluster c = cluster("h100-sxm-dgx");
  const PlanModel m = preset("llama3-70b");
  PlanLayout sp{8, 4, 8, true, 1, 1, 1, Recompute::none, true}, no_sp = sp;
  no_sp.sp = false;
  const PlanPrediction a = plan_predict(m, c, sp, 256), b = plan_predict(m, c, no_sp, 256);
  ASSERT_GT(b.tp_comm_s, 0);
  EXPECT_NEAR(a.tp_comm_s, b.tp_comm_s, 1e-12 * b.tp_comm_s);
}

// MFU, HFU and TFLOP/s per GPU divide by every GPU of the job, cp's included:
// tp 8 x pp 8 x dp 8 x cp 2 = 1024.
TEST(PlannerTerms, RatesPerGpuCountContextParallelRanks) {
  const PlanCluster c = cluster("h100-sxm-dgx");
  const PlanModel m = parse_plan_model("llama3-70b,sequence=131072");
  const PlanLayout l{8, 8, 8, true, 1, 1, 1, Recompute::full, true, 1, 2};
  ASSERT_EQ(plan_layout_problem(m, c, l, 1024, 64), "");
  const PlanPrediction p = plan_predict(m, c, l, 64);
  const double peak = 1024 * c.peak_TFLOPs * 1e12;
  EXPECT_NEAR(p.mfu, p.model_flops / p.step_s / peak, 1e-12 * p.mfu);
  EXPECT_NEAR(p.hfu, p.hardware_flops / p.step_s / peak, 1e-12 * p.hfu);
  EXPECT_NEAR(p.tflops_per_gpu, p.hardware_flops / p.step_s / 1024 / 1e12, 1e-12 * p.tflops_per_gpu);
}

// The cp ranks of a dp group hold the same parameters as its dp ranks: ZeRO-3 shards the model
// state over dp x cp. Llama 3 8B at tp 1 on 4 GPUs as dp 2 x cp 2 holds what dp 4 holds, a
// quarter of the unsharded (dp 1, ZeRO 0) 16 bytes a parameter (its count divides by 4).
TEST(PlannerTerms, ZeroShardsOverTheContextParallelRanksToo) {
  const PlanCluster c = cluster("h100-sxm-dgx");
  const PlanModel m = preset("llama3-8b");
  PlanLayout cp{1, 1, 2, false, 1, 1, 3, Recompute::full, true, 1, 2}, dp = cp, whole = cp;
  dp.dp = 4, dp.cp = 1;
  whole.dp = 1, whole.cp = 1, whole.zero = 0;
  const auto state = [&](const PlanLayout& l) {
    const PlanPrediction p = plan_predict(m, c, l, 8);
    return p.parameter_bytes + p.gradient_bytes + p.optimizer_bytes;
  };
  const double unsharded = state(whole);
  EXPECT_NEAR(state(cp), unsharded / 4, 1e-12 * unsharded);
  EXPECT_NEAR(state(dp), unsharded / 4, 1e-12 * unsharded);
}

// A search with tp free tries every power of two up to a node's GPUs (8 on a DGX), a whole
// node's tensor parallelism included.
TEST(PlannerTerms, SearchTriesTensorParallelismUpToANode) {
  const PlanCluster c = cluster("a100-80gb-dgx");
  PlanFixed fixed;
  fixed.pp = 1;
  fixed.cp = 1;
  fixed.recompute = Recompute::full;
  fixed.zero = 1;
  std::set<int> tps;
  for (const PlanCandidate& x : plan_search(preset("gpt3-18b"), c, 64, 512, fixed)) tps.insert(x.layout.tp);
  EXPECT_EQ(tps, (std::set<int>{1, 2, 4, 8}));
}

// tp splits the key/value heads as it splits the query heads: 2 key/value heads cannot go to 4
// GPUs (32 query heads could), 8 can go to 8.
TEST(PlannerTerms, TensorParallelismMustSplitTheKeyValueHeads) {
  const PlanCluster c = cluster("h100-sxm-dgx");
  const PlanLayout tp4{4, 1, 2, false, 1, 1, 0, Recompute::full, true};
  const std::string problem = plan_layout_problem(parse_plan_model("llama3-8b,kv_heads=2"), c, tp4, 8, 8);
  EXPECT_NE(problem.find("does not divide the heads (32, 2 key/value)"), std::string::npos) << problem;
  const PlanLayout tp8{8, 1, 1, false, 1, 1, 0, Recompute::full, true};
  EXPECT_EQ(plan_layout_problem(preset("llama3-8b"), c, tp8, 8, 8), "");
}

// The cluster presets' figures as their datasheets state them (planner_inputs.cpp cites each):
// DGX A100, A100 SXM4 80GB: 312 TFLOP/s dense BF16, 2,039 GB/s, 108 SMs, NVLink 3 600 GB/s both
// ways (300 a way), one HDR 200 Gb/s (25 GB/s) link a GPU; DGX H100, H100 SXM5: 989 TFLOP/s,
// 3,350 GB/s, 132 SMs, NVLink 4 900 GB/s both ways (450), one NDR 400 Gb/s (50 GB/s) a GPU.
TEST(PlannerTerms, ClusterPresetsAreTheirDatasheets) {
  struct Sheet {
    const char* name;
    double peak_TFLOPs, memory_GB, memory_GBps;
    int multiprocessors, gpus_per_node;
    double node_GBps, network_GBps;
  };
  for (const Sheet& s : {Sheet{"a100-80gb-dgx", 312, 80, 2039, 108, 8, 300, 25},
                         Sheet{"h100-sxm-dgx", 989, 80, 3350, 132, 8, 450, 50}}) {
    const PlanCluster c = cluster(s.name);
    EXPECT_EQ(c.peak_TFLOPs, s.peak_TFLOPs) << s.name;
    EXPECT_EQ(c.memory_GB, s.memory_GB) << s.name;
    EXPECT_EQ(c.memory_GBps, s.memory_GBps) << s.name;
    EXPECT_EQ(c.multiprocessors, s.multiprocessors) << s.name;
    EXPECT_EQ(c.gpus_per_node, s.gpus_per_node) << s.name;
    EXPECT_EQ(c.node.bandwidth_GBps, s.node_GBps) << s.name;
    EXPECT_EQ(c.network.bandwidth_GBps, s.network_GBps) << s.name;
  }
}

// A figure of a description is a number >= 0: a negative latency or runtime reserve is no
// machine's (it would shorten every step or enlarge the memory), and is refused.
TEST(PlannerTerms, NegativeFiguresAreRefused) {
  const std::string path = ::testing::TempDir() + "planner-terms-cluster.json";
  const auto cluster_with = [&](const std::string& latency, const std::string& extra) {
    std::ofstream(path) << "{\"gpu\": \"A100\", \"peak_TFLOPs\": 312, \"gemm_efficiency\": 0.8, \"multiprocessors\": 108, "
                           "\"memory_GB\": 80, \"memory_GBps\": 2039, \"elementwise_efficiency\": 0.8, \"gpus_per_node\": 8, "
                           "\"node_GBps\": 300, \"node_latency_us\": 3, \"network_GBps\": 25, \"network_latency_us\": "
                        << latency << ", \"collective_efficiency\": 0.8" << extra << "}";
    return parse_plan_cluster(path);
  };
  EXPECT_EQ(cluster_with("5", "").network.latency_us, 5);
  EXPECT_THROW(cluster_with("-5", ""), UsageError);
  EXPECT_THROW(cluster_with("5", ", \"runtime_reserve_GB\": -4"), UsageError);
  EXPECT_THROW(parse_plan_model("llama3-8b,capacity_factor=-1"), UsageError);
  std::remove(path.c_str());
}

// A step the schedule simulator retimes keeps its FLOPs: MFU, HFU and TFLOP/s per GPU are the
// step's model and hardware FLOPs over its new time and the 512 GPUs (tp 8 x pp 4 x dp 16).
// ZB-H2's closed form is not its schedule's exact time, so the simulated step differs from it.
TEST(PlannerTerms, SimulatedStepsRatesFollowTheirTime) {
  const PlanModel m = preset("gpt3-39b");
  const PlanCluster c = cluster("a100-80gb-dgx");
  PlanLayout l{8, 4, 16, true, 1, 1, 1, Recompute::full, true};
  l.schedule = PlanSchedule::zb_h2;
  ASSERT_EQ(plan_layout_problem(m, c, l, 512, 1536), "");
  const PlanPrediction closed = plan_predict(m, c, l, 1536);
  const PlanPrediction simulated = cli::with_simulated_pipeline(l, closed);
  ASSERT_TRUE(simulated.simulated);
  ASSERT_NE(simulated.step_s, closed.step_s);
  const double peak = 512 * c.peak_TFLOPs * 1e12;
  EXPECT_NEAR(simulated.mfu, simulated.model_flops / simulated.step_s / peak, 1e-12 * simulated.mfu);
  EXPECT_NEAR(simulated.hfu, simulated.hardware_flops / simulated.step_s / peak, 1e-12 * simulated.hfu);
  EXPECT_NEAR(simulated.tflops_per_gpu, simulated.hardware_flops / simulated.step_s / 512 / 1e12,
              1e-12 * simulated.tflops_per_gpu);
  EXPECT_NEAR(simulated.tokens_per_s, 1536.0 * m.sequence / simulated.step_s, 1e-12 * simulated.tokens_per_s);
}

// Every description key sets its own field: each is given a value unlike its default, so a key
// wired to another field, or to none, leaves a default behind.
TEST(PlannerInputs, EveryModelKeySetsItsOwnField) {
  const PlanModel m = parse_plan_model(
      "layers=4,hidden=96,heads=6,kv_heads=2,ffn_hidden=200,gated_mlp=true,vocab=1000,sequence=64,tied=false,"
      "bias=false,norm=rmsnorm,positions=rotary,dropout=false,experts=4,top_k=1,capacity_factor=1.5,moe_every=2");
  EXPECT_EQ(m.layers, 4);
  EXPECT_EQ(m.hidden, 96);
  EXPECT_EQ(m.heads, 6);
  EXPECT_EQ(m.kv_heads, 2);
  EXPECT_EQ(m.ffn_hidden, 200);
  EXPECT_TRUE(m.gated_mlp);
  EXPECT_EQ(m.vocabulary, 1000);
  EXPECT_EQ(m.sequence, 64);
  EXPECT_FALSE(m.tied);
  EXPECT_FALSE(m.bias);
  EXPECT_TRUE(m.rms_norm);
  EXPECT_FALSE(m.learned_positions);
  EXPECT_FALSE(m.dropout);
  EXPECT_EQ(m.experts, 4);
  EXPECT_EQ(m.top_k, 1);
  EXPECT_EQ(m.capacity_factor, 1.5);
  EXPECT_EQ(m.moe_every, 2);
  try {
    parse_plan_model("layers=4,hidden=96,heads=6,vocab=1000,sequence=64,window=8");
    ADD_FAILURE() << "an unknown key was taken";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("unknown model key 'window' (known: layers, hidden, heads, kv_heads, ffn_hidden, "
                                         "gated_mlp, vocab, sequence, tied, bias, norm, positions, dropout, experts, "
                                         "top_k, capacity_factor, moe_every)"),
              std::string::npos)
        << e.what();
  }
}

// A cluster file: each field lands in its own place, each required one missing is refused by
// name, and each number written as a JSON string is refused.
TEST(PlannerInputs, EveryClusterFieldIsReadRequiredAndTyped) {
  const std::vector<std::pair<std::string, std::string>> fields = {
      {"gpu", "\"g\""}, {"note", "\"n\""}, {"dtype", "\"float32\""}, {"peak_TFLOPs", "101"},
      {"gemm_efficiency", "0.51"}, {"multiprocessors", "7"}, {"memory_GB", "41"}, {"memory_GBps", "1001"},
      {"elementwise_efficiency", "0.52"}, {"gpus_per_node", "4"}, {"node_GBps", "201"}, {"node_latency_us", "2.5"},
      {"network_GBps", "21"}, {"network_latency_us", "3.5"}, {"collective_efficiency", "0.53"},
      {"attention_efficiency", "0.54"}, {"runtime_reserve_GB", "3"}};
  const std::string path = testing::TempDir() + "parity-cluster-fields.json";
  const auto parse_without = [&](const std::string& dropped, const std::string& quoted = "") {
    std::ofstream f(path);
    std::string body;
    for (const auto& [k, v] : fields)
      if (k != dropped) body += (body.empty() ? "" : ", ") + ("\"" + k + "\": ") + (k == quoted ? "\"" + v + "\"" : v);
    f << "{" << body << "}";
    f.close();
    return parse_plan_cluster(path);
  };
  const PlanCluster c = parse_without("");
  EXPECT_EQ(c.gpu, "g");
  EXPECT_EQ(c.note, "n");
  EXPECT_EQ(c.rates.dtype, "float32");
  // Each number read back where it belongs.
  const std::map<std::string, double> read = {
      {"peak_TFLOPs", c.peak_TFLOPs}, {"gemm_efficiency", c.gemm_efficiency},
      {"multiprocessors", c.multiprocessors}, {"memory_GB", c.memory_GB}, {"memory_GBps", c.memory_GBps},
      {"elementwise_efficiency", c.elementwise_efficiency}, {"gpus_per_node", c.gpus_per_node},
      {"node_GBps", c.node.bandwidth_GBps}, {"node_latency_us", c.node.latency_us},
      {"network_GBps", c.network.bandwidth_GBps}, {"network_latency_us", c.network.latency_us},
      {"collective_efficiency", c.collective_efficiency}, {"attention_efficiency", c.attention_efficiency},
      {"runtime_reserve_GB", c.runtime_reserve_GB}};
  for (const auto& [key, value] : fields) {
    if (value.front() == '"') continue;  // a field of words, checked above
    EXPECT_EQ(read.at(key), std::stod(value)) << key;
  }
  for (const auto& [key, value] : fields) {
    const bool required = key != "note" && key != "dtype" && key != "attention_efficiency" && key != "runtime_reserve_GB";
    if (required) {
      try {
        parse_without(key);
        ADD_FAILURE() << "a cluster without " << key << " was taken";
      } catch (const UsageError& e) {
        EXPECT_NE(std::string(e.what()).find(": missing field " + key), std::string::npos) << e.what();
      }
    } else {
      EXPECT_NO_THROW(parse_without(key)) << key;
    }
    if (value.front() == '"') continue;  // a field of words
    try {
      parse_without("", key);
      ADD_FAILURE() << key << " written as a string was taken";
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find("'" + key + "' is the string"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace parity::theory
