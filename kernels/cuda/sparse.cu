// CUDA top-k and randomk, bit-identical to kernels/cpu/sparse.cc. Exact top-k finds the k-th largest
// |e| with a 4-pass MSB radix select (8 bits per pass, state kept on the device: no host sync; the
// last block of each pass picks the digit); sampled top-k runs the same select over a strided sample.
// Selection then keeps the CPU rule (all keys above the threshold, ties by lowest index, first k in
// index order) in one pass over the gradient: each tile counts its keys above and equal to the
// threshold, learns the counts of every earlier tile by a decoupled look-back, and writes its slots,
// so the wire matches the oracle slot for slot. The pass loads each tile coalesced (a warp-striped
// load transposed through shared memory into 16 consecutive elements a thread) and keeps it in
// registers; the residual goes back the same way.
#include <cuda_runtime.h>

#include <cstring>
#include <cub/block/block_load.cuh>
#include <cub/block/block_scan.cuh>
#include <cub/block/block_store.cuh>
#include <cuda/atomic>

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
  uint64_t remaining;    // rank still to find inside `prefix` (becomes take_equal)
  uint64_t take_equal;   // elements equal to the threshold that may be taken
  uint64_t total;        // elements selected (before capping at k)
  uint32_t blocks_done;  // blocks of the running histogram pass that have added theirs
  uint32_t next_tile;    // the selection pass's tile tickets
  uint32_t hist[256];
};

// A tile's word in the selection pass's look-back: bits 62-63 what it holds (nothing yet, the tile's
// own counts, or the counts of every tile up to and including it), bits 31-61 keys above the
// threshold, bits 0-30 keys equal to it. n < 2^31 (indices are int32), so packed words add as pairs.
using TileWord = unsigned long long;
constexpr TileWord kTileEmpty = 0, kTileOwn = 1ull << 62, kTileUpTo = 2ull << 62, kTileFlags = 3ull << 62;
constexpr TileWord kCount31 = (1ull << 31) - 1;

struct Workspace {
  SelectState* state;
  TileWord* tiles;
  uint32_t* sample_keys;  // the sampled selection's keys (TopKSampleCount(n) of them)
};

// TopKWorkspaceBytes(n) leaves 24 bytes a tile; the look-back uses 8.
Workspace Carve(void* ws, size_t n) {
  const size_t chunks = (n + kChunk - 1) / kChunk;
  auto* base = static_cast<uint8_t*>(ws);
  Workspace w;
  w.state = reinterpret_cast<SelectState*>(base);
  size_t off = (sizeof(SelectState) + 255) / 256 * 256;
  w.tiles = reinterpret_cast<TileWord*>(base + off);
  off += chunks * 24;
  w.sample_keys = reinterpret_cast<uint32_t*>(base + off);
  return w;
}

__device__ __forceinline__ uint32_t KeyAt(const float* in, const float* residual, size_t i) {
  const float e = residual ? __fadd_rn(in[i], residual[i]) : in[i];
  return qm::Bits(e) & kAbsMask;
}

// Block 0 resets the select state; every block clears its share of the tile words.
__global__ void InitState(SelectState* st, uint64_t rank, TileWord* tiles, size_t n_tiles) {
  if (blockIdx.x == 0) {
    if (threadIdx.x == 0) {
      st->prefix = 0;
      st->mask = 0;
      st->remaining = rank;
      st->take_equal = 0;
      st->total = 0;
      st->blocks_done = 0;
      st->next_tile = 0;
    }
    for (int d = threadIdx.x; d < 256; d += blockDim.x) st->hist[d] = 0;
  }
  for (size_t t = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < n_tiles;
       t += static_cast<size_t>(gridDim.x) * blockDim.x)
    tiles[t] = kTileEmpty;
}

// Histogram of digit `shift` over keys that match the prefix found so far. With `sample_n` > 0 the
// keys are the strided sample of `count` elements out of sample_n: the first pass gathers them into
// `keys` (one scattered read of each), the later passes read them there contiguously. A warp adds each
// digit it holds once (gradients put most keys of a pass in a few digits). The last block to finish
// picks the digit holding the remaining rank, largest digits first; after the last pass (shift 0) it
// also fixes how many keys equal to the threshold are taken: `take_all` (sampled), else the rank left.
__global__ void HistogramPass(const float* in, const float* residual, size_t count, uint64_t sample_n, SelectState* st,
                              int shift, uint32_t* keys, bool keys_ready, uint64_t take_all) {
  using Scan = cub::BlockScan<uint32_t, kThreads>;
  __shared__ uint32_t hist[256];
  __shared__ typename Scan::TempStorage scan;
  __shared__ bool last;
  for (int d = threadIdx.x; d < 256; d += blockDim.x) hist[d] = 0;
  __syncthreads();
  const uint32_t prefix = st->prefix, mask = st->mask;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  // `base` is the same for the whole block, so every lane of a warp runs each round.
  for (size_t base = static_cast<size_t>(blockIdx.x) * blockDim.x; base < count; base += stride) {
    const size_t j = base + threadIdx.x;
    uint32_t key = 0;
    bool hit = false;
    if (j < count) {
      if (keys_ready) {
        key = keys[j];
      } else {
        const size_t i = sample_n ? qm::TopKSampleIndex(j, sample_n, count) : j;
        key = KeyAt(in, residual, i);
        if (keys) keys[j] = key;
      }
      hit = (key & mask) == prefix;
    }
    const uint32_t digit = (key >> shift) & 0xffu;
    const unsigned hits = __ballot_sync(0xffffffffu, hit);
    if (hit) {
      const unsigned same = __match_any_sync(hits, digit);
      if ((threadIdx.x & 31u) == static_cast<unsigned>(__ffs(same) - 1)) atomicAdd(&hist[digit], __popc(same));
    }
  }
  __syncthreads();
  for (int d = threadIdx.x; d < 256; d += blockDim.x)
    if (hist[d]) atomicAdd(&st->hist[d], hist[d]);
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(&st->blocks_done, 1u) == gridDim.x - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();
  // Thread x looks at digit 255 - x: the inclusive scan counts the keys at that digit and above.
  const unsigned x = threadIdx.x;
  const int d = 255 - static_cast<int>(x);
  const uint32_t h = x < 256 ? __ldcg(&st->hist[d]) : 0u;
  uint32_t upto;
  Scan(scan).InclusiveSum(h, upto);
  const uint64_t remaining = st->remaining;
  const uint64_t above = upto - h;
  __syncthreads();
  if (x < 256 && above < remaining && remaining <= upto) {
    st->remaining = remaining - above;
    st->prefix |= static_cast<uint32_t>(d) << shift;
    st->mask |= 0xffu << shift;
    if (shift == 0) st->take_equal = take_all ? take_all : remaining - above;
  }
  if (x < 256) st->hist[d] = 0;
  if (x == 0) st->blocks_done = 0;
}

using ChunkLoad = cub::BlockLoad<float, kThreads, kItems, cub::BLOCK_LOAD_WARP_TRANSPOSE>;
using ChunkStore = cub::BlockStore<float, kThreads, kItems, cub::BLOCK_STORE_WARP_TRANSPOSE>;

// Tile `tile` of in (+ residual) into e[], thread x holding elements x*kItems .. x*kItems+15 of it;
// returns how many of the tile's elements exist. Ends with the shared memory free again.
__device__ __forceinline__ int LoadChunk(const float* in, const float* residual, size_t n, size_t tile,
                                         typename ChunkLoad::TempStorage& tmp, float (&e)[kItems]) {
  const size_t first = tile * kChunk;
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

__device__ __forceinline__ TileWord LoadTile(TileWord* w) {
  return ::cuda::atomic_ref<TileWord, ::cuda::thread_scope_device>(*w).load(::cuda::memory_order_relaxed);
}
__device__ __forceinline__ void StoreTile(TileWord* w, TileWord v) {
  ::cuda::atomic_ref<TileWord, ::cuda::thread_scope_device>(*w).store(v, ::cuda::memory_order_relaxed);
}

// Warp 0 of tile `tile`: publishes the tile's own counts, adds those of the tiles before it (back to
// the nearest that holds its running total; 32 tiles a round) and publishes the tile's running total.
// Returns the earlier tiles' counts on lane 0. Tiles are numbered in the order their blocks started,
// so every tile waited on has started and publishes its own counts without waiting.
__device__ TileWord LookBack(TileWord* tiles, size_t tile, TileWord own) {
  const unsigned lane = threadIdx.x & 31u;
  if (tile == 0) {
    if (lane == 0) StoreTile(&tiles[0], kTileUpTo | own);
    return 0;
  }
  if (lane == 0) StoreTile(&tiles[tile], kTileOwn | own);
  TileWord before = 0;
  for (int64_t end = static_cast<int64_t>(tile);; end -= 32) {
    const int64_t t = end - 1 - static_cast<int64_t>(lane);  // lane 0: the nearest earlier tile
    TileWord w = t >= 0 ? LoadTile(&tiles[t]) : kTileUpTo;   // before tile 0: a running total of zero
    // Wait only for the tiles up to the nearest one holding a running total (it may come nearer).
    unsigned upto, stop;
    for (;;) {
      upto = __ballot_sync(0xffffffffu, (w & kTileFlags) == kTileUpTo);
      stop = upto ? static_cast<unsigned>(__ffs(upto) - 1) : 31u;
      const unsigned needed = stop == 31u ? 0xffffffffu : (2u << stop) - 1u;  // lanes 0..stop
      if ((__ballot_sync(0xffffffffu, (w & kTileFlags) == kTileEmpty) & needed) == 0u) break;
      if ((w & kTileFlags) == kTileEmpty) w = LoadTile(&tiles[t]);
    }
    TileWord v = lane <= stop ? (w & ~kTileFlags) : 0;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    before += v;
    if (upto) break;
  }
  if (lane == 0) StoreTile(&tiles[tile], kTileUpTo | (before + own));
  return before;
}

// The selection in one pass: a block takes the next tile, counts its keys above and equal to the
// threshold, learns the earlier tiles' counts, and writes its selected elements to their slots (slot =
// selected before it; equal keys are taken while fewer than take_equal came before) and the residual.
// aligned: wire is 4-byte aligned, so a slot is one 4-byte store each (else bytes).
__global__ void __launch_bounds__(kThreads)
    SelectAndWrite(const float* in, float* residual, size_t n, size_t k, SelectState* st, TileWord* tiles,
                   uint8_t* wire, bool aligned, uint32_t* nonfinite) {
  using Scan = cub::BlockScan<uint32_t, kThreads>;
  __shared__ union {
    typename ChunkLoad::TempStorage load;
    typename ChunkStore::TempStorage store;
    typename Scan::TempStorage scan;
  } tmp;
  __shared__ uint32_t tile_ticket;
  __shared__ TileWord before_tile;
  if (threadIdx.x == 0) tile_ticket = atomicAdd(&st->next_tile, 1u);
  __syncthreads();
  const size_t tile = tile_ticket;
  const uint32_t t = st->prefix;
  const uint64_t take = st->take_equal;
  float e[kItems];
  const int valid = LoadChunk(in, residual, n, tile, tmp.load, e);
  const int mine = max(0, min(static_cast<int>(kItems), valid - static_cast<int>(threadIdx.x * kItems)));
  uint32_t gt = 0, eq = 0;
  bool bad = false;
#pragma unroll
  for (unsigned j = 0; j < kItems; ++j) {
    if (static_cast<int>(j) >= mine) break;
    const uint32_t key = qm::Bits(e[j]) & kAbsMask;
    gt += key > t;
    eq += key == t;
    bad |= key >= 0x7f800000u;
  }
  if (bad && nonfinite) atomicOr(nonfinite, 1u);
  // A tile holds at most 4096 keys: above-counts in the high 16 bits, equal-counts in the low.
  uint32_t ex, sum;
  Scan(tmp.scan).ExclusiveSum(gt << 16 | eq, ex, sum);
  if (threadIdx.x < 32) {
    const TileWord own = static_cast<TileWord>(sum >> 16) << 31 | (sum & 0xffffu);
    const TileWord before = LookBack(tiles, tile, own);
    if (threadIdx.x == 0) {
      before_tile = before;
      if (tile == (n - 1) / kChunk) {
        const TileWord all = before + own;
        const uint64_t all_eq = all & kCount31;
        st->total = (all >> 31 & kCount31) + (all_eq < take ? all_eq : take);
      }
    }
  }
  __syncthreads();
  const TileWord before = before_tile;
  uint64_t eq_rank = (before & kCount31) + (ex & 0xffffu);
  uint64_t slot = (before >> 31 & kCount31) + (ex >> 16) + (eq_rank < take ? eq_rank : take);
  const size_t base = tile * kChunk + threadIdx.x * kItems;
#pragma unroll
  for (unsigned j = 0; j < kItems; ++j) {
    if (static_cast<int>(j) >= mine) continue;
    const uint32_t key = qm::Bits(e[j]) & kAbsMask;
    bool take_it = key > t;
    if (!take_it && key == t && eq_rank++ < take) take_it = true;
    if (take_it && slot < k) {
      const int32_t idx = static_cast<int32_t>(base + j);
      if (aligned) {
        reinterpret_cast<float*>(wire)[slot] = e[j];
        reinterpret_cast<int32_t*>(wire + k * 4)[slot] = idx;
      } else {
        memcpy(wire + slot * 4, &e[j], 4);
        memcpy(wire + k * 4 + slot * 4, &idx, 4);
      }
      e[j] = 0.0f;
    }
    if (take_it) ++slot;
  }
  if (residual) ChunkStore(tmp.store).Store(residual + tile * kChunk, e, valid);
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
  InitState<<<GridFor(chunks, kThreads), kThreads, 0, s>>>(w.state, rank, w.tiles, chunks);
  for (int shift = 24; shift >= 0; shift -= 8) {
    HistogramPass<<<GridFor(select_over, kThreads), kThreads, 0, s>>>(in, residual, select_over, sampled ? n : 0,
                                                                      w.state, shift, sampled ? w.sample_keys : nullptr,
                                                                      sampled && shift < 24, sampled ? n : 0);
  }
  const bool aligned = (reinterpret_cast<uintptr_t>(wire) & 3u) == 0;
  SelectAndWrite<<<static_cast<unsigned>(chunks), kThreads, 0, s>>>(in, residual, n, k, w.state, w.tiles, wire, aligned,
                                                                    nonfinite);
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
