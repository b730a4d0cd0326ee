// Facts about the build and the machine that every result file records.
#pragma once

#include <string>
#include <vector>

namespace parity {

std::string parity_version();
std::string git_commit();
std::string compiler_description();
std::string cpu_model();          // "model name" of /proc/cpuinfo
std::string utc_now_iso8601();    // 2026-11-21T10:00:00Z
// The command as typed, each argument quoted when it needs to be.
std::string quote_command_line(const std::vector<std::string>& arguments);
// Bytes the kernel reports as available for new allocations (MemAvailable), 0 if unknown.
unsigned long long available_memory_bytes();
int online_cores();

}  // namespace parity
