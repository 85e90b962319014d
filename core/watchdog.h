#pragma once
// A deadline for blocking work, measured as time without progress: Arm() before a step that could
// hang (a collective waiting on a dead or stuck peer), Progress() whenever a piece of it completes
// (an iteration, a message), Disarm() after. If timeout_s pass with no progress, the handler runs on
// the watchdog's thread with a description of the stuck step (it is expected to print one line and
// end the process). A long healthy phase never expires: each completed piece restarts the clock.
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

namespace ciuic {

// The default deadline of every tool: $CIUIC_TIMEOUT (seconds, >= 0; 0 is off) or 60 s. A malformed
// value is a UsageError naming the variable.
double DefaultTimeoutSeconds();

// A side channel between the processes of one job on one host that keeps working when a rank is
// stopped: each rank's watchdog thread rewrites a small file (progress count, wall time, pid) in a
// folder shared by the job on every poll; when a deadline expires the expiring rank reads the folder
// and names the ranks that went silent (stopped, dead) or fell behind. The folder is
// $CIUIC_HEARTBEAT_DIR (set by ciuic-bench's self-launch), else /dev/shm/ciuic-<launcher job id>
// under mpiexec; nothing without a launcher.
class Heartbeats {
 public:
  // From the launcher's environment (OMPI_COMM_WORLD_RANK/SIZE, PMIX_NAMESPACE); null outside one.
  static std::unique_ptr<Heartbeats> FromEnvironment();
  Heartbeats(std::string dir, int rank, int size);
  ~Heartbeats();  // removes this rank's file (the folder too when it is the last)
  Heartbeats(const Heartbeats&) = delete;
  Heartbeats& operator=(const Heartbeats&) = delete;
  void Beat(uint64_t progress);
  // "rank 1 (pid 4242) is stopped; rank 2 silent for 3.1 s" — or "" when every rank looks alive.
  // failed_only: only peers that failed on their own (dead, stopped, called exit() mid-run), not
  // silent or lagging ones. Peers that gave up waiting (their deadline) or that their launcher is
  // ending are never named.
  std::string Describe(bool failed_only = false) const;
  int rank() const { return rank_; }
  const std::string& dir() const { return dir_; }
  // For the launcher after the job ended abnormally: the rank whose heartbeats stopped first, well
  // before the others' (the one that died or stopped; its peers were ended after it), as
  // "rank 1 (pid 4242) went silent first, 1.2 s before the others"; "" when no rank stands out.
  static std::string FirstSilent(const std::string& dir, int size);
  // Whether any rank's file is still there: some rank did not end cleanly (died, was killed, or
  // called exit() mid-run), so an exit code of 1 is no verdict on the input.
  static bool AnyLeft(const std::string& dir, int size);
  // For a program whose ranks only ever end by returning from main (ciuic-bench): a call of exit()
  // while this process's heartbeat file is open (a library's error path mid-run) prints one line
  // naming the rank and ends the process with exit code 2, the code of a runtime failure, so any
  // launcher reports 2. Without it exit() only marks the record (the runtime inside a user's job,
  // whose own exit codes are the user's).
  static void TreatExitAsFailure();
  // For a rank whose error leaves its peers inside a collective it will never join (the clean way
  // out, MPI_Finalize, would wait for them for ever): marks its record "ended with an error" (the
  // peers and the launcher name it so), or, when the error only reports a peer that failed first
  // (lost_a_peer: a closed connection), as one that gave up, which nobody names; flushes stdio and
  // ends the process with `code` at once.
  [[noreturn]] static void ExitAfterError(int code, bool lost_a_peer);

 private:
  std::string dir_;
  int rank_, size_;
  int fd_ = -1;
};

// For a rank a job launcher started (torchrun, srun), which nothing else ends when the launcher is
// SIGKILLed: a thread polls the parent process every 0.2 s, and once this process has been reparented
// (the launcher is gone) prints `line` and sends this process SIGTERM, so it ends as it would by the
// launcher's own SIGTERM (its handler reports it and cleans up). Once per process; a process whose
// parent is already init does nothing.
void EndWhenParentEnds(std::string line);

// SIGINT, SIGTERM and SIGHUP end this process at once with exit 128 + signal, writing
// "<tool>: interrupted (SIGTERM): <who> ends; exit 143" first when `speak` (one rank of a job speaks
// for it). For a rank of a job launcher that sends its workers the user's Ctrl-C or SIGTERM: no rank
// waits for another, and nothing of a run's outputs is written (they are written at the end, whole).
// A signal this process was started ignoring (nohup's SIGHUP) stays ignored.
void ExitOnInterrupt(const std::string& tool, const std::string& who, bool speak);

class Watchdog {
 public:
  // timeout_s <= 0 disables it.
  Watchdog(double timeout_s, std::function<void(const std::string& what, double timeout_s)> on_expire);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  void Arm(std::string what);
  // Arms without formatting anything, locking or reading a clock: `describe` (which must outlive the
  // arming) is called only when the deadline expires, on the watchdog's thread. The deadline starts
  // when the watchdog's thread next polls (within a poll, at most 100 ms, of the call). For per-call
  // arming on hot paths.
  void Arm(const std::function<std::string()>* describe);
  void Disarm();  // lock-free
  // Cheap enough for every iteration of a timed loop (one relaxed atomic add; the watchdog's thread
  // notices the change on its next poll).
  void Progress() { progress_.fetch_add(1, std::memory_order_relaxed); }
  // Beats on every poll, and names silent or lagging peers in the expiry message.
  void SetHeartbeats(std::unique_ptr<Heartbeats> hb);
  // The peers whose records show they failed on their own (Heartbeats::Describe(true)); "" without
  // heartbeats or when none did.
  std::string FailedPeers();
  // Appended to the expiry message when not empty (ranks as threads: which rank the others wait on;
  // a job's ranks: which of them went silent in the job's store).
  void SetPeerReport(std::function<std::string()> report);
  // Called from the watchdog's thread on every poll (0.1 s), armed or not, as the heartbeat file is
  // written: a sign of life for peers on other hosts (a beat in the job's store). Not while this
  // process has just been resumed from a stop (as the file). Must not block.
  void SetBeat(std::function<void()> beat);
  // For a rank of a launcher that ends a job with SIGTERM when one rank fails (mpiexec does, a
  // second after a rank died or exited non-zero): SIGTERM from the parent process (the launcher; from
  // anyone else it is this rank's own end, by the default action) is caught, and the watchdog's thread prints
  // one line naming the failed peers, "rank 0 ended by its launcher (signal Terminated) during ...:
  // rank 2 (pid 811) is dead; exit 2", then exits 2; with no failed peer (the user's SIGTERM) the
  // process ends by the signal as before. Needs heartbeats and a running deadline (timeout > 0);
  // call after SetHeartbeats.
  void EndOnLauncherSignal();
  double timeout() const { return timeout_s_; }

 private:
  void Loop();
  [[noreturn]] void ReportLauncherSignal(std::unique_lock<std::mutex>& lock, int sig);
  void UnhookLauncherSignal();  // under mu_
  bool signal_hooked_ = false;  // under mu_
  double timeout_s_;
  std::function<void(const std::string&, double)> on_expire_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<bool> armed_{false};
  bool stop_ = false;
  double deadline_ = 0;  // the thread's (and Arm(string)'s), under mu_
  std::atomic<uint64_t> progress_{0};
  uint64_t seen_progress_ = 0;
  std::atomic<uint64_t> arms_{0};  // every arming counts one: the thread starts a deadline on a change
  uint64_t seen_arms_ = 0;
  double resumed_at_ = -1e9;  // the thread's: when it last found itself resumed from a stop
  std::string what_;          // under mu_
  std::atomic<const std::function<std::string()>*> describe_{nullptr};  // set: what_ is formatted by it
  std::unique_ptr<Heartbeats> heartbeats_;
  std::function<std::string()> peer_report_;  // under mu_
  std::function<void()> beat_;                // under mu_
  std::thread thread_;
};

}  // namespace ciuic
