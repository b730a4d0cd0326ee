// Pipeline schedules as data: for each rank, the ordered actions it runs. An action is a
// stage (a contiguous block of layers; a rank holds one stage, or v chunks in interleaved and
// V-shaped schedules), a kind of work and a micro-batch, written as PyTorch's pipelining
// schedules write it: "2F0" forward of stage 2 on micro-batch 0, "1B3" full backward, "1I3"
// backward for the input (the activation gradient the previous stage waits for), "1W3"
// backward for the weights (deferrable). Sends and receives are implied: a forward of stage s
// needs stage s-1's output of the same micro-batch, a backward (B or I) of stage s needs
// stage s+1's input gradient; between stages on different ranks that is one message.
//
// Generators (p ranks, m micro-batches):
//   gpipe         every forward, then every backward (Huang et al. 2019)
//   1f1b          PipeDream-Flush: p - r - 1 warm-up forwards on rank r, then one forward and
//                 one backward in turn (Narayanan et al. 2021)
//   interleaved   1F1B over v chunks per rank, rank r holding stages r, r + p, ...; forwards in
//                 groups of p micro-batches per chunk (Narayanan et al. 2021, m a multiple of p)
//   zb-h1, zb-h2  backward split into I and W (Qi et al. 2023): I as soon as it can run, W
//                 fills the waits; H1 keeps 1F1B's activations awaiting I, H2 about twice;
//                 at most p - 1 W deferred on a rank (a deferred W holds its layer inputs)
//   zb-v          two chunks per rank in a V (stage s on rank s, stage 2p-1-s on rank s), I
//                 and W split as in zb-h1 (Qi et al. 2024)
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace parity::parallel::pipeline {

enum class Work : char { forward = 'F', backward = 'B', input_grad = 'I', weight_grad = 'W' };

struct Action {
  int stage = 0;
  Work work = Work::forward;
  int micro_batch = 0;
  std::string text() const;  // "2F0"
  bool operator==(const Action&) const = default;
};
// Parses "2F0"; throws UsageError naming the text and what is wrong with it.
Action parse_action(std::string_view text);

struct Schedule {
  std::string name;
  int micro_batches = 0;
  std::vector<std::vector<Action>> ranks;  // each rank's actions, in the order it runs them
  int rank_count() const { return static_cast<int>(ranks.size()); }
  int stage_count() const;  // 1 + the largest stage named
  // The rank holding each stage; throws UsageError when a stage is on no rank or on several.
  std::vector<int> stage_ranks() const;
  // Whether backward is split into I and W (every backward of the schedule is).
  bool split_backward() const;
};

Schedule gpipe(int p, int m);
Schedule one_f_one_b(int p, int m);
Schedule interleaved_1f1b(int p, int m, int v);
Schedule zb_h1(int p, int m);
Schedule zb_h2(int p, int m);
Schedule zb_v(int p, int m);
// By name (schedule_names()); v is the chunks per rank of "interleaved". Throws UsageError
// for input the schedule cannot take (m < p where it needs m >= p, m not a multiple of p
// for interleaving, ...), in one line.
Schedule make_schedule(std::string_view name, int p, int m, int v = 2);
const std::vector<std::string>& schedule_names();
// The actions make_schedule(name, p, m, v) holds, without making it: p x chunks stages (v for
// interleaved, 2 for zb-v, else 1), each with m forwards and m backwards, or m I and m W where
// the backward is split (zb-*). For refusing sizes that would not fit in memory.
std::int64_t action_count(std::string_view name, int p, int m, int v = 2);

// CSV: one line per rank, its actions in order, comma-separated ("0F0,0F1,0B0,..."); an empty
// line is a rank with no action. The number of micro-batches is 1 + the largest named.
std::string to_csv(const Schedule& schedule);
Schedule from_csv(std::string_view text, std::string name);

}  // namespace parity::parallel::pipeline
