// CPU codecs: the fallback and the oracle the CUDA twins must match bit for bit. Single-threaded by
// design (callers split work; the benchmark compares against single-core memcpy). Hot loops are
// cloned for x86-64-v4/v3 (ifunc dispatch at load time) and written so GCC vectorises them; the
// build compiles this library with -ffp-contract=off so no clone rounds differently.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "core/error.h"
#include "kernels/codec_kernels.h"
#include "kernels/quant_math.h"

// Not under ThreadSanitizer: GCC instruments the ifunc resolvers of the clones, which the dynamic
// loader runs before TSan's runtime is up (a crash at start-up).
#if defined(__x86_64__) && !defined(__clang__) && !defined(__SANITIZE_THREAD__)
#define CIUIC_CPU_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define CIUIC_CPU_CLONES
#endif
#define CIUIC_ALWAYS_INLINE __attribute__((always_inline)) inline

namespace ciuic::cpu {

namespace {

using namespace qm;  // NOLINT: the element math is this file's vocabulary

constexpr uint32_t kAbsMask = 0x7fffffffu;
constexpr uint32_t kInfBits = 0x7f800000u;

int32_t IntMax(CodecKind k) { return k == CodecKind::kInt4 ? 7 : 127; }

float FormatMax(CodecKind k) {
  switch (k) {
    case CodecKind::kFp8E4M3:
      return 448.0f;
    case CodecKind::kFp8E5M2:
      return 57344.0f;
    default:
      return static_cast<float>(IntMax(k));
  }
}

Fp8 Fp8Of(CodecKind k) { return k == CodecKind::kFp8E4M3 ? Fp8::kE4M3 : Fp8::kE5M2; }

float LoadScale(const uint8_t* wire, size_t b) {
  float s;
  std::memcpy(&s, wire + b * 4, 4);
  return s;
}

// fp8 -> float without a table or branches (same values as Fp8ToFloat), so decode loops vectorise.
template <bool kE4>
CIUIC_ALWAYS_INLINE float Fp8ToFloatFast(uint8_t c) {
  // Masks instead of conditionals: GCC vectorises this body (it gives up on the ternary form).
  const uint32_t sign = static_cast<uint32_t>(c & 0x80u) << 24, mag = c & 0x7fu;
  const uint32_t normal = kE4 ? (mag << 20) + (120u << 23) : (mag << 21) + (112u << 23);
  const uint32_t sub = Bits(static_cast<float>(static_cast<int32_t>(mag)) * (kE4 ? 1.0f / 512 : 1.0f / 65536));
  const uint32_t is_normal = 0u - static_cast<uint32_t>((kE4 ? mag >> 3 : mag >> 2) != 0);
  uint32_t bits = (normal & is_normal) | (sub & ~is_normal);
  if constexpr (kE4) {
    const uint32_t nan = 0u - static_cast<uint32_t>(mag == 0x7fu);
    bits = (bits & ~nan) | (0x7fc00000u & nan);
  } else {
    const uint32_t special = 0u - static_cast<uint32_t>(mag >= 0x7cu);
    const uint32_t value = mag == 0x7cu ? 0x7f800000u : 0x7fc00000u;
    bits = (bits & ~special) | (value & special);
  }
  return Float(sign | bits);
}

#if defined(__x86_64__) && !defined(__clang__)
// sign1 packing with AVX-512: one mask instruction turns 16 sign bits into 2 payload bytes.
__attribute__((target("avx512f,avx512dq"))) void PackSignsAvx512(const float* e, size_t m, uint8_t* out) {
  size_t j = 0;
  for (; j + 16 <= m; j += 16) {
    const __mmask16 k = _mm512_movepi32_mask(_mm512_castps_si512(_mm512_loadu_ps(e + j)));
    std::memcpy(out + j / 8, &k, 2);
  }
  for (; j < m; j += 8) {
    uint32_t byte = 0;
    for (size_t t = 0; t < 8 && j + t < m; ++t) byte |= (Bits(e[j + t]) >> 31) << t;
    out[j / 8] = static_cast<uint8_t>(byte);
  }
}
__attribute__((target("avx512f,avx512dq"))) void UnpackSignsAvx512(const uint8_t* q, size_t m, float scale, float* dst,
                                                                   bool acc) {
  const __m512 pos = _mm512_set1_ps(scale), neg = _mm512_set1_ps(-scale);
  size_t j = 0;
  for (; j + 16 <= m; j += 16) {
    __mmask16 k;
    std::memcpy(&k, q + j / 8, 2);
    __m512 v = _mm512_mask_blend_ps(k, pos, neg);
    if (acc) v = _mm512_add_ps(_mm512_loadu_ps(dst + j), v);
    _mm512_storeu_ps(dst + j, v);
  }
  for (; j < m; ++j) {
    const float v = ((q[j >> 3] >> (j & 7)) & 1u) ? -scale : scale;
    dst[j] = acc ? dst[j] + v : v;
  }
}
bool HaveAvx512Dq() {
  static const bool ok = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq");
  return ok;
}
#endif

// Per-block scratch (block ≤ 65536 elements, validated by the Codec).
struct Scratch {
  std::vector<float> e;
  std::vector<uint32_t> rnd;
};
Scratch& ThreadScratch(size_t block) {
  thread_local Scratch s;
  if (s.e.size() < block) {
    s.e.resize(block);
    s.rnd.resize(block);
  }
  return s;
}

// ---- block-scaled codecs and sign1 ----------------------------------------------------------------

// Writes the decoded block of wire (kind K) starting at element `first`, length m, into dst (or adds).
template <CodecKind K, bool kAcc>
CIUIC_ALWAYS_INLINE void DecodeBlockInto(const uint8_t* payload, size_t first, size_t m, float scale,
                                         float* __restrict dst) {
  if constexpr (K == CodecKind::kInt8) {
    const int8_t* q = reinterpret_cast<const int8_t*>(payload) + first;
    for (size_t j = 0; j < m; ++j) {
      const float v = static_cast<float>(q[j]) * scale;
      dst[j] = kAcc ? dst[j] + v : v;
    }
  } else if constexpr (K == CodecKind::kInt4) {
    const uint8_t* q = payload + first / 2;
    for (size_t jb = 0; jb < m / 2; ++jb) {
      const uint8_t byte = q[jb];
      const float lo = static_cast<float>(static_cast<int8_t>(static_cast<uint8_t>(byte << 4)) >> 4) * scale;
      const float hi = static_cast<float>(static_cast<int8_t>(byte) >> 4) * scale;
      dst[2 * jb] = kAcc ? dst[2 * jb] + lo : lo;
      dst[2 * jb + 1] = kAcc ? dst[2 * jb + 1] + hi : hi;
    }
    if (m & 1) {
      const float lo = static_cast<float>(static_cast<int8_t>(static_cast<uint8_t>(q[m / 2] << 4)) >> 4) * scale;
      dst[m - 1] = kAcc ? dst[m - 1] + lo : lo;
    }
  } else if constexpr (K == CodecKind::kSign1) {
    const uint8_t* q = payload + first / 8;
#if defined(__x86_64__) && !defined(__clang__)
    if (HaveAvx512Dq()) return UnpackSignsAvx512(q, m, scale, dst, kAcc);
#endif
    for (size_t j = 0; j < m; ++j) {
      const float v = ((q[j >> 3] >> (j & 7)) & 1u) ? -scale : scale;
      dst[j] = kAcc ? dst[j] + v : v;
    }
  } else {
    const uint8_t* q = payload + first;
    for (size_t j = 0; j < m; ++j) {
      const float v = Fp8ToFloatFast<K == CodecKind::kFp8E4M3>(q[j]) * scale;
      dst[j] = kAcc ? dst[j] + v : v;
    }
  }
}

// Quantises e[0, m) (the block at element `first`) into payload and, when residual is set, stores
// e - decode(e) there. Returns false (writing a NaN scale and zero payload) when e holds NaN/Inf.
template <CodecKind K, bool sr, bool kResidual>
CIUIC_ALWAYS_INLINE bool EncodeBlock(const QuantArgs& a, const float* __restrict e, size_t first, size_t m,
                                     uint8_t* scale_out, uint8_t* payload, float* residual, uint32_t* rnd) {
  uint32_t amax = 0;
  for (size_t j = 0; j < m; ++j) amax = std::max(amax, Bits(e[j]) & kAbsMask);
  if (amax >= kInfBits) {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    std::memcpy(scale_out, &nan, 4);
    if constexpr (K == CodecKind::kInt4) {
      std::memset(payload + first / 2, 0, (m + 1) / 2);
    } else if constexpr (K == CodecKind::kSign1) {
      std::memset(payload + first / 8, 0, (m + 7) / 8);
    } else {
      std::memset(payload + first, 0, m);
    }
    return false;
  }
  float scale, inv;
  if constexpr (K == CodecKind::kSign1) {
    float lanes[kLanes] = {};
    size_t j = 0;
    for (; j + kLanes <= m; j += kLanes)
      for (int l = 0; l < kLanes; ++l) lanes[l] = lanes[l] + e[j + l] * e[j + l];
    for (; j < m; ++j) lanes[j % kLanes] = lanes[j % kLanes] + e[j] * e[j];
    scale = std::sqrt(CombineLanes(lanes) / static_cast<float>(m));
    inv = 0;
  } else {
    // A block whose largest magnitude is an fp32 subnormal (< 1.2e-38) is sent as zeros: qmax/absmax
    // would overflow.
    const float absmax = Float(amax), qmax = FormatMax(K);
    const bool zero = amax < 0x00800000u;
    scale = zero ? 0.0f : absmax / qmax;
    inv = zero ? 0.0f : qmax / absmax;
  }
  std::memcpy(scale_out, &scale, 4);
  if (sr && K != CodecKind::kSign1) {
    for (size_t j = 0; j < m; j += 4) {
      const U32x4 r = Philox(static_cast<uint32_t>((first + j) >> 2), static_cast<uint32_t>((first + j) >> 34),
                             static_cast<uint32_t>(a.step), static_cast<uint32_t>(a.step >> 32),
                             static_cast<uint32_t>(a.seed), static_cast<uint32_t>(a.seed >> 32));
      for (size_t t = 0; t < 4 && j + t < m; ++t) rnd[j + t] = r.v[t];
    }
  }
  if constexpr (K == CodecKind::kInt8) {
    int8_t* q = reinterpret_cast<int8_t*>(payload) + first;
    for (size_t j = 0; j < m; ++j) {
      const float v = e[j] * inv;
      int32_t qi;
      if (sr) {
        qi = QuantizeInt(v, 127, true, rnd[j]);
      } else {
        qi = static_cast<int32_t>(std::nearbyint(v));
        qi = std::min(127, std::max(-127, qi));
      }
      q[j] = static_cast<int8_t>(qi);
      if (kResidual) residual[j] = e[j] - static_cast<float>(qi) * scale;
    }
  } else if constexpr (K == CodecKind::kInt4) {
    uint8_t* q = payload + first / 2;
    for (size_t j = 0; j < m; j += 2) {
      int32_t pair[2] = {0, 0};
      for (size_t t = 0; t < 2 && j + t < m; ++t) {
        const float v = e[j + t] * inv;
        int32_t qi = sr ? QuantizeInt(v, 7, true, rnd[j + t]) : static_cast<int32_t>(std::nearbyint(v));
        qi = std::min(7, std::max(-7, qi));
        pair[t] = qi;
        if (kResidual) residual[j + t] = e[j + t] - static_cast<float>(qi) * scale;
      }
      q[j / 2] = static_cast<uint8_t>((pair[0] & 0xf) | ((pair[1] & 0xf) << 4));
    }
  } else if constexpr (K == CodecKind::kSign1) {
    uint8_t* q = payload + first / 8;
    const uint32_t sbits = Bits(scale);
    size_t j = 0;
#if defined(__x86_64__) && !defined(__clang__)
    if (HaveAvx512Dq()) {
      PackSignsAvx512(e, m, q);
      j = m;
    }
#endif
    for (; j + 8 <= m; j += 8) {
      uint32_t byte = 0;
      for (size_t t = 0; t < 8; ++t) byte |= (Bits(e[j + t]) >> 31) << t;
      q[j / 8] = static_cast<uint8_t>(byte);
    }
    if (j < m) {
      uint32_t byte = 0;
      for (size_t t = 0; j + t < m; ++t) byte |= (Bits(e[j + t]) >> 31) << t;
      q[j / 8] = static_cast<uint8_t>(byte);
    }
    if (kResidual)
      for (size_t i = 0; i < m; ++i) residual[i] = e[i] - Float(sbits ^ (Bits(e[i]) & 0x80000000u));
  } else {
    const Fp8 fmt = Fp8Of(K);
    uint8_t* q = payload + first;
    for (size_t j = 0; j < m; ++j) {
      const uint8_t c = sr ? FloatToFp8(e[j] * inv, fmt, true, rnd[j]) : FloatToFp8Rne(e[j] * inv, fmt);
      q[j] = c;
      if (kResidual) residual[j] = e[j] - Fp8ToFloatFast<K == CodecKind::kFp8E4M3>(c) * scale;
    }
  }
  return true;
}

// Source of e for a block: in (+ residual), or decode(wire_in) + local.
template <CodecKind K, bool kDecodeAdd>
CIUIC_ALWAYS_INLINE void EncodeAll(const QuantArgs& a, const float* in, float* residual, const uint8_t* wire_in,
                                   size_t n, uint8_t* wire, uint32_t* nonfinite) {
  const size_t nb = ScaleBlocks(n, a.block);
  uint8_t* payload = wire + nb * 4;
  const uint8_t* payload_in = kDecodeAdd ? wire_in + nb * 4 : nullptr;
  Scratch& s = ThreadScratch(a.block);
  bool finite = true;
  for (size_t b = 0; b < nb; ++b) {
    const size_t first = b * a.block, m = std::min<size_t>(a.block, n - first);
    float* e = s.e.data();
    if constexpr (kDecodeAdd) {
      DecodeBlockInto<K, false>(payload_in, first, m, LoadScale(wire_in, b), e);
      for (size_t j = 0; j < m; ++j) e[j] = e[j] + in[first + j];
    } else if (residual) {
      for (size_t j = 0; j < m; ++j) e[j] = in[first + j] + residual[first + j];
    } else {
      e = const_cast<float*>(in + first);  // read only below: no staging copy
    }
    float* res = (!kDecodeAdd && residual) ? residual + first : nullptr;
    // The flags are loop-invariant: dispatch once per block to a specialised, branch-free body.
    bool ok;
    if (a.stochastic) {
      ok = res ? EncodeBlock<K, true, true>(a, e, first, m, wire + b * 4, payload, res, s.rnd.data())
               : EncodeBlock<K, true, false>(a, e, first, m, wire + b * 4, payload, res, s.rnd.data());
    } else {
      ok = res ? EncodeBlock<K, false, true>(a, e, first, m, wire + b * 4, payload, res, s.rnd.data())
               : EncodeBlock<K, false, false>(a, e, first, m, wire + b * 4, payload, res, s.rnd.data());
    }
    finite &= ok;
  }
  if (!finite && nonfinite) *nonfinite = 1;
}

template <CodecKind K>
CIUIC_ALWAYS_INLINE void DecodeAll(const QuantArgs& a, const uint8_t* wire, size_t n, float* out, bool accumulate) {
  const size_t nb = ScaleBlocks(n, a.block);
  const uint8_t* payload = wire + nb * 4;
  for (size_t b = 0; b < nb; ++b) {
    const size_t first = b * a.block, m = std::min<size_t>(a.block, n - first);
    if (accumulate) {
      DecodeBlockInto<K, true>(payload, first, m, LoadScale(wire, b), out + first);
    } else {
      DecodeBlockInto<K, false>(payload, first, m, LoadScale(wire, b), out + first);
    }
  }
}

// ---- casts ------------------------------------------------------------------------------------------

#if defined(__x86_64__) && !defined(__clang__)
// F16C/AVX-512 conversion (round-to-nearest-even, like FloatToHalf; NaN made canonical to match it).
__attribute__((target("avx512f,avx512bw,avx512vl,f16c"))) void HalfEncodeAvx512(const float* in, const float* res,
                                                                                size_t n, float prescale, uint16_t* out,
                                                                                float* res_out, float inv_prescale,
                                                                                bool* bad) {
  size_t i = 0;
  __mmask16 any_bad = 0;
  const __m512 ps = _mm512_set1_ps(prescale), ip = _mm512_set1_ps(inv_prescale);
  const __m512i abs_mask = _mm512_set1_epi32(static_cast<int>(kAbsMask));
  const __m512i inf = _mm512_set1_epi32(static_cast<int>(kInfBits));
  for (; i + 16 <= n; i += 16) {
    __m512 e = _mm512_loadu_ps(in + i);
    if (res) e = _mm512_add_ps(e, _mm512_loadu_ps(res + i));
    const __m512i eb = _mm512_and_si512(_mm512_castps_si512(e), abs_mask);
    any_bad |= _mm512_cmpge_epu32_mask(eb, inf);
    const __m512 x = prescale == 1.0f ? e : _mm512_mul_ps(e, ps);
    __m256i h = _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
    if (nan) {
      const __m256i sign = _mm256_and_si256(h, _mm256_set1_epi16(static_cast<short>(0x8000)));
      h = _mm256_mask_blend_epi16(nan, h, _mm256_or_si256(sign, _mm256_set1_epi16(0x7e00)));
    }
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), h);
    if (res_out) {
      __m512 d = _mm512_cvtph_ps(h);
      if (prescale != 1.0f) d = _mm512_mul_ps(d, ip);
      _mm512_storeu_ps(res_out + i, _mm512_mask_blend_ps(static_cast<__mmask16>(~_mm512_cmpge_epu32_mask(eb, inf)),
                                                         _mm512_loadu_ps(res_out + i), _mm512_sub_ps(e, d)));
    }
  }
  bool tail_bad = false;
  for (; i < n; ++i) {
    const float e = res ? in[i] + res[i] : in[i];
    const bool ok = (Bits(e) & kAbsMask) < kInfBits;
    tail_bad |= !ok;
    const uint16_t h = FloatToHalf(prescale == 1.0f ? e : e * prescale);
    out[i] = h;
    if (res_out && ok) {
      const float d = HalfToFloat(h);
      res_out[i] = e - (prescale == 1.0f ? d : d * inv_prescale);
    }
  }
  *bad = any_bad != 0 || tail_bad;
}
__attribute__((target("avx512f,f16c"))) void HalfDecodeAvx512(const uint16_t* in, size_t n, float inv_prescale,
                                                              float* out, bool accumulate) {
  size_t i = 0;
  const __m512 ip = _mm512_set1_ps(inv_prescale);
  for (; i + 16 <= n; i += 16) {
    __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i)));
    if (inv_prescale != 1.0f) d = _mm512_mul_ps(d, ip);
    if (accumulate) d = _mm512_add_ps(_mm512_loadu_ps(out + i), d);
    _mm512_storeu_ps(out + i, d);
  }
  for (; i < n; ++i) {
    float d = HalfToFloat(in[i]);
    if (inv_prescale != 1.0f) d = d * inv_prescale;
    out[i] = accumulate ? out[i] + d : d;
  }
}
bool HaveAvx512F16() {
  static const bool ok = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("f16c");
  return ok;
}
#endif

// The plain cast path (any CPU; also the reference for the AVX-512 one).
template <CodecKind K>
CIUIC_ALWAYS_INLINE bool CastEncodePlain(const float* in, const float* res, size_t n, float prescale, uint16_t* out,
                                         float* res_out, float inv_prescale) {
  uint32_t bad = 0;
  for (size_t i = 0; i < n; ++i) {
    const float e = res ? in[i] + res[i] : in[i];
    const uint32_t nonfin = (Bits(e) & kAbsMask) >= kInfBits;
    bad |= nonfin;
    const float x = prescale == 1.0f ? e : e * prescale;
    const uint16_t h = K == CodecKind::kFp16 ? FloatToHalf(x) : FloatToBf16(x);
    out[i] = h;
    if (res_out && !nonfin) {
      const float d = K == CodecKind::kFp16 ? HalfToFloat(h) : Bf16ToFloat(h);
      res_out[i] = e - (prescale == 1.0f ? d : d * inv_prescale);
    }
  }
  return bad == 0;
}

template <CodecKind K>
CIUIC_ALWAYS_INLINE void CastDecodePlain(const uint16_t* in, size_t n, float inv_prescale, float* out,
                                         bool accumulate) {
  for (size_t i = 0; i < n; ++i) {
    float d = K == CodecKind::kFp16 ? HalfToFloat(in[i]) : Bf16ToFloat(in[i]);
    if (inv_prescale != 1.0f) d = d * inv_prescale;
    out[i] = accumulate ? out[i] + d : d;
  }
}

// Cloned entry points, one per kind (a clone is compiled per ISA; the templates inline into it).
#define CIUIC_DEFINE_QUANT(K, Name)                                                                                 \
  CIUIC_CPU_CLONES void Encode##Name(const QuantArgs& a, const float* in, float* residual, size_t n, uint8_t* wire, \
                                     uint32_t* nonfinite) {                                                         \
    EncodeAll<K, false>(a, in, residual, nullptr, n, wire, nonfinite);                                              \
  }                                                                                                                 \
  CIUIC_CPU_CLONES void DecodeAddEncode##Name(const QuantArgs& a, const uint8_t* wire_in, const float* local,       \
                                              size_t n, uint8_t* wire_out, uint32_t* nonfinite) {                   \
    EncodeAll<K, true>(a, local, nullptr, wire_in, n, wire_out, nonfinite);                                         \
  }                                                                                                                 \
  CIUIC_CPU_CLONES void Decode##Name(const QuantArgs& a, const uint8_t* wire, size_t n, float* out, bool acc) {     \
    DecodeAll<K>(a, wire, n, out, acc);                                                                             \
  }
CIUIC_DEFINE_QUANT(CodecKind::kInt8, Int8)
CIUIC_DEFINE_QUANT(CodecKind::kInt4, Int4)
CIUIC_DEFINE_QUANT(CodecKind::kSign1, Sign1)
CIUIC_DEFINE_QUANT(CodecKind::kFp8E4M3, E4M3)
CIUIC_DEFINE_QUANT(CodecKind::kFp8E5M2, E5M2)
#undef CIUIC_DEFINE_QUANT

CIUIC_CPU_CLONES bool EncodeBf16(const float* in, const float* res, size_t n, float prescale, uint16_t* out,
                                 float* res_out, float inv_prescale) {
  return CastEncodePlain<CodecKind::kBf16>(in, res, n, prescale, out, res_out, inv_prescale);
}
CIUIC_CPU_CLONES bool EncodeHalfPlain(const float* in, const float* res, size_t n, float prescale, uint16_t* out,
                                      float* res_out, float inv_prescale) {
  return CastEncodePlain<CodecKind::kFp16>(in, res, n, prescale, out, res_out, inv_prescale);
}
CIUIC_CPU_CLONES void DecodeBf16(const uint16_t* in, size_t n, float inv_prescale, float* out, bool acc) {
  CastDecodePlain<CodecKind::kBf16>(in, n, inv_prescale, out, acc);
}
CIUIC_CPU_CLONES void DecodeHalfPlain(const uint16_t* in, size_t n, float inv_prescale, float* out, bool acc) {
  CastDecodePlain<CodecKind::kFp16>(in, n, inv_prescale, out, acc);
}

bool CastEncode(CodecKind k, const float* in, const float* res, size_t n, float prescale, uint16_t* out,
                float* res_out) {
  const float inv = 1.0f / prescale;
  if (k == CodecKind::kBf16) return EncodeBf16(in, res, n, prescale, out, res_out, inv);
#if defined(__x86_64__) && !defined(__clang__)
  if (HaveAvx512F16()) {
    bool bad = false;
    HalfEncodeAvx512(in, res, n, prescale, out, res_out, inv, &bad);
    return !bad;
  }
#endif
  return EncodeHalfPlain(in, res, n, prescale, out, res_out, inv);
}

void CastDecode(CodecKind k, const uint16_t* in, size_t n, float prescale, float* out, bool acc) {
  const float inv = 1.0f / prescale;
  if (k == CodecKind::kBf16) return DecodeBf16(in, n, inv, out, acc);
#if defined(__x86_64__) && !defined(__clang__)
  if (HaveAvx512F16()) return HalfDecodeAvx512(in, n, inv, out, acc);
#endif
  DecodeHalfPlain(in, n, inv, out, acc);
}

void CheckBlock(const QuantArgs& a) {
  if (a.block < 32 || a.block > 65536 || a.block % 32 != 0)
    throw UsageError(fmt::format("codec block {} must be a multiple of 32 in 32..65536", a.block));
}

}  // namespace

void QuantEncode(const QuantArgs& a, const float* in, float* residual, size_t n, uint8_t* wire, uint32_t* nonfinite,
                 void*) {
  if (n == 0) return;
  switch (a.kind) {
    case CodecKind::kFp16:
    case CodecKind::kBf16: {
      bool ok;
      if (reinterpret_cast<uintptr_t>(wire) % 2 != 0) {  // an odd address inside a larger message
        std::vector<uint16_t> tmp(n);
        ok = CastEncode(a.kind, in, residual, n, a.prescale, tmp.data(), residual);
        std::memcpy(wire, tmp.data(), n * 2);
      } else {
        ok = CastEncode(a.kind, in, residual, n, a.prescale, reinterpret_cast<uint16_t*>(wire), residual);
      }
      if (!ok && nonfinite) *nonfinite = 1;
      return;
    }
    case CodecKind::kInt8:
      CheckBlock(a);
      return EncodeInt8(a, in, residual, n, wire, nonfinite);
    case CodecKind::kInt4:
      CheckBlock(a);
      return EncodeInt4(a, in, residual, n, wire, nonfinite);
    case CodecKind::kSign1:
      CheckBlock(a);
      return EncodeSign1(a, in, residual, n, wire, nonfinite);
    case CodecKind::kFp8E4M3:
      CheckBlock(a);
      return EncodeE4M3(a, in, residual, n, wire, nonfinite);
    case CodecKind::kFp8E5M2:
      CheckBlock(a);
      return EncodeE5M2(a, in, residual, n, wire, nonfinite);
    default:
      throw UsageError("QuantEncode: not an element codec");
  }
}

void QuantDecode(const QuantArgs& a, const uint8_t* wire, size_t n, float* out, bool accumulate, void*) {
  if (n == 0) return;
  switch (a.kind) {
    case CodecKind::kFp16:
    case CodecKind::kBf16:
      // The wire may sit at an odd address inside a larger message: copy out when misaligned.
      if (reinterpret_cast<uintptr_t>(wire) % 2 != 0) {
        std::vector<uint16_t> tmp(n);
        std::memcpy(tmp.data(), wire, n * 2);
        return CastDecode(a.kind, tmp.data(), n, a.prescale, out, accumulate);
      }
      return CastDecode(a.kind, reinterpret_cast<const uint16_t*>(wire), n, a.prescale, out, accumulate);
    case CodecKind::kInt8:
      CheckBlock(a);
      return DecodeInt8(a, wire, n, out, accumulate);
    case CodecKind::kInt4:
      CheckBlock(a);
      return DecodeInt4(a, wire, n, out, accumulate);
    case CodecKind::kSign1:
      CheckBlock(a);
      return DecodeSign1(a, wire, n, out, accumulate);
    case CodecKind::kFp8E4M3:
      CheckBlock(a);
      return DecodeE4M3(a, wire, n, out, accumulate);
    case CodecKind::kFp8E5M2:
      CheckBlock(a);
      return DecodeE5M2(a, wire, n, out, accumulate);
    default:
      throw UsageError("QuantDecode: not an element codec");
  }
}

void QuantDecodeAddEncode(const QuantArgs& a, const uint8_t* wire_in, const float* local, size_t n, uint8_t* wire_out,
                          uint32_t* nonfinite, void*) {
  if (n == 0) return;
  switch (a.kind) {
    case CodecKind::kFp16:
    case CodecKind::kBf16: {
      // Casts have no blocks: decode into a staging buffer, add, re-encode.
      thread_local std::vector<float> sum;  // reused: no allocation per hop
      sum.assign(local, local + n);
      cpu::QuantDecode(a, wire_in, n, sum.data(), true, nullptr);
      QuantArgs plain = a;
      return cpu::QuantEncode(plain, sum.data(), nullptr, n, wire_out, nonfinite, nullptr);
    }
    case CodecKind::kInt8:
      CheckBlock(a);
      return DecodeAddEncodeInt8(a, wire_in, local, n, wire_out, nonfinite);
    case CodecKind::kInt4:
      CheckBlock(a);
      return DecodeAddEncodeInt4(a, wire_in, local, n, wire_out, nonfinite);
    case CodecKind::kSign1:
      CheckBlock(a);
      return DecodeAddEncodeSign1(a, wire_in, local, n, wire_out, nonfinite);
    case CodecKind::kFp8E4M3:
      CheckBlock(a);
      return DecodeAddEncodeE4M3(a, wire_in, local, n, wire_out, nonfinite);
    case CodecKind::kFp8E5M2:
      CheckBlock(a);
      return DecodeAddEncodeE5M2(a, wire_in, local, n, wire_out, nonfinite);
    default:
      throw UsageError("QuantDecodeAddEncode: not an element codec");
  }
}

}  // namespace ciuic::cpu
