// DDP's bucketed all-reduce (see data_parallel.hpp).
#include "reference/parallel/data/data_parallel.hpp"

#include <algorithm>

#include "reference/core/error.hpp"
#include "reference/parallel/precision/precision.hpp"

namespace parity::parallel {

BucketedAllReduce::BucketedAllReduce(Communicator& group, model::Model& model, const DataParallelConfig& config)
    : BucketedAllReduce(group, model, config, model.parameters()) {}

BucketedAllReduce::BucketedAllReduce(Communicator& group, model::Model& model, const DataParallelConfig& config,
                                     std::vector<model::Parameter*> parameters)
    : config_(config), stream_(group), algorithm_(&find_algorithm(Collective::all_reduce, config.all_reduce)) {
  std::reverse(parameters.begin(), parameters.end());  // backward produces gradients last layer first
  std::vector<std::vector<model::Parameter*>> groups(1);
  std::size_t bytes = 0;
  for (model::Parameter* p : parameters) {
    if (bytes >= config_.bucket_bytes) {
      groups.emplace_back();
      bytes = 0;
    }
    groups.back().push_back(p);
    bytes += p->value.bytes();
  }
  for (auto& members : groups) {
    if (members.empty()) continue;
    Bucket& b = buckets_.emplace_back();
    std::int64_t count = 0;
    for (model::Parameter* p : members) count += p->value.numel();
    b.grads = Tensor::zeros("bucket" + std::to_string(buckets_.size() - 1) + ".grads", {count}, model.dtype(),
                            MemoryCategory::gradients, model.space());
    std::int64_t offset = 0;
    for (model::Parameter* p : members) {
      p->grad = b.grads.segment(p->name + ".grad", offset, p->value.shape());
      offset += p->value.numel();
      bucket_of_[p] = buckets_.size() - 1;
      b.parameters.push_back(p);
    }
  }
  for (model::Layer* layer : model::all_layers(model.layers())) {
    for (model::Parameter* p : layer->own_parameters())
      if (bucket_of_.count(p)) ++users_[p];
    for (model::Parameter* p : layer->borrowed_parameters())
      if (bucket_of_.count(p)) ++users_[p];
  }
}

std::string BucketedAllReduce::describe() const {
  return std::to_string(buckets_.size()) + " gradient bucket(s) of about " + std::to_string(config_.bucket_bytes) +
         " bytes, all-reduced (" + algorithm_->name + ") over " + std::to_string(stream_.communicator().size()) +
         " ranks" + (config_.overlap ? " during backward" : " after backward");
}

void BucketedAllReduce::on_layer(model::Layer& layer, model::HookPoint point, const model::PassContext&) {
  if (point != model::HookPoint::after_backward) return;
  for (model::Parameter* p : layer.own_parameters()) parameter_final(p);
  for (model::Parameter* p : layer.borrowed_parameters()) parameter_final(p);
  if (config_.overlap) stream_.progress();
}

void BucketedAllReduce::begin_step() {
  // A gradient is final once every layer that produces it has run its backward of every
  // micro-batch: counted over the step, since a pipeline interleaves the micro-batches of the
  // stages it runs on one rank.
  for (auto& [p, users] : users_) pending_[p] = users * config_.micro_batches;
  for (Bucket& b : buckets_) {
    b.grads.zero();
    b.launched = false;
    b.pending = static_cast<int>(b.parameters.size());
  }
}

void BucketedAllReduce::parameter_final(model::Parameter* p) {
  auto it = pending_.find(p);
  if (it == pending_.end() || --it->second != 0) return;  // not final yet
  Bucket& b = buckets_[bucket_of_.at(p)];
  if (--b.pending == 0 && config_.overlap) launch(b);
}

void BucketedAllReduce::launch(Bucket& b) {
  b.launched = true;
  const AlgorithmDescriptor* a = algorithm_;
  CollectiveCall call;
  call.send = call.recv = b.grads.view();
  stream_.enqueue("all_reduce of " + b.grads.describe(),
                  [a, call](Communicator& comm) { run_collective(comm, *a, call, kHalfReduction); });
  if (config_.overlap) stream_.progress();
}

void BucketedAllReduce::finish() {
  for (const auto& [p, left] : pending_)
    require(left == 0, "data parallelism: " + p->name + " saw " + std::to_string(users_.at(p) * config_.micro_batches - left) +
                           " backwards in this step, expected " + std::to_string(users_.at(p) * config_.micro_batches) +
                           " (its layers x " + std::to_string(config_.micro_batches) + " micro-batches)");
  const auto start = std::chrono::steady_clock::now();
  // Without overlap every bucket starts here; with it, only a bucket holding a parameter that
  // no backward touched (the same on every rank, so the order stays common).
  for (Bucket& b : buckets_)
    if (!b.launched) launch(b);
  stream_.synchronize();
  exposed_seconds += seconds_since(start);
}

std::vector<std::vector<std::string>> BucketedAllReduce::bucket_parameters() const {
  std::vector<std::vector<std::string>> out;
  for (const Bucket& b : buckets_) {
    auto& names = out.emplace_back();
    for (const model::Parameter* p : b.parameters) names.push_back(p->name);
  }
  return out;
}

}  // namespace parity::parallel
