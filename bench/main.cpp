// The `parity` command line: run, check, bench collectives, report, list.
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "bench/cli/launcher.hpp"
#include "bench/cli/supervisor.hpp"
#include "bench/commands/commands.hpp"
#include "reference/parallel/pipeline/schedule.hpp"
#include "correctness/cases/checkpoint.hpp"
#include "correctness/cases/collectives.hpp"
#include "correctness/cases/moe.hpp"
#include "correctness/cases/tensor.hpp"
#include "correctness/cases/training.hpp"
#include "reference/core/error.hpp"
#include "reference/core/provenance.hpp"
#include "reference/cuda/device.hpp"

namespace fs = std::filesystem;
using namespace parity;
using namespace parity::cli;

namespace {

const char* const kExitCodes = kExitStatusHelp;

// Seconds: a finite number >= 0 (CLI11's own range check accepts nan and words its refusal of
// -1 with DBL_MAX written out in full).
CLI::Validator timeout_validator() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        char* end = nullptr;
        const double value = std::strtod(text.c_str(), &end);
        if (text.empty() || end == text.c_str() || *end != '\0' || !std::isfinite(value) || value < 0)
          return text + " is not a number of seconds >= 0 (0 disables the watchdog)";
        return "";
      },
      "SECONDS");
}

void add_common(CLI::App* app, CommonOptions& o, bool with_half = true) {
  app->add_option("--np", o.np, "Ranks to start. Outside mpirun/srun parity re-runs itself as `mpirun -n NP` "
                                "(adding --oversubscribe when NP exceeds the cores); under a launcher, the world given is used")
      ->check(CLI::Range(1, 1 << 20));
  app->add_option("--hostfile", o.hostfile, "Open MPI hostfile passed to mpirun (multi-host runs)")->check(CLI::ExistingFile);
  app->add_option("--out", o.out, "Result file (HDF5) [default: parity-<subcommand>-<UTC time>.h5 in the current directory]");
  app->add_flag("--force", o.force, "Overwrite an existing result file");
  app->add_flag("-q,--quiet", o.quiet, "No progress lines on stderr");
  app->add_option("-T,--timeout", o.timeout_seconds,
                  "Seconds one operation may take before the job is aborted, naming the rank and operation that "
                  "stalled; 0 disables")
      ->check(timeout_validator());
  if (with_half)
    app->add_option("--half-accumulate", o.half_accumulate,
                    "How float16/bfloat16 are reduced: float32 (widen, reduce in float32, round once to nearest even) "
                    "or native (every combination rounded to 16 bits)");
  app->add_option("--device", o.device,
                  "Where tensors and collective buffers live: cpu, or cuda (one GPU per rank chosen from the rank's "
                  "place on its host, round robin; several ranks may share a GPU)");
  app->add_option("--backend", o.backend,
                  "Communicator: auto (mpi on cpu; on cuda nccl, or mpi when ranks share a GPU and NCCL does not allow "
                  "it), mpi (device buffers staged through pinned host memory unless the MPI is CUDA-aware), nccl");
  app->add_option("--inject-stall", o.inject_stall_rank,
                  "Fault injection: this rank stops before the first operation, to see --timeout at work (a rank "
                  "of the world; -1 none)")
      ->check(CLI::Range(-1, 1 << 20));
}

void add_resume(CLI::App* app, CommonOptions& o) {
  app->add_option("--resume", o.resume,
                  "Continue an interrupted run from its partial result file (or FILE.journal): rows it finished are "
                  "taken, the rest run; the same command otherwise. The result replaces FILE unless --out is given");
}

void add_bench_options(CLI::App* app, BenchOptions& b) {
  app->add_option("-b,--minbytes", b.min_bytes, "Smallest message size in bytes (K, M, G suffixes)");
  app->add_option("-e,--maxbytes", b.max_bytes, "Largest message size");
  app->add_option("-i,--stepbytes", b.step_bytes, "Size increment when -f is 1");
  app->add_option("-f,--stepfactor", b.sweep.step_factor, "Size multiplication factor (1 = add -i instead)");
  app->add_option("-n,--iters", b.iterations, "Timed iterations per size");
  app->add_option("-w,--warmup_iters", b.warmup, "Untimed warm-up iterations per size");
  app->add_option("-c,--check", b.check_iterations, "Check iterations per size with crafted inputs; #wrong counts wrong elements over all ranks (0 = off)");
  app->add_option("-d,--datatype", b.datatypes, "Types, comma-separated, or all: float64 float32 float16 bfloat16 int32 int64");
  app->add_option("-o,--op", b.ops, "Reductions, comma-separated, or all: sum prod max min avg");
  app->add_option("-r,--root", b.root, "Root rank of reduce and broadcast");
  app->add_option("-a,--average", b.average, "Time reported across ranks: 0 rank 0, 1 mean, 2 min, 3 max");
  app->add_option("--coll", b.collectives,
                  "Collectives, comma-separated, or all: all_reduce reduce broadcast all_gather reduce_scatter all_to_all "
                  "all_to_all_v. all_to_all_v's counts are uneven: rank r sends rank p chunk x ((p + 2r + 1) mod 3) "
                  "elements (0, 1 or 2 chunks: 0 for some pairs at 2 ranks or more, a rank's own block 1 chunk), "
                  "chunk = size / ranks as all_to_all's; out of place only; size_bytes is the ranks' mean send "
                  "buffer (n chunks), each rank's own is in /bench/collectives_rank_times");
  app->add_option("--algo", b.algorithms, "Algorithms, comma-separated, or all (native always runs as the baseline): "
                                          "ring naive recursive_doubling rabenseifner binomial_tree pairwise");
}

void add_model_bench_options(CLI::App* app, ModelBenchOptions& m) {
  std::string names;
  for (const auto& p : model_presets()) names += " " + p.name + " (" + p.config.describe() + ");";
  app->add_option("--models", m.models, "GPT models, comma-separated:" + names);
  app->add_option("--batch", m.batch, "Sequences per step (per rank: every rank trains its own replica)");
  app->add_option("--steps", m.steps, "Timed training steps per model (the median is reported)");
  app->add_option("--warmup", m.warmup, "Untimed steps first");
  app->add_option("--dtype", m.dtype, "float32 or float64");
  app->add_option("--optimizer", m.optimizer, "adamw or sgd (with momentum)");
}

void add_parallel_bench_options(CLI::App* app, ParallelBenchOptions& p, bool scaling) {
  if (scaling) {
    p.model = "tiny";
    p.precisions = "float32";  // scaling trains in float32
    app->add_option("--model", p.model, "mlp, or a GPT preset (tiny, small, medium, large), trained in float32");
    app->add_option("--batch", p.batch, "Global batch (rows) of strong scaling; at least the number of ranks");
    app->add_option("--weak-batch", p.weak_batch, "Rows per rank of weak scaling");
    app->add_option("--bucket-sizes", p.bucket_sizes, "Gradient bucket sizes for the overlap measurement at the full "
                                                      "world, comma-separated (K, M suffixes)");
  } else {
    app->add_option("--model", p.model, "mlp (" + model::MlpConfig{256, 1024, 256, 4}.describe() +
                                            ") or a GPT preset (tiny, small, medium, large)");
    app->add_option("--strategies", p.strategies, "dp, zero1, zero2, zero3, comma-separated");
    app->add_option("--precision", p.precisions, "mixed (bfloat16 parameters and gradients, float32 master weights and "
                                                 "Adam moments: K = 12), float32, float64; comma-separated");
    app->add_option("--batch", p.batch, "Rows per rank");
  }
  app->add_option("--steps", p.steps, "Timed steps (scaling: the median is reported; memory: the last is measured)");
  app->add_option("--warmup", p.warmup, "Untimed steps first");
}

void add_tensor_bench_options(CLI::App* app, TensorBenchOptions& t) {
  std::string names;
  for (const auto& p : model_presets()) names += " " + p.name + " (" + p.config.describe() + ");";
  app->add_option("--model", t.model, "GPT preset:" + names);
  app->add_option("--tp", t.sizes, "Tensor-parallel sizes, comma-separated; each runs on the first t ranks [default: "
                                   "every size up to the world that divides the heads and the vocabulary]");
  app->add_option("--sp", t.sequence_parallel, "Sequence parallelism: off, on, or off,on (both; sizes above 1)");
  app->add_option("--grid", t.grid, "One grid over every rank instead of the sweep, e.g. tp=2,dp=2 (its product must "
                                    "be the world size)");
  app->add_option("--batch", t.batch, "Sequences per step (the global batch)");
  app->add_option("--steps", t.steps, "Timed steps (the median is reported)");
  app->add_option("--warmup", t.warmup, "Untimed steps first");
  app->add_option("--dtype", t.dtype, "float32 or float64");
}

void add_moe_bench_options(CLI::App* app, MoeBenchOptions& o) {
  std::string names;
  for (const auto& p : model_presets()) names += " " + p.name + " (" + p.config.describe() + ");";
  app->add_option("--model", o.model, "GPT preset:" + names);
  app->add_option("-E,--experts", o.experts, "Experts per MoE layer (a multiple of every ep size)");
  app->add_option("-k,--top-k", o.top_k, "Experts each token chooses (top_k and aux_free routers), 1..E");
  app->add_option("--capacity-factor", o.capacity_factor, "Capacity factor cf of the ep sweep and the router runs: an "
                                                          "expert takes ceil(k cf tokens / E) rows; inf: dropless");
  app->add_option("--capacity-factors", o.capacity_factors, "The dropped-fraction sweep (top_k router at the largest ep), "
                                                            "comma-separated, inf allowed");
  app->add_option("--routers", o.routers, "Routers compared at the largest ep (the first also runs the ep sweep): "
                                          "top_k, expert_choice, aux_free");
  app->add_option("--ep", o.ep_sizes, "Expert-parallel sizes, comma-separated; each runs on every rank with dp = world / "
                                      "ep [default: every size dividing the world and the experts]");
  app->add_option("--moe-every", o.moe_every, "An MoE FFN in every k-th block (blocks k-1, 2k-1, ...)");
  app->add_option("--moe-layers", o.moe_layers, "Or the MoE blocks by index, comma-separated (0-based)");
  app->add_flag("--shared-expert", o.shared_expert, "One more expert every token goes through, ungated");
  app->add_option("--batch", o.batch, "Sequences per step (the global batch, at least one per rank)");
  app->add_option("--steps", o.steps, "Timed steps (the median is reported; every step's routing is recorded)");
  app->add_option("--warmup", o.warmup, "Untimed steps first");
  app->add_option("--dtype", o.dtype, "float32 or float64");
  app->add_option("--all-to-all", o.all_to_all, "all_to_all_v algorithm of the exchange: native or pairwise");
}

void add_pipeline_bench_options(CLI::App* app, PipelineBenchOptions& o) {
  std::string names;
  for (const auto& n : parallel::pipeline::schedule_names()) names += (names.empty() ? "" : ", ") + n;
  app->add_option("--schedules", o.schedules, "Schedules, comma-separated: " + names);
  app->add_option("-p,--stages", o.stages, "Pipeline ranks p, comma-separated; each runs on the first p ranks [default: "
                                           "2, 4, 8, ... below the world, and the world]");
  app->add_option("-m,--micro-batches", o.micro_batches, "Micro-batches m, comma-separated [default: p, 2p, 4p]; a "
                                                         "schedule skips an m it cannot take");
  app->add_option("-v,--chunks", o.chunks, "Chunks per rank of interleaved");
  std::string presets;
  for (const auto& p : model_presets()) presets += " " + p.name + " (" + p.config.describe() + ");";
  app->add_option("--model", o.model, "GPT preset:" + presets);
  app->add_option("--layers", o.layers, "Transformer blocks [default: the preset's, at least as many as the most stages]");
  app->add_option("--rows", o.rows, "Sequences per micro-batch");
  app->add_option("--steps", o.steps, "Timed steps (the one of median makespan is kept)");
  app->add_option("--warmup", o.warmup, "Untimed steps first");
  app->add_option("--dtype", o.dtype, "float32 or float64");
}

void add_checkpoint_bench_options(CLI::App* app, CheckpointBenchOptions& o) {
  std::string presets;
  for (const auto& p : model_presets()) presets += " " + p.name + " (" + p.config.describe() + ");";
  app->add_option("--model", o.model, "GPT preset:" + presets);
  app->add_option("--layers", o.layers, "Transformer blocks L (0: the preset's)");
  app->add_option("--policies", o.policies,
                  "Policies, comma-separated: none, full, every<k> (1 <= k <= L), sqrt, selective, budget<bytes> (K, M, G "
                  "suffixes); none, the baseline, always runs [default: none, full, every k for k = 2..L, sqrt, "
                  "selective, and the budgets that keep a quarter, a half and three quarters of the blocks]");
  app->add_option("--batch", o.batch, "Sequences per step");
  app->add_option("--dropout", o.dropout, "Dropout probability (recompute must replay the masks)");
  app->add_option("--steps", o.steps, "Timed steps of each policy, each paired with a step without recompute");
  app->add_option("--warmup", o.warmup, "Untimed pairs first");
  app->add_option("--dtype", o.dtype,
                  "float64, float32, bfloat16 or float16 (16-bit: float32 master weights and optimizer state; float16 "
                  "with dynamic loss scaling)");
}

void add_precision_bench_options(CLI::App* app, PrecisionBenchOptions& o) {
  std::string presets;
  for (const auto& p : model_presets()) presets += " " + p.name + " (" + p.config.describe() + ");";
  app->add_option("--model", o.model, "GPT preset:" + presets);
  app->add_option("--layers", o.layers, "Transformer blocks L (0: the preset's)");
  app->add_option("--batch", o.batch, "Sequences per step over all ranks (at least one per rank)");
  app->add_option("--steps", o.steps, "Optimizer steps in each precision");
  app->add_option("--precisions", o.precisions,
                  "Comma-separated: float64, float32, bfloat16, float16 (16-bit: float32 master weights and optimizer "
                  "state)");
  app->add_option("--loss-scale", o.loss_scale,
                  "float16's initial loss scale, a power of two (dynamic: halved and the step skipped on inf or NaN in "
                  "any rank's gradients, doubled after --growth-interval clean steps)");
  app->add_option("--growth-interval", o.growth_interval, "Clean steps before float16's loss scale doubles");
}

// parity's own arguments without --np and --hostfile, for the relaunched ranks.
std::vector<std::string> arguments_for_ranks(int argc, char** argv, const std::string& out) {
  std::vector<std::string> args = {self_executable()};
  bool out_given = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--np" || a == "--hostfile") { ++i; continue; }
    if (a.rfind("--np=", 0) == 0 || a.rfind("--hostfile=", 0) == 0) continue;
    if (a == "--out" || a.rfind("--out=", 0) == 0) out_given = true;
    args.push_back(a);
  }
  // A default name carries a time stamp: fix it once so every rank agrees on it.
  if (!out_given && !out.empty()) { args.push_back("--out"); args.push_back(out); }
  return args;
}

std::vector<std::string> command_line(int argc, char** argv) {
  std::vector<std::string> out(argv, argv + argc);
  return out;
}

// Runs the ranks under mpirun, supervised, when asked for more than one rank outside a
// launcher, and returns the job's exit status; otherwise returns nothing and the caller
// starts MPI in this process (then SIGINT and SIGTERM end it with kExitInterrupted).
std::optional<int> maybe_relaunch(int argc, char** argv, CommonOptions& common, const std::string& what) {
  validate_device_options(common);
  apply_resume(common);
  if (under_launcher() || (common.np <= 1 && common.hostfile.empty())) {
    // Open MPI starts even one rank through its launcher's daemon: without mpirun (and orted
    // beside it) MPI_Init would fail with pages of text.
    if (!under_launcher()) {
      check_working_directory();
      find_mpirun();
    }
    handle_interrupts(under_launcher() ? launcher_rank() : -1);
    return std::nullopt;
  }
  if (common.out.empty()) common.out = default_output_path(what);
  record::check_output_path(common.out, common.force);
  // Held here for the whole job, so a second run refuses at once; the ranks are told.
  const record::OutputLock lock(common.out);
  setenv(record::OutputLock::kHeldVariable, fs::absolute(common.out).c_str(), 1);
  const Outcome outcome = relaunch({common.np, common.hostfile}, arguments_for_ranks(argc, argv, common.out));
  // A job cut short (a signal, a dead rank, a stall) leaves its journal: this process outlives
  // the ranks, so it keeps what they finished.
  std::string reason = outcome.line.rfind("parity: ", 0) == 0 ? outcome.line.substr(8) : outcome.line;
  if (reason.empty()) reason = "the job ended with status " + std::to_string(outcome.status);
  const int kept = write_partial_results(record::journal_path(common.out).string(), common.out, reason);
  record::remove_stale_temporaries(common.out);  // rank 0's, when it was killed outright
  return outcome.status != 0 ? outcome.status : kept;
}

// Runs `body` in an MPI session; maps refusals and faults to exit codes.
int with_session(int argc, char** argv, const CommonOptions& common, const std::string& subcommand,
                 const std::function<int(Session&)>& body) {
  std::unique_ptr<Session> session;
  try {
    session = std::make_unique<Session>(&argc, &argv, common, subcommand, command_line(argc, argv));
    return body(*session);
  } catch (const Session::Refused&) {
    if (session) session->keep_partial_results("refused: see the message before");
    return kExitUsage;
  } catch (const UsageError& e) {
    // Thrown identically on every rank (same arguments); only rank 0 speaks.
    if (!session || session->is_root()) std::fprintf(stderr, "parity: %s\n", e.what());
    if (session) session->keep_partial_results(std::string("refused: ") + e.what());
    return kExitUsage;
  } catch (const std::exception& e) {
    // A fault on one rank: end the whole job now rather than leave the others waiting. Abort
    // unwinds nothing, so what the run finished is kept and the temporary file removed first.
    if (session) session->keep_partial_results(std::string("a fault on rank ") + std::to_string(session->world().rank()) + ": " + e.what());
    record::discard_temporary_file();
    MpiRuntime::abort(std::string("parity: ") + e.what(), kExitFault);
  }
}

std::string reports_script() {
  std::vector<fs::path> candidates;
  if (const char* dir = std::getenv("PARITY_REPORTS_DIR")) candidates.emplace_back(fs::path(dir) / "parity_report.py");
  const fs::path exe = self_executable();
  candidates.push_back(exe.parent_path().parent_path() / "share/parity/reports/parity_report.py");
  candidates.push_back(fs::path(PARITY_SOURCE_DIR) / "reports/parity_report.py");
  for (const auto& c : candidates)
    if (fs::exists(c)) return c.string();
  throw UsageError("report scripts not found (looked in $PARITY_REPORTS_DIR, " + candidates[1].parent_path().string() +
                   ", " + candidates.back().parent_path().string() + ")");
}

std::string python() {
  if (const char* p = std::getenv("PARITY_PYTHON"); p && *p) return p;
  return access("/usr/bin/python3", X_OK) == 0 ? "/usr/bin/python3" : "python3";
}

fs::path default_report_dir(const std::string& file) {
  fs::path p(file);
  return p.parent_path() / (p.stem().string() + ".report");
}

// Checks the files and draws the report with the Python scripts; returns their exit status.
int draw_report(const std::vector<std::string>& files, std::string out_dir, bool force, bool quiet) {
  for (const auto& f : files) record::inspect(f);
  if (out_dir.empty()) out_dir = default_report_dir(files.front()).string();
  if (fs::exists(fs::path(out_dir) / "index.html") && !force)
    throw UsageError("report directory " + out_dir + " already holds a report; pass --force to overwrite");
  std::vector<std::string> command = {python(), reports_script()};
  command.insert(command.end(), files.begin(), files.end());
  command.push_back("--out");
  command.push_back(out_dir);
  std::vector<char*> argv;
  for (auto& a : command) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t child = fork();
  if (child == 0) {
    execvp(argv[0], argv.data());
    std::fprintf(stderr, "parity: could not start %s\n", argv[0]);
    _exit(127);
  }
  int status = 0;
  waitpid(child, &status, 0);
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : kExitFault;
  if (code == 127) throw UsageError("python3 not found; install python3-matplotlib python3-h5py (ci/setup.sh)");
  if (code == 0 && !quiet) std::fprintf(stderr, "[report] %s/index.html\n", out_dir.c_str());
  return code;
}

int list_everything() {
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
  std::printf("Conformance cases at world sizes 1..8: ");
  for (int n : {1, 2, 3, 4, 5, 8}) std::printf("%d:%zu ", n, cases::conformance_grid(n).size());
  std::printf("\nTraining and tensor-parallel cases at world sizes 1..8: ");
  for (int n = 1; n <= 8; ++n)
    std::printf("%d:%zu+%zu ", n, cases::training_grid(n).size(), cases::tensor_grid(n).size());
  std::printf("\nMixture-of-experts cases (parity check --filter 'moe/*') at world sizes 1..8: ");
  for (int n = 1; n <= 8; ++n) std::printf("%d:%zu ", n, cases::moe_grid(n).size());
  std::printf("\nActivation-checkpointing cases (parity check --filter 'checkpoint/*') at world sizes 1..8: ");
  for (int n = 1; n <= 8; ++n) std::printf("%d:%zu ", n, cases::checkpoint_grid(n).size());
  std::printf("\nCheckpoint policies: none, full (every block recomputed), every<k> (blocks 0, k, 2k, ...), sqrt "
              "(segments of ceil(sqrt L) blocks), selective (attention probabilities recomputed), budget<bytes> "
              "(the most blocks kept whose peak fits)");
  std::printf("\nMoE routers: top_k (k choices per token, capacity ceil(k cf N / E)), expert_choice (each expert "
              "takes its top ceil(cf N / E) tokens), aux_free (top_k on scores plus a per-expert bias moved by the load)");
  std::printf("\nResult schema version: %lld (docs/results-schema.md)\n", static_cast<long long>(record::kSchemaVersion));
  const auto devices = cuda::device_names();
  std::printf("CUDA code compiled: %s; GPUs visible: %zu\n", cuda::compiled_with_cuda() ? "yes" : "no", devices.size());
  std::printf("parity %s (%s)\n", parity_version().c_str(), git_commit().c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // Internal: the partial-results writer a rank starts when a signal or a stall ends its run.
  if (argc >= 2 && std::strcmp(argv[1], kWritePartialFlag) == 0) {
    if (argc != 5) {
      std::fprintf(stderr, "parity: usage: parity %s JOURNAL RESULT REASON\n", kWritePartialFlag);
      return kExitUsage;
    }
    return write_partial_results(argv[2], argv[3], argv[4]);
  }
  CLI::App app{"parity: reference implementation, conformance suite and benchmark of distributed training.\n"
               "Collectives run on real ranks (Open MPI), are checked against exact or float64 results, timed\n"
               "nccl-tests style, and recorded to HDF5; `parity report` draws the results."};
  app.footer(kExitCodes);
  app.require_subcommand(1);
  app.option_defaults()->always_capture_default();
  app.set_version_flag("--version", parity_version() + " (" + git_commit() + ")");

  CommonOptions run_common, check_common, bench_common, model_common, memory_common, scaling_common, tensor_common;
  TensorBenchOptions tensor_options;
  ModelBenchOptions model_options;
  ParallelBenchOptions memory_options, scaling_options;
  CheckOptions check_options;
  BenchOptions bench_options;
  std::vector<std::string> report_files;
  std::string report_out;
  bool report_force = false, report_quiet = false, run_no_report = false, run_quick = false;
  std::string run_report_dir;

  auto* run = app.add_subcommand("run", "The main job: conformance suite plus default benchmarks on the given ranks, "
                                        "one result file and its report");
  add_common(run, run_common);
  add_resume(run, run_common);
  run->add_flag("--quick", run_quick, "Smaller job: no 1 MiB/64 MiB conformance sizes, benchmark sizes up to 1 MiB");
  run->add_flag("--no-report", run_no_report, "Do not draw the report");
  run->add_option("--report-dir", run_report_dir, "Report directory [default: <result file without .h5>.report]");

  auto* check = app.add_subcommand("check", "Run the conformance cases and record each: the collectives (every "
                                            "collective x algorithm x type x reduction x size x placement), data "
                                            "parallelism and ZeRO, tensor, pipeline, mixture of experts and "
                                            "activation checkpointing (training/*, tensor/*, pipeline/*, moe/*, "
                                            "checkpoint/*)");
  add_common(check, check_common);
  add_resume(check, check_common);
  check->add_option("--filter", check_options.filter, "GoogleTest-style pattern on case names, e.g. "
                                                      "'all_reduce/ring/*:reduce/*-*/bfloat16/*'");
  check->add_flag("--no-large", [&](std::int64_t) { check_options.include_large = false; },
                  "Skip the 1 MiB + 3 and 64 MiB cases");
  check->add_flag("--list", check_options.list_only, "Print the matching case names for --np ranks and exit");

  auto* bench = app.add_subcommand("bench", "Benchmarks");
  bench->require_subcommand(1);
  auto* bench_collectives = bench->add_subcommand(
      "collectives", "Sweep message sizes for collectives and algorithms (nccl-tests options and columns); native is the "
                     "baseline, host copy bandwidth and alpha-beta constants are measured in the same run");
  add_common(bench_collectives, bench_common);
  add_resume(bench_collectives, bench_common);
  add_bench_options(bench_collectives, bench_options);

  auto* bench_model = bench->add_subcommand(
      "model", "Tokens per second and model FLOPs utilisation (MFU) of a GPT training step on every rank; the MFU "
               "denominator is the matrix-multiply rate measured in the same run; counted FLOPs must equal the formula");
  add_common(bench_model, model_common, false);
  add_resume(bench_model, model_common);
  add_model_bench_options(bench_model, model_options);

  auto* bench_memory = bench->add_subcommand(
      "memory", "Peak bytes per category on every rank for data parallelism and ZeRO stages 1-3 at world sizes 1 to "
                "--np, beside the ZeRO paper's model-state formulas (which must match), and the bytes each rank sent");
  add_common(bench_memory, memory_common, false);
  add_resume(bench_memory, memory_common);
  add_parallel_bench_options(bench_memory, memory_options, false);

  auto* bench_scaling = bench->add_subcommand(
      "scaling", "Strong and weak scaling of a data-parallel training step at 1 to --np ranks (speedup, efficiency, "
                 "Amdahl fit, alpha-beta prediction of the gradient all-reduce) and the communication hidden by "
                 "overlapping bucketed all-reduces with backward");
  add_common(bench_scaling, scaling_common, false);
  add_resume(bench_scaling, scaling_common);
  add_parallel_bench_options(bench_scaling, scaling_options, true);

  auto* bench_tensor = bench->add_subcommand(
      "tensor", "Tensor parallelism (Megatron) with and without sequence parallelism against the tensor-parallel size: "
                "step time, tokens/s, the tp group's communication and its alpha-beta prediction, bytes per layer, "
                "activation and parameter bytes per rank, beside the formulas (which must match)");
  add_common(bench_tensor, tensor_common, false);
  add_resume(bench_tensor, tensor_common);
  add_tensor_bench_options(bench_tensor, tensor_options);

  CommonOptions pipeline_bench_common;
  PipelineBenchOptions pipeline_bench_options;
  auto* bench_pipeline = bench->add_subcommand(
      "pipeline", "Pipeline schedules on real ranks against m (and p): step time, each rank's timeline on aligned "
                  "clocks, measured bubble beside the simulator fed with the measured action costs and the closed form, "
                  "peak activation bytes per rank beside the in-flight formula");
  add_common(bench_pipeline, pipeline_bench_common, false);
  add_pipeline_bench_options(bench_pipeline, pipeline_bench_options);

  CommonOptions moe_common;
  MoeBenchOptions moe_options;
  auto* bench_moe = bench->add_subcommand(
      "moe", "Mixture of experts with expert parallelism: step time split (all-to-all, gradient reduction, compute) "
             "against ep, load imbalance and balancing loss per router over the steps, dropped fraction against the "
             "capacity factor, tokens per expert per layer, all-to-all bytes beside the formula (which must match)");
  add_common(bench_moe, moe_common, false);
  add_resume(bench_moe, moe_common);
  add_moe_bench_options(bench_moe, moe_options);

  CommonOptions checkpoint_common;
  CheckpointBenchOptions checkpoint_options;
  auto* bench_checkpoint = bench->add_subcommand(
      "checkpoint", "Activation checkpointing: activation bytes stored and at the peak against step time for every "
                    "policy and k on one GPT, beside the formulas (which must match); the time overhead is measured "
                    "against steps without recompute in the same run, and the losses must agree bit for bit");
  add_common(bench_checkpoint, checkpoint_common, false);
  add_resume(bench_checkpoint, checkpoint_common);
  add_checkpoint_bench_options(bench_checkpoint, checkpoint_options);

  CommonOptions precision_common;
  PrecisionBenchOptions precision_options;
  auto* bench_precision = bench->add_subcommand(
      "precision", "Mixed precision: one GPT trained data-parallel in float64, float32, bfloat16 and float16 (float32 "
                   "master weights, float16 with dynamic loss scaling) from the same seed; every step's loss, loss "
                   "scale and skipped steps, for the report's loss and loss-scale curves");
  add_common(bench_precision, precision_common, false);
  add_resume(bench_precision, precision_common);
  add_precision_bench_options(bench_precision, precision_options);

  PipelineOptions pipeline_options;
  auto* pipeline = app.add_subcommand(
      "pipeline", "Pipeline schedules: check one (validate), time it (simulate) or train with it on real ranks against "
                  "one device (run); generated by name or read from a CSV in PyTorch's action notation (0F1, 1B0, 1I0, "
                  "1W0), one row per rank");
  pipeline->require_subcommand(1);
  auto* pipeline_validate_cmd = pipeline->add_subcommand(
      "validate", "Check a schedule: one forward and one backward (B, or I and W) per stage and micro-batch, each after "
                  "what it needs, sends and receives that pair up without deadlock; prints activations in flight");
  auto* pipeline_simulate_cmd = pipeline->add_subcommand(
      "simulate", "Time a schedule with the discrete-event simulator: per-rank busy and idle time, bubble, activations "
                  "in flight, beside the closed form of a generated schedule");
  CommonOptions pipeline_common;
  auto* pipeline_run_cmd = pipeline->add_subcommand(
      "run", "Run a schedule on real ranks (--np of them; a generated one spans them all): the conformance cases' GPT, "
             "split into its stages, trains --steps steps and is compared with the same training on one device "
             "(a row of /check/pipeline)");
  add_common(pipeline_run_cmd, pipeline_common, false);
  pipeline_run_cmd->add_option("--steps", pipeline_options.steps, "Optimizer steps")->capture_default_str();
  pipeline_run_cmd->add_option("--dtype", pipeline_options.dtype, "float64 or float32")->capture_default_str();
  pipeline_run_cmd->add_option("--inject-failure", pipeline_options.inject_failure,
                               "Fault injection: this action (e.g. 1B2) throws on its rank; the job ends naming the rank "
                               "and the action");
  for (auto* sub : {pipeline_validate_cmd, pipeline_simulate_cmd, pipeline_run_cmd}) {
    auto* file = sub->add_option("--schedule", pipeline_options.schedule_file, "CSV schedule, one row per rank")
                     ->check(CLI::ExistingFile);
    std::string names;
    for (const auto& n : parallel::pipeline::schedule_names()) names += (names.empty() ? "" : ", ") + n;
    sub->add_option("--name", pipeline_options.name, "Generated schedule: " + names)->excludes(file)->capture_default_str();
    if (sub != pipeline_run_cmd)
      sub->add_option("-p,--stages", pipeline_options.stages, "Ranks of the generated schedule")
          ->check(CLI::Range(1, 1024))->excludes(file)->capture_default_str();
    sub->add_option("-m,--micro-batches", pipeline_options.micro_batches, "Micro-batches per step")
        ->check(CLI::Range(1, 100000))->excludes(file)->capture_default_str();
    sub->add_option("-v,--chunks", pipeline_options.chunks, "Chunks per rank of interleaved")
        ->check(CLI::Range(1, 64))->excludes(file)->capture_default_str();
    sub->add_option("--write-csv", pipeline_options.write_csv, "Also write the schedule as CSV");
  }
  pipeline_simulate_cmd->add_option("--forward", pipeline_options.forward, "Seconds of a forward (F)")->capture_default_str();
  pipeline_simulate_cmd->add_option("--backward", pipeline_options.backward, "Seconds of a whole backward (B)")->capture_default_str();
  pipeline_simulate_cmd->add_option("--input-grad", pipeline_options.input_grad, "Seconds of a backward for the input (I)")
      ->capture_default_str();
  pipeline_simulate_cmd->add_option("--weight-grad", pipeline_options.weight_grad, "Seconds of a backward for the weights (W)")
      ->capture_default_str();
  pipeline_simulate_cmd->add_option("--alpha-us", pipeline_options.alpha_us, "Latency of a message between stages (us)")
      ->capture_default_str();
  pipeline_simulate_cmd->add_option("--bandwidth-GBps", pipeline_options.bandwidth_GBps, "Link bandwidth (GB/s)")
      ->capture_default_str();
  pipeline_simulate_cmd->add_option("--message-bytes", pipeline_options.message_bytes,
                                    "Bytes of one activation (or its gradient) sent between stages")
      ->capture_default_str();
  pipeline_simulate_cmd->add_flag("--timeline", pipeline_options.timeline, "Draw each rank's timeline");
  pipeline_simulate_cmd->add_option("--columns", pipeline_options.columns, "Width of the timeline")->capture_default_str();

  auto* report = app.add_subcommand("report", "Draw an HTML report with plots from one result file, or compare two");
  report->add_option("files", report_files, "One result file, or two to compare")->required()->expected(1, 2)->check(CLI::ExistingFile);
  report->add_option("--out", report_out, "Report directory [default: <first file without .h5>.report]");
  report->add_flag("--force", report_force, "Overwrite an existing report");
  report->add_flag("-q,--quiet", report_quiet, "Say nothing on success");

  auto* list = app.add_subcommand("list", "List collectives, algorithms, types, reductions and conformance case counts");

  // CLI11 words an unknown subcommand as a missing one; name it instead.
  if (argc > 1 && argv[1][0] != '-') {
    const std::string word = argv[1];
    bool known = false;
    for (const auto* sub : app.get_subcommands({})) known = known || sub->get_name() == word;
    const bool bad_bench = word == "bench" && argc > 2 && argv[2][0] != '-' && std::string(argv[2]) != "collectives" &&
                           std::string(argv[2]) != "model" && std::string(argv[2]) != "memory" &&
                           std::string(argv[2]) != "scaling" && std::string(argv[2]) != "tensor" &&
                           std::string(argv[2]) != "pipeline" && std::string(argv[2]) != "moe" &&
                           std::string(argv[2]) != "checkpoint" && std::string(argv[2]) != "precision";
    const bool bad_pipeline = word == "pipeline" && argc > 2 && argv[2][0] != '-' &&
                              std::string(argv[2]) != "validate" && std::string(argv[2]) != "simulate" &&
                              std::string(argv[2]) != "run";
    if (!known || bad_bench || bad_pipeline) {
      std::fprintf(stderr, "parity: unknown subcommand '%s' (known: run, check, bench collectives, bench model, bench memory, "
                           "bench scaling, bench tensor, bench pipeline, bench moe, bench checkpoint, bench precision, pipeline validate, pipeline simulate, pipeline run, report, list)\n",
                   bad_bench || bad_pipeline ? (word + " " + argv[2]).c_str() : word.c_str());
      return kExitUsage;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "parity: %s (see parity --help)\n", e.what());
    return kExitUsage;
  }

  try {
    if (*list) return list_everything();
    if (*pipeline_validate_cmd) return pipeline_validate(pipeline_options);
    if (*pipeline_simulate_cmd) return pipeline_simulate(pipeline_options);
    if (*pipeline_run_cmd) {
      // A broken schedule is refused here, before any rank starts. (Under a launcher the world
      // is known only once MPI starts; the ranks check it then.)
      if (!under_launcher()) load_pipeline_schedule(pipeline_options, pipeline_common.np);
      if (auto status = maybe_relaunch(argc, argv, pipeline_common, "pipeline-run")) return *status;
      return with_session(argc, argv, pipeline_common, "pipeline run",
                          [&](Session& s) { return pipeline_run(s, pipeline_options); });
    }
    if (*report) return draw_report(report_files, report_out, report_force, report_quiet);

    if (*check) {
      parse_half_accumulate(check_common.half_accumulate);
      if (check_options.list_only) {
        for (const auto& name : check_case_names(check_common.np, check_options)) std::printf("%s\n", name.c_str());
        return 0;
      }
      check_case_names(std::max(check_common.np, 1), check_options);  // a filter matching nothing fails here
      if (auto status = maybe_relaunch(argc, argv, check_common, "check")) return *status;
      return with_session(argc, argv, check_common, "check", [&](Session& s) {
        CheckOutcome outcome = run_check(s, check_options);
        write_check_tables(s, outcome);
        s.commit_results();
        return outcome.failed ? kExitFailed : 0;
      });
    }

    if (*bench_collectives) {
      parse_half_accumulate(bench_common.half_accumulate);
      BenchPlan plan = plan_bench(bench_options);
      bench_common.result_bytes = bench_result_bytes(plan);
      if (auto status = maybe_relaunch(argc, argv, bench_common, "bench")) return *status;
      return with_session(argc, argv, bench_common, "bench collectives", [&](Session& s) {
        check_bench_root(bench_options, s.world().size());
        s.check_memory(bench_bytes_per_rank(plan, s.world().size()), "the benchmark at -e " + bench_options.max_bytes);
        s.maybe_inject_stall();
        const HostCopy copy = measure_host_copy(s);
        const PointToPoint p2p = measure_point_to_point(s, plan.sizes.back());
        const BenchOutcome outcome = run_bench(s, plan, bench_options, p2p, copy.best_GBps);
        record_bench(s, copy, p2p, outcome, bench_options);
        s.commit_results();
        return 0;
      });
    }

    if (*bench_model) {
      const ModelBenchPlan plan = plan_model_bench(model_options);
      if (auto status = maybe_relaunch(argc, argv, model_common, "bench-model")) return *status;
      return with_session(argc, argv, model_common, "bench model", [&](Session& s) {
        s.check_memory(model_bench_bytes_per_rank(plan), "the model benchmark");
        s.maybe_inject_stall();
        const ModelBenchOutcome outcome = run_model_bench(s, plan, model_options);
        record_model_bench(s, outcome, model_options);
        s.commit_results();
        return 0;
      });
    }

    if (*bench_memory) {
      const ParallelBenchPlan plan = plan_parallel_bench(memory_options);
      if (auto status = maybe_relaunch(argc, argv, memory_common, "bench-memory")) return *status;
      return with_session(argc, argv, memory_common, "bench memory", [&](Session& s) {
        s.check_memory(parallel_bench_bytes_per_rank(memory_options), "the memory benchmark");
        s.maybe_inject_stall();
        const MemoryBenchOutcome outcome = run_memory_bench(s, plan, memory_options);
        record_parallel_bench(s, &outcome, nullptr);
        s.commit_results();
        return outcome.mismatches ? kExitFailed : 0;
      });
    }

    if (*bench_scaling) {
      const ParallelBenchPlan plan = plan_parallel_bench(scaling_options);
      if (auto status = maybe_relaunch(argc, argv, scaling_common, "bench-scaling")) return *status;
      return with_session(argc, argv, scaling_common, "bench scaling", [&](Session& s) {
        check_scaling_batch(s, scaling_options);
        s.check_memory(parallel_bench_bytes_per_rank(scaling_options), "the scaling benchmark");
        s.maybe_inject_stall();
        const PointToPoint p2p = measure_point_to_point(s, 1 << 20);
        const ScalingBenchOutcome outcome = run_scaling_bench(s, plan, scaling_options, p2p);
        record_point_to_point(s, p2p);  // the source of the alpha-beta predictions
        record_parallel_bench(s, nullptr, &outcome);
        s.commit_results();
        return 0;
      });
    }

    if (*bench_tensor) {
      check_tensor_bench_options(tensor_options);
      if (auto status = maybe_relaunch(argc, argv, tensor_common, "bench-tensor")) return *status;
      return with_session(argc, argv, tensor_common, "bench tensor", [&](Session& s) {
        const TensorBenchPlan plan = plan_tensor_bench(tensor_options, s.world().size());
        s.check_memory(tensor_bench_bytes_per_rank(plan, tensor_options.batch), "the tensor benchmark");
        s.maybe_inject_stall();
        const PointToPoint p2p = measure_point_to_point(s, 4 << 20);
        const TensorBenchOutcome outcome = run_tensor_bench(s, plan, tensor_options, p2p);
        record_point_to_point(s, p2p);  // the source of the alpha-beta predictions
        record_tensor_bench(s, outcome, tensor_options);
        s.commit_results();
        return outcome.mismatches ? kExitFailed : 0;
      });
    }

    if (*bench_pipeline) {
      if (!under_launcher()) plan_pipeline_bench(pipeline_bench_options, pipeline_bench_common.np);  // refused before ranks start
      if (auto status = maybe_relaunch(argc, argv, pipeline_bench_common, "bench-pipeline")) return *status;
      return with_session(argc, argv, pipeline_bench_common, "bench pipeline", [&](Session& s) {
        const PipelineBenchPlan plan = plan_pipeline_bench(pipeline_bench_options, s.world().size());
        s.check_memory(pipeline_bench_bytes_per_rank(plan, pipeline_bench_options), "the pipeline benchmark");
        s.maybe_inject_stall();
        const PointToPoint p2p = measure_point_to_point(s, 1 << 20);
        const PipelineBenchOutcome outcome = run_pipeline_bench(s, plan, pipeline_bench_options, p2p);
        record_point_to_point(s, p2p);  // the source of the simulated messages
        record_pipeline_bench(s, outcome, pipeline_bench_options);
        s.commit_results();
        return 0;
      });
    }

    if (*bench_moe) {
      if (!under_launcher()) plan_moe_bench(moe_options, moe_common.np);  // refused before ranks start
      if (auto status = maybe_relaunch(argc, argv, moe_common, "bench-moe")) return *status;
      return with_session(argc, argv, moe_common, "bench moe", [&](Session& s) {
        const MoeBenchPlan plan = plan_moe_bench(moe_options, s.world().size());
        s.check_memory(moe_bench_bytes_per_rank(plan, moe_options, s.world().size()), "the MoE benchmark");
        s.maybe_inject_stall();
        const MoeBenchOutcome outcome = run_moe_bench(s, plan, moe_options);
        record_moe_bench(s, outcome, moe_options);
        s.commit_results();
        return outcome.mismatches ? kExitFailed : 0;
      });
    }

    if (*bench_checkpoint) {
      const CheckpointBenchPlan plan = plan_checkpoint_bench(checkpoint_options);  // refused before ranks start
      if (auto status = maybe_relaunch(argc, argv, checkpoint_common, "bench-checkpoint")) return *status;
      return with_session(argc, argv, checkpoint_common, "bench checkpoint", [&](Session& s) {
        s.check_memory(checkpoint_bench_bytes_per_rank(plan), "the checkpoint benchmark");
        s.maybe_inject_stall();
        const CheckpointBenchOutcome outcome = run_checkpoint_bench(s, plan, checkpoint_options);
        record_checkpoint_bench(s, outcome, plan, checkpoint_options);
        s.commit_results();
        return outcome.mismatches ? kExitFailed : 0;
      });
    }

    if (*bench_precision) {
      const PrecisionBenchPlan plan = plan_precision_bench(precision_options);  // refused before ranks start
      if (auto status = maybe_relaunch(argc, argv, precision_common, "bench-precision")) return *status;
      return with_session(argc, argv, precision_common, "bench precision", [&](Session& s) {
        s.check_memory(precision_bench_bytes_per_rank(plan, precision_options.batch), "the precision benchmark");
        s.maybe_inject_stall();
        const PrecisionBenchOutcome outcome = run_precision_bench(s, plan, precision_options);
        record_precision_bench(s, outcome, plan, precision_options);
        s.commit_results();
        return outcome.failures ? kExitFailed : 0;
      });
    }

    if (*run) {
      parse_half_accumulate(run_common.half_accumulate);
      BenchOptions b;
      b.collectives = "all";
      b.algorithms = "all";
      b.min_bytes = "1K";
      b.max_bytes = run_quick ? "1M" : "64M";
      b.sweep.step_factor = 4;
      b.iterations = 10;
      b.warmup = 3;
      BenchPlan plan = plan_bench(b);
      CheckOptions c;
      c.include_large = !run_quick;
      ModelBenchOptions m;
      m.models = run_quick ? "tiny" : "tiny,small";
      m.steps = 3;
      const ModelBenchPlan model_plan = plan_model_bench(m);
      ParallelBenchOptions memory, scaling;
      scaling.model = "tiny";
      scaling.precisions = "float32";
      scaling.bucket_sizes = run_quick ? "64K" : "64K,1M";
      memory.steps = scaling.steps = run_quick ? 2 : 3;
      const ParallelBenchPlan memory_plan = plan_parallel_bench(memory), scaling_plan = plan_parallel_bench(scaling);
      TensorBenchOptions tensor;
      tensor.batch = 2;
      tensor.steps = run_quick ? 1 : 3;
      check_tensor_bench_options(tensor);
      PipelineBenchOptions pipeline;  // every schedule at p = 2, 4, ... and the world
      pipeline.steps = run_quick ? 1 : 2;
      MoeBenchOptions moe;  // every ep, router and a few capacity factors on the tiny GPT
      moe.steps = run_quick ? 2 : 4;
      moe.capacity_factors = run_quick ? "0.5,1,inf" : "0.5,1,1.25,2,inf";
      check_moe_bench_options(moe);
      CheckpointBenchOptions checkpoint;  // every policy and k on the tiny GPT
      checkpoint.layers = run_quick ? 4 : 8;
      checkpoint.steps = run_quick ? 2 : 3;
      const CheckpointBenchPlan checkpoint_plan = plan_checkpoint_bench(checkpoint);
      PrecisionBenchOptions precision;  // the tiny GPT in the four precisions
      precision.steps = run_quick ? 20 : 40;
      std::optional<int> launched = maybe_relaunch(argc, argv, run_common, "run");
      int status = launched ? *launched : with_session(argc, argv, run_common, "run", [&](Session& s) {
        check_bench_root(b, s.world().size());
        CheckOutcome conformance = run_check(s, c);
        s.check_memory(bench_bytes_per_rank(plan, s.world().size()), "the benchmark");
        const HostCopy copy = measure_host_copy(s);
        const PointToPoint p2p = measure_point_to_point(s, plan.sizes.back());
        const BenchOutcome outcome = run_bench(s, plan, b, p2p, copy.best_GBps);
        record_bench(s, copy, p2p, outcome, b);
        s.check_memory(model_bench_bytes_per_rank(model_plan), "the model benchmark");
        record_model_bench(s, run_model_bench(s, model_plan, m), m);
        check_scaling_batch(s, scaling);
        s.check_memory(parallel_bench_bytes_per_rank(memory), "the memory and scaling benchmarks");
        const MemoryBenchOutcome memory_outcome = run_memory_bench(s, memory_plan, memory);
        const ScalingBenchOutcome scaling_outcome = run_scaling_bench(s, scaling_plan, scaling, p2p);
        record_parallel_bench(s, &memory_outcome, &scaling_outcome);
        const TensorBenchPlan tensor_plan = plan_tensor_bench(tensor, s.world().size());
        s.check_memory(tensor_bench_bytes_per_rank(tensor_plan, tensor.batch), "the tensor benchmark");
        const TensorBenchOutcome tensor_outcome = run_tensor_bench(s, tensor_plan, tensor, p2p);
        record_tensor_bench(s, tensor_outcome, tensor);
        const PipelineBenchPlan pipeline_plan = plan_pipeline_bench(pipeline, s.world().size());
        s.check_memory(pipeline_bench_bytes_per_rank(pipeline_plan, pipeline), "the pipeline benchmark");
        record_pipeline_bench(s, run_pipeline_bench(s, pipeline_plan, pipeline, p2p), pipeline);
        moe.batch = std::max<std::int64_t>(moe.batch, s.world().size());
        const MoeBenchPlan moe_plan = plan_moe_bench(moe, s.world().size());
        s.check_memory(moe_bench_bytes_per_rank(moe_plan, moe, s.world().size()), "the MoE benchmark");
        const MoeBenchOutcome moe_outcome = run_moe_bench(s, moe_plan, moe);
        record_moe_bench(s, moe_outcome, moe);
        s.check_memory(checkpoint_bench_bytes_per_rank(checkpoint_plan), "the checkpoint benchmark");
        const CheckpointBenchOutcome checkpoint_outcome = run_checkpoint_bench(s, checkpoint_plan, checkpoint);
        record_checkpoint_bench(s, checkpoint_outcome, checkpoint_plan, checkpoint);
        precision.batch = std::max<std::int64_t>(precision.batch, s.world().size());
        const PrecisionBenchPlan precision_plan = plan_precision_bench(precision);
        s.check_memory(precision_bench_bytes_per_rank(precision_plan, precision.batch), "the precision benchmark");
        const PrecisionBenchOutcome precision_outcome = run_precision_bench(s, precision_plan, precision);
        record_precision_bench(s, precision_outcome, precision_plan, precision);
        write_check_tables(s, conformance);
        s.commit_results();
        run_common.out = s.options().out;
        return conformance.failed || memory_outcome.mismatches || tensor_outcome.mismatches || moe_outcome.mismatches ||
                       checkpoint_outcome.mismatches || precision_outcome.failures
                   ? kExitFailed
                   : 0;
      });
      // MPI is finalised now; rank 0 (or the only process) draws the report, not the parent.
      const bool rank0 = launcher_rank() == 0;
      if (!launched && rank0 && !run_no_report && status != kExitUsage && !run_common.out.empty() && fs::exists(run_common.out)) {
        const int report_status = draw_report({run_common.out}, run_report_dir, true, run_common.quiet);
        if (status == 0) status = report_status;
      }
      return status;
    }
  } catch (const UsageError& e) {
    std::fprintf(stderr, "parity: %s\n", e.what());
    return kExitUsage;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "parity: %s\n", e.what());
    return kExitFault;
  }
  return kExitUsage;
}
