#include "kernels/codec.h"

#include <climits>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "core/error.h"

namespace ciuic {

namespace {

MemoryKind KindOf(const void* p) { return IsDevicePointer(p) ? MemoryKind::kDevice : MemoryKind::kHost; }

bool IsElementCodec(CodecKind k) {
  return k == CodecKind::kFp16 || k == CodecKind::kBf16 || CodecIsBlockScaled(k) || k == CodecKind::kSign1;
}

}  // namespace

Codec::Codec(const CodecSpec& spec) : spec_(spec) {
  if ((CodecIsBlockScaled(spec.kind) || spec.kind == CodecKind::kSign1) &&
      (spec.block < 32 || spec.block > 65536 || spec.block % 32 != 0))
    throw UsageError(fmt::format("--block {} must be a multiple of 32 in 32..65536", spec.block));
  if (!(spec.prescale > 0.0f) || !std::isfinite(spec.prescale))
    throw UsageError(fmt::format("--prescale {} must be a positive finite number", spec.prescale));
  if ((spec.kind == CodecKind::kTopK || spec.kind == CodecKind::kRandomK) && !(spec.ratio > 0 && spec.ratio <= 1))
    throw UsageError(fmt::format("codec ratio {} must be in (0, 1]", spec.ratio));
  if (spec.kind == CodecKind::kPowerSgd && (spec.rank < 1 || spec.rank > 256))
    throw UsageError(fmt::format("powersgd rank {} must be in 1..256", spec.rank));
}

QuantArgs Codec::Args(uint64_t step) const {
  QuantArgs a;
  a.kind = spec_.kind;
  a.block = spec_.block;
  a.stochastic = spec_.rounding == Rounding::kStochastic;
  a.seed = spec_.seed;
  a.step = step;
  a.prescale = spec_.prescale;
  return a;
}

namespace {

// top-k's wire carries int32 indices (kernels/codec_kernels.h): a tensor beyond 2^31-1 elements
// cannot be indexed and is refused instead of wrapping.
void CheckSparseIndexable(const CodecSpec& spec, size_t n) {
  if (spec.kind == CodecKind::kTopK && n > static_cast<size_t>(INT32_MAX))
    throw InputError(
        fmt::format("codec topk: a tensor of {} elements exceeds the 2^31-1 its int32 indices address; "
                    "split it into buckets below that",
                    n));
}

}  // namespace

size_t Codec::WireBytes(size_t n) const {
  CheckSparseIndexable(spec_, n);
  switch (spec_.kind) {
    case CodecKind::kNone:
      return n * 4;
    case CodecKind::kTopK:
      return SparseK(n) * 8;
    case CodecKind::kRandomK:
      return SparseK(n) * 4;
    case CodecKind::kPowerSgd: {
      const MatrixView v = PowerSgdView(n);
      return (v.rows + v.cols) * static_cast<size_t>(spec_.rank) * 4;
    }
    default:
      return QuantWireBytes(Args(0), n);
  }
}

bool Codec::Summable() const {
  return spec_.kind == CodecKind::kNone || spec_.kind == CodecKind::kFp16 || spec_.kind == CodecKind::kBf16 ||
         spec_.kind == CodecKind::kRandomK;
}

bool Codec::Stateful() const {
  return spec_.kind == CodecKind::kPowerSgd || spec_.kind == CodecKind::kRandomK || spec_.kind == CodecKind::kSign1 ||
         spec_.kind == CodecKind::kTopK || (spec_.error_feedback && spec_.kind != CodecKind::kNone) ||
         spec_.rounding == Rounding::kStochastic;
}

bool Codec::HasDecodeAddEncode() const { return IsElementCodec(spec_.kind); }

void Codec::Prepare(CodecState& st, size_t n, MemoryKind kind) const {
  CheckSparseIndexable(spec_, n);
  if (st.count != n && st.count != 0)
    throw InputError(fmt::format("codec state was made for {} elements, not {}", st.count, n));
  st.count = n;
  if (st.flag.bytes() == 0 || st.flag.kind() != kind) {
    st.flag = Buffer(sizeof(uint32_t), kind);
    SetBytes(st.flag.data(), kind, 0, sizeof(uint32_t));
  }
  if (CodecHasResidual(spec_) && (st.residual.bytes() == 0 || st.residual.kind() != kind)) {
    st.residual = Buffer(std::max<size_t>(n, 1) * sizeof(float), kind);
    SetBytes(st.residual.data(), kind, 0, n * sizeof(float));
  }
  if (spec_.kind == CodecKind::kPowerSgd) {
    const MatrixView v = PowerSgdView(n);
    if (st.q.bytes() == 0 || st.q.kind() != kind) {
      // Warm start from a seeded normal draw: every rank with the same seed starts from the same Q.
      std::vector<float> q0(std::max<size_t>(v.cols * spec_.rank, 1));
      std::mt19937_64 rng(spec_.seed);
      std::normal_distribution<float> normal(0.0f, 1.0f);
      for (float& x : q0) x = normal(rng);
      st.q = Buffer(q0.size() * sizeof(float), kind);
      CopyBytes(st.q.data(), kind, q0.data(), MemoryKind::kHost, q0.size() * sizeof(float));
    }
    if (st.scratch.bytes() < std::max<size_t>(n, 1) * sizeof(float) || st.scratch.kind() != kind)
      st.scratch = Buffer(std::max<size_t>(n, 1) * sizeof(float), kind);
  }
  if (spec_.kind == CodecKind::kTopK && kind == MemoryKind::kDevice &&
      (st.scratch.bytes() < TopKWorkspaceBytes(n) || st.scratch.kind() != kind))
    st.scratch = Buffer(TopKWorkspaceBytes(n), kind);
}

void Codec::CheckFlag(CodecState& st, void* stream) const {
  uint32_t flag = 0;
  CopyBytes(&flag, MemoryKind::kHost, st.flag.data(), st.flag.kind(), sizeof(flag), stream);  // after the encode
  if (flag == 0) return;
  SetBytes(st.flag.data(), st.flag.kind(), 0, sizeof(uint32_t), stream);
  throw InputError(fmt::format("codec {}: the gradient holds NaN or Inf; its blocks were sent as NaN", Name()));
}

void Codec::Encode(const float* in, size_t n, void* wire, CodecState* state, void* stream, bool check_finite) const {
  CodecState local;
  CodecState& st = state ? *state : local;  // without a state: no error feedback, step 0
  const MemoryKind kind = KindOf(in);
  Prepare(st, n, kind);
  if (n == 0) return;
  auto* w = static_cast<uint8_t*>(wire);
  auto* flag = st.flag.as<uint32_t>();
  float* residual = state && CodecHasResidual(spec_) ? st.residual.as<float>() : nullptr;
  const uint64_t step = st.step++;
  switch (spec_.kind) {
    case CodecKind::kNone:
      CopyBytesAsync(wire, kind, in, kind, n * 4, stream);
      return;
    case CodecKind::kTopK:
      TopKEncode(in, residual, n, SparseK(n), spec_.select == TopKSelect::kSampled, w, st.scratch.data(), flag, stream);
      break;
    case CodecKind::kRandomK:
      RandomKEncode(Args(step), in, residual, n, SparseK(n), w, flag, stream);
      break;
    case CodecKind::kPowerSgd: {
      const MatrixView v = PowerSgdView(n);
      auto* m = st.scratch.as<float>();
      CopyBytesAsync(m, kind, in, kind, n * 4, stream);
      if (residual) AddInPlace(m, residual, n, stream);  // M = in + residual
      auto* p = reinterpret_cast<float*>(w);
      auto* q = p + v.rows * spec_.rank;
      UnscaleCheckNorm(m, n, 1.0f, flag, nullptr, stream);  // × 1 is exact: only the NaN/Inf check
      PowerSgdMulQ(m, n, st.q.as<float>(), spec_.rank, p, stream);
      PowerSgdOrthonormalize(p, v.rows, spec_.rank, stream);
      PowerSgdMulP(m, n, p, spec_.rank, q, stream);
      CopyBytesAsync(st.q.data(), kind, q, kind, v.cols * spec_.rank * sizeof(float), stream);
      if (residual) {
        // residual = M - P·Qᵀ, computed as -((-M) + P·Qᵀ): negation is exact, so this is M - P·Qᵀ rounded once.
        CopyBytesAsync(residual, kind, m, kind, n * 4, stream);
        ScaleInPlace(residual, n, -1.0f, stream);
        PowerSgdReconstruct(p, q, n, spec_.rank, residual, true, stream);
        ScaleInPlace(residual, n, -1.0f, stream);
      }
      break;
    }
    default:
      QuantEncode(Args(step), in, residual, n, w, flag, stream);
      break;
  }
  if (check_finite) CheckFlag(st, stream);
}

void Codec::Decode(const void* wire, size_t n, float* out, uint64_t step, void* stream) const {
  const auto* w = static_cast<const uint8_t*>(wire);
  switch (spec_.kind) {
    case CodecKind::kNone:
      CopyBytesAsync(out, KindOf(out), wire, KindOf(out), n * 4, stream);
      return;
    case CodecKind::kTopK:
      return SparseDecode(w, SparseK(n), n, out, false, stream);
    case CodecKind::kRandomK:
      return RandomKDecode(Args(step), w, SparseK(n), n, out, false, stream);
    case CodecKind::kPowerSgd: {
      const MatrixView v = PowerSgdView(n);
      const auto* p = reinterpret_cast<const float*>(w);
      return PowerSgdReconstruct(p, p + v.rows * spec_.rank, n, spec_.rank, out, false, stream);
    }
    default:
      return QuantDecode(Args(0), w, n, out, false, stream);
  }
}

void Codec::DecodeAccumulate(const void* wire, size_t n, float* acc, uint64_t step, void* stream) const {
  const auto* w = static_cast<const uint8_t*>(wire);
  switch (spec_.kind) {
    case CodecKind::kNone:
      return AddInPlace(acc, static_cast<const float*>(wire), n, stream);
    case CodecKind::kTopK:
      return SparseDecode(w, SparseK(n), n, acc, true, stream);
    case CodecKind::kRandomK:
      return RandomKDecode(Args(step), w, SparseK(n), n, acc, true, stream);
    case CodecKind::kPowerSgd: {
      const MatrixView v = PowerSgdView(n);
      const auto* p = reinterpret_cast<const float*>(w);
      return PowerSgdReconstruct(p, p + v.rows * spec_.rank, n, spec_.rank, acc, true, stream);
    }
    default:
      return QuantDecode(Args(0), w, n, acc, true, stream);
  }
}

void Codec::DecodeAddEncode(const void* wire_in, const float* local, size_t n, void* wire_out, uint64_t step,
                            void* stream) const {
  if (!HasDecodeAddEncode()) throw UsageError(fmt::format("codec {} has no fused decode-add-encode", Name()));
  CodecState st;
  Prepare(st, n, KindOf(local));
  QuantDecodeAddEncode(Args(step), static_cast<const uint8_t*>(wire_in), local, n, static_cast<uint8_t*>(wire_out),
                       st.flag.as<uint32_t>(), stream);
  CheckFlag(st, stream);
}

}  // namespace ciuic
