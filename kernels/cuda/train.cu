// CUDA training kernels, bit-identical twins of kernels/cpu/train.cc. A warp owns a row (lane l adds
// elements l, l + 32, ... and the shuffles combine lanes in qm::CombineLanes' order); column gradients
// take one thread per (row chunk, columns) writing chunk partials into the workspace, then one thread
// per column adds them in chunk order. Both walk four windows (rows) at a time with every load of the four
// issued first (2026-11-28, H200: LayerNorm passes 1.2-1.4x faster, bits unchanged). Dropout draws one Philox call per
// four elements: a warp shares each call's keep bits by shuffle. Needs --fmad=false (kernels/CMakeLists.txt) to match
// the oracle.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>

#include "core/error.h"
#include "kernels/cuda/launch.h"
#include "kernels/quant_math.h"
#include "kernels/train_kernels.h"

namespace ciuic::cuda {

namespace {

using tm::Act;

constexpr unsigned kWarp = 32;
constexpr unsigned kWarpsPerBlock = kThreads / kWarp;
constexpr unsigned kFullMask = 0xffffffffu;
// Columns a thread of the LayerNorm column-gradient kernel owns: one Philox call's worth, so an aligned
// row needs one call per thread and an unaligned one two.
constexpr size_t kColsPerThread = 4;
// gridDim.y's limit.
constexpr size_t kMaxGridY = 65535;

static_assert(kWarp == static_cast<unsigned>(qm::kLanes), "a warp is the 32 lanes of the fixed row order");

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

void CheckShape(size_t rows, size_t cols) {
  if (cols != 0 && rows > SIZE_MAX / cols) throw UsageError("training kernel: rows × cols overflows");
}

__host__ __device__ size_t Chunks(size_t rows) { return (rows + kGradRowChunk - 1) / kGradRowChunk; }

// x over columns (or column groups), y over rows (or row chunks); both loops grid-stride.
dim3 Grid2d(size_t x_items, size_t y_items) {
  const unsigned gx = GridFor(x_items, kThreads);
  const size_t gy = std::min({y_items, std::max<size_t>(1, kMaxGrid / gx), kMaxGridY});
  return dim3(gx, static_cast<unsigned>(std::max<size_t>(gy, 1)));
}

unsigned RowGrid(size_t rows) { return GridFor(rows, kWarpsPerBlock); }

// The CPU's LaneSum after each lane has added its elements: the butterfly of qm::CombineLanes, whose
// result lands in lane 0, broadcast to the warp.
__device__ __forceinline__ float WarpSum(float v) {
  for (unsigned w = kWarp / 2; w >= 1; w /= 2) v = v + __shfl_down_sync(kFullMask, v, w);
  return __shfl_sync(kFullMask, v, 0);
}

// IEEE division and square root whatever -prec-div/-prec-sqrt say: the oracle rounds them correctly.
__device__ __forceinline__ float Mean(float sum, size_t cols) { return __fdiv_rn(sum, static_cast<float>(cols)); }
__device__ __forceinline__ float Rstd(float var, float eps) { return __fdiv_rn(1.0f, __fsqrt_rn(var + eps)); }

// Keep bits (bit k: element 4·group + k kept) of one Philox call, as tm::Kept decides them.
__device__ __forceinline__ uint32_t KeepNibble(const DropoutArgs& d, uint32_t threshold, uint64_t group) {
  if (threshold == 0u) return 0xfu;
  if (threshold == 0xffffffffu) return 0u;
  const uint64_t seed = d.seed ^ tm::kDropoutSalt;
  const qm::U32x4 r =
      qm::Philox(static_cast<uint32_t>(group), static_cast<uint32_t>(group >> 32), static_cast<uint32_t>(d.offset),
                 static_cast<uint32_t>(d.offset >> 32), static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
  return (r.v[0] >= threshold ? 1u : 0u) | (r.v[1] >= threshold ? 2u : 0u) | (r.v[2] >= threshold ? 4u : 0u) |
         (r.v[3] >= threshold ? 8u : 0u);
}

// The dropout mask of a row for a warp walking it 32 elements at a time in increasing order. Elements
// are grouped in tiles of 128 (32 Philox calls, one per lane); a lane holds its call's bits for the
// current tile (bits 0-3) and the next (bits 4-7), and an element's bit comes from the lane of its call
// by one shuffle: one call per lane per 128 elements instead of one per element.
class WarpMask {
 public:
  __device__ WarpMask(const DropoutArgs& d, uint32_t threshold) : d_(d), threshold_(threshold) {}

  __device__ void Start(uint64_t e0) {
    tile_ = e0 >> 7;
    bits_ = Nibble(tile_);
    have_next_ = false;
  }

  // Whether element e is kept; every lane calls it with the same window start (the element of lane 0),
  // windows in increasing order, e in [window, window + 32).
  __device__ bool Kept(uint64_t window, uint64_t e) {
    const uint64_t t = window >> 7;
    if (t != tile_) {
      bits_ = have_next_ && t == tile_ + 1 ? bits_ >> 4 : Nibble(t);
      tile_ = t;
      have_next_ = false;
    }
    if (!have_next_ && ((window + kWarp - 1) >> 7) != tile_) {
      bits_ |= Nibble(tile_ + 1) << 4;
      have_next_ = true;
    }
    const uint32_t v = __shfl_sync(kFullMask, bits_, static_cast<int>((e >> 2) & 31u));
    const uint32_t nibble = (e >> 7) == tile_ ? (v & 0xfu) : (v >> 4);
    return ((nibble >> (e & 3u)) & 1u) != 0u;
  }

 private:
  __device__ uint32_t Nibble(uint64_t tile) const {
    return KeepNibble(d_, threshold_, tile * kWarp + (threadIdx.x % kWarp));
  }

  DropoutArgs d_;
  uint32_t threshold_;
  uint64_t tile_ = 0;
  uint32_t bits_ = 0;
  bool have_next_ = false;
};

// A lane's walk over a row (elements lane, lane + 32, ...), four windows at a time: the four loads are
// issued before the first use, so a warp has four times the bytes in flight, while `use` still sees the
// elements in increasing order (the sums keep the oracle's order, so the bits do not change).
constexpr size_t kBatch = 4;

template <class LoadFn, class UseFn>
__device__ __forceinline__ void RowWalk(unsigned lane, size_t cols, LoadFn load, UseFn use) {
  size_t j = lane;
  for (; j + (kBatch - 1) * kWarp < cols; j += kBatch * kWarp) {
    decltype(load(j)) v[kBatch];
#pragma unroll
    for (size_t b = 0; b < kBatch; ++b) v[b] = load(j + b * kWarp);
#pragma unroll
    for (size_t b = 0; b < kBatch; ++b) use(j + b * kWarp, v[b]);
  }
  for (; j < cols; j += kWarp) use(j, load(j));
}

// The same walk for a row under a dropout mask: every lane takes part in every window (the mask's
// shuffles), `use` gets (j, value, keep) for the lanes with j < cols.
template <class LoadFn, class UseFn>
__device__ __forceinline__ void MaskedRowWalk(unsigned lane, size_t cols, size_t base, WarpMask& mask, LoadFn load,
                                              UseFn use) {
  mask.Start(base);
  size_t j0 = 0;
  for (; j0 + kBatch * kWarp <= cols; j0 += kBatch * kWarp) {
    decltype(load(j0)) v[kBatch];
#pragma unroll
    for (size_t b = 0; b < kBatch; ++b) v[b] = load(j0 + b * kWarp + lane);
#pragma unroll
    for (size_t b = 0; b < kBatch; ++b) {
      const size_t w = j0 + b * kWarp;
      const bool keep = mask.Kept(base + w, base + w + lane);
      use(w + lane, v[b], keep);
    }
  }
  for (; j0 < cols; j0 += kWarp) {
    const size_t j = j0 + lane;
    const bool keep = mask.Kept(base + j0, base + j);
    if (j < cols) use(j, load(j), keep);
  }
}

// ---- LayerNorm (+ residual add, + activation and dropout) forward: a warp per row ----------------------
template <class T, Act A>
__global__ void LnForwardKernel(size_t rows, size_t cols, const T* x, const T* add, T* sum, const float* gamma,
                                const float* beta, float eps, DropoutArgs d, uint32_t threshold, float scale, T* y,
                                float* mean, float* rstd) {
  const unsigned lane = threadIdx.x % kWarp;
  const size_t first = static_cast<size_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarp;
  const size_t stride = static_cast<size_t>(gridDim.x) * kWarpsPerBlock;
  WarpMask mask(d, threshold);
  for (size_t r = first; r < rows; r += stride) {
    const size_t base = r * cols;
    // The row as LayerNorm reads it: x, or the stored (rounded) residual sum, which this lane wrote.
    const T* v = add ? sum + base : x + base;
    float acc = 0.0f;
    if (add) {
      RowWalk(
          lane, cols, [&](size_t j) { return tm::Store<T>(tm::Load(x[base + j]) + tm::Load(add[base + j])); },
          [&](size_t j, T s) {
            sum[base + j] = s;
            acc = acc + tm::Load(s);
          });
    } else {
      RowWalk(
          lane, cols, [&](size_t j) { return tm::Load(v[j]); }, [&](size_t, float a) { acc = acc + a; });
    }
    const float mu = Mean(WarpSum(acc), cols);
    acc = 0.0f;
    RowWalk(
        lane, cols, [&](size_t j) { return tm::Load(v[j]); },
        [&](size_t, float a) {
          const float c = a - mu;
          acc = acc + c * c;
        });
    const float rs = Rstd(Mean(WarpSum(acc), cols), eps);
    if (lane == 0) {
      mean[r] = mu;
      rstd[r] = rs;
    }
    T* out = y + base;
    struct In {
      float v, g, b;
    };
    const auto load = [&](size_t j) { return In{tm::Load(v[j]), gamma[j], beta[j]}; };
    if (threshold) {
      MaskedRowWalk(lane, cols, base, mask, load, [&](size_t j, In in, bool keep) {
        const float a = tm::Activate(A, ((in.v - mu) * rs) * in.g + in.b);
        out[j] = tm::Store<T>(keep ? a * scale : 0.0f);
      });
    } else {
      RowWalk(lane, cols, load,
              [&](size_t j, In in) { out[j] = tm::Store<T>(tm::Activate(A, ((in.v - mu) * rs) * in.g + in.b)); });
    }
  }
}

// The gradient reaching LayerNorm's output: dy through dropout (when on) and the activation.
template <Act A>
__device__ __forceinline__ float DzOf(float dy, float xh, float gamma, float beta, bool drop, bool keep, float scale) {
  const float dd = drop ? (keep ? dy * scale : 0.0f) : dy;
  if constexpr (A == Act::kNone) {
    return dd;
  } else {
    const float z = xh * gamma + beta;
    return dd * tm::ActivateGrad(A, z);
  }
}

// ---- LayerNorm backward, dx: a warp per row, two passes (row sums, then dx) ----------------------------
template <class T, Act A>
__global__ void LnBackwardRowsKernel(size_t rows, size_t cols, DropoutArgs d, uint32_t threshold, float scale,
                                     const T* dy, const T* x, const float* gamma, const float* beta, const float* mean,
                                     const float* rstd, const T* dsum, T* dx) {
  const unsigned lane = threadIdx.x % kWarp;
  const size_t first = static_cast<size_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarp;
  const size_t stride = static_cast<size_t>(gridDim.x) * kWarpsPerBlock;
  const bool drop = threshold != 0u;
  WarpMask mask(d, threshold);
  for (size_t r = first; r < rows; r += stride) {
    const size_t base = r * cols;
    const float mu = mean[r], rs = rstd[r];
    struct In {
      float dy, x, g, b;
    };
    const auto load = [&](size_t j) {
      return In{tm::Load(dy[base + j]), tm::Load(x[base + j]), gamma[j], A == Act::kNone ? 0.0f : beta[j]};
    };
    float sa = 0.0f, sb = 0.0f;
    const auto sums = [&](size_t, In in, bool keep) {
      const float xh = (in.x - mu) * rs;
      const float g = DzOf<A>(in.dy, xh, in.g, in.b, drop, keep, scale) * in.g;
      sa = sa + g;
      sb = sb + g * xh;
    };
    if (drop)
      MaskedRowWalk(lane, cols, base, mask, load, sums);
    else
      RowWalk(lane, cols, load, [&](size_t j, In in) { sums(j, in, true); });
    const float ma = Mean(WarpSum(sa), cols), mb = Mean(WarpSum(sb), cols);
    const auto write = [&](size_t j, In in, bool keep) {
      const float xh = (in.x - mu) * rs;
      const float g = DzOf<A>(in.dy, xh, in.g, in.b, drop, keep, scale) * in.g;
      float v = ((g - ma) - xh * mb) * rs;
      if (dsum) v = v + tm::Load(dsum[base + j]);
      dx[base + j] = tm::Store<T>(v);
    };
    if (drop)
      MaskedRowWalk(lane, cols, base, mask, load, write);
    else
      RowWalk(lane, cols, load, [&](size_t j, In in) { write(j, in, true); });
  }
}

// ---- LayerNorm backward with dz kept: dz once per element instead of once per pass ----------------------
// With an activation or dropout, dz costs an activation gradient and a share of a Philox call; the
// three-pass backward (column partials, row sums, dx) pays it three times, and the unfused sequence
// (which pays it once) beat it (2026-11-28, H200: 0.79-0.91x). With a workspace the backward stores dz
// as fp32 in one row pass (which also takes the row means), then one element pass reads it back for dx
// and the column partials: the same expressions in the same order, so the same bits.
template <class T, Act A>
__global__ void LnBackwardDzKernel(size_t rows, size_t cols, DropoutArgs d, uint32_t threshold, float scale,
                                   const T* dy, const T* x, const float* gamma, const float* beta, const float* mean,
                                   const float* rstd, float* dz_out, float* row_ma, float* row_mb) {
  const unsigned lane = threadIdx.x % kWarp;
  const size_t first = static_cast<size_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarp;
  const size_t stride = static_cast<size_t>(gridDim.x) * kWarpsPerBlock;
  const bool drop = threshold != 0u;
  WarpMask mask(d, threshold);
  for (size_t r = first; r < rows; r += stride) {
    const size_t base = r * cols;
    const float mu = mean[r], rs = rstd[r];
    struct In {
      float dy, x, g, b;
    };
    const auto load = [&](size_t j) {
      return In{tm::Load(dy[base + j]), tm::Load(x[base + j]), gamma[j], A == Act::kNone ? 0.0f : beta[j]};
    };
    float sa = 0.0f, sb = 0.0f;
    const auto sums = [&](size_t j, In in, bool keep) {
      const float xh = (in.x - mu) * rs;
      const float dz = DzOf<A>(in.dy, xh, in.g, in.b, drop, keep, scale);
      dz_out[base + j] = dz;
      const float g = dz * in.g;
      sa = sa + g;
      sb = sb + g * xh;
    };
    if (drop)
      MaskedRowWalk(lane, cols, base, mask, load, sums);
    else
      RowWalk(lane, cols, load, [&](size_t j, In in) { sums(j, in, true); });
    const float ma = Mean(WarpSum(sa), cols), mb = Mean(WarpSum(sb), cols);
    if (lane == 0) {
      row_ma[r] = ma;
      row_mb[r] = mb;
    }
  }
}

// The element pass, a thread per (chunk, kColsPerThread columns): dx from the kept dz and the row means,
// and (part_gamma non-null) the chunk's column partials, rows in order as LnColumnPartialsKernel adds them.
template <class T>
__global__ void LnBackwardFromDzKernel(size_t rows, size_t cols, const float* dz, const T* x, const float* gamma,
                                       const float* mean, const float* rstd, const float* row_ma, const float* row_mb,
                                       T* dx, float* part_gamma, float* part_beta) {
  const size_t groups = (cols + kColsPerThread - 1) / kColsPerThread;
  const size_t chunks = Chunks(rows);
  for (size_t k = blockIdx.y; k < chunks; k += gridDim.y) {
    for (size_t q = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; q < groups;
         q += static_cast<size_t>(gridDim.x) * blockDim.x) {
      const size_t c0 = q * kColsPerThread;
      const size_t nc = cols - c0 < kColsPerThread ? cols - c0 : kColsPerThread;
      float pg[kColsPerThread], pb[kColsPerThread], g[kColsPerThread];
#pragma unroll
      for (size_t i = 0; i < kColsPerThread; ++i) {
        pg[i] = pb[i] = 0.0f;
        g[i] = i < nc ? gamma[c0 + i] : 0.0f;
      }
      const size_t last = (k + 1) * kGradRowChunk < rows ? (k + 1) * kGradRowChunk : rows;
      for (size_t r0 = k * kGradRowChunk; r0 < last; r0 += kBatch) {
        float xs[kBatch][kColsPerThread], zs[kBatch][kColsPerThread];
#pragma unroll
        for (size_t b = 0; b < kBatch; ++b) {
          const size_t r = r0 + b;
          if (r < last) {
#pragma unroll
            for (size_t i = 0; i < kColsPerThread; ++i) {
              if (i < nc) {
                xs[b][i] = tm::Load(x[r * cols + c0 + i]);
                zs[b][i] = dz[r * cols + c0 + i];
              }
            }
          }
        }
#pragma unroll
        for (size_t b = 0; b < kBatch; ++b) {
          const size_t r = r0 + b;
          if (r >= last) break;
          const float mu = mean[r], rs = rstd[r], ma = row_ma[r], mb = row_mb[r];
#pragma unroll
          for (size_t i = 0; i < kColsPerThread; ++i) {
            if (i < nc) {
              const float xh = (xs[b][i] - mu) * rs;
              const float z = zs[b][i];
              pg[i] = pg[i] + z * xh;
              pb[i] = pb[i] + z;
              dx[r * cols + c0 + i] = tm::Store<T>(((z * g[i] - ma) - xh * mb) * rs);
            }
          }
        }
      }
      if (part_gamma) {
#pragma unroll
        for (size_t i = 0; i < kColsPerThread; ++i) {
          if (i < nc) {
            part_gamma[k * cols + c0 + i] = pg[i];
            part_beta[k * cols + c0 + i] = pb[i];
          }
        }
      }
    }
  }
}

// ---- LayerNorm backward, column partials: a thread per (chunk, kColsPerThread columns) -----------------
// partial_gamma[k][c] = Σ dz·x̂ and partial_beta[k][c] = Σ dz over chunk k's rows, in row order.
template <class T, Act A>
__global__ void LnColumnPartialsKernel(size_t rows, size_t cols, DropoutArgs d, uint32_t threshold, float scale,
                                       const T* dy, const T* x, const float* gamma, const float* beta,
                                       const float* mean, const float* rstd, float* part_gamma, float* part_beta) {
  const size_t groups = (cols + kColsPerThread - 1) / kColsPerThread;
  const size_t chunks = Chunks(rows);
  const bool drop = threshold != 0u;
  for (size_t k = blockIdx.y; k < chunks; k += gridDim.y) {
    for (size_t q = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; q < groups;
         q += static_cast<size_t>(gridDim.x) * blockDim.x) {
      const size_t c0 = q * kColsPerThread;
      const size_t nc = cols - c0 < kColsPerThread ? cols - c0 : kColsPerThread;
      float pg[kColsPerThread], pb[kColsPerThread];
#pragma unroll
      for (size_t i = 0; i < kColsPerThread; ++i) pg[i] = pb[i] = 0.0f;
      const size_t last = (k + 1) * kGradRowChunk < rows ? (k + 1) * kGradRowChunk : rows;
      float g[kColsPerThread], bt[kColsPerThread];
#pragma unroll
      for (size_t i = 0; i < kColsPerThread; ++i) {
        g[i] = i < nc ? gamma[c0 + i] : 0.0f;
        bt[i] = i < nc && A != Act::kNone ? beta[c0 + i] : 0.0f;
      }
      // Rows in batches of kBatch: every load of a batch is issued before its first use; the sums still
      // take the rows in order.
      for (size_t r0 = k * kGradRowChunk; r0 < last; r0 += kBatch) {
        float xs[kBatch][kColsPerThread], ds[kBatch][kColsPerThread], mus[kBatch], rss[kBatch];
#pragma unroll
        for (size_t b = 0; b < kBatch; ++b) {
          const size_t r = r0 + b;
          if (r < last) {
            mus[b] = mean[r];
            rss[b] = rstd[r];
#pragma unroll
            for (size_t i = 0; i < kColsPerThread; ++i) {
              if (i < nc) {
                xs[b][i] = tm::Load(x[r * cols + c0 + i]);
                ds[b][i] = tm::Load(dy[r * cols + c0 + i]);
              }
            }
          }
        }
#pragma unroll
        for (size_t b = 0; b < kBatch; ++b) {
          const size_t r = r0 + b;
          if (r >= last) break;
          const size_t e0 = r * cols + c0;
          uint32_t keep_bits = 0xfu;
          if (drop) {
            const uint64_t group = e0 >> 2;
            const unsigned shift = static_cast<unsigned>(e0 & 3u);
            uint32_t bits = KeepNibble(d, threshold, group);
            if (shift + nc > 4) bits |= KeepNibble(d, threshold, group + 1) << 4;
            keep_bits = bits >> shift;
          }
#pragma unroll
          for (size_t i = 0; i < kColsPerThread; ++i) {
            if (i < nc) {
              const float xh = (xs[b][i] - mus[b]) * rss[b];
              const float dz = DzOf<A>(ds[b][i], xh, g[i], bt[i], drop, ((keep_bits >> i) & 1u) != 0u, scale);
              pg[i] = pg[i] + dz * xh;
              pb[i] = pb[i] + dz;
            }
          }
        }
      }
#pragma unroll
      for (size_t i = 0; i < kColsPerThread; ++i) {
        if (i < nc) {
          part_gamma[k * cols + c0 + i] = pg[i];
          part_beta[k * cols + c0 + i] = pb[i];
        }
      }
    }
  }
}

// out[c] = 0 + partial[0][c] + partial[1][c] + ..., in chunk order.
__global__ void SumChunksKernel(const float* partials, size_t chunks, size_t cols, float* out) {
  for (size_t c = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < cols;
       c += static_cast<size_t>(gridDim.x) * blockDim.x) {
    float s = 0.0f;
    for (size_t k = 0; k < chunks; ++k) s = s + partials[k * cols + c];
    out[c] = s;
  }
}

void SumChunks(const float* partials, size_t chunks, size_t cols, float* out, cudaStream_t s) {
  SumChunksKernel<<<GridFor(cols, kThreads), kThreads, 0, s>>>(partials, chunks, cols, out);
  CIUIC_CUDA_CHECK(cudaGetLastError());
}

// ---- bias + activation -----------------------------------------------------------------------------------
template <class T, Act A>
__global__ void BiasActForwardKernel(size_t rows, size_t cols, const T* x, const float* bias, T* y) {
  for (size_t r = blockIdx.y; r < rows; r += gridDim.y) {
    const size_t base = r * cols;
    for (size_t c = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < cols;
         c += static_cast<size_t>(gridDim.x) * blockDim.x) {
      const float h = bias ? tm::Load(x[base + c]) + bias[c] : tm::Load(x[base + c]);
      y[base + c] = tm::Store<T>(tm::Activate(A, h));
    }
  }
}

// A thread per (chunk, column): dx for the chunk's rows, and the chunk's dbias partial when wanted.
template <class T, Act A>
__global__ void BiasActBackwardKernel(size_t rows, size_t cols, const T* dy, const T* x, const float* bias, T* dx,
                                      float* part) {
  const size_t chunks = Chunks(rows);
  for (size_t k = blockIdx.y; k < chunks; k += gridDim.y) {
    const size_t last = (k + 1) * kGradRowChunk < rows ? (k + 1) * kGradRowChunk : rows;
    for (size_t c = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < cols;
         c += static_cast<size_t>(gridDim.x) * blockDim.x) {
      float p = 0.0f;
      for (size_t r = k * kGradRowChunk; r < last; ++r) {
        const size_t e = r * cols + c;
        const float h = bias ? tm::Load(x[e]) + bias[c] : tm::Load(x[e]);
        const float g = tm::Load(dy[e]) * tm::ActivateGrad(A, h);
        dx[e] = tm::Store<T>(g);
        p = p + g;
      }
      if (part) part[k * cols + c] = p;
    }
  }
}

// ---- element-wise ----------------------------------------------------------------------------------------
// A thread per Philox call (four elements).
template <class T>
__global__ void DropoutKernel(size_t n, DropoutArgs d, uint32_t threshold, float scale, const T* x, T* y) {
  const size_t groups = (n + 3) / 4;
  for (size_t g = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; g < groups;
       g += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const uint32_t bits = KeepNibble(d, threshold, g);
#pragma unroll
    for (unsigned k = 0; k < 4; ++k) {
      const size_t e = 4 * g + k;
      if (e < n) y[e] = tm::Store<T>(((bits >> k) & 1u) != 0u ? tm::Load(x[e]) * scale : 0.0f);
    }
  }
}

template <class T>
__global__ void AddKernel(size_t n, const T* a, const T* b, T* out) {
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    out[i] = tm::Store<T>(tm::Load(a[i]) + tm::Load(b[i]));
}

// ---- launchers shared by the public entry points ---------------------------------------------------------
template <class T, Act A>
void LnForward(size_t rows, size_t cols, const T* x, const T* add, T* sum, const float* gamma, const float* beta,
               float eps, const DropoutArgs& d, T* y, float* mean, float* rstd, cudaStream_t s) {
  if (rows == 0 || cols == 0) return;
  LnForwardKernel<T, A><<<RowGrid(rows), kThreads, 0, s>>>(rows, cols, x, add, sum, gamma, beta, eps, d,
                                                           tm::DropThreshold(d.p), tm::KeepScale(d.p), y, mean, rstd);
  CIUIC_CUDA_CHECK(cudaGetLastError());
}

// dx last: dx may share memory with dy. With a workspace and an activation or dropout, dz is kept
// (LnBackwardDzKernel, the only reader of dy); otherwise column partials and their sums, then the rows.
template <class T, Act A>
void LnBackward(size_t rows, size_t cols, const DropoutArgs& d, const T* dy, const T* x, const float* gamma,
                const float* beta, const float* mean, const float* rstd, const T* dsum, T* dx, float* dgamma,
                float* dbeta, float* workspace, cudaStream_t s) {
  const bool grads = dgamma != nullptr;
  if (grads != (dbeta != nullptr)) throw UsageError("LayerNorm backward: dgamma and dbeta must be given together");
  if (grads && rows > 0 && !workspace) throw UsageError("LayerNorm backward: no workspace for dgamma/dbeta");
  if (cols == 0) return;
  if (rows == 0) {
    if (grads) {
      CIUIC_CUDA_CHECK(cudaMemsetAsync(dgamma, 0, cols * sizeof(float), s));
      CIUIC_CUDA_CHECK(cudaMemsetAsync(dbeta, 0, cols * sizeof(float), s));
    }
    return;
  }
  const uint32_t threshold = tm::DropThreshold(d.p);
  const float scale = tm::KeepScale(d.p);
  const size_t chunks = Chunks(rows);
  if (workspace && !dsum && (A != Act::kNone || threshold != 0u)) {  // dsum: AddLayerNorm's, no activation
    // dz kept (TrainWorkspaceBytes' layout): the partials, then dz, then the two row means.
    float* part_gamma = workspace;
    float* part_beta = workspace + chunks * cols;
    float* dz = workspace + 2 * chunks * cols;
    float* row_ma = dz + rows * cols;
    float* row_mb = row_ma + rows;
    LnBackwardDzKernel<T, A><<<RowGrid(rows), kThreads, 0, s>>>(rows, cols, d, threshold, scale, dy, x, gamma, beta,
                                                                mean, rstd, dz, row_ma, row_mb);
    CIUIC_CUDA_CHECK(cudaGetLastError());
    LnBackwardFromDzKernel<T><<<Grid2d((cols + kColsPerThread - 1) / kColsPerThread, chunks), kThreads, 0, s>>>(
        rows, cols, dz, x, gamma, mean, rstd, row_ma, row_mb, dx, grads ? part_gamma : nullptr,
        grads ? part_beta : nullptr);
    CIUIC_CUDA_CHECK(cudaGetLastError());
    if (grads) {
      SumChunks(part_gamma, chunks, cols, dgamma, s);
      SumChunks(part_beta, chunks, cols, dbeta, s);
    }
    return;
  }
  if (grads) {
    float* part_gamma = workspace;
    float* part_beta = workspace + chunks * cols;
    LnColumnPartialsKernel<T, A><<<Grid2d((cols + kColsPerThread - 1) / kColsPerThread, chunks), kThreads, 0, s>>>(
        rows, cols, d, threshold, scale, dy, x, gamma, beta, mean, rstd, part_gamma, part_beta);
    CIUIC_CUDA_CHECK(cudaGetLastError());
    SumChunks(part_gamma, chunks, cols, dgamma, s);
    SumChunks(part_beta, chunks, cols, dbeta, s);
  }
  LnBackwardRowsKernel<T, A>
      <<<RowGrid(rows), kThreads, 0, s>>>(rows, cols, d, threshold, scale, dy, x, gamma, beta, mean, rstd, dsum, dx);
  CIUIC_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void LayerNormForward(DType t, size_t rows, size_t cols, const void* x, const float* gamma, const float* beta,
                      float eps, void* y, float* mean, float* rstd, void* stream) {
  CheckShape(rows, cols);
  ByType(t, [&](auto tag) {
    using T = decltype(tag);
    LnForward<T, Act::kNone>(rows, cols, static_cast<const T*>(x), nullptr, nullptr, gamma, beta, eps, {},
                             static_cast<T*>(y), mean, rstd, static_cast<cudaStream_t>(stream));
  });
}

void LayerNormBackward(DType t, size_t rows, size_t cols, const void* dy, const void* x, const float* gamma,
                       const float* mean, const float* rstd, void* dx, float* dgamma, float* dbeta, float* workspace,
                       void* stream) {
  CheckShape(rows, cols);
  ByType(t, [&](auto tag) {
    using T = decltype(tag);
    LnBackward<T, Act::kNone>(rows, cols, {}, static_cast<const T*>(dy), static_cast<const T*>(x), gamma, nullptr, mean,
                              rstd, nullptr, static_cast<T*>(dx), dgamma, dbeta, workspace,
                              static_cast<cudaStream_t>(stream));
  });
}

void BiasActForward(DType t, size_t rows, size_t cols, Activation act, const void* x, const float* bias, void* y,
                    void* stream) {
  CheckShape(rows, cols);
  auto s = static_cast<cudaStream_t>(stream);
  ByType(t, [&](auto tag) {
    using T = decltype(tag);
    ByAct(act, [&](auto a) {
      if (rows == 0 || cols == 0) return;
      BiasActForwardKernel<T, decltype(a)::value>
          <<<Grid2d(cols, rows), kThreads, 0, s>>>(rows, cols, static_cast<const T*>(x), bias, static_cast<T*>(y));
      CIUIC_CUDA_CHECK(cudaGetLastError());
    });
  });
}

void BiasActBackward(DType t, size_t rows, size_t cols, Activation act, const void* dy, const void* x,
                     const float* bias, void* dx, float* dbias, float* workspace, void* stream) {
  CheckShape(rows, cols);
  if (dbias && rows > 0 && !workspace) throw UsageError("bias backward: no workspace for dbias");
  auto s = static_cast<cudaStream_t>(stream);
  ByType(t, [&](auto tag) {
    using T = decltype(tag);
    ByAct(act, [&](auto a) {
      if (cols == 0) return;
      if (rows == 0) {
        if (dbias) CIUIC_CUDA_CHECK(cudaMemsetAsync(dbias, 0, cols * sizeof(float), s));
        return;
      }
      const size_t chunks = Chunks(rows);
      BiasActBackwardKernel<T, decltype(a)::value>
          <<<Grid2d(cols, chunks), kThreads, 0, s>>>(rows, cols, static_cast<const T*>(dy), static_cast<const T*>(x),
                                                     bias, static_cast<T*>(dx), dbias ? workspace : nullptr);
      CIUIC_CUDA_CHECK(cudaGetLastError());
      if (dbias) SumChunks(workspace, chunks, cols, dbias, s);
    });
  });
}

void Dropout(DType t, size_t n, const DropoutArgs& d, const void* x, void* y, void* stream) {
  ByType(t, [&](auto tag) {
    using T = decltype(tag);
    if (n == 0) return;
    DropoutKernel<T><<<GridFor((n + 3) / 4, kThreads), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
        n, d, tm::DropThreshold(d.p), tm::KeepScale(d.p), static_cast<const T*>(x), static_cast<T*>(y));
    CIUIC_CUDA_CHECK(cudaGetLastError());
  });
}

void AddTensors(DType t, size_t n, const void* a, const void* b, void* out, void* stream) {
  ByType(t, [&](auto tag) {
    using T = decltype(tag);
    if (n == 0) return;
    AddKernel<T><<<GridFor(n, kThreads), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
        n, static_cast<const T*>(a), static_cast<const T*>(b), static_cast<T*>(out));
    CIUIC_CUDA_CHECK(cudaGetLastError());
  });
}

void LnActDropoutForward(DType t, size_t rows, size_t cols, Activation act, const DropoutArgs& d, const void* x,
                         const float* gamma, const float* beta, float eps, void* y, float* mean, float* rstd,
                         void* stream) {
  CheckShape(rows, cols);
  ByType(t, [&](auto tag) {
    using T = decltype(tag);
    ByAct(act, [&](auto a) {
      LnForward<T, decltype(a)::value>(rows, cols, static_cast<const T*>(x), nullptr, nullptr, gamma, beta, eps, d,
                                       static_cast<T*>(y), mean, rstd, static_cast<cudaStream_t>(stream));
    });
  });
}

void LnActDropoutBackward(DType t, size_t rows, size_t cols, Activation act, const DropoutArgs& d, const void* dy,
                          const void* x, const float* gamma, const float* beta, const float* mean, const float* rstd,
                          void* dx, float* dgamma, float* dbeta, float* workspace, void* stream) {
  CheckShape(rows, cols);
  ByType(t, [&](auto tag) {
    using T = decltype(tag);
    ByAct(act, [&](auto a) {
      LnBackward<T, decltype(a)::value>(rows, cols, d, static_cast<const T*>(dy), static_cast<const T*>(x), gamma, beta,
                                        mean, rstd, nullptr, static_cast<T*>(dx), dgamma, dbeta, workspace,
                                        static_cast<cudaStream_t>(stream));
    });
  });
}

void AddLayerNormForward(DType t, size_t rows, size_t cols, const void* x, const void* residual, const float* gamma,
                         const float* beta, float eps, void* sum, void* y, float* mean, float* rstd, void* stream) {
  CheckShape(rows, cols);
  ByType(t, [&](auto tag) {
    using T = decltype(tag);
    LnForward<T, Act::kNone>(rows, cols, static_cast<const T*>(x), static_cast<const T*>(residual),
                             static_cast<T*>(sum), gamma, beta, eps, {}, static_cast<T*>(y), mean, rstd,
                             static_cast<cudaStream_t>(stream));
  });
}

void AddLayerNormBackward(DType t, size_t rows, size_t cols, const void* dy, const void* dsum, const void* sum,
                          const float* gamma, const float* mean, const float* rstd, void* dx, float* dgamma,
                          float* dbeta, float* workspace, void* stream) {
  CheckShape(rows, cols);
  ByType(t, [&](auto tag) {
    using T = decltype(tag);
    LnBackward<T, Act::kNone>(rows, cols, {}, static_cast<const T*>(dy), static_cast<const T*>(sum), gamma, nullptr,
                              mean, rstd, static_cast<const T*>(dsum), static_cast<T*>(dx), dgamma, dbeta, workspace,
                              static_cast<cudaStream_t>(stream));
  });
}

}  // namespace ciuic::cuda
