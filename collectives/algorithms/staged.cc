// The uncompressed ring on one host, for calls up to AlgoConfig::staged_bytes: the sources go
// through a shared window of the engine's own (collectives/shared_window.h) instead of the
// transport. Each rank copies its source into its slot of the window; after a barrier rank r sums
// chunk r of every slot in rank order into its result and back into its own slot; after a second
// barrier it copies every other chunk q from rank q's slot into its result. Two barriers and no
// message per piece, where the ring over a transport makes 2(P-1) hops of P pieces each: on the
// project's VM (2 ranks) the transport's per-message cost, not memory, is what small calls pay.
// Passes over memory per element: 5 on 2 ranks (copy in 2, sum 1 + 0.5 + 0.5, copy out 1 + ...),
// more than the ring's 2.5, which is why it stops at staged_bytes.
//
// Ordering: the window holds two slots per rank, used by alternate calls. A rank writes slot s of
// call k + 2 only after passing the first barrier of call k + 1, which every rank reaches only once
// it has finished reading call k's slots; within a call only rank r writes chunk r of its own slot
// (after it has read it), and every read of a peer's chunk follows the barrier after its writing.
//
// The window is made on the first call that needs it (collective: every rank takes this path for
// the same call, the table and the size being the same on every rank). Where it cannot be made
// (ranks on several hosts, a PID namespace per rank, no memfd) every rank knows it alike from the
// window's own gathers and falls back to the ring over the transport for good; a failure of the
// transport itself still ends the call.
#include <cstring>

#include "collectives/algorithms/hops.h"
#include "collectives/shared_window.h"
#include "core/trace.h"
#include "kernels/codec_kernels.h"

namespace ciuic {

bool AllReduceEngine::Impl::StagedRing(Communicator& c, const float* src, float* data, size_t n) {
  const int p = c.Size(), r = c.Rank();
  const size_t bytes = n * sizeof(float);
  if (p < 2 || kind != MemoryKind::kHost || c.Device() != DeviceKind::kCpu || bytes > cfg.staged_bytes ||
      staging_failed)
    return false;
  if (!staging) {
    // Two slots per rank, each on a 64-byte boundary.
    const size_t slot = (cfg.staged_bytes + 63) / 64 * 64;
    // Null alike on every rank where the window cannot be made; a dead peer ends the call.
    staging = SharedWindow::TryCreate(c, 2 * slot, nullptr);
    if (!staging) {
      staging_failed = true;
      return false;
    }
    staging_slot = slot;
  }
  trace::Span span("staged ring", trace::Category::kComm);
  span.With("bytes", static_cast<int64_t>(bytes)).With("ranks", p);
  const size_t at = staging_parity * staging_slot;
  staging_parity ^= 1;
  auto slot_of = [&](int q) { return reinterpret_cast<float*>(staging->Of(q) + at); };
  float* const own = slot_of(r);
  std::memcpy(own, src, bytes);
  c.Barrier();
  const hops::Range chunk = hops::ChunkOf(n, p, r, 16);
  if (chunk.size() > 0) {
    trace::Span reduce("reduce", trace::Category::kCompute);
    reduce.With("bytes", static_cast<int64_t>(chunk.size() * sizeof(float)));
    const size_t b = chunk.begin, k = chunk.size();
    cpu::AddTo(data + b, slot_of(0) + b, slot_of(1) + b, k, nullptr);
    for (int q = 2; q < p; ++q) cpu::AddInPlace(data + b, slot_of(q) + b, k, nullptr);
    std::memcpy(own + b, data + b, k * sizeof(float));
  }
  c.Barrier();
  for (int q = 0; q < p; ++q) {
    if (q == r) continue;
    const hops::Range theirs = hops::ChunkOf(n, p, q, 16);
    if (theirs.size() > 0) std::memcpy(data + theirs.begin, slot_of(q) + theirs.begin, theirs.size() * sizeof(float));
  }
  counters.staged_calls++;
  return true;
}

}  // namespace ciuic
