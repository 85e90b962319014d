// ParallelFor (core/parallel.cc): every index once, at any thread count; its threads kept across calls
// (the pool), and the calls the pool cannot take (nested in a part, from another thread at once, in a
// forked child) still complete on threads of their own. Under TSan in scripts/test.sh (test_core).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <thread>
#include <vector>

#include "core/parallel.h"

namespace ciuic {
namespace {

#if defined(__SANITIZE_THREAD__)
constexpr bool kTsan = true;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
constexpr bool kTsan = true;
#else
constexpr bool kTsan = false;
#endif
#else
constexpr bool kTsan = false;
#endif

// Restores the thread count a test changed.
class Threads {
 public:
  explicit Threads(int n) : before_(ParallelThreads()) { SetParallelThreads(n); }
  ~Threads() { SetParallelThreads(before_); }

 private:
  int before_;
};

// Each index of [0, n) counted by the parts that cover it: all exactly once.
bool CoversOnce(size_t n) {
  std::vector<std::atomic<int>> hits(n);
  ParallelFor(n, [&](size_t b, size_t e) {
    for (size_t i = b; i < e; ++i) hits[i]++;
  });
  return std::all_of(hits.begin(), hits.end(), [](const std::atomic<int>& h) { return h.load() == 1; });
}

TEST(ParallelFor, EveryIndexOnceAtEveryThreadCount) {
  for (int threads : {1, 2, 3, 5}) {
    const Threads t(threads);
    for (size_t n : {size_t{0}, size_t{1}, size_t{1000}, size_t{1} << 16, (size_t{1} << 17) + 3, size_t{5} << 17})
      EXPECT_TRUE(CoversOnce(n)) << threads << " threads, n " << n;
  }
}

// The parts after the first run on threads kept from call to call: a thread-local count on those
// threads keeps growing (threads started per call would each start from 0).
TEST(ParallelFor, KeepsItsThreadsFromCallToCall) {
  const Threads t(3);
  thread_local int calls_here = 0;
  std::atomic<int> most{0};
  const std::thread::id caller = std::this_thread::get_id();
  for (int call = 0; call < 20; ++call) {
    std::atomic<int> parts{0};
    ParallelFor(size_t{3} << 16, [&](size_t, size_t) {
      parts++;
      if (std::this_thread::get_id() == caller) return;
      const int c = ++calls_here;
      int prev = most.load();
      while (c > prev && !most.compare_exchange_weak(prev, c)) {
      }
    });
    EXPECT_EQ(parts.load(), 3);
  }
  EXPECT_GE(most.load(), 20);
}

// A ParallelFor inside a part (the caller's own part included) and calls from several threads at once:
// all complete, each index once. (Whether the caller's nested call skips the pool it holds is not
// observable here: glibc's try_lock on a mutex the thread holds fails too; TSan watches that.)
TEST(ParallelFor, NestedAndConcurrentCallsComplete) {
  const Threads t(2);
  std::atomic<int> nested_ok{0};
  ParallelFor(size_t{2} << 16, [&](size_t, size_t) { nested_ok += CoversOnce(size_t{3} << 16) ? 1 : 0; });
  EXPECT_EQ(nested_ok.load(), 2);
  std::atomic<int> ok{0};
  std::vector<std::thread> callers;
  for (int c = 0; c < 4; ++c)
    callers.emplace_back([&] {
      for (int i = 0; i < 25; ++i) ok += CoversOnce(size_t{3} << 16) ? 1 : 0;
    });
  for (auto& c : callers) c.join();
  EXPECT_EQ(ok.load(), 100);
}

// A forked child has none of the parent's pool threads: its calls still complete (on a pool of its own).
TEST(ParallelFor, AForkedChildStillRunsParts) {
  if (kTsan) GTEST_SKIP() << "TSan ends a child that starts threads after a multi-threaded fork (die_after_fork)";
  const Threads t(2);
  ASSERT_TRUE(CoversOnce(size_t{4} << 16));  // the parent's pool exists
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    alarm(20);  // a child waiting on the parent's threads would hang: end it instead
    _exit(CoversOnce(size_t{4} << 16) && CoversOnce(size_t{4} << 16) ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "child ended by signal " << (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

}  // namespace
}  // namespace ciuic
