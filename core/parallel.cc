#include "core/parallel.h"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

namespace ciuic {

namespace {
std::atomic<int> g_threads{0};
// Below this many elements a thread costs more than it saves.
constexpr size_t kMinPerThread = 1 << 16;

// Set on the pool's workers, and on a caller while it runs its own part: a ParallelFor inside a part runs
// on threads of its own (the pool is busy with the outer call).
thread_local bool t_in_pool = false;

// The workers ParallelFor hands its parts to: started at the first call that needs them, kept for the
// process (the training kernels call ParallelFor per kernel, in timed loops; a thread start costs tens of
// microseconds on a VM). One call at a time: a caller that finds the pool taken (another thread's call,
// or a part's own nested call) runs on short-lived threads instead, as before the pool.
class Pool {
 public:
  // Runs parts 1..parts-1 of fn on workers and part 0 on the caller; false when the pool is taken.
  bool Run(size_t parts, const std::function<void(size_t part)>& part) {
    std::unique_lock<std::mutex> busy(busy_, std::try_to_lock);
    if (!busy.owns_lock()) return false;
    Grow(parts - 1);
    {
      const std::lock_guard<std::mutex> lock(m_);
      job_ = &part;
      parts_ = parts;
      left_ = parts - 1;
      ++generation_;
    }
    work_.notify_all();
    struct Wait {  // also when part 0 throws: the workers still read `part`
      Pool* p;
      ~Wait() {
        std::unique_lock<std::mutex> lock(p->m_);
        p->done_.wait(lock, [&] { return p->left_ == 0; });
        p->job_ = nullptr;
      }
    } wait{this};
    struct InPool {  // a ParallelFor inside part 0 must not try the pool this call holds
      InPool() { t_in_pool = true; }
      ~InPool() { t_in_pool = false; }
    } in_pool;
    part(0);
    return true;
  }

 private:
  void Grow(size_t workers) {
    while (workers_ < workers) {
      const size_t index = ++workers_;  // part index this worker runs
      std::thread([this, index] { Work(index); }).detach();
    }
  }

  void Work(size_t index) {
    t_in_pool = true;
    // A kept thread takes no process signals (a user's SIGINT, a child's SIGCHLD): the threads that
    // wait for them get them.
    sigset_t async;
    sigemptyset(&async);
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGALRM, SIGCHLD, SIGUSR1, SIGUSR2}) sigaddset(&async, sig);
    pthread_sigmask(SIG_BLOCK, &async, nullptr);
    uint64_t seen = 0;
    {
      const std::lock_guard<std::mutex> lock(m_);
      seen = generation_;  // started for the call being published now: that call is the next generation
      if (job_) --seen;
    }
    for (;;) {
      const std::function<void(size_t)>* job = nullptr;
      {
        std::unique_lock<std::mutex> lock(m_);
        work_.wait(lock, [&] { return generation_ != seen; });
        seen = generation_;
        if (index >= parts_) continue;  // a call with fewer parts than workers
        job = job_;
      }
      (*job)(index);
      const std::lock_guard<std::mutex> lock(m_);
      if (--left_ == 0) done_.notify_one();
    }
  }

  std::mutex busy_;  // held by the one call using the pool
  std::mutex m_;
  std::condition_variable work_, done_;
  const std::function<void(size_t)>* job_ = nullptr;
  size_t parts_ = 0, left_ = 0;
  uint64_t generation_ = 0;
  size_t workers_ = 0;  // only the busy_ holder grows it
};

// Never destroyed (its workers wait for the next call until the process ends). A child of fork() has
// none of its parent's workers: it makes a pool of its own.
Pool& ThePool() {
  static std::mutex m;
  static Pool* pool = nullptr;
  static pid_t owner = 0;
  const std::lock_guard<std::mutex> lock(m);
  if (!pool || owner != getpid()) {
    pool = new Pool();
    owner = getpid();
  }
  return *pool;
}

void SpawnFor(size_t threads, size_t n, size_t per, const std::function<void(size_t, size_t)>& fn) {
  std::vector<std::thread> pool;
  for (size_t t = 1; t < threads; ++t) {
    const size_t b = std::min(n, t * per), e = std::min(n, b + per);
    pool.emplace_back([&fn, b, e] { fn(b, e); });
  }
  fn(0, std::min(n, per));
  for (auto& th : pool) th.join();
}
}  // namespace

void SetParallelThreads(int threads) { g_threads = std::max(1, threads); }

int ParallelThreads() {
  const int t = g_threads.load();
  if (t > 0) return t;
  return std::max(1u, std::thread::hardware_concurrency());
}

void ParallelFor(size_t n, const std::function<void(size_t, size_t)>& fn) {
  const size_t threads = std::min<size_t>(ParallelThreads(), std::max<size_t>(1, n / kMinPerThread));
  if (threads <= 1) {
    fn(0, n);
    return;
  }
  const size_t per = (n + threads - 1) / threads;
  if (!t_in_pool) {
    const std::function<void(size_t)> part = [&](size_t t) {
      const size_t b = std::min(n, t * per), e = std::min(n, b + per);
      fn(b, e);
    };
    if (ThePool().Run(threads, part)) return;
  }
  SpawnFor(threads, n, per, fn);
}

}  // namespace ciuic
