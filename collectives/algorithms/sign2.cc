// sign2: two-phase sign1. Phase 1 sends chunk i's sign wire to rank i (all-to-all of point-to-point
// pairs); that chunk's server sums the P wires, adds its own residual and re-encodes; phase 2
// allgathers the server wires, which every rank decodes. Codec sign1 only, and it needs a codec
// state (worker and server error feedback). ~1 bit per element each way: for slow links.
#include <algorithm>
#include <vector>

#include "collectives/algorithms/hops.h"
#include "core/error.h"
#include "core/timer.h"
#include "core/trace.h"
#include "kernels/codec_kernels.h"

namespace ciuic {

using hops::ChunkOf;
using hops::Range;

void AllReduceEngine::Impl::TwoPhaseSign(float* data, size_t n, CodecState* st) {
  const int p = comm.Size(), r = comm.Rank();
  const uint32_t block = codec.spec().block;
  if (!st) throw UsageError("sign2 keeps worker and server error feedback: it needs a codec state");
  codec.Prepare(*st, n, kind);
  if (st->residual.bytes() == 0) {
    st->residual = Buffer(std::max<size_t>(n, 1) * 4, kind);
    SetBytesAsync(st->residual.data(), kind, 0, n * 4, comm.Stream());
  }
  std::vector<size_t> off(p), sz(p);
  size_t total = 0;
  for (int i = 0; i < p; ++i) {
    off[i] = total;
    sz[i] = QuantWireBytes(codec.Args(0), ChunkOf(n, p, i, block).size());
    total += sz[i];
  }
  const Range mine = ChunkOf(n, p, r, block);
  if (st->server_residual.bytes() == 0) {
    st->server_residual = Buffer(std::max<size_t>(mine.size(), 1) * 4, kind);
    SetBytesAsync(st->server_residual.data(), kind, 0, mine.size() * 4, comm.Stream());
  }
  uint8_t* worker = Scratch(2, total + 16);
  uint8_t* gathered = Scratch(3, sz[r] * static_cast<size_t>(p) + 16);
  uint8_t* server = Scratch(4, total + 16);
  const QuantArgs a = codec.Args(st->step++);
  auto* flag = st->flag.as<uint32_t>();
  const double t0 = NowSeconds();
  {
    trace::Span span("encode", trace::Category::kCompute);
    span.With("bytes", static_cast<int64_t>(n * 4)).With("wire_bytes", static_cast<int64_t>(total));
    for (int i = 0; i < p; ++i) {
      const Range ch = ChunkOf(n, p, i, block);
      QuantEncode(a, data + ch.begin, st->residual.as<float>() + ch.begin, ch.size(), worker + off[i], flag,
                  comm.Stream());
    }
    codec.CheckFlag(*st, comm.Stream());
  }
  counters.encode_s += NowSeconds() - t0;
  // Phase 1: chunk i's wire to rank i (all-to-all of point-to-point pairs, ring order).
  CopyBytesAsync(gathered + sz[r] * static_cast<size_t>(r), kind, worker + off[r], kind, sz[r], comm.Stream());
  {
    trace::Span phase("alltoall", trace::Category::kPhase);
    phase.With("ranks", p);
    for (int s = 1; s < p; ++s) {
      const int to = (r + s) % p, from = (r - s + p) % p;
      Exchange(comm, worker + off[to], sz[to], to, gathered + sz[r] * static_cast<size_t>(from), sz[r], from, nullptr);
    }
  }
  // Server: sum the P wires of its chunk in rank order, add its residual, re-encode.
  float* sum = Scratch<float>(5, mine.size() * 4 + 16);
  const double t1 = NowSeconds();
  {
    trace::Span span("decode", trace::Category::kCompute);
    span.With("bytes", static_cast<int64_t>(mine.size() * 4)).With("ranks", p);
    QuantDecode(a, gathered, mine.size(), sum, false, comm.Stream());
    for (int i = 1; i < p; ++i)
      QuantDecode(a, gathered + sz[r] * static_cast<size_t>(i), mine.size(), sum, true, comm.Stream());
  }
  {
    trace::Span span("encode", trace::Category::kCompute);
    span.With("bytes", static_cast<int64_t>(mine.size() * 4));
    QuantEncode(a, sum, st->server_residual.as<float>(), mine.size(), server + off[r], flag, comm.Stream());
  }
  counters.encode_s += NowSeconds() - t1;
  // Phase 2: allgather the server wires; everyone decodes the same bytes.
  RingAllGatherBytes(comm, server, off, sz, 0);
  trace::Span span("decode", trace::Category::kCompute);
  span.With("bytes", static_cast<int64_t>(n * 4));
  for (int i = 0; i < p; ++i) {
    const Range ch = ChunkOf(n, p, i, block);
    QuantDecode(a, server + off[i], ch.size(), data + ch.begin, false, comm.Stream());
  }
}

}  // namespace ciuic
