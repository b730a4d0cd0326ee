// The registry of techniques and the builders of their parts (see techniques.hpp).
#include "reference/parallel/techniques/techniques.hpp"

#include "reference/core/error.hpp"
#include "reference/parallel/data/data_parallel.hpp"
#include "reference/parallel/tensor/tensor_parallel.hpp"
#include "reference/parallel/zero/zero.hpp"

namespace parity::parallel {
namespace {

Technique data_parallel(std::string name, int stage, int micro_batches, std::string summary) {
  Technique t;
  t.name = std::move(name);
  t.summary = std::move(summary);
  t.schedule = micro_batches > 1 ? "sequential micro-batches, gradients accumulated" : "sequential";
  t.gradient_sync = stage == 0 ? "DDP buckets all-reduced during backward"
                               : stage == 1 ? "reduce-scatter once per step"
                                            : stage == 2 ? "reduce-scatter every micro-batch"
                                                         : "parameters gathered around each pass, reduce-scatter every micro-batch";
  t.optimizer_step = stage == 0 ? "replicated" : stage == 3 ? "sharded" : "sharded, parameters all-gathered";
  t.zero_stage = stage;
  t.micro_batches = micro_batches;
  t.bytes_sent_per_rank = [stage](const std::vector<theory::ShardedUnit>& units, int ranks, double e, int k) {
    return theory::zero_bytes_sent_per_rank(stage, units, ranks, e, k);
  };
  t.model_state_bytes = [stage](std::int64_t parameters, std::int64_t padded, int ranks, theory::StateBytes bytes) {
    return theory::zero_model_state_bytes(stage, parameters, padded, ranks, bytes);
  };
  return t;
}

// A technique built on top of a data-parallel one by its own folder: its entry is words only.
Technique composed(std::string name, Technique::Kind kind, std::string summary, std::string schedule,
                   std::string gradient_sync, std::string optimizer_step) {
  Technique t;
  t.name = std::move(name);
  t.kind = kind;
  t.summary = std::move(summary);
  t.schedule = std::move(schedule);
  t.gradient_sync = std::move(gradient_sync);
  t.optimizer_step = std::move(optimizer_step);
  return t;
}

std::vector<Technique> make_registry() {
  std::vector<Technique> out;
  out.push_back(data_parallel("dp", 0, 1, "data parallelism: replicas, gradients all-reduced in DDP buckets"));
  out.push_back(data_parallel("dp_accumulation", 0, 2, "data parallelism with 2 micro-batches of gradient accumulation"));
  out.push_back(data_parallel("zero1", 1, 1, "ZeRO-1: optimizer state sharded over the data-parallel ranks"));
  out.push_back(data_parallel("zero2", 2, 1, "ZeRO-2: optimizer state and gradients sharded"));
  out.push_back(data_parallel("zero3", 3, 1, "ZeRO-3 (FSDP): optimizer state, gradients and parameters sharded"));
  for (bool sp : {false, true}) {
    Technique t;
    t.name = sp ? "tp_sp" : "tp";
    t.kind = Technique::Kind::tensor_parallel;
    t.summary = sp ? "Megatron tensor parallelism with sequence parallelism (Korthikanti et al. 2022): LayerNorm and "
                     "dropout regions split along the sequence"
                   : "Megatron tensor parallelism (Shoeybi et al. 2019): attention heads, MLP columns and the vocabulary "
                     "split over the tp ranks";
    t.schedule = "sequential";
    t.gradient_sync = sp ? "all-gathers and reduce-scatters inside the passes, sequence-sharded gradients summed over tp; "
                           "then the data-parallel technique's over dp"
                         : "all-reduces inside the passes (f, g); then the data-parallel technique's over dp";
    t.optimizer_step = "the data-parallel technique's, on this rank's shards";
    t.tensor_parallel = true;
    t.sequence_parallel = sp;
    t.tensor_bytes_per_rank = [sp](const model::GptConfig& config, std::int64_t rows, int tp, double e, double e_stat) {
      return theory::tensor_parallel_bytes_per_rank(config, rows, tp, sp, e, e_stat);
    };
    t.activation_bytes_per_layer = [sp](const model::GptConfig& c, std::int64_t rows, int tp) {
      return theory::tensor_parallel_block_activation_bytes(c, rows, tp, sp);
    };
    out.push_back(std::move(t));
  }
  for (const char* name : {"ps_one_worker", "ps_async"}) {
    Technique t;
    t.name = name;
    t.kind = Technique::Kind::parameter_server;
    t.summary = std::string(name) == "ps_one_worker"
                    ? "parameter server with one worker: synchronous SGD, bit for bit"
                    : "asynchronous SGD with a parameter server: workers push gradients, pull parameters";
    t.schedule = "each worker its own steps";
    t.gradient_sync = "gradients pushed to rank 0";
    t.optimizer_step = "on the server, parameters pulled";
    t.asynchronous = true;
    out.push_back(std::move(t));
  }
  out.push_back(composed("pp", Technique::Kind::pipeline,
                         "pipeline parallelism (GPipe, Huang et al. 2019; 1F1B, Narayanan et al. 2021; zero bubble, Qi et "
                         "al. 2023): the layers in stages over the pp ranks, micro-batches through them",
                         "a pipeline schedule's table of actions per rank (gpipe, 1f1b, interleaved, zb-h1, zb-h2, zb-v), "
                         "activations and their gradients sent between stages",
                         "the data-parallel technique's over the replicas (dp or ZeRO-1), a tied embedding's two copies "
                         "summed between the first and last stage (tensor parallelism's part first with tp stages)",
                         "the data-parallel technique's, on the stage's parameters"));
  out.push_back(composed("ep", Technique::Kind::expert_parallel,
                         "expert parallelism (GShard, Lepikhin et al. 2020): the experts of every MoE layer over the ep "
                         "ranks, tokens dispatched to them and combined back by all-to-all",
                         "sequential; each MoE layer's dispatch and combine (all-to-all-v) inside the passes",
                         "shared parameters in DDP buckets over dp x ep; experts' gradients all-reduced over the dp ranks "
                         "holding them",
                         "replicated, on the shared parameters and this rank's experts"));
  out.push_back(composed("checkpointing", Technique::Kind::activation_checkpointing,
                         "activation checkpointing (Chen et al. 2016): chosen blocks drop what their forward saved and "
                         "recompute it in backward (policies none, full, every<k>, sqrt, selective, budget<bytes>)",
                         "the composed technique's; a recomputed block runs its forward again in backward, with the "
                         "same pass context (dropout replays its masks)",
                         "the composed technique's", "the composed technique's"));
  out.push_back(composed("mixed_precision", Technique::Kind::mixed_precision,
                         "mixed precision (Micikevicius et al. 2018): float16 or bfloat16 parameters and gradients, "
                         "float32 master weights and optimizer state, dynamic loss scaling",
                         "the composed technique's, the loss multiplied by the loss scale S",
                         "the composed technique's in 16 bits; then inf and NaN counted over every rank that trains",
                         "on the float32 masters, gradients multiplied by 1/S; skipped on every rank when some rank's "
                         "gradients hold inf or NaN (S halves; it doubles after a run of clean steps)"));
  return out;
}

}  // namespace

const std::vector<Technique>& techniques() {
  static const std::vector<Technique> registry = make_registry();
  return registry;
}

const Technique& find_technique(std::string_view name) {
  std::string known;
  for (const Technique& t : techniques()) {
    if (t.name == name) return t;
    known += (known.empty() ? "" : ", ") + t.name;
  }
  if (name.size() == 5 && name.substr(0, 4) == "zero" && name[4] >= '0' && name[4] <= '9')
    throw UsageError("ZeRO stage " + std::string(1, name[4]) + " is outside 0-3 (dp, zero1, zero2, zero3)");
  throw UsageError("unknown technique '" + std::string(name) + "' (known: " + known + ")");
}

StepParts make_data_parallel_parts(Communicator& group, model::Model& model, const model::Optimizer& optimizer,
                                   const DataParallelConfig& config) {
  StepParts parts;
  parts.schedule = std::make_unique<SequentialSchedule>();
  if (config.zero_stage == 0) {
    // The buckets rebind the gradients first; the optimizer step then holds them.
    parts.syncs.push_back(std::make_unique<BucketedAllReduce>(group, model, config));
    parts.optimizer = std::make_unique<ReplicatedOptimizer>(model, optimizer, config.precision);
  } else {
    ZeroParts zero = make_zero(group, model, optimizer, config);
    parts.syncs.push_back(std::move(zero.sync));
    parts.optimizer = std::move(zero.optimizer);
  }
  return parts;
}

std::unique_ptr<Trainer> make_tensor_parallel_trainer(Grid& grid, const TensorParallel& tp, model::Model& model,
                                                      const model::Optimizer& optimizer,
                                                      const DataParallelConfig& config) {
  Communicator& dp = grid.group(Axis::dp);
  const DataParallelConfig checked = checked_config(config, dp.size(), model, optimizer);
  require(tp.size() == grid.size(Axis::tp), "make_tensor_parallel_trainer: the tensor-parallel group has " +
                                                std::to_string(tp.size()) + " ranks, the grid's tp axis " +
                                                std::to_string(grid.size(Axis::tp)));
  auto tensor = std::make_unique<TensorParallelSync>(tp, model, checked.zero_stage >= 2);
  StepParts parts = make_data_parallel_parts(dp, model, optimizer, checked);
  parts.syncs.insert(parts.syncs.begin(), std::move(tensor));  // summed over tp before dp takes the gradients
  auto trainer = std::make_unique<Trainer>(model, dp, checked.global_batch, checked.micro_batches, std::move(parts));
  trainer->set_loss_scaling(checked.loss_scaling, &grid.world());
  return trainer;
}

std::unique_ptr<Trainer> make_trainer(Communicator& group, model::Model& model, const model::Optimizer& optimizer,
                                      const DataParallelConfig& config) {
  const DataParallelConfig checked = checked_config(config, group.size(), model, optimizer);
  auto trainer = std::make_unique<Trainer>(model, group, checked.global_batch, checked.micro_batches,
                                           make_data_parallel_parts(group, model, optimizer, checked));
  trainer->set_loss_scaling(checked.loss_scaling);
  return trainer;
}

}  // namespace parity::parallel
