#pragma once
// Element math of the training kernels (kernels/train_kernels.h), shared bit for bit by the CPU oracle
// and its CUDA twin: exp, tanh and erf written out in fp32 (no libm call, so CPU loops vectorise and
// both sides round alike under -ffp-contract=off / --fmad=false), GELU in its tanh and erf forms with
// derivatives, ReLU, the dropout keep test on the Philox stream of quant_math.h, and fp16/bf16
// load/store. C++17-clean: nvcc compiles it.
//
// Accuracy (checked against double precision over [-10, 10] in tests/kernels/train_kernels_test.cc):
// ExpF within 2 ulp; TanhF within 4e-7 absolute; ErfcF within 4e-7 + 1.2e-7·x² relative (the fit's
// 1.2e-7, ExpF's, and -x² rounded at 2^-24·x²) and ErfF within 3e-7 absolute. GELU therefore sits within about 3e-7 ·
// |x| of the exact value, PyTorch's own (Sleef) within a few ulp: the tolerances of the agreement tests.
#include <cstdint>

#include "kernels/quant_math.h"

namespace ciuic::tm {

// exp(x) for fp32 x: x = n·ln2 + r with |r| <= ln2/2 (Cody-Waite split of ln2), a degree-7 Taylor
// polynomial of e^r (truncation below 6e-9 relative there) and 2^n built from its exponent bits.
// Clamped to [-87, 88]: below gives e^-87 (not the subnormal tail), above gives e^88 (finite), which
// every caller here (tanh, erf, GELU) turns into the same saturated result as the exact value.
CIUIC_HD float ExpF(float x) {
  x = x < -87.0f ? -87.0f : x;  // two selects, not nested: GCC if-converts (vectorises) these
  x = x > 88.0f ? 88.0f : x;
  const float kLog2e = 1.44269504088896341f;
  // Round-to-nearest integer by the 1.5·2^23 shift: exact for |x·log2e| < 2^22.
  const float shifted = x * kLog2e + 12582912.0f;
  const float n = shifted - 12582912.0f;
  const float r = (x - n * 0.693145751953125f) - n * 1.42860682030941723212e-6f;
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const int32_t e = static_cast<int32_t>(n == n ? n : 0.0f) + 127;  // NaN: 2^0 (p carries the NaN)
  return p * qm::Float(static_cast<uint32_t>(e) << 23);
}

// tanh(u) = sign(u) · (1 - 2 / (e^{2|u|} + 1)): no cancellation for large |u|, absolute error ~1e-7
// near 0 (where GELU adds it to 1).
CIUIC_HD float TanhF(float u) {
  const float a = u < 0.0f ? -u : u;
  const float t = 1.0f - 2.0f / (ExpF(2.0f * a) + 1.0f);
  return u < 0.0f ? -t : t;
}

// erfc(a) for a >= 0: t·exp(-a² + P(t)), t = 1 / (1 + a/2), P of degree 9 (the Chebyshev fit of
// Numerical Recipes' erfcc, relative error below 1.2e-7 for every a >= 0): accurate in the tail, where
// 1 - erf would cancel.
CIUIC_HD float ErfcNonNegative(float a) {
  const float t = 1.0f / (1.0f + 0.5f * a);
  float p = 0.17087277f;
  p = p * t - 0.82215223f;
  p = p * t + 1.48851587f;
  p = p * t - 1.13520398f;
  p = p * t + 0.27886807f;
  p = p * t - 0.18628806f;
  p = p * t + 0.09678418f;
  p = p * t + 0.37409196f;
  p = p * t + 1.00002368f;
  p = p * t - 1.26551223f;
  return t * ExpF(p - a * a);
}
// One evaluation and a select (not two calls behind a branch), so CPU loops if-convert and vectorise.
CIUIC_HD float ErfcF(float x) {
  const float e = ErfcNonNegative(x < 0.0f ? -x : x);
  return x >= 0.0f ? e : 2.0f - e;
}
CIUIC_HD float ErfF(float x) {
  const float e = ErfcNonNegative(x < 0.0f ? -x : x);
  return x >= 0.0f ? 1.0f - e : e - 1.0f;
}

enum class Act : uint8_t { kNone = 0, kRelu = 1, kGeluTanh = 2, kGeluErf = 3 };

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluCubic = 0.044715f;
constexpr float kInvSqrt2 = 0.7071067811865476f;
constexpr float kInvSqrt2Pi = 0.3989422804014327f;

CIUIC_HD float Activate(Act act, float x) {
  switch (act) {
    case Act::kRelu:  // NaN propagates, as PyTorch's relu
      return x < 0.0f ? 0.0f : x;
    case Act::kGeluTanh: {
      const float inner = kSqrt2OverPi * (x + kGeluCubic * x * x * x);
      return 0.5f * x * (1.0f + TanhF(inner));
    }
    case Act::kGeluErf:
      return 0.5f * x * ErfcF(-x * kInvSqrt2);  // x·Φ(x), Φ by erfc: exact tails
    case Act::kNone:
      break;
  }
  return x;
}

// d act(x) / dx.
CIUIC_HD float ActivateGrad(Act act, float x) {
  switch (act) {
    case Act::kRelu:  // 0 at x <= 0; NaN passes dy, as PyTorch's threshold_backward
      return x <= 0.0f ? 0.0f : 1.0f;
    case Act::kGeluTanh: {
      const float x2 = x * x;
      const float t = TanhF(kSqrt2OverPi * (x + kGeluCubic * x2 * x));
      return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * kSqrt2OverPi * (1.0f + 3.0f * kGeluCubic * x2);
    }
    case Act::kGeluErf:
      return 0.5f * ErfcF(-x * kInvSqrt2) + x * kInvSqrt2Pi * ExpF(-0.5f * x * x);
    case Act::kNone:
      break;
  }
  return 1.0f;
}

// Dropout: element e is dropped iff its 32-bit uniform is below DropThreshold(p) (= floor(p·2^32),
// every element at p >= 1); kept elements are scaled by 1 / (1 - p). The uniform is Philox4x32-10 keyed
// by (seed ^ kDropoutSalt), counter (e / 4, offset): a new offset per step or layer gives a new mask, and
// forward and backward rebuild the same one from (seed, offset) instead of storing it.
constexpr uint64_t kDropoutSalt = 0x64726f706f7574ull;  // "dropout"
struct DropoutArgs {
  float p = 0.0f;
  uint64_t seed = 0;
  uint64_t offset = 0;
};
CIUIC_HD uint32_t DropThreshold(float p) {
  if (!(p > 0.0f)) return 0u;
  if (p >= 1.0f) return 0xffffffffu;
  return static_cast<uint32_t>(static_cast<double>(p) * 4294967296.0);
}
CIUIC_HD float KeepScale(float p) { return p >= 1.0f ? 0.0f : 1.0f / (1.0f - p); }
CIUIC_HD bool Kept(const DropoutArgs& d, uint32_t threshold, uint64_t e) {
  if (threshold == 0u) return true;
  if (threshold == 0xffffffffu) return false;
  return qm::Uniform32(d.seed ^ kDropoutSalt, d.offset, e) >= threshold;
}

// Storage types: fp32, fp16 and bf16 bit patterns, loaded to and stored from fp32 (round to nearest
// even, as PyTorch's casts).
struct F16 {
  uint16_t bits;
};
struct BF16 {
  uint16_t bits;
};
CIUIC_HD float Load(float v) { return v; }
CIUIC_HD float Load(F16 v) { return qm::HalfToFloat(v.bits); }
CIUIC_HD float Load(BF16 v) { return qm::Bf16ToFloat(v.bits); }
template <class T>
CIUIC_HD T Store(float v);
template <>
CIUIC_HD float Store<float>(float v) {
  return v;
}
template <>
CIUIC_HD F16 Store<F16>(float v) {
  return F16{qm::FloatToHalf(v)};
}
template <>
CIUIC_HD BF16 Store<BF16>(float v) {
  return BF16{qm::FloatToBf16(v)};
}

}  // namespace ciuic::tm
