#pragma once
// A deadline for blocking work: Arm() before a step that could hang (a collective waiting on a dead
// or stuck peer), Disarm() after. If a deadline passes, the handler runs on the watchdog's thread
// with a description of the stuck step (it is expected to print one line and end the process).
#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace ciuic {

class Watchdog {
 public:
  // timeout_s <= 0 disables it.
  Watchdog(double timeout_s, std::function<void(const std::string& what, double timeout_s)> on_expire);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  void Arm(std::string what);
  void Disarm();
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
  std::string what_;
  std::thread thread_;
};

}  // namespace ciuic
