// Activation checkpointing: the wrapper, the policies and the probe (see checkpoint.hpp).
#include "reference/parallel/checkpoint/checkpoint.hpp"

#include <atomic>
#include <charconv>
#include <limits>

#include "reference/core/error.hpp"

namespace parity::parallel {

namespace {

std::atomic<std::int64_t> g_recomputed{0};

// A different dropout seed for the fault: any nonzero offset draws other masks.
constexpr std::uint64_t kFreshSeedOffset = 0x9e3779b97f4a7c15ull;

class Checkpointed;

// Blocks recomputed together: the first keeps the segment's input; the last, whose backward
// comes first, recomputes them all.
struct RecomputeSegment {
  std::vector<Checkpointed*> members;
  bool fresh_seed = false;  // the fault
};

// A block that keeps only what its segment needs (its input, when it is the segment's first)
// and recomputes its forward in backward. Named as the block it wraps (it has no parameters).
class Checkpointed final : public model::Layer {
 public:
  Checkpointed(std::unique_ptr<model::Layer> inner, std::shared_ptr<RecomputeSegment> segment)
      : Layer(inner->name()), segment_(std::move(segment)) {
    inner_ = &add_child(std::move(inner));
  }
  const char* kind() const override { return "checkpoint"; }

 protected:
  Tensor do_forward(const Tensor& x, const model::PassContext& context) override {
    Tensor y = inner_->forward(x, context);
    if (!context.training || context.recompute) return y;  // a recompute keeps the state for backward
    // The block's own losses (MoE balancing) go on as this layer's, then its state goes.
    const double auxiliary = inner_->take_auxiliary_loss(context);
    inner_->release_saved(context);
    if (auxiliary != 0) add_auxiliary_loss(context, auxiliary);
    if (segment_->members.front() == this) save(context, {x});
    return y;
  }

  Tensor do_backward(const Tensor& dy, const model::PassContext& context) override {
    if (segment_->members.back() == this) recompute(context);
    return inner_->backward(dy, context);
  }

 private:
  // The segment's forward again from its kept input, through each member's hooks (ZeRO-3
  // gathers parameters for it), with the pass's own context: the same dropout masks.
  void recompute(const model::PassContext& context) {
    model::PassContext again = context;
    again.recompute = true;
    again.defer_weight_gradients = false;
    if (segment_->fresh_seed) again.dropout_seed_offset += kFreshSeedOffset;
    Tensor x = segment_->members.front()->take_saved(context).at(0);
    for (Checkpointed* member : segment_->members) {
      x = member->forward(x, again);
      member->inner_->take_auxiliary_loss(again);  // counted in the first forward
      g_recomputed.fetch_add(1, std::memory_order_relaxed);
    }
  }

  model::Layer* inner_;
  std::shared_ptr<RecomputeSegment> segment_;
};

// "every2" / "every:2" -> "2"; empty when `text` does not start with `prefix`.
std::optional<std::string_view> argument_of(std::string_view text, std::string_view prefix) {
  if (text.substr(0, prefix.size()) != prefix) return std::nullopt;
  text.remove_prefix(prefix.size());
  if (!text.empty() && text.front() == ':') text.remove_prefix(1);
  return text;
}

std::int64_t whole_number(std::string_view digits, std::string_view policy) {
  std::int64_t value = -1;
  const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (digits.empty() || digits.front() == '-' || error != std::errc() || end != digits.data() + digits.size())
    throw UsageError("checkpoint policy '" + std::string(policy) + "': '" + std::string(digits) +
                     "' is not a whole number");
  return value;
}

// "65536", "64K", "1M", "2G" (K, M, G = 2^10, 2^20, 2^30) -> bytes.
std::int64_t byte_count(std::string_view text, std::string_view policy) {
  std::int64_t scale = 1;
  if (!text.empty()) {
    switch (text.back()) {
      case 'K': case 'k': scale = std::int64_t{1} << 10; break;
      case 'M': case 'm': scale = std::int64_t{1} << 20; break;
      case 'G': case 'g': scale = std::int64_t{1} << 30; break;
      default: break;
    }
    if (scale != 1) text.remove_suffix(1);
  }
  const std::int64_t value = whole_number(text, policy);
  if (value > std::numeric_limits<std::int64_t>::max() / scale)
    throw UsageError("checkpoint policy '" + std::string(policy) + "': the budget is too large");
  return value * scale;
}

}  // namespace

std::string_view CheckpointPolicy::kind_name() const {
  switch (kind) {
    case Kind::none: return "none";
    case Kind::full: return "full";
    case Kind::every: return "every";
    case Kind::sqrt: return "sqrt";
    case Kind::selective: return "selective";
    case Kind::budget: return "budget";
  }
  return "?";
}

std::string CheckpointPolicy::name() const {
  std::string out(kind_name());
  if (kind == Kind::every) out += std::to_string(every);
  if (kind == Kind::budget) out += std::to_string(budget_bytes);
  return out;
}

CheckpointPolicy parse_checkpoint_policy(std::string_view text) {
  CheckpointPolicy p;
  using Kind = CheckpointPolicy::Kind;
  if (text == "none") p.kind = Kind::none;
  else if (text == "full") p.kind = Kind::full;
  else if (text == "sqrt") p.kind = Kind::sqrt;
  else if (text == "selective") p.kind = Kind::selective;
  else if (auto k = argument_of(text, "every")) {
    p.kind = Kind::every;
    const std::int64_t value = whole_number(*k, text);
    if (value < 1 || value > (1 << 20))
      throw UsageError("checkpoint policy '" + std::string(text) + "': k must be at least 1 (every k-th block recomputes)");
    p.every = static_cast<int>(value);
  } else if (auto bytes = argument_of(text, "budget")) {
    p.kind = Kind::budget;
    p.budget_bytes = byte_count(*bytes, text);
  } else {
    throw UsageError("unknown checkpoint policy '" + std::string(text) +
                     "' (known: none, full, every<k>, sqrt, selective, budget<bytes>)");
  }
  return p;
}

void check_checkpoint_policy(const CheckpointPolicy& policy, int model_blocks, const theory::BlockActivationBytes& bytes) {
  using Kind = CheckpointPolicy::Kind;
  if (policy.kind == Kind::every && (policy.every < 1 || policy.every > model_blocks))
    throw UsageError("checkpoint policy " + policy.name() + ": k = " + std::to_string(policy.every) + " is outside 1.." +
                     std::to_string(model_blocks) + " (the model's blocks)");
  if (policy.kind != Kind::budget) return;
  const std::int64_t working_set = bytes.whole + bytes.branch;
  if (policy.budget_bytes < working_set)
    throw UsageError("checkpoint policy " + policy.name() + ": a budget of " + std::to_string(policy.budget_bytes) +
                     " bytes is below one block's working set (" + std::to_string(working_set) + " bytes)");
  if (theory::budget_kept_blocks(model_blocks, bytes, policy.budget_bytes) < 0)
    throw UsageError("checkpoint policy " + policy.name() + ": a budget of " + std::to_string(policy.budget_bytes) +
                     " bytes is below what recomputing every block needs (" +
                     std::to_string(theory::checkpoint_activation_bytes(theory::full_layout(model_blocks), bytes).peak) +
                     " bytes)");
}

theory::CheckpointLayout checkpoint_layout(const CheckpointPolicy& policy, int blocks,
                                           const theory::BlockActivationBytes& bytes) {
  using Kind = CheckpointPolicy::Kind;
  switch (policy.kind) {
    case Kind::none: return theory::none_layout(blocks);
    case Kind::full: return theory::full_layout(blocks);
    case Kind::sqrt: return theory::sqrt_layout(blocks);
    case Kind::selective: return theory::selective_layout(blocks);
    case Kind::every:
      require(policy.every >= 1, "checkpoint policy " + policy.name() + ": k must be at least 1");
      return theory::every_layout(blocks, policy.every);
    case Kind::budget:
      return theory::budget_layout(blocks, std::max(0, theory::budget_kept_blocks(blocks, bytes, policy.budget_bytes)));
  }
  return theory::none_layout(blocks);
}

std::vector<std::size_t> block_indices(const model::Model& model) {
  std::vector<std::size_t> out;
  const std::vector<model::Layer*> layers = model.layers();
  for (std::size_t i = 0; i < layers.size(); ++i) {
    const std::string_view kind = layers[i]->kind();
    if (kind == "block" || kind == "checkpoint") out.push_back(i);
  }
  return out;
}

void apply_checkpointing(model::Model& model, const theory::CheckpointLayout& layout, const CheckpointPolicy& policy,
                         const std::vector<int>& pieces) {
  const std::vector<std::size_t> blocks = block_indices(model);
  require(static_cast<int>(blocks.size()) == layout.blocks(),
          "checkpointing: a layout of " + std::to_string(layout.blocks()) + " blocks for a model of " +
              std::to_string(blocks.size()));
  const std::vector<model::Layer*> layers = model.layers();
  // The piece each top-level layer is in.
  std::vector<int> piece_of(layers.size(), 0);
  {
    std::size_t at = 0;
    for (std::size_t p = 0; p < pieces.size(); ++p)
      for (int i = 0; i < pieces[p] && at < piece_of.size(); ++i) piece_of[at++] = static_cast<int>(p);
    require(pieces.empty() || at == layers.size(), "checkpointing: pieces do not add up to the model's top-level layers");
  }
  std::shared_ptr<RecomputeSegment> segment;
  for (std::size_t b = 0; b < blocks.size(); ++b) {
    const std::size_t index = blocks[b];
    require(std::string_view(layers[index]->kind()) == "block", "checkpointing applied twice to " + layers[index]->name());
    const int id = layout.segment[b];
    if (id < 0) {
      segment.reset();
      if (layout.selective)
        for (model::Layer* layer : model::all_layers({layers[index]}))
          if (auto* attention = dynamic_cast<model::CausalSelfAttention*>(layer)) attention->set_recompute_core(true);
      continue;
    }
    const bool continues = segment && b > 0 && layout.segment[b - 1] == id && blocks[b - 1] + 1 == index &&
                           piece_of[blocks[b - 1]] == piece_of[index];
    if (!continues) {
      segment = std::make_shared<RecomputeSegment>();
      segment->fresh_seed = policy.fault == "fresh_dropout_seed";
    }
    model.wrap(index, [&](std::unique_ptr<model::Layer> inner) {
      auto wrapper = std::make_unique<Checkpointed>(std::move(inner), segment);
      segment->members.push_back(wrapper.get());
      return wrapper;
    });
  }
  require(policy.fault.empty() || policy.fault == "fresh_dropout_seed", "unknown checkpoint fault '" + policy.fault + "'");
}

theory::CheckpointLayout apply_checkpoint_policy(model::Model& model, const model::GptConfig& config,
                                        const CheckpointPolicy& policy, std::int64_t rows, const std::vector<int>& pieces) {
  const theory::BlockActivationBytes bytes = theory::gpt_block_activation_bytes(config, rows);
  check_checkpoint_policy(policy, config.layers, bytes);
  const theory::CheckpointLayout layout = checkpoint_layout(policy, static_cast<int>(block_indices(model).size()), bytes);
  apply_checkpointing(model, layout, policy, pieces);
  return layout;
}

std::int64_t recomputed_block_forwards() { return g_recomputed.load(std::memory_order_relaxed); }

// ---- probe ----

ActivationProbe::ActivationProbe(model::Model& model) : space_(model.space()) {
  const std::vector<std::size_t> blocks = block_indices(model);
  const std::vector<model::Layer*> layers = model.layers();
  require(!blocks.empty() && blocks.back() + 1 < layers.size(),
          "activation probe: the model needs blocks and a layer after them");
  first_ = blocks.front();
  last_ = blocks.back();
  after_ = last_ + 1;
  for (std::size_t i : {first_, last_, after_}) {
    model::Layer* layer = layers[i];
    hooks_.emplace_back(layer, layer->add_hook([this, i](model::Layer&, model::HookPoint point,
                                                         const model::PassContext& context) {
      if (context.training && !context.recompute) on(i, point);
    }));
  }
}

ActivationProbe::~ActivationProbe() {
  for (auto& [layer, id] : hooks_) layer->remove_hook(id);
}

std::int64_t ActivationProbe::current() const {
  return MemoryTracker::process().usage(MemoryCategory::activations, space_).current;
}

void ActivationProbe::on(std::size_t index, model::HookPoint point) {
  using P = model::HookPoint;
  if (index == first_ && point == P::before_forward) {
    base_ = current();
    peak_ = 0;
    scope_.emplace(space_);
  } else if (index == after_ && point == P::before_forward && scope_) {
    stored_ = current() - base_;
    peak_ = std::max(peak_, scope_->peak_above_start(MemoryCategory::activations));
    scope_.reset();
  } else if (index == last_ && point == P::before_backward) {
    backward_start_ = current() - base_;
    scope_.emplace(space_);
  } else if (index == first_ && point == P::after_backward && scope_) {
    peak_ = std::max(peak_, backward_start_ + scope_->peak_above_start(MemoryCategory::activations));
    scope_.reset();
  }
}

}  // namespace parity::parallel
