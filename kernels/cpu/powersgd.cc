// CPU PowerSGD primitives over the matrix view of a flat bucket (PowerSgdView: rows × cols,
// row-major, zero past n); p is rows × r and q cols × r, column-major. The summation orders are the
// contract the CUDA twin reproduces: M·q and the Gram-Schmidt dot products in the 32-lane order of
// quant_math.h, Mᵀ·p sequentially over rows, the reconstruction sequentially over r.
#include <cmath>

#include "kernels/codec_kernels.h"
#include "kernels/quant_math.h"

namespace ciuic::cpu {

namespace {
// Below this fraction of its length before projection a column counts as dependent (fp32 leaves
// ~1e-7 of noise after cancellation; normalising that noise would break orthogonality).
constexpr float kDependentRatio = 1e-4f;

inline float At(const float* m, size_t n, size_t cols, size_t i, size_t j) {
  const size_t idx = i * cols + j;
  return idx < n ? m[idx] : 0.0f;
}
float LaneDot(const float* a, const float* b, size_t len) {
  float lanes[qm::kLanes] = {};
  for (size_t i = 0; i < len; ++i) lanes[i % qm::kLanes] = lanes[i % qm::kLanes] + a[i] * b[i];
  return qm::CombineLanes(lanes);
}
}  // namespace

void PowerSgdMulQ(const float* m, size_t n, const float* q, int r, float* p, void*) {
  const MatrixView v = PowerSgdView(n);
  for (int c = 0; c < r; ++c) {
    for (size_t i = 0; i < v.rows; ++i) {
      float lanes[qm::kLanes] = {};
      for (size_t j = 0; j < v.cols; ++j)
        lanes[j % qm::kLanes] = lanes[j % qm::kLanes] + At(m, n, v.cols, i, j) * q[j + v.cols * c];
      p[i + v.rows * c] = qm::CombineLanes(lanes);
    }
  }
}

void PowerSgdMulP(const float* m, size_t n, const float* p, int r, float* q, void*) {
  const MatrixView v = PowerSgdView(n);
  for (int c = 0; c < r; ++c) {
    for (size_t j = 0; j < v.cols; ++j) {
      float acc = 0.0f;
      for (size_t i = 0; i < v.rows; ++i) acc = acc + At(m, n, v.cols, i, j) * p[i + v.rows * c];
      q[j + v.cols * c] = acc;
    }
  }
}

void PowerSgdOrthonormalize(float* p, size_t rows, int r, void*) {
  for (int c = 0; c < r; ++c) {
    float* pc = p + rows * c;
    const float before = std::sqrt(LaneDot(pc, pc, rows));
    // Two Gram-Schmidt passes ("twice is enough") keep fp32 columns orthogonal to working precision.
    for (int pass = 0; pass < 2; ++pass) {
      for (int d = 0; d < c; ++d) {
        const float* pd = p + rows * d;
        const float dot = LaneDot(pc, pd, rows);
        for (size_t i = 0; i < rows; ++i) pc[i] = pc[i] - dot * pd[i];
      }
    }
    const float norm = std::sqrt(LaneDot(pc, pc, rows));
    // A column (numerically) inside the span of the previous ones carries no information: zero it.
    const bool independent = norm > kDependentRatio * before && norm > 0.0f;
    for (size_t i = 0; i < rows; ++i) pc[i] = independent ? pc[i] / norm : 0.0f;
  }
}

void PowerSgdReconstruct(const float* p, const float* q, size_t n, int r, float* out, bool accumulate, void*) {
  const MatrixView v = PowerSgdView(n);
  for (size_t idx = 0; idx < n; ++idx) {
    const size_t i = idx / v.cols, j = idx % v.cols;
    float acc = 0.0f;
    for (int c = 0; c < r; ++c) acc = acc + p[i + v.rows * c] * q[j + v.cols * c];
    out[idx] = accumulate ? out[idx] + acc : acc;
  }
}

}  // namespace ciuic::cpu
