#include "tuner/plan_space.h"

#include <cmath>
#include <limits>

#include "kernels/codec.h"
#include "kernels/codec_kernels.h"
#include "tuner/local_model.h"

namespace ciuic {

namespace {

// The codec parameters the space offers (plan_space.h).
const std::vector<std::string> kRatios = {"0.1", "0.05", "0.01", "0.001"};
const std::vector<std::string> kRanks = {"1", "2", "4", "8", "16", "32"};

bool TakesRatio(const std::string& family) { return family == "topk" || family == "randomk"; }

}  // namespace

SearchSpace AllReducePlanSpace() {
  SearchSpace s;
  // Ordered from gentle to aggressive compression, so neighbours are similar (TPE smooths over them).
  s.dims.push_back(
      {"codec", {"none", "bf16", "fp16", "fp8e4m3", "int8", "int4", "sign1", "randomk", "topk", "powersgd"}, {}});
  s.dims.push_back({"bucket_mb", {"1", "2", "4", "8", "16", "25", "32", "64", "128", "256"}, {}});
  s.dims.push_back({"streams", {"1", "2", "4", "8"}, {}});
  s.dims.push_back({"algo", {"nccl", "ring", "rd", "hier"}, {}});
  s.dims.push_back({"precision", {"fp32", "bf16", "fp16"}, {}});
  const std::vector<std::string> codecs = s.dims[kCodecDim].values, algos = s.dims[kAlgoDim].values;
  const auto codec_is = [codecs](auto pred) {
    return [codecs, pred](const Point& p) { return pred(codecs[static_cast<size_t>(p[kCodecDim])]); };
  };
  s.dims.push_back({"ratio", kRatios, codec_is([](const std::string& c) { return TakesRatio(c); })});
  s.dims.push_back({"rank", kRanks, codec_is([](const std::string& c) { return c == "powersgd"; })});
  // Without a topology every hier point has both depths (Offered refuses 3 where there is no spine).
  s.dims.push_back(
      {"depth", {"2", "3"}, [algos](const Point& p) { return algos[static_cast<size_t>(p[kAlgoDim])] == "hier"; }});
  return s;
}

SearchSpace AllReducePlanSpace(const Topology& t) {
  SearchSpace s = AllReducePlanSpace();
  // On two levels hier has one depth: the axis is not there (configurations read as they always did).
  if (!t.HasSpine()) s.dims[kDepthDim].active = [](const Point&) { return false; };
  s.valid = [plain = s, t](const Point& p) { return Offered(ChoiceOf(plain, p), t); };
  return s;
}

std::vector<std::string> PlanSpaceCodecs() {
  std::vector<std::string> out;
  const SearchSpace space = AllReducePlanSpace();
  for (const auto& family : space.dims[kCodecDim].values) {
    if (TakesRatio(family)) {
      for (const auto& r : kRatios) out.push_back(family + ":" + r);
    } else if (family == "powersgd") {
      for (const auto& r : kRanks) out.push_back(family + ":" + r);
    } else {
      out.push_back(family);
    }
  }
  return out;
}

bool Offered(const PlanChoice& c, const Topology& t) {
  const CodecKind k = ParseCodec(c.codec).kind;
  const bool dedicated =
      k == CodecKind::kTopK || k == CodecKind::kSign1 || k == CodecKind::kPowerSgd || k == CodecKind::kRandomK;
  if (c.precision != "fp32" && (c.algo != "nccl" || k != CodecKind::kNone)) return false;
  if (c.algo == "nccl" || c.algo == "rd") return k == CodecKind::kNone;
  if (c.algo == "hier")
    return !dedicated && t.nodes > 1 && (c.hierarchy_depth == 2 || (c.hierarchy_depth == 3 && t.HasSpine()));
  return true;
}

int RuleDepth(const PlanChoice& c) { return c.algo == "hier" ? c.hierarchy_depth : 1; }

std::string GateName(const PlanChoice& c) { return c.precision == "fp32" ? c.codec : c.codec + "@" + c.precision; }

std::string RuntimeAlgo(const PlanChoice& c) {
  if (c.algo != "ring") return c.algo;
  switch (ParseCodec(c.codec).kind) {
    case CodecKind::kTopK:
      return "sparse";
    case CodecKind::kSign1:
      return "sign2";
    case CodecKind::kPowerSgd:
      return "powersgd";
    default:
      return "ring";
  }
}

PlanChoice ChoiceOf(const SearchSpace& space, const Point& p) {
  const auto value = [&](PlanDim d) -> const std::string& { return space.dims[d].values[static_cast<size_t>(p[d])]; };
  PlanChoice c;
  c.codec = value(kCodecDim);
  if (space.dims[kRatioDim].Active(p)) c.codec += ":" + value(kRatioDim);
  if (space.dims[kRankDim].Active(p)) c.codec += ":" + value(kRankDim);
  c.bucket_bytes = std::stod(value(kBucketDim)) * (1 << 20);
  c.streams = std::stoi(value(kStreamsDim));
  c.algo = value(kAlgoDim);
  c.precision = value(kPrecisionDim);
  c.hierarchy_depth = std::stoi(value(kDepthDim));
  return c;
}

PlanChoice ChoiceOf(const SearchSpace& space, const Point& p, const Topology& t) {
  PlanChoice c = ChoiceOf(space, p);
  if (RuleDepth(c) == 3) c.nodes_per_group = t.spine.nodes_per_group;
  return c;
}

CommPlan PlanOf(const PlanChoice& c, const Topology& t, bool* feasible, const Calibration* cal) {
  CommPlan plan;
  plan.bucket_bytes = c.bucket_bytes;
  plan.streams = c.streams;
  *feasible = Offered(c, t);
  const CodecSpec spec = ParseCodec(c.codec);
  plan.algo = c.algo == "nccl"   ? ModelAlgo::kNcclBest
              : c.algo == "rd"   ? ModelAlgo::kRecursiveDoubling
              : c.algo == "hier" ? (c.hierarchy_depth == 3 ? ModelAlgo::kHierarchical3 : ModelAlgo::kHierarchical)
                                 : ModelAlgo::kRing;
  const bool reduced = c.precision != "fp32";  // a 16-bit reduction in the library's allreduce
  const int ranks = t.ranks();
  const double n = std::max(1.0, c.bucket_bytes / 4);
  const Codec codec(spec);
  const double wire = static_cast<double>(codec.WireBytes(static_cast<size_t>(n)));
  plan.wire_ratio = wire > 0 ? 4.0 * n / wire : 1.0;
  if (spec.kind == CodecKind::kTopK) plan.wire_ratio *= 2.0 / std::max(2, ranks);  // allgather moves (P-1)·W
  if (reduced) plan.wire_ratio = 2.0;  // 16-bit elements through the library's allreduce
  // "nccl" is the library's own allreduce: the runtime's native algorithm.
  const LocalAllReduce a{c.codec,    c.algo == "nccl" ? "native" : RuntimeAlgo(c), 0, ranks, spec.error_feedback,
                         c.precision};
  // The codec kernels the runtime runs for a bucket, counted in the same steps as a calibration
  // prices them (error feedback included, as in training): what the estimate streams and launches.
  {
    LocalAllReduce at_bucket = a;
    at_bucket.bytes = std::max(4.0, c.bucket_bytes);
    const KernelWork work = CodecKernelWork(at_bucket);
    plan.codec_passes = work.passes;
    plan.codec_launches = static_cast<int>(std::lround(work.launches));
  }
  if (!cal || !*feasible) return plan;
  // A calibration applies to the machine it was made on: a GPU's to GPU topologies, this CPU's to
  // CPU topologies (cpu_local, a cluster of CPU hosts; the study loads only a matching one; this
  // guards other callers).
  const bool cpu = t.intra.fabric == "shm";
  const bool local = cpu && t.nodes == 1;
  if (cpu == IsGpuCalibration(*cal)) return plan;
  // A function of the bucket size from a model of `a` at that size.
  auto at_size = [cal, a](double (*model)(const Calibration&, const LocalAllReduce&)) {
    return [cal, a, model](double bytes) {
      LocalAllReduce x = a;
      x.bytes = bytes;
      return model(*cal, x);
    };
  };
  // The codec kernels as measured, in place of the bandwidth estimate.
  if (HasCodecKernels(*cal, a)) plan.codec_us = at_size(&CodecKernelUs);
  // With this machine's link calibrated too, the whole bucket comes from the local model.
  // (On a CPU machine the library's own allreduce is MPI's, measured at each precision.)
  if (local && cal->HasLink(ranks) && CanPredictLocal(*cal, a)) plan.local_us = at_size(&PredictLocalAllReduceUs);
  return plan;
}

double CommStateBytes(const PlanChoice& c, const Workload& w, int ranks) {
  const CodecSpec spec = ParseCodec(c.codec);
  const Codec codec(spec);
  const double elements = static_cast<double>(w.parameters);
  double state = 0;
  if (CodecHasResidual(spec)) state += 4 * elements;
  if (spec.kind == CodecKind::kSign1 && RuntimeAlgo(c) == "sign2") state += 4 * elements / std::max(1, ranks);
  const double bucket = std::min(c.bucket_bytes, 4 * elements);
  const size_t bucket_n = static_cast<size_t>(bucket / 4);
  if (spec.kind == CodecKind::kPowerSgd) {
    state += 4 * elements;  // the matrix scratch of every bucket
    // Q of each bucket: buckets of bucket_n elements, cols = ceil(sqrt(n)).
    const double buckets = std::ceil(elements / std::max<size_t>(bucket_n, 1));
    state += buckets * 4.0 * static_cast<double>(PowerSgdView(bucket_n).cols) * spec.rank;
  }
  if (spec.kind == CodecKind::kTopK) state += static_cast<double>(TopKWorkspaceBytes(bucket_n));
  const double wire = c.precision == "fp32" ? static_cast<double>(codec.WireBytes(bucket_n)) : 2.0 * bucket_n;
  return state + bucket + 2.0 * wire;
}

double ModelStepUs(const PlanChoice& c, const Topology& t, const Workload& w, int batch, const Calibration* cal) {
  bool feasible = false;
  const CommPlan plan = PlanOf(c, t, &feasible, cal);
  if (!feasible) return std::numeric_limits<double>::infinity();
  return StepScore(ScheduleStep(w, t, EffectiveFabric(t), plan, batch));
}

std::vector<std::string> TuneTargets() { return {"ciuic", "ddp", "nccl", "deepspeed", "horovod"}; }

bool TargetRuns(const std::string& target, const PlanChoice& c) {
  const CodecKind k = ParseCodec(c.codec).kind;
  if (target == "ciuic") return true;
  if (RuleDepth(c) == 3) return false;  // no other consumer groups nodes behind a spine
  if (c.streams != 1) return false;     // no other consumer runs several ciuic streams
  if (target == "ddp") return c.algo == "nccl" || c.algo == "ring";
  if (target == "nccl") return c.algo == "nccl" && k == CodecKind::kNone && c.precision == "fp32";
  if (target == "deepspeed")
    return (c.algo == "nccl" && k == CodecKind::kNone) || (c.algo == "ring" && k == CodecKind::kSign1);
  if (target == "horovod") return c.algo == "nccl" && k == CodecKind::kNone && c.precision != "bf16";
  return false;
}

}  // namespace ciuic
