// CUDA fused kernels: (d) multi-tensor flatten/unflatten in one launch per 512 tensors (the tensor
// table travels as a kernel parameter; a tensor whose two ends are 16-byte aligned is copied in 16-byte
// accesses, else in 4-byte ones; 64 bytes in flight per thread either way), (e) unscale + NaN/Inf flag + fp64 sum of
// squares in one pass (block partials added atomically: the norm may differ from the CPU's in the last bits).
#include <cuda_runtime.h>

#include <cub/block/block_reduce.cuh>

#include "kernels/codec_kernels.h"
#include "kernels/cuda/launch.h"
#include "kernels/quant_math.h"

namespace ciuic::cuda {

namespace {

constexpr int kTensorsPerLaunch = 512;

struct TensorTable {
  float* data[kTensorsPerLaunch];
  size_t count[kTensorsPerLaunch];
  size_t offset[kTensorsPerLaunch];
};

// Elements i, i + stride, ... below `end` of src to dst, kPer a round: every load of a round issued
// before its first store, predicated at the end, so a thread keeps kPer accesses in flight at any length.
template <class T, int kPer>
__device__ __forceinline__ void CopyRounds(const T* src, T* dst, size_t i, size_t end, size_t stride) {
  for (; i < end; i += kPer * stride) {
    T v[kPer];
#pragma unroll
    for (int u = 0; u < kPer; ++u)
      if (i + u * stride < end) v[u] = src[i + u * stride];
#pragma unroll
    for (int u = 0; u < kPer; ++u)
      if (i + u * stride < end) dst[i + u * stride] = v[u];
  }
}

// 64 bytes in flight per thread: 16-byte accesses where both ends allow, else 4-byte ones. Tensors
// packed at arbitrary element offsets (most of a bucket's, once one length is not a multiple of 4)
// take the 4-byte path.
template <bool kFlatten>
__global__ void MultiTensorCopy(TensorTable table, float* bucket) {
  const int t = blockIdx.y;
  float* tensor = table.data[t];
  float* flat = bucket + table.offset[t];
  const size_t n = table.count[t];
  const float* src = kFlatten ? tensor : flat;
  float* dst = kFlatten ? flat : tensor;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  const size_t first = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  size_t done = 0;
  if (((reinterpret_cast<uintptr_t>(src) | reinterpret_cast<uintptr_t>(dst)) & 15u) == 0) {
    CopyRounds<float4, 4>(reinterpret_cast<const float4*>(src), reinterpret_cast<float4*>(dst), first, n / 4, stride);
    done = n / 4 * 4;
  }
  CopyRounds<float, 16>(src, dst, done + first, n, stride);
}

template <bool kFlatten>
void Launch(const TensorRef* tensors, int count, float* bucket, cudaStream_t s) {
  size_t offset = 0;
  for (int first = 0; first < count; first += kTensorsPerLaunch) {
    TensorTable table;
    const int here = count - first < kTensorsPerLaunch ? count - first : kTensorsPerLaunch;
    size_t largest = 0;
    for (int t = 0; t < here; ++t) {
      table.data[t] = tensors[first + t].data;
      table.count[t] = tensors[first + t].count;
      table.offset[t] = offset;
      offset += tensors[first + t].count;
      largest = largest > table.count[t] ? largest : table.count[t];
    }
    // About 16 floats a thread (four 16-byte accesses) for the largest tensor.
    const dim3 grid(GridFor((largest + 15) / 16, kThreads), static_cast<unsigned>(here));
    MultiTensorCopy<kFlatten><<<grid, kThreads, 0, s>>>(table, bucket);
    CIUIC_CUDA_CHECK(cudaGetLastError());
  }
}

__global__ void UnscaleKernel(float* g, size_t n, float inv_scale, uint32_t* nonfinite, double* norm_sq) {
  using Reduce = cub::BlockReduce<double, kThreads>;
  __shared__ typename Reduce::TempStorage tmp;
  double acc = 0.0;
  uint32_t amax = 0;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const float x = __fmul_rn(g[i], inv_scale);
    g[i] = x;
    const uint32_t a = qm::Bits(x) & 0x7fffffffu;
    amax = amax > a ? amax : a;
    acc += static_cast<double>(x) * x;
  }
  if (amax >= 0x7f800000u && nonfinite) atomicOr(nonfinite, 1u);
  const double sum = Reduce(tmp).Sum(acc);
  if (threadIdx.x == 0 && norm_sq) atomicAdd(norm_sq, sum);
}

__global__ void ScaleKernel(float* g, size_t n, float factor) {
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    g[i] = __fmul_rn(g[i], factor);
}

__global__ void AddKernel(float* acc, const float* x, size_t n) {
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    acc[i] = __fadd_rn(acc[i], x[i]);
}

__global__ void AddToKernel(float* out, const float* a, const float* x, size_t n) {
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    out[i] = __fadd_rn(a[i], x[i]);
}

}  // namespace

void AddTo(float* out, const float* a, const float* x, size_t n, void* stream) {
  if (n == 0) return;
  AddToKernel<<<GridFor(n, kThreads), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(out, a, x, n);
  CIUIC_CUDA_CHECK(cudaGetLastError());
}

void AddToUncached(float* out, const float* a, const float* x, size_t n, void* stream) { AddTo(out, a, x, n, stream); }

void AddInPlace(float* acc, const float* x, size_t n, void* stream) {
  if (n == 0) return;
  AddKernel<<<GridFor(n, kThreads), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(acc, x, n);
  CIUIC_CUDA_CHECK(cudaGetLastError());
}

void FlattenTensors(const TensorRef* tensors, int count, float* bucket, void* stream) {
  Launch<true>(tensors, count, bucket, static_cast<cudaStream_t>(stream));
}

void UnflattenTensors(const float* bucket, const TensorRef* tensors, int count, void* stream) {
  Launch<false>(tensors, count, const_cast<float*>(bucket), static_cast<cudaStream_t>(stream));
}

void UnscaleCheckNorm(float* g, size_t n, float inv_scale, uint32_t* nonfinite, double* norm_sq, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  if (norm_sq) CIUIC_CUDA_CHECK(cudaMemsetAsync(norm_sq, 0, sizeof(double), s));
  if (n == 0) return;
  UnscaleKernel<<<GridFor(n, kThreads), kThreads, 0, s>>>(g, n, inv_scale, nonfinite, norm_sq);
  CIUIC_CUDA_CHECK(cudaGetLastError());
}

void ScaleInPlace(float* g, size_t n, float factor, void* stream) {
  if (n == 0) return;
  ScaleKernel<<<GridFor(n, kThreads), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(g, n, factor);
  CIUIC_CUDA_CHECK(cudaGetLastError());
}

}  // namespace ciuic::cuda
