// The uncompressed ring over shared windows (collectives/shared_window.h): every rank's source and
// result lie in memory every rank maps, so the reduce-scatter reads the peers' chunks where they lie
// and the allgather writes the reduced chunk straight into every rank's result. Rank r owns chunk r:
// piece by piece it sums the chunk of every source in rank order and writes the sum into every
// result. Passes over memory per element (a read or write of the message = 1): from 3 ranks 2 (each
// source's chunk read once, each result's written once, the sum in a cache-resident slot); on 2 ranks
// 2.5 (the sum written into the own result, read back for the peer's: on the project's VM faster
// than streaming one slot into both, 12.5-15.1 against 11.7-12.2 GB/s at 256 MiB). The ring over a
// transport makes 2.5 too, but its pieces also pass through the transport (a kernel copy per piece
// into a receive slot, a message per piece).
//
// Stores (measured on the project's VM, 2 ranks, bench/results/2026-11-29-mapped-stores):
// - In place every result is a source this rank has just read, so its lines sit in this core's
//   caches: ordinary stores at every size (a streaming store to a cached line evicts it first):
//   2.2-3.0x faster than streaming ones at 1-4 MiB, 1.05-1.7x from 16 to 256 MiB, alike at 1 GiB.
// - Out of place, ordinary stores up to 256 KiB per call (the call's buffers then fit in the caches,
//   where the next reader finds them: 1.2-2.5x faster from 4 to 256 KiB), streaming ones above (they
//   leave the caches to the sources: at 1 MiB alike, from 2 MiB ordinary ones are slower).
//
// Ordering: a rank enters only with its source final and its result free (the caller's contract for
// any collective), so the gather of buffer offsets that opens the call is also the barrier after
// which peers may touch them; only rank r reads or writes chunk r of any buffer (in place too), and a
// barrier closes the call once every peer has finished with this rank's buffers. Streaming stores are
// fenced (sfence) before it; ordinary ones need no fence of their own: a barrier publishes what each
// rank wrote before it (MPI's and gloo's through their messages, the thread world's through its locks).
#include <cstring>
#include <vector>

#if defined(__SSE2__)
#include <immintrin.h>
#endif

#include "collectives/algorithms/hops.h"
#include "collectives/shared_window.h"
#include "core/trace.h"
#include "kernels/codec_kernels.h"

namespace ciuic {

namespace {

// out = in with streaming stores (the result goes to memory, not into this core's caches).
void CopyUncached(float* out, const float* in, size_t n) {
  size_t i = 0;
#if defined(__SSE2__)
  for (; i < n && (reinterpret_cast<uintptr_t>(out + i) & 15) != 0; ++i) out[i] = in[i];
  for (; i + 16 <= n; i += 16) {
    _mm_stream_ps(out + i, _mm_loadu_ps(in + i));
    _mm_stream_ps(out + i + 4, _mm_loadu_ps(in + i + 4));
    _mm_stream_ps(out + i + 8, _mm_loadu_ps(in + i + 8));
    _mm_stream_ps(out + i + 12, _mm_loadu_ps(in + i + 12));
  }
  _mm_sfence();  // visible to the peers before the closing barrier
#endif
  if (i < n) std::memcpy(out + i, in + i, (n - i) * sizeof(float));
}

// out = in with ordinary stores.
void CopyCached(float* out, const float* in, size_t n) { std::memcpy(out, in, n * sizeof(float)); }

// Out of place, up to this many bytes per call the results are written with ordinary stores (see
// the top of this file).
constexpr size_t kCachedBytes = size_t{256} << 10;

}  // namespace

bool AllReduceEngine::Impl::MappedRing(Communicator& c, const float* src, float* data, size_t n) {
  const int p = c.Size(), r = c.Rank();
  if (p < 2 || kind != MemoryKind::kHost) return false;
  // The ring's scratch first: nothing between the gather below and the closing barrier may fail on
  // one rank alone.
  const size_t piece = PieceBytes() / sizeof(float);
  float* slot = p > 2 ? Scratch<float>(20, piece * sizeof(float)) : nullptr;
  // Where this rank's buffers lie: {window id, source offset, result offset}; id 0: not in one window.
  std::shared_ptr<const SharedWindow> window;
  uint64_t mine[3] = {0, 0, 0};
  for (const auto& weak : windows) {
    auto held = weak.lock();
    if (!held) continue;
    const int64_t s = held->OffsetOf(src, n * sizeof(float));
    const int64_t d = held->OffsetOf(data, n * sizeof(float));
    if (s >= 0 && d >= 0 && s % 4 == 0 && d % 4 == 0) {
      mine[0] = held->id();
      mine[1] = static_cast<uint64_t>(s);
      mine[2] = static_cast<uint64_t>(d);
      window = std::move(held);
      break;
    }
  }
  std::vector<uint64_t> all(3 * static_cast<size_t>(p));
  c.HostAllGather(mine, all.data(), sizeof mine);
  // Every rank sees the same table, so every rank decides alike: the ring over the window only when
  // every rank's buffers lie in the same one (each of them then still holds it).
  for (int q = 0; q < p; ++q)
    if (all[3 * q] == 0 || all[3 * q] != all[0]) return false;

  std::vector<const float*> sources(p);
  std::vector<float*> results(p);
  for (int q = 0; q < p; ++q) {
    char* base = window->Of(q);
    sources[q] = reinterpret_cast<const float*>(base + all[3 * q + 1]);
    results[q] = reinterpret_cast<float*>(base + all[3 * q + 2]);
  }
  trace::Span span("mapped ring", trace::Category::kComm);
  span.With("bytes", static_cast<int64_t>(n * sizeof(float))).With("ranks", p);
  // Chunks on 64-byte boundaries of the buffers: where those are 64-byte aligned (the bench's are),
  // no cache line is written by two ranks.
  const hops::Range chunk = hops::ChunkOf(n, p, r, 16);
  // Ordinary stores in place, and out of place up to kCachedBytes per call; streaming ones above
  // (see the top of this file). Each rank chooses for itself: the barrier publishes either.
  const bool cached = src == data || n * sizeof(float) <= kCachedBytes;
  auto* const add_to = cached ? &cpu::AddTo : &cpu::AddToUncached;
  auto* const copy = cached ? &CopyCached : &CopyUncached;
  for (size_t o = chunk.begin; o < chunk.end; o += piece) {
    const size_t k = std::min(piece, chunk.end - o);
    if (p == 2) {
      // One sum (a + b is b + a in IEEE arithmetic, so both ranks' chunks agree bit for bit with a
      // rank-order sum), written into this rank's result, then copied into the peer's.
      add_to(results[r] + o, sources[0] + o, sources[1] + o, k, nullptr);
      copy(results[1 - r] + o, results[r] + o, k);
    } else {
      // Rank order into a cache-resident slot (every source's piece is read before any result is
      // written: in place, a result is its rank's source), then out to every result.
      cpu::AddTo(slot, sources[0] + o, sources[1] + o, k, nullptr);
      for (int q = 2; q < p; ++q) cpu::AddInPlace(slot, sources[q] + o, k, nullptr);
      for (int q = 0; q < p; ++q) copy(results[q] + o, slot, k);
    }
  }
  c.Barrier();
  counters.mapped_calls++;
  return true;
}

}  // namespace ciuic
