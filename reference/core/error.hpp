// Errors: one type for faults found while running (carrying rank, host, file:line and the
// failing call) and one for bad input from the user (a single line, no location).
#pragma once

#include <cstdint>
#include <source_location>
#include <stdexcept>
#include <string>

#include "reference/core/raise.hpp"

namespace parity {

// Bad input from the user: an unknown name, a malformed size, an unwritable path.
// what() is one line meant for the terminal as it is.
class UsageError : public std::runtime_error {
 public:
  explicit UsageError(const std::string& message) : std::runtime_error(message) {}
};

// A count from the user that parity holds in an int (layers, heads, experts): returned as an
// int, or refused with UsageError("<shown> is more than 2147483647"), never narrowed to
// another count. `shown` is how the message names the value ("layers=99999999999").
int int_count(std::int64_t value, const std::string& shown);

// A fault while running: a failed library call, a violated invariant.
// what() reads "rank R on HOST: MESSAGE [call] (file:line)".
class Error : public std::runtime_error {
 public:
  Error(const std::string& message, const std::string& call = "",
        std::source_location where = std::source_location::current());
  // The same with the location spelled out (raise_error, for code compiled as C++17).
  Error(const std::string& message, const std::string& call, const char* file, int line);
  int rank() const { return rank_; }
  const std::string& host() const { return host_; }
  // The message as given, without rank, host, call and location (for a caller that adds its
  // context and throws again).
  const std::string& message() const { return message_; }

 private:
  int rank_;
  std::string host_;
  std::string message_;
};

// What a fault caught at the top says: its what(), but an allocation that failed as "out of
// memory" with advice, rather than the exception's type name.
std::string fault_text(const std::exception& e);

// Who this process is, for error messages; set once the communicator knows.
void set_process_identity(int rank, std::string host);
int process_rank();            // -1 before set_process_identity
const std::string& process_host();

// Throws Error(message) when condition is false.
inline void require(bool condition, const std::string& message,
                    std::source_location where = std::source_location::current()) {
  if (!condition) throw Error(message, "", where);
}

}  // namespace parity
