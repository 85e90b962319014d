#include "core/watchdog.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstddef>
#include <fstream>
#include <vector>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core/error.h"
#include "core/log.h"
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

namespace {

// How a rank ended, in its record (a rank whose file is still there did not end cleanly): kRunning
// is what a SIGKILL or a crash leaves, since no code of the rank ran after it.
enum EndMark : int64_t {
  kRunning = 0,
  kCalledExit = 1,       // exit() in the middle of the run (a library's error path)
  kEndedByLauncher = 2,  // the launcher's SIGTERM (mpiexec ending the job): a peer's failure, or the user's
  kGaveUp = 3,           // its own deadline expired: it waited on a peer, it is not the culprit
  kEndedByError = 4,     // an error of its own in the middle of the run (Heartbeats::ExitAfterError)
};

struct BeatRecord {
  uint64_t progress;
  double wall;  // CLOCK_MONOTONIC (NowSeconds): one clock for every process of the host
  int64_t pid;
  int64_t exited;  // an EndMark
};

// The process's heartbeat file, for the exit() hook: a rank that calls exit() mid-run (a library's
// error path) marks its record, so the launcher can tell it from the peers it took down with it.
std::atomic<int> g_beat_fd{-1};
std::atomic<int> g_beat_rank{-1};
std::atomic<bool> g_exit_is_failure{false};

// The launcher's signal, for the watchdog's thread to report (0: none yet).
std::atomic<int> g_launcher_signal{0};
// This process's EndMark once it is ending: beats stop, so its last beat time stays what it was.
std::atomic<int64_t> g_end_mark{kRunning};

static_assert(std::atomic<int64_t>::is_always_lock_free && std::atomic<int>::is_always_lock_free,
              "the signal handler touches these atomics");

// Async-signal-safe (pwrite, a clock read): records how this rank ended; the first end is the one
// that counts (false when another came first). Only the mark is written (and, for exit(), the time):
// a beat writes the other fields only, so neither can undo the other. The wall time of the last beat
// is kept for the other marks, so the launcher can still tell which rank went silent first.
bool Mark(EndMark how) {
  int64_t expected = kRunning;
  if (!g_end_mark.compare_exchange_strong(expected, how)) return false;
  const int fd = g_beat_fd.load();
  if (fd < 0) return true;
  const int64_t mark = how;
  if (pwrite(fd, &mark, sizeof(mark), offsetof(BeatRecord, exited)) != static_cast<ssize_t>(sizeof(mark))) return true;
  if (how == kCalledExit) {
    const double now = NowSeconds();
    if (pwrite(fd, &now, sizeof(now), offsetof(BeatRecord, wall)) != static_cast<ssize_t>(sizeof(now))) return true;
  }
  return true;
}

extern "C" void OnLauncherSignal(int sig, siginfo_t* info, void*) {
  const int saved_errno = errno;
  // Not from the launcher (a user or a scheduler signalling this one process): this rank's own
  // failure, which its peers must see as a death, so the default action, unmarked. From the launcher
  // while this rank is already ending another way (its deadline, its own error): the default action
  // at once.
  if (info == nullptr || info->si_pid != getppid() || !Mark(kEndedByLauncher)) {
    signal(sig, SIG_DFL);
    raise(sig);
    errno = saved_errno;
    return;
  }
  g_launcher_signal.store(sig);
  // Should the watchdog's thread not get to it, the default end comes 2 s later (SIGALRM's action).
  alarm(2);
  errno = saved_errno;
}

void MarkExited() {
  if (g_beat_fd.load() < 0) return;
  Mark(kCalledExit);
  if (g_exit_is_failure.load()) {
    LogInfo("rank {} (pid {}) called exit() in the middle of the run; exit 2", g_beat_rank.load(),
            static_cast<long>(getpid()));
    _exit(2);
  }
}

std::string RankFile(const std::string& dir, int rank) { return dir + "/rank-" + std::to_string(rank); }

// Rank r's record as it stands; false when its file is gone (a clean end) or short.
bool ReadBeat(const std::string& dir, int r, BeatRecord& out) {
  std::ifstream in(RankFile(dir, r), std::ios::binary);
  return static_cast<bool>(in.read(reinterpret_cast<char*>(&out), sizeof(BeatRecord)));
}

// 'R', 'S', 'T' (stopped), 'Z' (zombie)... from /proc/<pid>/stat; 0 when the process is gone.
char ProcessState(int64_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t close = text.rfind(')');
  if (close == std::string::npos || close + 2 >= text.size()) return 0;
  return text[close + 2];
}

std::string Sanitized(std::string s) {
  for (char& c : s)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') c = '_';
  return s;
}

}  // namespace

std::unique_ptr<Heartbeats> Heartbeats::FromEnvironment() {
  const char* rank = std::getenv("OMPI_COMM_WORLD_RANK");
  const char* size = std::getenv("OMPI_COMM_WORLD_SIZE");
  if (!rank || !size) return nullptr;
  std::string dir;
  if (const char* d = std::getenv("CIUIC_HEARTBEAT_DIR"); d && *d) {
    dir = d;
  } else if (const char* ns = std::getenv("PMIX_NAMESPACE"); ns && *ns) {
    dir = "/dev/shm/ciuic-" + Sanitized(ns);
  } else {
    return nullptr;
  }
  try {
    return std::make_unique<Heartbeats>(dir, std::stoi(rank), std::stoi(size));
  } catch (const std::exception&) {
    return nullptr;  // the side channel is a help for the message, never a reason to fail
  }
}

Heartbeats::Heartbeats(std::string dir, int rank, int size) : dir_(std::move(dir)), rank_(rank), size_(size) {
  mkdir(dir_.c_str(), 0700);
  fd_ = open(RankFile(dir_, rank_).c_str(), O_CREAT | O_RDWR | O_TRUNC | O_CLOEXEC, 0600);
  if (fd_ >= 0) {  // the whole record once (running); beats then rewrite the fields before the mark
    const BeatRecord b{0, NowSeconds(), static_cast<int64_t>(getpid()), kRunning};
    if (pwrite(fd_, &b, sizeof(b), 0) != static_cast<ssize_t>(sizeof(b))) {
      close(fd_);
      fd_ = -1;
    }
  }
  static const bool hooked = std::atexit(MarkExited) == 0;
  (void)hooked;
  g_beat_rank.store(rank_);
  g_beat_fd.store(fd_);
}

void Heartbeats::TreatExitAsFailure() { g_exit_is_failure.store(true); }

void Heartbeats::ExitAfterError(int code, bool lost_a_peer) {
  Mark(lost_a_peer ? kGaveUp : kEndedByError);
  std::fflush(nullptr);
  std::_Exit(code);
}

Heartbeats::~Heartbeats() {
  g_beat_fd.store(-1);
  if (fd_ >= 0) close(fd_);
  unlink(RankFile(dir_, rank_).c_str());
  rmdir(dir_.c_str());  // fails while another rank's file is there: the last one out removes it
}

void Heartbeats::Beat(uint64_t progress) {
  if (fd_ < 0 || g_end_mark.load() != kRunning) return;
  // The fields before the mark only: a mark written meanwhile (a signal, exit()) stays.
  const BeatRecord b{progress, NowSeconds(), static_cast<int64_t>(getpid()), 0};
  if (pwrite(fd_, &b, offsetof(BeatRecord, exited), 0) != static_cast<ssize_t>(offsetof(BeatRecord, exited))) return;
}

std::string Heartbeats::Describe(bool failed_only) const {
  std::vector<BeatRecord> beats(size_);
  std::vector<bool> have(size_, false);
  uint64_t most = 0;
  for (int r = 0; r < size_; ++r) {
    if (ReadBeat(dir_, r, beats[r])) {
      have[r] = true;
      most = std::max(most, beats[r].progress);
    }
  }
  const double now = NowSeconds();
  std::string out;
  auto add = [&](const std::string& s) { out += (out.empty() ? "" : "; ") + s; };
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    if (!have[r]) {
      if (!failed_only) add(fmt::format("rank {} never reported (not started, or gone)", r));
      continue;
    }
    const char state = ProcessState(beats[r].pid);
    if (state == 0 || state == 'Z' || state == 'X') {
      // Gone now, so its record is final: it may have marked it and ended after the read above (a
      // peer that gave up a moment before this rank looked).
      BeatRecord last{};
      if (ReadBeat(dir_, r, last)) beats[r].exited = last.exited;
    }
    // A peer that gave up waiting, or that its launcher is ending, is not why this rank is stuck.
    if (beats[r].exited == kGaveUp || beats[r].exited == kEndedByLauncher) continue;
    const double age = now - beats[r].wall;
    if (beats[r].exited == kCalledExit) {
      add(fmt::format("rank {} (pid {}) called exit() in the middle of the run", r, beats[r].pid));
    } else if (beats[r].exited == kEndedByError) {
      add(fmt::format("rank {} (pid {}) ended with an error in the middle of the run", r, beats[r].pid));
    } else if (state == 0 || state == 'Z' || state == 'X') {
      add(fmt::format("rank {} (pid {}) is dead", r, beats[r].pid));
    } else if (state == 'T' || state == 't') {
      add(fmt::format("rank {} (pid {}) is stopped", r, beats[r].pid));
    } else if (failed_only) {
      continue;
    } else if (age > 2.0) {
      add(fmt::format("rank {} (pid {}) silent for {:.1f} s", r, beats[r].pid, age));
    } else if (beats[r].progress < most) {
      add(fmt::format("rank {} behind ({} of {} steps)", r, beats[r].progress, most));
    }
  }
  return out;
}

bool Heartbeats::AnyLeft(const std::string& dir, int size) {
  for (int r = 0; r < size; ++r) {
    if (access(RankFile(dir, r).c_str(), F_OK) == 0) return true;
  }
  return false;
}

std::string Heartbeats::FirstSilent(const std::string& dir, int size) {
  // A rank that called exit() mid-run is the culprit whatever the clocks say.
  for (int r = 0; r < size; ++r) {
    BeatRecord e{};
    const bool read = ReadBeat(dir, r, e);
    if (read && e.exited == kCalledExit)
      return fmt::format("rank {} (pid {}) exited in the middle of the run", r, e.pid);
    if (read && e.exited == kEndedByError)
      return fmt::format("rank {} (pid {}) ended with an error in the middle of the run", r, e.pid);
  }
  int first = -1, unmarked = -1, unmarked_count = 0;
  BeatRecord oldest{}, b{}, lone{};
  double next = 0;  // the second-oldest last beat
  int seen = 0;
  for (int r = 0; r < size; ++r) {
    if (!ReadBeat(dir, r, b)) continue;  // ended cleanly (file removed)
    if (b.exited == kGaveUp) continue;   // its deadline ended it: it waited on a peer, it went silent last
    ++seen;
    if (b.exited == kRunning) {
      unmarked = r;
      lone = b;
      ++unmarked_count;
    }
    if (first < 0 || b.wall < oldest.wall) {
      if (first >= 0) next = seen == 2 ? oldest.wall : std::min(next, oldest.wall);
      first = r;
      oldest = b;
    } else {
      next = seen == 2 ? b.wall : std::min(next, b.wall);
    }
  }
  if (first < 0) return "";
  // A lone file is the one rank that did not end cleanly.
  if (seen == 1) return fmt::format("rank {} (pid {}) did not end cleanly", first, oldest.pid);
  // One rank ended with no code of ours running (a SIGKILL, a crash) while every other one marked its
  // end (its deadline, the launcher's SIGTERM): that one, whatever the clocks say.
  if (unmarked_count == 1)
    return fmt::format("rank {} (pid {}) did not end cleanly (killed, or crashed)", unmarked, lone.pid);
  // Beats come every 0.1 s: a rank silent 0.3 s before every other one stopped first.
  if (next - oldest.wall < 0.3) return "";
  return fmt::format("rank {} (pid {}) went silent first, {:.1f} s before the others", first, oldest.pid,
                     next - oldest.wall);
}

namespace {

char g_interrupt_lines[3][160];  // SIGINT, SIGTERM, SIGHUP; empty: end silently

int InterruptSlot(int sig) { return sig == SIGINT ? 0 : sig == SIGTERM ? 1 : 2; }

extern "C" void OnJobInterrupt(int sig) {
  const char* line = g_interrupt_lines[InterruptSlot(sig)];
  if (*line) (void)!write(STDERR_FILENO, line, std::strlen(line));
  _exit(128 + sig);
}

}  // namespace

void ExitOnInterrupt(const std::string& tool, const std::string& who, bool speak) {
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
    char* line = g_interrupt_lines[InterruptSlot(sig)];
    line[0] = '\0';
    if (speak) {
      const char* name = sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "SIGHUP";
      std::snprintf(line, sizeof g_interrupt_lines[0], "%s: interrupted (%s): %s ends; exit %d\n", tool.c_str(), name,
                    who.c_str(), 128 + sig);
    }
    struct sigaction old {};
    if (sigaction(sig, nullptr, &old) == 0 && old.sa_handler == SIG_IGN) continue;  // nohup, a background job
    struct sigaction sa {};
    sa.sa_handler = OnJobInterrupt;
    sigemptyset(&sa.sa_mask);
    sigaction(sig, &sa, nullptr);
  }
}

void EndWhenParentEnds(std::string line) {
  static std::atomic<bool> started{false};
  const pid_t parent = getppid();
  if (parent <= 1 || started.exchange(true)) return;
  std::thread([parent, line = std::move(line)] {
    while (getppid() == parent) std::this_thread::sleep_for(std::chrono::milliseconds(200));
    LogInfo("{}", line);
    kill(getpid(), SIGTERM);
  }).detach();
}

std::string Watchdog::FailedPeers() {
  std::lock_guard lock(mu_);
  return heartbeats_ ? heartbeats_->Describe(/*failed_only=*/true) : "";
}

void Watchdog::SetPeerReport(std::function<std::string()> report) {
  std::lock_guard lock(mu_);
  peer_report_ = std::move(report);
}

void Watchdog::SetBeat(std::function<void()> beat) {
  std::lock_guard lock(mu_);
  beat_ = std::move(beat);
}

void Watchdog::SetHeartbeats(std::unique_ptr<Heartbeats> hb) {
  std::lock_guard lock(mu_);
  heartbeats_ = std::move(hb);
  if (!heartbeats_) UnhookLauncherSignal();
}

Watchdog::Watchdog(double timeout_s, std::function<void(const std::string&, double)> on_expire)
    : timeout_s_(timeout_s), on_expire_(std::move(on_expire)) {
  if (timeout_s_ > 0) thread_ = std::thread([this] { Loop(); });
}

Watchdog::~Watchdog() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
    // The record goes first (this rank ends cleanly), then the SIGTERM hook: a launcher's SIGTERM
    // between the two finds no record to leave unmarked.
    heartbeats_.reset();
    UnhookLauncherSignal();
    beat_ = nullptr;
    peer_report_ = nullptr;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Watchdog::Arm(std::string what) {
  if (timeout_s_ <= 0) return;
  std::lock_guard lock(mu_);
  deadline_ = NowSeconds() + timeout_s_;
  seen_arms_ = arms_.fetch_add(1, std::memory_order_relaxed) + 1;  // this deadline is already set
  seen_progress_ = progress_.load(std::memory_order_relaxed);
  what_ = std::move(what);
  describe_.store(nullptr, std::memory_order_relaxed);
  armed_.store(true, std::memory_order_release);
}

void Watchdog::Arm(const std::function<std::string()>* describe) {
  if (timeout_s_ <= 0) return;
  describe_.store(describe, std::memory_order_relaxed);
  arms_.fetch_add(1, std::memory_order_relaxed);
  armed_.store(true, std::memory_order_release);
}

void Watchdog::Disarm() {
  if (timeout_s_ <= 0) return;
  armed_.store(false, std::memory_order_release);
}

void Watchdog::Loop() {
  std::unique_lock lock(mu_);
  const double poll = std::min(0.1, timeout_s_ / 10);
  double last_poll = NowSeconds();
  while (!stop_) {
    // Polls at most every 100 ms (and 10 times per timeout); a deadline starts at the arming (string)
    // or at the first poll after it (a hot-path arming), so a timeout expires within 1.2x.
    cv_.wait_for(lock, std::chrono::duration<double>(poll));
    const double now = NowSeconds();
    // A gap of many polls means this process itself was stopped (SIGSTOP, a debugger) and has just
    // been resumed: its peers were not silent, it was; the deadline starts again.
    // Its heartbeat waits a second too: a launcher ending a job resumes a stopped rank (SIGCONT) and
    // SIGTERMs it at once, and its record should keep the time it went silent, not show it the
    // freshest rank of the job.
    if (now - last_poll > std::max(1.0, 10 * poll)) {
      deadline_ = std::max(deadline_, now + timeout_s_);
      resumed_at_ = now;
    }
    last_poll = now;
    if (const uint64_t p = progress_.load(std::memory_order_relaxed); p != seen_progress_) {
      seen_progress_ = p;
      deadline_ = NowSeconds() + timeout_s_;
    }
    if (heartbeats_ && now - resumed_at_ > 1.0) heartbeats_->Beat(seen_progress_);
    if (beat_ && now - resumed_at_ > 1.0) beat_();
    if (const int sig = g_launcher_signal.load(); sig != 0 && heartbeats_ && !stop_) ReportLauncherSignal(lock, sig);
    if (stop_ || !armed_.load(std::memory_order_acquire)) continue;
    // Read after `armed_` (acquire): an arming this poll sees has its count here too, so a deadline
    // left from an earlier arming is never taken for it.
    if (const uint64_t a = arms_.load(std::memory_order_acquire); a != seen_arms_) {
      seen_arms_ = a;
      deadline_ = now + timeout_s_;
      continue;
    }
    if (NowSeconds() > deadline_) {
      // Still the same arming (a call that ended and the next one armed since would be named
      // wrongly, and its describe() read mid-write): else its deadline starts now.
      if (arms_.load(std::memory_order_acquire) != seen_arms_ || !armed_.load(std::memory_order_acquire)) continue;
      armed_.store(false, std::memory_order_relaxed);
      if (heartbeats_) Mark(kGaveUp);  // the peers' reports leave this rank out: it only waited
      const auto* describe = describe_.load(std::memory_order_relaxed);
      std::string what = describe ? (*describe)() : what_;
      if (heartbeats_) {
        const std::string peers = heartbeats_->Describe();
        if (!peers.empty()) what += "; " + peers;
      }
      if (peer_report_) {
        const std::string peers = peer_report_();
        if (!peers.empty()) what += "; " + peers;
      }
      lock.unlock();
      on_expire_(what, timeout_s_);
      lock.lock();
    }
  }
}

void Watchdog::EndOnLauncherSignal() {
  std::lock_guard lock(mu_);
  if (!heartbeats_ || !thread_.joinable()) return;  // without both the default end is the better one
  struct sigaction sa {};
  sa.sa_sigaction = OnLauncherSignal;
  sa.sa_flags = SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  signal_hooked_ = true;
}

void Watchdog::UnhookLauncherSignal() {
  if (!signal_hooked_) return;
  signal_hooked_ = false;
  signal(SIGTERM, SIG_DFL);
  if (g_launcher_signal.load() != 0) raise(SIGTERM);  // it came while nothing could report it
}

void Watchdog::ReportLauncherSignal(std::unique_lock<std::mutex>& lock, int sig) {
  // Only a peer that failed on its own counts (dead, stopped, exit()): not one that gave up waiting
  // or that the same SIGTERM is ending. None: the user's or a scheduler's SIGTERM, the default end.
  const std::string failed = heartbeats_->Describe(/*failed_only=*/true);
  const bool armed = armed_.load(std::memory_order_acquire) && !describe_.load(std::memory_order_relaxed);
  const std::string during = armed ? " during " + what_ : "";
  const int rank = heartbeats_->rank();
  // The lock stays held to the end: nothing else (the destructor's unhooking) may end the process
  // before the line is out.
  (void)lock;
  if (!failed.empty()) {
    LogInfo("rank {} ended by its launcher (SIGTERM){}: {}; exit 2", rank, during, failed);
    std::_Exit(2);
  }
  signal(sig, SIG_DFL);
  raise(sig);
  std::_Exit(128 + sig);
}

}  // namespace ciuic
