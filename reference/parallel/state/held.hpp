// The training state a rank holds, under the canonical names of the single-device model: every
// parameter's value, its float32 master copy (mixed precision) and the optimizer's state
// tensors, each as all or part of the whole tensor, with the place of every element in the
// whole. Whatever the layout (data parallelism, ZeRO 1-3, tensor parallelism with or without
// sequence parallelism, pipeline stages, experts), a rank's part of a whole tensor is a list of
// runs of the whole's row-major elements: a tensor-parallel shard (Parameter::shard) is one run
// per kept row or column block, a ZeRO chunk cuts a flat range out of its parameters, and
// replicated tensors are held whole by several ranks.
//
// Names: "<parameter>" for the value, "<parameter>/master", "<parameter>/<state>" with the
// optimizer's state names (PyTorch's: exp_avg, exp_avg_sq, momentum_buffer). Beside the
// tensors, state the layers keep between steps: "<moe layer>/routing", the aux-free router's
// bias and pending load (float64: E bias values, E loads summed over the data-parallel world, 1
// when a load waits for its update, the step it was counted in).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "reference/parallel/trainer.hpp"

namespace parity::parallel {

// Elements [first, first + length) of a whole tensor, in row-major order.
struct Run {
  std::int64_t first = 0, length = 0;
  bool operator==(const Run&) const = default;
};

// A tensor of the training state as one rank holds it.
struct HeldTensor {
  std::string name;       // canonical: "blocks.0.mlp.fc.weight/exp_avg"
  Shape whole;            // the whole tensor's shape
  DataType dtype = DataType::float32;
  Tensor tensor;          // the rank's elements, in the trainer's own storage (loading writes it)
  std::vector<Run> runs;  // where its elements sit in the whole, in the tensor's order
  // For state a layer keeps outside tensors: hands the loaded tensor back to the layer.
  std::function<void(const Tensor&)> restore;
};

// The whole-tensor runs of a parameter's local elements [first, first + count): the parameter's
// shard (or the whole parameter), its local shape `shape`.
std::vector<Run> parameter_runs(const model::Parameter& p, const Shape& shape, std::int64_t first, std::int64_t count);

// What this rank holds of the training state: the values of the parameters its model holds
// (from the optimizer's segments where the model drops them between passes: ZeRO-3), the
// master copies and optimizer state of the segments it updates, and its MoE layers' routing
// state. `saving`: read the routing loads summed over the data-parallel world (collective over
// it); else placeholders for a restore to fill.
std::vector<HeldTensor> held_tensors(Trainer& trainer, bool saving);

// Which ranks write which elements of a whole tensor when saving: every element exactly once.
// `holders[k]` is holder k's runs (one entry per (rank, held tensor) holding the tensor). Holders
// with identical runs are replicas and split their elements evenly, in order. Holdings that
// overlap without being identical hold the same values (the tied table's copies on a
// pipeline's first and last stage, each cut into its own ZeRO chunks, kept equal by summing
// their gradients): the holding whose runs sort first writes the common elements. Returns, for
// every holder, the ranges [begin, end) of its own elements it writes. Throws Error when
// elements of the whole tensor are held by no one.
struct WriteRange {
  std::int64_t begin = 0, end = 0;
};
std::vector<std::vector<WriteRange>> assign_writers(const std::string& name, std::int64_t whole_elements,
                                                    const std::vector<std::vector<Run>>& holders);

// The runs of a tensor's elements [begin, end) (runs of its whole order), and their count.
std::vector<Run> sub_runs(const std::vector<Run>& runs, std::int64_t begin, std::int64_t end);
std::int64_t run_elements(const std::vector<Run>& runs);

// One copy per overlap between what a rank needs (`to`: runs of its tensor) and what a saved
// piece holds (`from`): `count` elements from position `from_offset` of the piece to position
// `to_offset` of the tensor.
struct RunCopy {
  std::int64_t from_offset = 0, to_offset = 0, count = 0;
};
std::vector<RunCopy> overlaps(const std::vector<Run>& from, const std::vector<Run>& to);

}  // namespace parity::parallel
