#pragma once
// Element math shared bit for bit by the CPU codecs and their CUDA twins: float <-> fp16/bf16/fp8
// conversions (round-to-nearest-even and stochastic), integer rounding, the Philox4x32-10 counter RNG
// that keys stochastic rounding by (seed, step, element), and the fixed 32-lane reduction order both
// sides use for block sums. Integer-only where rounding matters, so no FMA contraction or
// flush-to-zero mode can make the two disagree. C++17-clean: nvcc compiles it.
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define CIUIC_HD __host__ __device__ __forceinline__
#else
#define CIUIC_HD inline __attribute__((always_inline))
#endif

namespace ciuic::qm {

// Lanes of the fixed reduction order: element i of a block adds into lane i % kLanes, in index order;
// lanes then combine as a butterfly (lane j += lane j + w for w = 16, 8, 4, 2, 1). A CUDA warp does
// exactly this with shuffles.
constexpr int kLanes = 32;

CIUIC_HD uint32_t Bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
CIUIC_HD float Float(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

// Exact x * 2^e for an integer-valued |x| < 2^24 and a result in the normal or subnormal range of fp32.
CIUIC_HD float ScaleByPow2(float x, int e) {
  // Two steps so each factor is a normal fp32 power of two.
  const int e1 = e / 2, e2 = e - e1;
  return x * Float(static_cast<uint32_t>(127 + e1) << 23) * Float(static_cast<uint32_t>(127 + e2) << 23);
}

// Round-to-nearest-even of m / 2^s (s >= 0; any s).
CIUIC_HD uint32_t ShiftRne(uint32_t m, int s) {
  if (s <= 0) return m;
  if (s > 25) return 0;
  const uint32_t q = m >> s, rem = m & ((1u << s) - 1), half = 1u << (s - 1);
  return q + ((rem > half) || (rem == half && (q & 1u)) ? 1u : 0u);
}
// Stochastic rounding of m / 2^s with a 32-bit uniform r: rounds up with probability frac (to 2^-32).
CIUIC_HD uint32_t ShiftStochastic(uint32_t m, int s, uint32_t r) {
  if (s <= 0) return m;
  if (s >= 56) return 0;
  const uint64_t scaled = (static_cast<uint64_t>(m) << 32) >> s;
  return static_cast<uint32_t>((scaled + r) >> 32);
}

// Significand with the implicit bit and unbiased exponent of a finite |x| (fp32 subnormals: e = -126).
struct Parts {
  uint32_t m;
  int e;
};
CIUIC_HD Parts Split(uint32_t abs_bits) {
  const uint32_t ef = abs_bits >> 23;
  if (ef == 0) return {abs_bits & 0x7fffffu, -126};
  return {(abs_bits & 0x7fffffu) | 0x800000u, static_cast<int>(ef) - 127};
}

// ---- fp16 (IEEE binary16; overflow -> inf, NaN -> quiet NaN) -----------------------------------------
CIUIC_HD uint16_t FloatToHalf(float f) {
  const uint32_t x = Bits(f), sign = (x >> 16) & 0x8000u, a = x & 0x7fffffffu;
  if (a >= 0x7f800000u) return static_cast<uint16_t>(sign | (a > 0x7f800000u ? 0x7e00u : 0x7c00u));
  if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520 rounds past 65504
  const Parts p = Split(a);
  const int e_eff = p.e < -14 ? -14 : p.e;
  const uint32_t q = ShiftRne(p.m, 13 + (e_eff - p.e));
  return static_cast<uint16_t>(sign | ((static_cast<uint32_t>(e_eff + 14) << 10) + q));
}
CIUIC_HD float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0x1f) return Float(sign | 0x7f800000u | (m << 13));
  if (e == 0) return Float(sign | Bits(ScaleByPow2(static_cast<float>(m), -24)));
  return Float(sign | ((e + 112u) << 23) | (m << 13));
}

// ---- bf16 ---------------------------------------------------------------------------------------------
CIUIC_HD uint16_t FloatToBf16(float f) {
  const uint32_t x = Bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}
CIUIC_HD float Bf16ToFloat(uint16_t b) { return Float(static_cast<uint32_t>(b) << 16); }

// ---- fp8 (OCP e4m3: bias 7, max 448, NaN 0x7f, no inf; e5m2: bias 15, max 57344, IEEE-like) ---------
enum class Fp8 : uint8_t { kE4M3, kE5M2 };
struct Fp8Format {
  int mbits, emin;    // mantissa bits; exponent of the smallest normal
  uint32_t max_bits;  // largest finite magnitude's encoding
  uint32_t nan_bits;
  float max_value;
};
CIUIC_HD Fp8Format FormatOf(Fp8 f) {
  if (f == Fp8::kE4M3) return {3, -6, 0x7eu, 0x7fu, 448.0f};
  return {2, -14, 0x7bu, 0x7fu, 57344.0f};
}

// Finite |x| -> fp8 magnitude bits, saturating at max; `stochastic` uses r, otherwise RNE.
CIUIC_HD uint32_t Fp8Magnitude(uint32_t abs_bits, const Fp8Format& f, bool stochastic, uint32_t r) {
  const Parts p = Split(abs_bits);
  if (p.m == 0) return 0;
  if (p.e > 17) return f.max_bits;  // far beyond either format's range
  const int e_eff = p.e < f.emin ? f.emin : p.e;
  const int s = 23 - f.mbits + (e_eff - p.e);
  const uint32_t q = stochastic ? ShiftStochastic(p.m, s, r) : ShiftRne(p.m, s);
  const uint32_t bits = (static_cast<uint32_t>(e_eff - f.emin) << f.mbits) + q;
  return bits > f.max_bits ? f.max_bits : bits;
}
CIUIC_HD uint8_t FloatToFp8(float x, Fp8 fmt, bool stochastic = false, uint32_t r = 0) {
  const Fp8Format f = FormatOf(fmt);
  const uint32_t b = Bits(x), sign = (b >> 24) & 0x80u, a = b & 0x7fffffffu;
  if (a >= 0x7f800000u) return static_cast<uint8_t>(sign | f.nan_bits);
  return static_cast<uint8_t>(sign | Fp8Magnitude(a, f, stochastic, r));
}
// Round-to-nearest-even, saturating, for finite x: the same codes as FloatToFp8 without branches
// (normal range by the add-and-truncate trick on the fp32 pattern, subnormals by one RNE of x·2^k),
// so CPU loops vectorise.
CIUIC_HD uint8_t FloatToFp8Rne(float x, Fp8 fmt) {
  const bool e4 = fmt == Fp8::kE4M3;
  const uint32_t b = Bits(x), sign = (b >> 24) & 0x80u, a = b & 0x7fffffffu;
  const int shift = e4 ? 20 : 21;
  const uint32_t rounded = a + ((1u << (shift - 1)) - 1) + ((a >> shift) & 1u);
  const int32_t normal = static_cast<int32_t>(rounded >> shift) - (e4 ? (120 << 3) : (112 << 2));
  const float sub_scale = e4 ? 512.0f : 65536.0f;              // 1 / smallest subnormal
  const uint32_t min_normal = e4 ? 0x3c800000u : 0x38800000u;  // 2^-6, 2^-14
  // The subnormal code, computed branch-free for every input but only used below min_normal: its
  // argument is clamped there so a large |x| never converts an out-of-range float to int (UB).
  const float sub_arg = Float(a < min_normal ? a : min_normal) * sub_scale;
#if defined(__CUDA_ARCH__)
  const int32_t sub = __float2int_rn(sub_arg);
#else
  const int32_t sub = static_cast<int32_t>(__builtin_nearbyintf(sub_arg));
#endif
  int32_t code = a < min_normal ? sub : normal;
  const int32_t max_code = e4 ? 0x7e : 0x7b;
  code = code > max_code ? max_code : code;
  return static_cast<uint8_t>(sign | static_cast<uint32_t>(code));
}

CIUIC_HD float Fp8ToFloat(uint8_t v, Fp8 fmt) {
  const Fp8Format f = FormatOf(fmt);
  const uint32_t sign = static_cast<uint32_t>(v & 0x80u) << 24, mag = v & 0x7fu;
  if (fmt == Fp8::kE4M3 && mag == 0x7fu) return Float(0x7fc00000u | sign);
  if (fmt == Fp8::kE5M2 && mag >= 0x7cu) return Float(sign | (mag == 0x7cu ? 0x7f800000u : 0x7fc00000u));
  const uint32_t e = mag >> f.mbits, m = mag & ((1u << f.mbits) - 1);
  if (e == 0) return Float(sign | Bits(ScaleByPow2(static_cast<float>(m), f.emin - f.mbits)));
  return Float(sign | ((e - 1 + static_cast<uint32_t>(f.emin + 127)) << 23) | (m << (23 - f.mbits)));
}

// ---- integers --------------------------------------------------------------------------------------
// Round |v| (finite, < 2^23) to an integer magnitude: RNE or stochastic.
CIUIC_HD uint32_t IntMagnitude(uint32_t abs_bits, bool stochastic, uint32_t r) {
  const Parts p = Split(abs_bits);
  const int s = 23 - p.e;
  return stochastic ? ShiftStochastic(p.m, s, r) : ShiftRne(p.m, s);
}
// v -> signed integer in [-qmax, qmax].
CIUIC_HD int32_t QuantizeInt(float v, int32_t qmax, bool stochastic, uint32_t r) {
  const uint32_t b = Bits(v);
  uint32_t q = IntMagnitude(b & 0x7fffffffu, stochastic, r);
  if (q > static_cast<uint32_t>(qmax)) q = static_cast<uint32_t>(qmax);
  return (b >> 31) ? -static_cast<int32_t>(q) : static_cast<int32_t>(q);
}

// ---- Philox4x32-10 -------------------------------------------------------------------------------
struct U32x4 {
  uint32_t v[4];
};
CIUIC_HD void MulHiLo(uint32_t a, uint32_t b, uint32_t& hi, uint32_t& lo) {
  const uint64_t p = static_cast<uint64_t>(a) * b;
  hi = static_cast<uint32_t>(p >> 32);
  lo = static_cast<uint32_t>(p);
}
CIUIC_HD U32x4 Philox(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3, uint32_t k0, uint32_t k1) {
  for (int round = 0; round < 10; ++round) {
    uint32_t hi0, lo0, hi1, lo1;
    MulHiLo(0xD2511F53u, c0, hi0, lo0);
    MulHiLo(0xCD9E8D57u, c2, hi1, lo1);
    const uint32_t n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
    c0 = n0;
    c1 = lo1;
    c2 = n2;
    c3 = lo0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return {{c0, c1, c2, c3}};
}
// The 32-bit uniform for element `index` of step `step` under `seed`. Four consecutive elements share
// one Philox call (counter = index / 4), so a CPU loop or a CUDA thread may draw them together.
CIUIC_HD uint32_t Uniform32(uint64_t seed, uint64_t step, uint64_t index) {
  const U32x4 r =
      Philox(static_cast<uint32_t>(index >> 2), static_cast<uint32_t>(index >> 34), static_cast<uint32_t>(step),
             static_cast<uint32_t>(step >> 32), static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
  return r.v[index & 3];
}

// ---- block reductions in the fixed order ------------------------------------------------------------
// lanes[0..32) -> their sum in the butterfly order above (lanes is clobbered).
CIUIC_HD float CombineLanes(float* lanes) {
  for (int w = kLanes / 2; w >= 1; w /= 2)
    for (int j = 0; j < w; ++j) lanes[j] = lanes[j] + lanes[j + w];
  return lanes[0];
}

}  // namespace ciuic::qm

namespace ciuic::qm {

// randomk: element index of slot j (stratified: slot j draws one index from [j·n/k, (j+1)·n/k)), so
// indices are distinct, ascending and the same on every rank that shares (seed, step). n < 2^32.
CIUIC_HD uint64_t RandomKIndex(uint64_t seed, uint64_t step, uint64_t j, uint64_t n, uint64_t k) {
  const uint64_t lo = j * n / k, hi = (j + 1) * n / k;
  const uint64_t r = Uniform32(seed ^ 0x72616e646f6d6bull, step, j);
  return lo + ((r * (hi - lo)) >> 32);
}

// Sampled top-k (DGC-style): a strided sample of S elements estimates the threshold.
CIUIC_HD uint64_t TopKSampleCount(uint64_t n) {
  const uint64_t s = n / 64 > 4096 ? n / 64 : 4096;
  return s < n ? s : n;
}
CIUIC_HD uint64_t TopKSampleIndex(uint64_t j, uint64_t n, uint64_t s) { return j * n / s; }
// Rank (1-based) in the sample whose key becomes the threshold.
CIUIC_HD uint64_t TopKSampleRank(uint64_t s, uint64_t n, uint64_t k) {
  const uint64_t r = (s * k + n / 2) / n;
  return r < 1 ? 1 : (r > s ? s : r);
}

}  // namespace ciuic::qm
