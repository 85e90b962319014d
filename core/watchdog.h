#pragma once
// A deadline for blocking work, measured as time without progress: Arm() before a step that could
// hang (a collective waiting on a dead or stuck peer), Progress() whenever a piece of it completes
// (an iteration, a message), Disarm() after. If timeout_s pass with no progress, the handler runs on
// the watchdog's thread with a description of the stuck step (it is expected to print one line and
// end the process). A long healthy phase never expires: each completed piece restarts the clock.
#include <atomic>
#include <cstdint>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace ciuic {

// The default deadline of every tool: $CIUIC_TIMEOUT (seconds, >= 0; 0 is off) or 60 s. A malformed
// value is a UsageError naming the variable.
double DefaultTimeoutSeconds();

class Watchdog {
 public:
  // timeout_s <= 0 disables it.
  Watchdog(double timeout_s, std::function<void(const std::string& what, double timeout_s)> on_expire);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  void Arm(std::string what);
  void Disarm();
  // Cheap enough for every iteration of a timed loop (one relaxed atomic add; the watchdog's thread
  // notices the change on its next poll).
  void Progress() { progress_.fetch_add(1, std::memory_order_relaxed); }
  double timeout() const { return timeout_s_; }

 private:
  void Loop();
  double timeout_s_;
  std::function<void(const std::string&, double)> on_expire_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool armed_ = false;
  bool stop_ = false;
  double deadline_ = 0;
  std::atomic<uint64_t> progress_{0};
  uint64_t seen_progress_ = 0;
  std::string what_;
  std::thread thread_;
};

}  // namespace ciuic
