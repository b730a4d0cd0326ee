// The output policy (output.hpp): path checks, the lock, temporary names and free space.
#include "reference/record/output.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <linux/magic.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <system_error>

#include "reference/core/error.hpp"
#include "reference/core/text.hpp"

namespace parity::record {

namespace {
// The temporary file being written and the lock file this process holds, for
// discard_temporary_file() in a signal handler.
char g_temporary[4096] = {};
char g_lock[4096] = {};
}  // namespace

void remember_temporary(const std::filesystem::path& path) {
  const std::string text = path.string();
  if (text.size() < sizeof g_temporary) std::memcpy(g_temporary, text.c_str(), text.size() + 1);
}

void forget_temporary() { g_temporary[0] = '\0'; }

std::string mib_text(double bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f MiB", bytes / 1048576.0);
  return text;
}

std::string size_text(double bytes) {
  if (bytes < 1073741824.0) return mib_text(bytes);
  char text[32];
  std::snprintf(text, sizeof text, "%.2f GiB", bytes / 1073741824.0);
  return text;
}

std::filesystem::path directory_of(const std::filesystem::path& path) {
  return path.has_parent_path() ? path.parent_path() : std::filesystem::path(".");
}

double free_bytes_on(const std::filesystem::path& directory) {
  struct statvfs fs {};
  if (statvfs(directory.c_str(), &fs) != 0) return -1;
  return static_cast<double>(fs.f_bavail) * static_cast<double>(fs.f_frsize);
}

// Whether `directory` is on one of the kernel's views (/proc, /sys and the like), where no file
// can be made, rather than on a full disk. (ramfs and FUSE file systems also report no blocks,
// and do keep files: the file system's type decides.)
bool is_kernel_view(const std::filesystem::path& directory) {
  struct statfs fs {};
  if (statfs(directory.c_str(), &fs) != 0) return false;
  constexpr unsigned long kKernelViews[] = {PROC_SUPER_MAGIC, SYSFS_MAGIC,        DEBUGFS_MAGIC, CGROUP_SUPER_MAGIC,
                                            CGROUP2_SUPER_MAGIC, SECURITYFS_MAGIC, BPF_FS_MAGIC, TRACEFS_MAGIC};
  for (const unsigned long view : kKernelViews)
    if (static_cast<unsigned long>(fs.f_type) == view) return true;
  return false;
}

std::string full_disk_hint(const std::filesystem::path& path) {
  const std::filesystem::path directory = directory_of(path);
  const double free_bytes = free_bytes_on(directory);
  return free_bytes >= 0 && free_bytes < 1048576.0 && !is_kernel_view(directory)
             ? " (the disk is full: ENOSPC, " + mib_text(free_bytes) + " free on " + directory.string() + ")"
             : "";
}

std::string full_disk_hint() { return g_temporary[0] ? full_disk_hint(std::filesystem::path(g_temporary)) : ""; }

void check_output_path(const std::filesystem::path& path, bool force, const std::string& option) {
  namespace fs = std::filesystem;
  if (path.empty()) throw UsageError("output path is empty");
  std::error_code ec;
  const auto status = fs::status(path, ec);
  // A name the file system refuses (too long, a loop of links, no permission to look): said here,
  // not by the writer that would fail on it later.
  if (ec && ec != std::errc::no_such_file_or_directory && ec != std::errc::not_a_directory)
    throw UsageError("output path " + quoted_input(path.string(), 200) + " cannot be used: " + ec.message());
  if (path.is_relative()) {
    char cwd[4096];
    if (getcwd(cwd, sizeof cwd) == nullptr && errno == ENOENT)
      throw UsageError("the working directory no longer exists; cd to an existing directory or give " + option + " an absolute path");
  }
  if (fs::is_directory(status)) throw UsageError("output path " + path.string() + " is a directory");
  // The names of the files parity keeps beside a result (its journal, lock and temporaries): a
  // result under one would be taken for, or removed as, another run's.
  const std::string name = path.filename().string();
  const auto ends_with = [&](const std::string& end) {
    return name.size() > end.size() && name.compare(name.size() - end.size(), end.size(), end) == 0;
  };
  if (ends_with(".journal") || ends_with(".lock") || name.find(".partial-") != std::string::npos)
    throw UsageError("output path " + path.string() + ": names ending in .journal or .lock, or holding .partial-, are "
                     "those of the files parity keeps beside a result; choose another " + option);
  // --force replaces a result file, never a device, FIFO or socket (rename would swap a
  // regular file in for /dev/null itself).
  if (fs::exists(status) && !fs::is_regular_file(status))
    throw UsageError("output path " + path.string() + " exists and is not a regular file; choose another " + option);
  if (fs::exists(status) && !force) {
    throw UsageError("output file " + path.string() + " exists; pass --force to overwrite");
  }
  const fs::path directory = directory_of(path);
  const auto directory_status = fs::status(directory, ec);
  if (!fs::exists(directory_status)) {
    throw UsageError("directory " + directory.string() + " of output file " + path.string() +
                     " does not exist");
  }
  if (!fs::is_directory(directory_status)) {
    throw UsageError(directory.string() + " is not a directory (in output path " + path.string() + ")");
  }
  if (is_kernel_view(directory))
    throw UsageError("directory " + directory.string() + " of output file " + path.string() +
                     " is on a file system that keeps no files (such as /proc); choose another " + option);
  // Writing the temporary sibling and renaming it both need write and search permission.
  if (access(directory.c_str(), W_OK | X_OK) != 0) {
    throw UsageError("directory " + directory.string() + " is not writable (output file " +
                     path.string() + ")");
  }
}

// ---- the lock and temporary files ----------------------------------------------------------------

namespace {
// A killed run's temporary holds nothing yet or an HDF5 file; anything else is someone's own.
bool is_empty_or_hdf5(const std::filesystem::path& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  static constexpr char kSignature[8] = {'\x89', 'H', 'D', 'F', '\r', '\n', '\x1a', '\n'};
  char head[sizeof kSignature] = {};
  const ssize_t n = pread(fd, head, sizeof head, 0);
  close(fd);
  return n == 0 || (n == static_cast<ssize_t>(sizeof head) && std::memcmp(head, kSignature, sizeof head) == 0);
}

// Whether `text` is what a lock file holds: a pid and a newline, or nothing (a run that died
// between creating it and writing its pid).
bool is_lock_text(const char* text, ssize_t n) {
  if (n <= 0) return n == 0;
  ssize_t i = 0;
  while (i < n && text[i] >= '0' && text[i] <= '9') ++i;
  return i > 0 && (i == n || (i + 1 == n && text[i] == '\n'));
}
}  // namespace


void discard_temporary_file() noexcept {
  if (g_temporary[0] != '\0') unlink(g_temporary);
  if (g_lock[0] != '\0') unlink(g_lock);
}

std::timed_mutex& commit_mutex() {
  static std::timed_mutex mutex;
  return mutex;
}

void stop_commits() noexcept {
  try {
    (void)commit_mutex().try_lock_for(std::chrono::seconds(5));  // never unlocked: the process is ending
  } catch (...) {
  }
}

OutputLock::OutputLock(const std::filesystem::path& result) : OutputLock(result, nullptr) {}

std::unique_ptr<OutputLock> OutputLock::try_take(const std::filesystem::path& result) {
  bool held_elsewhere = false;
  std::unique_ptr<OutputLock> lock(new OutputLock(result, &held_elsewhere));
  if (held_elsewhere) return nullptr;
  return lock;
}

OutputLock::OutputLock(const std::filesystem::path& result, bool* held_elsewhere) : path_(result.string() + ".lock") {
  for (int attempt = 0; attempt < 10; ++attempt) {
    fd_ = open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    const int open_error = errno;  // lstat below may set errno
    // A lock that is there but cannot be opened (another user's, or a folder by its name) holds
    // the name as a lock another run holds does: a default name gives way. (Where no lock is
    // there, the folder refuses it: said below.)
    struct stat there {};
    if (fd_ < 0 && held_elsewhere != nullptr &&
        (open_error == EACCES || open_error == EPERM || open_error == EISDIR) && lstat(path_.c_str(), &there) == 0) {
      *held_elsewhere = true;
      return;
    }
    if (fd_ < 0)
      throw UsageError("cannot create the lock file " + path_.string() + ": " + std::strerror(open_error));
    {
      char text[32] = {};
      const ssize_t n = pread(fd_, text, sizeof text, 0);
      if (!is_lock_text(text, n)) {
        close(fd_);
        fd_ = -1;
        throw UsageError(path_.string() + " is in the place of " + result.string() +
                         "'s lock but is not a parity lock; move it away or choose another --out");
      }
    }
    if (flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      const int error = errno;
      char holder[32] = {};
      const ssize_t n = pread(fd_, holder, sizeof holder - 1, 0);
      close(fd_);
      fd_ = -1;
      if (error != EWOULDBLOCK)
        throw UsageError("cannot lock " + path_.string() + ": " + std::strerror(error));
      if (held_elsewhere != nullptr) {
        *held_elsewhere = true;
        return;
      }
      std::string pid = n > 0 ? std::string(holder, static_cast<std::size_t>(n)) : "";
      while (!pid.empty() && (pid.back() == '\n' || pid.back() == ' ')) pid.pop_back();
      throw UsageError("another parity run" + (pid.empty() ? std::string() : " (pid " + pid + ")") + " is writing " +
                       result.string() + " (lock " + path_.string() + "); wait for it or choose another --out");
    }
    // The file may have been removed by the previous holder between open and flock: then this
    // lock guards nothing, so try again on the file now at the path.
    struct stat held {}, current {};
    if (fstat(fd_, &held) == 0 && stat(path_.c_str(), &current) == 0 && held.st_ino == current.st_ino &&
        held.st_dev == current.st_dev) {
      const std::string pid = std::to_string(getpid()) + "\n";
      if (ftruncate(fd_, 0) == 0 && pwrite(fd_, pid.data(), pid.size(), 0) < 0) {
        // The pid is only for the message of a second run; the lock holds without it.
      }
      const std::string text = path_.string();
      if (text.size() < sizeof g_lock) std::memcpy(g_lock, text.c_str(), text.size() + 1);
      remove_stale_temporaries(result);
      return;
    }
    close(fd_);
    fd_ = -1;
  }
  throw UsageError("cannot lock " + path_.string() + ": it keeps being replaced");
}

void remove_stale_temporaries(const std::filesystem::path& result) {
  std::error_code ec;
  const std::filesystem::path directory = std::filesystem::absolute(directory_of(result), ec);
  if (ec) return;
  const std::string prefix = result.filename().string() + ".partial-";
  for (const auto& entry : std::filesystem::directory_iterator(directory, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(prefix, 0) == 0 && name.size() > prefix.size() &&
        name.find_first_not_of("0123456789", prefix.size()) == std::string::npos && entry.is_regular_file(ec) &&
        is_empty_or_hdf5(entry.path()))
      std::filesystem::remove(entry.path(), ec);
  }
}

void OutputLock::share_with_children() {
  if (fd_ < 0) return;
  const int flags = fcntl(fd_, F_GETFD);
  if (flags >= 0) fcntl(fd_, F_SETFD, flags & ~FD_CLOEXEC);
}

OutputLock::~OutputLock() {
  if (fd_ < 0) return;
  g_lock[0] = '\0';
  unlink(path_.c_str());  // while still holding the lock: see the inode check above
  close(fd_);
}

void check_free_space(const std::filesystem::path& path, std::uint64_t bytes) {
  const std::filesystem::path directory = directory_of(path);
  const double free_bytes = free_bytes_on(directory);
  if (free_bytes < 0) return;  // check_output_path names what is wrong with the directory
  if (free_bytes < static_cast<double>(bytes)) {
    throw UsageError("only " + mib_text(free_bytes) + " free on " + directory.string() + " but the result file " +
                     path.string() + " needs about " + mib_text(static_cast<double>(bytes)) +
                     "; free some space or choose another --out");
  }
}

std::filesystem::path temporary_of(const std::filesystem::path& path) {
  std::filesystem::path temporary = path;
  temporary += ".partial-" + std::to_string(getpid());
  return temporary;
}

std::filesystem::path journal_path(const std::filesystem::path& result) {
  std::filesystem::path journal = result;
  journal += ".journal";
  return journal;
}

}  // namespace parity::record
