#include "core/error.h"

namespace ciuic {

namespace {
thread_local int g_error_rank = -1;
}

void SetErrorRank(int rank) { g_error_rank = rank; }
int ErrorRank() { return g_error_rank; }

std::string FormatCallFailure(const char* call, const std::string& detail, const char* file, int line, int rank) {
  if (rank < 0) rank = g_error_rank;
  std::string where = rank >= 0 ? fmt::format("rank {}: ", rank) : std::string();
  return fmt::format("{}{} failed: {} ({}:{})", where, call, detail, file, line);
}

}  // namespace ciuic
