// CUDA twins of the element codecs (casts, block-scaled fp8/int8/int4, sign1), bit-identical to
// kernels/cpu/codecs.cc: the same element math (quant_math.h), one warp per scale block so the RMS
// sum follows the CPU's 32-lane order, and this file built with --fmad=false.
// Two paths. Where every pointer is 16-byte aligned (cudaMalloc's are) the kernels are memory-bound
// and vectorised: cast encode takes 8 elements a thread (two 16-byte loads, one 16-byte store), decode
// a tile per warp whose every store instruction writes 512 contiguous bytes (4 floats a lane), and
// encode of a 128- or 256-element block holds it in registers (one read: 4 or 8 elements a lane),
// sign1 packing its bits with a warp ballot. Elsewhere (a piece of a bucket at an odd offset, other block sizes, a
// short last block) the element-wise kernels run. Both do the same element math, so the bits are the same.
#include <cuda_fp16.h>
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
    case CodecKind::kFp8E4M3:
      return 448.0f;
    case CodecKind::kFp8E5M2:
      return 57344.0f;
    case CodecKind::kInt4:
      return 7.0f;
    default:
      return 127.0f;
  }
}

// fp8 through Hopper's (sm_89+) conversion instructions, the same codes as qm's emulation: RNE
// saturating to the largest finite code (`satfinite`) is FloatToFp8Rne for every finite input and for
// infinities; a NaN, which the emulation also maps to the signed largest code, is patched to it.
// Decoding is exact through fp16 (every e4m3 and e5m2 value is an fp16 value); the NaN codes (and e5m2's
// infinities) keep the emulation's bit patterns.
__device__ __forceinline__ uint8_t Fp8EncodeRne(float v, Fp8 fmt) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  uint16_t pair;
  if (fmt == Fp8::kE4M3)
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(pair) : "f"(0.0f), "f"(v));
  else
    asm("cvt.rn.satfinite.e5m2x2.f32 %0, %1, %2;" : "=h"(pair) : "f"(0.0f), "f"(v));
  const uint32_t max_code = fmt == Fp8::kE4M3 ? 0x7eu : 0x7bu;
  const uint32_t c = pair & 0xffu;
  return static_cast<uint8_t>((c & 0x7fu) > max_code ? ((Bits(v) >> 24) & 0x80u) | max_code : c);
#else
  return FloatToFp8Rne(v, fmt);
#endif
}

__device__ __forceinline__ float Fp8Decode(uint8_t c, Fp8 fmt) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  const uint32_t special = fmt == Fp8::kE4M3 ? 0x7fu : 0x7cu;
  if ((c & 0x7fu) >= special) return Fp8ToFloat(c, fmt);
  uint32_t h2;
  const uint16_t in = c;
  if (fmt == Fp8::kE4M3)
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(h2) : "h"(in));
  else
    asm("cvt.rn.f16x2.e5m2x2 %0, %1;" : "=r"(h2) : "h"(in));
  return __half2float(__ushort_as_half(static_cast<unsigned short>(h2 & 0xffffu)));
#else
  return Fp8ToFloat(c, fmt);
#endif
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
    return Fp8Decode(payload[i], K == CodecKind::kFp8E4M3 ? Fp8::kE4M3 : Fp8::kE5M2) * scale;
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

// ---- the vectorised paths --------------------------------------------------------------------------

bool Aligned(const void* p, uintptr_t to) { return (reinterpret_cast<uintptr_t>(p) & (to - 1)) == 0; }

__device__ __forceinline__ void Unpack4(const float4& v, float* e) {
  e[0] = v.x;
  e[1] = v.y;
  e[2] = v.z;
  e[3] = v.w;
}
__device__ __forceinline__ float4 Pack4(const float* e) { return make_float4(e[0], e[1], e[2], e[3]); }

// fp16 through the hardware conversion (IEEE round to nearest even, overflow to inf: FloatToHalf's
// rule, which the integer emulation spent most of the encode's time on); NaN keeps FloatToHalf's code.
__device__ __forceinline__ uint16_t CastOf(CodecKind k, float x) {
  if (k != CodecKind::kFp16) return FloatToBf16(x);
  if ((Bits(x) & kAbsMask) > kInfBits) return FloatToHalf(x);
  return __half_as_ushort(__float2half_rn(x));
}
__device__ __forceinline__ float CastBack(CodecKind k, uint16_t h) {
  return k == CodecKind::kFp16 ? HalfToFloat(h) : Bf16ToFloat(h);
}

// Casts, 8 elements a thread: g indexes groups of 8 (n8 of them); the tail runs element-wise.
template <CodecKind K>
__global__ void CastEncodeVec(const float* in, float* residual, size_t n8, float prescale, float inv_prescale,
                              uint8_t* wire, uint32_t* nonfinite) {
  for (size_t g = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; g < n8;
       g += static_cast<size_t>(gridDim.x) * blockDim.x) {
    float e[8], r[8];
    Unpack4(reinterpret_cast<const float4*>(in)[2 * g], e);
    Unpack4(reinterpret_cast<const float4*>(in)[2 * g + 1], e + 4);
    if (residual) {
      Unpack4(reinterpret_cast<const float4*>(residual)[2 * g], r);
      Unpack4(reinterpret_cast<const float4*>(residual)[2 * g + 1], r + 4);
#pragma unroll
      for (int t = 0; t < 8; ++t) e[t] = __fadd_rn(e[t], r[t]);
    }
    uint32_t w[4];
    bool bad = false;
#pragma unroll
    for (int t = 0; t < 8; ++t) {
      const bool ok = (Bits(e[t]) & kAbsMask) < kInfBits;
      bad |= !ok;
      const float x = prescale == 1.0f ? e[t] : __fmul_rn(e[t], prescale);
      const uint16_t h = CastOf(K, x);
      w[t / 2] = (t & 1) ? (w[t / 2] | (static_cast<uint32_t>(h) << 16)) : h;
      if (residual && ok) {
        const float d = CastBack(K, h);
        r[t] = __fsub_rn(e[t], prescale == 1.0f ? d : __fmul_rn(d, inv_prescale));
      }
    }
    if (bad && nonfinite) atomicOr(nonfinite, 1u);
    reinterpret_cast<uint4*>(wire)[g] = make_uint4(w[0], w[1], w[2], w[3]);
    if (residual) {
      reinterpret_cast<float4*>(residual)[2 * g] = Pack4(r);
      reinterpret_cast<float4*>(residual)[2 * g + 1] = Pack4(r + 4);
    }
  }
}

// Decode, one warp per tile of 256 elements: in each of two steps lane l takes 4 elements at
// tile + 128 * step + 4 * l, so every store instruction of the warp writes 512 contiguous bytes.
template <CodecKind K>
__global__ void CastDecodeVec(const uint8_t* wire, size_t n, float inv_prescale, float* out, bool accumulate) {
  const size_t tiles = n / 256;
  const unsigned lane = threadIdx.x % 32;
  const size_t warps = static_cast<size_t>(gridDim.x) * (blockDim.x / 32);
  for (size_t tile = (static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32; tile < tiles; tile += warps) {
    uint2 w[2];
    float o[8];
#pragma unroll
    for (int q = 0; q < 2; ++q) {
      const size_t first = tile * 256 + q * 128 + 4 * lane;
      w[q] = reinterpret_cast<const uint2*>(wire)[first / 4];
      if (accumulate) Unpack4(reinterpret_cast<const float4*>(out)[first / 4], o + 4 * q);
    }
#pragma unroll
    for (int q = 0; q < 2; ++q) {
      const uint32_t words[2] = {w[q].x, w[q].y};
#pragma unroll
      for (int t = 0; t < 4; ++t) {
        float v = CastBack(K, static_cast<uint16_t>(words[t / 2] >> (16 * (t & 1))));
        if (inv_prescale != 1.0f) v = __fmul_rn(v, inv_prescale);
        o[4 * q + t] = accumulate ? __fadd_rn(o[4 * q + t], v) : v;
      }
      reinterpret_cast<float4*>(out)[(tile * 256 + q * 128 + 4 * lane) / 4] = Pack4(o + 4 * q);
    }
  }
}

template <CodecKind K>
__global__ void CastDecodeAddEncodeVec(const uint8_t* wire_in, const float* local, size_t n8, float prescale,
                                       float inv_prescale, uint8_t* wire_out, uint32_t* nonfinite) {
  for (size_t g = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; g < n8;
       g += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const uint4 w = reinterpret_cast<const uint4*>(wire_in)[g];
    const uint32_t words[4] = {w.x, w.y, w.z, w.w};
    float l[8];
    Unpack4(reinterpret_cast<const float4*>(local)[2 * g], l);
    Unpack4(reinterpret_cast<const float4*>(local)[2 * g + 1], l + 4);
    uint32_t o[4];
    bool bad = false;
#pragma unroll
    for (int t = 0; t < 8; ++t) {
      float d = CastBack(K, static_cast<uint16_t>(words[t / 2] >> (16 * (t & 1))));
      if (inv_prescale != 1.0f) d = __fmul_rn(d, inv_prescale);
      const float e = __fadd_rn(l[t], d);
      bad |= (Bits(e) & kAbsMask) >= kInfBits;
      const float x = prescale == 1.0f ? e : __fmul_rn(e, prescale);
      const uint16_t h = CastOf(K, x);
      o[t / 2] = (t & 1) ? (o[t / 2] | (static_cast<uint32_t>(h) << 16)) : h;
    }
    if (bad && nonfinite) atomicOr(nonfinite, 1u);
    reinterpret_cast<uint4*>(wire_out)[g] = make_uint4(o[0], o[1], o[2], o[3]);
  }
}

// The payload byte (or nibble, or bit) of element t of a 32-bit-aligned run, as DecodeElement reads it.
template <CodecKind K>
__device__ __forceinline__ float DecodeFromWords(const uint32_t* words, int t, float scale) {
  if constexpr (K == CodecKind::kInt8) {
    return static_cast<float>(static_cast<int8_t>(words[t / 4] >> (8 * (t % 4)))) * scale;
  } else if constexpr (K == CodecKind::kInt4) {
    const uint8_t byte = static_cast<uint8_t>(words[t / 8] >> (8 * ((t / 2) % 4)));
    const int8_t nib = static_cast<int8_t>(static_cast<uint8_t>((t & 1) ? (byte & 0xf0u) : (byte << 4))) >> 4;
    return static_cast<float>(nib) * scale;
  } else if constexpr (K == CodecKind::kSign1) {
    return ((words[t / 32] >> (t % 32)) & 1u) ? -scale : scale;
  } else {
    return Fp8Decode(static_cast<uint8_t>(words[t / 4] >> (8 * (t % 4))),
                     K == CodecKind::kFp8E4M3 ? Fp8::kE4M3 : Fp8::kE5M2) *
           scale;
  }
}

// Payload bits per element, and the 32-bit words a run of `e` elements starting at a multiple of 32
// (sign1), 8 (int4) or 4 elements occupies.
template <CodecKind K>
constexpr int kBitsPer = K == CodecKind::kInt4    ? 4
                         : K == CodecKind::kSign1 ? 1
                                                  : 8;

// Decode, one warp per tile of 512 elements: in each of four steps lane l takes the 4 elements at
// tile + 128 * step + 4 * l (one scale block holds them: blocks are multiples of 32), so every store
// instruction of the warp writes 512 contiguous bytes and every payload load reads a contiguous run.
// Needs out 16-byte and wire 4-byte aligned; the tail runs element-wise.
template <CodecKind K>
__global__ void QuantDecodeVec(uint32_t block, const uint8_t* wire, size_t n, float* out, bool accumulate) {
  const size_t nb = (n + block - 1) / block;
  const uint8_t* payload = wire + nb * 4;
  const float* scales = reinterpret_cast<const float*>(wire);
  const size_t tiles = n / 512;
  const unsigned lane = threadIdx.x % 32;
  const size_t warps = static_cast<size_t>(gridDim.x) * (blockDim.x / 32);
  for (size_t tile = (static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32; tile < tiles; tile += warps) {
    uint32_t bits[4];
    float scale[4], o[16];
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const size_t first = tile * 512 + q * 128 + 4 * lane;
      scale[q] = scales[first / block];
      if constexpr (K == CodecKind::kSign1) {
        bits[q] = reinterpret_cast<const uint32_t*>(payload)[first / 32] >> (first % 32);
      } else if constexpr (K == CodecKind::kInt4) {
        bits[q] = reinterpret_cast<const uint16_t*>(payload)[first / 4];
      } else {
        bits[q] = reinterpret_cast<const uint32_t*>(payload)[first / 4];
      }
      if (accumulate) Unpack4(reinterpret_cast<const float4*>(out)[first / 4], o + 4 * q);
    }
#pragma unroll
    for (int q = 0; q < 4; ++q) {
#pragma unroll
      for (int t = 0; t < 4; ++t) {
        const float v = DecodeFromWords<K>(&bits[q], t, scale[q]);
        o[4 * q + t] = accumulate ? __fadd_rn(o[4 * q + t], v) : v;
      }
      reinterpret_cast<float4*>(out)[(tile * 512 + q * 128 + 4 * lane) / 4] = Pack4(o + 4 * q);
    }
  }
}

// Encode of one whole block of 32 * kPer elements (128 or 256) by one warp, held in registers.
// Element codecs other than sign1: lane l holds the block's elements kPer*l .. kPer*l + kPer - 1 (the
// absmax is order-free); sign1: elements l, l + 32, ... (its RMS sum runs in the CPU's lane order)
// and a ballot packs 32 signs into a word. Needs in/residual 16-byte, wire/wire_in 4-byte aligned.
template <CodecKind K, bool kDecodeAdd, int kPer>
__device__ __forceinline__ void EncodeWholeBlock(const QuantArgs& a, const float* in, float* residual,
                                                 const uint8_t* wire_in, const uint8_t* payload_in, size_t b,
                                                 uint8_t* wire, uint8_t* payload, uint32_t* nonfinite, unsigned lane) {
  constexpr bool kStrided = K == CodecKind::kSign1;
  constexpr size_t kBlock = 32 * kPer;
  const size_t first = b * kBlock;
  const size_t base = kStrided ? first + lane : first + kPer * lane;  // element t is base + t * step
  constexpr size_t kStep = kStrided ? 32 : 1;
  const float scale_in = kDecodeAdd ? LoadScale(wire_in, b) : 0.0f;
  float e[kPer], r[kPer];
  if constexpr (kStrided) {
#pragma unroll
    for (int t = 0; t < kPer; ++t) e[t] = in[base + t * kStep];
    if (!kDecodeAdd && residual) {
#pragma unroll
      for (int t = 0; t < kPer; ++t) r[t] = residual[base + t * kStep];
    }
  } else {
#pragma unroll
    for (int q = 0; q < kPer / 4; ++q) Unpack4(reinterpret_cast<const float4*>(in + base)[q], e + 4 * q);
    if (!kDecodeAdd && residual) {
#pragma unroll
      for (int q = 0; q < kPer / 4; ++q) Unpack4(reinterpret_cast<const float4*>(residual + base)[q], r + 4 * q);
    }
  }
  if constexpr (kDecodeAdd) {
    if constexpr (kStrided) {
#pragma unroll
      for (int t = 0; t < kPer; ++t) e[t] = DecodeElement<K>(payload_in, base + t * kStep, scale_in) + e[t];
    } else {
      constexpr int kWords = kPer * kBitsPer<K> / 32;
      uint32_t words[kWords > 0 ? kWords : 1];
      const uint32_t* src = reinterpret_cast<const uint32_t*>(payload_in + base * kBitsPer<K> / 8);
#pragma unroll
      for (int w = 0; w < kWords; ++w) words[w] = src[w];
#pragma unroll
      for (int t = 0; t < kPer; ++t) e[t] = DecodeFromWords<K>(words, t, scale_in) + e[t];
    }
  } else if (residual) {
#pragma unroll
    for (int t = 0; t < kPer; ++t) e[t] = e[t] + r[t];
  }
  uint32_t amax = 0;
  float sumsq = 0.0f;
#pragma unroll
  for (int t = 0; t < kPer; ++t) {
    amax = max(amax, Bits(e[t]) & kAbsMask);
    if constexpr (K == CodecKind::kSign1) sumsq = __fadd_rn(sumsq, __fmul_rn(e[t], e[t]));
  }
  for (int w = 16; w >= 1; w /= 2) {
    amax = max(amax, __shfl_xor_sync(0xffffffffu, amax, w));
    if constexpr (K == CodecKind::kSign1) sumsq = __fadd_rn(sumsq, __shfl_xor_sync(0xffffffffu, sumsq, w));
  }
  sumsq = __shfl_sync(0xffffffffu, sumsq, 0);
  // Every lane has read its share of the block before any lane may overwrite an in-place wire.
  __syncwarp();
  constexpr size_t kPayloadBytes = kBlock * kBitsPer<K> / 8;  // 16..256 bytes: whole words
  uint32_t* out_words = reinterpret_cast<uint32_t*>(payload + first * kBitsPer<K> / 8);
  if (amax >= kInfBits) {
    if (lane == 0) {
      const float nan = __int_as_float(0x7fc00000);
      memcpy(wire + b * 4, &nan, 4);
      if (nonfinite) atomicOr(nonfinite, 1u);
    }
    for (size_t w = lane; w < kPayloadBytes / 4; w += 32) out_words[w] = 0;
    return;
  }
  float scale, inv = 0.0f;
  if constexpr (K == CodecKind::kSign1) {
    scale = __fsqrt_rn(__fdiv_rn(sumsq, static_cast<float>(kBlock)));
  } else {
    const float absmax = __uint_as_float(amax), qmax = FormatMax(K);
    const bool zero = amax < 0x00800000u;  // subnormal absmax: sent as zeros, as on the CPU
    scale = zero ? 0.0f : __fdiv_rn(absmax, qmax);
    inv = zero ? 0.0f : __fdiv_rn(qmax, absmax);
  }
  if (lane == 0) memcpy(wire + b * 4, &scale, 4);
  if constexpr (K == CodecKind::kSign1) {
#pragma unroll
    for (int t = 0; t < kPer; ++t) {
      const uint32_t neg = Bits(e[t]) >> 31;
      const uint32_t word = __ballot_sync(0xffffffffu, neg != 0);
      if (lane == static_cast<unsigned>(t)) out_words[t] = word;
      r[t] = __fsub_rn(e[t], neg ? -scale : scale);
    }
    if (!kDecodeAdd && residual) {
#pragma unroll
      for (int t = 0; t < kPer; ++t) residual[base + t * kStep] = r[t];
    }
  } else {
    uint32_t words[kPer * kBitsPer<K> / 32];
#pragma unroll
    for (int w = 0; w < kPer * kBitsPer<K> / 32; ++w) words[w] = 0;
#pragma unroll
    for (int t = 0; t < kPer; ++t) {
      const size_t i = base + t;
      const uint32_t rnd = a.stochastic ? Uniform32(a.seed, a.step, i) : 0u;
      const float v = __fmul_rn(e[t], inv);
      uint32_t code;
      float back;
      if constexpr (K == CodecKind::kInt8) {
        const int32_t q = QuantInt(v, 127, a.stochastic, rnd);
        code = static_cast<uint8_t>(static_cast<int8_t>(q));
        back = __fmul_rn(static_cast<float>(q), scale);
      } else if constexpr (K == CodecKind::kInt4) {
        const int32_t q = QuantInt(v, 7, a.stochastic, rnd);
        code = static_cast<uint32_t>(q) & 0xfu;
        back = __fmul_rn(static_cast<float>(q), scale);
      } else {
        const Fp8 fmt = K == CodecKind::kFp8E4M3 ? Fp8::kE4M3 : Fp8::kE5M2;
        const uint8_t c = a.stochastic ? FloatToFp8(v, fmt, true, rnd) : Fp8EncodeRne(v, fmt);
        code = c;
        back = __fmul_rn(Fp8Decode(c, fmt), scale);
      }
      words[t * kBitsPer<K> / 32] |= code << ((t * kBitsPer<K>) % 32);
      r[t] = __fsub_rn(e[t], back);
    }
    uint32_t* dst = reinterpret_cast<uint32_t*>(payload + base * kBitsPer<K> / 8);
#pragma unroll
    for (int w = 0; w < kPer * kBitsPer<K> / 32; ++w) dst[w] = words[w];
    if (!kDecodeAdd && residual) {
#pragma unroll
      for (int q = 0; q < kPer / 4; ++q) reinterpret_cast<float4*>(residual + base)[q] = Pack4(r + 4 * q);
    }
  }
}

// One warp per scale block. kPer > 0: whole blocks of 32 * kPer elements take the register path
// (the caller checked the block size and the alignment); a short last block the element-wise one.
template <CodecKind K, bool kDecodeAdd, int kPer>
__global__ void QuantEncodeKernel(QuantArgs a, const float* in, float* residual, const uint8_t* wire_in, size_t n,
                                  uint8_t* wire, uint32_t* nonfinite) {
  const size_t nb = (n + a.block - 1) / a.block;
  const unsigned lane = threadIdx.x % 32;
  const size_t warps = static_cast<size_t>(gridDim.x) * (blockDim.x / 32);
  uint8_t* payload = wire + nb * 4;
  const uint8_t* payload_in = kDecodeAdd ? wire_in + nb * 4 : nullptr;
  for (size_t b = (static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32; b < nb; b += warps) {
    const size_t first = b * a.block, m = min(static_cast<size_t>(a.block), n - first);
    if constexpr (kPer > 0) {
      if (m == static_cast<size_t>(a.block)) {
        EncodeWholeBlock<K, kDecodeAdd, kPer>(a, in, residual, wire_in, payload_in, b, wire, payload, nonfinite, lane);
        continue;
      }
    }
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
          const uint8_t c = a.stochastic ? FloatToFp8(v, fmt, true, r) : Fp8EncodeRne(v, fmt);
          payload[i] = c;
          if (!kDecodeAdd && residual) residual[i] = __fsub_rn(e, __fmul_rn(Fp8Decode(c, fmt), scale));
        }
      }
    }
  }
}

template <CodecKind K>
__global__ void QuantDecodeKernel(uint32_t block, const uint8_t* wire, size_t n, float* out, bool accumulate,
                                  size_t start = 0) {
  const size_t nb = (n + block - 1) / block;
  const uint8_t* payload = wire + nb * 4;
  for (size_t i = start + static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
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

// int4 packs 8 elements into a word: a lane of a 128-element block (4 elements) has half a word.
template <CodecKind K, int kPer>
constexpr int kPerFor = K == CodecKind::kInt4&& kPer == 4 ? 0 : kPer;

template <bool kDecodeAdd>
void LaunchEncode(const QuantArgs& a, const float* in, float* residual, const uint8_t* wire_in, size_t n, uint8_t* wire,
                  uint32_t* nonfinite, cudaStream_t s) {
  CheckBlock(a);
  const size_t nb = (n + a.block - 1) / a.block;
  const unsigned grid = GridFor(nb * 32, kThreads);
  const bool aligned = Aligned(in, 16) && (residual == nullptr || Aligned(residual, 16)) && Aligned(wire, 4) &&
                       (wire_in == nullptr || Aligned(wire_in, 4));
  const int per = !aligned ? 0 : a.block == 256 ? 8 : a.block == 128 ? 4 : 0;
#define CIUIC_LAUNCH(K, P) \
  QuantEncodeKernel<K, kDecodeAdd, P><<<grid, kThreads, 0, s>>>(a, in, residual, wire_in, n, wire, nonfinite)
#define CIUIC_CASE(K)                   \
  case K:                               \
    if (per == 8)                       \
      CIUIC_LAUNCH(K, 8);               \
    else if (per == 4)                  \
      CIUIC_LAUNCH(K, (kPerFor<K, 4>)); \
    else                                \
      CIUIC_LAUNCH(K, 0);               \
    break;
  switch (a.kind) {
    CIUIC_CASE(CodecKind::kInt8)
    CIUIC_CASE(CodecKind::kInt4)
    CIUIC_CASE(CodecKind::kSign1)
    CIUIC_CASE(CodecKind::kFp8E4M3)
    CIUIC_CASE(CodecKind::kFp8E5M2)
    default:
      throw UsageError("QuantEncode: not an element codec");
  }
#undef CIUIC_CASE
#undef CIUIC_LAUNCH
  CIUIC_CUDA_CHECK(cudaGetLastError());
}

// Casts: the vectorised kernel over whole groups of 8 when every pointer is 16-byte aligned, the
// element-wise one over the rest (all of it otherwise).
template <CodecKind K>
void LaunchCastEncode(const QuantArgs& a, const float* in, float* residual, size_t n, uint8_t* wire,
                      uint32_t* nonfinite, cudaStream_t s) {
  const bool aligned = Aligned(in, 16) && Aligned(wire, 16) && (residual == nullptr || Aligned(residual, 16));
  const size_t n8 = aligned ? n / 8 : 0;
  if (n8 > 0)
    CastEncodeVec<K>
        <<<GridFor(n8, kThreads), kThreads, 0, s>>>(in, residual, n8, a.prescale, 1.0f / a.prescale, wire, nonfinite);
  const size_t done = 8 * n8;
  if (done < n)
    CastEncodeKernel<K>
        <<<GridFor(n - done, kThreads), kThreads, 0, s>>>(in + done, residual ? residual + done : nullptr, n - done,
                                                          a.prescale, 1.0f / a.prescale, wire + 2 * done, nonfinite);
  CIUIC_CUDA_CHECK(cudaGetLastError());
}

template <CodecKind K>
void LaunchCastDecode(const QuantArgs& a, const uint8_t* wire, size_t n, float* out, bool accumulate, cudaStream_t s) {
  const size_t tiles = Aligned(wire, 16) && Aligned(out, 16) ? n / 256 : 0;
  if (tiles > 0)
    CastDecodeVec<K><<<GridFor(tiles * 32, kThreads), kThreads, 0, s>>>(wire, n, 1.0f / a.prescale, out, accumulate);
  const size_t done = 256 * tiles;
  if (done < n)
    CastDecodeKernel<K><<<GridFor(n - done, kThreads), kThreads, 0, s>>>(wire + 2 * done, n - done, 1.0f / a.prescale,
                                                                         out + done, accumulate);
  CIUIC_CUDA_CHECK(cudaGetLastError());
}

template <CodecKind K>
void LaunchCastDecodeAddEncode(const QuantArgs& a, const uint8_t* wire_in, const float* local, size_t n,
                               uint8_t* wire_out, uint32_t* nonfinite, cudaStream_t s) {
  const size_t n8 = Aligned(wire_in, 16) && Aligned(local, 16) && Aligned(wire_out, 16) ? n / 8 : 0;
  if (n8 > 0)
    CastDecodeAddEncodeVec<K><<<GridFor(n8, kThreads), kThreads, 0, s>>>(wire_in, local, n8, a.prescale,
                                                                         1.0f / a.prescale, wire_out, nonfinite);
  const size_t done = 8 * n8;
  if (done < n)
    CastDecodeAddEncodeKernel<K><<<GridFor(n - done, kThreads), kThreads, 0, s>>>(
        wire_in + 2 * done, local + done, n - done, a.prescale, 1.0f / a.prescale, wire_out + 2 * done, nonfinite);
  CIUIC_CUDA_CHECK(cudaGetLastError());
}

// Block-scaled decode: tiles of 512 elements where out is 16-byte and wire 4-byte aligned, then the
// element-wise kernel from where that stopped.
template <CodecKind K>
void LaunchQuantDecode(const QuantArgs& a, const uint8_t* wire, size_t n, float* out, bool accumulate, cudaStream_t s) {
  CheckBlock(a);
  const size_t tiles = Aligned(out, 16) && Aligned(wire, 4) ? n / 512 : 0;
  if (tiles > 0)
    QuantDecodeVec<K><<<GridFor(tiles * 32, kThreads), kThreads, 0, s>>>(a.block, wire, n, out, accumulate);
  const size_t done = 512 * tiles;
  if (done < n)
    QuantDecodeKernel<K><<<GridFor(n - done, kThreads), kThreads, 0, s>>>(a.block, wire, n, out, accumulate, done);
  CIUIC_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void QuantEncode(const QuantArgs& a, const float* in, float* residual, size_t n, uint8_t* wire, uint32_t* nonfinite,
                 void* stream) {
  if (n == 0) return;
  auto s = static_cast<cudaStream_t>(stream);
  if (a.kind == CodecKind::kFp16) return LaunchCastEncode<CodecKind::kFp16>(a, in, residual, n, wire, nonfinite, s);
  if (a.kind == CodecKind::kBf16) return LaunchCastEncode<CodecKind::kBf16>(a, in, residual, n, wire, nonfinite, s);
  LaunchEncode<false>(a, in, residual, nullptr, n, wire, nonfinite, s);
}

void QuantDecodeAddEncode(const QuantArgs& a, const uint8_t* wire_in, const float* local, size_t n, uint8_t* wire_out,
                          uint32_t* nonfinite, void* stream) {
  if (n == 0) return;
  auto s = static_cast<cudaStream_t>(stream);
  if (a.kind == CodecKind::kFp16)
    return LaunchCastDecodeAddEncode<CodecKind::kFp16>(a, wire_in, local, n, wire_out, nonfinite, s);
  if (a.kind == CodecKind::kBf16)
    return LaunchCastDecodeAddEncode<CodecKind::kBf16>(a, wire_in, local, n, wire_out, nonfinite, s);
  LaunchEncode<true>(a, local, nullptr, wire_in, n, wire_out, nonfinite, s);
}

void QuantDecode(const QuantArgs& a, const uint8_t* wire, size_t n, float* out, bool accumulate, void* stream) {
  if (n == 0) return;
  auto s = static_cast<cudaStream_t>(stream);
  switch (a.kind) {
    case CodecKind::kFp16:
      return LaunchCastDecode<CodecKind::kFp16>(a, wire, n, out, accumulate, s);
    case CodecKind::kBf16:
      return LaunchCastDecode<CodecKind::kBf16>(a, wire, n, out, accumulate, s);
    case CodecKind::kInt8:
      return LaunchQuantDecode<CodecKind::kInt8>(a, wire, n, out, accumulate, s);
    case CodecKind::kInt4:
      return LaunchQuantDecode<CodecKind::kInt4>(a, wire, n, out, accumulate, s);
    case CodecKind::kSign1:
      return LaunchQuantDecode<CodecKind::kSign1>(a, wire, n, out, accumulate, s);
    case CodecKind::kFp8E4M3:
      return LaunchQuantDecode<CodecKind::kFp8E4M3>(a, wire, n, out, accumulate, s);
    case CodecKind::kFp8E5M2:
      return LaunchQuantDecode<CodecKind::kFp8E5M2>(a, wire, n, out, accumulate, s);
    default:
      throw UsageError("QuantDecode: not an element codec");
  }
}

bool Available() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

}  // namespace ciuic::cuda
