// CPU training kernels: the oracle of kernels/cuda/train.cu and the fallback. A row is loaded once into
// an fp32 scratch row (16-bit inputs converted once), its sums taken in the 32-lane order of
// train_kernels.h, and written once; threads take whole rows (forward) or whole kRowChunk chunks
// (backward, whose column-gradient partials live in the workspace), so no result depends on the thread
// count. Activations are template parameters: the inner loops have no branch on them and vectorise.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "core/error.h"
#include "core/parallel.h"
#include "kernels/quant_math.h"
#include "kernels/train_kernels.h"

namespace ciuic::cpu {

namespace {

using tm::Act;

template <class Fn>
void ByType(DType t, Fn&& fn) {
  switch (t) {
    case DType::kFloat32:
      fn(float{});
      return;
    case DType::kFloat16:
      fn(tm::F16{});
      return;
    case DType::kBFloat16:
      fn(tm::BF16{});
      return;
    default:
      break;
  }
  throw UsageError(std::string("the training kernels take fp32, fp16 or bf16 tensors, not ") + DTypeName(t));
}

template <class Fn>
void ByAct(Act a, Fn&& fn) {
  switch (a) {
    case Act::kNone:
      fn(std::integral_constant<Act, Act::kNone>{});
      return;
    case Act::kRelu:
      fn(std::integral_constant<Act, Act::kRelu>{});
      return;
    case Act::kGeluTanh:
      fn(std::integral_constant<Act, Act::kGeluTanh>{});
      return;
    case Act::kGeluErf:
      fn(std::integral_constant<Act, Act::kGeluErf>{});
      return;
  }
  throw UsageError("unknown activation");
}

// Runs fn(first, last) over [0, blocks) split among threads; a block is `per_block` elements of work
// (threads only where each gets at least ParallelFor's minimum).
template <class Fn>
void ForBlocks(size_t blocks, size_t per_block, Fn&& fn) {
  if (blocks == 0) return;
  const size_t n = blocks * std::max<size_t>(per_block, 1);
  const size_t unit = n / blocks;
  ParallelFor(n, [&](size_t b, size_t e) {
    const size_t first = (b + unit - 1) / unit, last = std::min(blocks, (e + unit - 1) / unit);
    if (first < last) fn(first, last);
  });
}

// The row helpers below are forced inline: called from a target_clones function, an out-of-line helper
// would run its baseline (SSE2) code in every clone.
#define CIUIC_ROW_INLINE inline __attribute__((always_inline))
#define CIUIC_LAMBDA_INLINE __attribute__((always_inline))  // the same for a lambda

// fn(j, lane) for j in [0, n) in the fixed 32-lane order: element j belongs to lane j % 32, in index order.
template <class F>
CIUIC_ROW_INLINE void ForLanes(size_t n, F fn) {
  size_t j = 0;
  for (; j + qm::kLanes <= n; j += qm::kLanes)
    for (int l = 0; l < qm::kLanes; ++l) fn(j + l, l);
  for (int l = 0; j + l < n; ++l) fn(j + l, l);
}

// Σ f(j) for j in [0, n) in the fixed 32-lane order.
template <class F>
CIUIC_ROW_INLINE float LaneSum(size_t n, F f) {
  float lanes[qm::kLanes] = {};
  ForLanes(n, [&](size_t j, int l) CIUIC_LAMBDA_INLINE { lanes[l] += f(j); });
  return qm::CombineLanes(lanes);
}

// keep[i] = all ones where element e0 + i is kept, else 0, i < n: one Philox call per four elements.
// A word mask, not a bool, so the apply loops are a multiply and an AND (a dropped element gives +0,
// as the CUDA twin's select) and vectorise.
inline uint32_t KeepWord(uint32_t r, uint32_t threshold) { return r >= threshold ? 0xffffffffu : 0u; }
CIUIC_ROW_INLINE void FillKeep(const DropoutArgs& d, uint32_t threshold, uint64_t e0, size_t n, uint32_t* keep) {
  if (threshold == 0u || threshold == 0xffffffffu) {
    std::fill(keep, keep + n, threshold == 0u ? 0xffffffffu : 0u);
    return;
  }
  const uint64_t seed = d.seed ^ tm::kDropoutSalt;
  const uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  const uint32_t c2 = static_cast<uint32_t>(d.offset), c3 = static_cast<uint32_t>(d.offset >> 32);
  auto group = [&](uint64_t g) {
    return qm::Philox(static_cast<uint32_t>(g >> 2), static_cast<uint32_t>(g >> 34), c2, c3, k0, k1);
  };
  const uint64_t end = e0 + n;
  uint64_t e = e0;
  for (; e < end && (e & 3u) != 0; ++e) keep[e - e0] = KeepWord(group(e & ~uint64_t{3}).v[e & 3u], threshold);
  for (; e + 4 <= end; e += 4) {
    const qm::U32x4 r = group(e);
    uint32_t* out = keep + (e - e0);
    for (int k = 0; k < 4; ++k) out[k] = KeepWord(r.v[k], threshold);
  }
  for (; e < end; ++e) keep[e - e0] = KeepWord(group(e & ~uint64_t{3}).v[e & 3u], threshold);
}

// fp16/bf16 element access for the row loops: the same bits as tm::Load / tm::Store (qm::HalfToFloat,
// FloatToHalf, Bf16ToFloat, FloatToBf16), but on the raw uint16_t patterns and without branches, so GCC
// vectorises the loops (it finds no vector type for the tm::F16/BF16 structs, and the qm:: fp16 codecs
// branch on subnormals and specials). Every case is a select computed for all inputs; the test
// TrainMath.BranchFreeConversionsMatchQm checks them against qm:: over all 16-bit patterns and the
// fp32 edges.

// c ? t : f as masks, not a conditional: GCC would jump-thread a ?: whose input is ReLU's constant 0
// into a branch the loop then cannot if-convert.
inline uint32_t Select(bool c, uint32_t t, uint32_t f) { return f ^ ((t ^ f) & (0u - static_cast<uint32_t>(c))); }
inline float HalfBitsToFloat(uint32_t h) {
  const uint32_t a = (h & 0x7fffu) << 13, sign = (h & 0x8000u) << 16;
  // Normal: rebias the exponent by 127 - 15 = 112; inf/NaN (exponent 31): to 255 by adding 224.
  const uint32_t normal = a + (a >= 0x0f800000u ? 224u << 23 : 112u << 23);
  // Subnormal m·2^-24 (m < 2^10): exact in fp32, as qm::ScaleByPow2.
  const uint32_t sub = qm::Bits(static_cast<float>(static_cast<int32_t>(h & 0x3ffu)) * 5.9604644775390625e-8f);
  return qm::Float(sign | (a < 0x00800000u ? sub : normal));
}
inline uint32_t FloatToHalfBits(float f) {
  const uint32_t x = qm::Bits(f), sign = (x >> 16) & 0x8000u, a = x & 0x7fffffffu;
  // |f| in fp16's normal range: round-to-nearest-even by add-and-truncate on the fp32 pattern (a carry
  // into the exponent is the right result), then rebias the exponent from 127 to 15.
  const uint32_t normal = ((a + 0xfffu + ((a >> 13) & 1u)) >> 13) - (112u << 10);
  // |f| < 2^-14: adding 0.5 rounds it (RNE, the hardware's) to a multiple of 2^-24, the subnormal step;
  // the low bits of the sum are then the code (0x400 when it rounds up to the smallest normal).
  const uint32_t sub = qm::Bits(qm::Float(a) + 0.5f) - 0x3f000000u;
  uint32_t r = Select(a < 0x38800000u, sub, normal);
  r = Select(a >= 0x477ff000u, 0x7c00u, r);  // >= 65520 rounds past 65504: inf (and inf itself)
  r = Select(a > 0x7f800000u, 0x7e00u, r);   // NaN: quiet NaN
  return sign | r;
}
inline float Bf16BitsToFloat(uint32_t b) { return qm::Float(b << 16); }
inline uint32_t FloatToBf16Bits(float f) {
  const uint32_t x = qm::Bits(f);
  const uint32_t rne = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
  return (x & 0x7fffffffu) > 0x7f800000u ? (x >> 16) | 0x40u : rne;
}

// p[j] as fp32 and p[j] = v, for T in float, tm::F16, tm::BF16.
template <class T>
inline float Ld(const T* p, size_t j) {
  if constexpr (std::is_same_v<T, float>) {
    return p[j];
  } else {
    const uint32_t b = reinterpret_cast<const uint16_t*>(p)[j];
    if constexpr (std::is_same_v<T, tm::F16>)
      return HalfBitsToFloat(b);
    else
      return Bf16BitsToFloat(b);
  }
}
template <class T>
inline void St(T* p, size_t j, float v) {
  if constexpr (std::is_same_v<T, float>) {
    p[j] = v;
  } else if constexpr (std::is_same_v<T, tm::F16>) {
    reinterpret_cast<uint16_t*>(p)[j] = static_cast<uint16_t>(FloatToHalfBits(v));
  } else {
    reinterpret_cast<uint16_t*>(p)[j] = static_cast<uint16_t>(FloatToBf16Bits(v));
  }
}
// v rounded to T and back (what a store then a load gives).
template <class T>
inline float Round(float v) {
  if constexpr (std::is_same_v<T, float>)
    return v;
  else if constexpr (std::is_same_v<T, tm::F16>)
    return HalfBitsToFloat(FloatToHalfBits(v));
  else
    return Bf16BitsToFloat(FloatToBf16Bits(v));
}

// v · scale where keep is all ones, +0 where it is 0.
inline float ApplyKeep(float v, float scale, uint32_t keep) { return qm::Float(qm::Bits(v * scale) & keep); }

// LayerNorm statistics of one fp32 row.
struct RowStats {
  float mean, rstd;
};
CIUIC_ROW_INLINE RowStats Stats(const float* v, size_t cols, float eps) {
  const float n = static_cast<float>(cols);
  const float mean = LaneSum(cols, [&](size_t j) { return v[j]; }) / n;
  const float var = LaneSum(cols,
                            [&](size_t j) {
                              const float c = v[j] - mean;
                              return c * c;
                            }) /
                    n;
  return {mean, 1.0f / std::sqrt(var + eps)};
}

template <class T>
CIUIC_ROW_INLINE void LoadRow(const T* in, size_t cols, float* out) {
  for (size_t j = 0; j < cols; ++j) out[j] = Ld(in, j);
}

// The two sums every LayerNorm backward row needs, from dz (the gradient reaching LayerNorm's output) and
// xh (x̂): ma = Σ g / n and mb = Σ g·x̂ / n with g = dz·γ, each in the fixed 32-lane order. `row(j)`
// computes and stores dz[j] and xh[j] (the first pass over the row's inputs): one pass, two lane sets.
template <class Row>
CIUIC_ROW_INLINE void LnBackwardSums(size_t cols, const float* gamma, float* dz, float* xh, Row row, float* ma,
                                     float* mb) {
  float la[qm::kLanes] = {}, lb[qm::kLanes] = {};
  ForLanes(cols, [&](size_t j, int l) CIUIC_LAMBDA_INLINE {
    row(j);
    const float g = dz[j] * gamma[j];
    la[l] += g;
    lb[l] += g * xh[j];
  });
  const float n = static_cast<float>(cols);
  *ma = qm::CombineLanes(la) / n;
  *mb = qm::CombineLanes(lb) / n;
}

// The shared tail of every LayerNorm backward, for one row: dz and xh in (LnBackwardSums' ma, mb), dx out
// (plus dsum when given); the chunk's column partials accumulated. One pass.
template <class T, bool kDsum, bool kParts>
CIUIC_ROW_INLINE void LnBackwardTail(size_t cols, const float* dz, const float* xh, const float* gamma, float ma,
                                     float mb, float rstd, const T* dsum, T* dx, float* part_gamma, float* part_beta) {
  for (size_t j = 0; j < cols; ++j) {
    const float g = dz[j] * gamma[j];
    const float v = ((g - ma) - xh[j] * mb) * rstd;
    St(dx, j, kDsum ? v + Ld(dsum, j) : v);
  }
  if constexpr (kParts) {
    // The scratch rows and this chunk's partials never overlap anything: said, so the loop vectorises
    // without run-time overlap checks.
    float* __restrict pg = part_gamma;
    float* __restrict pb = part_beta;
    const float* __restrict z = dz;
    const float* __restrict h = xh;
    for (size_t j = 0; j < cols; ++j) {
      pg[j] += z[j] * h[j];
      pb[j] += z[j];
    }
  }
}

// Column gradients: out[c] = Σ over chunks (in order) of the chunk partials.
void SumChunks(const float* partials, size_t chunks, size_t cols, float* out) {
  ForBlocks(cols, chunks, [&](size_t c0, size_t c1) {
    for (size_t c = c0; c < c1; ++c) out[c] = 0.0f;
    for (size_t k = 0; k < chunks; ++k)
      for (size_t c = c0; c < c1; ++c) out[c] += partials[k * cols + c];
  });
}

size_t Chunks(size_t rows) { return (rows + kGradRowChunk - 1) / kGradRowChunk; }

// The row loops below are compiled for AVX-512 (x86-64-v4), AVX2 (v3) and baseline x86-64, picked at load
// time (GCC target_clones, as kernels/cpu/codecs.cc): the GELU/exp polynomials are compute-bound, and 16
// lanes halve their instructions where the CPU has them. -ffp-contract=off and the explicit 32-lane sums
// keep every clone's results identical (elementwise IEEE operations in the same order at any width).
// Not under a sanitizer: the ifunc resolvers run while the dynamic loader relocates, before the
// sanitizer's runtime starts, and GCC instruments them (a TSan build died there).
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && !defined(__SANITIZE_THREAD__) && \
    !defined(__SANITIZE_ADDRESS__)
#define CIUIC_TRAIN_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define CIUIC_TRAIN_CLONES  // clang (no template clones) and sanitizer builds: baseline only
#endif

template <class T>
struct LnForwardArgs {
  size_t cols;
  const T* x;
  const T* add;  // add-ln: sum = x + add is stored and normalised as stored
  T* sum;
  const float* gamma;
  const float* beta;
  float eps;
  DropoutArgs d;
  uint32_t threshold;
  float scale;
  T* y;
  float* mean;
  float* rstd;
};

// LayerNorm, then act, then dropout, over rows [r0, r1) (act none and p 0: plain LayerNorm).
template <class T, Act A>
CIUIC_TRAIN_CLONES void LnForwardRange(const LnForwardArgs<T>& a, size_t r0, size_t r1) {
  const size_t cols = a.cols;
  std::vector<float> v(cols);
  std::vector<uint32_t> keep(a.threshold ? cols : 0);
  for (size_t r = r0; r < r1; ++r) {
    const size_t base = r * cols;
    if (a.add) {
      const T* x = a.x + base;
      const T* add = a.add + base;
      T* sum = a.sum + base;
      for (size_t j = 0; j < cols; ++j) {
        const float s = Ld(x, j) + Ld(add, j);
        St(sum, j, s);
        v[j] = Round<T>(s);
      }
    } else {
      LoadRow(a.x + base, cols, v.data());
    }
    const RowStats st = Stats(v.data(), cols, a.eps);
    a.mean[r] = st.mean;
    a.rstd[r] = st.rstd;
    T* out = a.y + base;
    if (a.threshold) {
      FillKeep(a.d, a.threshold, base, cols, keep.data());
      for (size_t j = 0; j < cols; ++j) {
        const float z = ((v[j] - st.mean) * st.rstd) * a.gamma[j] + a.beta[j];
        St(out, j, ApplyKeep(tm::Activate(A, z), a.scale, keep[j]));
      }
    } else {
      for (size_t j = 0; j < cols; ++j) {
        const float z = ((v[j] - st.mean) * st.rstd) * a.gamma[j] + a.beta[j];
        St(out, j, tm::Activate(A, z));
      }
    }
  }
}

template <class T, Act A>
void LnForwardRows(size_t rows, size_t cols, const T* x, const T* add, T* sum, const float* gamma, const float* beta,
                   float eps, const DropoutArgs& d, T* y, float* mean, float* rstd) {
  if (rows == 0 || cols == 0) return;  // nothing to normalise (the CUDA twin writes nothing either)
  const LnForwardArgs<T> a{cols, x,    add, sum, gamma, beta, eps, d, tm::DropThreshold(d.p), tm::KeepScale(d.p),
                           y,    mean, rstd};
  ForBlocks(rows, cols, [&](size_t r0, size_t r1) { LnForwardRange<T, A>(a, r0, r1); });
}

template <class T>
struct LnBackwardArgs {
  size_t rows, cols, chunks;
  DropoutArgs d;
  uint32_t threshold;
  float scale;
  const T* dy;
  const T* x;
  const float* gamma;
  const float* beta;
  const float* mean;
  const float* rstd;
  const T* dsum;
  T* dx;
  float* workspace;  // null: no dgamma/dbeta
};

// Backward of LnForwardRange over gradient chunks [k0, k1): dz rebuilt from x, mean, rstd and the mask.
template <class T, Act A>
CIUIC_TRAIN_CLONES void LnBackwardRange(const LnBackwardArgs<T>& a, size_t k0, size_t k1) {
  const size_t cols = a.cols;
  std::vector<float> xh(cols), dz(cols);
  std::vector<uint32_t> keep(a.threshold ? cols : 0);
  for (size_t k = k0; k < k1; ++k) {
    float* pg = a.workspace ? a.workspace + k * cols : nullptr;
    float* pb = a.workspace ? a.workspace + (a.chunks + k) * cols : nullptr;
    if (pg) {
      std::fill(pg, pg + cols, 0.0f);
      std::fill(pb, pb + cols, 0.0f);
    }
    const size_t last = std::min(a.rows, (k + 1) * kGradRowChunk);
    for (size_t r = k * kGradRowChunk; r < last; ++r) {
      const size_t base = r * cols;
      const float mu = a.mean[r], rs = a.rstd[r];
      const T* dy = a.dy + base;
      const T* x = a.x + base;
      float ma, mb;
      if constexpr (A == Act::kNone) {
        // x̂, dz and the sums in one pass. Dropout or not as a template parameter: a test inside the loop
        // would keep it from vectorising.
        auto sums = [&]<bool kDrop>() CIUIC_LAMBDA_INLINE {
          LnBackwardSums(
              cols, a.gamma, dz.data(), xh.data(),
              [&](size_t j) CIUIC_LAMBDA_INLINE {
                xh[j] = (Ld(x, j) - mu) * rs;
                dz[j] = kDrop ? ApplyKeep(Ld(dy, j), a.scale, keep[j]) : Ld(dy, j);
              },
              &ma, &mb);
        };
        if (a.threshold) {
          FillKeep(a.d, a.threshold, base, cols, keep.data());
          sums.template operator()<true>();
        } else {
          sums.template operator()<false>();
        }
      } else {
        // With an activation the derivative's polynomial gets loops of its own: inside the 32-lane
        // block of the sums GCC leaves it scalar (6x slower).
        for (size_t j = 0; j < cols; ++j) xh[j] = (Ld(x, j) - mu) * rs;
        if (a.threshold) {
          FillKeep(a.d, a.threshold, base, cols, keep.data());
          for (size_t j = 0; j < cols; ++j)
            dz[j] = ApplyKeep(Ld(dy, j), a.scale, keep[j]) * tm::ActivateGrad(A, xh[j] * a.gamma[j] + a.beta[j]);
        } else {
          for (size_t j = 0; j < cols; ++j) dz[j] = Ld(dy, j) * tm::ActivateGrad(A, xh[j] * a.gamma[j] + a.beta[j]);
        }
        LnBackwardSums(
            cols, a.gamma, dz.data(), xh.data(), [](size_t) {}, &ma, &mb);
      }
      const T* dsum = a.dsum ? a.dsum + base : nullptr;
      if (dsum && pg) {
        LnBackwardTail<T, true, true>(cols, dz.data(), xh.data(), a.gamma, ma, mb, rs, dsum, a.dx + base, pg, pb);
      } else if (dsum) {
        LnBackwardTail<T, true, false>(cols, dz.data(), xh.data(), a.gamma, ma, mb, rs, dsum, a.dx + base, pg, pb);
      } else if (pg) {
        LnBackwardTail<T, false, true>(cols, dz.data(), xh.data(), a.gamma, ma, mb, rs, dsum, a.dx + base, pg, pb);
      } else {
        LnBackwardTail<T, false, false>(cols, dz.data(), xh.data(), a.gamma, ma, mb, rs, dsum, a.dx + base, pg, pb);
      }
    }
  }
}

template <class T, Act A>
void LnBackwardRows(size_t rows, size_t cols, const DropoutArgs& d, const T* dy, const T* x, const float* gamma,
                    const float* beta, const float* mean, const float* rstd, const T* dsum, T* dx, float* dgamma,
                    float* dbeta, float* workspace) {
  const bool grads = dgamma != nullptr;
  if (grads != (dbeta != nullptr)) throw UsageError("LayerNorm backward: dgamma and dbeta must be given together");
  const size_t chunks = Chunks(rows);
  if (grads && rows > 0 && !workspace) throw UsageError("LayerNorm backward: no workspace for dgamma/dbeta");
  if (cols == 0) return;
  if (rows == 0) {  // no rows: zero column gradients, as the twin
    if (grads) {
      std::fill(dgamma, dgamma + cols, 0.0f);
      std::fill(dbeta, dbeta + cols, 0.0f);
    }
    return;
  }
  const LnBackwardArgs<T> a{rows, cols, chunks, d,  tm::DropThreshold(d.p),     tm::KeepScale(d.p), dy, x, gamma, beta,
                            mean, rstd, dsum,   dx, grads ? workspace : nullptr};
  ForBlocks(chunks, kGradRowChunk * cols, [&](size_t k0, size_t k1) { LnBackwardRange<T, A>(a, k0, k1); });
  if (grads) {
    SumChunks(workspace, chunks, cols, dgamma);
    SumChunks(workspace + chunks * cols, chunks, cols, dbeta);
  }
}

template <class T, Act A, bool kBias>
inline void BiasActForwardRow(size_t cols, const T* in, const float* bias, T* out) {  // out may be in
  for (size_t j = 0; j < cols; ++j) St(out, j, tm::Activate(A, kBias ? Ld(in, j) + bias[j] : Ld(in, j)));
}

template <class T, Act A>
CIUIC_TRAIN_CLONES void BiasActForwardRange(size_t cols, const T* x, const float* bias, T* y, size_t r0, size_t r1) {
  for (size_t r = r0; r < r1; ++r) {
    if (bias) {
      BiasActForwardRow<T, A, true>(cols, x + r * cols, bias, y + r * cols);
    } else {
      BiasActForwardRow<T, A, false>(cols, x + r * cols, nullptr, y + r * cols);
    }
  }
}

template <class T, Act A>
void BiasActForwardT(size_t rows, size_t cols, const T* x, const float* bias, T* y) {
  if (rows == 0 || cols == 0) return;
  ForBlocks(rows, cols, [&](size_t r0, size_t r1) { BiasActForwardRange<T, A>(cols, x, bias, y, r0, r1); });
}

template <class T, Act A, bool kBias, bool kSums>
// out may be grad (in place); no __restrict: GCC versions the loop with a run-time overlap check.
inline void BiasActBackwardRow(size_t cols, const T* in, const float* bias, const T* grad, T* out, float* sums) {
  for (size_t j = 0; j < cols; ++j) {
    const float h = kBias ? Ld(in, j) + bias[j] : Ld(in, j);
    const float g = Ld(grad, j) * tm::ActivateGrad(A, h);
    St(out, j, g);
    if constexpr (kSums) sums[j] += g;
  }
}

// Bias presence and the dbias sums are template parameters: a null-pointer test inside the loop would
// keep GCC from if-converting (vectorising) it.
template <class T, Act A>
CIUIC_TRAIN_CLONES void BiasActBackwardRange(size_t rows, size_t cols, const T* dy, const T* x, const float* bias,
                                             T* dx, float* workspace, size_t k0, size_t k1) {
  for (size_t k = k0; k < k1; ++k) {
    float* part = workspace ? workspace + k * cols : nullptr;
    if (part) std::fill(part, part + cols, 0.0f);
    const size_t last = std::min(rows, (k + 1) * kGradRowChunk);
    for (size_t r = k * kGradRowChunk; r < last; ++r) {
      const size_t base = r * cols;
      if (bias && part) {
        BiasActBackwardRow<T, A, true, true>(cols, x + base, bias, dy + base, dx + base, part);
      } else if (bias) {
        BiasActBackwardRow<T, A, true, false>(cols, x + base, bias, dy + base, dx + base, nullptr);
      } else if (part) {
        BiasActBackwardRow<T, A, false, true>(cols, x + base, nullptr, dy + base, dx + base, part);
      } else {
        BiasActBackwardRow<T, A, false, false>(cols, x + base, nullptr, dy + base, dx + base, nullptr);
      }
    }
  }
}

template <class T, Act A>
void BiasActBackwardT(size_t rows, size_t cols, const T* dy, const T* x, const float* bias, T* dx, float* dbias,
                      float* workspace) {
  const size_t chunks = Chunks(rows);
  if (dbias && rows > 0 && !workspace) throw UsageError("bias backward: no workspace for dbias");
  if (cols == 0) return;
  if (rows == 0) {
    if (dbias) std::fill(dbias, dbias + cols, 0.0f);
    return;
  }
  float* ws = dbias ? workspace : nullptr;
  ForBlocks(chunks, kGradRowChunk * cols,
            [&](size_t k0, size_t k1) { BiasActBackwardRange<T, A>(rows, cols, dy, x, bias, dx, ws, k0, k1); });
  if (dbias) SumChunks(workspace, chunks, cols, dbias);
}

template <class T>
CIUIC_TRAIN_CLONES void DropoutRange(const DropoutArgs& d, uint32_t threshold, float scale, const T* in, T* out,
                                     size_t b, size_t e, uint32_t* keep) {
  FillKeep(d, threshold, b, e - b, keep);
  for (size_t i = b; i < e; ++i) St(out, i, ApplyKeep(Ld(in, i), scale, keep[i - b]));
}

template <class T>
CIUIC_TRAIN_CLONES void AddRange(const T* a, const T* b, T* out, size_t i0, size_t i1) {
  for (size_t i = i0; i < i1; ++i) St(out, i, Ld(a, i) + Ld(b, i));
}

void CheckShape(size_t rows, size_t cols) {
  if (cols != 0 && rows > SIZE_MAX / cols) throw UsageError("training kernel: rows × cols overflows");
}

}  // namespace

void LayerNormForward(DType t, size_t rows, size_t cols, const void* x, const float* gamma, const float* beta,
                      float eps, void* y, float* mean, float* rstd, void*) {
  CheckShape(rows, cols);
  ByType(t, [&](auto tag) {
    using T = decltype(tag);
    LnForwardRows<T, Act::kNone>(rows, cols, static_cast<const T*>(x), nullptr, nullptr, gamma, beta, eps, {},
                                 static_cast<T*>(y), mean, rstd);
  });
}

void LayerNormBackward(DType t, size_t rows, size_t cols, const void* dy, const void* x, const float* gamma,
                       const float* mean, const float* rstd, void* dx, float* dgamma, float* dbeta, float* workspace,
                       void*) {
  CheckShape(rows, cols);
  ByType(t, [&](auto tag) {
    using T = decltype(tag);
    LnBackwardRows<T, Act::kNone>(rows, cols, {}, static_cast<const T*>(dy), static_cast<const T*>(x), gamma, nullptr,
                                  mean, rstd, nullptr, static_cast<T*>(dx), dgamma, dbeta, workspace);
  });
}

void BiasActForward(DType t, size_t rows, size_t cols, Activation act, const void* x, const float* bias, void* y,
                    void*) {
  CheckShape(rows, cols);
  ByType(t, [&](auto tag) {
    using T = decltype(tag);
    ByAct(act, [&](auto a) {
      BiasActForwardT<T, decltype(a)::value>(rows, cols, static_cast<const T*>(x), bias, static_cast<T*>(y));
    });
  });
}

void BiasActBackward(DType t, size_t rows, size_t cols, Activation act, const void* dy, const void* x,
                     const float* bias, void* dx, float* dbias, float* workspace, void*) {
  CheckShape(rows, cols);
  ByType(t, [&](auto tag) {
    using T = decltype(tag);
    ByAct(act, [&](auto a) {
      BiasActBackwardT<T, decltype(a)::value>(rows, cols, static_cast<const T*>(dy), static_cast<const T*>(x), bias,
                                              static_cast<T*>(dx), dbias, workspace);
    });
  });
}

void Dropout(DType t, size_t n, const DropoutArgs& d, const void* x, void* y, void*) {
  const uint32_t threshold = tm::DropThreshold(d.p);
  const float scale = tm::KeepScale(d.p);
  constexpr size_t kSpan = 4096;  // mask scratch per step: a multiple of 4, so Philox groups never split
  ByType(t, [&](auto tag) {
    using T = decltype(tag);
    const T* in = static_cast<const T*>(x);
    T* out = static_cast<T*>(y);
    ForBlocks((n + kSpan - 1) / kSpan, kSpan, [&](size_t s0, size_t s1) {
      uint32_t keep[kSpan];
      for (size_t s = s0; s < s1; ++s)
        DropoutRange<T>(d, threshold, scale, in, out, s * kSpan, std::min(n, (s + 1) * kSpan), keep);
    });
  });
}

void AddTensors(DType t, size_t n, const void* a, const void* b, void* out, void*) {
  ByType(t, [&](auto tag) {
    using T = decltype(tag);
    const T* pa = static_cast<const T*>(a);
    const T* pb = static_cast<const T*>(b);
    T* po = static_cast<T*>(out);
    ParallelFor(n, [&](size_t b0, size_t e) { AddRange<T>(pa, pb, po, b0, e); });
  });
}

void LnActDropoutForward(DType t, size_t rows, size_t cols, Activation act, const DropoutArgs& d, const void* x,
                         const float* gamma, const float* beta, float eps, void* y, float* mean, float* rstd, void*) {
  CheckShape(rows, cols);
  ByType(t, [&](auto tag) {
    using T = decltype(tag);
    ByAct(act, [&](auto a) {
      LnForwardRows<T, decltype(a)::value>(rows, cols, static_cast<const T*>(x), nullptr, nullptr, gamma, beta, eps, d,
                                           static_cast<T*>(y), mean, rstd);
    });
  });
}

void LnActDropoutBackward(DType t, size_t rows, size_t cols, Activation act, const DropoutArgs& d, const void* dy,
                          const void* x, const float* gamma, const float* beta, const float* mean, const float* rstd,
                          void* dx, float* dgamma, float* dbeta, float* workspace, void*) {
  CheckShape(rows, cols);
  ByType(t, [&](auto tag) {
    using T = decltype(tag);
    ByAct(act, [&](auto a) {
      LnBackwardRows<T, decltype(a)::value>(rows, cols, d, static_cast<const T*>(dy), static_cast<const T*>(x), gamma,
                                            beta, mean, rstd, nullptr, static_cast<T*>(dx), dgamma, dbeta, workspace);
    });
  });
}

void AddLayerNormForward(DType t, size_t rows, size_t cols, const void* x, const void* residual, const float* gamma,
                         const float* beta, float eps, void* sum, void* y, float* mean, float* rstd, void*) {
  CheckShape(rows, cols);
  ByType(t, [&](auto tag) {
    using T = decltype(tag);
    LnForwardRows<T, Act::kNone>(rows, cols, static_cast<const T*>(x), static_cast<const T*>(residual),
                                 static_cast<T*>(sum), gamma, beta, eps, {}, static_cast<T*>(y), mean, rstd);
  });
}

void AddLayerNormBackward(DType t, size_t rows, size_t cols, const void* dy, const void* dsum, const void* sum,
                          const float* gamma, const float* mean, const float* rstd, void* dx, float* dgamma,
                          float* dbeta, float* workspace, void*) {
  CheckShape(rows, cols);
  ByType(t, [&](auto tag) {
    using T = decltype(tag);
    LnBackwardRows<T, Act::kNone>(rows, cols, {}, static_cast<const T*>(dy), static_cast<const T*>(sum), gamma, nullptr,
                                  mean, rstd, static_cast<const T*>(dsum), static_cast<T*>(dx), dgamma, dbeta,
                                  workspace);
  });
}

}  // namespace ciuic::cpu
