// native: the transport's own allreduce (NCCL's, MPI's), uncompressed, in `precision`: fp32, or a
// 16-bit reduction (bf16/fp16: cast with 1/P pre-scaling so sums cannot overflow, the 16-bit sum,
// cast back, as PyTorch's fp16/bf16 compress hooks and DeepSpeed's communication_data_type do).
// Codec none only. The baseline, and the choice where the library beats our point-to-point rings.
#include "collectives/algorithms/hops.h"
#include "core/timer.h"
#include "core/trace.h"
#include "kernels/codec_kernels.h"

namespace ciuic {

bool AllReduceEngine::Impl::Native(const float* src, float* data, size_t n, bool average) {
  const int p = comm.Size();
  if (cfg.precision == DType::kFloat32) {
    // Untimed here: the engine counts the whole call as communication (one clock read fewer per call).
    trace::Span span("native allreduce", trace::Category::kComm);
    span.With("bytes", static_cast<int64_t>(n * 4));
    comm.AllReduce(src, data, n, DType::kFloat32, average ? ReduceOp::kAvg : ReduceOp::kSum);
    counters.wire_bytes += 2.0 * (p - 1) / p * static_cast<double>(n) * 4;
    return true;
  }
  // Cast with 1/P pre-scaling (a 16-bit sum of P values cannot overflow where their mean does not),
  // sum in 16 bits, cast back: ÷(1/P) restores a sum, prescale 1 leaves the mean.
  QuantArgs enc;
  enc.kind = cfg.precision == DType::kFloat16 ? CodecKind::kFp16 : CodecKind::kBf16;
  enc.prescale = 1.0f / static_cast<float>(p);
  auto* wire = Scratch(0, n * 2);
  double t0 = NowSeconds();
  {
    trace::Span span("encode", trace::Category::kCompute);
    span.With("bytes", static_cast<int64_t>(n * 4));
    QuantEncode(enc, data, nullptr, n, wire, nullptr, comm.Stream());
  }
  double t1 = NowSeconds();
  counters.encode_s += t1 - t0;
  {
    trace::Span span("native allreduce", trace::Category::kComm);
    span.With("bytes", static_cast<int64_t>(n * 2));
    comm.AllReduce(wire, wire, n, cfg.precision, ReduceOp::kSum);
  }
  t0 = NowSeconds();
  trace::Span span("decode", trace::Category::kCompute);
  span.With("bytes", static_cast<int64_t>(n * 4));
  counters.comm_s += t0 - t1;
  counters.wire_bytes += 2.0 * (p - 1) / p * static_cast<double>(n) * 2;
  QuantArgs dec = enc;
  if (average) dec.prescale = 1.0f;
  QuantDecode(dec, wire, n, data, false, comm.Stream());
  counters.encode_s += NowSeconds() - t0;
  return true;
}

}  // namespace ciuic
