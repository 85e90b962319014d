// randomk (algorithm ring with codec randomk): the indices come from a seed every rank shares, so
// only the k values travel, through the uncompressed ring, and are scattered back. Error feedback in
// the codec state. Unlike topk, traffic stays O(k) at any P.
#include "collectives/algorithms/hops.h"
#include "core/timer.h"
#include "core/trace.h"

namespace ciuic {

void AllReduceEngine::Impl::RandomK(float* data, size_t n, CodecState* st) {
  const size_t k = codec.SparseK(n);
  float* values = Scratch<float>(2, k * 4 + 16);
  const double t0 = NowSeconds();
  {
    trace::Span span("encode", trace::Category::kCompute);
    span.With("bytes", static_cast<int64_t>(n * 4)).With("wire_bytes", static_cast<int64_t>(k * 4));
    codec.Encode(data, n, values, st, comm.Stream());
  }
  const uint64_t step = st ? st->step - 1 : 0;
  counters.encode_s += NowSeconds() - t0;
  Ring(comm, values, k);
  trace::Span span("decode", trace::Category::kCompute);
  span.With("bytes", static_cast<int64_t>(n * 4));
  codec.Decode(values, n, data, step, comm.Stream());
}

}  // namespace ciuic
