#pragma once
// Errors thrown at library boundaries and the exit codes main() maps them to (docs/ciuic-bench.md, "Launching, exit
// codes, deadlines"): 0 ok, 1 bad usage or input, 2 runtime failure (incl. timeout, dead peer), 3 verification failure.
#include <stdexcept>
#include <string>

#include <fmt/format.h>

namespace ciuic {

enum class ExitCode : int { kOk = 0, kUsage = 1, kRuntime = 2, kVerification = 3 };

class Error : public std::runtime_error {
 public:
  Error(ExitCode code, const std::string& what) : std::runtime_error(what), code_(code) {}
  ExitCode code() const { return code_; }

 private:
  ExitCode code_;
};

// Bad command line: unknown option, op, backend or enum value.
class UsageError : public Error {
 public:
  explicit UsageError(const std::string& what) : Error(ExitCode::kUsage, what) {}
};

// Bad input data: sizes, JSON files, database files, sizes that cannot fit in memory.
class InputError : public Error {
 public:
  explicit InputError(const std::string& what) : Error(ExitCode::kUsage, what) {}
};

// Something failed while running: a library call, a timeout, a dead peer, a missing device.
class RuntimeError : public Error {
 public:
  explicit RuntimeError(const std::string& what) : Error(ExitCode::kRuntime, what) {}
};

// Results were wrong or a threshold was missed.
class VerificationError : public Error {
 public:
  explicit VerificationError(const std::string& what) : Error(ExitCode::kVerification, what) {}
};

// A failure every rank agreed on and one rank reported (the one that saw it, else rank 0): every
// rank ends with its exit code and prints nothing more, so the user reads one line, not one per rank.
class ReportedByLead : public Error {
 public:
  explicit ReportedByLead(ExitCode code) : Error(code, "reported by rank 0") {}
};

// Formats "call failed: detail (file:line)" for the per-library check macros.
std::string FormatCallFailure(const char* call, const std::string& detail, const char* file, int line, int rank = -1);

// Sets the rank named in failure messages of this thread (backends set it once known).
void SetErrorRank(int rank);
int ErrorRank();

}  // namespace ciuic
