#pragma once
// ParallelFor over [0, n) in contiguous ranges on short-lived threads: used for host-side fills and
// verification of large buffers, never inside a timed region.
#include <cstddef>
#include <functional>

namespace ciuic {

// Threads used by ParallelFor (default: hardware threads / local ranks, at least 1).
void SetParallelThreads(int threads);
int ParallelThreads();
void ParallelFor(size_t n, const std::function<void(size_t begin, size_t end)>& fn);

}  // namespace ciuic
