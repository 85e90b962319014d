// Sizes shared by every implementation of the codec kernels (wire layouts: codec_kernels.h).
#include <cmath>

#include "core/error.h"
#include "kernels/codec_kernels.h"
#include "kernels/quant_math.h"

namespace ciuic {

size_t ScaleBlocks(size_t n, uint32_t block) { return (n + block - 1) / block; }

size_t QuantWireBytes(const QuantArgs& a, size_t n) {
  const size_t scales = ScaleBlocks(n, a.block) * sizeof(float);
  switch (a.kind) {
    case CodecKind::kNone:
      return n * 4;
    case CodecKind::kFp16:
    case CodecKind::kBf16:
      return n * 2;
    case CodecKind::kFp8E4M3:
    case CodecKind::kFp8E5M2:
    case CodecKind::kInt8:
      return scales + n;
    case CodecKind::kInt4:
      return scales + (n + 1) / 2;
    case CodecKind::kSign1:
      return scales + (n + 7) / 8;
    default:
      throw UsageError("QuantWireBytes: not an element codec");
  }
}

size_t SparseCount(size_t n, double ratio) {
  if (n == 0) return 0;
  const double k = std::ceil(static_cast<double>(n) * ratio);
  return std::min(n, std::max<size_t>(1, static_cast<size_t>(k)));
}

MatrixView PowerSgdView(size_t n) {
  if (n == 0) return {0, 0};
  size_t cols = static_cast<size_t>(std::ceil(std::sqrt(static_cast<double>(n))));
  while (cols * cols < n) ++cols;
  while (cols > 1 && (cols - 1) * (cols - 1) >= n) --cols;
  return {(n + cols - 1) / cols, cols};
}

// The CUDA radix select's state (< 4 KiB) and 24 B per 4096-element chunk (kernels/cuda/sparse.cu);
// the CPU path needs none of it.
// The select state, 24 bytes per 4096-element chunk, and the sampled selection's keys.
size_t TopKWorkspaceBytes(size_t n) { return 4096 + (n + 4095) / 4096 * 24 + qm::TopKSampleCount(n) * 4 + 256; }

}  // namespace ciuic
