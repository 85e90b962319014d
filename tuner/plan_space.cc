#include "tuner/plan_space.h"

#include <cmath>
#include <limits>

#include "kernels/codec.h"
#include "kernels/codec_kernels.h"
#include "tuner/local_model.h"

namespace ciuic {

SearchSpace AllReducePlanSpace() {
  SearchSpace s;
  // Ordered from gentle to aggressive compression, so neighbours are similar (TPE smooths over them).
  s.dims.push_back({"codec", {"none", "bf16", "fp16", "fp8e4m3", "int8", "int4", "sign1", "randomk:0.01", "topk:0.01",
                              "topk:0.001", "powersgd:16", "powersgd:4", "powersgd:1"}});
  s.dims.push_back({"bucket_mb", {"1", "2", "4", "8", "16", "25", "32", "64", "128", "256"}});
  s.dims.push_back({"streams", {"1", "2", "4", "8"}});
  s.dims.push_back({"algo", {"nccl", "ring", "rd", "hier"}});
  s.dims.push_back({"precision", {"fp32", "bf16", "fp16"}});
  return s;
}

SearchSpace AllReducePlanSpace(const Topology& t) {
  SearchSpace s = AllReducePlanSpace();
  s.valid = [plain = s, t](const Point& p) { return Offered(ChoiceOf(plain, p), t); };
  return s;
}

bool Offered(const PlanChoice& c, const Topology& t) {
  const CodecKind k = ParseCodec(c.codec).kind;
  const bool dedicated = k == CodecKind::kTopK || k == CodecKind::kSign1 || k == CodecKind::kPowerSgd ||
                         k == CodecKind::kRandomK;
  if (c.precision != "fp32" && (c.algo != "nccl" || k != CodecKind::kNone)) return false;
  if (c.algo == "nccl" || c.algo == "rd") return k == CodecKind::kNone;
  if (c.algo == "hier") return !dedicated && t.nodes > 1;
  return true;
}

std::string GateName(const PlanChoice& c) { return c.precision == "fp32" ? c.codec : c.codec + "@" + c.precision; }

std::string RuntimeAlgo(const PlanChoice& c) {
  if (c.algo != "ring") return c.algo;
  switch (ParseCodec(c.codec).kind) {
    case CodecKind::kTopK: return "sparse";
    case CodecKind::kSign1: return "sign2";
    case CodecKind::kPowerSgd: return "powersgd";
    default: return "ring";
  }
}

PlanChoice ChoiceOf(const SearchSpace& space, const Point& p) {
  PlanChoice c;
  c.codec = space.dims[0].values[static_cast<size_t>(p[0])];
  c.bucket_bytes = std::stod(space.dims[1].values[static_cast<size_t>(p[1])]) * (1 << 20);
  c.streams = std::stoi(space.dims[2].values[static_cast<size_t>(p[2])]);
  c.algo = space.dims[3].values[static_cast<size_t>(p[3])];
  c.precision = space.dims[4].values[static_cast<size_t>(p[4])];
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
              : c.algo == "hier" ? ModelAlgo::kHierarchical
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
  const LocalAllReduce a{c.codec, c.algo == "nccl" ? "native" : RuntimeAlgo(c), 0, ranks, spec.error_feedback,
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
  if (c.streams != 1) return false;  // no other consumer runs several ciuic streams
  if (target == "ddp") return c.algo == "nccl" || c.algo == "ring";
  if (target == "nccl") return c.algo == "nccl" && k == CodecKind::kNone && c.precision == "fp32";
  if (target == "deepspeed")
    return (c.algo == "nccl" && k == CodecKind::kNone) || (c.algo == "ring" && k == CodecKind::kSign1);
  if (target == "horovod") return c.algo == "nccl" && k == CodecKind::kNone && c.precision != "bf16";
  return false;
}

}  // namespace ciuic
