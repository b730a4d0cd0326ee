// The fast GPT step (gpt.hpp): buffers made once, then forward, backward and AdamW as a fixed
// sequence of launches on the process's stream, one wait at the end.
#include <cmath>
#include <cstring>
#include <unordered_map>

#include "reference/fast/device_common.cuh"
#include "reference/fast/gpt.hpp"

namespace parity::fast {
namespace {

using detail::check;
using std::int64_t;

// One cudaMalloc, cut into aligned pieces in order.
class Arena {
 public:
  explicit Arena(std::size_t bytes) : size_(bytes) {
    std::size_t free_bytes = 0, total = 0;
    check(cudaMemGetInfo(&free_bytes, &total), "cudaMemGetInfo");
    if (bytes > free_bytes)
      raise_error("the fast GPT needs " + std::to_string(bytes >> 20) + " MiB of device memory but " +
                  std::to_string(free_bytes >> 20) + " MiB are free");
    check(cudaMalloc(&base_, bytes), "cudaMalloc(fast GPT arena)");
  }
  ~Arena() { cudaFree(base_); }
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;
  template <typename T> T* take(int64_t count) {
    const std::size_t bytes = (static_cast<std::size_t>(count) * sizeof(T) + 255) / 256 * 256;
    if (used_ + bytes > size_) raise_error("fast GPT: the arena is smaller than its plan (a bug in device_bytes)");
    T* p = reinterpret_cast<T*>(static_cast<char*>(base_) + used_);
    used_ += bytes;
    return p;
  }

 private:
  void* base_ = nullptr;
  std::size_t size_ = 0, used_ = 0;
};

// A 16-bit buffer, addressed by element.
struct Half {
  void* p = nullptr;
  void* at(int64_t element) const { return static_cast<char*>(p) + 2 * element; }
};

}  // namespace

struct Gpt::State {
  GptShape shape;
  Storage storage;
  AdamWHyper hyper;
  std::vector<ParameterSlot> slots;
  std::unordered_map<std::string, std::size_t> slot_of;
  int64_t P = 0, M = 0, h = 0, V = 0, Vp = 0;
  Arena arena;

  // Parameters and optimizer state (flat, parameter_layout's offsets).
  Half params, grads;
  float *masters, *m, *v, *dwte32;
  // A parameter's 16-bit values and gradient, found by name once, when the model is made.
  struct Weight {
    void* value;
    void* grad;
  };
  Weight wte, wpe, lnf_gamma, lnf_beta;
  // Per layer, its parameters and what backward reads.
  struct Layer {
    Weight ln1_gamma, ln1_beta, qkv_w, qkv_b, proj_w, proj_b, ln2_gamma, ln2_beta, fc_w, fc_b, fc2_w, fc2_b;
    float *resid, *mid, *mean1, *rstd1, *mean2, *rstd2, *lse;
    Half ln1, qkv, atty, ln2, fc_pre, fc_out;
  };
  std::vector<Layer> layers;
  float *resid_final, *mean_f, *rstd_f;
  Half lnf, logits;
  // Scratch.
  Half proj_out, dres16, dwide, dln, datty, dqkv;
  float *dresid, *delta, *partial, *row_loss, *loss;
  int* nonfinite;
  std::int32_t *tokens, *targets, *order, *starts, *unique;
  // Pinned host memory: the step's inputs on their way in, the loss and the overflow flag out.
  std::int32_t* host_inputs = nullptr;  // tokens, targets, order, starts, unique
  float* host_result = nullptr;         // loss, flag (as float bits)

  int updates = 0;
  float scale = 1.f;
  float step_scale = 1.f;  // what the last step's gradients are divided by: the loss scale times the replicas

  // Data parallelism (set_gradient_sync): each bucket handed to the sync as backward finishes it;
  // with an overlapping sync, on a stream of its own (highest priority) that waits for the
  // bucket's event, and the step's stream waits for `synced` before the optimizer.
  GradientSync* sync = nullptr;
  std::vector<GradientBucket> buckets;
  cudaStream_t side = nullptr;
  std::vector<cudaEvent_t> ready;  // one per bucket and one for the token table
  cudaEvent_t synced = nullptr;
  std::size_t next_ready = 0;
  int replicas() const { return sync ? sync->replicas() : 1; }
  int good_steps = 0;

  // Profiling: an event where the kind of work changes; interval i belongs to part_of[i].
  enum Part { kProducts, kAttention, kLayerNorm, kLoss, kEmbedding, kOptimizer, kSync };
  bool profiling = false;
  std::vector<cudaEvent_t> events;
  std::vector<Part> part_of;
  std::size_t marks = 0;
  StepParts parts;
  void mark(Part part) {
    if (!profiling || (marks > 0 && part_of[marks - 1] == part)) return;
    if (marks == events.size()) raise_error("fast GPT: more profiling marks than events");
    check(cudaEventRecord(events[marks], detail::stream()), "cudaEventRecord");
    part_of[marks++] = part;
  }
  void finish_profile() {  // after the step's wait
    if (!profiling) return;
    check(cudaEventRecord(events[marks], detail::stream()), "cudaEventRecord");
    check(cudaEventSynchronize(events[marks]), "cudaEventSynchronize");
    parts = {};
    for (std::size_t i = 0; i < marks; ++i) {
      float ms = 0;
      check(cudaEventElapsedTime(&ms, events[i], events[i + 1]), "cudaEventElapsedTime");
      double* const to[] = {&parts.products_ms, &parts.attention_ms, &parts.layernorm_ms, &parts.loss_ms,
                            &parts.embedding_ms, &parts.optimizer_ms, &parts.sync_ms};
      *to[part_of[i]] += ms;
    }
    marks = 0;
  }

  State(const GptShape& s, Storage st, const AdamWHyper& hp)
      : shape(s), storage(st), hyper(hp), slots(parameter_layout(s)), P(parameter_elements(s)), M(s.rows()),
        h(s.hidden), V(s.vocabulary), Vp(s.padded_vocabulary()), arena(device_bytes(s, st)) {
    for (std::size_t i = 0; i < slots.size(); ++i) slot_of[slots[i].name] = i;
    params.p = arena.take<std::uint16_t>(P);
    grads.p = arena.take<std::uint16_t>(P);
    masters = arena.take<float>(P);
    m = arena.take<float>(P);
    v = arena.take<float>(P);
    dwte32 = arena.take<float>(Vp * h);
    const int64_t head_rows = s.batch * s.heads * s.sequence;
    wte = weight("embedding.wte");
    wpe = weight("embedding.wpe");
    lnf_gamma = weight("ln_f.gamma");
    lnf_beta = weight("ln_f.beta");
    for (int l = 0; l < s.layers; ++l) {
      Layer y;
      const std::string b = "blocks." + std::to_string(l);
      y.ln1_gamma = weight(b + ".ln1.gamma");
      y.ln1_beta = weight(b + ".ln1.beta");
      y.qkv_w = weight(b + ".attn.qkv.weight");
      y.qkv_b = weight(b + ".attn.qkv.bias");
      y.proj_w = weight(b + ".attn.proj.weight");
      y.proj_b = weight(b + ".attn.proj.bias");
      y.ln2_gamma = weight(b + ".ln2.gamma");
      y.ln2_beta = weight(b + ".ln2.beta");
      y.fc_w = weight(b + ".mlp.fc.weight");
      y.fc_b = weight(b + ".mlp.fc.bias");
      y.fc2_w = weight(b + ".mlp.proj.weight");
      y.fc2_b = weight(b + ".mlp.proj.bias");
      y.resid = arena.take<float>(M * h);
      y.mid = arena.take<float>(M * h);
      y.mean1 = arena.take<float>(M);
      y.rstd1 = arena.take<float>(M);
      y.mean2 = arena.take<float>(M);
      y.rstd2 = arena.take<float>(M);
      y.lse = arena.take<float>(head_rows);
      y.ln1.p = arena.take<std::uint16_t>(M * h);
      y.qkv.p = arena.take<std::uint16_t>(M * 3 * h);
      y.atty.p = arena.take<std::uint16_t>(M * h);
      y.ln2.p = arena.take<std::uint16_t>(M * h);
      y.fc_pre.p = arena.take<std::uint16_t>(M * 4 * h);
      y.fc_out.p = arena.take<std::uint16_t>(M * 4 * h);
      layers.push_back(y);
    }
    resid_final = arena.take<float>(M * h);
    mean_f = arena.take<float>(M);
    rstd_f = arena.take<float>(M);
    lnf.p = arena.take<std::uint16_t>(M * h);
    logits.p = arena.take<std::uint16_t>(M * Vp);
    proj_out.p = arena.take<std::uint16_t>(M * h);
    dres16.p = arena.take<std::uint16_t>(M * h);
    dwide.p = arena.take<std::uint16_t>(M * 4 * h);
    dln.p = arena.take<std::uint16_t>(M * h);
    datty.p = arena.take<std::uint16_t>(M * h);
    dqkv.p = arena.take<std::uint16_t>(M * 3 * h);
    dresid = arena.take<float>(M * h);
    delta = arena.take<float>(head_rows);
    partial = arena.take<float>(layernorm_partial_rows(M) * 2 * h);
    row_loss = arena.take<float>(M);
    loss = arena.take<float>(2);
    nonfinite = reinterpret_cast<int*>(loss + 1);
    tokens = arena.take<std::int32_t>(M);
    targets = arena.take<std::int32_t>(M);
    order = arena.take<std::int32_t>(M);
    starts = arena.take<std::int32_t>(M + 1);
    unique = arena.take<std::int32_t>(M);
    host_inputs = static_cast<std::int32_t*>(cuda::allocate_pinned(sizeof(std::int32_t) * static_cast<std::size_t>(5 * M + 1)));
    host_result = static_cast<float*>(cuda::allocate_pinned(2 * sizeof(float)));
    if (storage == Storage::float16) scale = 65536.f;
  }
  ~State() {
    for (cudaEvent_t e : events) cudaEventDestroy(e);
    for (cudaEvent_t e : ready) cudaEventDestroy(e);
    if (synced) cudaEventDestroy(synced);
    if (side) cudaStreamDestroy(side);
    cuda::release_pinned(host_inputs);
    cuda::release_pinned(host_result);
  }

  const ParameterSlot& slot(const std::string& name) const {
    auto it = slot_of.find(name);
    if (it == slot_of.end()) raise_error("fast GPT: no parameter '" + name + "'");
    return slots[it->second];
  }
  Weight weight(const std::string& name) const {
    const ParameterSlot& s = slot(name);
    return {params.at(s.offset), grads.at(s.offset)};
  }

  void initialize(std::uint64_t seed) {
    const double proj_std = 0.02 / std::sqrt(2.0 * shape.layers);
    check(cudaMemsetAsync(params.p, 0, static_cast<std::size_t>(P) * 2, detail::stream()), "cudaMemsetAsync");
    check(cudaMemsetAsync(masters, 0, static_cast<std::size_t>(P) * 4, detail::stream()), "cudaMemsetAsync");
    for (std::size_t i = 0; i < slots.size(); ++i) {
      const ParameterSlot& s = slots[i];
      const std::string& n = s.name;
      const auto ends_with = [&](const char* suffix) {
        const std::size_t k = std::strlen(suffix);
        return n.size() >= k && n.compare(n.size() - k, k, suffix) == 0;
      };
      // The token table's padding rows stay 0.
      const int64_t count = n == "embedding.wte" ? V * h : s.count;
      if (ends_with(".gamma")) {
        fill(storage, params.at(s.offset), masters + s.offset, count, 1.f);
      } else if (ends_with(".bias") || ends_with(".beta")) {
        fill(storage, params.at(s.offset), masters + s.offset, count, 0.f);
      } else {
        const bool residual = ends_with("attn.proj.weight") || ends_with("mlp.proj.weight");
        normal_init(storage, params.at(s.offset), masters + s.offset, count, static_cast<float>(residual ? proj_std : 0.02),
                    seed * 1000003u + i);
      }
    }
    check(cudaMemsetAsync(m, 0, static_cast<std::size_t>(P) * 4, detail::stream()), "cudaMemsetAsync");
    check(cudaMemsetAsync(v, 0, static_cast<std::size_t>(P) * 4, detail::stream()), "cudaMemsetAsync");
    check(cudaMemsetAsync(grads.p, 0, static_cast<std::size_t>(P) * 2, detail::stream()), "cudaMemsetAsync");
    check(cudaMemsetAsync(dwte32, 0, static_cast<std::size_t>(Vp * h) * 4, detail::stream()), "cudaMemsetAsync");
    cuda::synchronize();
  }

  // Host tokens into pinned memory and onto the device, with the rows grouped by token.
  void upload(const std::int32_t* host_tokens, const std::int32_t* host_targets) {
    for (int64_t i = 0; i < M; ++i)
      if (host_tokens[i] < 0 || host_tokens[i] >= V || host_targets[i] < 0 || host_targets[i] >= V)
        raise_error("fast GPT: token or target " + std::to_string(host_tokens[i] < 0 || host_tokens[i] >= V ? host_tokens[i] : host_targets[i]) +
                    " at row " + std::to_string(i) + " is outside the vocabulary [0, " + std::to_string(V) + ")");
    const TokenGroups g = group_rows_by_token(host_tokens, M);
    std::int32_t* p = host_inputs;
    std::memcpy(p, host_tokens, sizeof(std::int32_t) * static_cast<std::size_t>(M));
    std::memcpy(p + M, host_targets, sizeof(std::int32_t) * static_cast<std::size_t>(M));
    std::memcpy(p + 2 * M, g.order.data(), sizeof(std::int32_t) * g.order.size());
    std::memcpy(p + 3 * M, g.starts.data(), sizeof(std::int32_t) * g.starts.size());
    std::memcpy(p + 4 * M + 1, g.unique.data(), sizeof(std::int32_t) * g.unique.size());
    const auto to_device = [&](std::int32_t* dst, const std::int32_t* src, std::size_t count) {
      check(cudaMemcpyAsync(dst, src, count * sizeof(std::int32_t), cudaMemcpyHostToDevice, detail::stream()),
            "cudaMemcpyAsync(tokens)");
    };
    to_device(tokens, p, static_cast<std::size_t>(M));
    to_device(targets, p + M, static_cast<std::size_t>(M));
    to_device(order, p + 2 * M, g.order.size());
    to_device(starts, p + 3 * M, g.starts.size());
    to_device(unique, p + 4 * M + 1, g.unique.size());
    distinct = static_cast<int64_t>(g.unique.size());
  }
  int64_t distinct = 0;

  // Bucket `index` of `buckets` (or, with index == buckets.size(), the token table's float32
  // gradient) is finished by the work queued so far: hand it to the sync.
  void gradients_ready(std::size_t index) {
    if (!sync) return;
    const bool table = index == buckets.size();
    void* data = table ? static_cast<void*>(dwte32) : grads.at(buckets[index].offset);
    const int64_t count = table ? Vp * h : buckets[index].count;
    if (!sync->overlaps()) {
      mark(kSync);
      sync->sum(data, count, table, detail::stream());
      return;
    }
    cudaEvent_t e = ready[next_ready++];
    check(cudaEventRecord(e, detail::stream()), "cudaEventRecord");
    check(cudaStreamWaitEvent(side, e, 0), "cudaStreamWaitEvent");
    sync->sum(data, count, table, side);
  }
  // The step's stream waits for every sum queued on the side stream (the time it waits is the
  // exposed part of the gradients' sum, kSync when profiling).
  void wait_for_sums() {
    if (!sync || !sync->overlaps()) return;
    mark(kSync);
    check(cudaEventRecord(synced, side), "cudaEventRecord");
    check(cudaStreamWaitEvent(detail::stream(), synced, 0), "cudaStreamWaitEvent");
    next_ready = 0;
  }

  void forward() {
    const Storage s = storage;
    const int B = static_cast<int>(shape.batch), T = static_cast<int>(shape.sequence), C = static_cast<int>(h);
    mark(kEmbedding);
    embedding_forward(s, tokens, wte.value, wpe.value, layers[0].resid, B, T, h);
    mark(kLayerNorm);
    residual_layernorm_forward(s, layers[0].resid, nullptr, nullptr, layers[0].ln1_gamma.value,
                               layers[0].ln1_beta.value, layers[0].ln1.p, layers[0].mean1, layers[0].rstd1, M, h);
    for (int l = 0; l < shape.layers; ++l) {
      Layer& y = layers[static_cast<std::size_t>(l)];
      mark(kProducts);
      linear_forward(s, y.ln1.p, y.qkv_w.value, y.qkv_b.value, y.qkv.p, nullptr, M, h,
                     3 * h, Epilogue::bias);
      mark(kAttention);
      attention_forward(s, y.qkv.p, y.atty.p, y.lse, B, T, C, shape.heads);
      mark(kProducts);
      linear_forward(s, y.atty.p, y.proj_w.value, y.proj_b.value, proj_out.p, nullptr, M,
                     h, h, Epilogue::bias);
      mark(kLayerNorm);
      residual_layernorm_forward(s, y.resid, proj_out.p, y.mid, y.ln2_gamma.value, y.ln2_beta.value,
                                 y.ln2.p, y.mean2, y.rstd2, M, h);
      mark(kProducts);
      linear_forward(s, y.ln2.p, y.fc_w.value, y.fc_b.value, y.fc_out.p, y.fc_pre.p, M, h,
                     4 * h, Epilogue::bias_gelu);
      linear_forward(s, y.fc_out.p, y.fc2_w.value, y.fc2_b.value, proj_out.p, nullptr,
                     M, 4 * h, h, Epilogue::bias);
      mark(kLayerNorm);
      const bool last = l + 1 == shape.layers;
      Layer* n = last ? nullptr : &layers[static_cast<std::size_t>(l) + 1];
      residual_layernorm_forward(s, y.mid, proj_out.p, last ? resid_final : n->resid,
                                 last ? lnf_gamma.value : n->ln1_gamma.value, last ? lnf_beta.value : n->ln1_beta.value,
                                 last ? lnf.p : n->ln1.p, last ? mean_f : n->mean1,
                                 last ? rstd_f : n->rstd1, M, h);
    }
    mark(kProducts);
    head_forward(s, lnf.p, wte.value, logits.p, M, h, Vp);
    mark(kLoss);
    cross_entropy(s, logits.p, targets, row_loss, M, Vp, V, static_cast<float>(M), scale);
    sum(row_loss, loss, M);
  }

  void backward() {
    const Storage s = storage;
    const int B = static_cast<int>(shape.batch), T = static_cast<int>(shape.sequence), C = static_cast<int>(h);
    // The head: logits now hold their gradient.
    mark(kProducts);
    head_backward_input(s, logits.p, wte.value, dln.p, M, h, Vp);
    head_backward_table(s, logits.p, lnf.p, dwte32, M, h, Vp);
    mark(kLayerNorm);
    check(cudaMemsetAsync(dresid, 0, static_cast<std::size_t>(M * h) * 4, detail::stream()), "cudaMemsetAsync");
    layernorm_backward(s, resid_final, mean_f, rstd_f, lnf_gamma.value, dln.p, dresid, dres16.p, partial, M, h);
    layernorm_param_grads(s, partial, lnf_gamma.grad, lnf_beta.grad, M, h);
    gradients_ready(0);  // ln_f
    for (int l = shape.layers - 1; l >= 0; --l) {
      Layer& y = layers[static_cast<std::size_t>(l)];
      // Feed-forward: dres16 is the gradient of the block's output.
      mark(kProducts);
      linear_backward_weight(s, y.fc_out.p, dres16.p, y.fc2_w.grad, y.fc2_b.grad, M,
                             4 * h, h, false);
      linear_backward_input(s, dres16.p, y.fc2_w.value, dwide.p, y.fc_pre.p, M, 4 * h, h,
                            Epilogue::dgelu);
      linear_backward_weight(s, y.ln2.p, dwide.p, y.fc_w.grad, y.fc_b.grad, M, h, 4 * h,
                             false);
      linear_backward_input(s, dwide.p, y.fc_w.value, dln.p, nullptr, M, h, 4 * h, Epilogue::none);
      mark(kLayerNorm);
      layernorm_backward(s, y.mid, y.mean2, y.rstd2, y.ln2_gamma.value, dln.p, dresid, dres16.p, partial, M, h);
      layernorm_param_grads(s, partial, y.ln2_gamma.grad, y.ln2_beta.grad, M, h);
      // Attention.
      mark(kProducts);
      linear_backward_weight(s, y.atty.p, dres16.p, y.proj_w.grad, y.proj_b.grad, M, h,
                             h, false);
      linear_backward_input(s, dres16.p, y.proj_w.value, datty.p, nullptr, M, h, h, Epilogue::none);
      mark(kAttention);
      attention_backward(s, datty.p, y.qkv.p, y.atty.p, y.lse, delta, dqkv.p, B, T, C, shape.heads);
      mark(kProducts);
      linear_backward_weight(s, y.ln1.p, dqkv.p, y.qkv_w.grad, y.qkv_b.grad, M, h,
                             3 * h, false);
      linear_backward_input(s, dqkv.p, y.qkv_w.value, dln.p, nullptr, M, h, 3 * h, Epilogue::none);
      mark(kLayerNorm);
      layernorm_backward(s, y.resid, y.mean1, y.rstd1, y.ln1_gamma.value, dln.p, dresid, dres16.p, partial, M, h);
      layernorm_param_grads(s, partial, y.ln1_gamma.grad, y.ln1_beta.grad, M, h);
      gradients_ready(static_cast<std::size_t>(shape.layers - l));  // blocks.l
    }
    mark(kEmbedding);
    embedding_backward(s, dresid, order, starts, unique, distinct, wpe.grad, dwte32, B, T, h);
    gradients_ready(buckets.size() - 1);  // the position table
    gradients_ready(buckets.size());      // the token table
    wait_for_sums();
  }
};

Gpt::Gpt(const GptShape& shape, Storage storage, const AdamWHyper& hyper, std::uint64_t seed) {
  const std::string reason = unsupported_reason(shape);
  if (!reason.empty()) raise_error("the fast GPT cannot train this shape: " + reason);
  if (cuda::selected_device() < 0) raise_error("the fast GPT needs a selected CUDA device (--device cuda)");
  state_ = std::make_unique<State>(shape, storage, hyper);
  state_->initialize(seed);
}

Gpt::~Gpt() = default;

const GptShape& Gpt::shape() const { return state_->shape; }
Storage Gpt::storage() const { return state_->storage; }
int Gpt::updates() const { return state_->updates; }
float Gpt::loss_scale() const { return state_->scale; }
StepParts Gpt::last_parts() const { return state_->parts; }

void Gpt::set_profiling(bool on) {
  State& st = *state_;
  if (on && st.events.empty()) {
    // Marks per step: about 12 per layer and a dozen more; made once, outside any step.
    const std::size_t n = 16 * static_cast<std::size_t>(st.shape.layers) + 64;
    st.events.resize(n);
    st.part_of.resize(n);
    for (cudaEvent_t& e : st.events) check(cudaEventCreate(&e), "cudaEventCreate");
  }
  st.profiling = on;
}

void Gpt::set_gradient_sync(GradientSync* sync) {
  State& st = *state_;
  st.sync = sync;
  if (!sync) return;
  if (sync->replicas() < 1) raise_error("fast GPT: a gradient sync over " + std::to_string(sync->replicas()) + " replicas");
  st.buckets = gradient_buckets(st.shape);
  if (sync->overlaps() && !st.side) {
    int least = 0, greatest = 0;
    check(cudaDeviceGetStreamPriorityRange(&least, &greatest), "cudaDeviceGetStreamPriorityRange");
    check(cudaStreamCreateWithPriority(&st.side, cudaStreamNonBlocking, greatest), "cudaStreamCreateWithPriority");
    st.ready.resize(st.buckets.size() + 1);
    for (cudaEvent_t& e : st.ready) check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreateWithFlags");
    check(cudaEventCreateWithFlags(&st.synced, cudaEventDisableTiming), "cudaEventCreateWithFlags");
  }
}

void Gpt::set_parameter(const std::string& name, const std::vector<float>& values) {
  State& st = *state_;
  const ParameterSlot& slot = st.slot(name);
  int64_t expected = 1;
  for (int64_t d : slot.shape) expected *= d;
  if (static_cast<int64_t>(values.size()) != expected)
    raise_error("fast GPT: " + name + " takes " + std::to_string(expected) + " values, not " + std::to_string(values.size()));
  check(cudaMemcpyAsync(st.masters + slot.offset, values.data(), values.size() * sizeof(float), cudaMemcpyHostToDevice,
                        detail::stream()),
        "cudaMemcpyAsync(parameter)");
  to_storage(st.storage, st.masters + slot.offset, st.params.at(slot.offset), expected);
  cuda::synchronize();
}

namespace {
std::vector<float> read_floats(const float* device, int64_t count) {
  std::vector<float> out(static_cast<std::size_t>(count));
  cuda::copy(out.data(), device, out.size() * sizeof(float));
  return out;
}
}  // namespace

std::vector<float> Gpt::parameter(const std::string& name) const {
  const ParameterSlot& slot = state_->slot(name);
  int64_t count = 1;
  for (int64_t d : slot.shape) count *= d;
  return read_floats(state_->masters + slot.offset, count);
}

std::vector<float> Gpt::gradient(const std::string& name) const {
  State& st = *state_;
  const ParameterSlot& slot = st.slot(name);
  int64_t count = 1;
  for (int64_t d : slot.shape) count *= d;
  std::vector<float> out;
  if (name == "embedding.wte") {
    out = read_floats(st.dwte32, count);
  } else {
    // Widened in a buffer of its own (outside any step: an inspection, not part of training).
    float* wide = static_cast<float*>(cuda::allocate(static_cast<std::size_t>(count) * sizeof(float)));
    from_storage(st.storage, st.grads.at(slot.offset), wide, count);
    out = read_floats(wide, count);
    cuda::release(wide);
  }
  for (float& g : out) g /= st.step_scale;  // float16's loss scale taken out
  return out;
}

StepResult Gpt::step(const std::int32_t* tokens, const std::int32_t* targets, bool update) {
  State& st = *state_;
  st.upload(tokens, targets);
  st.marks = 0;
  st.step_scale = st.scale * static_cast<float>(st.replicas());
  st.forward();
  st.backward();
  const bool half = st.storage == Storage::float16;
  st.mark(State::kOptimizer);
  if (half) {
    check(cudaMemsetAsync(st.nonfinite, 0, sizeof(int), detail::stream()), "cudaMemsetAsync");
    find_nonfinite(st.storage, st.grads.p, st.P, st.dwte32, st.Vp * st.h, st.nonfinite);
  }
  if (update)
    adamw(st.storage, st.params.p, st.masters, st.m, st.v, st.grads.p, st.dwte32, st.P, st.Vp * st.h, st.hyper,
          st.updates + 1, st.step_scale, half ? st.nonfinite : nullptr);
  // The step's one wait: the loss, and whether a gradient overflowed.
  check(cudaMemcpyAsync(st.host_result, st.loss, 2 * sizeof(float), cudaMemcpyDeviceToHost, detail::stream()),
        "cudaMemcpyAsync(loss)");
  check(cudaStreamSynchronize(detail::stream()), "cudaStreamSynchronize");
  st.finish_profile();
  int overflow = 0;
  std::memcpy(&overflow, st.host_result + 1, sizeof(int));
  StepResult result{static_cast<double>(st.host_result[0]), half && overflow != 0};
  if (update && !result.skipped) ++st.updates;
  if (half) {
    if (result.skipped) {
      st.scale = std::max(1.f, st.scale / 2);
      st.good_steps = 0;
    } else if (++st.good_steps >= 1000) {
      st.scale = std::min(16777216.f, st.scale * 2);
      st.good_steps = 0;
    }
  }
  return result;
}

}  // namespace parity::fast
