#pragma once
// Launch policy shared by the CUDA kernels of this folder: threads per block and a grid large enough
// to fill an H100 (132 SMs × 16 blocks of 256) while grid-stride loops cover any size.
#include <cuda_runtime.h>

#include <cstddef>

#include "core/cuda_check.h"

namespace ciuic::cuda {

constexpr unsigned kThreads = 256;
constexpr size_t kMaxGrid = 132 * 16;

inline unsigned GridFor(size_t work_items, unsigned threads) {
  const size_t g = (work_items + threads - 1) / threads;
  return static_cast<unsigned>(g < 1 ? 1 : (g > kMaxGrid ? kMaxGrid : g));
}

}  // namespace ciuic::cuda
