// The uncompressed ring over shared windows (collectives/shared_window.h): every rank's source and
// result lie in memory every rank maps, so the reduce-scatter reads the peers' chunks where they lie
// and the allgather writes the reduced chunk straight into every rank's result. Rank r owns chunk r:
// piece by piece it sums the chunk of every source in rank order and writes the sum into every
// result with streaming stores. Per element of the message a rank reads its share of each source and
// writes its share of each result: 2 passes over memory for the job, as a copy, where the ring over
// a transport makes 2.5 (the piece copied into a receive slot, then read beside the own source).
//
// Ordering: a rank enters only with its source final and its result free (the caller's contract for
// any collective), so the gather of buffer offsets that opens the call is also the barrier after
// which peers may touch them; only rank r reads or writes chunk r of any buffer (in place too), and a
// barrier closes the call once every peer has finished with this rank's buffers.
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

}  // namespace

bool AllReduceEngine::Impl::MappedRing(Communicator& c, const float* src, float* data, size_t n) {
  const int p = c.Size(), r = c.Rank();
  if (p < 2 || kind != MemoryKind::kHost) return false;
  // Where this rank's buffers lie: {window, source offset, result offset, the windows this rank still
  // holds (bit w)}; window -1: not in one it holds.
  std::vector<std::shared_ptr<const SharedWindow>> held(windows.size());
  int64_t mine[4] = {-1, 0, 0, 0};
  for (size_t w = 0; w < windows.size(); ++w) {
    held[w] = windows[w].lock();
    if (!held[w]) continue;
    mine[3] |= int64_t{1} << w;
    const int64_t s = held[w]->OffsetOf(src, n * sizeof(float));
    const int64_t d = held[w]->OffsetOf(data, n * sizeof(float));
    if (mine[0] < 0 && s >= 0 && d >= 0 && s % 4 == 0 && d % 4 == 0) {
      mine[0] = static_cast<int64_t>(w);
      mine[1] = s;
      mine[2] = d;
    }
  }
  std::vector<int64_t> all(4 * static_cast<size_t>(p));
  c.HostAllGather(mine, all.data(), sizeof mine);
  int64_t everywhere = ~int64_t{0};  // the windows every rank still holds
  for (int q = 0; q < p; ++q) everywhere &= all[4 * q + 3];
  // Every rank sees the same table, so every rank decides alike.
  for (int q = 0; q < p; ++q)
    if (all[4 * q] < 0 || !(everywhere >> all[4 * q] & 1)) return false;

  std::vector<const float*> sources(p);
  std::vector<float*> results(p);
  for (int q = 0; q < p; ++q) {
    char* base = held[all[4 * q]]->Of(q);
    sources[q] = reinterpret_cast<const float*>(base + all[4 * q + 1]);
    results[q] = reinterpret_cast<float*>(base + all[4 * q + 2]);
  }
  trace::Span span("mapped ring", trace::Category::kComm);
  span.With("bytes", static_cast<int64_t>(n * sizeof(float))).With("ranks", p);
  // Chunks on 64-byte boundaries: no cache line is written by two ranks.
  const hops::Range chunk = hops::ChunkOf(n, p, r, 16);
  const size_t piece = PieceBytes() / sizeof(float);
  float* slot = p > 2 ? Scratch<float>(20, piece * sizeof(float)) : nullptr;
  for (size_t o = chunk.begin; o < chunk.end; o += piece) {
    const size_t k = std::min(piece, chunk.end - o);
    if (p == 2) {
      // One sum (a + b is b + a in IEEE arithmetic, so both ranks' chunks agree bit for bit with a
      // rank-order sum), streamed into this rank's result, then copied into the peer's.
      cpu::AddToUncached(results[r] + o, sources[0] + o, sources[1] + o, k, nullptr);
      CopyUncached(results[1 - r] + o, results[r] + o, k);
    } else {
      // Rank order into a cache-resident slot (every source's piece is read before any result is
      // written: in place, a result is its rank's source), then out to every result.
      cpu::AddTo(slot, sources[0] + o, sources[1] + o, k, nullptr);
      for (int q = 2; q < p; ++q) cpu::AddInPlace(slot, sources[q] + o, k, nullptr);
      for (int q = 0; q < p; ++q) CopyUncached(results[q] + o, slot, k);
    }
  }
  c.Barrier();
  counters.mapped_calls++;
  return true;
}

}  // namespace ciuic
