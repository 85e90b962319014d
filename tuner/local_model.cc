#include "tuner/local_model.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <iterator>
#include <utility>
#include <vector>

#include "collectives/algorithms/allreduce.h"
#include "core/error.h"
#include "kernels/codec.h"
#include "kernels/codec_kernels.h"

namespace ciuic {

namespace {

// The kernels and link an allreduce needs, in the order PredictLocalAllReduceUs uses them.
std::vector<std::pair<std::string, std::string>> Needs(const LocalAllReduce& a, AllReduceAlgo algo, CodecKind kind) {
  std::vector<std::pair<std::string, std::string>> k;
  if (algo == AllReduceAlgo::kNative) {  // its casts (the cast codec of the same name)
    if (a.precision != "fp32") k = {{"encode", a.precision}, {"decode", a.precision}};
    return k;
  }
  const bool none = kind == CodecKind::kNone;
  if (none || algo == AllReduceAlgo::kRecursiveDoubling || kind == CodecKind::kRandomK || kind == CodecKind::kPowerSgd)
    k.push_back({"add", "none"});
  if (!none) {
    // PowerSGD keeps its own residual inside encode (calibrated as "encode").
    const bool ef = (a.error_feedback && kind != CodecKind::kPowerSgd) || algo == AllReduceAlgo::kTwoPhaseSign;
    k.push_back({ef ? "encode_ef" : "encode", a.codec});
    k.push_back({"decode", a.codec});
  }
  if (algo == AllReduceAlgo::kRing && !none && kind != CodecKind::kRandomK) k.push_back({"hop", a.codec});
  if (algo == AllReduceAlgo::kTwoPhaseSign) k.push_back({"decode_acc", a.codec});
  return k;
}

AllReduceAlgo AlgoOf(const LocalAllReduce& a, const CodecSpec& spec) {
  const AllReduceAlgo algo = ParseAlgo(a.algo);
  return algo == AllReduceAlgo::kAuto ? DefaultAlgo(spec.kind) : algo;
}

}  // namespace

bool CanPredictLocal(const Calibration& cal, const LocalAllReduce& a, std::string* missing) {
  const CodecSpec spec = ParseCodec(a.codec);
  const AllReduceAlgo algo = AlgoOf(a, spec);
  auto miss = [&](const std::string& what) {
    if (missing) *missing = what;
    return false;
  };
  if (a.ranks > 1 && !cal.HasLink(a.ranks))
    return miss(fmt::format("the link at {} ranks (ciuic-tune calibrate --ranks {})", a.ranks, a.ranks));
  if (algo == AllReduceAlgo::kNative) {  // measured whole, casts included
    if (spec.kind != CodecKind::kNone) return miss("codec none (native takes no codec)");
    if (a.ranks > 1 && !cal.native_allreduce.count({a.ranks, a.precision}))
      return miss(fmt::format("the native allreduce in {} at {} ranks (ciuic-tune calibrate --ranks {})", a.precision,
                              a.ranks, a.ranks));
    return true;
  }
  for (const auto& [kernel, codec] : Needs(a, algo, spec.kind))
    if (!cal.kernels.count({kernel, codec}))
      return miss(fmt::format("kernel {} of {} (ciuic-tune calibrate --sizes ...)", kernel, codec));
  if (algo == AllReduceAlgo::kHierarchical) return miss("a model of hier on one node (it needs several nodes)");
  return true;
}

namespace {

// A kernel's time (kernel, codec, fp32 bytes) -> µs, in place of the calibration's curves.
using KernelFn = std::function<double(const std::string& kernel, const std::string& codec, double bytes)>;

// The step-by-step cost of PredictLocalAllReduceUs; with kernels_only the link steps and uncompressed
// adds count 0 and each rank has its own device (no sharing): the codec kernels of one rank. With
// `kernel_fn` (kernels_only) every kernel costs what it says instead of the calibration's curve.
double Cost(const Calibration& cal, const LocalAllReduce& a, bool kernels_only, const KernelFn* kernel_fn = nullptr) {
  const int p = a.ranks;
  const double b = a.bytes;
  if (p <= 1 || b <= 0) return 0.0;
  const CodecSpec spec = ParseCodec(a.codec);
  const Codec codec(spec);
  const AllReduceAlgo algo = AlgoOf(a, spec);
  auto wire = [&](double fp32_bytes) {
    return static_cast<double>(codec.WireBytes(static_cast<size_t>(std::max(1.0, std::round(fp32_bytes / 4)))));
  };
  // Kernels: timed with cal.concurrency copies at once; more ranks than that run in ceil(P / copies)
  // rounds (local_model.h).
  const double share =
      kernels_only ? 1.0 : std::max(1.0, std::ceil(static_cast<double>(p) / std::max(1, cal.concurrency)));
  auto k = [&](const char* kernel, double bytes) {
    return kernel_fn ? (*kernel_fn)(kernel, a.codec, bytes) : share * cal.KernelUs(kernel, a.codec, bytes);
  };
  auto add = [&](double bytes) { return kernels_only ? 0.0 : share * cal.KernelUs("add", "none", bytes); };
  auto step = [&](double bytes) { return kernels_only ? 0.0 : cal.SendRecvUs(p, bytes); };
  auto ring_none = [&](double bytes) {
    const double c = bytes / p;
    return (p - 1) * (step(c) + add(c)) + (p - 1) * step(c);
  };
  const char* enc = a.error_feedback ? "encode_ef" : "encode";
  switch (algo) {
    case AllReduceAlgo::kRing: {
      if (spec.kind == CodecKind::kNone) return ring_none(b);
      if (spec.kind == CodecKind::kRandomK)
        return k(enc, b) + ring_none(4.0 * static_cast<double>(codec.SparseK(static_cast<size_t>(b / 4)))) +
               k("decode", b);
      const double c = b / p, w = wire(c);
      double t = k("encode", c) + (p - 1) * (step(w) + k("hop", c)) + (p - 1) * step(w) + k("decode", b);
      if (a.error_feedback) t += k("encode_ef", b) + k("decode", b);
      return t;
    }
    case AllReduceAlgo::kRecursiveDoubling: {
      int p2 = 1;
      while (p2 * 2 <= p) p2 *= 2;
      double t = 0;
      if (p2 < p) t += 2 * step(b) + add(b);  // fold in and hand back
      double part = b;
      for (int m = p2 / 2; m >= 1; m /= 2) {
        part /= 2;
        t += step(part) + add(part) + step(part);  // halving (with its add) and the matching doubling step
      }
      return t;
    }
    case AllReduceAlgo::kSparse: {
      // Rank 0's wire decoded over the zeroed buffer, the other P-1 scattered into it.
      const double acc = kernel_fn || cal.kernels.count({"decode_acc", a.codec}) ? k("decode_acc", b) : 0.0;
      return k(enc, b) + (p - 1) * step(wire(b)) + k("decode", b) + (p - 1) * acc;
    }
    case AllReduceAlgo::kTwoPhaseSign: {
      const double c = b / p, w = wire(c);
      return k("encode_ef", b) + (p - 1) * step(w) + k("decode", c) + (p - 1) * k("decode_acc", c) + k("encode_ef", c) +
             (p - 1) * step(w) + k("decode", b);
    }
    case AllReduceAlgo::kPowerSgd: {
      const MatrixView v = PowerSgdView(static_cast<size_t>(b / 4));
      const double r = spec.rank;
      return k("encode", b) + ring_none(4.0 * r * static_cast<double>(v.rows)) +
             ring_none(4.0 * r * static_cast<double>(v.cols)) + k("decode", b);
    }
    case AllReduceAlgo::kNative: {
      if (kernels_only) {
        if (a.precision == "fp32") return 0.0;
        if (kernel_fn) return (*kernel_fn)("encode", a.precision, b) + (*kernel_fn)("decode", a.precision, b);
        return cal.KernelUs("encode", a.precision, b) + cal.KernelUs("decode", a.precision, b);
      }
      return cal.native_allreduce.at({p, a.precision}).Us(b);
    }
    case AllReduceAlgo::kHierarchical:
    case AllReduceAlgo::kAuto:
      break;
  }
  throw UsageError(fmt::format("the local model has no {} on one node", AlgoName(algo)));
}

}  // namespace

double PredictLocalAllReduceUs(const Calibration& cal, const LocalAllReduce& a) {
  std::string missing;
  if (!CanPredictLocal(cal, a, &missing))
    throw UsageError(fmt::format("the local model of {} {} on {} ranks needs {}", a.algo, a.codec, a.ranks, missing));
  return Cost(cal, a, false);
}

bool HasCodecKernels(const Calibration& cal, const LocalAllReduce& a) {
  const CodecSpec spec = ParseCodec(a.codec);
  const bool cast = ParseAlgo(a.algo) == AllReduceAlgo::kNative && a.precision != "fp32";
  if (spec.kind == CodecKind::kNone && !cast) return false;
  LocalAllReduce x = a;
  if (ParseAlgo(x.algo) == AllReduceAlgo::kHierarchical) x.algo = "ring";
  for (const auto& [kernel, codec] : Needs(x, AlgoOf(x, spec), spec.kind))
    if (kernel != "add" && !cal.kernels.count({kernel, codec})) return false;
  return true;
}

double CodecKernelUs(const Calibration& cal, const LocalAllReduce& a) {
  if (!HasCodecKernels(cal, a))
    throw UsageError(
        fmt::format("the calibration of {} has no kernels of {} ({} at {})", cal.device, a.codec, a.algo, a.precision));
  LocalAllReduce x = a;
  if (ParseAlgo(x.algo) == AllReduceAlgo::kHierarchical) x.algo = "ring";
  return Cost(cal, x, true);
}

double KernelWorkFactor(const std::string& kernel, const CodecSpec& spec) {
  // Measured on the H100 (bench/results/2026-11-22-h100-codecs/cuda-calibration.db) at 64 MiB as
  // (time - kGpuKernelLaunchUs) × the streaming rate (kGpuCodecKernelBwFraction × 3350 GB/s) /
  // bytes; tests/tuner/cost_model_test.cc derives them again and holds out 16 and 256 MiB and
  // topk:0.001. The same relative cost is assumed on other devices.
  if (spec.kind == CodecKind::kTopK) {
    if (kernel == "encode_ef") return 9.38;  // sampled-threshold selection, then the residual update
    if (kernel == "encode") return 3.65;
  }
  if (spec.kind == CodecKind::kPowerSgd) {
    // Encode: the two matrix products and the orthonormalisation, by rank (linear between measured
    // ranks, the last slope beyond); decode: one product, slower than streaming from rank 16 on.
    static const std::pair<double, double> kEncode[] = {{1, 9.66}, {4, 12.15}, {16, 51.3}};
    static const std::pair<double, double> kDecode[] = {{1, 1.0}, {4, 1.0}, {16, 2.16}};
    const auto& table = kernel == "encode" ? kEncode : kDecode;
    if (kernel != "encode" && kernel != "decode") return 1.0;
    const double r = std::max(1.0, static_cast<double>(spec.rank));
    size_t i = 1;
    while (i + 1 < std::size(table) && r > table[i].first) ++i;
    const auto [r0, f0] = table[i - 1];
    const auto [r1, f1] = table[i];
    return std::max(1.0, f0 + (f1 - f0) * (r - r0) / (r1 - r0));
  }
  return 1.0;
}

KernelWork CodecKernelWork(const LocalAllReduce& a) {
  KernelWork w;
  const CodecSpec spec = ParseCodec(a.codec);
  const bool cast = ParseAlgo(a.algo) == AllReduceAlgo::kNative && a.precision != "fp32";
  if ((spec.kind == CodecKind::kNone && !cast) || a.ranks <= 1 || a.bytes <= 0) return w;
  LocalAllReduce x = a;
  if (ParseAlgo(x.algo) == AllReduceAlgo::kHierarchical) x.algo = "ring";  // as CodecKernelUs costs it
  const Codec codec(spec);
  const Calibration none;
  // Every kernel streams its fp32 bytes (times its work factor), except the sparse codecs'
  // accumulation, which reads the wire (k values and indices), not the whole buffer.
  const KernelFn passes = [&](const std::string& kernel, const std::string&, double bytes) {
    if (kernel == "decode_acc" && (spec.kind == CodecKind::kTopK || spec.kind == CodecKind::kRandomK))
      bytes = static_cast<double>(codec.WireBytes(static_cast<size_t>(std::max(1.0, bytes / 4))));
    return KernelWorkFactor(kernel, spec) * bytes / a.bytes;
  };
  const KernelFn launches = [](const std::string&, const std::string&, double) { return 1.0; };
  w.passes = Cost(none, x, true, &passes);
  w.launches = Cost(none, x, true, &launches);
  return w;
}

}  // namespace ciuic
