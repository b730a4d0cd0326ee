// Activation checkpointing under GoogleTest at the world size mpirun gives: every case of
// cases::checkpoint_grid (suite "checkpoint", as `parity check` names them), recomputation with a
// fresh dropout seed shown to fail its case, and the policies a model cannot take refused.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "correctness/cases/checkpoint.hpp"
#include "correctness/mpi_test.hpp"
#include "reference/core/error.hpp"
#include "reference/parallel/checkpoint/checkpoint.hpp"
#include "reference/theory/model.hpp"

namespace parity::test {
namespace {

void register_grid(Communicator& comm) {
  register_cases<cases::CheckpointCase>("checkpoint", cases::checkpoint_grid(comm.size()), [](Communicator& world, const auto& c) {
    const cases::CheckpointResult r = cases::run_checkpoint_case(world, c);
    verbose(world, "%s: differing %lld, recomputed blocks %lld | %s\n", c.name().c_str(), static_cast<long long>(r.differing),
            static_cast<long long>(r.recomputed_blocks), r.message.c_str());
    EXPECT_TRUE(r.passed) << c.name() << ": " << r.message;
  });
}
const bool registered = add_registrar(register_grid);

class CheckpointFaults : public MpiTest {};

// Recomputing with another dropout seed draws other masks in backward than in forward: the
// gradients then differ from the run without recompute, and the case must say so.
TEST_F(CheckpointFaults, FreshDropoutSeedIsCaught) {
  const int n = comm().size();
  for (const std::string composition : {"alone", "zero3", "tp_sp", "pp"}) {
    if ((composition == "zero3" && n < 2) || (composition == "tp_sp" && n % 2 != 0) ||
        (composition == "pp" && (n < 2 || n > 4)))
      continue;
    for (const char* policy : {"full", "sqrt"}) {
      cases::CheckpointCase c;
      c.composition = composition;
      c.policy = policy;
      c.fault = "fresh_dropout_seed";
      const cases::CheckpointResult r = cases::run_checkpoint_case(comm(), c);
      EXPECT_FALSE(r.passed) << c.name() << " passed: " << r.message;
      EXPECT_GT(r.differing, 0) << c.name();
    }
  }
}

// Without the fault, the same case passes: the check rejects the fault, not the policy.
TEST_F(CheckpointFaults, SameCaseWithoutFaultPasses) {
  cases::CheckpointCase c;
  c.policy = "full";
  const cases::CheckpointResult r = cases::run_checkpoint_case(comm(), c);
  EXPECT_TRUE(r.passed) << r.message;
  EXPECT_EQ(r.differing, 0);
  EXPECT_GT(r.recomputed_blocks, 0);
}

theory::BlockActivationBytes some_bytes() { return theory::gpt_block_activation_bytes(8, 2, 16, 2, 8, 8); }

void expect_refused(const std::string& policy, int blocks, const std::string& words) {
  try {
    parallel::check_checkpoint_policy(parallel::parse_checkpoint_policy(policy), blocks, some_bytes());
    ADD_FAILURE() << policy << " accepted for " << blocks << " blocks";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
  }
}

TEST(CheckpointPolicies, BadInputIsRefused) {
  expect_refused("every0", 4, "at least 1");
  expect_refused("every5", 4, "outside 1..4");
  const theory::BlockActivationBytes b = some_bytes();
  expect_refused("budget" + std::to_string(b.whole + b.branch - 1), 4, "below one block's working set");
  // Above one block's working set but below what recomputing all four needs.
  const std::int64_t full_peak = theory::checkpoint_activation_bytes(theory::full_layout(4), b).peak;
  expect_refused("budget" + std::to_string(full_peak - 1), 4, "below what recomputing every block needs");
  expect_refused("checkpoint", 4, "unknown checkpoint policy");
  expect_refused("everyx", 4, "not a whole number");
  expect_refused("budget-5", 4, "not a whole number");
}

TEST(CheckpointPolicies, NamesRoundTrip) {
  for (const char* name : {"none", "full", "every3", "sqrt", "selective", "budget4096"})
    EXPECT_EQ(parallel::parse_checkpoint_policy(name).name(), name);
  EXPECT_EQ(parallel::parse_checkpoint_policy("every:2").name(), "every2");
  // Budgets in bytes with K, M, G (powers of 1024), either case.
  const std::pair<const char*, std::int64_t> budgets[] = {{"budget:64K", 64 << 10}, {"budget3m", 3 << 20},
                                                          {"budget2G", std::int64_t{2} << 30}, {"budget4096", 4096}};
  for (const auto& [text, bytes] : budgets) {
    const parallel::CheckpointPolicy policy = parallel::parse_checkpoint_policy(text);
    EXPECT_EQ(policy.kind, parallel::CheckpointPolicy::Kind::budget) << text;
    EXPECT_EQ(policy.budget_bytes, bytes) << text;
  }
  EXPECT_THROW(parallel::parse_checkpoint_policy("budget9000000000G"), UsageError);  // past int64
}

// The budget's rule: the most blocks kept (the last ones) whose peak fits.
TEST(CheckpointPolicies, BudgetKeepsTheMostThatFit) {
  const theory::BlockActivationBytes b = some_bytes();
  const auto peak_keeping = [&](int kept) { return theory::checkpoint_activation_bytes(theory::budget_layout(4, kept), b).peak; };
  for (int kept = 0; kept <= 4; ++kept) {
    const std::int64_t budget = peak_keeping(kept);
    const auto layout = parallel::checkpoint_layout(parallel::parse_checkpoint_policy("budget" + std::to_string(budget)), 4, b);
    const int chosen = 4 - layout.recomputed_blocks();
    EXPECT_GE(chosen, kept) << "budget " << budget;
    EXPECT_LE(theory::checkpoint_activation_bytes(layout, b).peak, budget);
    if (chosen < 4) {
      EXPECT_GT(peak_keeping(chosen + 1), budget) << "budget " << budget << " could keep " << chosen + 1;
    }
    for (int i = 0; i < 4; ++i) EXPECT_EQ(layout.segment[static_cast<std::size_t>(i)] < 0, i >= 4 - chosen) << i;
  }
}

// Keeping the last block costs nothing over recomputing it (its backward runs first, at the
// same moment its recompute would), so a budget that full recompute fits keeps at least one
// block; a byte below full recompute's peak fits nothing (-1) and the policy is refused.
TEST(CheckpointPolicies, BudgetBelowFullRecomputeIsRefused) {
  const theory::BlockActivationBytes b = some_bytes();
  for (int L = 2; L <= 8; ++L) {
    const std::int64_t full = theory::checkpoint_activation_bytes(theory::full_layout(L), b).peak;
    EXPECT_EQ(theory::checkpoint_activation_bytes(theory::budget_layout(L, 1), b).peak, full) << L;
    EXPECT_GE(theory::budget_kept_blocks(L, b, full), 1) << L;
    EXPECT_EQ(theory::budget_kept_blocks(L, b, full - 1), -1) << L;
    EXPECT_NO_THROW(parallel::check_checkpoint_policy(parallel::parse_checkpoint_policy("budget" + std::to_string(full)), L, b));
    EXPECT_THROW(parallel::check_checkpoint_policy(parallel::parse_checkpoint_policy("budget" + std::to_string(full - 1)), L, b),
                 UsageError)
        << L;
  }
}

// A layout as text, one character a block: '-' kept, else its segment, numbered from 0 in the
// order segments first appear ("0--1--2": blocks 0, 3 and 6 recomputed, each alone).
std::string layout_text(const theory::CheckpointLayout& layout) {
  std::string out;
  std::vector<int> seen;
  for (int segment : layout.segment) {
    if (segment < 0) {
      out += '-';
      continue;
    }
    auto at = std::find(seen.begin(), seen.end(), segment);
    if (at == seen.end()) at = seen.insert(seen.end(), segment);
    out += static_cast<char>('0' + (at - seen.begin()) % 10);
  }
  return out;
}

// Which blocks each policy recomputes, and with which others, against the policies' own
// definitions written out by hand (the bytes tests compare a layout only with itself): full,
// every block alone (Chen et al.'s n = 1); every k, blocks 0, k, 2k, ... alone; sqrt, segments of
// ceil(sqrt L) consecutive blocks; selective, every block kept with its attention probabilities
// recomputed; none, every block kept.
TEST(CheckpointPolicies, LayoutsFollowTheirDefinitions) {
  const theory::BlockActivationBytes b = some_bytes();
  const auto of = [&](const char* name, int L) {
    return layout_text(parallel::checkpoint_layout(parallel::parse_checkpoint_policy(name), L, b));
  };
  EXPECT_EQ(of("none", 5), "-----");
  EXPECT_EQ(of("full", 5), "01234");
  EXPECT_EQ(of("every1", 4), "0123");
  EXPECT_EQ(of("every2", 5), "0-1-2");
  EXPECT_EQ(of("every3", 7), "0--1--2");
  EXPECT_EQ(of("every4", 4), "0---");
  EXPECT_EQ(of("sqrt", 4), "0011");        // ceil(sqrt 4) = 2
  EXPECT_EQ(of("sqrt", 7), "0001112");     // ceil(sqrt 7) = 3
  EXPECT_EQ(of("sqrt", 10), "0000111122");  // ceil(sqrt 10) = 4
  EXPECT_EQ(of("sqrt", 1), "0");
  EXPECT_EQ(of("selective", 3), "---");
  EXPECT_TRUE(parallel::checkpoint_layout(parallel::parse_checkpoint_policy("selective"), 3, b).selective);
  for (const char* name : {"none", "full", "every2", "sqrt"})
    EXPECT_FALSE(parallel::checkpoint_layout(parallel::parse_checkpoint_policy(name), 4, b).selective) << name;
  EXPECT_EQ(theory::every_layout(7, 3).recomputed_blocks(), 3);
  EXPECT_EQ(theory::sqrt_layout(7).recomputed_blocks(), 7);
  EXPECT_EQ(theory::sqrt_layout(7).segments(), 3);
}

// The layouts' closed forms (Chen et al. 2016; Korthikanti et al. 2022) from the walk over the
// blocks: full stores one output per block (2sbh per layer at 16 bits) and peaks at one block's
// working set above the rest; sqrt stores one output per segment; selective stores everything
// but the probabilities (Korthikanti's 34sbh at 16 bits, less the 2sbh of masks parity does not
// store, plus the LayerNorm statistics).
TEST(CheckpointTheory, ClosedForms) {
  const std::int64_t s = 8, b = 3, h = 16, a = 2;
  const theory::BlockActivationBytes x = theory::gpt_block_activation_bytes(s, b, h, a, 2, 4);
  EXPECT_EQ(x.output, 2 * s * b * h);
  EXPECT_EQ(x.whole - x.probabilities, 32 * s * b * h + 16 * s * b);
  EXPECT_EQ(static_cast<double>(x.whole - x.probabilities),
            theory::korthikanti_layer_activation_bytes(s, b, h, a) - 5.0 * a * s * s * b - 2.0 * s * b * h + 16.0 * s * b);
  for (int L : {1, 2, 4, 9, 10}) {
    const auto none = theory::checkpoint_activation_bytes(theory::none_layout(L), x);
    EXPECT_EQ(none.stored, L * x.whole);
    EXPECT_EQ(none.peak, L * x.whole + x.branch);
    const auto full = theory::checkpoint_activation_bytes(theory::full_layout(L), x);
    EXPECT_EQ(full.stored, L * x.output) << L;
    EXPECT_EQ(full.peak, (L - 1) * x.output + x.whole + x.branch) << L;
    const theory::CheckpointLayout sqrt_layout = theory::sqrt_layout(L);
    const int n = static_cast<int>(std::ceil(std::sqrt(static_cast<double>(L))));
    EXPECT_EQ(sqrt_layout.segments(), (L + n - 1) / n) << L;
    EXPECT_EQ(theory::checkpoint_activation_bytes(sqrt_layout, x).stored, sqrt_layout.segments() * x.output) << L;
    const auto selective = theory::checkpoint_activation_bytes(theory::selective_layout(L), x);
    EXPECT_EQ(selective.stored, L * (x.whole - x.probabilities)) << L;
    EXPECT_EQ(theory::recompute_flops(theory::full_layout(L), b, s, h), L * theory::gpt_block_forward_flops(b, s, h));
    EXPECT_EQ(theory::recompute_flops(theory::selective_layout(L), b, s, h), L * 4 * b * s * s * h);
  }
}

}  // namespace
}  // namespace parity::test
