#include "reference/parallel/pipeline/schedule.hpp"

#include <algorithm>
#include <charconv>
#include <deque>
#include <limits>
#include <optional>
#include <unordered_map>

#include "reference/core/error.hpp"
#include "reference/core/text.hpp"

namespace parity::parallel::pipeline {

std::string Action::text() const {
  std::string out = std::to_string(stage);
  out += static_cast<char>(work);
  out += std::to_string(micro_batch);
  return out;
}

Action parse_action(std::string_view text) {
  const auto bad = [&](const std::string& why) {
    return UsageError("pipeline action " + quoted_input(text) + ": " + why +
                      " (expected STAGE, one of F B I W, MICRO_BATCH, e.g. 2F0)");
  };
  const auto letter = text.find_first_of("FBIW");
  if (letter == std::string_view::npos) {
    const auto other = text.find_first_not_of("0123456789");
    throw bad(other == std::string_view::npos ? "no kind of work" : "unknown kind " + quoted_input(text.substr(other, 1)));
  }
  const auto number = [&](std::string_view digits, const char* what) {
    int value = -1;
    const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
    if (digits.empty() || error != std::errc() || end != digits.data() + digits.size() || value < 0)
      throw bad(std::string("the ") + what + " is not a number");
    return value;
  };
  Action a;
  a.stage = number(text.substr(0, letter), "stage");
  a.work = static_cast<Work>(text[letter]);
  a.micro_batch = number(text.substr(letter + 1), "micro-batch");
  return a;
}

int Schedule::stage_count() const {
  int top = -1;
  for (const auto& actions : ranks)
    for (const Action& a : actions) top = std::max(top, a.stage);
  return top + 1;
}

std::vector<int> Schedule::stage_ranks() const {
  // By the stages named, not by the largest number (a CSV naming stage 2000000000 among a few
  // actions costs what its actions cost).
  std::unordered_map<int, int> owner_of;
  for (int r = 0; r < rank_count(); ++r)
    for (const Action& a : ranks[static_cast<std::size_t>(r)]) {
      const auto [it, first] = owner_of.emplace(a.stage, r);
      if (!first && it->second != r)
        throw UsageError("schedule " + name + ": stage " + std::to_string(a.stage) + " has actions on rank " +
                         std::to_string(it->second) + " and on rank " + std::to_string(r) + " (" + a.text() +
                         "); a stage lives on one rank");
    }
  std::vector<int> stages;
  stages.reserve(owner_of.size());
  for (const auto& [stage, rank] : owner_of) stages.push_back(stage);
  std::sort(stages.begin(), stages.end());
  for (std::size_t s = 0; s < stages.size(); ++s)
    if (stages[s] != static_cast<int>(s))
      throw UsageError("schedule " + name + ": stage " + std::to_string(s) + " has no action on any rank");
  std::vector<int> owner(stages.size());
  for (const auto& [stage, rank] : owner_of) owner[static_cast<std::size_t>(stage)] = rank;
  return owner;
}

bool Schedule::split_backward() const {
  for (const auto& actions : ranks)
    for (const Action& a : actions)
      if (a.work == Work::input_grad || a.work == Work::weight_grad) return true;
  return false;
}

namespace {

void require_shape(std::string_view name, int p, int m) {
  if (p < 1) throw UsageError("pipeline " + std::string(name) + ": " + std::to_string(p) + " stages; at least 1");
  if (m < 1) throw UsageError("pipeline " + std::string(name) + ": " + std::to_string(m) + " micro-batches; at least 1");
}

Schedule empty(std::string name, int p, int m) {
  Schedule s;
  s.name = std::move(name);
  s.micro_batches = m;
  s.ranks.resize(static_cast<std::size_t>(p));
  return s;
}

// Zero-bubble schedules by list scheduling in unit time (F = I = W = 1, free messages), as Qi et
// al. build them: at each step a free rank runs an I whose input gradient has arrived (the
// critical path: the previous stage waits for it), else a forward whose input has arrived if
// fewer than awaiting[r] of its micro-batches have run forward and not yet I, and fewer than
// limit[r] not yet W (a deferred W keeps the layer inputs its weight gradient reads: W cannot
// be put off without bound), else a deferred W, else waits. Forwards and Is of a stage go in micro-batch order;
// among stages of one rank, the later stage first (nearer the loss).
Schedule list_schedule(std::string name, int p, int m, const std::vector<int>& stage_rank, const std::vector<int>& awaiting,
                       const std::vector<int>& limit) {
  Schedule out = empty(std::move(name), p, m);
  const int stages = static_cast<int>(stage_rank.size());
  constexpr int kNever = std::numeric_limits<int>::max();
  // Time each (stage, micro-batch) forward / input gradient finished (kNever: not yet).
  std::vector<std::vector<int>> forward_done(stages, std::vector<int>(m, kNever)), input_done = forward_done;
  std::vector<int> next_forward(stages, 0), next_input(stages, 0), holding(p, 0), awaiting_input(p, 0);
  std::vector<std::deque<Action>> deferred(p);
  std::vector<std::vector<int>> stages_of(p);
  for (int s = stages - 1; s >= 0; --s) stages_of[stage_rank[s]].push_back(s);  // later stage first
  const int total = stages * m * 3;
  int done = 0;
  for (int t = 0; done < total; ++t) {
    if (t > 8 * total + 8) throw Error("pipeline " + out.name + ": list scheduling made no progress");
    std::vector<std::pair<int, Action>> finished;  // visible from t + 1
    for (int r = 0; r < p; ++r) {
      std::optional<Action> pick;
      for (int s : stages_of[r]) {
        const int b = next_input[s];
        if (b < m && forward_done[s][b] <= t && (s == stages - 1 || input_done[s + 1][b] <= t)) {
          pick = Action{s, Work::input_grad, b};
          break;
        }
      }
      if (!pick && awaiting_input[r] < awaiting[r] && holding[r] < limit[r])
        for (int s : stages_of[r]) {
          const int f = next_forward[s];
          if (f < m && (s == 0 || forward_done[s - 1][f] <= t)) {
            pick = Action{s, Work::forward, f};
            break;
          }
        }
      if (!pick && !deferred[r].empty()) {
        pick = deferred[r].front();
        deferred[r].pop_front();
      }
      if (!pick) continue;
      out.ranks[r].push_back(*pick);
      ++done;
      if (pick->work == Work::forward) {
        ++next_forward[pick->stage];
        ++holding[r];
        ++awaiting_input[r];
      } else if (pick->work == Work::weight_grad) {
        --holding[r];
      } else if (pick->work == Work::input_grad) {
        ++next_input[pick->stage];
        --awaiting_input[r];
        deferred[r].push_back({pick->stage, Work::weight_grad, pick->micro_batch});
      }
      finished.emplace_back(t + 1, *pick);
    }
    for (const auto& [when, a] : finished) {
      if (a.work == Work::forward) forward_done[a.stage][a.micro_batch] = when;
      if (a.work == Work::input_grad) input_done[a.stage][a.micro_batch] = when;
    }
  }
  return out;
}

}  // namespace

Schedule gpipe(int p, int m) {
  require_shape("gpipe", p, m);
  Schedule s = empty("gpipe", p, m);
  for (int r = 0; r < p; ++r) {
    for (int b = 0; b < m; ++b) s.ranks[r].push_back({r, Work::forward, b});
    for (int b = 0; b < m; ++b) s.ranks[r].push_back({r, Work::backward, b});
  }
  return s;
}

Schedule one_f_one_b(int p, int m) {
  require_shape("1f1b", p, m);
  Schedule s = empty("1f1b", p, m);
  for (int r = 0; r < p; ++r) {
    auto& a = s.ranks[r];
    const int warmup = std::min(p - r - 1, m);
    for (int b = 0; b < warmup; ++b) a.push_back({r, Work::forward, b});
    for (int b = 0; b + warmup < m; ++b) {
      a.push_back({r, Work::forward, b + warmup});
      a.push_back({r, Work::backward, b});
    }
    for (int b = m - warmup; b < m; ++b) a.push_back({r, Work::backward, b});
  }
  return s;
}

Schedule interleaved_1f1b(int p, int m, int v) {
  require_shape("interleaved", p, m);
  if (v < 1) throw UsageError("pipeline interleaved: " + std::to_string(v) + " chunks per rank; at least 1");
  if (m < p)
    throw UsageError("pipeline interleaved: " + std::to_string(m) + " micro-batches for " + std::to_string(p) +
                     " stages; interleaving needs at least as many micro-batches as stages");
  if (m % p != 0)
    throw UsageError("pipeline interleaved: " + std::to_string(m) + " micro-batches is not a multiple of the " +
                     std::to_string(p) + " stages (interleaving runs micro-batches in groups of p)");
  Schedule s = empty("interleaved", p, m);
  const int total = m * v;
  // The k-th forward (backward) of a rank: micro-batches in groups of p, each group through
  // every chunk in turn (backward: the chunks in reverse).
  const auto micro_batch = [&](int k) { return (k / (p * v)) * p + k % p; };
  const auto chunk = [&](int k, bool backward) {
    const int c = (k / p) % v;
    return backward ? v - 1 - c : c;
  };
  for (int r = 0; r < p; ++r) {
    auto& a = s.ranks[r];
    const auto forward = [&](int k) { a.push_back({chunk(k, false) * p + r, Work::forward, micro_batch(k)}); };
    const auto backward = [&](int k) { a.push_back({chunk(k, true) * p + r, Work::backward, micro_batch(k)}); };
    // Warm-up: enough forwards that the steady state never waits with equal costs.
    const int warmup = std::min((p - r - 1) * 2 + (v - 1) * p, total);
    for (int k = 0; k < warmup; ++k) forward(k);
    for (int k = 0; k + warmup < total; ++k) {
      forward(k + warmup);
      backward(k);
    }
    for (int k = total - warmup; k < total; ++k) backward(k);
  }
  return s;
}

Schedule zb_h1(int p, int m) {
  require_shape("zb-h1", p, m);
  std::vector<int> owner(p), awaiting(p), limit(p);
  for (int r = 0; r < p; ++r) {
    owner[r] = r;
    awaiting[r] = p - r;         // 1F1B's activations awaiting their input gradient
    limit[r] = awaiting[r] + p - 1;  // and at most p - 1 weight gradients deferred
  }
  return list_schedule("zb-h1", p, m, owner, awaiting, limit);
}

Schedule zb_h2(int p, int m) {
  require_shape("zb-h2", p, m);
  std::vector<int> owner(p), awaiting(p), limit(p);
  for (int r = 0; r < p; ++r) {
    owner[r] = r;
    awaiting[r] = 2 * (p - r) - 1;  // more warm-up forwards: the start's bubble filled
    limit[r] = awaiting[r] + p - 1;
  }
  return list_schedule("zb-h2", p, m, owner, awaiting, limit);
}

Schedule zb_v(int p, int m) {
  require_shape("zb-v", p, m);
  // 2p chunks of half a stage awaiting their input gradient (1F1B's p stages), and at most
  // p - 1 weight gradients deferred.
  std::vector<int> owner(2 * p), awaiting(p, 2 * p), limit(p, 3 * p - 1);
  for (int r = 0; r < p; ++r) {
    owner[r] = r;
    owner[2 * p - 1 - r] = r;
  }
  return list_schedule("zb-v", p, m, owner, awaiting, limit);
}

const std::vector<std::string>& schedule_names() {
  static const std::vector<std::string> names = {"gpipe", "1f1b", "interleaved", "zb-h1", "zb-h2", "zb-v"};
  return names;
}

std::int64_t action_count(std::string_view name, int p, int m, int v) {
  const std::int64_t chunks = name == "interleaved" ? v : name == "zb-v" ? 2 : 1;
  const std::int64_t per_micro_batch = name.substr(0, 3) == "zb-" ? 3 : 2;
  return static_cast<std::int64_t>(p) * chunks * static_cast<std::int64_t>(m) * per_micro_batch;
}

Schedule make_schedule(std::string_view name, int p, int m, int v) {
  if (name == "gpipe") return gpipe(p, m);
  if (name == "1f1b") return one_f_one_b(p, m);
  if (name == "interleaved") return interleaved_1f1b(p, m, v);
  if (name == "zb-h1") return zb_h1(p, m);
  if (name == "zb-h2") return zb_h2(p, m);
  if (name == "zb-v") return zb_v(p, m);
  std::string known;
  for (const auto& n : schedule_names()) known += (known.empty() ? "" : ", ") + n;
  throw UsageError("unknown pipeline schedule '" + std::string(name) + "' (known: " + known + ")");
}

std::string to_csv(const Schedule& schedule) {
  std::string out;
  for (const auto& actions : schedule.ranks) {
    for (std::size_t i = 0; i < actions.size(); ++i) {
      if (i) out += ',';
      out += actions[i].text();
    }
    out += '\n';
  }
  return out;
}

Schedule from_csv(std::string_view text, std::string name) {
  Schedule s;
  s.name = std::move(name);
  std::size_t at = 0;
  int line = 0;
  while (at < text.size()) {
    const std::size_t end = std::min(text.find('\n', at), text.size());
    std::string_view row = text.substr(at, end - at);
    at = end + 1;
    ++line;
    if (!row.empty() && row.back() == '\r') row.remove_suffix(1);
    auto& actions = s.ranks.emplace_back();
    std::size_t cell = 0;
    while (cell <= row.size() && !row.empty()) {
      const std::size_t comma = std::min(row.find(',', cell), row.size());
      std::string_view item = row.substr(cell, comma - cell);
      while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
      while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
      cell = comma + 1;
      if (item.empty()) continue;  // PyTorch leaves empty cells for idle steps
      try {
        actions.push_back(parse_action(item));
      } catch (const UsageError& e) {
        throw UsageError("schedule " + s.name + " line " + std::to_string(line) + " (rank " + std::to_string(line - 1) +
                         "): " + e.what());
      }
    }
  }
  // Blank lines at the end are the file's, not ranks; a rank of no action elsewhere holds no
  // stage, which a pipeline cannot have.
  while (!s.ranks.empty() && s.ranks.back().empty()) s.ranks.pop_back();
  int top = -1;
  for (const auto& actions : s.ranks)
    for (const Action& a : actions) top = std::max(top, a.micro_batch);
  s.micro_batches = top + 1;
  if (s.ranks.empty() || top < 0) throw UsageError("schedule " + s.name + ": no action");
  for (std::size_t r = 0; r < s.ranks.size(); ++r)
    if (s.ranks[r].empty())
      throw UsageError("schedule " + s.name + " line " + std::to_string(r + 1) + " (rank " + std::to_string(r) +
                       "): no action (a line without one; every rank runs a stage)");
  return s;
}

}  // namespace parity::parallel::pipeline
