// Training-state conformance cases (see restore.hpp).
#include "correctness/cases/restore.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <memory>
#include <random>
#include <set>

#include <unistd.h>

#include "correctness/cases/compare.hpp"
#include "correctness/cases/family.hpp"
#include "correctness/cases/pipeline.hpp"
#include "correctness/cases/tensor.hpp"
#include "correctness/cases/training.hpp"
#include "reference/core/error.hpp"
#include "reference/core/tolerance.hpp"
#include "reference/model/moe.hpp"
#include "reference/parallel/expert/expert_parallel.hpp"
#include "reference/parallel/state/store.hpp"
#include "reference/parallel/techniques/techniques.hpp"
#include "reference/parallel/tensor/tensor_parallel.hpp"

namespace parity::cases {

namespace fs = std::filesystem;

std::string RestoreLayout::name() const {
  std::string n;
  auto add = [&](const std::string& part) { n += (n.empty() ? "" : ".") + part; };
  if (ep > 1) add("ep" + std::to_string(ep));
  if (dp > 1) add("dp" + std::to_string(dp));
  if (tp > 1) add("tp" + std::to_string(tp));
  if (sp) add("sp");
  if (pp > 1) add("pp" + std::to_string(pp) + "." + schedule + ".m" + std::to_string(micro_batches));
  if (zero > 0) add("zero" + std::to_string(zero));
  if (micro_batches > 1 && pp == 1) add("acc" + std::to_string(micro_batches));
  return n.empty() ? "one" : n;
}

std::string RestoreCase::name() const {
  return std::string("restore/") + (moe ? (router == "top_k" ? "moe/" : "moe." + router + "/") : "") + before.name() + "-to-" + after.name() + "/" + precision +
         (fault.empty() ? "" : "/" + fault);
}

namespace {

using parallel::Axis;

// Rows of the global batch: the same under every layout, so a multiple of every pipeline's
// micro-batches x replicas; three rows a rank at 8 data-parallel ranks.
constexpr std::int64_t kRows = 24;

// The tensor-parallel cases' GPT with 4 blocks, so that 4 pipeline stages have a block each.
model::GptConfig restore_model(DataType dtype) {
  model::GptConfig g = tensor_case_model(dtype);
  g.layers = 4;
  return g;
}

DataType model_type(const RestoreCase& c) { return parse_data_type(c.precision); }
bool is_mixed(const RestoreCase& c) { return is_half(model_type(c)); }

// float16 scales its loss dynamically from 2^12 and doubles it after 3 clean steps: within a
// case's 4 steps and after the save, so that a scaler left unrestored ends in another state.
parallel::LossScaling loss_scaling(const RestoreCase& c) {
  parallel::LossScaling s;
  s.dynamic = model_type(c) == DataType::float16;
  s.initial_scale = 0x1p12;
  s.growth_interval = 3;
  return s;
}

// The training cases' small GPT with block 1 an MoE layer of 4 experts, top-2, dropless.
model::GptConfig restore_moe_model(DataType dtype) {
  model::GptConfig g = case_gpt_config(dtype);
  g.seed = 2718;
  g.moe.layers = {1};
  g.moe.experts = 4;
  g.moe.top_k = 2;
  g.moe.expert_hidden = 24;
  g.moe.bias_update_rate = 5e-2;  // aux_free: large enough to change decisions within the steps
  return g;
}

model::GptConfig model_of(const RestoreCase& c) {
  if (!c.moe) return restore_model(model_type(c));
  model::GptConfig g = restore_moe_model(model_type(c));
  g.moe.router = c.router;
  return g;
}

bool valid(const RestoreLayout& l) {
  const bool pipeline = l.pp > 1 ? !l.sp && l.zero <= 1 && kRows % (l.micro_batches * l.dp) == 0 : l.pp == 1;
  const bool experts = l.ep == 1 || (l.pp == 1 && !l.sp && l.zero == 0 && l.micro_batches == 1 && 4 % l.ep == 0);
  return l.dp >= 1 && l.tp >= 1 && 12 % l.tp == 0 && (!l.sp || l.tp > 1) && (l.zero == 0 || l.dp > 1) &&
         kRows / l.dp >= l.micro_batches && pipeline && experts;
}

// Every rank's parameters (a pipeline stage's) gathered over `stages`, each name once, in the
// order of `order` (the whole model's).
parallel::ParameterValues gather_stages(Communicator& stages, const parallel::ParameterValues& mine,
                                        const std::vector<std::string>& order) {
  auto put = [](std::string& out, const void* data, std::size_t bytes) {
    out.append(static_cast<const char*>(data), bytes);
  };
  auto put_doubles = [&](std::string& out, const std::vector<double>& v) {
    const std::uint64_t n = v.size();
    put(out, &n, sizeof n);
    put(out, v.data(), n * sizeof(double));
  };
  std::string packed;
  for (std::size_t i = 0; i < mine.names.size(); ++i) {
    const std::uint64_t length = mine.names[i].size(), states = mine.state[i].size();
    put(packed, &length, sizeof length);
    put(packed, mine.names[i].data(), length);
    put_doubles(packed, mine.values[i]);
    put(packed, &states, sizeof states);
    for (const auto& s : mine.state[i]) put_doubles(packed, s);
  }
  parallel::ParameterValues out;
  for (const std::string& from : stages.all_gather_strings(packed)) {
    std::size_t at = 0;
    auto get = [&](void* data, std::size_t bytes) {
      std::memcpy(data, from.data() + at, bytes);
      at += bytes;
    };
    auto get_doubles = [&] {
      std::uint64_t n = 0;
      get(&n, sizeof n);
      std::vector<double> v(n);
      get(v.data(), n * sizeof(double));
      return v;
    };
    while (at < from.size()) {
      std::uint64_t length = 0, states = 0;
      get(&length, sizeof length);
      std::string name(length, '\0');
      get(name.data(), length);
      std::vector<double> values = get_doubles();
      get(&states, sizeof states);
      std::vector<std::vector<double>> state;
      for (std::uint64_t k = 0; k < states; ++k) state.push_back(get_doubles());
      if (std::find(out.names.begin(), out.names.end(), name) != out.names.end()) continue;  // the tied copy
      out.names.push_back(std::move(name));
      out.values.push_back(std::move(values));
      out.state.push_back(std::move(state));
    }
  }
  parallel::ParameterValues ordered;
  for (const std::string& name : order) {
    const auto it = std::find(out.names.begin(), out.names.end(), name);
    if (it == out.names.end()) continue;  // compare() names what is missing
    const auto i = static_cast<std::size_t>(it - out.names.begin());
    ordered.names.push_back(name);
    ordered.values.push_back(std::move(out.values[i]));
    ordered.state.push_back(std::move(out.state[i]));
  }
  return ordered;
}

// A layout training on its ranks: the grid, the model, the optimizer and the trainer (or a
// pipeline's setup, which holds them).
struct Training {
  std::unique_ptr<parallel::Grid> grid;
  std::unique_ptr<parallel::TensorParallel> tp;
  std::unique_ptr<parallel::ExpertParallel> ep;
  model::GptConfig config;
  std::unique_ptr<model::Model> model;
  std::unique_ptr<model::Optimizer> optimizer;
  std::unique_ptr<parallel::Trainer> owned;
  std::unique_ptr<PipelineSetup> pipeline;
  parallel::Trainer* trainer = nullptr;
  bool mixed = false;

  // Parameters (masters with mixed precision, else the model's own) and state, whole, on every
  // rank of the layout.
  parallel::ParameterValues values(std::vector<std::string>& disagreeing, bool master = true) {
    parallel::ParameterValues v = trainer->gathered(master && mixed);
    if (pipeline) {
      if (pipeline->tensor_parallel->size() > 1)
        v = parallel::gather_tensor_parallel(v, pipeline->model->parameters(), pipeline->tensor_parallel->group(),
                                             &disagreeing);
      std::vector<std::string> order;
      const auto whole = model::build_gpt(pipeline->config);
      for (const model::Parameter* p : whole->parameters()) order.push_back(p->name);
      return gather_stages(pipeline->grid->group(Axis::pp), v, order);
    }
    if (tp) v = parallel::gather_tensor_parallel(v, model->parameters(), tp->group(), &disagreeing);
    if (ep) v = parallel::gather_expert_parallel(v, config, ep->group(), &disagreeing);
    return v;
  }
  // Everything the training state holds, whole: the model's values and state, with mixed
  // precision the masters too, and the aux-free routers' bias and pending load (summed over the
  // data ranks; collective over them).
  std::vector<parallel::ParameterValues> state(std::vector<std::string>& disagreeing) {
    std::vector<parallel::ParameterValues> out{values(disagreeing, false)};
    if (mixed) out.push_back(values(disagreeing, true));
    parallel::ParameterValues routing;
    for (const model::MixtureOfExperts* moe : model::moe_layers(*trainer_model())) {
      if (moe->rule().kind != ops::RouterKind::aux_free) continue;
      const model::MixtureOfExperts::RoutingState s = moe->routing_state(true);
      std::vector<double> v = s.bias;
      v.insert(v.end(), s.load.begin(), s.load.end());
      v.push_back(s.pending ? 1 : 0);
      v.push_back(static_cast<double>(s.step));
      routing.names.push_back(moe->name() + "/routing");
      routing.values.push_back(std::move(v));
      routing.state.emplace_back();
    }
    out.push_back(std::move(routing));
    return out;
  }
  model::Model* trainer_model() { return &trainer->model(); }
};

std::unique_ptr<Training> start(Communicator& group, const RestoreLayout& l, const RestoreCase& c) {
  auto t = std::make_unique<Training>();
  const model::GptConfig config = t->config = model_of(c);
  t->mixed = is_mixed(c);
  if (l.pp > 1) {
    PipelineCase pc;
    pc.schedule = l.schedule;
    pc.micro_batches = l.micro_batches;
    pc.tensor_parallel = l.tp;
    pc.data_parallel = l.dp;
    pc.zero_stage = l.zero;
    pc.precision = c.precision;
    pc.model = config;
    pc.rows_per_micro_batch = kRows / (l.micro_batches * l.dp);
    t->pipeline = setup_pipeline_case(group, pc);
    t->trainer = t->pipeline->trainer.get();
    if (t->mixed) t->trainer->set_loss_scaling(loss_scaling(c), &group);
    return t;
  }
  parallel::GridSpec spec;
  spec.set(Axis::tp, l.tp).set(Axis::ep, l.ep).set(Axis::dp, l.dp);
  t->grid = std::make_unique<parallel::Grid>(group, spec);
  t->optimizer = case_adamw(t->mixed ? DataType::float32 : model_type(c));
  parallel::DataParallelConfig dc;
  dc.zero_stage = l.zero;
  dc.global_batch = kRows;
  dc.micro_batches = l.micro_batches;
  dc.bucket_bytes = 2048;  // several buckets even for this small model
  if (t->mixed) {
    dc.precision = parallel::Precision::mixed;
    dc.loss_scaling = loss_scaling(c);
  }
  if (c.moe && l.ranks() > 1 && (l.ep > 1 || l.tp > 1)) {
    // The experts over ep (split over tp inside each), the rest replicated, the batch over dp x ep.
    parallel::validate_expert_parallel(config, l.ep);
    t->ep = std::make_unique<parallel::ExpertParallel>(t->grid->group(Axis::ep), parallel::ExpertParallelConfig{});
    t->tp = std::make_unique<parallel::TensorParallel>(t->grid->group(Axis::tp), parallel::TensorParallelConfig{});
    const model::MoeBuild build = t->ep->build(config.moe.experts);
    t->model = l.tp > 1 ? parallel::build_tensor_parallel_gpt(config, *t->tp, {{}}, build) : model::build_gpt(config, {{}}, build);
    t->model->to(group.memory_space());
    t->owned = parallel::make_expert_parallel_trainer(
        *t->grid, *t->model, *t->optimizer, dc,
        l.tp > 1 ? std::make_unique<parallel::TensorParallelSync>(*t->tp, *t->model, false) : nullptr);
    if (l.tp == 1) t->tp.reset();
  } else if (l.tp > 1) {
    parallel::TensorParallelConfig tc;
    tc.sequence_parallel = l.sp;
    t->tp = std::make_unique<parallel::TensorParallel>(t->grid->group(Axis::tp), tc);
    t->model = parallel::build_tensor_parallel_gpt(config, *t->tp);
    t->model->to(group.memory_space());
    t->owned = parallel::make_tensor_parallel_trainer(*t->grid, *t->tp, *t->model, *t->optimizer, dc);
  } else {
    t->model = model::build_gpt(config);
    t->model->to(group.memory_space());
    t->owned = parallel::make_trainer(t->grid->group(Axis::dp), *t->model, *t->optimizer, dc);
  }
  t->trainer = t->owned.get();
  return t;
}

struct RestoreReference {
  std::vector<double> losses;
  parallel::ParameterValues values, origin;
};

RestoreReference single_device(const RestoreCase& c, int steps) {
  const model::GptConfig config = model_of(c);
  auto m = model::build_gpt(config);
  auto optimizer = case_adamw(is_mixed(c) ? DataType::float32 : model_type(c));
  RestoreReference r;
  r.origin = values_of(*m, optimizer.get());
  const parallel::BatchSource source = parallel::batches_of(config);
  if (c.moe) {
    // Each data rank's rows a pass of its own, as the layouts run them.
    const int data = c.before.data_ranks();
    for (int step = 0; step < steps; ++step) {
      m->zero_grad();
      r.losses.push_back(forward_backward_per_data_rank(*m, source, step, kRows, data));
      optimizer->step(m->parameters());
    }
    r.values = values_of(*m, optimizer.get());
    return r;
  }
  if (is_mixed(c)) {
    const parallel::LossScaling s = loss_scaling(c);
    MixedRun run = train_mixed_single_device(*m, *optimizer, source, kRows, steps, s.dynamic ? s.initial_scale : 1);
    r.losses = std::move(run.losses);
    r.values = std::move(run.values);
    return r;
  }
  for (int step = 0; step < steps; ++step)
    r.losses.push_back(model::train_step(*m, *optimizer, source(step, 0, kRows, kRows), step));
  r.values = values_of(*m, optimizer.get());
  return r;
}

// "" when a and b hold the same names and every value and state element is equal, bit for bit;
// else where they first differ.
std::string first_difference(const parallel::ParameterValues& a, const parallel::ParameterValues& b) {
  if (a.names != b.names) return "the parameter lists differ";
  for (std::size_t i = 0; i < a.names.size(); ++i) {
    if (a.values[i] != b.values[i]) return a.names[i];
    if (a.state[i] != b.state[i]) return a.names[i] + " (optimizer state)";
  }
  return "";
}

// The training state's own scalars after the run, against what k + n clean steps give.
std::string scalar_failures(const parallel::Trainer& trainer, const RestoreCase& c) {
  std::string failures;
  const int steps = c.steps_before + c.steps_after;
  if (trainer.parts().optimizer->steps_taken() != steps)
    failures += "the optimizer counts " + std::to_string(trainer.parts().optimizer->steps_taken()) + " steps, not " +
                std::to_string(steps) + "; ";
  parallel::LossScaler expected(loss_scaling(c));
  for (int i = 0; i < steps; ++i) expected.update(true);
  if (trainer.scaler().scale() != expected.scale() || trainer.scaler().clean_steps() != expected.clean_steps())
    failures += "the loss scaler ends at " + format(trainer.scaler().scale()) + " after " +
                std::to_string(trainer.scaler().clean_steps()) + " clean steps, uninterrupted training at " +
                format(expected.scale()) + " after " + std::to_string(expected.clean_steps()) + "; ";
  return failures;
}

}  // namespace

std::vector<RestoreCase> restore_grid(int n) {
  std::vector<RestoreCase> out;
  std::set<std::string> seen;
  auto layout = [](int dp, int zero = 0, int tp = 1, bool sp = false, int acc = 1) {
    RestoreLayout l;
    l.dp = dp;
    l.zero = dp > 1 ? zero : 0;
    l.tp = tp;
    l.sp = sp;
    l.micro_batches = acc;
    return l;
  };
  auto add = [&](const RestoreLayout& a, const RestoreLayout& b, const char* precision) {
    if (a.ranks() > n || b.ranks() > n || !valid(a) || !valid(b)) return;
    RestoreCase c;
    c.before = a;
    c.after = b;
    c.precision = precision;
    if (seen.insert(c.name()).second) out.push_back(c);
  };
  const RestoreLayout one = layout(1), dp = layout(n);
  // The same layout on both sides: bit for bit.
  add(dp, dp, "float32");
  add(layout(n, 1), layout(n, 1), "float64");
  add(layout(n, 3), layout(n, 3), "bfloat16");
  add(layout(n / 2, 0, 2), layout(n / 2, 0, 2), "float32");
  add(one, one, "float16");
  // Data parallelism, ZeRO and accumulation into one another; the world shrunk and grown.
  add(dp, layout(n, 3), "float32");
  add(layout(n, 3), dp, "float64");
  add(layout(n, 1), layout(n, 2, 1, false, 2), "float32");
  add(layout(n, 2, 1, false, 2), one, "float32");
  add(one, layout(n, 1), "float32");
  if (n >= 4) add(dp, layout(n / 2), "float32");
  add(layout(n, 3), layout(n, 1), "bfloat16");
  add(dp, layout(n, 2), "float16");
  // Tensor parallelism re-cut (tp 2 -> 4 -> 1), with and without sequence parallelism, with ZeRO.
  add(layout(1, 0, 2), one, "float64");
  add(layout(1, 0, 2), layout(1, 0, 4), "float32");
  add(layout(1, 0, 4, true), one, "float32");
  add(layout(1, 0, 2, true), layout(2, 3), "float32");
  add(layout(n / 2, 1, 2), dp, "float32");
  add(layout(2, 3, 2), layout(1, 0, 4, true), "bfloat16");
  add(layout(1, 0, 2, true, 2), layout(2, 2), "float32");
  add(layout(1, 0, 3), layout(3), "float32");
  add(layout(n, 1), layout(1, 0, 2, true), "bfloat16");
  add(layout(1, 0, 2), dp, "float16");
  // Pipelines: the same pipeline on both sides, stages rebalanced (pp 4 -> 2), every schedule,
  // into and out of data, tensor and ZeRO parallelism, composed with dp and tp.
  auto pipeline = [&](int pp, const char* schedule, int m, int dp_ = 1, int zero = 0, int tp = 1) {
    RestoreLayout l = layout(dp_, zero, tp, false, m);
    l.pp = pp;
    l.schedule = schedule;
    return l;
  };
  add(pipeline(2, "1f1b", 4), pipeline(2, "1f1b", 4), "float32");
  add(pipeline(4, "1f1b", 4), pipeline(2, "gpipe", 4), "float32");
  add(pipeline(2, "gpipe", 2), one, "float64");
  add(layout(2, 1), pipeline(2, "interleaved", 4), "float32");
  add(pipeline(2, "zb-h1", 4), layout(1, 0, 2, true), "bfloat16");
  add(pipeline(2, "1f1b", 2, 2, 1), layout(4, 3), "float32");
  add(pipeline(2, "zb-v", 2, 1, 0, 2), pipeline(4, "1f1b", 4), "float32");
  add(dp, pipeline(2, "zb-h2", 4), "float16");
  add(pipeline(2, "1f1b", 4), pipeline(2, "1f1b", 2, 2, 1, 2), "bfloat16");
  // Expert parallelism on the MoE model, the batch over as many data ranks on both sides:
  // ep 4 -> 2, experts into data parallelism and ZeRO and back, tp inside the experts.
  auto moe = [&](const RestoreLayout& a, const RestoreLayout& b, const char* precision) {
    if (a.ranks() > n || b.ranks() > n || !valid(a) || !valid(b) || a.data_ranks() != b.data_ranks()) return;
    RestoreCase c;
    c.before = a;
    c.after = b;
    c.precision = precision;
    c.moe = true;
    if (seen.insert(c.name()).second) out.push_back(c);
  };
  auto experts = [&](int ep, int dp_ = 1, int tp = 1) {
    RestoreLayout l = layout(dp_, 0, tp);
    l.ep = ep;
    return l;
  };
  moe(experts(2), experts(2), "float32");
  moe(experts(4), experts(2, 2), "float64");
  moe(experts(2), layout(2, 1), "float32");
  moe(layout(4), experts(4), "float32");
  moe(experts(2, 1, 2), experts(2), "float32");
  moe(one, one, "float64");
  // The aux-free router's bias and pending load restored with it (expert-parallel layouts sum
  // the loads over the data ranks).
  auto aux_free = [&](const RestoreLayout& a, const RestoreLayout& b) {
    if (a.ranks() > n || b.ranks() > n || !valid(a) || !valid(b) || a.data_ranks() != b.data_ranks()) return;
    RestoreCase c;
    c.before = a;
    c.after = b;
    c.moe = true;
    c.router = "aux_free";
    if (seen.insert(c.name()).second) out.push_back(c);
  };
  aux_free(experts(2), experts(2));
  aux_free(experts(4), experts(2, 2));
  aux_free(one, one);
  return out;
}

RestoreResult run_restore_case(Communicator& world, const RestoreCase& c) {
  const RestoreLayout& a = c.before;
  const RestoreLayout& b = c.after;
  if (a.ranks() > world.size() || b.ranks() > world.size())
    throw UsageError(c.name() + " needs " + std::to_string(std::max(a.ranks(), b.ranks())) + " ranks; the world has " +
                     std::to_string(world.size()));
  if (!valid(a) || !valid(b)) throw UsageError(c.name() + ": a layout these cases cannot train");
  if (c.moe && a.data_ranks() != b.data_ranks())
    throw UsageError(c.name() + ": the MoE cases split the batch over as many data ranks before as after");
  if (!c.moe && (a.ep > 1 || b.ep > 1)) throw UsageError(c.name() + ": expert parallelism needs the MoE model");
  const int k = c.steps_before, n = c.steps_after;
  RestoreResult r;
  const model::GptConfig config = model_of(c);
  const parallel::BatchSource source = parallel::batches_of(config);
  RestoreReference reference;
  if (world.rank() == 0) reference = single_device(c, k + n);
  broadcast_from_first(world, reference.origin);
  broadcast_from_first(world, reference.values);
  broadcast_from_first(world, reference.losses);
  const std::int64_t terms =
      c.moe ? tolerance::expert_parallel_reduction_terms(kRows * config.sequence, config.moe.expert_hidden, config.vocabulary)
            : tolerance::tensor_parallel_reduction_terms(kRows * config.sequence, config.hidden, config.vocabulary);
  r.bound = tolerance::restore_relative_bound(model_type(c), terms, std::max(a.ranks(), b.ranks()), std::max(a.tp, b.tp),
                                              config.layers, k + n, true);

  // Where the saves go: a directory of rank 0's naming, removed at the end.
  const std::string id =
      world.all_gather_strings(world.rank() == 0 ? std::to_string(::getpid()) + "-" + std::to_string(std::random_device{}()) : "")
          .front();
  const fs::path root = fs::temp_directory_path() / ("parity-restore-" + id);
  const fs::path earlier = root / "earlier";
  std::string failures, compared;
  std::vector<std::string> disagreeing;

  // Layout A: k steps, saved (with the other_step fault, also one step earlier); when B is A,
  // on uninterrupted for the bit-for-bit comparison.
  parallel::ParameterValues uninterrupted;
  std::vector<double> uninterrupted_losses;
  std::vector<parallel::ParameterValues> saved_state;  // as A held it when saving (rank 0 compares)
  {
    auto group = world.split(world.rank() < a.ranks() ? 0 : 1, world.rank());
    if (world.rank() < a.ranks()) {
      auto t = start(*group, a, c);
      for (int step = 0; step < k; ++step) {
        if (c.fault == "other_step" && step + 1 == k)
          parallel::save_training_state(*group, *t->trainer, earlier, static_cast<std::uint64_t>(step));
        if (t->trainer->step(source, static_cast<std::uint64_t>(step)).skipped)
          failures += "step " + std::to_string(step) + " skipped; ";
      }
      const parallel::SavedState saved =
          parallel::save_training_state(*group, *t->trainer, root, static_cast<std::uint64_t>(k),
                                        {.layout = a.name(), .model = t->config});
      r.saved_bytes = static_cast<double>(saved.total_bytes);
      saved_state = t->state(disagreeing);
      if (a == b) {
        for (int step = k; step < k + n; ++step)
          uninterrupted_losses.push_back(t->trainer->step(source, static_cast<std::uint64_t>(step)).loss);
        uninterrupted = t->values(disagreeing);
      }
    }
  }

  // Layout B: a fresh trainer, restored, n more steps.
  {
    auto group = world.split(world.rank() < b.ranks() ? 0 : 1, world.rank());
    if (world.rank() < b.ranks()) {
      auto t = start(*group, b, c);
      parallel::StateLoad load;
      load.fault = c.fault;
      if (c.fault == "other_step") load.other = earlier;
      const parallel::LoadedState loaded = parallel::load_training_state(*group, *t->trainer, root, load);
      if (loaded.next_step != static_cast<std::uint64_t>(k))
        failures += "restored at step " + std::to_string(loaded.next_step) + ", saved at " + std::to_string(k) + "; ";
      // What B holds right after the restore is what A saved, element for element (rank 0 is in
      // both layouts).
      const std::vector<parallel::ParameterValues> restored = t->state(disagreeing);
      if (world.rank() == 0) {
        std::string where;
        for (std::size_t i = 0; i < restored.size() && where.empty(); ++i)
          where = first_difference(restored[i], saved_state[i]);
        r.restored_exactly = where.empty() ? 1 : 0;
        if (!where.empty()) failures += "the restored state differs from the saved one (first at " + where + "); ";
      }
      std::vector<double> losses;
      for (int step = k; step < k + n; ++step) {
        const parallel::StepStats stats = t->trainer->step(source, static_cast<std::uint64_t>(step));
        if (stats.skipped) failures += "step " + std::to_string(step) + " skipped; ";
        losses.push_back(stats.loss);
        const double want = reference.losses[static_cast<std::size_t>(step)];
        r.loss_error = std::max(r.loss_error, std::abs(stats.loss - want) / std::abs(want));
      }
      const parallel::ParameterValues values = t->values(disagreeing);
      const Difference d = compare(values, reference.values, reference.origin);
      r.error = std::max(d.parameters, d.state);
      compared = "loss " + format(r.loss_error) + ", parameters " + format(d.parameters) + ", state " + format(d.state);
      failures += training_failures(d, r.bound, disagreeing);
      // A loss after the restore depends on the parameters: held to the same bound.
      if (!(r.loss_error <= r.bound)) failures += "a loss after the restore differs by " + format(r.loss_error) + "; ";
      failures += scalar_failures(*t->trainer, c);
      if (a == b) {
        const std::string where = first_difference(values, uninterrupted);
        r.bit_identical = where.empty() && losses == uninterrupted_losses ? 1 : 0;
        if (r.bit_identical == 0)
          failures += "not bit for bit uninterrupted training (" + (where.empty() ? "a loss" : where) + " differs); ";
      }
    }
  }

  world.barrier();
  if (world.rank() == 0) {
    std::error_code ec;
    fs::remove_all(root, ec);
  }
  r.passed = agreed_verdict(world, failures, compared, r.message);
  r.error = max_over_ranks(world, r.error);
  r.loss_error = max_over_ranks(world, r.loss_error);
  r.saved_bytes = max_over_ranks(world, r.saved_bytes);
  r.bit_identical = static_cast<int>(max_over_ranks(world, r.bit_identical));
  r.restored_exactly = static_cast<int>(max_over_ranks(world, r.restored_exactly));
  return r;
}

// The family `parity check` runs (family.hpp).
const RegisteredFamily kRestoreFamily{FamilyDefinition<RestoreCase, RestoreResult>{
    .table = &kRestoreCasesTable, .label = "training-state restore", .order = 75,
    .grid = restore_grid, .run = run_restore_case,
    .columns =
        [](record::Table& t, const CaseContext& context, const RestoreCase& c, const RestoreResult& r) {
          t.put({{"before", c.before.name()}, {"after", c.after.name()}});
          add_run_columns(t, context.world, c.precision, c.steps_before + c.steps_after);
          t.put({{"saved_at", c.steps_before}, {"error", r.error}, {"bound", r.bound}, {"loss_error", r.loss_error},
                 {"restored_exactly", r.restored_exactly}, {"bit_identical", r.bit_identical},
                 {"saved_bytes", r.saved_bytes}});
        }}};

}  // namespace parity::cases
