#include "core/watchdog.h"

#include <chrono>

#include "core/timer.h"

namespace ciuic {

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
    cv_.wait_for(lock, std::chrono::milliseconds(100));
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
