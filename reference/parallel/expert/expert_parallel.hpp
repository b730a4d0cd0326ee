// Expert parallelism (GShard, Lepikhin et al. 2020): the E experts of every MoE layer spread
// over the grid's ep group, E/ep on each rank (rank r holds experts [r E/ep, (r+1) E/ep)).
// Every rank routes its own tokens; an all-to-all of the per-expert row counts tells each rank
// what it will receive, then an all-to-all-v carries the rows to the ranks of their experts
// (dispatch) and the experts' outputs back (combine). Backward runs the same two transfers the
// other way round (each is the adjoint of the other) on the layout the forward fixed.
//
// Composition with data parallelism (EP x DP): the batch is split over every rank of dp x ep;
// the gradients of parameters every rank holds (attention, router, embeddings, ...) are summed
// over dp x ep, those of an expert over the dp ranks that hold the same expert only.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "reference/comm/algorithms.hpp"
#include "reference/model/model.hpp"
#include "reference/parallel/grid.hpp"
#include "reference/parallel/data/config.hpp"
#include "reference/parallel/trainer.hpp"

namespace parity::parallel {

struct ExpertParallelConfig {
  std::string all_to_all = "native";  // the all_to_all_v algorithm (algorithms.hpp): native or pairwise
  // A deliberate bug, to show the checks catch it: "wrong_rank" sends every expert's rows to the
  // next rank round the group. Empty: none.
  std::string fault;
};

// Bytes one rank sent to other ranks in one MoE layer's transfers (its own rows stay local):
// the forward dispatch (token rows to the experts), the forward combine (expert outputs back),
// and the backward's two transfers (the same rows' gradients, the other way round).
struct ExpertTraffic {
  double dispatch = 0, combine = 0, backward = 0;
  double seconds = 0;  // in the all-to-alls (the counts' and the rows'), forward and backward
};

// The formula of one MoE layer's traffic (theory/moe.hpp) for this rank of the ep group, from
// the rows its routing admitted per expert [E] and every other rank's (all-gathered over ep:
// collective). Its `seconds` are 0.
ExpertTraffic expected_traffic(Communicator& ep, const std::vector<std::int64_t>& admitted, std::int64_t hidden,
                               double element_bytes);

class ExpertParallel {
 public:
  // Refuses an unknown algorithm or fault (UsageError).
  ExpertParallel(Communicator& group, ExpertParallelConfig config);
  Communicator& group() const { return group_; }
  int size() const { return group_.size(); }
  int rank() const { return group_.rank(); }
  // How to build the MoE layers of a model with `experts` experts each: one exchange per block.
  model::MoeBuild build(int experts, model::MoeFaults faults = {});
  // Bytes sent and seconds spent per MoE block ("blocks.1") since the last reset, forward and
  // backward.
  std::map<std::string, ExpertTraffic> traffic() const;
  void reset_traffic();

 private:
  class Exchange;
  Communicator& group_;
  ExpertParallelConfig config_;
  const AlgorithmDescriptor* algorithm_;
  std::map<int, std::shared_ptr<Exchange>> exchanges_;
  int experts_ = 0;
};

// Refuses (UsageError, one line) an ep size that does not divide the experts, or an MoE-less model.
void validate_expert_parallel(const model::GptConfig& config, int ep);

// The GPT of `config` with this rank's experts (names and values are the single-device model's).
std::unique_ptr<model::Model> build_expert_parallel_gpt(const model::GptConfig& config, ExpertParallel& ep,
                                                        model::MoeFaults faults = {});

// A trainer of the expert-parallel model composed with data parallelism (stage 0) over the grid's
// dp axis: the batch split over dp x ep; shared parameters' gradients in DDP buckets over dp x ep,
// experts' all-reduced over dp after backward; the aux-free routers' loads summed over dp x ep.
// With tensor parallelism inside the experts (a model of build_tensor_parallel_gpt on the grid's
// tp axis), every group above is this rank's tp slice of it, and `first` (tensor parallelism's
// part of the step) runs before the data-parallel parts.
std::unique_ptr<Trainer> make_expert_parallel_trainer(Grid& grid, model::Model& model,
                                                      const model::Optimizer& optimizer,
                                                      const DataParallelConfig& config,
                                                      std::unique_ptr<GradientSync> first = nullptr);

// The whole parameters (single-device model order and names) from every rank's (whole over tp:
// gather_tensor_parallel first when the experts are split): experts all-gathered over ep, the rest taken as they are (equal on every ep rank: the names of those
// that differ are added to `disagreeing`). Collective over the ep group.
ParameterValues gather_expert_parallel(const ParameterValues& local, const model::GptConfig& config,
                                       Communicator& ep, std::vector<std::string>* disagreeing);

}  // namespace parity::parallel
