// Tensor-parallel collectives on activations (see regions.hpp).
#include "reference/parallel/tensor/regions.hpp"

#include <chrono>

#include "reference/core/error.hpp"
#include "reference/kernels/buffer_kernels.hpp"
#include "reference/parallel/precision/precision.hpp"

namespace parity::parallel {

std::string TensorParallelConfig::describe() const {
  std::string s = sequence_parallel ? "sequence parallel" : "no sequence parallelism";
  if (!fault.empty()) s += ", fault " + fault;
  return s;
}

TensorParallel::TensorParallel(Communicator& group, TensorParallelConfig config)
    : group_(group),
      config_(std::move(config)),
      all_reduce_(&find_algorithm(Collective::all_reduce, config_.all_reduce)),
      all_gather_(&find_algorithm(Collective::all_gather, config_.all_gather)),
      reduce_scatter_(&find_algorithm(Collective::reduce_scatter, config_.reduce_scatter)) {
  static const char* const kFaults[] = {"", "copy_without_all_reduce", "reduce_without_all_reduce", "transposed_split",
                                        "wrong_shard"};
  bool known = false;
  for (const char* f : kFaults) known = known || config_.fault == f;
  if (!known) throw UsageError("unknown tensor-parallel fault '" + config_.fault + "'");
}

void TensorParallel::reset_counters() const {
  seconds_ = 0;
  bytes_.clear();
}

std::map<std::string, double> TensorParallel::bytes_by_layer() const {
  std::map<std::string, double> out;
  for (const auto& [site, bytes] : bytes_) {
    const auto first = site.find('.');
    const std::string layer = site.rfind("blocks.", 0) == 0 ? site.substr(0, site.find('.', first + 1)) : site.substr(0, first);
    out[layer] += static_cast<double>(bytes);
  }
  return out;
}

template <typename F> void TensorParallel::timed(const std::string& site, F&& f) const {
  const auto start = std::chrono::steady_clock::now();
  const std::uint64_t before = group_.traffic().bytes_sent;
  f();
  seconds_ += seconds_since(start);
  bytes_[site] += group_.traffic().bytes_sent - before;
}

namespace {
// A tensor as [outer, n, inner] around dimension `dim`.
struct Around {
  std::int64_t outer = 1, n = 1, inner = 1;
};
Around around(const Tensor& t, int dim) {
  require(dim >= 0 && dim < t.rank(), "tensor parallelism: no dimension " + std::to_string(dim) + " in " + t.describe());
  Around a;
  for (int d = 0; d < dim; ++d) a.outer *= t.dim(d);
  a.n = t.dim(dim);
  for (int d = dim + 1; d < t.rank(); ++d) a.inner *= t.dim(d);
  return a;
}

// An empty activation for one of t parts of `whole` along `dim` (refused unless t divides it).
Tensor empty_part(const Tensor& whole, int dim, int t, const Around& a, const std::string& suffix) {
  if (a.n % t != 0)
    throw Error("tensor parallelism: " + whole.describe() + " dimension " + std::to_string(dim) + " of " +
                std::to_string(a.n) + " does not split over " + std::to_string(t) + " ranks");
  Shape shape = whole.shape();
  shape[static_cast<std::size_t>(dim)] /= t;
  return Tensor::empty(whole.name() + suffix, shape, whole.dtype(), MemoryCategory::activations, whole.space());
}

Tensor scratch_like(const Tensor& t, const std::string& name, std::int64_t count, MemoryCategory category) {
  return Tensor::empty(name, {count}, t.dtype(), category, t.space());
}

// Copies block (o, r) of `from`, laid out [outer][parts][block], into `to` laid out
// [parts][outer][block] (or back when `to_rank_major` is false).
void permute_blocks(const Tensor& from, Tensor& to, std::int64_t outer, int parts, std::int64_t block,
                    bool to_rank_major) {
  const BufferView src = from.view(), dst = to.view();
  for (std::int64_t o = 0; o < outer; ++o)
    for (int r = 0; r < parts; ++r) {
      const std::size_t grouped = static_cast<std::size_t>((o * parts + r) * block);
      const std::size_t rank_major = static_cast<std::size_t>((r * outer + o) * block);
      const auto n = static_cast<std::size_t>(block);
      if (to_rank_major)
        copy_buffer(dst.slice(rank_major, n), src.slice(grouped, n));
      else
        copy_buffer(dst.slice(grouped, n), src.slice(rank_major, n));
    }
}
}  // namespace

void TensorParallel::all_reduce(Tensor& t, const std::string& site, ReduceOp op) const {
  if (size() == 1) return;
  timed(site, [&] {
    CollectiveCall call;
    call.collective = Collective::all_reduce;
    call.op = op;
    call.send = call.recv = t.view();
    run_collective(group_, *all_reduce_, call, kHalfReduction);
  });
}

Tensor TensorParallel::all_gather(const Tensor& shard, int dim, const std::string& site) const {
  const int t = size();
  const Around a = around(shard, dim);
  Shape shape = shard.shape();
  shape[static_cast<std::size_t>(dim)] *= t;
  Tensor whole = Tensor::empty(shard.name() + ".gathered", shape, shard.dtype(), MemoryCategory::activations, shard.space());
  if (t == 1) {
    copy_into(whole, shard);
    return whole;
  }
  timed(site, [&] {
    // The collective lays the ranks' shards one after another; along a dimension with outer
    // extent above 1 they are then interleaved into place.
    Tensor buffer = a.outer == 1 ? whole : scratch_like(shard, site + ".gather", whole.numel(), MemoryCategory::communication);
    const std::int64_t count = shard.numel();
    BufferView mine = buffer.view().slice(static_cast<std::size_t>(rank() * count), static_cast<std::size_t>(count));
    copy_buffer(mine, shard.view());
    CollectiveCall call;
    call.collective = Collective::all_gather;
    call.send = mine;
    call.recv = buffer.view();
    run_collective(group_, *all_gather_, call, kHalfReduction);
    if (a.outer != 1) permute_blocks(buffer, whole, a.outer, t, a.n * a.inner, false);
  });
  return whole;
}

Tensor TensorParallel::reduce_scatter(const Tensor& whole, int dim, const std::string& site) const {
  const int t = size();
  const Around a = around(whole, dim);
  Tensor part = empty_part(whole, dim, t, a, ".scattered");
  if (t == 1) {
    copy_into(part, whole);
    return part;
  }
  timed(site, [&] {
    Tensor buffer = whole;
    if (a.outer != 1) {
      buffer = scratch_like(whole, site + ".scatter", whole.numel(), MemoryCategory::communication);
      permute_blocks(whole, buffer, a.outer, t, a.n / t * a.inner, true);
    }
    CollectiveCall call;
    call.collective = Collective::reduce_scatter;
    call.send = buffer.view();
    call.recv = part.view();
    run_collective(group_, *reduce_scatter_, call, kHalfReduction);
  });
  return part;
}

Tensor TensorParallel::split(const Tensor& whole, int dim, const std::string&) const {
  const int t = size();
  const Around a = around(whole, dim);
  Tensor part = empty_part(whole, dim, t, a, ".split");
  const std::int64_t block = a.n / t * a.inner;
  const BufferView src = whole.view(), dst = part.view();
  for (std::int64_t o = 0; o < a.outer; ++o)
    copy_buffer(dst.slice(static_cast<std::size_t>(o * block), static_cast<std::size_t>(block)),
                src.slice(static_cast<std::size_t>((o * t + rank()) * block), static_cast<std::size_t>(block)));
  return part;
}

}  // namespace parity::parallel
