#include "core/parallel.h"

#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <memory>
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
    if (workers_ >= workers) return;
    // A kept thread takes no process signals (a user's SIGINT, a child's SIGCHLD): the threads that wait
    // for them get them. Blocked here, around the start, so the thread has the mask from its first
    // instruction; the caller's own mask is put back.
    sigset_t async, old;
    sigemptyset(&async);
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGALRM, SIGCHLD, SIGUSR1, SIGUSR2}) sigaddset(&async, sig);
    pthread_sigmask(SIG_BLOCK, &async, &old);
    struct Restore {
      const sigset_t* old;
      ~Restore() { pthread_sigmask(SIG_SETMASK, old, nullptr); }
    } restore{&old};
    while (workers_ < workers) {
      const size_t index = workers_ + 1;                   // the part this worker runs
      std::thread worker([this, index] { Work(index); });  // may throw: then no worker is counted
      worker.detach();
      workers_ = index;
    }
  }

  void Work(size_t index) {
    t_in_pool = true;
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

 public:
  Pool* dropped_before = nullptr;  // ForkChild's list
};

// The pool, never destroyed (its workers wait for the next call until the process ends). A child of
// fork() has none of its parent's workers: the child handler drops the parent's pool (kept reachable in a
// list, so a leak checker sees no leak) and the child's first call makes its own.
std::atomic<Pool*> g_pool{nullptr};
Pool* g_dropped = nullptr;  // the dropped pools, each pointing at the one dropped before

void ForkChild() {
  Pool* const parent = g_pool.exchange(nullptr);
  if (!parent) return;
  parent->dropped_before = g_dropped;
  g_dropped = parent;
}

Pool& ThePool() {
  static const bool registered = pthread_atfork(nullptr, nullptr, ForkChild) == 0;
  (void)registered;
  Pool* pool = g_pool.load(std::memory_order_acquire);
  if (pool) return *pool;
  // No lock (a lock held by another thread at fork() would stay held in the child): the first of racing
  // callers installs its pool, the others drop theirs (no thread started yet).
  auto fresh = std::make_unique<Pool>();
  if (g_pool.compare_exchange_strong(pool, fresh.get(), std::memory_order_acq_rel)) return *fresh.release();
  return *pool;
}

void SpawnFor(size_t threads, size_t n, size_t per, const std::function<void(size_t, size_t)>& fn) {
  std::vector<std::thread> pool;
  struct Join {  // also when a start or part 0 throws: no joinable thread is destroyed
    std::vector<std::thread>* pool;
    ~Join() {
      for (auto& th : *pool) th.join();
    }
  } join{&pool};
  for (size_t t = 1; t < threads; ++t) {
    const size_t b = std::min(n, t * per), e = std::min(n, b + per);
    pool.emplace_back([&fn, b, e] { fn(b, e); });
  }
  fn(0, std::min(n, per));
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
