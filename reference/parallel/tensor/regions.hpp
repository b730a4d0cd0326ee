// Tensor parallelism's communication (Shoeybi et al. 2019; sequence parallelism, Korthikanti
// et al. 2022): the tensor-parallel group and its collectives on activations. The layers
// (layers.hpp) call them as the conjugate operators, each the other's backward: identity and
// all-reduce (f, at a column-parallel input), all-reduce and identity (g, at a row-parallel
// output), all-gather and reduce-scatter along the sequence (with sequence parallelism).
//
// Activations are [B, T, C]; the sequence dimension is 1, so rank r of t holds tokens
// [r T/t, (r+1) T/t) of every sequence. Every collective runs a reference algorithm on the
// group's communicator (bytes counted) and is timed and counted per site (the layer that called
// it), so a step's communication is attributed to its layers.
#pragma once

#include <map>
#include <string>

#include "reference/model/layer.hpp"
#include "reference/parallel/step.hpp"

namespace parity::parallel {

struct TensorParallelConfig {
  bool sequence_parallel = false;
  std::string all_reduce = "ring";  // reference algorithms (algorithms.hpp)
  std::string all_gather = "ring";
  std::string reduce_scatter = "ring";
  // A deliberate bug, to show the conformance checks catch it (empty: none):
  //   copy_without_all_reduce    the column-parallel input's backward skips its all-reduce (f)
  //   reduce_without_all_reduce  the row-parallel output's forward skips its all-reduce (g)
  //   transposed_split           the fused QKV weight split in contiguous column blocks instead
  //                              of by heads within each of q, k and v
  //   wrong_shard                the MLP's first linear takes the next rank's shard
  std::string fault;
  std::string describe() const;
};

// The tensor-parallel group and its collectives on activations, shared by the layers of one model.
class TensorParallel {
 public:
  // Refuses unknown algorithms or faults (UsageError).
  TensorParallel(Communicator& group, TensorParallelConfig config);
  Communicator& group() const { return group_; }
  int rank() const { return group_.rank(); }
  int size() const { return group_.size(); }
  bool sequence_parallel() const { return config_.sequence_parallel; }
  const TensorParallelConfig& config() const { return config_; }
  bool fault(std::string_view name) const { return config_.fault == name; }

  // Sum (or another reduction) over the group, in place.
  void all_reduce(Tensor& t, const std::string& site, ReduceOp op = ReduceOp::sum) const;
  // The ranks' tensors concatenated along `dim` (rank order): [.., t * n_dim, ..].
  Tensor all_gather(const Tensor& shard, int dim, const std::string& site) const;
  // The sum over the group, of which this rank keeps part `rank` along `dim`.
  Tensor reduce_scatter(const Tensor& whole, int dim, const std::string& site) const;
  // Part `rank` of `whole` along `dim` (no communication).
  Tensor split(const Tensor& whole, int dim, const std::string& site) const;

  // Seconds in the collectives and bytes this rank sent, per site, since the last reset.
  double seconds() const { return seconds_; }
  const std::map<std::string, std::uint64_t>& bytes_by_site() const { return bytes_; }
  // The same bytes per top-level layer ("blocks.3" for the site "blocks.3.mlp.fc"; "loss").
  std::map<std::string, double> bytes_by_layer() const;
  void reset_counters() const;

 private:
  template <typename F> void timed(const std::string& site, F&& f) const;
  Communicator& group_;
  TensorParallelConfig config_;
  const AlgorithmDescriptor* all_reduce_;
  const AlgorithmDescriptor* all_gather_;
  const AlgorithmDescriptor* reduce_scatter_;
  mutable double seconds_ = 0;
  mutable std::map<std::string, std::uint64_t> bytes_;
};

}  // namespace parity::parallel
