// Error formatting: every fault names the rank and host it happened on, so a message from a
// failing rank in a large job says where to look.
#include "reference/core/error.hpp"

#include <limits>
#include <new>
#include <string>

namespace parity {
namespace {
int g_rank = -1;
std::string g_host;

std::string describe(const std::string& message, const std::string& call, std::string file, unsigned line) {
  std::string text;
  if (g_rank >= 0) text = "rank " + std::to_string(g_rank) + " on " + g_host + ": ";
  text += message;
  if (!call.empty()) text += " [" + call + "]";
  if (auto slash = file.find("reference/"); slash != std::string::npos) file = file.substr(slash);
  text += " (" + file + ":" + std::to_string(line) + ")";
  return text;
}
}  // namespace

Error::Error(const std::string& message, const std::string& call, std::source_location where)
    : std::runtime_error(describe(message, call, where.file_name(), where.line())),
      rank_(g_rank),
      host_(g_host),
      message_(message) {}

Error::Error(const std::string& message, const std::string& call, const char* file, int line)
    : std::runtime_error(describe(message, call, file, static_cast<unsigned>(line))),
      rank_(g_rank),
      host_(g_host),
      message_(message) {}

int int_count(std::int64_t value, const std::string& shown) {
  if (value > std::numeric_limits<int>::max())
    throw UsageError(shown + " is more than " + std::to_string(std::numeric_limits<int>::max()));
  return static_cast<int>(value);
}

void raise_error(const std::string& message, const std::string& call, const char* file, int line) {
  throw Error(message, call, file, line);
}

void set_process_identity(int rank, std::string host) {
  g_rank = rank;
  g_host = std::move(host);
}
int process_rank() { return g_rank; }
const std::string& process_host() { return g_host; }

std::string fault_text(const std::exception& e) {
  if (dynamic_cast<const std::bad_alloc*>(&e) != nullptr)
    return (g_rank >= 0 ? "rank " + std::to_string(g_rank) + " on " + g_host + ": " : std::string()) +
           "out of memory: an allocation failed (lower the sizes or --np, or free memory)";
  return e.what();
}

}  // namespace parity
