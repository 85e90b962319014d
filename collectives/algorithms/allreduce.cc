// The allreduce engine: algorithm names and parsing, the codec each algorithm takes (checked at
// construction), and the dispatch of Run. The algorithms live one file each beside this one (ring,
// randomk, rd, hier, sparse, sign2, powersgd, native) over the hop helpers of hops.h / hops.cc.
#include "collectives/algorithms/allreduce.h"

#include "collectives/algorithms/hops.h"
#include "collectives/crossover.h"
#include "collectives/shared_window.h"
#include "core/error.h"
#include "core/timer.h"
#include "core/trace.h"
#include "kernels/codec_kernels.h"

namespace ciuic {

using hops::HasHop;

const char* AlgoName(AllReduceAlgo a) {
  switch (a) {
    case AllReduceAlgo::kAuto:
      return "auto";
    case AllReduceAlgo::kRing:
      return "ring";
    case AllReduceAlgo::kRecursiveDoubling:
      return "rd";
    case AllReduceAlgo::kHierarchical:
      return "hier";
    case AllReduceAlgo::kSparse:
      return "sparse";
    case AllReduceAlgo::kTwoPhaseSign:
      return "sign2";
    case AllReduceAlgo::kPowerSgd:
      return "powersgd";
    case AllReduceAlgo::kNative:
      return "native";
  }
  return "?";
}

AllReduceAlgo ParseAlgo(std::string_view text) {
  for (AllReduceAlgo a :
       {AllReduceAlgo::kAuto, AllReduceAlgo::kRing, AllReduceAlgo::kRecursiveDoubling, AllReduceAlgo::kHierarchical,
        AllReduceAlgo::kSparse, AllReduceAlgo::kTwoPhaseSign, AllReduceAlgo::kPowerSgd, AllReduceAlgo::kNative})
    if (text == AlgoName(a)) return a;
  throw UsageError(fmt::format("unknown algorithm '{}' (auto ring rd hier sparse sign2 powersgd native)", text));
}

DType ParsePrecision(std::string_view text) {
  if (text == "fp32") return DType::kFloat32;
  if (text == "bf16") return DType::kBFloat16;
  if (text == "fp16") return DType::kFloat16;
  throw UsageError(fmt::format("unknown reduction precision '{}' (fp32 bf16 fp16)", text));
}

AllReduceAlgo DefaultAlgo(CodecKind codec) {
  switch (codec) {
    case CodecKind::kTopK:
      return AllReduceAlgo::kSparse;
    case CodecKind::kSign1:
      return AllReduceAlgo::kTwoPhaseSign;
    case CodecKind::kPowerSgd:
      return AllReduceAlgo::kPowerSgd;
    default:
      return AllReduceAlgo::kRing;  // randomk runs its values through the ring
  }
}

AllReduceEngine::AllReduceEngine(Communicator& comm, const AlgoConfig& config)
    : comm_(comm), config_(config), algo_(config.algo), codec_(config.codec) {
  const CodecKind k = config.codec.kind;
  if (config.staged_bytes > kMaxStagedBytes)
    throw UsageError(
        fmt::format("staged bytes {} exceed the most a staged ring takes ({})", config.staged_bytes, kMaxStagedBytes));
  if (algo_ == AllReduceAlgo::kAuto && k == CodecKind::kNone && config.precision == DType::kFloat32) {
    crossover_ =
        config.crossover ? config.crossover : std::make_shared<const Crossover>(BuiltinCrossover(comm.BackendName()));
    for (const auto* bands : {&crossover_->bands, &crossover_->out_of_place})
      for (const auto& b : *bands)
        if (b.algo != AllReduceAlgo::kNative && b.algo != AllReduceAlgo::kRecursiveDoubling &&
            b.algo != AllReduceAlgo::kRing && b.algo != AllReduceAlgo::kHierarchical)
          throw UsageError(
              fmt::format("auto chooses among native, rd, ring, hier (the crossover names {})", AlgoName(b.algo)));
  } else if (algo_ == AllReduceAlgo::kAuto) {
    algo_ = k == CodecKind::kNone ? AllReduceAlgo::kNative : DefaultAlgo(k);
  }
  auto refuse = [&] {
    throw UsageError(fmt::format("algorithm {} does not take codec {}", AlgoName(algo_), CodecName(config.codec)));
  };
  switch (algo_) {
    case AllReduceAlgo::kRing:
      if (k != CodecKind::kNone && k != CodecKind::kRandomK && !HasHop(k)) refuse();
      break;
    case AllReduceAlgo::kRecursiveDoubling:
      if (k != CodecKind::kNone) refuse();
      break;
    case AllReduceAlgo::kHierarchical:
      if (k != CodecKind::kNone && k != CodecKind::kTopK && !HasHop(k)) refuse();
      break;
    case AllReduceAlgo::kSparse:
      if (k != CodecKind::kTopK) refuse();
      break;
    case AllReduceAlgo::kTwoPhaseSign:
      if (k != CodecKind::kSign1) refuse();
      break;
    case AllReduceAlgo::kPowerSgd:
      if (k != CodecKind::kPowerSgd) refuse();
      break;
    case AllReduceAlgo::kNative:
      if (k != CodecKind::kNone) refuse();
      break;
    case AllReduceAlgo::kAuto:
      break;  // a crossover of uncompressed algorithms (checked above)
  }
  const DType prec = config.precision;
  if (prec != DType::kFloat32 && prec != DType::kBFloat16 && prec != DType::kFloat16)
    throw UsageError(fmt::format("reduction precision {}: fp32 bf16 fp16", DTypeName(prec)));
  if (prec != DType::kFloat32 && algo_ != AllReduceAlgo::kNative)
    throw UsageError(
        fmt::format("reduction precision {} applies to the native algorithm; {} accumulates in fp32 "
                    "(16-bit wires: codec fp16 or bf16)",
                    DTypeName(prec), AlgoName(algo_)));
  impl_ = std::make_unique<Impl>(comm_, config_, codec_, counters_);
}

AllReduceEngine::~AllReduceEngine() = default;

AllReduceEngine::StateShape AllReduceEngine::ShapeOf(size_t n) const {
  // Mirrors what Codec::Prepare, TwoPhaseSign and PowerSgd allocate on first use.
  StateShape s;
  if (n == 0) return s;
  const CodecSpec& spec = codec_.spec();
  const bool sign2 = algo_ == AllReduceAlgo::kTwoPhaseSign;
  if (CodecHasResidual(spec) || sign2) s.residual = n;
  if (sign2) s.server_residual = std::max<size_t>(hops::ChunkOf(n, comm_.Size(), comm_.Rank(), spec.block).size(), 1);
  if (spec.kind == CodecKind::kPowerSgd)
    s.q = std::max<size_t>(PowerSgdView(n).cols * static_cast<size_t>(spec.rank), 1);
  return s;
}

void AllReduceEngine::Register(std::weak_ptr<const SharedWindow> window) {
  if (const auto held = window.lock(); held && held->ranks() != comm_.Size())
    throw UsageError(
        fmt::format("a shared window of {} ranks cannot serve a communicator of {}", held->ranks(), comm_.Size()));
  auto& w = impl_->windows;
  w.erase(std::remove_if(w.begin(), w.end(), [](const auto& x) { return x.expired(); }), w.end());
  if (!window.expired()) w.push_back(std::move(window));
}

AllReduceAlgo AllReduceEngine::AlgoFor(size_t n, bool out_of_place) const {
  return crossover_ ? crossover_->Choose(static_cast<uint64_t>(n) * 4, out_of_place) : algo_;
}

bool AllReduceEngine::RunsNativeFp32(size_t n) const {
  return config_.codec.kind == CodecKind::kNone && config_.precision == DType::kFloat32 &&
         AlgoFor(n) == AllReduceAlgo::kNative;
}

void AllReduceEngine::CountNative(size_t n, double seconds) {
  const int p = comm_.Size();
  counters_.calls++;
  counters_.native_calls++;
  counters_.raw_bytes += static_cast<double>(n) * 4;
  counters_.wire_bytes += 2.0 * (p - 1) / p * static_cast<double>(n) * 4;
  counters_.total_s += seconds;
  counters_.comm_s += seconds;
}

void AllReduceEngine::Run(const float* src, float* data, size_t n, CodecState* state, bool average) {
  const double t0 = NowSeconds();
  const CodecKind k = config_.codec.kind;
  const AllReduceAlgo algo = AlgoFor(n, src != data);
  bool averaged = false;
  bool ran_native = algo == AllReduceAlgo::kNative;  // also a ring the table meant staged, run unstaged
  trace::Span span(AlgoName(algo), trace::Category::kPhase);
  span.With("bytes", static_cast<int64_t>(n * 4)).With("ranks", comm_.Size());
  const bool reads_src = (algo == AllReduceAlgo::kRing && k == CodecKind::kNone) ||
                         (algo == AllReduceAlgo::kNative && config_.precision == DType::kFloat32);
  if (src != data && n > 0 && !reads_src) {
    trace::Span copy("copy", trace::Category::kCompute);
    copy.With("bytes", static_cast<int64_t>(n * 4));
    CopyBytesAsync(data, comm_.BufferKind(), src, comm_.BufferKind(), n * 4, comm_.Stream());
    src = data;
  }
  if (n > 0) {
    switch (algo) {
      case AllReduceAlgo::kRing:
        if (k == CodecKind::kNone) {
          if ((impl_->windows.empty() || !impl_->MappedRing(comm_, src, data, n)) &&
              !impl_->StagedRing(comm_, src, data, n)) {
            if (crossover_ && static_cast<uint64_t>(n) * 4 < crossover_->staged_below) {
              // The table chose the ring for its staged speed; unstaged, native is the safe choice
              // (every rank decides alike: the same table, size and staging state).
              trace::Span unstaged("native", trace::Category::kPhase);
              averaged = impl_->Native(src, data, n, average);
              ran_native = true;
            } else {
              impl_->Ring(comm_, src, data, n);
            }
          }
        } else if (k == CodecKind::kRandomK) {
          impl_->RandomK(data, n, state);
        } else {
          impl_->CompressedRing(comm_, data, n, state, true);
        }
        break;
      case AllReduceAlgo::kRecursiveDoubling:
        impl_->RecursiveDoubling(comm_, data, n);
        break;
      case AllReduceAlgo::kHierarchical:
        impl_->Hierarchical(data, n, state);
        break;
      case AllReduceAlgo::kSparse:
        impl_->Sparse(data, n, state);
        break;
      case AllReduceAlgo::kTwoPhaseSign:
        impl_->TwoPhaseSign(data, n, state);
        break;
      case AllReduceAlgo::kPowerSgd:
        impl_->PowerSgd(data, n, state);
        break;
      case AllReduceAlgo::kNative:
        averaged = impl_->Native(src, data, n, average);
        break;
      case AllReduceAlgo::kAuto:
        break;
    }
    if (average && !averaged && comm_.Size() > 1) {
      trace::Span scale("scale", trace::Category::kCompute);
      scale.With("bytes", static_cast<int64_t>(n * 4));
      ScaleInPlace(data, n, 1.0f / static_cast<float>(comm_.Size()), comm_.Stream());
    }
  }
  {
    // On a device: the host waits here for the stream (the GPU track shows what it waited for).
    trace::Span sync("synchronize", trace::Category::kWait);
    comm_.Synchronize();
  }
  const double dt = NowSeconds() - t0;
  counters_.calls++;
  counters_.raw_bytes += static_cast<double>(n) * 4;
  counters_.total_s += dt;
  if (ran_native) counters_.native_calls++;
  if (ran_native && config_.precision == DType::kFloat32) counters_.comm_s += dt;
}

}  // namespace ciuic
