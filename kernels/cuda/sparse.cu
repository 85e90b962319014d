// CUDA top-k and randomk, bit-identical to kernels/cpu/sparse.cc. Exact top-k finds the k-th largest
// |e| with a 4-pass MSB radix select (8 bits per pass, state kept on the device: no host sync);
// sampled top-k runs the same select over a strided sample. Selection then keeps the CPU rule (all
// keys above the threshold, ties by lowest index, first k in index order) with per-chunk counts, one
// scan and a block-scan write pass, so the wire matches the oracle slot for slot. The two passes over
// the whole gradient load each chunk coalesced (a warp-striped load transposed through shared memory
// into 16 consecutive elements a thread) and keep it in registers; the residual goes back the same way.
#include <cuda_runtime.h>

#include <cstring>
#include <cub/block/block_load.cuh>
#include <cub/block/block_scan.cuh>
#include <cub/block/block_store.cuh>

#include "kernels/codec_kernels.h"
#include "kernels/cuda/launch.h"
#include "kernels/quant_math.h"

namespace ciuic::cuda {

namespace {

constexpr unsigned kItems = 16;               // elements per thread in the selection passes
constexpr size_t kChunk = kThreads * kItems;  // elements per chunk (one thread block)
constexpr uint32_t kAbsMask = 0x7fffffffu;

struct SelectState {
  uint32_t prefix, mask;
  uint64_t remaining;   // rank still to find inside `prefix` (becomes take_equal)
  uint64_t take_equal;  // elements equal to the threshold that may be taken
  uint64_t total;       // elements selected (before capping at k)
  uint32_t hist[256];
};

struct Workspace {
  SelectState* state;
  uint32_t* chunk_gt;
  uint32_t* chunk_eq;
  uint64_t* eq_before;
  uint64_t* slot_before;
  uint32_t* sample_keys;  // the sampled selection's keys (TopKSampleCount(n) of them)
};

Workspace Carve(void* ws, size_t n) {
  const size_t chunks = (n + kChunk - 1) / kChunk;
  auto* base = static_cast<uint8_t*>(ws);
  Workspace w;
  w.state = reinterpret_cast<SelectState*>(base);
  size_t off = (sizeof(SelectState) + 255) / 256 * 256;
  w.eq_before = reinterpret_cast<uint64_t*>(base + off);
  off += chunks * 8;
  w.slot_before = reinterpret_cast<uint64_t*>(base + off);
  off += chunks * 8;
  w.chunk_gt = reinterpret_cast<uint32_t*>(base + off);
  off += chunks * 4;
  w.chunk_eq = reinterpret_cast<uint32_t*>(base + off);
  off += chunks * 4;
  w.sample_keys = reinterpret_cast<uint32_t*>(base + off);
  return w;
}

__device__ __forceinline__ uint32_t KeyAt(const float* in, const float* residual, size_t i) {
  const float e = residual ? __fadd_rn(in[i], residual[i]) : in[i];
  return qm::Bits(e) & kAbsMask;
}

__global__ void InitState(SelectState* st, uint64_t rank) {
  st->prefix = 0;
  st->mask = 0;
  st->remaining = rank;
  st->take_equal = 0;
  st->total = 0;
  for (int d = threadIdx.x; d < 256; d += blockDim.x) st->hist[d] = 0;
}

// Histogram of digit `shift` over keys that match the prefix found so far. With `sample_n` > 0 the
// keys are the strided sample of `count` elements out of sample_n: the first pass gathers them into
// `keys` (one scattered read of each), the later passes read them there contiguously.
__global__ void HistogramPass(const float* in, const float* residual, size_t count, uint64_t sample_n, SelectState* st,
                              int shift, uint32_t* keys, bool keys_ready) {
  __shared__ uint32_t hist[256];
  for (int d = threadIdx.x; d < 256; d += blockDim.x) hist[d] = 0;
  __syncthreads();
  const uint32_t prefix = st->prefix, mask = st->mask;
  for (size_t j = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < count;
       j += static_cast<size_t>(gridDim.x) * blockDim.x) {
    uint32_t key;
    if (keys_ready) {
      key = keys[j];
    } else {
      const size_t i = sample_n ? qm::TopKSampleIndex(j, sample_n, count) : j;
      key = KeyAt(in, residual, i);
      if (keys) keys[j] = key;
    }
    if ((key & mask) == prefix) atomicAdd(&hist[(key >> shift) & 0xffu], 1u);
  }
  __syncthreads();
  for (int d = threadIdx.x; d < 256; d += blockDim.x)
    if (hist[d]) atomicAdd(&st->hist[d], hist[d]);
}

// One thread: picks the digit holding the remaining rank (largest digits first).
__global__ void PickDigit(SelectState* st, int shift) {
  uint64_t above = 0;
  for (int d = 255; d >= 0; --d) {
    const uint64_t h = st->hist[d];
    if (above + h >= st->remaining) {
      st->remaining -= above;
      st->prefix |= static_cast<uint32_t>(d) << shift;
      st->mask |= 0xffu << shift;
      break;
    }
    above += h;
  }
  for (int d = 0; d < 256; ++d) st->hist[d] = 0;
}

using ChunkLoad = cub::BlockLoad<float, kThreads, kItems, cub::BLOCK_LOAD_WARP_TRANSPOSE>;
using ChunkStore = cub::BlockStore<float, kThreads, kItems, cub::BLOCK_STORE_WARP_TRANSPOSE>;

// This block's chunk of in (+ residual) into e[], thread x holding elements x*kItems .. x*kItems+15
// of it; returns how many of the chunk's elements exist. Ends with the shared memory free again.
__device__ __forceinline__ int LoadChunk(const float* in, const float* residual, size_t n,
                                         typename ChunkLoad::TempStorage& tmp, float (&e)[kItems]) {
  const size_t first = static_cast<size_t>(blockIdx.x) * kChunk;
  const int valid = static_cast<int>(n - first < kChunk ? n - first : kChunk);
  ChunkLoad(tmp).Load(in + first, e, valid, 0.0f);
  if (residual) {
    float r[kItems];
    __syncthreads();
    ChunkLoad(tmp).Load(residual + first, r, valid, 0.0f);
#pragma unroll
    for (unsigned j = 0; j < kItems; ++j) e[j] = __fadd_rn(e[j], r[j]);
  }
  __syncthreads();
  return valid;
}

__global__ void CountChunks(const float* in, const float* residual, size_t n, const SelectState* st, uint32_t* chunk_gt,
                            uint32_t* chunk_eq, uint32_t* nonfinite) {
  using Reduce = cub::BlockScan<uint32_t, kThreads>;
  __shared__ union {
    typename ChunkLoad::TempStorage load;
    typename Reduce::TempStorage scan;
  } tmp;
  const uint32_t t = st->prefix;
  float e[kItems];
  const int valid = LoadChunk(in, residual, n, tmp.load, e);
  uint32_t gt = 0, eq = 0;
  bool bad = false;
#pragma unroll
  for (unsigned k = 0; k < kItems; ++k) {
    if (static_cast<int>(threadIdx.x * kItems + k) >= valid) break;
    const uint32_t key = qm::Bits(e[k]) & kAbsMask;
    gt += key > t;
    eq += key == t;
    bad |= key >= 0x7f800000u;
  }
  if (bad && nonfinite) atomicOr(nonfinite, 1u);
  uint32_t gt_total, eq_total, unused;
  Reduce(tmp.scan).ExclusiveSum(gt, unused, gt_total);
  __syncthreads();
  Reduce(tmp.scan).ExclusiveSum(eq, unused, eq_total);
  if (threadIdx.x == 0) {
    chunk_gt[blockIdx.x] = gt_total;
    chunk_eq[blockIdx.x] = eq_total;
  }
}

// One block: exclusive scans over chunks of the equal counts and of the selected counts.
__global__ void ScanChunks(size_t chunks, SelectState* st, const uint32_t* chunk_gt, const uint32_t* chunk_eq,
                           uint64_t* eq_before, uint64_t* slot_before) {
  using Scan = cub::BlockScan<uint64_t, kThreads>;
  __shared__ typename Scan::TempStorage tmp;
  __shared__ uint64_t carry_eq, carry_sel;
  if (threadIdx.x == 0) carry_eq = carry_sel = 0;
  __syncthreads();
  const uint64_t take = st->take_equal;
  for (size_t base = 0; base < chunks; base += kThreads) {
    const size_t c = base + threadIdx.x;
    const uint64_t eq = c < chunks ? chunk_eq[c] : 0;
    uint64_t eq_ex, eq_sum;
    Scan(tmp).ExclusiveSum(eq, eq_ex, eq_sum);
    __syncthreads();
    const uint64_t before = carry_eq + eq_ex;
    const uint64_t quota = before >= take ? 0 : (take - before < eq ? take - before : eq);
    const uint64_t sel = c < chunks ? chunk_gt[c] + quota : 0;
    uint64_t sel_ex, sel_sum;
    Scan(tmp).ExclusiveSum(sel, sel_ex, sel_sum);
    if (c < chunks) {
      eq_before[c] = before;
      slot_before[c] = carry_sel + sel_ex;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      carry_eq += eq_sum;
      carry_sel += sel_sum;
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) st->total = carry_sel;
}

__global__ void SetTakeEqual(SelectState* st, uint64_t take_all) {
  st->take_equal = take_all ? take_all : st->remaining;
}

// aligned: wire is 4-byte aligned, so a slot is one 4-byte store each (else bytes).
__global__ void WriteSelected(const float* in, float* residual, size_t n, size_t k, const SelectState* st,
                              const uint64_t* eq_before, const uint64_t* slot_before, uint8_t* wire, bool aligned) {
  using Scan = cub::BlockScan<uint64_t, kThreads>;
  __shared__ union {
    typename ChunkLoad::TempStorage load;
    typename ChunkStore::TempStorage store;
    typename Scan::TempStorage scan;
  } tmp;
  const uint32_t t = st->prefix;
  const uint64_t take = st->take_equal;
  float e[kItems];
  const int valid = LoadChunk(in, residual, n, tmp.load, e);
  const int mine = max(0, min(static_cast<int>(kItems), valid - static_cast<int>(threadIdx.x * kItems)));
  const size_t base = static_cast<size_t>(blockIdx.x) * kChunk + threadIdx.x * kItems;
  uint64_t eq = 0;
#pragma unroll
  for (unsigned j = 0; j < kItems; ++j) eq += static_cast<int>(j) < mine && (qm::Bits(e[j]) & kAbsMask) == t;
  uint64_t eq_ex, unused;
  Scan(tmp.scan).ExclusiveSum(eq, eq_ex, unused);
  __syncthreads();
  uint64_t eq_rank = eq_before[blockIdx.x] + eq_ex;
  uint64_t sel = 0;
  {
    uint64_t r = eq_rank;
#pragma unroll
    for (unsigned j = 0; j < kItems; ++j) {
      if (static_cast<int>(j) >= mine) break;
      const uint32_t key = qm::Bits(e[j]) & kAbsMask;
      if (key > t)
        ++sel;
      else if (key == t && r++ < take)
        ++sel;
    }
  }
  uint64_t sel_ex;
  Scan(tmp.scan).ExclusiveSum(sel, sel_ex, unused);
  __syncthreads();
  uint64_t slot = slot_before[blockIdx.x] + sel_ex;
  float kept[kItems];
#pragma unroll
  for (unsigned j = 0; j < kItems; ++j) {
    kept[j] = e[j];
    if (static_cast<int>(j) >= mine) continue;
    const size_t i = base + j;
    const uint32_t key = qm::Bits(e[j]) & kAbsMask;
    bool take_it = key > t;
    if (!take_it && key == t && eq_rank++ < take) take_it = true;
    if (take_it && slot < k) {
      const int32_t idx = static_cast<int32_t>(i);
      if (aligned) {
        reinterpret_cast<float*>(wire)[slot] = e[j];
        reinterpret_cast<int32_t*>(wire + k * 4)[slot] = idx;
      } else {
        memcpy(wire + slot * 4, &e[j], 4);
        memcpy(wire + k * 4 + slot * 4, &idx, 4);
      }
      kept[j] = 0.0f;
    }
    if (take_it) ++slot;
  }
  if (residual) ChunkStore(tmp.store).Store(residual + static_cast<size_t>(blockIdx.x) * kChunk, kept, valid);
}

__global__ void PadSlots(size_t k, const SelectState* st, uint8_t* wire) {
  const uint64_t total = st->total;
  for (size_t s = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; s < k;
       s += static_cast<size_t>(gridDim.x) * blockDim.x) {
    if (s < total) continue;
    const float zero = 0.0f;
    const int32_t none = -1;
    memcpy(wire + s * 4, &zero, 4);
    memcpy(wire + k * 4 + s * 4, &none, 4);
  }
}

__global__ void SparseScatter(const uint8_t* wire, size_t k, size_t n, float* out) {
  for (size_t s = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; s < k;
       s += static_cast<size_t>(gridDim.x) * blockDim.x) {
    int32_t i;
    float v;
    memcpy(&i, wire + k * 4 + s * 4, 4);
    memcpy(&v, wire + s * 4, 4);
    if (i >= 0 && static_cast<size_t>(i) < n) out[i] = __fadd_rn(out[i], v);  // indices are distinct
  }
}

__global__ void AddInto(float* residual, const float* in, size_t n) {
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    residual[i] = __fadd_rn(in[i], residual[i]);
}

__global__ void RandomKGather(QuantArgs a, const float* in, float* residual, size_t n, size_t k, uint8_t* wire,
                              uint32_t* nonfinite) {
  for (size_t j = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < k;
       j += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const uint64_t idx = qm::RandomKIndex(a.seed, a.step, j, n, k);
    const float e = residual ? residual[idx] : in[idx];  // residual already holds in + residual
    if ((qm::Bits(e) & kAbsMask) >= 0x7f800000u && nonfinite) atomicOr(nonfinite, 1u);
    memcpy(wire + j * 4, &e, 4);
    if (residual) residual[idx] = 0.0f;
  }
}

__global__ void RandomKScatter(QuantArgs a, const uint8_t* wire, size_t k, size_t n, float* out) {
  for (size_t j = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < k;
       j += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const uint64_t idx = qm::RandomKIndex(a.seed, a.step, j, n, k);
    float v;
    memcpy(&v, wire + j * 4, 4);
    out[idx] = __fadd_rn(out[idx], v);
  }
}

}  // namespace

void TopKEncode(const float* in, float* residual, size_t n, size_t k, bool sampled, uint8_t* wire, void* workspace,
                uint32_t* nonfinite, void* stream) {
  if (n == 0 || k == 0) return;
  k = k < n ? k : n;
  auto s = static_cast<cudaStream_t>(stream);
  const Workspace w = Carve(workspace, n);
  const size_t chunks = (n + kChunk - 1) / kChunk;
  const uint64_t sample = sampled ? qm::TopKSampleCount(n) : 0;
  const uint64_t rank = sampled ? qm::TopKSampleRank(sample, n, k) : k;
  const size_t select_over = sampled ? sample : n;
  InitState<<<1, 256, 0, s>>>(w.state, rank);
  for (int shift = 24; shift >= 0; shift -= 8) {
    HistogramPass<<<GridFor(select_over, kThreads), kThreads, 0, s>>>(in, residual, select_over, sampled ? n : 0,
                                                                      w.state, shift, sampled ? w.sample_keys : nullptr,
                                                                      sampled && shift < 24);
    PickDigit<<<1, 1, 0, s>>>(w.state, shift);
  }
  SetTakeEqual<<<1, 1, 0, s>>>(w.state, sampled ? n : 0);
  CountChunks<<<static_cast<unsigned>(chunks), kThreads, 0, s>>>(in, residual, n, w.state, w.chunk_gt, w.chunk_eq,
                                                                 nonfinite);
  ScanChunks<<<1, kThreads, 0, s>>>(chunks, w.state, w.chunk_gt, w.chunk_eq, w.eq_before, w.slot_before);
  const bool aligned = (reinterpret_cast<uintptr_t>(wire) & 3u) == 0;
  WriteSelected<<<static_cast<unsigned>(chunks), kThreads, 0, s>>>(in, residual, n, k, w.state, w.eq_before,
                                                                   w.slot_before, wire, aligned);
  PadSlots<<<GridFor(k, kThreads), kThreads, 0, s>>>(k, w.state, wire);
  CIUIC_CUDA_CHECK(cudaGetLastError());
}

void SparseDecode(const uint8_t* wire, size_t k, size_t n, float* out, bool accumulate, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  if (!accumulate) CIUIC_CUDA_CHECK(cudaMemsetAsync(out, 0, n * sizeof(float), s));
  if (k == 0) return;
  SparseScatter<<<GridFor(k, kThreads), kThreads, 0, s>>>(wire, k, n, out);
  CIUIC_CUDA_CHECK(cudaGetLastError());
}

void RandomKEncode(const QuantArgs& a, const float* in, float* residual, size_t n, size_t k, uint8_t* wire,
                   uint32_t* nonfinite, void* stream) {
  if (n == 0 || k == 0) return;
  auto s = static_cast<cudaStream_t>(stream);
  if (residual) AddInto<<<GridFor(n, kThreads), kThreads, 0, s>>>(residual, in, n);
  RandomKGather<<<GridFor(k, kThreads), kThreads, 0, s>>>(a, in, residual, n, k, wire, nonfinite);
  CIUIC_CUDA_CHECK(cudaGetLastError());
}

void RandomKDecode(const QuantArgs& a, const uint8_t* wire, size_t k, size_t n, float* out, bool accumulate,
                   void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  if (!accumulate) CIUIC_CUDA_CHECK(cudaMemsetAsync(out, 0, n * sizeof(float), s));
  if (k == 0) return;
  RandomKScatter<<<GridFor(k, kThreads), kThreads, 0, s>>>(a, wire, k, n, out);
  CIUIC_CUDA_CHECK(cudaGetLastError());
}

}  // namespace ciuic::cuda
