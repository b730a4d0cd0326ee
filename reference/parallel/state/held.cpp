// What a rank holds of the training state, and who writes what (see held.hpp).
#include "reference/parallel/state/held.hpp"

#include <algorithm>
#include <map>
#include <set>

#include "reference/core/error.hpp"
#include "reference/model/moe.hpp"

namespace parity::parallel {

std::int64_t run_elements(const std::vector<Run>& runs) {
  std::int64_t n = 0;
  for (const Run& r : runs) n += r.length;
  return n;
}

std::vector<Run> parameter_runs(const model::Parameter& p, const Shape& shape, std::int64_t first, std::int64_t count) {
  const std::int64_t local = element_count(shape);
  require(first >= 0 && count >= 0 && first + count <= local,
          "training state: elements [" + std::to_string(first) + ", " + std::to_string(first + count) + ") outside " +
              p.name + " " + to_string(shape));
  if (!p.shard) return count > 0 ? std::vector<Run>{{first, count}} : std::vector<Run>{};
  require(p.shard->shape() == shape, "training state: " + p.name + " holds " + to_string(shape) + ", its shard is " +
                                         to_string(p.shard->shape()));
  const std::vector<std::int64_t> global = p.shard->global_indices();
  std::vector<Run> runs;
  for (std::int64_t i = first; i < first + count; ++i) {
    const std::int64_t g = global[static_cast<std::size_t>(i)];
    if (!runs.empty() && runs.back().first + runs.back().length == g)
      ++runs.back().length;
    else
      runs.push_back({g, 1});
  }
  return runs;
}

std::vector<HeldTensor> held_tensors(Trainer& trainer, bool saving) {
  std::vector<HeldTensor> out;
  const OptimizerStep& step = *trainer.parts().optimizer;
  auto whole_of = [](const model::Parameter& p, const Shape& local) { return p.shard ? p.shard->whole() : local; };
  std::set<const model::Parameter*> valued;
  for (model::Parameter* p : trainer.model().parameters()) {
    if (!p->value.defined()) continue;  // ZeRO-3 between passes: its segments hold the values
    valued.insert(p);
    out.push_back({p->name, whole_of(*p, p->value.shape()), p->value.dtype(), p->value,
                   parameter_runs(*p, p->value.shape(), 0, p->value.numel())});
  }
  const std::vector<std::string> states = step.optimizer().state_names();
  for (const Segment& s : step.segments()) {
    require(s.state.size() == states.size(), "training state: segment " + s.name + " holds " +
                                                 std::to_string(s.state.size()) + " state tensors, the optimizer names " +
                                                 std::to_string(states.size()));
    for (const SegmentPart& part : s.parts) {
      const model::Parameter& p = *part.parameter;
      const Shape whole = whole_of(p, part.shape);
      const std::vector<Run> runs = parameter_runs(p, part.shape, part.in_parameter, part.count);
      auto hold = [&](const Tensor& t, const std::string& suffix) {
        const Tensor flat = t.reshape({t.numel()});
        out.push_back({p.name + suffix, whole, t.dtype(), flat.segment(p.name + suffix, part.in_segment, {part.count}), runs});
      };
      if (!valued.contains(&p)) hold(s.value, "");
      if (s.master.defined()) hold(s.master, "/master");
      for (std::size_t k = 0; k < states.size(); ++k) hold(s.state[k], "/" + states[k]);
    }
  }
  for (model::MixtureOfExperts* moe : model::moe_layers(trainer.model())) {
    if (moe->rule().kind != ops::RouterKind::aux_free) continue;
    const model::MixtureOfExperts::RoutingState s = moe->routing_state(saving);
    const auto e = static_cast<std::int64_t>(s.bias.size());
    Tensor t = Tensor::zeros(moe->name() + "/routing", {2 * e + 2}, DataType::float64, MemoryCategory::workspace);
    for (std::int64_t i = 0; i < e; ++i) {
      t.set(i, s.bias[static_cast<std::size_t>(i)]);
      t.set(e + i, s.load[static_cast<std::size_t>(i)]);
    }
    t.set(2 * e, s.pending ? 1 : 0);
    t.set(2 * e + 1, static_cast<double>(s.step));
    HeldTensor h{t.name(), {2 * e + 2}, DataType::float64, t, {{0, 2 * e + 2}}, {}};
    h.restore = [moe, e](const Tensor& loaded) {
      model::MixtureOfExperts::RoutingState r;
      for (std::int64_t i = 0; i < e; ++i) {
        r.bias.push_back(loaded.at(i));
        r.load.push_back(loaded.at(e + i));
      }
      r.pending = loaded.at(2 * e) != 0;
      r.step = static_cast<std::uint64_t>(loaded.at(2 * e + 1));
      moe->restore_routing_state(r);
    };
    out.push_back(std::move(h));
  }
  return out;
}

namespace {
bool runs_less(const std::vector<Run>& a, const std::vector<Run>& b) {
  return std::lexicographical_compare(a.begin(), a.end(), b.begin(), b.end(), [](const Run& x, const Run& y) {
    return x.first != y.first ? x.first < y.first : x.length < y.length;
  });
}
}  // namespace

std::vector<std::vector<WriteRange>> assign_writers(const std::string& name, std::int64_t whole_elements,
                                                    const std::vector<std::vector<Run>>& holders) {
  // Replicas: holders with identical runs, in holder order.
  std::map<std::vector<Run>, std::vector<std::size_t>, decltype(&runs_less)> replicas(&runs_less);
  for (std::size_t k = 0; k < holders.size(); ++k) replicas[holders[k]].push_back(k);
  std::vector<std::vector<WriteRange>> out(holders.size());
  std::map<std::int64_t, std::int64_t> covered;  // disjoint [first, end) of the whole, written already
  for (const auto& [runs, group] : replicas) {
    // This holding's elements nobody writes yet, as ranges of its own order.
    std::vector<WriteRange> fresh;
    std::int64_t at = 0;
    for (const Run& r : runs) {
      std::int64_t lo = r.first;
      const std::int64_t hi = r.first + r.length;
      auto it = covered.upper_bound(lo);
      if (it != covered.begin() && std::prev(it)->second > lo) --it;
      for (; lo < hi; ++it) {
        const std::int64_t gap_end = it == covered.end() ? hi : std::min(hi, it->first);
        if (lo < gap_end) {
          const WriteRange w{at + (lo - r.first), at + (gap_end - r.first)};
          if (!fresh.empty() && fresh.back().end == w.begin)
            fresh.back().end = w.end;
          else
            fresh.push_back(w);
        }
        if (it == covered.end()) break;
        lo = std::max(lo, it->second);
      }
      at += r.length;
    }
    for (const Run& r : runs) {  // merged into the written set
      std::int64_t lo = r.first, hi = r.first + r.length;
      auto it = covered.upper_bound(lo);
      if (it != covered.begin() && std::prev(it)->second >= lo) --it;
      while (it != covered.end() && it->first <= hi) {
        lo = std::min(lo, it->first);
        hi = std::max(hi, it->second);
        it = covered.erase(it);
      }
      covered[lo] = hi;
    }
    // The fresh elements split evenly over the replicas, in order.
    std::int64_t n = 0;
    for (const WriteRange& w : fresh) n += w.end - w.begin;
    const auto k = static_cast<std::int64_t>(group.size());
    for (std::int64_t j = 0; j < k; ++j) {
      std::int64_t skip = j * n / k, take = (j + 1) * n / k - j * n / k;
      for (const WriteRange& w : fresh) {
        const std::int64_t size = w.end - w.begin;
        if (skip >= size) {
          skip -= size;
          continue;
        }
        const std::int64_t count = std::min(take, size - skip);
        if (count > 0) out[group[static_cast<std::size_t>(j)]].push_back({w.begin + skip, w.begin + skip + count});
        take -= count;
        skip = 0;
        if (take == 0) break;
      }
    }
  }
  std::int64_t next = 0;
  for (const auto& [first, end] : covered) {
    if (first > next)
      throw Error("training state: no rank holds elements [" + std::to_string(next) + ", " + std::to_string(first) +
                  ") of " + name);
    next = end;
  }
  if (next != whole_elements)
    throw Error("training state: " + name + " has " + std::to_string(whole_elements) + " elements; the ranks hold [0, " +
                std::to_string(next) + ")");
  return out;
}

std::vector<Run> sub_runs(const std::vector<Run>& runs, std::int64_t begin, std::int64_t end) {
  std::vector<Run> out;
  std::int64_t at = 0;  // position of the current run's first element in the tensor
  for (const Run& r : runs) {
    const std::int64_t lo = std::max(begin, at), hi = std::min(end, at + r.length);
    if (lo < hi) out.push_back({r.first + (lo - at), hi - lo});
    at += r.length;
  }
  return out;
}

std::vector<RunCopy> overlaps(const std::vector<Run>& from, const std::vector<Run>& to) {
  struct Placed {
    std::int64_t first, length, offset;
  };
  auto placed = [](const std::vector<Run>& runs) {
    std::vector<Placed> out;
    std::int64_t at = 0;
    for (const Run& r : runs) {
      out.push_back({r.first, r.length, at});
      at += r.length;
    }
    std::sort(out.begin(), out.end(), [](const Placed& a, const Placed& b) { return a.first < b.first; });
    return out;
  };
  const std::vector<Placed> a = placed(from), b = placed(to);
  std::vector<RunCopy> out;
  std::size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const std::int64_t lo = std::max(a[i].first, b[j].first);
    const std::int64_t hi = std::min(a[i].first + a[i].length, b[j].first + b[j].length);
    if (lo < hi) out.push_back({a[i].offset + (lo - a[i].first), b[j].offset + (lo - b[j].first), hi - lo});
    if (a[i].first + a[i].length < b[j].first + b[j].length)
      ++i;
    else
      ++j;
  }
  return out;
}

}  // namespace parity::parallel
