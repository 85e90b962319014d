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
  return s;
}

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
  return c;
}

CommPlan PlanOf(const PlanChoice& c, const Topology& t, bool* feasible, const Calibration* cal) {
  CommPlan plan;
  plan.bucket_bytes = c.bucket_bytes;
  plan.streams = c.streams;
  *feasible = true;
  const CodecSpec spec = ParseCodec(c.codec);
  const bool dedicated = spec.kind == CodecKind::kTopK || spec.kind == CodecKind::kSign1 ||
                         spec.kind == CodecKind::kPowerSgd || spec.kind == CodecKind::kRandomK;
  if (c.algo == "nccl") {
    plan.algo = ModelAlgo::kNcclBest;
    *feasible = spec.kind == CodecKind::kNone;
  } else if (c.algo == "rd") {
    plan.algo = ModelAlgo::kRecursiveDoubling;
    *feasible = spec.kind == CodecKind::kNone;
  } else if (c.algo == "hier") {
    plan.algo = ModelAlgo::kHierarchical;
    *feasible = !dedicated && t.nodes > 1;
  } else {
    plan.algo = ModelAlgo::kRing;
  }
  const int ranks = t.ranks();
  const double n = std::max(1.0, c.bucket_bytes / 4);
  const Codec codec(spec);
  const double wire = static_cast<double>(codec.WireBytes(static_cast<size_t>(n)));
  plan.wire_ratio = wire > 0 ? 4.0 * n / wire : 1.0;
  if (spec.kind == CodecKind::kTopK) plan.wire_ratio *= 2.0 / std::max(2, ranks);  // allgather moves (P-1)·W
  // Passes of the codec kernels over the fp32 bucket (encode, per-hop decode-add-encode, final decode),
  // from the kernels' structure (kernels/cpu, kernels/cuda).
  switch (spec.kind) {
    case CodecKind::kNone: plan.codec_passes = 0; break;
    case CodecKind::kFp16:
    case CodecKind::kBf16: plan.codec_passes = 3; break;
    case CodecKind::kSign1: plan.codec_passes = 4; break;
    case CodecKind::kTopK: plan.codec_passes = 3; break;
    case CodecKind::kRandomK: plan.codec_passes = 2; break;
    case CodecKind::kPowerSgd: plan.codec_passes = 6; break;
    default: plan.codec_passes = 3.5; break;  // block-scaled: absmax pass + quantise
  }
  if (!cal || !*feasible) return plan;
  // A calibration applies to the machine it was made on: a GPU's to GPU topologies, this CPU's to
  // cpu_local (the study loads only a matching one; this guards other callers).
  const bool local = t.name == "cpu_local";
  if (local == IsGpuCalibration(*cal)) return plan;
  const LocalAllReduce a{c.codec, RuntimeAlgo(c), 0, ranks, spec.error_feedback};
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
  if (local && cal->HasLink(ranks)) {
    if (c.algo == "nccl") {
      // On a CPU machine the library's own allreduce is MPI's, measured by the calibration.
      if (auto it = cal->native_allreduce.find(ranks); it != cal->native_allreduce.end()) {
        const TimeCurve curve = it->second;
        plan.local_us = [curve](double bytes) { return curve.Us(bytes); };
      }
    } else if (CanPredictLocal(*cal, a)) {
      plan.local_us = at_size(&PredictLocalAllReduceUs);
    }
  }
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
  return state + bucket + 2.0 * static_cast<double>(codec.WireBytes(bucket_n));
}

double ModelStepUs(const PlanChoice& c, const Topology& t, const Workload& w, int batch, const Calibration* cal) {
  bool feasible = false;
  const CommPlan plan = PlanOf(c, t, &feasible, cal);
  if (!feasible) return std::numeric_limits<double>::infinity();
  return StepScore(ScheduleStep(w, t, EffectiveFabric(t), plan, batch));
}

}  // namespace ciuic
