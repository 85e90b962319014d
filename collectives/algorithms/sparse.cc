// sparse (topk): every rank encodes its top-k (values, indices), the wires are allgathered around the
// ring and summed in rank order, so all ranks end bit-identical. Codec topk only; error feedback in
// the codec state. Traffic grows as O(P*k): for small ratios on few ranks. hier runs it as its
// inter-node step on each rank's chunk of the node's sum.
#include <vector>

#include "collectives/algorithms/hops.h"
#include "core/timer.h"
#include "core/trace.h"
#include "kernels/codec_kernels.h"

namespace ciuic {

void AllReduceEngine::Impl::Sparse(float* data, size_t n, CodecState* st) { SparseOn(comm, data, n, st, 0, n); }

void AllReduceEngine::Impl::SparseOn(Communicator& c, float* data, size_t n, CodecState* st, size_t residual_offset,
                                     size_t tensor_n) {
  const int p = c.Size();
  const size_t wb = codec.WireBytes(n);
  uint8_t* wires = Scratch(2, wb * static_cast<size_t>(p) + 16);
  uint8_t* mine = wires + wb * static_cast<size_t>(c.Rank());
  const size_t k = codec.SparseK(n);
  const double t0 = NowSeconds();
  {
    trace::Span span("encode", trace::Category::kCompute);
    span.With("bytes", static_cast<int64_t>(n * 4)).With("wire_bytes", static_cast<int64_t>(wb));
    if (tensor_n == n) {
      codec.Encode(data, n, mine, st, c.Stream());
    } else {
      // A slice of the tensor (hier's inter-node chunk): its error feedback is the same slice of the
      // tensor's residual, which the chunk's owner alone uses, call after call.
      CodecState local;
      CodecState& s = st ? *st : local;
      codec.Prepare(s, tensor_n, c.BufferKind());
      float* residual = st && CodecHasResidual(codec.spec()) ? s.residual.as<float>() + residual_offset : nullptr;
      TopKEncode(data, residual, n, k, codec.spec().select == TopKSelect::kSampled, mine, s.scratch.data(),
                 s.flag.as<uint32_t>(), c.Stream());
      codec.CheckFlag(s, c.Stream());
    }
    counters.encode_s += NowSeconds() - t0;
  }
  std::vector<size_t> off(p), sz(p, wb);
  for (int i = 0; i < p; ++i) off[i] = wb * static_cast<size_t>(i);
  RingAllGatherBytes(c, wires, off, sz, 0);
  const double t1 = NowSeconds();
  trace::Span span("decode", trace::Category::kCompute);
  span.With("bytes", static_cast<int64_t>(n * 4)).With("ranks", p);
  SparseDecode(wires, k, n, data, false, c.Stream());
  for (int i = 1; i < p; ++i) SparseDecode(wires + off[i], k, n, data, true, c.Stream());
  counters.encode_s += NowSeconds() - t1;
}

}  // namespace ciuic
