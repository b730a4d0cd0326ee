#include "reference/parallel/pipeline/simulator.hpp"

#include <algorithm>
#include <deque>
#include <optional>
#include <unordered_map>

#include "reference/core/error.hpp"

namespace parity::parallel::pipeline {

Costs Costs::uniform(int ranks, double forward, double input_grad, double weight_grad) {
  Costs c;
  const auto n = static_cast<std::size_t>(ranks);
  c.forward.assign(n, forward);
  c.input_grad.assign(n, input_grad);
  c.weight_grad.assign(n, weight_grad);
  c.backward.assign(n, input_grad + weight_grad);
  return c;
}

double Timeline::bubble_fraction(int rank) const {
  return makespan > 0 ? 1 - busy[static_cast<std::size_t>(rank)] / makespan : 0.0;
}

double Timeline::bubble_over_ideal(int rank) const {
  const double b = busy[static_cast<std::size_t>(rank)];
  return b > 0 ? (makespan - b) / b : 0.0;
}

namespace {

// A value per action (stage, micro-batch, kind of work) of a schedule: a flat array where the
// schedule has an action for every (stage, micro-batch), as every valid one does, and a hash
// table otherwise (a CSV naming micro-batch 2000000000 among a few actions), so that what the
// schedule holds, not the largest number it names, sets the memory.
template <typename T>
class ActionTable {
 public:
  ActionTable(int stages, int micro_batches, std::size_t actions)
      : micro_batches_(micro_batches),
        dense_(static_cast<double>(stages) * micro_batches <= static_cast<double>(actions)) {
    if (dense_) flat_.assign(static_cast<std::size_t>(stages) * static_cast<std::size_t>(micro_batches) * 4, std::nullopt);
    else sparse_.reserve(actions);
  }
  // The value of an action, or none.
  const T* find(int stage, int micro_batch, Work work) const {
    if (dense_) {
      const std::optional<T>& v = flat_[index(stage, micro_batch, work)];
      return v ? &*v : nullptr;
    }
    const auto it = sparse_.find(index(stage, micro_batch, work));
    return it == sparse_.end() ? nullptr : &it->second;
  }
  bool has(int stage, int micro_batch, Work work) const { return find(stage, micro_batch, work) != nullptr; }
  // Sets the action's value; false (and nothing set) where it had one.
  bool insert(int stage, int micro_batch, Work work, T value) {
    if (dense_) {
      std::optional<T>& v = flat_[index(stage, micro_batch, work)];
      if (v) return false;
      v = value;
      return true;
    }
    return sparse_.emplace(index(stage, micro_batch, work), value).second;
  }

 private:
  std::size_t index(int stage, int micro_batch, Work work) const {
    const std::size_t kind = work == Work::forward ? 0 : work == Work::backward ? 1 : work == Work::input_grad ? 2 : 3;
    return (static_cast<std::size_t>(stage) * static_cast<std::size_t>(micro_batches_) +
            static_cast<std::size_t>(micro_batch)) * 4 + kind;
  }
  int micro_batches_;
  bool dense_;
  std::vector<std::optional<T>> flat_;
  std::unordered_map<std::size_t, T> sparse_;
};

std::size_t action_total(const Schedule& s) {
  std::size_t n = 0;
  for (const auto& actions : s.ranks) n += actions.size();
  return n;
}

std::string where(const Schedule& s, int rank, const Action& a) {
  return "schedule " + s.name + ": rank " + std::to_string(rank) + ", " + a.text() + ": ";
}

// The rules that need no timing: stages and micro-batches in range, one of each action, then
// each backward after its forward and each W after its I on the rank.
void check_structure(const Schedule& s, const std::vector<int>& owner) {
  const int stages = static_cast<int>(owner.size()), m = s.micro_batches;
  if (m < 1) throw UsageError("schedule " + s.name + ": no micro-batch");
  ActionTable<int> position(stages, m, action_total(s));  // index of the action in its rank's list
  for (int r = 0; r < s.rank_count(); ++r) {
    const auto& actions = s.ranks[static_cast<std::size_t>(r)];
    for (std::size_t i = 0; i < actions.size(); ++i) {
      const Action& a = actions[i];
      if (a.micro_batch >= m)
        throw UsageError(where(s, r, a) + "micro-batch " + std::to_string(a.micro_batch) + " outside 0.." +
                         std::to_string(m - 1));
      if (!position.insert(a.stage, a.micro_batch, a.work, static_cast<int>(i)))
        throw UsageError(where(s, r, a) + "appears twice (each action runs once)");
    }
  }
  for (int stage = 0; stage < stages; ++stage)
    for (int b = 0; b < m; ++b) {
      const auto has = [&](Work w) { return position.has(stage, b, w); };
      const int rank = owner[static_cast<std::size_t>(stage)];
      if (!has(Work::forward))
        throw UsageError(where(s, rank, {stage, Work::forward, b}) + "missing: every micro-batch needs one forward per stage");
      const bool full = has(Work::backward), input = has(Work::input_grad), weight = has(Work::weight_grad);
      if (full && (input || weight))
        throw UsageError(where(s, rank, {stage, Work::backward, b}) + "given with I or W as well: a backward is one B, or one I and one W");
      if (!full && !input)
        throw UsageError(where(s, rank, {stage, Work::backward, b}) +
                         "missing: every micro-batch needs a backward (B, or I and W) per stage");
      if (input && !weight) throw UsageError(where(s, rank, {stage, Work::weight_grad, b}) + "missing: an I needs its W");
    }
  for (int r = 0; r < s.rank_count(); ++r)
    for (const Action& a : s.ranks[static_cast<std::size_t>(r)]) {
      const int at = *position.find(a.stage, a.micro_batch, a.work);
      const auto after = [&](Work w) { return *position.find(a.stage, a.micro_batch, w) < at; };
      if ((a.work == Work::backward || a.work == Work::input_grad) && !after(Work::forward))
        throw UsageError(where(s, r, a) + "runs before " + Action{a.stage, Work::forward, a.micro_batch}.text() +
                         " on its rank (a backward needs its forward)");
      if (a.work == Work::weight_grad && !after(Work::input_grad))
        throw UsageError(where(s, r, a) + "runs before " + Action{a.stage, Work::input_grad, a.micro_batch}.text() +
                         " on its rank (W needs the I of the same micro-batch)");
    }
}

}  // namespace

Timeline simulate(const Schedule& s, const Costs& costs) {
  const std::vector<int> owner = s.stage_ranks();
  check_structure(s, owner);
  const int p = s.rank_count(), stages = static_cast<int>(owner.size());
  for (const auto* v : {&costs.forward, &costs.backward, &costs.input_grad, &costs.weight_grad})
    if (static_cast<int>(v->size()) != p)
      throw Error("pipeline simulation: costs for " + std::to_string(v->size()) + " ranks, the schedule has " + std::to_string(p));
  const std::size_t total = action_total(s);
  ActionTable<double> end(stages, s.micro_batches, total);  // when each action finished
  // (stage, micro-batch) whose backward is I + W: its gradient comes from I.
  ActionTable<bool> split(stages, s.micro_batches, total);
  for (const auto& actions : s.ranks)
    for (const Action& a : actions)
      if (a.work == Work::input_grad) split.insert(a.stage, a.micro_batch, Work::input_grad, true);
  Timeline t;
  t.ranks.resize(static_cast<std::size_t>(p));
  t.busy.assign(static_cast<std::size_t>(p), 0.0);
  t.peak_in_flight.assign(static_cast<std::size_t>(p), 0);
  t.peak_held.assign(static_cast<std::size_t>(p), 0);
  std::vector<int> held(static_cast<std::size_t>(p), 0);
  std::vector<std::size_t> next(static_cast<std::size_t>(p), 0);
  std::vector<double> free(static_cast<std::size_t>(p), 0.0);
  std::vector<int> holding(static_cast<std::size_t>(p), 0);
  const double message = costs.message_seconds();
  // What `a` on `rank` waits for: the action that produces its input, and the arrival delay.
  struct Need {
    Action what;
    int rank;
  };
  const auto needs = [&](const Action& a) -> std::optional<Need> {
    switch (a.work) {
      case Work::forward:
        if (a.stage > 0) return Need{{a.stage - 1, Work::forward, a.micro_batch}, owner[static_cast<std::size_t>(a.stage - 1)]};
        break;
      case Work::backward:
      case Work::input_grad:
        if (a.stage + 1 < stages) {
          const int next_stage = a.stage + 1;
          const bool next_split = split.has(next_stage, a.micro_batch, Work::input_grad);
          return Need{{next_stage, next_split ? Work::input_grad : Work::backward, a.micro_batch},
                      owner[static_cast<std::size_t>(next_stage)]};
        }
        break;
      case Work::weight_grad:
        break;  // its I ran before it on this rank (checked)
    }
    return std::nullopt;
  };
  // Each rank runs what it can, in order, until an action waits for another rank's; it is
  // visited again only when that rank has run something (a chain of 100,000 ranks swept every
  // rank per step: 31 s). Every start is the latest of what it waits for, so the order ranks
  // are visited in does not change the timeline.
  std::size_t left = total;
  std::deque<int> visit;
  std::vector<char> queued(static_cast<std::size_t>(p), 1);
  std::vector<std::vector<int>> waiters(static_cast<std::size_t>(p));  // ranks blocked on each rank
  for (int r = 0; r < p; ++r) visit.push_back(r);
  while (!visit.empty()) {
    const int r = visit.front();
    visit.pop_front();
    const auto ri = static_cast<std::size_t>(r);
    queued[ri] = 0;
    const auto& actions = s.ranks[ri];
    bool ran = false;
    while (next[ri] < actions.size()) {
      const Action& a = actions[next[ri]];
      double start = free[ri];
      if (const std::optional<Need> n = needs(a)) {
        const double* ready = end.find(n->what.stage, n->what.micro_batch, n->what.work);
        if (!ready) {
          waiters[static_cast<std::size_t>(n->rank)].push_back(r);
          break;
        }
        start = std::max(start, *ready + (n->rank == r ? 0.0 : message));
      }
      const double cost = a.work == Work::forward      ? costs.forward[ri]
                          : a.work == Work::backward   ? costs.backward[ri]
                          : a.work == Work::input_grad ? costs.input_grad[ri]
                                                       : costs.weight_grad[ri];
      t.ranks[ri].push_back({a, start, start + cost});
      end.insert(a.stage, a.micro_batch, a.work, start + cost);
      free[ri] = start + cost;
      t.busy[ri] += cost;
      if (a.work == Work::forward) t.peak_in_flight[ri] = std::max(t.peak_in_flight[ri], ++holding[ri]);
      if (a.work == Work::backward || a.work == Work::input_grad) --holding[ri];
      if (a.work == Work::forward) t.peak_held[ri] = std::max(t.peak_held[ri], ++held[ri]);
      if (a.work == Work::backward || a.work == Work::weight_grad) --held[ri];
      ++next[ri];
      --left;
      ran = true;
    }
    if (!ran) continue;
    for (const int w : waiters[ri])
      if (!queued[static_cast<std::size_t>(w)]) {
        queued[static_cast<std::size_t>(w)] = 1;
        visit.push_back(w);
      }
    waiters[ri].clear();
  }
  if (left > 0) {
    std::string cycle;
    for (int r = 0; r < p; ++r) {
      const auto ri = static_cast<std::size_t>(r);
      if (next[ri] >= s.ranks[ri].size()) continue;
      const Action& a = s.ranks[ri][next[ri]];
      if (const std::optional<Need> n = needs(a); n && !end.has(n->what.stage, n->what.micro_batch, n->what.work))
        cycle += (cycle.empty() ? "" : "; ") + ("rank " + std::to_string(r) + " waits at " + a.text() + " for " +
                                                n->what.text() + " on rank " + std::to_string(n->rank));
    }
    throw UsageError("schedule " + s.name + " deadlocks: " + cycle);
  }
  for (double f : free) t.makespan = std::max(t.makespan, f);
  return t;
}

Timeline validate(const Schedule& schedule) {
  return simulate(schedule, Costs::uniform(schedule.rank_count(), 1, 1, 1));
}

}  // namespace parity::parallel::pipeline
