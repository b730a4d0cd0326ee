// Tensor parallelism's communication (Shoeybi et al. 2019; sequence parallelism, Korthikanti
// et al. 2022): the tensor-parallel group, its collectives on activations, and the conjugate
// operators as layers, named for what they do forward (the backward is the other):
//
//   CopyToTensorParallelRegion           forward identity           backward all-reduce
//   ReduceFromTensorParallelRegion       forward all-reduce         backward identity
//   GatherFromSequenceParallelRegion     forward all-gather (seq)   backward reduce-scatter (seq)
//   ReduceScatterToSequenceParallelRegion forward reduce-scatter    backward all-gather
//   ScatterToSequenceParallelRegion      forward split (seq)        backward all-gather
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

// The conjugate operators (see the top of this file).
class CopyToTensorParallelRegion : public model::Layer {
 public:
  CopyToTensorParallelRegion(std::string name, const TensorParallel& tp) : Layer(std::move(name)), tp_(tp) {}
  const char* kind() const override { return "copy_to_tp_region"; }

 protected:
  Tensor do_forward(const Tensor& x, const model::PassContext&) override { return x; }
  Tensor do_backward(const Tensor& dy, const model::PassContext& context) override;

 private:
  const TensorParallel& tp_;
};

class ReduceFromTensorParallelRegion : public model::Layer {
 public:
  ReduceFromTensorParallelRegion(std::string name, const TensorParallel& tp) : Layer(std::move(name)), tp_(tp) {}
  const char* kind() const override { return "reduce_from_tp_region"; }

 protected:
  Tensor do_forward(const Tensor& x, const model::PassContext& context) override;
  Tensor do_backward(const Tensor& dy, const model::PassContext&) override { return dy; }

 private:
  const TensorParallel& tp_;
};

class GatherFromSequenceParallelRegion : public model::Layer {
 public:
  GatherFromSequenceParallelRegion(std::string name, const TensorParallel& tp) : Layer(std::move(name)), tp_(tp) {}
  const char* kind() const override { return "gather_from_sp_region"; }

 protected:
  Tensor do_forward(const Tensor& x, const model::PassContext& context) override;
  Tensor do_backward(const Tensor& dy, const model::PassContext& context) override;

 private:
  const TensorParallel& tp_;
};

class ReduceScatterToSequenceParallelRegion : public model::Layer {
 public:
  ReduceScatterToSequenceParallelRegion(std::string name, const TensorParallel& tp) : Layer(std::move(name)), tp_(tp) {}
  const char* kind() const override { return "reduce_scatter_to_sp_region"; }

 protected:
  Tensor do_forward(const Tensor& x, const model::PassContext& context) override;
  Tensor do_backward(const Tensor& dy, const model::PassContext& context) override;

 private:
  const TensorParallel& tp_;
};

class ScatterToSequenceParallelRegion : public model::Layer {
 public:
  ScatterToSequenceParallelRegion(std::string name, const TensorParallel& tp) : Layer(std::move(name)), tp_(tp) {}
  const char* kind() const override { return "scatter_to_sp_region"; }

 protected:
  Tensor do_forward(const Tensor& x, const model::PassContext& context) override;
  Tensor do_backward(const Tensor& dy, const model::PassContext& context) override;

 private:
  const TensorParallel& tp_;
};

}  // namespace parity::parallel
