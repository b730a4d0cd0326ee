// The supervisor's reading of mpirun's stderr (bench/cli/supervisor.hpp), on text recorded from
// Open MPI 4.1: which rank died, which stalled and which waited, launch failures, and the exit
// status each comes to. The processes themselves are exercised by correctness/cli/faults.sh.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <csignal>
#include <new>
#include <stdexcept>
#include <sstream>
#include <string>
#include <vector>

#include "bench/cli/session.hpp"
#include "bench/cli/supervisor.hpp"
#include "reference/core/error.hpp"

namespace parity::cli {
namespace {

constexpr const char* kRule = "--------------------------------------------------------------------------";

// Feeds `text` line by line; returns the lines shown to the user.
std::string feed(LauncherDigest& digest, const std::string& text) {
  std::istringstream in(text);
  std::string line, shown;
  while (std::getline(in, line))
    if (digest.take(line)) shown += line + "\n";
  return shown;
}

int exited(int code) { return (code & 0xff) << 8; }  // a wait status for exit(code)

TEST(LauncherDigest, NamesTheRankAndHostThatDied) {
  LauncherDigest d(3);
  const std::string shown = feed(d, std::string("[bench] 3/12 all_reduce\n") + kRule +
                                        "\nmpirun noticed that process rank 2 with PID 0 on node node-b exited on signal 9 (Killed).\n" +
                                        kRule + "\n");
  EXPECT_EQ(shown, "[bench] 3/12 all_reduce\n");  // the ranks' own lines pass, Open MPI's do not
  const Outcome o = d.outcome(exited(137), 0);
  EXPECT_EQ(o.status, kExitRankDied);
  EXPECT_EQ(o.line, "parity: rank 2 on node-b died (signal 9, Killed); the job was stopped");
}

TEST(LauncherDigest, NamesTheRankThatNeverEnteredAndTheOnesThatWaited) {
  LauncherDigest d(4);
  const std::string shown = feed(
      d,
      "parity: rank 3 on b: all_reduce 1024 x float32 (sum) stalled: not finished after 2.01 s; aborting the job (--timeout 2)\n"
      "parity: rank 0 on a: all_reduce 1024 x float32 (sum) stalled: not finished after 2.03 s; aborting the job (--timeout 2)\n"
      "parity: rank 1 on a: all_reduce 1024 x float32 (sum) stalled: not finished after 2 s; aborting the job (--timeout 2)\n");
  EXPECT_EQ(shown, "");  // one summary instead of a line per rank
  const Outcome o = d.outcome(exited(3), 0);
  EXPECT_EQ(o.status, kExitStalled);
  EXPECT_EQ(o.line, "parity: all_reduce 1024 x float32 (sum) stalled past --timeout 2: rank 2 did not enter it or could "
                    "not report; ranks 0, 1 on a, rank 3 on b waited 2.03 s in it");
}

// Two operations with as many ranks in each: the one the first report names is the job's (a
// tie does not go to the name that sorts last).
TEST(LauncherDigest, ATieGoesToTheFirstReportedOperation) {
  LauncherDigest d(4);
  feed(d,
       "parity: rank 1 on a: all_reduce 8 x float32 (ring) stalled: not finished after 3 s; aborting the job (--timeout 3)\n"
       "parity: rank 2 on b: broadcast 8 x float32 (native) stalled: not finished after 3 s; aborting the job (--timeout 3)\n"
       "parity: rank 0 on a: all_reduce 8 x float32 (ring) stalled: not finished after 3 s; aborting the job (--timeout 3)\n"
       "parity: rank 3 on b: broadcast 8 x float32 (native) stalled: not finished after 3 s; aborting the job (--timeout 3)\n");
  EXPECT_EQ(d.outcome(exited(3), 0).line,
            "parity: all_reduce 8 x float32 (ring) stalled past --timeout 3: ranks 2, 3 on b were stuck in broadcast 8 x "
            "float32 (native); ranks 0, 1 on a waited 3 s in it");
  LauncherDigest e(4);
  feed(e,
       "parity: rank 2 on b: broadcast 8 x float32 (native) stalled: not finished after 3 s; aborting the job (--timeout 3)\n"
       "parity: rank 1 on a: all_reduce 8 x float32 (ring) stalled: not finished after 3 s; aborting the job (--timeout 3)\n"
       "parity: rank 0 on a: all_reduce 8 x float32 (ring) stalled: not finished after 3 s; aborting the job (--timeout 3)\n"
       "parity: rank 3 on b: broadcast 8 x float32 (native) stalled: not finished after 3 s; aborting the job (--timeout 3)\n");
  EXPECT_EQ(e.outcome(exited(3), 0).line,
            "parity: broadcast 8 x float32 (native) stalled past --timeout 3: ranks 0, 1 on a were stuck in all_reduce 8 x "
            "float32 (ring); ranks 2, 3 on b waited 3 s in it");
}

TEST(LauncherDigest, NamesTheHostOfRanksThatCouldNotReport) {
  // A host cut off: its ranks' watchdog lines never arrive, but their start lines did.
  LauncherDigest d(4);
  const std::string shown = feed(
      d,
      "parity: rank 0 runs on h1\nparity: rank 1 runs on h1\nparity: rank 2 runs on h2\nparity: rank 3 runs on h2\n"
      "parity: rank 0 on h1: all_reduce 1 x float64 (native) stalled: not finished after 5 s; aborting the job (--timeout 5)\n"
      "parity: rank 1 on h1: all_reduce 1 x float64 (native) stalled: not finished after 5 s; aborting the job (--timeout 5)\n");
  EXPECT_EQ(shown, "");
  const Outcome o = d.outcome(exited(3), 0);
  EXPECT_EQ(o.status, kExitStalled);
  EXPECT_EQ(o.line, "parity: all_reduce 1 x float64 (native) stalled past --timeout 5: ranks 2, 3 on h2 did not enter it or "
                    "could not report; ranks 0, 1 on h1 waited 5 s in it");
}

TEST(LauncherDigest, AStalledRankInsideAnotherOperationIsNamedWithIt) {
  LauncherDigest d(2);
  feed(d,
       "parity: rank 1 on a: an injected stall (--inject-stall 1) stalled: not finished after 2 s; aborting the job (--timeout 2)\n"
       "parity: rank 0 on a: all_gather 2 x int64 (native) stalled: not finished after 2 s, waiting for rank 1; aborting the job (--timeout 2)\n");
  const Outcome o = d.outcome(exited(3), 0);
  EXPECT_EQ(o.status, kExitStalled);
  EXPECT_EQ(o.line, "parity: all_gather 2 x int64 (native) stalled past --timeout 2: rank 1 on a was stuck in an "
                    "injected stall (--inject-stall 1); rank 0 on a waited 2 s in it for rank 1");
}

TEST(LauncherDigest, ASignalToParityIsAnInterruption) {
  LauncherDigest d(2);
  feed(d, "parity: rank 0 on a: stopped by SIGTERM\nparity: rank 1 on a: stopped by SIGTERM\n");
  const Outcome o = d.outcome(exited(5), SIGINT);
  EXPECT_EQ(o.status, kExitInterrupted);
  EXPECT_EQ(o.line, "parity: interrupted by SIGINT; the ranks were stopped");
}

// parity run's rank 0 draws the report after the ranks have finished: a signal then cut only
// the report short, which the one line says with the signal parity was sent (it forwarded
// SIGTERM), and no rank was stopped.
TEST(LauncherDigest, ASignalDuringTheReportSaysTheResultsAreWhole) {
  const std::string cut = "parity: interrupted by SIGTERM while drawing the report; r.report is incomplete (r.h5 is complete)\n";
  LauncherDigest d(2);
  EXPECT_EQ(feed(d, cut), "");
  const Outcome o = d.outcome(exited(5), SIGINT);
  EXPECT_EQ(o.status, kExitInterrupted);
  EXPECT_TRUE(o.after_results);
  EXPECT_EQ(o.line, "parity: interrupted by SIGINT while drawing the report; r.report is incomplete (r.h5 is complete)");
  // The rank's own signal where parity had none.
  LauncherDigest alone(2);
  feed(alone, cut);
  EXPECT_EQ(alone.outcome(exited(5), 0).line, cut.substr(0, cut.size() - 1));
  EXPECT_EQ(alone.outcome(exited(5), 0).status, kExitInterrupted);
  // Any other interruption is not after the results.
  LauncherDigest other(2);
  feed(other, "parity: rank 0 on a: stopped by SIGTERM\n");
  EXPECT_FALSE(other.outcome(exited(5), SIGINT).after_results);
}

TEST(LauncherDigest, ASignalToOneRankFromOutsideIsADeadRank) {
  LauncherDigest d(3);
  feed(d, std::string("parity: rank 2 on c: stopped by SIGTERM\n") + kRule +
              "\nmpirun detected that one or more processes exited with non-zero status, thus causing\n"
              "the job to be terminated. The first process to do so was:\n\n  Process name: [[9429,1],2]\n  Exit code:    5\n" +
              kRule + "\n");
  const Outcome o = d.outcome(exited(5), 0);
  EXPECT_EQ(o.status, kExitRankDied);
  EXPECT_EQ(o.line, "parity: rank 2 on c was stopped by SIGTERM from outside parity; the job was stopped");
}

TEST(LauncherDigest, ADeathNamesTheOperationTheOthersWereStoppedIn) {
  LauncherDigest d(4);
  feed(d, std::string("parity: rank 2 runs on h2\n"
                      "parity: rank 0 on h1: stopped by SIGTERM during all_reduce 4096 x float32 (ring)\n"
                      "parity: rank 1 on h1: stopped by SIGTERM during all_reduce 4096 x float32 (ring)\n"
                      "parity: rank 3 on h2: stopped by SIGTERM\n") +
              kRule + "\nmpirun noticed that process rank 2 with PID 0 on node 10.0.0.2 exited on signal 9 (Killed).\n" + kRule + "\n");
  const Outcome o = d.outcome(exited(137), 0);
  EXPECT_EQ(o.status, kExitRankDied);
  EXPECT_EQ(o.line, "parity: rank 2 on h2 died (signal 9, Killed) while ranks 0, 1 on h1 were in all_reduce 4096 x float32 "
                    "(ring); the job was stopped");
}

TEST(LauncherDigest, OneRanksStallAndInterruptionSayOneRank) {
  LauncherDigest stalled(1);
  feed(stalled, "parity: rank 0 on a: an injected stall (--inject-stall 0) stalled: not finished after 2 s; aborting the "
                "job (--timeout 2)\n");
  const Outcome s = stalled.outcome(exited(3), 0);
  EXPECT_EQ(s.status, kExitStalled);
  EXPECT_EQ(s.line, "parity: an injected stall (--inject-stall 0) stalled past --timeout 2: rank 0 on a waited 2 s in it");
  LauncherDigest interrupted(1);
  feed(interrupted, "parity: rank 0 on a: stopped by SIGINT during barrier\n");
  const Outcome i = interrupted.outcome(exited(5), SIGINT);
  EXPECT_EQ(i.status, kExitInterrupted);
  EXPECT_EQ(i.line, "parity: interrupted by SIGINT while rank 0 on a was in barrier; the rank was stopped");
}

TEST(LauncherDigest, AnInterruptionNamesWhereEachRankWas) {
  LauncherDigest d(3);
  feed(d, "parity: rank 0 on a: stopped by SIGINT during barrier\n"
          "parity: rank 1 on a: stopped by SIGINT during all_gather 2 x int64 (native)\n"
          "parity: rank 2 on b: stopped by SIGINT during all_gather 2 x int64 (native)\n");
  const Outcome o = d.outcome(exited(5), SIGINT);
  EXPECT_EQ(o.status, kExitInterrupted);
  EXPECT_EQ(o.line, "parity: interrupted by SIGINT while rank 1 on a, rank 2 on b were in all_gather 2 x int64 (native), "
                    "rank 0 on a was in barrier; the ranks were stopped");
}

TEST(LauncherDigest, ARanksOwnStatusPassesThroughWithoutALine) {
  for (int code : {kExitFailed, kExitUsage, kExitFault}) {
    LauncherDigest d(2);
    feed(d, std::string("# conformance: 10 cases at 2 ranks, 9 passed, 1 failed\n") + kRule +
                "\nPrimary job  terminated normally, but 1 process returned\n" + kRule + "\n" + kRule +
                "\n  Process name: [[1,1],0]\n  Exit code:    " + std::to_string(code) + "\n" + kRule + "\n");
    const Outcome o = d.outcome(exited(code), 0);
    EXPECT_EQ(o.status, code);
    EXPECT_EQ(o.line, "");
  }
}

TEST(LauncherDigest, AFaultOnOneRankIsNotBlamedOnTheRanksMpirunStopped) {
  LauncherDigest d(2);
  feed(d, "parity: rank 0 on a: cannot create r.h5.partial-1: No space left on device [H5Fcreate]\n"
          "parity: rank 1 on a: stopped by SIGTERM\n");
  const Outcome o = d.outcome(exited(4), 0);
  EXPECT_EQ(o.status, kExitFault);
  EXPECT_EQ(o.line, "");
}

TEST(LauncherDigest, ALaunchFailureIsOneLineAndStatusTwo) {
  LauncherDigest d(2);
  const std::string shown =
      feed(d, std::string(kRule) + "\nORTE was unable to reliably start one or more daemons.\nThis usually is caused by:\n" +
                  kRule + "\nssh: Could not resolve hostname no-such-host: Name or service not known\r\n");  // ssh's \r\n
  EXPECT_EQ(shown, "");
  const Outcome o = d.outcome(exited(255), 0);
  EXPECT_EQ(o.status, kExitUsage);
  EXPECT_EQ(o.line, "parity: mpirun could not start the job: ssh: Could not resolve hostname no-such-host: Name or service not known");
  LauncherDigest open_mpi_only(2);
  feed(open_mpi_only, std::string(kRule) + "\nORTE was unable to reliably start one or more daemons.\n" + kRule + "\n");
  const Outcome o2 = open_mpi_only.outcome(exited(1), 0);
  EXPECT_EQ(o2.status, kExitUsage);
  EXPECT_NE(o2.line.find("ORTE was unable to reliably start one or more daemons."), std::string::npos) << o2.line;
}

// MPI did not start in the ranks (Open MPI 4.1 with OMPI_MCA_pml=ucx on a host without UCX's
// devices, and with a component that does not exist): mpirun then stops the other ranks, and
// their "stopped by SIGTERM" is not what the user needs to hear.
TEST(LauncherDigest, MpiThatCouldNotStartIsOneLineAndStatusTwo) {
  const std::string stopped = "parity: rank 1 on vm: stopped by SIGTERM\n";
  LauncherDigest ucx(2);
  const std::string ucx_shown =
      feed(ucx, std::string(kRule) + "\nNo components were able to be opened in the pml framework.\n\n"
                    "This typically means that either no components of this type were\n\n  Host:      vm\n"
                    "  Framework: pml\n" + kRule + "\n[vm:15380] PML ucx cannot be selected\n"
                    "[vm:15381] PML ucx cannot be selected\n" + stopped +
                    "[vm:15376] 1 more process has sent help message help-mca-base.txt / find-available:none found\n");
  EXPECT_EQ(ucx_shown, "");
  const Outcome u = ucx.outcome(exited(1), 0);
  EXPECT_EQ(u.status, kExitUsage);
  EXPECT_EQ(u.line.rfind("parity: MPI could not start on the ranks: PML ucx cannot be selected (framework pml); ", 0), 0u)
      << u.line;

  // The line of a job that exited 1 after `text`, its status checked to be 2.
  const auto start_failure = [](const std::string& text) {
    LauncherDigest digest(2);
    feed(digest, text);
    const Outcome o = digest.outcome(exited(1), 0);
    EXPECT_EQ(o.status, kExitUsage) << o.line;
    return o.line;
  };
  const std::string missing =
      start_failure(std::string(kRule) + "\nA requested component was not found, or was unable to be opened.  This\n"
                    "Host:      vm\nFramework: pml\nComponent: nosuch\n" + kRule + "\n" + kRule +
                    "\nIt looks like MPI_INIT failed for some reason; your parallel process is\n" + kRule +
                    "\n[vm:15412] *** An error occurred in MPI_Init_thread\n[vm:15412] *** on a NULL communicator\n" +
                    stopped);
  EXPECT_EQ(missing.rfind("parity: MPI could not start on the ranks: A requested component was not found "
                          "(framework pml, component nosuch); ", 0), 0u)
      << missing;

  // Without a notice naming a cause, the abort alone still says it
  // (and a framework named by a notice of something else is not taken for the cause's).
  const std::string bare = start_failure(std::string(kRule) + "\nSome other notice\n  Framework: btl\n" + kRule +
                                         "\n[vm:15412] *** An error occurred in MPI_Init_thread\n" + stopped);
  EXPECT_EQ(bare.rfind("parity: MPI could not start on the ranks: MPI_Init failed; ", 0), 0u) << bare;
  // Open MPI lost every notice (its show_help failed under load) and no rank said where it runs:
  // MPI did not start, though rank 1's "stopped by SIGTERM" is all that came from the ranks.
  const std::string lost = "[vm:07398] [[28696,0],0] ORTE_ERROR_LOG: Out of resource in file "
                           "../../../orte/util/show_help.c at line 501\n";
  const std::string unseen = start_failure(lost + lost + stopped);
  EXPECT_EQ(unseen.rfind("parity: MPI could not start on the ranks: a rank ended before MPI had started on all of them "
                         "(Open MPI lost its notice of why); ", 0), 0u)
      << unseen;
  // Nor where a rank said why it ended (its own refusal, before it started MPI's work).
  LauncherDigest refused(2);
  feed(refused, lost + "parity: --sequences 36 does not split into 2 cp = 8 equal chunks\n" + stopped);
  EXPECT_EQ(refused.outcome(exited(2), 0).line.find("MPI could not start"), std::string::npos);
  // But where the ranks had started (each said where it runs), the same lost notice does not
  // make a signal from outside into a start-up failure.
  LauncherDigest started(2);
  feed(started, "parity: rank 0 runs on vm\nparity: rank 1 runs on vm\n" + lost + stopped);
  const Outcome t = started.outcome(exited(1), 0);
  EXPECT_EQ(t.status, kExitRankDied);
  EXPECT_NE(t.line.find("was stopped by SIGTERM from outside parity"), std::string::npos) << t.line;
  // The same words from a rank (not Open MPI's) are the rank's own.
  LauncherDigest rank_text(2);
  feed(rank_text, "An error occurred in MPI_Init, said the rank\n" + stopped);
  EXPECT_EQ(rank_text.outcome(exited(1), 0).status, kExitRankDied);
}

// Every rank reached its end and exited 0; rank 0 said the status they agreed on.
TEST(LauncherDigest, TheStatusTheRanksAgreedOnIsTheJobs) {
  for (int code : {kExitFailed, kExitUsage}) {
    LauncherDigest d(2);
    const std::string said = "parity: --root 5 is not a rank of 2\n" + std::string(kAgreedStatusLine) + std::to_string(code);
    EXPECT_EQ(feed(d, said + "\n"), "parity: --root 5 is not a rank of 2\n");  // the agreement is not shown
    const Outcome o = d.outcome(exited(0), 0);
    EXPECT_EQ(o.status, code);
    EXPECT_EQ(o.line, "");
    // A signal to parity or a stall still decides over it.
    EXPECT_EQ(d.outcome(exited(0), SIGINT).status, kExitInterrupted);
  }
  // Only parity's statuses are taken; other text is a line like any other.
  for (const char* other : {"0", "7", "12", "1 and more", ""}) {
    LauncherDigest d(2);
    const std::string line = kAgreedStatusLine + std::string(other);
    EXPECT_EQ(feed(d, line + "\n"), line + "\n");
    EXPECT_EQ(d.outcome(exited(0), 0).status, kExitOk) << line;
  }
}

TEST(LauncherDigest, ACleanRunSaysNothing) {
  LauncherDigest d(2);
  EXPECT_EQ(feed(d, "[check] done: 10 in 1.0s\n"), "[check] done: 10 in 1.0s\n");
  const Outcome o = d.outcome(exited(0), 0);
  EXPECT_EQ(o.status, kExitOk);
  EXPECT_EQ(o.line, "");
}

// --inject-interrupt GROUP:N:SIGNAL, read against the tables the command writes.
// A rank that said what went wrong itself (a fault, status 4) and ended without Open MPI's notice
// of its exit code (mpirun reports only the first rank, and not always): the ranks' status is the
// job's, with no line of the parent's, not "mpirun could not start the job".
TEST(LauncherDigest, AFaultTheRanksSaidPassesThroughWithoutANotice) {
  for (int code : {kExitFailed, kExitUsage, kExitFault}) {
    LauncherDigest d(2);
    feed(d, "[bench] 3/12 all_reduce\nparity: cannot write r.h5: No space left on device\n");
    const Outcome o = d.outcome(exited(code), 0);
    EXPECT_EQ(o.status, code);
    EXPECT_EQ(o.line, "");
  }
}

// Ranks stopped from outside parity with no notice naming the first: the lowest rank that said
// it was stopped is the one named (the ranks' lines come in any order).
TEST(LauncherDigest, OfRanksStoppedFromOutsideTheLowestIsNamed) {
  LauncherDigest d(4);
  feed(d, "parity: rank 3 on b: stopped by SIGTERM\nparity: rank 1 on a: stopped by SIGTERM during barrier\n");
  const Outcome o = d.outcome(exited(5), 0);
  EXPECT_EQ(o.status, kExitRankDied);
  EXPECT_EQ(o.line, "parity: rank 1 on a was stopped by SIGTERM from outside parity during barrier; the job was stopped");
}

TEST(InjectedInterrupt, ReadsGroupCountAndSignal) {
  const std::vector<std::string> groups = {"/bench/point_to_point", "/bench/tensor"};
  const InjectedInterrupt a = parse_injected_interrupt("bench/tensor:2:TERM", groups);
  EXPECT_EQ(a.group, "/bench/tensor");
  EXPECT_EQ(a.blocks, 2);
  EXPECT_EQ(a.signal, SIGTERM);
  const InjectedInterrupt b = parse_injected_interrupt("/bench/point_to_point:1:INT", groups);
  EXPECT_EQ(b.group, "/bench/point_to_point");
  EXPECT_EQ(b.blocks, 1);
  EXPECT_EQ(b.signal, SIGINT);
  EXPECT_EQ(parse_injected_interrupt("bench/tensor:7:HUP", groups).signal, SIGHUP);
}

TEST(InjectedInterrupt, RefusesWhatIsNotGroupCountAndSignal) {
  const std::vector<std::string> groups = {"/bench/tensor"};
  const auto refusal = [&](const std::string& text) {
    try {
      parse_injected_interrupt(text, groups);
    } catch (const UsageError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_NE(refusal("bench/model:1:TERM").find("bench/model is not a table this command writes: bench/tensor"),
            std::string::npos);
  for (const char* count : {"0", "-1", "x", "", "2x", "99999999999999999999"})
    EXPECT_NE(refusal(std::string("bench/tensor:") + count + ":TERM").find("N: a whole number of blocks >= 1"),
              std::string::npos)
        << count;
  EXPECT_NE(refusal("bench/tensor:1:KILL").find("SIGNAL: TERM, INT or HUP, not 'KILL'"), std::string::npos);
  for (const char* text : {"bench/tensor", "bench/tensor:1", ""})
    EXPECT_NE(refusal(text).find("expected GROUP:N:SIGNAL"), std::string::npos) << text;
}

// A failed allocation reaches the user as "out of memory" with what to do, not as the
// exception's type name; other faults as they say themselves.
TEST(FaultText, AFailedAllocationIsOutOfMemory) {
  const std::string text = fault_text(std::bad_alloc());
  EXPECT_NE(text.find("out of memory: an allocation failed (lower the sizes or --np, or free memory)"), std::string::npos)
      << text;
  EXPECT_EQ(text.find("bad_alloc"), std::string::npos) << text;
  EXPECT_EQ(fault_text(std::runtime_error("a disk is full")), "a disk is full");
}

}  // namespace
}  // namespace parity::cli
