#include "tuner/cost_model.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace ciuic {

namespace {

constexpr double kNvlinkProtocolEfficiency = 0.8;     // see cost_model.h
constexpr double kInfinibandEncoding = 64.0 / 66.0;    // IBTA 64b/66b

double Log2Ceil(int p) { return p <= 1 ? 0.0 : std::ceil(std::log2(static_cast<double>(p))); }

// µs to move `bytes` at `gbps` (GB/s = 1e3 bytes/µs).
double Beta(double bytes, double gbps) { return gbps > 0 ? bytes / (gbps * 1e3) : INFINITY; }

double Ring(double bytes, int p, const LinkClass& l) {
  if (p <= 1) return 0.0;
  return 2.0 * (p - 1) * l.alpha_us + 2.0 * (p - 1) / p * Beta(bytes, l.bw_gbps);
}

}  // namespace

const char* ModelAlgoName(ModelAlgo a) {
  switch (a) {
    case ModelAlgo::kRing: return "ring";
    case ModelAlgo::kRecursiveDoubling: return "rd";
    case ModelAlgo::kHierarchical: return "hier";
    case ModelAlgo::kNcclRing: return "nccl-ring";
    case ModelAlgo::kNcclTree: return "nccl-tree";
    case ModelAlgo::kNcclBest: return "nccl";
  }
  return "?";
}

Fabric EffectiveFabric(const Topology& t) {
  Fabric f;
  f.nodes = t.nodes;
  f.per_node = t.devices_per_node;
  const double eff = t.intra.fabric == "shm" ? 1.0 : kNvlinkProtocolEfficiency;
  f.intra = {t.intra.bw_gbps * eff, t.intra.latency_us};
  // A node's NIC bandwidth in GB/s after line encoding, shared by its ranks.
  const double node_nic = t.nics.count * t.nics.gbps / 8.0 * kInfinibandEncoding;
  f.inter = {t.devices_per_node > 0 ? node_nic / t.devices_per_node : 0.0, t.nics.latency_us};
  if (t.nodes <= 1) {
    f.flat_ring = f.intra;
  } else {
    // Rings spread over the rails: each node's egress carries one hop of every ring, so the ring's
    // per-rank rate is bounded by the node's whole NIC bandwidth (nccl-tests: ~8 × 24 GB/s on DGX A100).
    f.flat_ring = {std::min(f.intra.bw_gbps, node_nic), std::max(f.intra.alpha_us, f.inter.alpha_us)};
  }
  return f;
}

double PredictAllReduceUs(const Fabric& f, ModelAlgo algo, double bytes, double wire_ratio, double codec_us) {
  if (!(wire_ratio > 0)) throw UsageError("wire ratio must be positive");
  const int p = f.nodes * f.per_node;
  const double wire = bytes / wire_ratio;
  double t = 0;
  switch (algo) {
    case ModelAlgo::kRing:
    case ModelAlgo::kNcclRing: t = Ring(wire, p, f.flat_ring); break;
    case ModelAlgo::kRecursiveDoubling:
      t = p <= 1 ? 0.0 : 2.0 * Log2Ceil(p) * f.flat_ring.alpha_us + 2.0 * (p - 1) / p * Beta(wire, f.flat_ring.bw_gbps);
      break;
    case ModelAlgo::kHierarchical: {
      const int l = f.per_node, n = f.nodes;
      const double intra_rs = l <= 1 ? 0.0 : (l - 1) * f.intra.alpha_us + (l - 1.0) / l * Beta(wire, f.intra.bw_gbps);
      t = 2.0 * intra_rs + Ring(wire / l, n, f.inter);
      break;
    }
    case ModelAlgo::kNcclTree: {
      // Double binary tree: depth log2(P) of latency each way; pipelined reduce + broadcast move the
      // message twice over the bottleneck.
      t = p <= 1 ? 0.0 : 2.0 * Log2Ceil(p) * f.flat_ring.alpha_us + 2.0 * Beta(wire, f.flat_ring.bw_gbps);
      break;
    }
    case ModelAlgo::kNcclBest:
      t = std::min(PredictAllReduceUs(f, ModelAlgo::kNcclRing, bytes, wire_ratio),
                   PredictAllReduceUs(f, ModelAlgo::kNcclTree, bytes, wire_ratio));
      break;
  }
  return t + codec_us;
}

double BusBwGbps(double bytes, int ranks, double time_us) {
  if (ranks <= 1 || time_us <= 0) return 0.0;
  return bytes / (time_us * 1e3) * 2.0 * (ranks - 1) / ranks;
}

}  // namespace ciuic
