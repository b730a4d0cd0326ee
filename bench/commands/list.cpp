// parity list: what this parity knows, from its registries: collectives and their algorithms,
// types and reductions, training techniques, conformance case families with their counts,
// commands with the result groups they write; and, for the tests, each command's resume probe.
#include <cstdio>
#include <string>

#include "bench/commands/command.hpp"
#include "correctness/cases/family.hpp"
#include "reference/comm/algorithms.hpp"
#include "reference/core/provenance.hpp"
#include "reference/cuda/device.hpp"
#include "reference/parallel/techniques/techniques.hpp"
#include "reference/record/results_file.hpp"

namespace parity::cli {
namespace {

std::string joined(const std::vector<std::string>& words, const char* separator) {
  std::string out;
  for (const auto& w : words) out += (out.empty() ? "" : separator) + w;
  return out;
}

// One line per command with ranks: NAME, then SIGNAL, GROUP, KEYS, BLOCKS, ALSO_TAKEN and
// ARGUMENTS separated by tabs (lists by spaces, "-" for an empty one), or NAME, "-" and why it
// has no probe.
int print_resume_probes() {
  for (const Command* c : commands()) {
    if (!c->info().ranks) continue;
    const std::string name = c->info().name;
    if (const auto p = c->resume_probe()) {
      std::string blocks;
      for (int b : p->blocks) blocks += (blocks.empty() ? "" : " ") + std::to_string(b);
      std::printf("%s\t%s\t%s\t%s\t%s\t%s\t%s\n", name.c_str(), p->signal.c_str(), p->group.c_str(), p->keys.c_str(),
                  blocks.c_str(), p->also_taken.empty() ? "-" : joined(p->also_taken, " ").c_str(),
                  joined(p->arguments, " ").c_str());
    } else {
      std::printf("%s\t-\t%s\n", name.c_str(),
                  c->info().no_probe_reason.empty() ? "(no probe and no reason given)" : c->info().no_probe_reason.c_str());
    }
  }
  return kExitOk;
}

int print_everything() {
  std::printf("Collectives and algorithms (native = the backend's own, the baseline):\n");
  for (Collective c : kAllCollectives) {
    std::printf("  %s  (busbw factor %s)%s\n", std::string(name_of(c)).c_str(),
                c == Collective::all_reduce ? "2(n-1)/n" : (is_chunked(c) || has_block_counts(c) ? "(n-1)/n" : "1"),
                has_block_counts(c) ? "  per-peer counts; checked and benchmarked with rank r sending rank p "
                                      "chunk x ((p + 2r + 1) mod 3)"
                                    : "");
    for (const auto* d : algorithms_for(c)) std::printf("    %-20s %s\n", d->name.c_str(), d->summary.c_str());
  }
  std::printf("Data types: ");
  for (const auto& n : data_type_names()) std::printf("%s ", n.c_str());
  std::printf("\nReductions: ");
  for (const auto& n : reduce_op_names()) std::printf("%s ", n.c_str());
  std::printf("\n16-bit reduction modes (--half-accumulate): float32 (default), native\n");
  std::printf("Training techniques (parity check --filter 'training/<name>/*'):\n");
  for (const auto& t : parallel::techniques())
    std::printf("  %-16s %s\n  %-16s step: %s; %s; optimizer %s\n", t.name.c_str(), t.summary.c_str(), "",
                t.schedule.c_str(), t.gradient_sync.c_str(), t.optimizer_step.c_str());
  std::printf("Conformance case families (parity check), their result groups and cases at world sizes 1..8:\n");
  for (const cases::CaseFamily* f : cases::case_families()) {
    std::printf("  %-12s %-20s", f->info().name.c_str(), f->info().group.c_str());
    for (int n = 1; n <= 8; ++n) std::printf(" %d:%zu", n, f->grid(n, {})->size());
    std::printf("\n");
  }
  std::printf("Checkpoint policies: none, full (every block recomputed), every<k> (blocks 0, k, 2k, ...), sqrt "
              "(segments of ceil(sqrt L) blocks), selective (attention probabilities recomputed), budget<bytes> "
              "(the most blocks kept whose peak fits)");
  std::printf("\nMoE routers: top_k (k choices per token, capacity ceil(k cf N / E)), expert_choice (each expert "
              "takes its top ceil(cf N / E) tokens), aux_free (top_k on scores plus a per-expert bias moved by the load)");
  std::printf("\nCommands (parity <command> --help) and the result groups they write:\n");
  for (const Command* c : commands())
    std::printf("  %-18s %s%s\n", c->info().name.c_str(), c->info().in_run ? "[in run] " : "",
                c->info().ranks ? joined(c->groups(), " ").c_str() : "(no ranks, no result file)");
  std::printf("Result schema version: %lld (docs/results-schema.md)\n", static_cast<long long>(record::kSchemaVersion));
  const auto devices = cuda::device_names();
  std::printf("CUDA code compiled: %s; GPUs visible: %zu\n", cuda::compiled_with_cuda() ? "yes" : "no", devices.size());
  std::printf("parity %s (%s)\n", parity_version().c_str(), git_commit().c_str());
  return kExitOk;
}

class List final : public Command {
 public:
  List()
      : Command({.name = "list",
                 .help = "List collectives, algorithms, types, reductions, training techniques, conformance case families "
                         "with their counts, and the commands with the result groups they write",
                 .order = 150,
                 .ranks = false}) {}

  void declare(CommandOptions& o) override {
    o.flag("--resume-probes", resume_probes_,
           "For the tests: each command's resume probe (how the registry's resume test runs it), one per line");
  }

  int run_here() override { return resume_probes_ ? print_resume_probes() : print_everything(); }

 private:
  bool resume_probes_ = false;
};

const RegisteredCommand<List> kList;

}  // namespace
}  // namespace parity::cli
