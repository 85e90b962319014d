// ring: reduce-scatter + allgather over any P. Uncompressed, or compressed with the fused per-hop
// decode-add-encode (the owner encodes its reduced chunk once, every rank decodes the same wires, so
// all ranks end bit-identical); chunk boundaries on the codec block. Codecs: none, fp16, bf16, the
// block-scaled ones, sign1 (randomk: randomk.cc). Bandwidth-optimal, P-1 latency steps each way: the
// default for dense gradients and the inner step of hier, randomk and powersgd.
#include <algorithm>
#include <vector>

#include "collectives/algorithms/hops.h"
#include "core/timer.h"
#include "core/trace.h"
#include "kernels/codec_kernels.h"

namespace ciuic {

using hops::ChunkOf;
using hops::Range;

void AllReduceEngine::Impl::Ring(Communicator& c, const float* src, float* data, size_t n) {
  RingReduceScatter(c, src, data, n, 1);
  RingAllGather(c, data, n, 1);
}

void AllReduceEngine::Impl::CompressedRing(Communicator& c, float* data, size_t n, CodecState* st, bool pre_quantise) {
  if (pre_quantise) QuantiseContribution(data, n, st);
  const int p = c.Size(), r = c.Rank();
  if (p == 1) return;
  const size_t align =
      CodecIsBlockScaled(codec.spec().kind) || codec.spec().kind == CodecKind::kSign1 ? codec.spec().block : 1;
  std::vector<size_t> off(p), sz(p);
  size_t total = 0, max_wire = 0;
  for (int i = 0; i < p; ++i) {
    const Range ch = ChunkOf(n, p, i, align);
    off[i] = total;
    sz[i] = codec.WireBytes(ch.size());
    total += sz[i];
    max_wire = std::max(max_wire, sz[i]);
  }
  uint8_t* wires = Scratch(2, total + 16);  // the allgathered wires, chunk by chunk
  uint8_t* send = Scratch(3, max_wire + 16);
  uint8_t* recv = Scratch(4, max_wire + 16);
  const QuantArgs base = codec.Args(0);
  const uint64_t step = hop_step++;
  QuantArgs a = base;
  a.step = step * 1024;
  a.stochastic = false;  // hops round to nearest: the rank's own rounding already happened
  const double t0 = NowSeconds();
  {
    const Range first = ChunkOf(n, p, r, align);
    trace::Span span("encode", trace::Category::kCompute);
    span.With("bytes", static_cast<int64_t>(first.size() * 4));
    QuantEncode(a, data + first.begin, nullptr, first.size(), send, nullptr, c.Stream());
  }
  counters.encode_s += NowSeconds() - t0;
  {
    trace::Span phase("reduce-scatter", trace::Category::kPhase);
    phase.With("bytes", static_cast<int64_t>(n * 4)).With("ranks", p);
    for (int s = 0; s < p - 1; ++s) {
      const int sc = (r - s + p) % p, rcn = (r - s - 1 + 2 * p) % p;
      const Range rc = ChunkOf(n, p, rcn, align);
      Exchange(c, send, sz[sc], (r + 1) % p, recv, sz[rcn], (r - 1 + p) % p, nullptr);
      const double t1 = NowSeconds();
      uint8_t* out = s == p - 2 ? wires + off[rcn] : send;
      trace::Span span("decode-add-encode", trace::Category::kCompute);
      span.With("bytes", static_cast<int64_t>(rc.size() * 4));
      QuantDecodeAddEncode(a, recv, data + rc.begin, rc.size(), out, nullptr, c.Stream());
      counters.encode_s += NowSeconds() - t1;
    }
  }
  RingAllGatherBytes(c, wires, off, sz, 1);
  const double t2 = NowSeconds();
  trace::Span span("decode", trace::Category::kCompute);
  span.With("bytes", static_cast<int64_t>(n * 4));
  for (int i = 0; i < p; ++i) {
    const Range ch = ChunkOf(n, p, i, align);
    QuantDecode(a, wires + off[i], ch.size(), data + ch.begin, false, c.Stream());
  }
  counters.encode_s += NowSeconds() - t2;
}

}  // namespace ciuic
