// sparse (topk): every rank encodes its top-k (values, indices), the wires are allgathered around the
// ring and summed in rank order, so all ranks end bit-identical. Codec topk only; error feedback in
// the codec state. Traffic grows as O(P*k): for small ratios on few ranks.
#include <vector>

#include "collectives/algorithms/hops.h"
#include "core/timer.h"
#include "core/trace.h"
#include "kernels/codec_kernels.h"

namespace ciuic {

void AllReduceEngine::Impl::Sparse(float* data, size_t n, CodecState* st) {
  const int p = comm.Size();
  const size_t wb = codec.WireBytes(n);
  uint8_t* wires = Scratch(2, wb * static_cast<size_t>(p) + 16);
  const double t0 = NowSeconds();
  {
    trace::Span span("encode", trace::Category::kCompute);
    span.With("bytes", static_cast<int64_t>(n * 4)).With("wire_bytes", static_cast<int64_t>(wb));
    codec.Encode(data, n, wires + wb * static_cast<size_t>(comm.Rank()), st, comm.Stream());
    counters.encode_s += NowSeconds() - t0;
  }
  std::vector<size_t> off(p), sz(p, wb);
  for (int i = 0; i < p; ++i) off[i] = wb * static_cast<size_t>(i);
  RingAllGatherBytes(comm, wires, off, sz, 0);
  const double t1 = NowSeconds();
  trace::Span span("decode", trace::Category::kCompute);
  span.With("bytes", static_cast<int64_t>(n * 4)).With("ranks", p);
  const size_t k = codec.SparseK(n);
  SparseDecode(wires, k, n, data, false, comm.Stream());
  for (int i = 1; i < p; ++i) SparseDecode(wires + off[i], k, n, data, true, comm.Stream());
  counters.encode_s += NowSeconds() - t1;
}

}  // namespace ciuic
