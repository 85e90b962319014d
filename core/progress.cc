#include "core/progress.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <iostream>
#include <mutex>
#include <streambuf>
#include <thread>

#include <fmt/format.h>

#include "core/error.h"
#include "core/files.h"
#include "core/log.h"

namespace ciuic {

namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

std::string Duration(double s) {
  if (s < 60) return fmt::format("{:.0f} s", s);
  if (s < 3600) return fmt::format("{}m{:02}s", static_cast<int>(s) / 60, static_cast<int>(s) % 60);
  return fmt::format("{}h{:02}m", static_cast<int>(s) / 3600, static_cast<int>(s) / 60 % 60);
}

struct State {
  std::mutex mu;
  bool enabled = false;
  int fd = STDERR_FILENO;  // where the line is drawn
  bool active = false;
  bool drawn = false;
  bool line_start = true;  // the last byte written through the filters ended a line
  std::string what, label;
  double total_w = 0, done_w = 0, cur_w = 0;
  int total_items = 0, done_items = 0;
  Clock::time_point start, last_done;
  std::thread ticker;
  std::condition_variable stop_cv;
  bool stop = false;
};

State& S() {
  static State* s = new State;  // never destroyed: streams may write after static destruction began
  return *s;
}

int Width() {
  winsize w{};
  if (::ioctl(S().fd, TIOCGWINSZ, &w) == 0 && w.ws_col > 20) return w.ws_col;
  if (const char* c = std::getenv("COLUMNS"); c && std::atoi(c) > 20) return std::atoi(c);
  return 100;
}

void WriteToTerminal(const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    const ssize_t n = ::write(S().fd, s.data() + off, s.size() - off);
    if (n <= 0) return;
    off += static_cast<size_t>(n);
  }
}

// Both with the lock held.
void ClearLocked(State& s) {
  if (!s.drawn) return;
  WriteToTerminal("\r\033[K");
  s.drawn = false;
}

void DrawLocked(State& s) {
  if (!s.enabled || !s.active || !s.line_start) return;
  const double elapsed = Since(s.start);
  std::string eta = "ETA ?";
  if (s.done_w > 0 && s.total_w > s.done_w) {
    const double rate = std::chrono::duration<double>(s.last_done - s.start).count() / s.done_w;
    const double left = rate * (s.total_w - s.done_w) - Since(s.last_done);
    eta = "ETA " + Duration(left > 0 ? left : 0);
  } else if (s.total_w > 0 && s.done_w >= s.total_w) {
    eta = "done";
  }
  const double pct = s.total_w > 0 ? 100.0 * s.done_w / s.total_w : 0;
  const std::string head =
      fmt::format("{}: {} {}/{} ({:.0f}%)  ", LogPrefix(), s.what, s.done_items, s.total_items, pct);
  const std::string tail = fmt::format("  {}, {}", Duration(elapsed), eta);
  std::string label = s.label;
  const int room = Width() - 1 - static_cast<int>(head.size() + tail.size());
  if (room < 4) {
    label.clear();
  } else if (static_cast<int>(label.size()) > room) {
    label = label.substr(0, room - 3) + "...";
  }
  WriteToTerminal("\r" + head + label + tail + "\033[K");
  s.drawn = true;
}

// A stream filter: whatever std::cout or std::cerr write first clears the live line; once their line
// ends, the live line is drawn again.
class Filter : public std::streambuf {
 public:
  explicit Filter(std::streambuf* to) : to_(to) {}

 protected:
  int overflow(int c) override {
    if (c == traits_type::eof()) return sync() == 0 ? traits_type::not_eof(c) : traits_type::eof();
    const char ch = static_cast<char>(c);
    return xsputn(&ch, 1) == 1 ? c : traits_type::eof();
  }
  std::streamsize xsputn(const char* p, std::streamsize n) override {
    State& s = S();
    std::lock_guard<std::mutex> lock(s.mu);
    ClearLocked(s);
    const std::streamsize w = to_->sputn(p, n);
    if (n > 0) {
      s.line_start = p[n - 1] == '\n';
      if (s.line_start) {
        to_->pubsync();
        DrawLocked(s);
      }
    }
    return w;
  }
  int sync() override { return to_->pubsync(); }

 private:
  std::streambuf* to_;
};

void Ticker() {
  State& s = S();
  std::unique_lock<std::mutex> lock(s.mu);
  while (!s.stop) {
    s.stop_cv.wait_for(lock, std::chrono::seconds(1));
    if (!s.stop) DrawLocked(s);
  }
}

}  // namespace

void CheckProgressSetting() {
  const char* env = std::getenv("CIUIC_PROGRESS");
  if (!env) return;
  const std::string_view mode = env;
  if (mode.empty() || mode == "0" || mode == "1" || mode == "stdout") return;
  throw UsageError(fmt::format("CIUIC_PROGRESS={}: expected 0 (off), 1 (on) or stdout (on, drawn on stdout)",
                               PrintableLine(env, 100)));
}

bool EnableProgress(bool wanted) {
  State& s = S();
  const char* env = std::getenv("CIUIC_PROGRESS");
  const std::string_view mode = env ? env : "";
  const bool on = wanted && mode != "0" && (mode == "1" || mode == "stdout" || ::isatty(STDERR_FILENO));
  std::lock_guard<std::mutex> lock(s.mu);
  if (on && !s.enabled) s.fd = mode == "stdout" ? STDOUT_FILENO : STDERR_FILENO;
  if (on && !s.enabled) {
    // Installed once for the life of the process (the filters outlive every Progress).
    static Filter* out = new Filter(std::cout.rdbuf());
    static Filter* err = new Filter(std::cerr.rdbuf());
    std::cout.rdbuf(out);
    std::cerr.rdbuf(err);
  }
  s.enabled = s.enabled || on;
  return s.enabled;
}

bool ProgressEnabled() { return S().enabled; }

Progress::Progress(std::string_view what, double total_weight, int total_items) : on_(ProgressEnabled()) {
  if (!on_) return;
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.active) {  // a phase inside another (validate calibrating first): the outer line stays
    on_ = false;
    return;
  }
  s.active = true;
  s.what = std::string(what);
  s.label.clear();
  s.total_w = total_weight;
  s.total_items = total_items;
  s.done_w = s.cur_w = 0;
  s.done_items = 0;
  s.start = s.last_done = Clock::now();
  s.stop = false;
  if (!s.ticker.joinable()) s.ticker = std::thread(Ticker);
  DrawLocked(s);
}

Progress::~Progress() {
  if (!on_) return;
  State& s = S();
  std::thread t;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    ClearLocked(s);
    s.active = false;
    s.stop = true;
    t = std::move(s.ticker);
  }
  s.stop_cv.notify_all();
  if (t.joinable()) t.join();
}

void Progress::Begin(std::string_view label, double weight) {
  if (!on_) return;
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  s.label = std::string(label);
  s.cur_w = weight;
  DrawLocked(s);
}

void Progress::Done() {
  if (!on_) return;
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  s.done_w += s.cur_w;
  s.cur_w = 0;
  ++s.done_items;
  s.last_done = Clock::now();
  DrawLocked(s);
}

void ClearProgressLine() {
  State& s = S();
  if (!s.enabled) return;
  std::lock_guard<std::mutex> lock(s.mu);
  ClearLocked(s);
}

namespace detail {

void WriteLogLine(const std::string& line) {
  State& s = S();
  if (!s.enabled) {
    std::fputs(line.c_str(), stderr);
    return;
  }
  std::lock_guard<std::mutex> lock(s.mu);
  ClearLocked(s);
  std::fputs(line.c_str(), stderr);
  std::fflush(stderr);
  s.line_start = true;
  DrawLocked(s);
}

}  // namespace detail

}  // namespace ciuic
