// CUDA twins of the element codecs (casts, block-scaled fp8/int8/int4, sign1), bit-identical to
// kernels/cpu/codecs.cc: the same element math (quant_math.h), one warp per scale block so the RMS
// sum follows the CPU's 32-lane order, and this file built with --fmad=false. Encode reads its block
// twice (absmax/RMS, then quantise; the second read hits L1/L2); decode is one thread per element.
#include <cuda_runtime.h>

#include <cfloat>
#include <cstring>

#include "core/error.h"
#include "kernels/codec_kernels.h"
#include "kernels/cuda/launch.h"
#include "kernels/quant_math.h"

namespace ciuic::cuda {

namespace {

using namespace qm;  // NOLINT: the element math is this file's vocabulary

constexpr uint32_t kAbsMask = 0x7fffffffu;
constexpr uint32_t kInfBits = 0x7f800000u;

__device__ __forceinline__ float FormatMax(CodecKind k) {
  switch (k) {
    case CodecKind::kFp8E4M3: return 448.0f;
    case CodecKind::kFp8E5M2: return 57344.0f;
    case CodecKind::kInt4: return 7.0f;
    default: return 127.0f;
  }
}

__device__ __forceinline__ float LoadScale(const uint8_t* wire, size_t b) {
  float s;
  memcpy(&s, wire + b * 4, 4);
  return s;
}

template <CodecKind K>
__device__ __forceinline__ float DecodeElement(const uint8_t* payload, size_t i, float scale) {
  if constexpr (K == CodecKind::kInt8) {
    return static_cast<float>(reinterpret_cast<const int8_t*>(payload)[i]) * scale;
  } else if constexpr (K == CodecKind::kInt4) {
    const uint8_t byte = payload[i / 2];
    const int8_t nib = static_cast<int8_t>(static_cast<uint8_t>((i & 1) ? (byte & 0xf0u) : (byte << 4))) >> 4;
    return static_cast<float>(nib) * scale;
  } else if constexpr (K == CodecKind::kSign1) {
    return ((payload[i / 8] >> (i & 7)) & 1u) ? -scale : scale;
  } else {
    return Fp8ToFloat(payload[i], K == CodecKind::kFp8E4M3 ? Fp8::kE4M3 : Fp8::kE5M2) * scale;
  }
}

// The value to encode at element i: in (+ residual), or decode(wire_in) + local.
template <CodecKind K, bool kDecodeAdd>
__device__ __forceinline__ float Source(const float* in, const float* residual, const uint8_t* payload_in,
                                        float scale_in, size_t i) {
  if constexpr (kDecodeAdd) {
    return DecodeElement<K>(payload_in, i, scale_in) + in[i];
  } else {
    return residual ? in[i] + residual[i] : in[i];
  }
}

__device__ __forceinline__ int32_t QuantInt(float v, int32_t qmax, bool sr, uint32_t r) {
  int32_t q;
  if (sr) {
    q = QuantizeInt(v, qmax, true, r);
  } else {
    q = __float2int_rn(v);
  }
  return q > qmax ? qmax : (q < -qmax ? -qmax : q);
}

// One warp per scale block.
template <CodecKind K, bool kDecodeAdd>
__global__ void QuantEncodeKernel(QuantArgs a, const float* in, float* residual, const uint8_t* wire_in, size_t n,
                                  uint8_t* wire, uint32_t* nonfinite) {
  const size_t nb = (n + a.block - 1) / a.block;
  const unsigned lane = threadIdx.x % 32;
  const size_t warps = static_cast<size_t>(gridDim.x) * (blockDim.x / 32);
  uint8_t* payload = wire + nb * 4;
  const uint8_t* payload_in = kDecodeAdd ? wire_in + nb * 4 : nullptr;
  for (size_t b = (static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32; b < nb; b += warps) {
    const size_t first = b * a.block, m = min(static_cast<size_t>(a.block), n - first);
    const float scale_in = kDecodeAdd ? LoadScale(wire_in, b) : 0.0f;
    uint32_t amax = 0;
    float sumsq = 0.0f;
    for (size_t j = lane; j < m; j += 32) {
      const float e = Source<K, kDecodeAdd>(in, residual, payload_in, scale_in, first + j);
      amax = max(amax, Bits(e) & kAbsMask);
      if constexpr (K == CodecKind::kSign1) sumsq = __fadd_rn(sumsq, __fmul_rn(e, e));
    }
    for (int w = 16; w >= 1; w /= 2) {
      amax = max(amax, __shfl_xor_sync(0xffffffffu, amax, w));
      if constexpr (K == CodecKind::kSign1) sumsq = __fadd_rn(sumsq, __shfl_xor_sync(0xffffffffu, sumsq, w));
    }
    sumsq = __shfl_sync(0xffffffffu, sumsq, 0);
    if (amax >= kInfBits) {
      if (lane == 0) {
        const float nan = __int_as_float(0x7fc00000);
        memcpy(wire + b * 4, &nan, 4);
        if (nonfinite) atomicOr(nonfinite, 1u);
      }
      const size_t bytes = K == CodecKind::kInt4 ? (m + 1) / 2 : K == CodecKind::kSign1 ? (m + 7) / 8 : m;
      const size_t off = K == CodecKind::kInt4 ? first / 2 : K == CodecKind::kSign1 ? first / 8 : first;
      for (size_t j = lane; j < bytes; j += 32) payload[off + j] = 0;
      continue;
    }
    float scale, inv = 0.0f;
    if constexpr (K == CodecKind::kSign1) {
      scale = __fsqrt_rn(__fdiv_rn(sumsq, static_cast<float>(m)));
    } else {
      const float absmax = __uint_as_float(amax), qmax = FormatMax(K);
      const bool zero = amax < 0x00800000u;  // subnormal absmax: sent as zeros, as on the CPU
      scale = zero ? 0.0f : __fdiv_rn(absmax, qmax);
      inv = zero ? 0.0f : __fdiv_rn(qmax, absmax);
    }
    // Every lane has read its share of the block before lane 0 may overwrite an in-place wire.
    __syncwarp();
    if (lane == 0) memcpy(wire + b * 4, &scale, 4);
    if constexpr (K == CodecKind::kInt4) {
      for (size_t j = 2 * lane; j < m; j += 64) {
        int32_t pair[2] = {0, 0};
        for (size_t t = 0; t < 2 && j + t < m; ++t) {
          const size_t i = first + j + t;
          const float e = Source<K, kDecodeAdd>(in, residual, payload_in, scale_in, i);
          const uint32_t r = a.stochastic ? Uniform32(a.seed, a.step, i) : 0u;
          pair[t] = QuantInt(__fmul_rn(e, inv), 7, a.stochastic, r);
          if (!kDecodeAdd && residual) residual[i] = __fsub_rn(e, __fmul_rn(static_cast<float>(pair[t]), scale));
        }
        payload[(first + j) / 2] = static_cast<uint8_t>((pair[0] & 0xf) | ((pair[1] & 0xf) << 4));
      }
    } else if constexpr (K == CodecKind::kSign1) {
      for (size_t j = 8 * lane; j < m; j += 256) {
        uint32_t byte = 0;
        for (size_t t = 0; t < 8 && j + t < m; ++t) {
          const size_t i = first + j + t;
          const float e = Source<K, kDecodeAdd>(in, residual, payload_in, scale_in, i);
          const uint32_t neg = Bits(e) >> 31;
          byte |= neg << t;
          if (!kDecodeAdd && residual) residual[i] = __fsub_rn(e, neg ? -scale : scale);
        }
        payload[(first + j) / 8] = static_cast<uint8_t>(byte);
      }
    } else {
      for (size_t j = lane; j < m; j += 32) {
        const size_t i = first + j;
        const float e = Source<K, kDecodeAdd>(in, residual, payload_in, scale_in, i);
        const uint32_t r = a.stochastic ? Uniform32(a.seed, a.step, i) : 0u;
        const float v = __fmul_rn(e, inv);
        if constexpr (K == CodecKind::kInt8) {
          const int32_t q = QuantInt(v, 127, a.stochastic, r);
          reinterpret_cast<int8_t*>(payload)[i] = static_cast<int8_t>(q);
          if (!kDecodeAdd && residual) residual[i] = __fsub_rn(e, __fmul_rn(static_cast<float>(q), scale));
        } else {
          const Fp8 fmt = K == CodecKind::kFp8E4M3 ? Fp8::kE4M3 : Fp8::kE5M2;
          const uint8_t c = a.stochastic ? FloatToFp8(v, fmt, true, r) : FloatToFp8Rne(v, fmt);
          payload[i] = c;
          if (!kDecodeAdd && residual) residual[i] = __fsub_rn(e, __fmul_rn(Fp8ToFloat(c, fmt), scale));
        }
      }
    }
  }
}

template <CodecKind K>
__global__ void QuantDecodeKernel(uint32_t block, const uint8_t* wire, size_t n, float* out, bool accumulate) {
  const size_t nb = (n + block - 1) / block;
  const uint8_t* payload = wire + nb * 4;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const float v = DecodeElement<K>(payload, i, LoadScale(wire, i / block));
    out[i] = accumulate ? __fadd_rn(out[i], v) : v;
  }
}

// Casts: one thread per element.
template <CodecKind K>
__global__ void CastEncodeKernel(const float* in, float* residual, size_t n, float prescale, float inv_prescale,
                                 uint8_t* wire, uint32_t* nonfinite) {
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const float e = residual ? __fadd_rn(in[i], residual[i]) : in[i];
    const bool ok = (Bits(e) & kAbsMask) < kInfBits;
    if (!ok && nonfinite) atomicOr(nonfinite, 1u);
    const float x = prescale == 1.0f ? e : __fmul_rn(e, prescale);
    const uint16_t h = K == CodecKind::kFp16 ? FloatToHalf(x) : FloatToBf16(x);
    memcpy(wire + 2 * i, &h, 2);
    if (residual && ok) {
      const float d = K == CodecKind::kFp16 ? HalfToFloat(h) : Bf16ToFloat(h);
      residual[i] = __fsub_rn(e, prescale == 1.0f ? d : __fmul_rn(d, inv_prescale));
    }
  }
}

template <CodecKind K>
__global__ void CastDecodeKernel(const uint8_t* wire, size_t n, float inv_prescale, float* out, bool accumulate) {
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    uint16_t h;
    memcpy(&h, wire + 2 * i, 2);
    float d = K == CodecKind::kFp16 ? HalfToFloat(h) : Bf16ToFloat(h);
    if (inv_prescale != 1.0f) d = __fmul_rn(d, inv_prescale);
    out[i] = accumulate ? __fadd_rn(out[i], d) : d;
  }
}

// Casts have no blocks: decode-add-encode is one element-wise pass.
template <CodecKind K>
__global__ void CastDecodeAddEncodeKernel(const uint8_t* wire_in, const float* local, size_t n, float prescale,
                                          float inv_prescale, uint8_t* wire_out, uint32_t* nonfinite) {
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    uint16_t h;
    memcpy(&h, wire_in + 2 * i, 2);
    float d = K == CodecKind::kFp16 ? HalfToFloat(h) : Bf16ToFloat(h);
    if (inv_prescale != 1.0f) d = __fmul_rn(d, inv_prescale);
    const float e = __fadd_rn(local[i], d);
    if ((Bits(e) & kAbsMask) >= kInfBits && nonfinite) atomicOr(nonfinite, 1u);
    const float x = prescale == 1.0f ? e : __fmul_rn(e, prescale);
    const uint16_t o = K == CodecKind::kFp16 ? FloatToHalf(x) : FloatToBf16(x);
    memcpy(wire_out + 2 * i, &o, 2);
  }
}

void CheckBlock(const QuantArgs& a) {
  if (a.block < 32 || a.block > 65536 || a.block % 32 != 0)
    throw UsageError(fmt::format("codec block {} must be a multiple of 32 in 32..65536", a.block));
}

template <bool kDecodeAdd>
void LaunchEncode(const QuantArgs& a, const float* in, float* residual, const uint8_t* wire_in, size_t n,
                  uint8_t* wire, uint32_t* nonfinite, cudaStream_t s) {
  CheckBlock(a);
  const size_t nb = (n + a.block - 1) / a.block;
  const unsigned grid = GridFor(nb * 32, kThreads);
#define CIUIC_CASE(K)                                                                                       \
  case K:                                                                                                   \
    QuantEncodeKernel<K, kDecodeAdd><<<grid, kThreads, 0, s>>>(a, in, residual, wire_in, n, wire, nonfinite); \
    break;
  switch (a.kind) {
    CIUIC_CASE(CodecKind::kInt8)
    CIUIC_CASE(CodecKind::kInt4)
    CIUIC_CASE(CodecKind::kSign1)
    CIUIC_CASE(CodecKind::kFp8E4M3)
    CIUIC_CASE(CodecKind::kFp8E5M2)
    default: throw UsageError("QuantEncode: not an element codec");
  }
#undef CIUIC_CASE
  CIUIC_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void QuantEncode(const QuantArgs& a, const float* in, float* residual, size_t n, uint8_t* wire, uint32_t* nonfinite,
                 void* stream) {
  if (n == 0) return;
  auto s = static_cast<cudaStream_t>(stream);
  if (a.kind == CodecKind::kFp16 || a.kind == CodecKind::kBf16) {
    const unsigned grid = GridFor(n, kThreads);
    if (a.kind == CodecKind::kFp16)
      CastEncodeKernel<CodecKind::kFp16><<<grid, kThreads, 0, s>>>(in, residual, n, a.prescale, 1.0f / a.prescale,
                                                                    wire, nonfinite);
    else
      CastEncodeKernel<CodecKind::kBf16><<<grid, kThreads, 0, s>>>(in, residual, n, a.prescale, 1.0f / a.prescale,
                                                                    wire, nonfinite);
    CIUIC_CUDA_CHECK(cudaGetLastError());
    return;
  }
  LaunchEncode<false>(a, in, residual, nullptr, n, wire, nonfinite, s);
}

void QuantDecodeAddEncode(const QuantArgs& a, const uint8_t* wire_in, const float* local, size_t n, uint8_t* wire_out,
                          uint32_t* nonfinite, void* stream) {
  if (n == 0) return;
  auto s = static_cast<cudaStream_t>(stream);
  if (a.kind == CodecKind::kFp16 || a.kind == CodecKind::kBf16) {
    const unsigned grid = GridFor(n, kThreads);
    if (a.kind == CodecKind::kFp16)
      CastDecodeAddEncodeKernel<CodecKind::kFp16><<<grid, kThreads, 0, s>>>(wire_in, local, n, a.prescale,
                                                                             1.0f / a.prescale, wire_out, nonfinite);
    else
      CastDecodeAddEncodeKernel<CodecKind::kBf16><<<grid, kThreads, 0, s>>>(wire_in, local, n, a.prescale,
                                                                             1.0f / a.prescale, wire_out, nonfinite);
    CIUIC_CUDA_CHECK(cudaGetLastError());
    return;
  }
  LaunchEncode<true>(a, local, nullptr, wire_in, n, wire_out, nonfinite, s);
}

void QuantDecode(const QuantArgs& a, const uint8_t* wire, size_t n, float* out, bool accumulate, void* stream) {
  if (n == 0) return;
  auto s = static_cast<cudaStream_t>(stream);
  const unsigned grid = GridFor(n, kThreads);
  switch (a.kind) {
    case CodecKind::kFp16:
      CastDecodeKernel<CodecKind::kFp16><<<grid, kThreads, 0, s>>>(wire, n, 1.0f / a.prescale, out, accumulate);
      break;
    case CodecKind::kBf16:
      CastDecodeKernel<CodecKind::kBf16><<<grid, kThreads, 0, s>>>(wire, n, 1.0f / a.prescale, out, accumulate);
      break;
#define CIUIC_CASE(K)                                                                    \
  case K:                                                                                \
    CheckBlock(a);                                                                       \
    QuantDecodeKernel<K><<<grid, kThreads, 0, s>>>(a.block, wire, n, out, accumulate); \
    break;
      CIUIC_CASE(CodecKind::kInt8)
      CIUIC_CASE(CodecKind::kInt4)
      CIUIC_CASE(CodecKind::kSign1)
      CIUIC_CASE(CodecKind::kFp8E4M3)
      CIUIC_CASE(CodecKind::kFp8E5M2)
#undef CIUIC_CASE
    default: throw UsageError("QuantDecode: not an element codec");
  }
  CIUIC_CUDA_CHECK(cudaGetLastError());
}

bool Available() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

}  // namespace ciuic::cuda
