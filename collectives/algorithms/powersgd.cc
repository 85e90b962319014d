// powersgd: rank-r low-rank approximation M ~ P Q^T. Allreduce P = M Q (uncompressed ring),
// orthonormalise, allreduce Q = M^T P, reconstruct; Q warm-starts the next step and the residual
// keeps what this rank's Q did not carry. Codec powersgd only, and it needs a codec state. For
// large layers over slow links, where (rows + cols) * r is far below rows * cols.
#include <optional>

#include "collectives/algorithms/hops.h"
#include "core/error.h"
#include "core/timer.h"
#include "core/trace.h"
#include "kernels/codec_kernels.h"

namespace ciuic {

void AllReduceEngine::Impl::PowerSgd(float* data, size_t n, CodecState* st) {
  if (!st) throw UsageError("powersgd keeps a warm-start Q and error feedback: it needs a codec state");
  codec.Prepare(*st, n, kind);
  const int rank = codec.spec().rank;
  const MatrixView v = PowerSgdView(n);
  float* m = st->scratch.as<float>();
  float* p = Scratch<float>(2, v.rows * rank * 4 + 16);
  float* q = Scratch<float>(3, v.cols * rank * 4 + 16);
  float* residual = codec.spec().error_feedback ? st->residual.as<float>() : nullptr;
  const double t0 = NowSeconds();
  std::optional<trace::Span> span(std::in_place, "encode", trace::Category::kCompute);
  span->With("bytes", static_cast<int64_t>(n * 4)).With("rank", rank);
  CopyBytesAsync(m, kind, data, kind, n * 4, comm.Stream());
  if (residual) AddInPlace(m, residual, n, comm.Stream());
  auto* flag = st->flag.as<uint32_t>();
  UnscaleCheckNorm(m, n, 1.0f, flag, nullptr, comm.Stream());
  codec.CheckFlag(*st, comm.Stream());
  PowerSgdMulQ(m, n, st->q.as<float>(), rank, p, comm.Stream());
  counters.encode_s += NowSeconds() - t0;
  span.reset();
  Ring(comm, p, v.rows * rank);
  const double t1 = NowSeconds();
  span.emplace("encode", trace::Category::kCompute);
  span->With("bytes", static_cast<int64_t>(n * 4)).With("rank", rank);
  PowerSgdOrthonormalize(p, v.rows, rank, comm.Stream());
  PowerSgdMulP(m, n, p, rank, q, comm.Stream());
  if (residual) {
    // residual = M - P·Q_localᵀ: exactly what this rank's Q adds to the aggregate.
    CopyBytesAsync(residual, kind, m, kind, n * 4, comm.Stream());
    ScaleInPlace(residual, n, -1.0f, comm.Stream());
    PowerSgdReconstruct(p, q, n, rank, residual, true, comm.Stream());
    ScaleInPlace(residual, n, -1.0f, comm.Stream());
  }
  counters.encode_s += NowSeconds() - t1;
  span.reset();
  Ring(comm, q, v.cols * rank);
  span.emplace("decode", trace::Category::kCompute);
  span->With("bytes", static_cast<int64_t>(n * 4)).With("rank", rank);
  PowerSgdReconstruct(p, q, n, rank, data, false, comm.Stream());
  CopyBytesAsync(st->q.data(), kind, q, kind, v.cols * rank * 4, comm.Stream());  // after Reconstruct read q
  ++st->step;
}

}  // namespace ciuic
