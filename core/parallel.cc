#include "core/parallel.h"

#include <algorithm>
#include <atomic>
#include <thread>
#include <vector>

namespace ciuic {

namespace {
std::atomic<int> g_threads{0};
// Below this many elements a thread costs more than it saves.
constexpr size_t kMinPerThread = 1 << 16;
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
  std::vector<std::thread> pool;
  const size_t per = (n + threads - 1) / threads;
  for (size_t t = 1; t < threads; ++t) {
    const size_t b = std::min(n, t * per), e = std::min(n, b + per);
    pool.emplace_back([&fn, b, e] { fn(b, e); });
  }
  fn(0, std::min(n, per));
  for (auto& th : pool) th.join();
}

}  // namespace ciuic
