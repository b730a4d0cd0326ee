// Expert parallelism: the all-to-all exchange, the model, the trainer and the gathering of the
// whole parameters (see expert_parallel.hpp).
#include "reference/parallel/expert/expert_parallel.hpp"

#include <algorithm>
#include <chrono>
#include <numeric>

#include "reference/core/error.hpp"
#include "reference/cuda/device.hpp"
#include "reference/theory/moe.hpp"
#include "reference/parallel/data/data_parallel.hpp"

namespace parity::parallel {

// Carries one MoE layer's rows between the ep ranks; each pass's layout is fixed by its dispatch.
class ExpertParallel::Exchange : public model::ExpertExchange {
 public:
  Exchange(Communicator& group, int experts, const AlgorithmDescriptor& algorithm, bool wrong_rank)
      : group_(group), experts_(experts), algorithm_(algorithm), wrong_rank_(wrong_rank) {}
  int ranks() const override { return group_.size(); }
  int rank() const override { return group_.rank(); }
  ExpertTraffic traffic;

  model::ExpertRows dispatch(const Tensor& rows, const std::vector<std::int64_t>& per_expert,
                             const model::PassContext& context) override {
    const int n = ranks(), local = experts_ / n;
    // The counts first: the block for rank o holds the rows of its experts (o's block goes to
    // o + 1 under the wrong_rank fault).
    std::vector<std::int64_t> send(static_cast<std::size_t>(experts_)), received(static_cast<std::size_t>(experts_));
    for (int o = 0; o < n; ++o)
      for (int i = 0; i < local; ++i)
        send[static_cast<std::size_t>(destination(o) * local + i)] = per_expert[static_cast<std::size_t>(o * local + i)];
    const auto start = std::chrono::steady_clock::now();
    group_.all_to_all({send.data(), send.size(), DataType::int64, MemorySpace::host},
                      {received.data(), received.size(), DataType::int64, MemorySpace::host});
    traffic.seconds += seconds_since(start);
    Layout& layout = layouts_[key(context)];
    layout = Layout{};
    layout.channels = rows.dim(-1);
    layout.dtype = rows.dtype();
    layout.received = std::move(received);
    layout.sent.assign(static_cast<std::size_t>(n), 0);
    layout.from.assign(static_cast<std::size_t>(n), 0);
    layout.per_expert.assign(static_cast<std::size_t>(local), 0);
    layout.block_offset.assign(layout.received.size(), 0);
    for (int d = 0; d < n; ++d)
      for (int i = 0; i < local; ++i) layout.sent[static_cast<std::size_t>(d)] += send[static_cast<std::size_t>(d * local + i)];
    std::int64_t offset = 0;
    for (int s = 0; s < n; ++s)
      for (int i = 0; i < local; ++i) {
        const std::size_t b = static_cast<std::size_t>(s * local + i);
        layout.from[static_cast<std::size_t>(s)] += layout.received[b];
        layout.per_expert[static_cast<std::size_t>(i)] += layout.received[b];
        layout.block_offset[b] = offset;
        offset += layout.received[b];
      }
    return to_experts(rows, layout, traffic.dispatch);
  }

  Tensor combine(const Tensor& rows, const model::PassContext& context) override {
    Tensor out = to_tokens(rows, layouts_.at(key(context)), traffic.combine);
    if (!context.training) layouts_.erase(key(context));
    return out;
  }

  model::ExpertRows combine_backward(const Tensor& drows, const model::PassContext& context) override {
    return to_experts(drows, layouts_.at(key(context)), traffic.backward);
  }

  Tensor dispatch_backward(const Tensor& drows, const model::PassContext& context) override {
    Tensor out = to_tokens(drows, layouts_.at(key(context)), traffic.backward);
    layouts_.erase(key(context));
    return out;
  }

 private:
  // Who sends how many rows to whom in one pass, in rows of `channels` elements of `dtype`.
  struct Layout {
    std::int64_t channels = 0;
    DataType dtype = DataType::float32;
    std::vector<std::int64_t> sent;          // [rank] rows this rank sends to each rank
    std::vector<std::int64_t> received;      // [source][local expert] rows it receives
    std::vector<std::int64_t> from;          // [source] rows it receives from each rank
    std::vector<std::int64_t> per_expert;    // [local expert] rows each of its experts takes
    std::vector<std::int64_t> block_offset;  // [source][local expert] row offset, source-major
  };
  static std::pair<std::uint64_t, int> key(const model::PassContext& c) { return {c.step, c.micro_batch}; }
  int destination(int owner) const { return wrong_rank_ ? (owner + 1) % ranks() : owner; }

  // One all-to-all-v of rows; counts in rows per peer. Returns the received rows (undefined when
  // none arrive) and adds the bytes sent to other ranks to `bytes`.
  Tensor transfer(const Tensor& rows, const Layout& layout, const std::vector<std::int64_t>& send_rows,
                  const std::vector<std::int64_t>& receive_rows, double& bytes) {
    const std::int64_t C = layout.channels;
    const MemorySpace space = rows.defined() ? rows.space() : group_.memory_space();
    std::vector<std::size_t> send_counts, receive_counts;
    for (std::int64_t r : send_rows) send_counts.push_back(static_cast<std::size_t>(r * C));
    for (std::int64_t r : receive_rows) receive_counts.push_back(static_cast<std::size_t>(r * C));
    const std::size_t total = std::accumulate(receive_counts.begin(), receive_counts.end(), std::size_t{0});
    Tensor out;
    if (total > 0)
      out = Tensor::empty("expert_parallel.rows", {static_cast<std::int64_t>(total) / C, C}, layout.dtype,
                          MemoryCategory::activations, space);
    CollectiveCall call;
    call.collective = Collective::all_to_all_v;
    call.send = rows.defined() ? rows.view() : BufferView{nullptr, 0, layout.dtype, space};
    call.recv = out.defined() ? out.view() : BufferView{nullptr, 0, layout.dtype, space};
    call.send_counts = send_counts;
    call.recv_counts = receive_counts;
    const auto start = std::chrono::steady_clock::now();
    run_collective(group_, algorithm_, call);
    if (space == MemorySpace::cuda) cuda::synchronize();  // the transfer's time, not its launch
    traffic.seconds += seconds_since(start);
    for (int p = 0; p < ranks(); ++p)
      if (p != rank()) bytes += static_cast<double>(send_counts[static_cast<std::size_t>(p)] * size_of(layout.dtype));
    return out;
  }

  // Copies the blocks [source][local expert] between the source-major layout the transfers use
  // and the expert-major one the experts run on.
  void reorder(const Tensor& from, Tensor& to, const Layout& layout, bool to_expert_major) const {
    const int n = ranks(), local = experts_ / n;
    const std::int64_t C = layout.channels;
    std::int64_t expert_major = 0;
    for (int i = 0; i < local; ++i)
      for (int s = 0; s < n; ++s) {
        const std::size_t b = static_cast<std::size_t>(s * local + i);
        const std::int64_t r = layout.received[b];
        if (r == 0) continue;
        const std::int64_t source_major = layout.block_offset[b];
        const std::int64_t read = to_expert_major ? source_major : expert_major;
        const std::int64_t write = to_expert_major ? expert_major : source_major;
        Tensor destination_rows = to.segment(to.name(), write * C, {r, C});
        copy_into(destination_rows, from.segment(from.name(), read * C, {r, C}));
        expert_major += r;
      }
  }

  // Tokens' side [A, C] (expert-major over every expert) -> this rank's experts, expert-major.
  model::ExpertRows to_experts(const Tensor& rows, const Layout& layout, double& bytes) {
    const Tensor arrived = transfer(rotated(rows, layout, true), layout, layout.sent, layout.from, bytes);
    model::ExpertRows out{Tensor(), layout.per_expert};
    if (!arrived.defined()) return out;
    out.rows = Tensor::empty("expert_parallel.expert_rows", arrived.shape(), arrived.dtype(), MemoryCategory::activations,
                             arrived.space());
    reorder(arrived, out.rows, layout, true);
    return out;
  }

  // This rank's experts' rows (expert-major) -> the tokens' ranks, [A, C] in dispatch order.
  Tensor to_tokens(const Tensor& rows, const Layout& layout, double& bytes) {
    Tensor source_major;
    if (rows.defined()) {
      source_major = Tensor::empty("expert_parallel.returning", rows.shape(), rows.dtype(), MemoryCategory::activations,
                                   rows.space());
      reorder(rows, source_major, layout, false);
    }
    return rotated(transfer(source_major, layout, layout.from, layout.sent, bytes), layout, false);
  }

  // The tokens' rows are expert-major over every expert, so the blocks for ranks 0..n-1 are in
  // rank order already; the wrong_rank fault places owner o's block at rank o + 1's position
  // (forward) and takes it back from there.
  Tensor rotated(const Tensor& rows, const Layout& layout, bool forward) const {
    const int n = ranks();
    if (!wrong_rank_ || n == 1 || !rows.defined()) return rows;
    const std::int64_t C = layout.channels;
    Tensor out = Tensor::empty(rows.name() + ".rotated", rows.shape(), rows.dtype(), MemoryCategory::activations, rows.space());
    std::vector<std::int64_t> owner_at(static_cast<std::size_t>(n + 1), 0), dest_at(static_cast<std::size_t>(n + 1), 0);
    for (int o = 0; o < n; ++o)
      owner_at[static_cast<std::size_t>(o + 1)] = owner_at[static_cast<std::size_t>(o)] + layout.sent[static_cast<std::size_t>(destination(o))];
    for (int d = 0; d < n; ++d)
      dest_at[static_cast<std::size_t>(d + 1)] = dest_at[static_cast<std::size_t>(d)] + layout.sent[static_cast<std::size_t>(d)];
    for (int o = 0; o < n; ++o) {
      const std::int64_t r = layout.sent[static_cast<std::size_t>(destination(o))];
      if (r == 0) continue;
      const std::int64_t a = owner_at[static_cast<std::size_t>(o)] * C, b = dest_at[static_cast<std::size_t>(destination(o))] * C;
      Tensor destination_rows = out.segment(out.name(), forward ? b : a, {r, C});
      copy_into(destination_rows, rows.segment(rows.name(), forward ? a : b, {r, C}));
    }
    return out;
  }

  Communicator& group_;
  int experts_;
  const AlgorithmDescriptor& algorithm_;
  bool wrong_rank_;
  std::map<std::pair<std::uint64_t, int>, Layout> layouts_;
};

namespace {
// The experts' gradients: zeroed at the start of every step (no data-parallel bucket holds
// them) and summed over the dp ranks that hold the same experts after the last backward.
class ExpertGradientSync : public AllReduceSync {
 public:
  ExpertGradientSync(Communicator& dp, std::vector<model::Parameter*> experts, const std::string& algorithm)
      : AllReduceSync("expert parameters", dp, std::move(experts), algorithm) {}
  std::string describe() const override {
    return std::to_string(parameters().size()) + " expert parameters' gradients all-reduced (" + algorithm().name +
           ") over the " + std::to_string(group().size()) + " dp ranks holding them";
  }
  void begin_step() override {
    for (model::Parameter* p : parameters()) p->gradient().zero();
  }
};
}  // namespace

ExpertParallel::ExpertParallel(Communicator& group, ExpertParallelConfig config)
    : group_(group), config_(std::move(config)),
      algorithm_(&find_algorithm(Collective::all_to_all_v, config_.all_to_all)) {
  if (!config_.fault.empty() && config_.fault != "wrong_rank")
    throw UsageError("unknown expert-parallel fault '" + config_.fault + "' (known: wrong_rank)");
}

model::MoeBuild ExpertParallel::build(int experts, model::MoeFaults faults) {
  experts_ = experts;
  model::MoeBuild b;
  b.faults = faults;
  b.exchange = [this](int block) -> std::shared_ptr<model::ExpertExchange> {
    auto& slot = exchanges_[block];
    if (!slot) slot = std::make_shared<Exchange>(group_, experts_, *algorithm_, config_.fault == "wrong_rank");
    return slot;
  };
  return b;
}

std::map<std::string, ExpertTraffic> ExpertParallel::traffic() const {
  std::map<std::string, ExpertTraffic> out;
  for (const auto& [block, exchange] : exchanges_) out["blocks." + std::to_string(block)] = exchange->traffic;
  return out;
}

void ExpertParallel::reset_traffic() {
  for (auto& [block, exchange] : exchanges_) exchange->traffic = {};
}

ExpertTraffic expected_traffic(Communicator& ep, const std::vector<std::int64_t>& admitted, std::int64_t hidden,
                               double element_bytes) {
  const int n = ep.size(), experts = static_cast<int>(admitted.size()), per_rank = experts / n;
  std::vector<std::int64_t> mine = admitted, every(static_cast<std::size_t>(experts * n));
  ep.all_gather({mine.data(), mine.size(), DataType::int64, MemorySpace::host},
                {every.data(), every.size(), DataType::int64, MemorySpace::host});
  // Rows this rank's experts receive from the other ranks: their outputs go back in the combine.
  std::int64_t received = 0;
  for (int s = 0; s < n; ++s)
    for (int i = 0; i < per_rank; ++i)
      if (s != ep.rank()) received += every[static_cast<std::size_t>(s * experts + ep.rank() * per_rank + i)];
  ExpertTraffic t;
  t.dispatch = theory::moe_dispatch_bytes(admitted, n, ep.rank(), hidden, element_bytes);
  t.combine = theory::moe_combine_bytes(received, hidden, element_bytes);
  t.backward = t.dispatch + t.combine;
  return t;
}

void validate_expert_parallel(const model::GptConfig& config, int ep) {
  if (ep < 1) throw UsageError("expert parallelism over " + std::to_string(ep) + " ranks: must be 1 or more");
  if (!config.moe.enabled() && ep > 1)
    throw UsageError("expert parallelism over " + std::to_string(ep) + " ranks needs MoE layers (none in " +
                     config.describe() + ")");
  if (config.moe.enabled() && config.moe.experts % ep != 0)
    throw UsageError(std::to_string(config.moe.experts) + " experts do not divide over " + std::to_string(ep) +
                     " expert-parallel ranks (E must be a multiple of ep)");
}

std::unique_ptr<model::Model> build_expert_parallel_gpt(const model::GptConfig& config, ExpertParallel& ep,
                                                        model::MoeFaults faults) {
  validate_expert_parallel(config, ep.size());
  return model::build_gpt(config, {model::LayerRange{}}, ep.build(config.moe.experts, faults));
}

std::unique_ptr<Trainer> make_expert_parallel_trainer(Grid& grid, model::Model& model, const model::Optimizer& optimizer,
                                                      const DataParallelConfig& config,
                                                      std::unique_ptr<GradientSync> first) {
  Communicator& data = grid.group(AxisSet{Axis::ep, Axis::dp});
  Communicator& dp = grid.group(Axis::dp);
  const DataParallelConfig checked = checked_config(config, data.size(), model, optimizer);
  if (checked.zero_stage != 0)
    throw UsageError("expert parallelism composes with plain data parallelism (ZeRO stage 0) only, not stage " +
                     std::to_string(checked.zero_stage));
  std::vector<model::Parameter*> experts, shared;
  for (model::MixtureOfExperts* moe : model::moe_layers(model)) {
    auto more = moe->expert_parameters();
    experts.insert(experts.end(), more.begin(), more.end());
    // The aux-free routers' bias moves with the load of every token of the step.
    moe->set_load_reduction([&data](std::vector<double>& load) {
      data.all_reduce({load.data(), load.size(), DataType::float64, MemorySpace::host},
                      {load.data(), load.size(), DataType::float64, MemorySpace::host}, ReduceOp::sum);
    });
  }
  for (model::Parameter* p : model.parameters())
    if (std::find(experts.begin(), experts.end(), p) == experts.end()) shared.push_back(p);
  StepParts parts;
  parts.schedule = std::make_unique<SequentialSchedule>();
  if (first) parts.syncs.push_back(std::move(first));
  parts.syncs.push_back(std::make_unique<BucketedAllReduce>(data, model, checked, shared));
  parts.syncs.push_back(std::make_unique<ExpertGradientSync>(dp, experts, checked.all_reduce));
  parts.optimizer = std::make_unique<ReplicatedOptimizer>(model, optimizer, checked.precision);
  auto trainer = std::make_unique<Trainer>(model, data, checked.global_batch, checked.micro_batches, std::move(parts));
  trainer->set_loss_scaling(checked.loss_scaling, &grid.world());
  return trainer;
}

ParameterValues gather_expert_parallel(const ParameterValues& local, const model::GptConfig& config, Communicator& ep,
                                       std::vector<std::string>* disagreeing) {
  // Every rank knows every parameter's name and size from the single-device model.
  const auto whole_model = model::build_gpt(config);
  const std::vector<model::Parameter*> whole = whole_model->parameters();
  const int n = ep.size(), per_rank = config.moe.enabled() ? config.moe.experts / n : 0;
  const std::size_t states = local.state.empty() ? 0 : local.state.front().size();
  std::map<std::string, std::size_t> mine;
  for (std::size_t i = 0; i < local.names.size(); ++i) mine[local.names[i]] = i;
  // The expert a parameter belongs to ("blocks.1.mlp.experts.5.fc.weight" -> 5), or -1.
  const auto expert_of = [](const std::string& name) {
    const std::string marker = ".experts.";
    const auto at = name.find(marker);
    return at == std::string::npos ? -1 : std::stoi(name.substr(at + marker.size()));
  };
  ParameterValues out;
  out.names.resize(whole.size());
  out.values.resize(whole.size());
  out.state.resize(whole.size());
  for (int owner = 0; owner < n; ++owner) {
    std::vector<double> packed;
    std::vector<std::size_t> members;
    for (std::size_t w = 0; w < whole.size(); ++w) {
      const int e = expert_of(whole[w]->name);
      if (e < 0 || e / std::max(per_rank, 1) != owner) continue;
      members.push_back(w);
      if (owner == ep.rank()) {
        const std::size_t i = mine.at(whole[w]->name);
        packed.insert(packed.end(), local.values[i].begin(), local.values[i].end());
        if (i < local.state.size())
          for (const auto& s : local.state[i]) packed.insert(packed.end(), s.begin(), s.end());
      }
    }
    std::size_t total = 0;
    for (std::size_t w : members) total += static_cast<std::size_t>(whole[w]->value.numel()) * (1 + states);
    packed.resize(total);
    const BufferView view{packed.data(), packed.size(), DataType::float64, MemorySpace::host};
    if (n > 1) ep.broadcast(view, view, owner);
    std::size_t at = 0;
    for (std::size_t w : members) {
      const auto count = static_cast<std::size_t>(whole[w]->value.numel());
      out.names[w] = whole[w]->name;
      out.values[w].assign(packed.begin() + static_cast<std::ptrdiff_t>(at), packed.begin() + static_cast<std::ptrdiff_t>(at + count));
      at += count;
      out.state[w].resize(states);
      for (std::size_t s = 0; s < states; ++s) {
        out.state[w][s].assign(packed.begin() + static_cast<std::ptrdiff_t>(at), packed.begin() + static_cast<std::ptrdiff_t>(at + count));
        at += count;
      }
    }
  }
  // Shared parameters: this rank's copy, which every ep rank must hold bit for bit (checked
  // against rank 0's, all of them in one broadcast).
  std::vector<double> shared, first;
  for (std::size_t w = 0; w < whole.size(); ++w) {
    if (expert_of(whole[w]->name) >= 0) continue;
    const std::size_t i = mine.at(whole[w]->name);
    out.names[w] = local.names[i];
    out.values[w] = local.values[i];
    if (i < local.state.size()) out.state[w] = local.state[i];
    shared.insert(shared.end(), local.values[i].begin(), local.values[i].end());
  }
  first = shared;
  const BufferView view{first.data(), first.size(), DataType::float64, MemorySpace::host};
  if (n > 1) ep.broadcast(view, view, 0);
  if (disagreeing && first != shared) {
    std::size_t at = 0;
    for (std::size_t w = 0; w < whole.size(); ++w) {
      if (expert_of(whole[w]->name) >= 0) continue;
      const std::size_t count = out.values[w].size();
      if (!std::equal(shared.begin() + static_cast<std::ptrdiff_t>(at), shared.begin() + static_cast<std::ptrdiff_t>(at + count),
                      first.begin() + static_cast<std::ptrdiff_t>(at)))
        disagreeing->push_back(whole[w]->name);
      at += count;
    }
  }
  return out;
}

}  // namespace parity::parallel
