#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "core/timer.h"
#include "core/watchdog.h"

namespace ciuic {
namespace {

TEST(Watchdog, FiresOnlyWhenArmedPastDeadline) {
  std::atomic<int> fired{0};
  std::string what;
  {
    Watchdog w(0.2, [&](const std::string& s, double) {
      what = s;
      ++fired;
    });
    w.Arm("quick step");
    w.Disarm();
    std::this_thread::sleep_for(std::chrono::milliseconds(400));
    EXPECT_EQ(fired.load(), 0);
    w.Arm("stuck step");
    std::this_thread::sleep_for(std::chrono::milliseconds(600));
  }
  EXPECT_EQ(fired.load(), 1);
  EXPECT_EQ(what, "stuck step");
}

// The deadline is time without progress: a healthy phase three times longer than the timeout that
// reports progress every 20 ms never fires; once progress stops it fires within about 1.1x.
TEST(Watchdog, ProgressRestartsTheClockAndSilenceFires) {
  std::atomic<int> fired{0};
  std::atomic<double> fired_at{0};
  Watchdog w(0.3, [&](const std::string&, double) {
    fired_at = NowSeconds();
    ++fired;
  });
  w.Arm("long healthy phase");
  const double start = NowSeconds();
  while (NowSeconds() - start < 0.9) {
    w.Progress();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(fired.load(), 0);
  const double silent = NowSeconds();
  while (fired.load() == 0 && NowSeconds() - silent < 2.0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_EQ(fired.load(), 1);
  EXPECT_GE(fired_at.load() - silent, 0.25);
  EXPECT_LE(fired_at.load() - silent, 0.3 * 1.1 + 0.1);  // scheduling slack on a busy 2-core VM
}

// The hot-path arming (a describe pointer: no lock, no clock) fires only for a call stuck past its
// timeout, within 1.2x, names it through the pointer, and never inherits an expired deadline: armed
// again long after an earlier arming's deadline passed, a quick call does not fire.
TEST(Watchdog, HotPathArmingFiresOnlyForAStuckCall) {
  std::atomic<int> fired{0};
  std::atomic<double> fired_at{0};
  std::string what;
  const std::function<std::string()> describe = [] { return std::string("bucket 7 of tensor 3"); };
  Watchdog w(0.3, [&](const std::string& s, double) {
    what = s;
    fired_at = NowSeconds();
    ++fired;
  });
  w.Arm("an earlier phase");  // its deadline passes while disarmed
  w.Disarm();
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  for (int call = 0; call < 20000; ++call) {  // many quick calls, each armed and disarmed
    w.Arm(&describe);
    w.Disarm();
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  for (int call = 0; call < 20; ++call) {  // quick calls spread over more than the timeout
    w.Arm(&describe);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    w.Disarm();
  }
  EXPECT_EQ(fired.load(), 0);
  const double stuck = NowSeconds();
  w.Arm(&describe);
  while (fired.load() == 0 && NowSeconds() - stuck < 2.0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_EQ(fired.load(), 1);
  EXPECT_EQ(what, "bucket 7 of tensor 3");
  EXPECT_GE(fired_at.load() - stuck, 0.25);
  EXPECT_LE(fired_at.load() - stuck, 0.3 * 1.2 + 0.1);  // scheduling slack on a busy 2-core VM
}

TEST(Watchdog, ZeroTimeoutIsOff) {
  std::atomic<int> fired{0};
  Watchdog w(0, [&](const std::string&, double) { ++fired; });
  w.Arm("x");
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(fired.load(), 0);
}

// A rank that calls exit() mid-run leaves its record marked: the launcher names it (not the peers
// it took down), and a program that asked for it ends with the runtime-failure code 2.
TEST(Heartbeats, ExitMidRunIsNamedAndCanBeAFailure) {
  char tmpl[] = "/tmp/ciuic-hb-test-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  for (const bool failure : {false, true}) {
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      static Heartbeats* hb = new Heartbeats(dir, 1, 2);  // never destroyed: an exit mid-run
      (void)hb;
      if (failure) Heartbeats::TreatExitAsFailure();
      exit(1);
    }
    int status = 0;
    ASSERT_EQ(waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), failure ? 2 : 1);
    EXPECT_TRUE(Heartbeats::AnyLeft(dir, 2));
    EXPECT_EQ(Heartbeats::FirstSilent(dir, 2),
              "rank 1 (pid " + std::to_string(child) + ") exited in the middle of the run");
    std::filesystem::remove(dir + "/rank-1");
  }
  // A rank that ends cleanly leaves nothing behind.
  { Heartbeats clean(dir, 0, 2); }
  EXPECT_FALSE(Heartbeats::AnyLeft(dir, 2));
  std::filesystem::remove_all(dir);
}

// A process that was itself stopped and resumed does not expire on the time it spent stopped.
TEST(Watchdog, ItsOwnStopIsNotSilenceOfThePeers) {
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    Watchdog w(1.5, [](const std::string&, double) { _exit(9); });
    w.Arm("a step");
    for (int i = 0; i < 10; ++i) {  // progress every 0.1 s, then stopped for 3 s by the parent
      w.Progress();
      usleep(100000);
    }
    usleep(500000);  // resumed: less than the timeout of silence after the stop
    _exit(0);
  }
  usleep(500000);
  kill(child, SIGSTOP);
  usleep(3000000);
  kill(child, SIGCONT);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the watchdog expired on its own stop";
}

// mpiexec ends the other ranks with SIGTERM a second after one died: a rank that hooked it names the
// peer that failed (and only that one: not a peer the same SIGTERM ended); with no failed peer (the
// user's SIGTERM) it ends by the signal; a SIGTERM from anyone but its parent is its own death.
TEST(Heartbeats, LauncherSigtermNamesOnlyTheFailedPeer) {
  char tmpl[] = "/tmp/ciuic-hb-term-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  auto read_all = [](const std::string& path) {
    std::string text;
    if (FILE* f = std::fopen(path.c_str(), "r")) {
      char buf[512];
      size_t n;
      while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) text.append(buf, n);
      std::fclose(f);
    }
    return text;
  };
  // A rank that hooks SIGTERM and runs until a signal ends it; its stderr goes to `err`.
  auto start_rank = [&](int rank, const std::string& err) {
    const pid_t pid = fork();
    if (pid == 0) {
      const int fd = open(err.c_str(), O_CREAT | O_WRONLY | O_TRUNC, 0600);
      dup2(fd, 2);
      Watchdog w(30, [](const std::string&, double) { _exit(9); });
      w.SetHeartbeats(std::make_unique<Heartbeats>(dir, rank, 3));
      w.EndOnLauncherSignal();
      for (;;) pause();
    }
    return pid;
  };
  auto wait_status = [](pid_t pid) {
    int status = 0;
    waitpid(pid, &status, 0);
    return status;
  };
  // Rank 2, SIGTERMed by its parent (this test, its launcher) while no peer has failed: the signal's
  // own end, and its record says the launcher ended it.
  const pid_t r2 = start_rank(2, dir + "/err-2");
  usleep(300000);
  kill(r2, SIGTERM);
  int status = wait_status(r2);
  ASSERT_TRUE(WIFSIGNALED(status)) << status;
  EXPECT_EQ(WTERMSIG(status), SIGTERM);
  EXPECT_EQ(read_all(dir + "/err-2"), "");
  // Rank 0 dies by SIGKILL: its record stays, unmarked.
  const pid_t r0 = start_rank(0, dir + "/err-0");
  usleep(300000);
  kill(r0, SIGKILL);
  wait_status(r0);
  // Rank 1, SIGTERMed by its launcher now: exit 2, naming rank 0 dead, not rank 2.
  const pid_t r1 = start_rank(1, dir + "/err-1");
  usleep(300000);
  kill(r1, SIGTERM);
  status = wait_status(r1);
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), 2);
  const std::string said = read_all(dir + "/err-1");
  EXPECT_NE(
      said.find("rank 1 ended by its launcher (SIGTERM): rank 0 (pid " + std::to_string(r0) + ") is dead; exit 2"),
      std::string::npos)
      << said;
  EXPECT_EQ(said.find("rank 2"), std::string::npos) << said;
  // The launcher (FirstSilent) sees one record without a mark: rank 0.
  EXPECT_NE(Heartbeats::FirstSilent(dir, 3).find("rank 0 (pid " + std::to_string(r0) + ")"), std::string::npos)
      << Heartbeats::FirstSilent(dir, 3);
  // A SIGTERM from a process other than its parent: rank 1's own death, unmarked, so a peer names it.
  std::filesystem::remove(dir + "/rank-1");
  const pid_t again = start_rank(1, dir + "/err-1b");
  usleep(300000);
  const pid_t sender = fork();
  if (sender == 0) {
    kill(again, SIGTERM);
    _exit(0);
  }
  wait_status(sender);
  status = wait_status(again);
  ASSERT_TRUE(WIFSIGNALED(status)) << status;
  EXPECT_EQ(WTERMSIG(status), SIGTERM);
  {
    Heartbeats observer(dir, 2, 3);  // rank 2's record is replaced: this one is running
    const std::string failed = observer.Describe(/*failed_only=*/true);
    EXPECT_NE(failed.find("rank 1 (pid " + std::to_string(again) + ") is dead"), std::string::npos) << failed;
    EXPECT_NE(failed.find("rank 0 (pid " + std::to_string(r0) + ") is dead"), std::string::npos) << failed;
    EXPECT_EQ(failed.find("silent"), std::string::npos) << failed;
  }
  std::filesystem::remove_all(dir);
}

// A peer that gave up waiting (its own deadline expired) is never named by the others: it only waited.
TEST(Heartbeats, PeerThatGaveUpIsNotACulprit) {
  char tmpl[] = "/tmp/ciuic-hb-gave-up-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    Watchdog w(0.3, [](const std::string&, double) { _exit(2); });
    w.SetHeartbeats(std::make_unique<Heartbeats>(dir, 1, 2));
    w.Arm("waiting on rank 0");
    for (;;) pause();
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 2);
  {
    Heartbeats observer(dir, 0, 2);
    EXPECT_EQ(observer.Describe(), "");
    EXPECT_EQ(observer.Describe(/*failed_only=*/true), "");
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace ciuic
