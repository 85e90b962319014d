#include "core/fault.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>

#include "core/error.h"
#include "core/log.h"
#include "core/timer.h"

namespace ciuic {
namespace {

struct FaultSpec {
  bool set = false;
  std::string phase, action;
  int rank = -1;
  long after = 1;
};

long ParseCount(const std::string& text, const char* env) {
  char* end = nullptr;
  const long v = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || v < 0 || v > 1'000'000'000)
    throw UsageError(fmt::format("CIUIC_FAULT={}: '{}' is not a count", env, text));
  return v;
}

FaultSpec Parse(const char* env) {
  FaultSpec f;
  if (!env || !*env) return f;
  std::string parts[4];
  int n = 0;
  for (const char* p = env; *p; ++p) {
    if (*p == ':') {
      if (++n > 3) throw UsageError(fmt::format("CIUIC_FAULT={}: expected PHASE:RANK:ACTION[:AFTER]", env));
      continue;
    }
    parts[n] += *p;
  }
  if (n < 2) throw UsageError(fmt::format("CIUIC_FAULT={}: expected PHASE:RANK:ACTION[:AFTER]", env));
  f.phase = parts[0];
  if (f.phase != "startup" && f.phase != "control" && f.phase != "collective" && f.phase != "report" &&
      f.phase != "nccl-startup")
    throw UsageError(fmt::format(
        "CIUIC_FAULT={}: phase '{}' is not startup, control, collective, report or nccl-startup", env, f.phase));
  f.rank = static_cast<int>(ParseCount(parts[1], env));
  f.action = parts[2];
  if (f.action != "stop" && f.action != "kill" && f.action != "exit" && f.action != "hang" && f.action != "throw")
    throw UsageError(fmt::format("CIUIC_FAULT={}: action '{}' is not stop, kill, exit, hang or throw", env, f.action));
  if (n == 3) f.after = ParseCount(parts[3], env);
  if (f.after < 1) throw UsageError(fmt::format("CIUIC_FAULT={}: AFTER must be at least 1", env));
  f.set = true;
  return f;
}

const FaultSpec& Spec() {
  static const FaultSpec spec = Parse(std::getenv("CIUIC_FAULT"));
  return spec;
}

}  // namespace

void FaultPoint(std::string_view phase, int rank) {
  const FaultSpec& f = Spec();
  if (!f.set || phase != f.phase) return;
  if (const char* world = std::getenv("OMPI_COMM_WORLD_RANK"); world && *world) rank = std::atoi(world);
  if (rank != f.rank) return;
  static std::atomic<long> visits{0};
  if (visits.fetch_add(1) + 1 != f.after) return;
  // t= is CLOCK_MONOTONIC (seconds since boot, as /proc/uptime), so a test can time the reaction.
  LogInfo("fault injection: rank {} (pid {}) does '{}' in the {} phase at t={:.3f}", rank, static_cast<long>(getpid()),
          f.action, f.phase, NowSeconds());
  if (f.action == "stop") raise(SIGSTOP);
  if (f.action == "kill") raise(SIGKILL);
  if (f.action == "exit") std::exit(1);
  if (f.action == "throw")
    throw RuntimeError(fmt::format("fault injection: rank {} threw in the {} phase", rank, f.phase));
  if (f.action == "hang") {
    for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
  }
}

}  // namespace ciuic
