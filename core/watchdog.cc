#include "core/watchdog.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <chrono>

#include "core/error.h"
#include "core/timer.h"

namespace ciuic {

double DefaultTimeoutSeconds() {
  const char* env = std::getenv("CIUIC_TIMEOUT");
  if (!env || !*env) return 60.0;
  char* end = nullptr;
  const double v = std::strtod(env, &end);
  if (end == env || *end != '\0' || !(v >= 0) || !std::isfinite(v))
    throw UsageError(fmt::format("CIUIC_TIMEOUT={}: expected a non-negative number of seconds", env));
  return v;
}

Watchdog::Watchdog(double timeout_s, std::function<void(const std::string&, double)> on_expire)
    : timeout_s_(timeout_s), on_expire_(std::move(on_expire)) {
  if (timeout_s_ > 0) thread_ = std::thread([this] { Loop(); });
}

Watchdog::~Watchdog() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Watchdog::Arm(std::string what) {
  if (timeout_s_ <= 0) return;
  std::lock_guard lock(mu_);
  armed_ = true;
  deadline_ = NowSeconds() + timeout_s_;
  seen_progress_ = progress_.load(std::memory_order_relaxed);
  what_ = std::move(what);
}

void Watchdog::Disarm() {
  if (timeout_s_ <= 0) return;
  std::lock_guard lock(mu_);
  armed_ = false;
}

void Watchdog::Loop() {
  std::unique_lock lock(mu_);
  while (!stop_) {
    // Polls at most every 100 ms (and 10 times per timeout), so a timeout expires within 1.1x.
    cv_.wait_for(lock, std::chrono::duration<double>(std::min(0.1, timeout_s_ / 10)));
    if (const uint64_t p = progress_.load(std::memory_order_relaxed); p != seen_progress_) {
      seen_progress_ = p;
      deadline_ = NowSeconds() + timeout_s_;
    }
    if (!stop_ && armed_ && NowSeconds() > deadline_) {
      armed_ = false;
      const std::string what = what_;
      lock.unlock();
      on_expire_(what, timeout_s_);
      lock.lock();
    }
  }
}

}  // namespace ciuic
