// The published runs the planner is checked against (theory/planner.hpp): each figure with its
// source.
#include <vector>

#include "reference/theory/planner.hpp"

namespace parity::theory {

const std::vector<PublishedRun>& published_runs() {
  static const std::vector<PublishedRun> runs = [] {
    const char* source = "Narayanan et al. 2021, Table 1 (A100 80GB, Selene)";
    const auto& presets = plan_model_presets();
    const auto model = [&](int i) { return presets[static_cast<std::size_t>(i)]; };
    return std::vector<PublishedRun>{
        {source, model(0), 1, 1, 32, 512, 137},     {source, model(1), 2, 1, 64, 512, 138},
        {source, model(2), 4, 1, 128, 512, 142},    {source, model(3), 8, 1, 256, 1024, 135},
        {source, model(4), 8, 2, 512, 1536, 138},   {source, model(5), 8, 4, 1024, 1792, 140},
        {source, model(6), 8, 8, 1536, 2304, 148},  {source, model(7), 8, 16, 1920, 2160, 155},
        {source, model(8), 8, 35, 2520, 2520, 163}, {source, model(9), 8, 64, 3072, 3072, 163}};
  }();
  return runs;
}

const std::vector<PublishedStepTime>& published_step_times() {
  // Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large Transformer Models"),
  // Table 5: seconds per iteration on A100 80GB of GPT models with vocabulary 51,200 and
  // sequence 2048 (22B: 48 layers, hidden 6144, 64 heads; the others Table 1's 175B, 530B and
  // 1T), dp 1: 22B tp8 on 8 GPUs, batch 4 in one micro-batch; 175B tp8 pp8 on 64, batch 64;
  // 530B tp8 pp35 on 280, batch 280; 1T tp8 pp64 on 512, batch 512; micro-batch 1, interleaved
  // over 3 chunks for 175B and 530B (the layouts Calculon's validation of these runs, Isaev et
  // al. 2023, takes). Each with full recompute (tensor-parallel all-reduces, no sp) and with
  // sp and selective recompute; attention unfused, fp16, no ZeRO.
  static const std::vector<PublishedStepTime> runs = [] {
    const char* source = "Korthikanti et al. 2022, Table 5 (A100 80GB, dp 1)";
    const std::string full = ",recompute=full,sp=off", selective = ",recompute=selective,sp=on";
    const std::string common = ",dp=1,cp=1,zero=0,attention=unfused,overlap=off";
    struct Run {
      const char* name;
      std::string model;
      int gpus;
      std::int64_t batch;
      std::string layout;
      double full_s, selective_s;
    };
    const Run table[] = {
        {"22B", "layers=48,hidden=6144,heads=64,vocab=51200,sequence=2048", 8, 4, "tp=8,pp=1,v=1,micro_batch=4", 1.42, 1.10},
        {"175B", "gpt3-175b,vocab=51200", 64, 64, "tp=8,pp=8,v=3,micro_batch=1", 18.13, 13.75},
        {"530B", "gpt3-530b", 280, 280, "tp=8,pp=35,v=3,micro_batch=1", 49.05, 37.83},
        {"1T", "gpt3-1t", 512, 512, "tp=8,pp=64,v=1,micro_batch=1", 94.42, 71.49}};
    std::vector<PublishedStepTime> out;
    for (const Run& r : table) {
      out.push_back({source, std::string(r.name) + " full", r.model, r.gpus, r.batch, r.layout + common + full, r.full_s});
      out.push_back({source, std::string(r.name) + " sp+selective", r.model, r.gpus, r.batch, r.layout + common + selective,
                     r.selective_s});
    }
    return out;
  }();
  return runs;
}

const std::vector<PublishedSpotCheck>& published_spot_checks() {
  static const std::vector<PublishedSpotCheck> runs = {
      // BigScience BLOOM 176B (Le Scao et al. 2022): 70 layers, hidden 14336, 112 heads, vocabulary
      // 250,880, ALiBi (no position table), 384 A100 80GB as tp4 pp12 dp8, micro-batch 2, ZeRO-1,
      // global batch 2048 of 2048 tokens: 156 TFLOP/s per GPU.
      {"BLOOM 176B (Le Scao et al. 2022)", "layers=70,hidden=14336,heads=112,vocab=250880,sequence=2048,positions=rotary",
       "a100-80gb-dgx", 384, 2048, "tp=4,pp=12,dp=8,cp=1,micro_batch=2,zero=1,attention=unfused", 156, false},
      // Megatron-Turing NLG 530B (Smith et al. 2022): tp8 pp35 on 280 DGX A100 nodes (2,240 GPUs),
      // global batch 1920: 126 TFLOP/s per GPU (113 on 420 nodes).
      {"MT-NLG 530B (Smith et al. 2022)", "gpt3-530b", "a100-80gb-dgx", 2240, 1920, "tp=8,pp=35,dp=8,cp=1,attention=unfused", 126, false},
      // Llama 3 405B (Grattafiori et al. 2024, Table 4): H100 80GB, tp8 pp16, sequence 8192, 16M
      // tokens a step: MFU 0.43 on 8,192 GPUs, 0.41 on 16,384; cp16 at sequence 131,072: 0.38.
      {"Llama 3 405B (Grattafiori et al. 2024)", "llama3-405b", "h100-sxm-dgx", 8192, 2048, "tp=8,pp=16,cp=1", 0.43, true},
      {"Llama 3 405B (Grattafiori et al. 2024)", "llama3-405b", "h100-sxm-dgx", 16384, 2048, "tp=8,pp=16,cp=1", 0.41, true},
      {"Llama 3 405B (Grattafiori et al. 2024)", "llama3-405b,sequence=131072", "h100-sxm-dgx", 16384, 128,
       "tp=8,pp=16,cp=16", 0.38, true}};
  return runs;
}

}  // namespace parity::theory
