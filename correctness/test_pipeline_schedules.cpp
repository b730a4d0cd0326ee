// Pipeline schedules as data (reference/parallel/pipeline/): the simulator with equal costs
// reproduces the closed forms (reference/theory/pipeline.hpp) for many (p, m, v), activations
// in flight follow their formulas, CSV round-trips, and every rule of the validator rejects a
// schedule that breaks it with a line naming the rank and the action.
#include <gtest/gtest.h>

#include <string>
#include <tuple>

#include "reference/core/error.hpp"
#include "reference/parallel/pipeline/simulator.hpp"
#include "reference/theory/pipeline.hpp"

namespace parity::parallel::pipeline {
namespace {

// Sums of a few unit costs: exact in binary floating point, so equalities are exact.
constexpr double kExact = 1e-12;

TEST(PipelineSchedules, GPipeAnd1F1BBubbleAndActivationsFollowTheClosedForms) {
  for (int p = 1; p <= 6; ++p)
    for (int m : {1, p, 2 * p + 1, 4 * p}) {
      for (const Schedule& s : {gpipe(p, m), one_f_one_b(p, m)}) {
        SCOPED_TRACE(s.name + " p=" + std::to_string(p) + " m=" + std::to_string(m));
        const Timeline t = simulate(s, Costs::uniform(p, 1, 1, 1));  // F = 1, B = 2
        EXPECT_NEAR(t.makespan, (m + p - 1) * 3.0, kExact);
        for (int r = 0; r < p; ++r) {
          EXPECT_NEAR(t.bubble_fraction(r), theory::pipeline_bubble_fraction(p, m), kExact);
          EXPECT_NEAR(t.bubble_over_ideal(r), theory::pipeline_bubble_over_ideal(p, m), kExact);
          EXPECT_EQ(t.peak_in_flight[static_cast<std::size_t>(r)],
                    s.name == "gpipe" ? theory::gpipe_in_flight(m) : theory::one_f_one_b_in_flight(p, m, r));
          EXPECT_EQ(t.peak_held[static_cast<std::size_t>(r)], t.peak_in_flight[static_cast<std::size_t>(r)]);  // B frees all
        }
      }
    }
  // The worked example of the seed chapter: m = 32, p = 4 gives 3/35 of the step.
  EXPECT_NEAR(validate(one_f_one_b(4, 32)).bubble_fraction(0), 3.0 / 35, kExact);
}

TEST(PipelineSchedules, InterleavedBubbleIsDividedByTheChunks) {
  for (int p : {2, 3, 4})
    for (int v : {1, 2, 3})
      for (int m : {p, 2 * p, 4 * p}) {
        SCOPED_TRACE("p=" + std::to_string(p) + " v=" + std::to_string(v) + " m=" + std::to_string(m));
        const Schedule s = interleaved_1f1b(p, m, v);
        EXPECT_EQ(s.stage_count(), p * v);
        const std::vector<int> owner = s.stage_ranks();
        for (int stage = 0; stage < p * v; ++stage) EXPECT_EQ(owner[static_cast<std::size_t>(stage)], stage % p);
        // A chunk is 1/v of a stage: the same work per rank as 1F1B.
        const double chunk = 1.0 / v;
        const Timeline t = simulate(s, Costs::uniform(p, chunk, chunk, chunk));
        for (int r = 0; r < p; ++r) {
          EXPECT_NEAR(t.bubble_over_ideal(r), theory::interleaved_bubble_over_ideal(p, m, v), 1e-9);
          EXPECT_EQ(t.peak_in_flight[static_cast<std::size_t>(r)], theory::interleaved_in_flight(p, m, v, r));
        }
      }
}

TEST(PipelineSchedules, ZeroBubbleH1ReachesTheOneStepBoundAt1F1BMemory) {
  for (int p = 2; p <= 6; ++p)
    for (int m : {p, p + 1, 2 * p + 1, 4 * p}) {
      SCOPED_TRACE("p=" + std::to_string(p) + " m=" + std::to_string(m));
      const Schedule s = zb_h1(p, m);
      EXPECT_TRUE(s.split_backward());
      const Timeline t = simulate(s, Costs::uniform(p, 1, 1, 1));  // F = I = W
      for (int r = 0; r < p; ++r) {
        EXPECT_NEAR(t.bubble_over_ideal(r), theory::zb_h1_bubble_over_ideal(p, m, 1, 1, 1), kExact);
        EXPECT_EQ(t.peak_in_flight[static_cast<std::size_t>(r)], theory::one_f_one_b_in_flight(p, m, r));
        // Weight gradients are deferred, but not without bound: at most p - 1 more held.
        EXPECT_LE(t.peak_held[static_cast<std::size_t>(r)], theory::one_f_one_b_in_flight(p, m, r) + p - 1);
      }
      // A third of 1F1B's bubble with B = I + W.
      const Timeline one = simulate(one_f_one_b(p, m), Costs::uniform(p, 1, 1, 1));
      EXPECT_NEAR(t.bubble_over_ideal(0) * 3, one.bubble_over_ideal(0), kExact);
    }
  // The closed form's terms in their places, F + I - W over F + I + W: with F = I = W every
  // arrangement of them reads the same.
  EXPECT_DOUBLE_EQ(theory::zb_h1_bubble_over_ideal(4, 8, 1, 2, 0.5), 3 * 2.5 / (8 * 3.5));
  EXPECT_DOUBLE_EQ(theory::zb_h1_bubble_over_ideal(3, 6, 2, 1, 0.5), 2 * 2.5 / (6 * 3.5));
  for (int p = 2; p <= 5; ++p)
    for (int m : {p, 2 * p + 1})
      for (const auto& [f, i, w] : {std::tuple{1.0, 1.5, 0.5}, std::tuple{1.0, 0.75, 0.5}, std::tuple{2.0, 1.0, 0.5}}) {
        const Timeline u = simulate(zb_h1(p, m), Costs::uniform(p, f, i, w));
        EXPECT_NEAR(u.bubble_over_ideal(0), theory::zb_h1_bubble_over_ideal(p, m, f, i, w), 1e-12)
            << "p=" << p << " m=" << m << " F=" << f << " I=" << i << " W=" << w;
      }
}

TEST(PipelineSchedules, ZeroBubbleH2HoldsMoreAndIsNeverSlower) {
  for (int p = 2; p <= 6; ++p)
    for (int m : {p, 2 * p + 1, 4 * p})
      for (double w : {0.5, 1.0, 2.0}) {
        SCOPED_TRACE("p=" + std::to_string(p) + " m=" + std::to_string(m) + " W=" + std::to_string(w));
        const Costs costs = Costs::uniform(p, 1, 1, w);
        const Timeline h2 = simulate(zb_h2(p, m), costs), h1 = simulate(zb_h1(p, m), costs);
        EXPECT_LE(h2.makespan, h1.makespan + kExact);
        for (int r = 0; r < p; ++r) {
          EXPECT_LE(h2.peak_in_flight[static_cast<std::size_t>(r)], 2 * (p - r) - 1);
          EXPECT_LE(h2.peak_held[static_cast<std::size_t>(r)], 2 * (p - r) - 1 + p - 1);
        }
      }
}

TEST(PipelineSchedules, VShapeHoldsTwoChunksPerRankAndHalvesTheBubble) {
  for (int p = 2; p <= 6; ++p)
    for (int m : {p, 2 * p, 4 * p}) {
      SCOPED_TRACE("p=" + std::to_string(p) + " m=" + std::to_string(m));
      const Schedule s = zb_v(p, m);
      const std::vector<int> owner = s.stage_ranks();
      for (int r = 0; r < p; ++r) {
        EXPECT_EQ(owner[static_cast<std::size_t>(r)], r);
        EXPECT_EQ(owner[static_cast<std::size_t>(2 * p - 1 - r)], r);  // the last stage is on rank 0
      }
      // Chunks of half a stage: idle is (p - 1) chunk forwards, half of ZB-H1's.
      const Timeline t = simulate(s, Costs::uniform(p, 0.5, 0.5, 0.5));
      EXPECT_NEAR(t.makespan, 3.0 * m + (p - 1) * 0.5, kExact);
      // Activations of at most 2p half-stage chunks: 1F1B's p stages.
      EXPECT_LE(t.peak_in_flight[0], 2 * p);
      for (int r = 0; r < p; ++r) EXPECT_LE(t.peak_held[static_cast<std::size_t>(r)], 3 * p - 1);
      if (m >= 2 * p) {
        EXPECT_EQ(t.peak_in_flight[0], 2 * p);
      }
    }
}

TEST(PipelineSchedules, MessagesLengthenTheCriticalPath) {
  for (int p = 2; p <= 5; ++p)
    for (const Schedule& s : {gpipe(p, 1), one_f_one_b(p, 1), zb_h1(p, 1)}) {
      Costs c = Costs::uniform(p, 1, 1, 1);
      c.alpha_seconds = 0.25;
      c.message_bytes = 1000;
      c.seconds_per_byte = 0.25e-3;  // 0.5 s a message
      // One micro-batch: down and back up through p stages, 2 (p - 1) messages on the way.
      const double work = s.split_backward() ? p * 2.0 + 1 : p * 3.0;  // the W of stage 0 ends it
      EXPECT_NEAR(simulate(s, c).makespan, work + 2 * (p - 1) * 0.5, kExact) << s.name << " p=" << p;
    }
}

TEST(PipelineSchedules, CsvRoundTripsEveryGenerator) {
  for (const std::string& name : schedule_names()) {
    const Schedule s = make_schedule(name, 4, 8, 2);
    const Schedule back = from_csv(to_csv(s), name);
    EXPECT_EQ(back.ranks, s.ranks) << name;
    EXPECT_EQ(back.micro_batches, 8) << name;
    EXPECT_NO_THROW(validate(back)) << name;
  }
  // PyTorch's CSV leaves empty cells where a rank idles.
  const Schedule idle = from_csv("0F0,,0B0\n,1F0,1B0\n", "idle");
  EXPECT_EQ(idle.ranks[0].size(), 2u);
  EXPECT_EQ(idle.ranks[1][0], (Action{1, Work::forward, 0}));
  // Blank lines at the end (and a last line without its newline) are no ranks; a blank line
  // between ranks is a rank without a stage, refused naming its line.
  for (const char* csv : {"0F0,0B0\n1F0,1B0\n\n", "0F0,0B0\n1F0,1B0\n \r\n\n", "0F0,0B0\n1F0,1B0"})
    EXPECT_EQ(from_csv(csv, "t").ranks.size(), 2u) << csv;
  for (const char* csv : {"0F0,0B0\n\n1F0,1B0\n", "\n0F0,0B0\n1F0,1B0\n"}) {
    try {
      from_csv(csv, "t");
      ADD_FAILURE() << "a rank of no action was accepted: " << csv;
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find(": no action (a line without one; every rank runs a stage)"), std::string::npos) << e.what();
    }
  }
}

// The validator's message for `csv`, or "" when it accepts it.
std::string refusal(const std::string& csv) {
  try {
    validate(from_csv(csv, "t"));
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

TEST(PipelineSchedules, TheValidatorNamesRankActionAndRule) {
  EXPECT_EQ(refusal("0F0,0B0\n1F0,1B0\n"), "");
  EXPECT_EQ(refusal("0F0,0B0\n1B0,1F0\n"),
            "schedule t: rank 1, 1B0: runs before 1F0 on its rank (a backward needs its forward)");
  EXPECT_EQ(refusal("0F0,0F1,0B0,0B1\n1F0,1B0,1B1\n"),
            "schedule t: rank 1, 1F1: missing: every micro-batch needs one forward per stage");
  EXPECT_EQ(refusal("0F0,0F0,0B0\n1F0,1B0\n"), "schedule t: rank 0, 0F0: appears twice (each action runs once)");
  EXPECT_EQ(refusal("0F0,0I0\n1F0,1I0,1W0\n"), "schedule t: rank 0, 0W0: missing: an I needs its W");
  EXPECT_EQ(refusal("0F0,0W0,0I0\n1F0,1I0,1W0\n"),
            "schedule t: rank 0, 0W0: runs before 0I0 on its rank (W needs the I of the same micro-batch)");
  EXPECT_EQ(refusal("0F0,0B0,1F0\n1B0\n"),
            "schedule t: stage 1 has actions on rank 0 and on rank 1 (1B0); a stage lives on one rank");
  EXPECT_EQ(refusal("0F0,0B0\n2F0,2B0\n"), "schedule t: stage 1 has no action on any rank");
  // Named by far larger numbers than it holds: the same rules, read from what it holds.
  EXPECT_EQ(refusal("0F0,0B0\n2000000000F0,2000000000B0\n"), "schedule t: stage 1 has no action on any rank");
  EXPECT_EQ(refusal("0F0,0B0,0F1999999999,0B1999999999\n"),
            "schedule t: rank 0, 0F1: missing: every micro-batch needs one forward per stage");
  EXPECT_EQ(refusal("0F0,0F1999999999,0B0,0F1999999999\n"), "schedule t: rank 0, 0F1999999999: appears twice (each action runs once)");
  // Each rank waits for the other: rank 0's backward needs rank 1's, which comes after a forward
  // that needs rank 0's next forward.
  EXPECT_EQ(refusal("0F0,0B0,0F1,0B1\n1F1,1B1,1F0,1B0\n"),
            "schedule t deadlocks: rank 0 waits at 0B0 for 1B0 on rank 1; rank 1 waits at 1F1 for 0F1 on rank 0");
  try {
    from_csv("0F0,0X0\n", "t");
    ADD_FAILURE() << "an unknown action was accepted";
  } catch (const UsageError& e) {
    EXPECT_EQ(std::string(e.what()), "schedule t line 1 (rank 0): pipeline action '0X0': unknown kind 'X' (expected STAGE, "
                                     "one of F B I W, MICRO_BATCH, e.g. 2F0)");
  }
}

// A chain of one stage a rank, every backward waiting for the rank after it: the simulator
// visits a rank again when the rank it waits for has run (sweeping every rank for each step
// took 31 s at 100,000 ranks).
TEST(PipelineSchedules, ADeepChainRunsForwardThenBackBack) {
  constexpr int p = 100000;
  Schedule chain;
  chain.name = "chain";
  chain.micro_batches = 1;
  for (int r = 0; r < p; ++r) chain.ranks.push_back({{r, Work::forward, 0}, {r, Work::backward, 0}});
  const Timeline t = simulate(chain, Costs::uniform(p, 1, 1, 1));  // F = 1, B = 2
  EXPECT_NEAR(t.makespan, 3.0 * p, kExact);
  for (const int r : {0, p / 2, p - 1}) {
    const auto& done = t.ranks[static_cast<std::size_t>(r)];
    ASSERT_EQ(done.size(), 2u);
    EXPECT_NEAR(done[0].start, r, kExact);                        // after the r forwards before it
    EXPECT_NEAR(done[1].start, p + 2.0 * (p - 1 - r), kExact);    // after the backwards after it
  }
}

TEST(PipelineSchedules, BadShapesAreRefusedInOneLine) {
  EXPECT_THROW(interleaved_1f1b(4, 6, 2), UsageError);  // m not a multiple of p
  EXPECT_THROW(make_schedule("zb-x", 2, 2), UsageError);
  EXPECT_THROW(gpipe(0, 4), UsageError);
  EXPECT_THROW(one_f_one_b(2, 0), UsageError);
  try {
    interleaved_1f1b(4, 6, 2);
  } catch (const UsageError& e) {
    EXPECT_EQ(std::string(e.what()),
              "pipeline interleaved: 6 micro-batches is not a multiple of the 4 stages (interleaving runs micro-batches "
              "in groups of p)");
  }
}

}  // namespace
// The count `pipeline simulate` refuses sizes by is the count of the schedule made.
TEST(PipelineSchedules, ActionCountIsTheGeneratedSchedulesCount) {
  for (const std::string& name : schedule_names())
    for (int p : {1, 2, 4})
      for (int v : {2, 3}) {
        const int m = 2 * p * v;
        const Schedule s = make_schedule(name, p, m, v);
        std::int64_t held = 0;
        for (const auto& actions : s.ranks) held += static_cast<std::int64_t>(actions.size());
        EXPECT_EQ(action_count(name, p, m, v), held) << name << " p" << p << " m" << m << " v" << v;
      }
  EXPECT_EQ(action_count("zb-v", 1024, 100000), 614400000);  // 2 chunks x 3 actions: no overflow
}

// The interleaved schedule's warm-up against Narayanan et al. (2021) as Megatron-LM runs it:
// rank r of p with v chunks runs w = min(2 (p - r - 1) + (v - 1) p, m v) warm-up chunk
// forwards, then its steady state starts with one more forward before the first backward: the
// rank holds min(w + 1, m v) activations at its peak. Counts worked by hand, not by the generator.
TEST(PipelineSchedules, InterleavedWarmUpIsThePapersCount) {
  struct Expected {
    int p, m, v;
    std::vector<int> warmup;  // per rank
  };
  const std::vector<Expected> cases = {
      {4, 8, 2, {10, 8, 6, 4}},   // 2 (3 - r) + 4
      {2, 2, 3, {6, 4}},          // 2 (1 - r) + 4, rank 0's capped at m v = 6
      {4, 4, 2, {8, 8, 6, 4}},    // rank 0's 10 capped at m v = 8
      {3, 9, 3, {10, 8, 6}},      // 2 (2 - r) + 6
  };
  for (const Expected& c : cases) {
    const Schedule s = interleaved_1f1b(c.p, c.m, c.v);
    const Timeline t = simulate(s, Costs::uniform(c.p, 1.0 / c.v, 1.0 / c.v, 1.0 / c.v));
    for (int r = 0; r < c.p; ++r) {
      const auto& actions = s.ranks[static_cast<std::size_t>(r)];
      int forwards = 0;
      while (forwards < static_cast<int>(actions.size()) && actions[static_cast<std::size_t>(forwards)].work == Work::forward)
        ++forwards;
      const int warmup = c.warmup[static_cast<std::size_t>(r)];
      EXPECT_EQ(forwards, std::min(warmup + 1, c.m * c.v)) << "p" << c.p << " m" << c.m << " v" << c.v << " rank " << r;
      EXPECT_EQ(t.peak_in_flight[static_cast<std::size_t>(r)], std::min(warmup + 1, c.m * c.v))
          << "p" << c.p << " m" << c.m << " v" << c.v << " rank " << r;
    }
  }
}

// A hand-off between two stages on the same rank is no message (V-shaped schedules, CSVs with
// several stages a rank): F = 1, B = 2 and a message of 5 s between ranks, worked by hand.
TEST(PipelineSchedules, HandOffWithinARankCostsNoMessage) {
  Costs one = Costs::uniform(1, 1, 1, 1);
  one.alpha_seconds = 5;
  // One rank, two stages: 0F 1F 1B 0B back to back.
  EXPECT_NEAR(simulate(from_csv("0F0,1F0,1B0,0B0\n", "two stages"), one).makespan, 1 + 1 + 2 + 2, kExact);
  // Two ranks in a V (stages 0 and 3 on rank 0, 1 and 2 on rank 1), one micro-batch: the
  // chain 0F |5| 1F 2F |5| 3F 3B |5| 2B 1B |5| 0B crosses ranks four times: 12 + 4 x 5.
  Costs two = Costs::uniform(2, 1, 1, 1);
  two.alpha_seconds = 5;
  const Schedule v = from_csv("0F0,3F0,3B0,0B0\n1F0,2F0,2B0,1B0\n", "v");
  EXPECT_NEAR(simulate(v, two).makespan, 12 + 4 * 5, kExact);
  // zb-v at one micro-batch on two ranks has the same chain (I and W in place of B): its turn
  // at the V's bottom is on one rank too.
  const Timeline z = simulate(zb_v(2, 1), two);
  two.alpha_seconds = 0;
  EXPECT_NEAR(z.makespan - simulate(zb_v(2, 1), two).makespan, 4 * 5, kExact);
}

}  // namespace parity::parallel::pipeline
