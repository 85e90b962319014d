#pragma once
// ParallelFor over [0, n) in contiguous ranges, one per thread: host-side fills and verification of large
// buffers, and the CPU training kernels (kernels/cpu/train.cc), which run it in timed loops. Its threads
// are a pool kept for the process; a call made while another holds the pool (another thread's, or one
// nested in a part) runs on threads started for it.
#include <cstddef>
#include <functional>

namespace ciuic {

// Threads used by ParallelFor (default: hardware threads / local ranks, at least 1).
void SetParallelThreads(int threads);
int ParallelThreads();
void ParallelFor(size_t n, const std::function<void(size_t begin, size_t end)>& fn);

}  // namespace ciuic
