// CUDA PowerSGD primitives, bit-identical to kernels/cpu/powersgd.cc: M·q one warp per output with
// the 32-lane order, Mᵀ·p one thread per output summing rows in order, Gram-Schmidt in one warp
// (lane-order dots), reconstruction one thread per element. Built with --fmad=false.
#include <cuda_runtime.h>

#include "kernels/codec_kernels.h"
#include "kernels/cuda/launch.h"
#include "kernels/quant_math.h"

namespace ciuic::cuda {

namespace {

__device__ __forceinline__ float At(const float* m, size_t n, size_t cols, size_t i, size_t j) {
  const size_t idx = i * cols + j;
  return idx < n ? m[idx] : 0.0f;
}

__device__ __forceinline__ float WarpSum(float v) {
  for (int w = 16; w >= 1; w /= 2) v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, w));
  return __shfl_sync(0xffffffffu, v, 0);
}

__global__ void MulQKernel(const float* m, size_t n, size_t rows, size_t cols, const float* q, int r, float* p) {
  const unsigned lane = threadIdx.x % 32;
  const size_t outputs = rows * static_cast<size_t>(r);
  const size_t warps = static_cast<size_t>(gridDim.x) * (blockDim.x / 32);
  for (size_t o = (static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32; o < outputs; o += warps) {
    const size_t i = o % rows, c = o / rows;
    float acc = 0.0f;
    for (size_t j = lane; j < cols; j += 32) acc = __fadd_rn(acc, __fmul_rn(At(m, n, cols, i, j), q[j + cols * c]));
    acc = WarpSum(acc);
    if (lane == 0) p[i + rows * c] = acc;
  }
}

__global__ void MulPKernel(const float* m, size_t n, size_t rows, size_t cols, const float* p, int r, float* q) {
  const size_t outputs = cols * static_cast<size_t>(r);
  for (size_t o = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; o < outputs;
       o += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const size_t j = o % cols, c = o / cols;
    float acc = 0.0f;
    for (size_t i = 0; i < rows; ++i) acc = __fadd_rn(acc, __fmul_rn(At(m, n, cols, i, j), p[i + rows * c]));
    q[j + cols * c] = acc;
  }
}

__device__ float LaneDot(const float* a, const float* b, size_t len) {
  float acc = 0.0f;
  for (size_t i = threadIdx.x; i < len; i += 32) acc = __fadd_rn(acc, __fmul_rn(a[i], b[i]));
  return WarpSum(acc);
}

// Same rule as the CPU: two Gram-Schmidt passes, dependent columns (norm ≤ 1e-4 of the original)
// become zero.
__global__ void OrthonormalizeKernel(float* p, size_t rows, int r) {
  for (int c = 0; c < r; ++c) {
    float* pc = p + rows * c;
    const float before = __fsqrt_rn(LaneDot(pc, pc, rows));
    for (int pass = 0; pass < 2; ++pass) {
      for (int d = 0; d < c; ++d) {
        const float* pd = p + rows * d;
        const float dot = LaneDot(pc, pd, rows);
        __syncwarp();
        for (size_t i = threadIdx.x; i < rows; i += 32) pc[i] = __fsub_rn(pc[i], __fmul_rn(dot, pd[i]));
        __syncwarp();
      }
    }
    const float norm = __fsqrt_rn(LaneDot(pc, pc, rows));
    const bool independent = norm > __fmul_rn(1e-4f, before) && norm > 0.0f;
    __syncwarp();
    for (size_t i = threadIdx.x; i < rows; i += 32) pc[i] = independent ? __fdiv_rn(pc[i], norm) : 0.0f;
    __syncwarp();
  }
}

__global__ void ReconstructKernel(const float* p, const float* q, size_t n, size_t rows, size_t cols, int r, float* out,
                                  bool accumulate) {
  for (size_t idx = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < n;
       idx += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const size_t i = idx / cols, j = idx % cols;
    float acc = 0.0f;
    for (int c = 0; c < r; ++c) acc = __fadd_rn(acc, __fmul_rn(p[i + rows * c], q[j + cols * c]));
    out[idx] = accumulate ? __fadd_rn(out[idx], acc) : acc;
  }
}

}  // namespace

void PowerSgdMulQ(const float* m, size_t n, const float* q, int r, float* p, void* stream) {
  const MatrixView v = PowerSgdView(n);
  if (n == 0) return;
  MulQKernel<<<GridFor(v.rows * r * 32, kThreads), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(m, n, v.rows,
                                                                                                     v.cols, q, r, p);
  CIUIC_CUDA_CHECK(cudaGetLastError());
}

void PowerSgdMulP(const float* m, size_t n, const float* p, int r, float* q, void* stream) {
  const MatrixView v = PowerSgdView(n);
  if (n == 0) return;
  MulPKernel<<<GridFor(v.cols * r, kThreads), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(m, n, v.rows, v.cols, p,
                                                                                                r, q);
  CIUIC_CUDA_CHECK(cudaGetLastError());
}

void PowerSgdOrthonormalize(float* p, size_t rows, int r, void* stream) {
  if (rows == 0) return;
  OrthonormalizeKernel<<<1, 32, 0, static_cast<cudaStream_t>(stream)>>>(p, rows, r);
  CIUIC_CUDA_CHECK(cudaGetLastError());
}

void PowerSgdReconstruct(const float* p, const float* q, size_t n, int r, float* out, bool accumulate, void* stream) {
  const MatrixView v = PowerSgdView(n);
  if (n == 0) return;
  ReconstructKernel<<<GridFor(n, kThreads), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(p, q, n, v.rows, v.cols,
                                                                                              r, out, accumulate);
  CIUIC_CUDA_CHECK(cudaGetLastError());
}

}  // namespace ciuic::cuda
