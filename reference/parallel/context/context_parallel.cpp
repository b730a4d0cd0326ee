// Context parallelism (see context_parallel.hpp).
#include "reference/parallel/context/context_parallel.hpp"

#include <chrono>
#include <cstring>
#include <utility>

#include "reference/core/error.hpp"
#include "reference/ops/ops.hpp"

namespace parity::parallel {

namespace {

double bytes_of(const Tensor& t) { return static_cast<double>(t.bytes()); }

// Copies rows of [B, rows_from, inner] `from` into [B, rows_to, inner] `to`: row from_rows[i] of
// every b to row to_rows[i].
void copy_rows(const Tensor& from, Tensor& to, const std::vector<std::int64_t>& from_rows,
               const std::vector<std::int64_t>& to_rows) {
  const std::int64_t B = from.dim(0), rf = from.dim(1), rt = to.dim(1);
  const std::size_t row = from.bytes() / static_cast<std::size_t>(B * rf);
  const auto* src = static_cast<const char*>(from.raw());
  auto* dst = static_cast<char*>(to.raw());
  for (std::int64_t b = 0; b < B; ++b)
    for (std::size_t i = 0; i < from_rows.size(); ++i)
      std::memcpy(dst + static_cast<std::size_t>(b * rt + to_rows[i]) * row,
                  src + static_cast<std::size_t>(b * rf + from_rows[i]) * row, row);
}

std::vector<std::int64_t> iota(std::int64_t first, std::int64_t count) {
  std::vector<std::int64_t> out;
  for (std::int64_t i = 0; i < count; ++i) out.push_back(first + i);
  return out;
}

using Clock = std::chrono::steady_clock;
double since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// Adds the seconds of its scope to `into`.
class ScopeTimer {
 public:
  explicit ScopeTimer(double& into) : into_(into), start_(Clock::now()) {}
  ~ScopeTimer() { into_ += since(start_); }
  ScopeTimer(const ScopeTimer&) = delete;
  ScopeTimer& operator=(const ScopeTimer&) = delete;

 private:
  double& into_;
  Clock::time_point start_;
};

void require_host(const char* what, const Tensor& t) {
  if (t.space() != MemorySpace::host)
    throw UsageError(std::string("context parallelism: ") + what + " " + t.describe() + " is on a device; it runs on the CPU only");
}

}  // namespace

ContextParallel::ContextParallel(Communicator& group, ContextParallelConfig config) : group_(group), config_(std::move(config)) {
  if (config_.variant != "ring" && config_.variant != "allgather" && config_.variant != "ulysses")
    throw UsageError("context parallelism: unknown variant '" + config_.variant + "' (ring, allgather, ulysses)");
  if (!config_.fault.empty() && config_.fault != "no_reorder" && config_.fault != "missing_rescale" &&
      config_.fault != "wrong_neighbour")
    throw UsageError("context parallelism: unknown fault '" + config_.fault + "'");
}

std::vector<std::int64_t> ContextParallel::positions(std::int64_t sequence, int r) const {
  const std::int64_t chunks = 2LL * size();
  if (sequence <= 0 || sequence % chunks != 0)
    throw UsageError("context parallelism: a sequence of " + std::to_string(sequence) + " tokens does not split into " +
                     std::to_string(chunks) + " equal chunks (2 cp)");
  const std::int64_t c = sequence / chunks;
  std::vector<std::int64_t> out = iota(r * c, c);
  const std::vector<std::int64_t> second = iota((chunks - 1 - r) * c, c);
  out.insert(out.end(), second.begin(), second.end());
  return out;
}

Tensor ContextParallel::split(const Tensor& whole) const {
  require_host("split", whole);
  const std::int64_t sequence = whole.dim(1), local = sequence / size();
  std::vector<std::int64_t> rows = positions(sequence);
  if (config_.fault == "no_reorder") rows = iota(rank() * local, local);  // contiguous rows, labelled balanced
  Shape shape = whole.shape();
  shape[1] = local;
  Tensor out = Tensor::empty(whole.name() + ".cp", shape, whole.dtype(), MemoryCategory::activations);
  copy_rows(whole, out, rows, iota(0, local));
  return out;
}

Tensor ContextParallel::gather(const Tensor& local, std::int64_t sequence) {
  require_host("gather", local);
  const int cp = size();
  Shape stacked = local.shape();
  stacked.insert(stacked.begin(), cp);
  Tensor all = Tensor::empty(local.name() + ".all", stacked, local.dtype(), MemoryCategory::workspace);
  group_.all_gather(local.view(), all.view());
  Shape shape = local.shape();
  shape[1] = sequence;
  Tensor whole = Tensor::empty(local.name() + ".whole", shape, local.dtype(), MemoryCategory::activations);
  for (int r = 0; r < cp; ++r) {
    const Tensor part = all.segment("part", r * local.numel(), local.shape());
    copy_rows(part, whole, iota(0, local.dim(1)), positions(sequence, r));
  }
  return whole;
}

template <typename F> void ContextParallel::waited(F&& f) {
  const ScopeTimer timer(communication_seconds_);
  f();
}

int ContextParallel::next() const { return (rank() + (config_.fault == "wrong_neighbour" ? 2 : 1)) % size(); }
int ContextParallel::previous() const {
  return (rank() - (config_.fault == "wrong_neighbour" ? 2 : 1) + 2 * size()) % size();
}

std::vector<RequestPtr> ContextParallel::pass_on(const Tensor& a, const Tensor& b, Tensor& into_a, Tensor& into_b, int tag,
                                                 double& bytes) {
  std::vector<RequestPtr> requests;
  requests.push_back(group_.irecv(into_a.view(), previous(), tag));
  requests.push_back(group_.irecv(into_b.view(), previous(), tag + 1));
  requests.push_back(group_.isend(a.view(), next(), tag));
  requests.push_back(group_.isend(b.view(), next(), tag + 1));
  bytes += bytes_of(a) + bytes_of(b);
  return requests;
}

void ContextParallel::gather_keys(const Tensor& k, const Tensor& v, std::int64_t sequence, Tensor& k_all, Tensor& v_all,
                                  std::vector<std::int64_t>& positions_all, double& bytes) {
  const int cp = size();
  const std::int64_t B = k.dim(0), local = k.dim(1), C = k.dim(2);
  positions_all.clear();
  for (int r = 0; r < cp; ++r) {
    const std::vector<std::int64_t> p = positions(sequence, r);
    positions_all.insert(positions_all.end(), p.begin(), p.end());
  }
  for (auto [mine, all] : {std::pair{&k, &k_all}, std::pair{&v, &v_all}}) {
    Tensor stacked = Tensor::empty("kv.all", {cp, B, local, C}, mine->dtype(), MemoryCategory::workspace);
    waited([&] { group_.all_gather(mine->view(), stacked.view()); });
    bytes += (cp - 1) * bytes_of(*mine);
    *all = Tensor::empty("kv.gathered", {B, cp * local, C}, mine->dtype(), MemoryCategory::activations);
    for (int r = 0; r < cp; ++r)
      copy_rows(stacked.segment("part", r * mine->numel(), mine->shape()), *all, iota(0, local), iota(r * local, local));
  }
}

// Block j of `send` ([cp][B][rows][width]) holds what goes to rank j; block i of the result what
// came from rank i. x is [B, rows, cp * width] (or, with heads_dim, [B, cp * width, rows]) and
// rank j gets columns [j width, (j + 1) width).
namespace {
template <typename Pack, typename Unpack>
Tensor all_to_all_blocks(Communicator& group, const Tensor& x, std::int64_t block, const Shape& result_shape,
                         const Pack& pack, const Unpack& unpack, double& bytes, double& seconds) {
  const int cp = group.size();
  Tensor send = Tensor::empty("a2a.send", {cp * block}, x.dtype(), MemoryCategory::communication);
  Tensor recv = Tensor::empty("a2a.recv", {cp * block}, x.dtype(), MemoryCategory::communication);
  for (int j = 0; j < cp; ++j) pack(j, send.segment("block", j * block, {block}));
  {
    const ScopeTimer timer(seconds);
    group.all_to_all(send.view(), recv.view());
  }
  bytes += static_cast<double>((cp - 1) * block) * static_cast<double>(size_of(x.dtype()));
  Tensor out = Tensor::empty(x.name() + ".a2a", result_shape, x.dtype(), MemoryCategory::activations);
  for (int i = 0; i < cp; ++i) unpack(i, recv.segment("block", i * block, {block}), out);
  return out;
}

// Copies, for each of B batches, `rows` rows of `w` elements: from `from` (B x from_rows rows,
// starting at row from_row0 and column from_col) to `to` (B x to_rows rows, from to_row0 and
// to_col). Either may be a packed [B][rows][w] block; widths are numel / (B rows).
void columns(std::int64_t B, const Tensor& from, std::int64_t from_row0, std::int64_t from_rows, std::int64_t from_col,
             Tensor& to, std::int64_t to_row0, std::int64_t to_rows, std::int64_t to_col, std::int64_t rows, std::int64_t w) {
  const std::int64_t from_width = from.numel() / (B * from_rows), to_width = to.numel() / (B * to_rows);
  const std::size_t e = size_of(from.dtype());
  const auto* src = static_cast<const char*>(from.raw());
  auto* dst = static_cast<char*>(to.raw());
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t r = 0; r < rows; ++r)
      std::memcpy(dst + static_cast<std::size_t>((b * to_rows + to_row0 + r) * to_width + to_col) * e,
                  src + static_cast<std::size_t>((b * from_rows + from_row0 + r) * from_width + from_col) * e,
                  static_cast<std::size_t>(w) * e);
}
}  // namespace

Tensor ContextParallel::to_heads(const Tensor& x, double& bytes) {
  const int cp = size();
  const std::int64_t B = x.dim(0), rows = x.dim(1), w = x.dim(2) / cp;
  return all_to_all_blocks(
      group_, x, B * rows * w, {B, cp * rows, w},
      [&](int j, Tensor block) { columns(B, x, 0, rows, j * w, block, 0, rows, 0, rows, w); },
      [&](int i, const Tensor& block, Tensor& out) { columns(B, block, 0, rows, 0, out, i * rows, cp * rows, 0, rows, w); },
      bytes, communication_seconds_);
}

Tensor ContextParallel::to_sequence(const Tensor& y, double& bytes) {
  const int cp = size();
  const std::int64_t B = y.dim(0), rows = y.dim(1) / cp, w = y.dim(2);
  return all_to_all_blocks(
      group_, y, B * rows * w, {B, rows, cp * w},
      [&](int j, Tensor block) { columns(B, y, j * rows, cp * rows, 0, block, 0, rows, 0, rows, w); },
      [&](int i, const Tensor& block, Tensor& out) { columns(B, block, 0, rows, 0, out, 0, rows, i * w, rows, w); }, bytes,
      communication_seconds_);
}

Tensor ContextParallel::lse_to_heads(const Tensor& lse, double& bytes) {
  // [B, H, Tl] -> [B, H / cp, cp Tl]: per b, rank j gets heads [j Hg, (j + 1) Hg) of every row.
  const int cp = size();
  const std::int64_t B = lse.dim(0), H = lse.dim(1), rows = lse.dim(2), g = H / cp;
  return all_to_all_blocks(
      group_, lse, B * g * rows, {B, g, cp * rows},
      [&](int j, Tensor block) { columns(B, lse, j * g, H, 0, block, 0, g, 0, g, rows); },
      [&](int i, const Tensor& block, Tensor& out) {
        for (std::int64_t b = 0; b < B; ++b)
          for (std::int64_t h = 0; h < g; ++h)
            for (std::int64_t t = 0; t < rows; ++t) out.set((b * g + h) * cp * rows + i * rows + t, block.at((b * g + h) * rows + t));
      },
      bytes, communication_seconds_);
}

Tensor ContextParallel::lse_to_sequence(const Tensor& lse, double& bytes) {
  // [B, H / cp, cp Tl] -> [B, H, Tl]
  const int cp = size();
  const std::int64_t B = lse.dim(0), g = lse.dim(1), rows = lse.dim(2) / cp;
  return all_to_all_blocks(
      group_, lse, B * g * rows, {B, g * cp, rows},
      [&](int j, Tensor block) {
        for (std::int64_t b = 0; b < B; ++b)
          for (std::int64_t h = 0; h < g; ++h)
            for (std::int64_t t = 0; t < rows; ++t) block.set((b * g + h) * rows + t, lse.at((b * g + h) * cp * rows + j * rows + t));
      },
      [&](int i, const Tensor& block, Tensor& out) { columns(B, block, 0, g, 0, out, i * g, g * cp, 0, g, rows); }, bytes,
      communication_seconds_);
}

void ContextParallel::attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, std::int64_t sequence,
                                        int heads, Tensor& out, Tensor& lse) {
  const ScopeTimer timer(attention_seconds_);
  for (const Tensor* t : {&q, &k, &v}) require_host("attention", *t);
  const std::vector<std::int64_t> mine = positions(sequence);
  if (q.rank() != 3 || q.dim(1) != static_cast<std::int64_t>(mine.size()))
    throw UsageError("context parallelism: queries " + q.describe() + " are not this rank's " + std::to_string(mine.size()) +
                     " rows of a sequence of " + std::to_string(sequence));
  if (config_.variant == "allgather") {
    Tensor k_all, v_all;
    std::vector<std::int64_t> positions_all;
    gather_keys(k, v, sequence, k_all, v_all, positions_all, forward_bytes_);
    ops::attention_block_forward(q, k_all, v_all, mine, positions_all, heads, out, lse);
    return;
  }
  if (config_.variant == "ulysses") {
    if (heads % size() != 0)
      throw UsageError("context parallelism ulysses: " + std::to_string(heads) + " heads do not split over cp = " +
                       std::to_string(size()) + " ranks");
    std::vector<std::int64_t> all;
    for (int r = 0; r < size(); ++r) {
      const auto p = positions(sequence, r);
      all.insert(all.end(), p.begin(), p.end());
    }
    const Tensor qh = to_heads(q, forward_bytes_), kh = to_heads(k, forward_bytes_), vh = to_heads(v, forward_bytes_);
    Tensor oh = Tensor::empty("ulysses.out", qh.shape(), q.dtype(), MemoryCategory::activations);
    Tensor lh = Tensor::empty("ulysses.lse", {q.dim(0), heads / size(), sequence}, q.dtype(), MemoryCategory::activations);
    ops::attention_block_forward(qh, kh, vh, all, all, heads / size(), oh, lh);
    copy_into(out, to_sequence(oh, forward_bytes_));
    copy_into(lse, lse_to_sequence(lh, forward_bytes_));
    return;
  }
  // The ring: block s came from rank r - s; the next one is on its way while this one is computed.
  const int cp = size();
  Tensor cur_k = k.clone("ring.k", MemoryCategory::communication), cur_v = v.clone("ring.v", MemoryCategory::communication);
  Tensor nxt_k = Tensor::empty("ring.k", k.shape(), k.dtype(), MemoryCategory::communication);
  Tensor nxt_v = Tensor::empty("ring.v", v.shape(), v.dtype(), MemoryCategory::communication);
  Tensor part = Tensor::empty("ring.out", out.shape(), out.dtype(), MemoryCategory::workspace);
  Tensor part_lse = Tensor::empty("ring.lse", lse.shape(), lse.dtype(), MemoryCategory::workspace);
  for (int s = 0; s < cp; ++s) {
    std::vector<RequestPtr> requests;
    if (s + 1 < cp) requests = pass_on(cur_k, cur_v, nxt_k, nxt_v, 2 * s, forward_bytes_);
    if (!config_.overlap && !requests.empty()) waited([&] { group_.wait_all(requests); });
    const int origin = ((rank() - s) % cp + cp) % cp;  // the ring as it should be (a wrong_neighbour fault sends elsewhere)
    const std::vector<std::int64_t> theirs = positions(sequence, origin);
    if (s == 0) {
      ops::attention_block_forward(q, cur_k, cur_v, mine, theirs, heads, out, lse);
    } else {
      ops::attention_block_forward(q, cur_k, cur_v, mine, theirs, heads, part, part_lse);
      if (config_.fault == "missing_rescale") {
        for (std::int64_t i = 0; i < out.numel(); ++i) out.set(i, out.at(i) + part.at(i));
      } else {
        ops::attention_merge(out, lse, part, part_lse);
      }
    }
    if (s + 1 < cp) {
      if (config_.overlap) waited([&] { group_.wait_all(requests); });
      std::swap(cur_k, nxt_k);
      std::swap(cur_v, nxt_v);
    }
  }
}

void ContextParallel::attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                                         const Tensor& out, const Tensor& lse, std::int64_t sequence, int heads,
                                         Tensor& dq, Tensor& dk, Tensor& dv) {
  const ScopeTimer timer(attention_seconds_);
  for (const Tensor* t : {&dout, &q, &k, &v}) require_host("attention", *t);
  const std::vector<std::int64_t> mine = positions(sequence);
  const int cp = size();
  dq.zero();
  if (config_.variant == "allgather") {
    Tensor k_all, v_all;
    std::vector<std::int64_t> positions_all;
    gather_keys(k, v, sequence, k_all, v_all, positions_all, backward_bytes_);
    Tensor dk_all = Tensor::zeros("dk.all", k_all.shape(), k.dtype(), MemoryCategory::activations);
    Tensor dv_all = Tensor::zeros("dv.all", v_all.shape(), v.dtype(), MemoryCategory::activations);
    ops::attention_block_backward(dout, q, k_all, v_all, out, lse, mine, positions_all, heads, dq, dk_all, dv_all);
    // Back to their ranks: rank-major blocks, summed over every rank's queries.
    const std::int64_t B = k.dim(0), local = k.dim(1), C = k.dim(2);
    for (auto [all, mine_grad] : {std::pair{&dk_all, &dk}, std::pair{&dv_all, &dv}}) {
      Tensor stacked = Tensor::empty("dkv.stacked", {cp, B, local, C}, k.dtype(), MemoryCategory::workspace);
      for (int r = 0; r < cp; ++r) {
        Tensor part = stacked.segment("part", r * k.numel(), k.shape());
        copy_rows(*all, part, iota(r * local, local), iota(0, local));
      }
      waited([&] { group_.reduce_scatter(stacked.view(), mine_grad->view(), ReduceOp::sum); });
      backward_bytes_ += (cp - 1) * bytes_of(*mine_grad);
    }
    return;
  }
  if (config_.variant == "ulysses") {
    std::vector<std::int64_t> all;
    for (int r = 0; r < cp; ++r) {
      const auto p = positions(sequence, r);
      all.insert(all.end(), p.begin(), p.end());
    }
    const Tensor dh = to_heads(dout, backward_bytes_), qh = to_heads(q, backward_bytes_), kh = to_heads(k, backward_bytes_),
                 vh = to_heads(v, backward_bytes_), oh = to_heads(out, backward_bytes_), lh = lse_to_heads(lse, backward_bytes_);
    Tensor dqh = Tensor::zeros("ulysses.dq", qh.shape(), q.dtype(), MemoryCategory::activations);
    Tensor dkh = Tensor::zeros("ulysses.dk", kh.shape(), k.dtype(), MemoryCategory::activations);
    Tensor dvh = Tensor::zeros("ulysses.dv", vh.shape(), v.dtype(), MemoryCategory::activations);
    ops::attention_block_backward(dh, qh, kh, vh, oh, lh, all, all, heads / cp, dqh, dkh, dvh);
    copy_into(dq, to_sequence(dqh, backward_bytes_));
    copy_into(dk, to_sequence(dkh, backward_bytes_));
    copy_into(dv, to_sequence(dvh, backward_bytes_));
    return;
  }
  // The ring again: block s (from rank r - s) with the gradients its keys and values gathered so
  // far; this rank adds its queries' part and passes both on. After cp steps every block's
  // gradients are back with the rank after the last holder: its owner.
  Tensor cur_k = k.clone("ring.k", MemoryCategory::communication), cur_v = v.clone("ring.v", MemoryCategory::communication);
  Tensor nxt_k = Tensor::empty("ring.k", k.shape(), k.dtype(), MemoryCategory::communication);
  Tensor nxt_v = Tensor::empty("ring.v", v.shape(), v.dtype(), MemoryCategory::communication);
  Tensor cur_dk = Tensor::zeros("ring.dk", k.shape(), k.dtype(), MemoryCategory::communication);
  Tensor cur_dv = Tensor::zeros("ring.dv", v.shape(), v.dtype(), MemoryCategory::communication);
  Tensor nxt_dk = Tensor::empty("ring.dk", k.shape(), k.dtype(), MemoryCategory::communication);
  Tensor nxt_dv = Tensor::empty("ring.dv", v.shape(), v.dtype(), MemoryCategory::communication);
  for (int s = 0; s < cp; ++s) {
    std::vector<RequestPtr> keys;
    if (s + 1 < cp) keys = pass_on(cur_k, cur_v, nxt_k, nxt_v, 4 * s, backward_bytes_);
    if (!config_.overlap && !keys.empty()) waited([&] { group_.wait_all(keys); });
    const int origin = ((rank() - s) % cp + cp) % cp;  // the ring as it should be (a wrong_neighbour fault sends elsewhere)
    ops::attention_block_backward(dout, q, cur_k, cur_v, out, lse, mine, positions(sequence, origin), heads, dq, cur_dk,
                                  cur_dv);
    // The block's gradients follow it around the ring (the last pass takes them home).
    std::vector<RequestPtr> grads = pass_on(cur_dk, cur_dv, nxt_dk, nxt_dv, 4 * s + 2, backward_bytes_);
    waited([&] { group_.wait_all(grads); });
    std::swap(cur_dk, nxt_dk);
    std::swap(cur_dv, nxt_dv);
    if (s + 1 < cp) {
      if (config_.overlap) waited([&] { group_.wait_all(keys); });
      std::swap(cur_k, nxt_k);
      std::swap(cur_v, nxt_v);
    }
  }
  copy_into(dk, cur_dk);
  copy_into(dv, cur_dv);
}

}  // namespace parity::parallel
