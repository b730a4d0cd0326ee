// Where a result goes, and the rules for putting it there: a path that is refused before any
// work starts (existing without --force, a directory, a device, an unwritable directory, too
// little free space), a lock so that two runs never write one file, the temporary sibling a
// file is written under until it is complete, and the journal's name beside it.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>

namespace parity::record {

// Refuses, with a one-line UsageError, an output path that exists (unless force), whose
// directory does not exist or cannot be written. Called before any work starts. option: the
// option that named the path, for the advice in a refusal ("choose another --out").
void check_output_path(const std::filesystem::path& path, bool force, const std::string& option = "--out");

// Refuses (UsageError) an output whose file system has less than `bytes` free.
void check_free_space(const std::filesystem::path& path, std::uint64_t bytes);

// Removes the temporary file a ResultsFile is writing, and the lock file this process holds,
// if any. Async-signal-safe: for signal handlers and the paths that end the process without
// unwinding (MPI_Abort).
void discard_temporary_file() noexcept;

// Held while a result file is closed and renamed into place (record::commit).
std::timed_mutex& commit_mutex();
// Stops this process from committing a result file, for good, once a commit under way has
// ended: for a thread that ends the process while others run on (the watchdog's stall), so
// that the file left is the one that thread writes, not one the main thread renames over it.
// Waits 5 s at most for that commit (a hung file system must not keep the process alive).
void stop_commits() noexcept;

// An exclusive lock on `<result>.lock` beside a result file, for the life of the object: a
// second run writing the same --out refuses at start instead of after its whole run. flock(2)
// is released by the kernel on every exit, SIGKILL included; the lock file is removed on the
// ordinary ones (and by discard_temporary_file()).
class OutputLock {
 public:
  // Throws UsageError naming the holder's pid when another process holds the lock.
  explicit OutputLock(const std::filesystem::path& result);
  // The same, but nothing (no error) when another process holds the lock.
  static std::unique_ptr<OutputLock> try_take(const std::filesystem::path& result);
  ~OutputLock();
  OutputLock(const OutputLock&) = delete;
  OutputLock& operator=(const OutputLock&) = delete;
  // The environment variable by which a parent that holds the lock tells its ranks so.
  static constexpr const char* kHeldVariable = "PARITY_OUTPUT_LOCK_HELD";
  // Lets the processes this one starts (mpirun, which outlives its ranks) hold the lock too: a
  // job whose parent is killed outright keeps it until mpirun has gone, so that no second run
  // takes the name while the ranks still write its journal.
  void share_with_children();

 private:
  OutputLock(const std::filesystem::path& result, bool* held_elsewhere);
  std::filesystem::path path_;
  int fd_ = -1;
};

// Removes `<result>.partial-*`, temporary files of processes killed outright (SIGKILL). Only
// for the holder of the result's OutputLock, which no other run can be writing.
void remove_stale_temporaries(const std::filesystem::path& result);

// `<result>.journal`: what a run has finished so far, while it runs.
std::filesystem::path journal_path(const std::filesystem::path& result);

// For the writers of result files (results_file.cpp, partial.cpp):
// `<result>.partial-<pid>`, the name a file is written under until it is complete.
std::filesystem::path temporary_of(const std::filesystem::path& result);
// The temporary file being written, for discard_temporary_file() (one at a time).
void remember_temporary(const std::filesystem::path& path);
void forget_temporary();
// While alive, a signal's handler removes `path`: the one file a command that runs alone (no
// ranks, no result file) is writing under a temporary name.
struct DiscardedOnSignal {
  explicit DiscardedOnSignal(const std::filesystem::path& path) { remember_temporary(path); }
  ~DiscardedOnSignal() { forget_temporary(); }
  DiscardedOnSignal(const DiscardedOnSignal&) = delete;
  DiscardedOnSignal& operator=(const DiscardedOnSignal&) = delete;
};
// The directory a result file goes in ("." for a bare name).
std::filesystem::path directory_of(const std::filesystem::path& path);
// Whether `directory` is on one of the kernel's views (/proc, /sys and the like), where no file
// can be made.
bool is_kernel_view(const std::filesystem::path& directory);
// Bytes free to this user on the file system of `directory`; -1 when it cannot be read.
double free_bytes_on(const std::filesystem::path& directory);
// "12.3 MiB".
std::string mib_text(double bytes);
// "12.3 MiB" below 1 GiB, "2.64 GiB" from there.
std::string size_text(double bytes);
// " (the disk is full: ENOSPC, ...)" when the file system of `path` (default: the temporary
// file being written) is full, else "". HDF5 reports a failed write without errno; a full disk
// is its usual cause and worth naming.
std::string full_disk_hint(const std::filesystem::path& path);
std::string full_disk_hint();

}  // namespace parity::record
