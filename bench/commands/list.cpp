// parity list: what this parity knows, from its registries: collectives and their algorithms,
// types and reductions, training techniques, conformance case families with their counts,
// commands with the result groups they write; and, for the tests, each command's resume probe.
#include <algorithm>
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
    if (const auto& p = c->info().resume_probe) {
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

std::string json_string(const std::string& text) {
  std::string out = "\"";
  for (const char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\u%04x", static_cast<unsigned>(c));
      out += escaped;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

// Every result group any command writes, with its columns as declared in C++ (the schema the
// docs and the report scripts are checked against), as JSON.
int print_schema() {
  std::vector<const record::TableSpec*> tables;
  std::vector<std::vector<std::string>> writers;
  for (const Command* c : commands())
    for (const record::TableSpec* t : c->tables()) {
      const auto at = std::find(tables.begin(), tables.end(), t);
      if (at == tables.end()) {
        tables.push_back(t);
        writers.push_back({c->info().name});
      } else {
        writers[static_cast<std::size_t>(at - tables.begin())].push_back(c->info().name);
      }
    }
  std::printf("{\"schema\": %s, \"schema_version\": %lld, \"groups\": {", json_string(record::kSchemaName).c_str(),
              static_cast<long long>(record::kSchemaVersion));
  for (std::size_t i = 0; i < tables.size(); ++i) {
    const record::TableSpec& t = *tables[i];
    std::string commands_json;
    for (const auto& w : writers[i]) commands_json += (commands_json.empty() ? "" : ", ") + json_string(w);
    std::printf("%s\n  %s: {\"description\": %s, \"written_by\": [%s], \"columns\": [", i ? "," : "",
                json_string(t.group).c_str(), json_string(t.description).c_str(), commands_json.c_str());
    for (std::size_t k = 0; k < t.columns.size(); ++k) {
      const record::ColumnSpec& c = t.columns[k];
      std::printf("%s\n    {\"name\": %s, \"type\": \"%s\", \"unit\": %s, \"required\": %s}", k ? "," : "",
                  json_string(c.name).c_str(), std::string(record::name_of(c.type)).c_str(), json_string(c.unit).c_str(),
                  c.required ? "true" : "false");
    }
    std::printf("]}");
  }
  std::printf("\n}}\n");
  return kExitOk;
}

int print_everything() {
  std::printf("Collectives and algorithms (native = the backend's own, the baseline):\n");
  for (Collective c : kAllCollectives) {
    const CollectiveDescriptor& about = describe(c);
    std::printf("  %s  (busbw factor %s): %s%s%s\n", std::string(name_of(c)).c_str(), std::string(about.busbw_text).c_str(),
                std::string(about.summary).c_str(), about.block ? "; checked and benchmarked with " : "",
                std::string(about.block_pattern).c_str());
    for (const auto* d : algorithms_for(c)) std::printf("    %-20s %s\n", d->name.c_str(), d->summary.c_str());
  }
  std::printf("Data types: ");
  for (const auto& n : data_type_names()) std::printf("%s ", n.c_str());
  std::printf("\nReductions: ");
  for (const auto& n : reduce_op_names()) std::printf("%s ", n.c_str());
  std::printf("\n16-bit reduction modes (--half-accumulate): float32 (default), native\n");
  std::printf("Training techniques (conformance: training/<name>/* for data parallelism, ZeRO and the parameter "
              "server; tensor/*, pipeline/*, moe/*, checkpoint/* and the 16-bit cases of each for the others):\n");
  for (const auto& t : parallel::techniques())
    std::printf("  %-16s %s\n  %-16s step: %s; %s; optimizer %s\n", t.name.c_str(), t.summary.c_str(), "",
                t.schedule.c_str(), t.gradient_sync.c_str(), t.optimizer_step.c_str());
  std::printf("Conformance case families (parity check), their result groups and cases at world sizes 1..8:\n");
  for (const cases::CaseFamily* f : cases::case_families()) {
    std::printf("  %-12s %-20s", f->info().name.c_str(), f->info().table->group.c_str());
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
                c->info().ranks          ? joined(c->groups(), " ").c_str()
                : c->groups().empty()    ? "(no ranks, no result file)"
                                         : ("(no ranks) " + joined(c->groups(), " ")).c_str());
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
    const Option schema = o.flag("--schema", schema_,
                          "The result groups every command writes, with their columns (name, type, unit, required), as "
                          "JSON: the schema docs/results-schema.md describes");
    o.flag("--resume-probes", resume_probes_,
           "For the tests: each command's resume probe (how the registry's resume test runs it), one per line")
        .excludes(schema);
  }

  int run_here() override {
    if (schema_) return print_schema();
    return resume_probes_ ? print_resume_probes() : print_everything();
  }

 private:
  bool schema_ = false, resume_probes_ = false;
};

const RegisteredCommand<List> kList;

}  // namespace
}  // namespace parity::cli
