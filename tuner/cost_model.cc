#include "tuner/cost_model.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"

namespace ciuic {

namespace {

constexpr double kInfinibandEncoding = 64.0 / 66.0;  // IBTA 64b/66b
constexpr double kInf = std::numeric_limits<double>::infinity();

double Log2Ceil(int p) { return p <= 1 ? 0.0 : std::ceil(std::log2(static_cast<double>(p))); }

// µs to move `bytes` at `gbps` (GB/s = 1e3 bytes/µs).
double Beta(double bytes, double gbps) { return gbps > 0 ? bytes / (gbps * 1e3) : kInf; }

// The runtime's ring over `p` ranks of one link class: 2(P-1) exchanges, each a runtime step.
double RuntimeRing(double bytes, int p, const LinkClass& l, double step_us) {
  if (p <= 1) return 0.0;
  return 2.0 * (p - 1) * (step_us + l.alpha_us) + 2.0 * (p - 1) / p * Beta(bytes, l.bw_gbps);
}

// NCCL's latency of a ring and of a tree (cost_model.h: hop counts of NCCL's own model).
// Hops across the spine cost the spine's latency on top of the NICs' (cost_model.h).
double NcclRingLatency(const Fabric& f) {
  const int p = f.nodes * f.per_node;
  const double inter_steps = f.nodes > 1 ? 2.0 * (f.nodes - 1) : 0.0;
  const double spine_steps = 2.0 * (f.groups - 1);
  return f.nccl_launch_us + (2.0 * (p - 1) - inter_steps) * f.intra.alpha_us +
         (inter_steps - spine_steps) * f.inter.alpha_us + spine_steps * f.spine_alpha_us;
}
double NcclTreeLatency(const Fabric& f) {
  const double spine_hops = Log2Ceil(f.groups);
  return f.nccl_launch_us + 2.0 * ((f.per_node - 1) * f.intra.alpha_us +
                                   (Log2Ceil(f.nodes) - spine_hops) * f.inter.alpha_us + spine_hops * f.spine_alpha_us);
}

// Times each node's NICs carry the message per direction in NCCL's tree: once on 2 nodes (each node
// is the other's only peer), twice beyond (a node is interior in one of the two binary trees).
double TreeNicPasses(int nodes) { return nodes <= 1 ? 0.0 : nodes == 2 ? 1.0 : 2.0; }

// The network part of NCCL's tree: each node's NICs, and each group's uplink across the spine.
double TreeNetworkUs(const Fabric& f, double wire) {
  const double nics = TreeNicPasses(f.nodes) * Beta(wire, f.node_nic_gbps);
  return f.groups > 1 ? std::max(nics, TreeNicPasses(f.groups) * Beta(wire, f.group_uplink_gbps)) : nics;
}

// A ring of `rings_per_uplink` concurrent rings over the nodes (or groups) at `link`, where the hops
// between groups share each group's uplink (cost_model.h).
LinkClass AcrossSpine(const Fabric& f, const LinkClass& link, int rings_per_uplink) {
  if (f.groups <= 1) return link;
  return {std::min(link.bw_gbps, f.group_uplink_gbps / std::max(1, rings_per_uplink)),
          std::max(link.alpha_us, f.spine_alpha_us)};
}

// Reduce-scatter (or allgather) of `bytes` over `p` ranks of one link class, as hier runs it.
double RuntimeHalfRing(double bytes, int p, const LinkClass& l, double step_us) {
  if (p <= 1) return 0.0;
  return (p - 1) * (step_us + l.alpha_us) + (p - 1.0) / p * Beta(bytes, l.bw_gbps);
}

}  // namespace

const char* ModelAlgoName(ModelAlgo a) {
  switch (a) {
    case ModelAlgo::kRing:
      return "ring";
    case ModelAlgo::kRecursiveDoubling:
      return "rd";
    case ModelAlgo::kHierarchical:
      return "hier";
    case ModelAlgo::kHierarchical3:
      return "hier3";
    case ModelAlgo::kNcclRing:
      return "nccl-ring";
    case ModelAlgo::kNcclTree:
      return "nccl-tree";
    case ModelAlgo::kNcclNvls:
      return "nccl-nvls";
    case ModelAlgo::kNcclNvlsTree:
      return "nccl-nvlstree";
    case ModelAlgo::kNcclBest:
      return "nccl";
  }
  return "?";
}

double NicGbpsFor(double node_gb_per_s, int nics) {
  return node_gb_per_s * 8.0 / (std::max(1, nics) * kInfinibandEncoding);
}

Fabric EffectiveFabric(const Topology& t, const ModelConstants& c) {
  Fabric f;
  f.nodes = t.nodes;
  f.per_node = t.devices_per_node;
  const bool shm = t.intra.fabric == "shm";
  // NVLink, NVSwitch and PCIe at the protocol efficiency fitted on NVLink rings (no published PCIe
  // figure to fit: pcie_8gpu uses the NVLink value, as it did the maintainers' "~20%").
  const double eff = shm ? 1.0 : c.nvlink_efficiency;
  f.intra = {t.intra.bw_gbps * eff, t.intra.latency_us};
  // A node's NIC bandwidth in GB/s after line encoding, shared by its ranks.
  f.node_nic_gbps = t.nics.count * t.nics.gbps / 8.0 * kInfinibandEncoding;
  f.inter = {t.devices_per_node > 0 ? f.node_nic_gbps / t.devices_per_node : 0.0, t.nics.latency_us};
  if (t.nodes <= 1) {
    f.flat_ring = f.intra;
  } else {
    // Rings spread over the rails: each node's egress carries one hop of every ring, so the ring's
    // per-rank rate is bounded by the node's whole NIC bandwidth (nccl-tests: ~8 × 24 GB/s on DGX
    // A100).
    f.flat_ring = {std::min(f.intra.bw_gbps, f.node_nic_gbps), std::max(f.intra.alpha_us, f.inter.alpha_us)};
  }
  if (t.HasSpine()) {
    f.groups = t.groups();
    f.nodes_per_group = t.spine.nodes_per_group;
    f.group_uplink_gbps = t.spine.gbps_per_node * t.spine.nodes_per_group / 8.0 * kInfinibandEncoding;
    f.spine_alpha_us = t.nics.latency_us + t.spine.latency_us;
    f.flat_ring = AcrossSpine(f, f.flat_ring, 1);  // the one ring crosses each uplink once
  }
  f.nvls = t.intra.nvls && !shm;
  f.nvls_gbps = f.nvls ? t.intra.bw_gbps * c.nvls_efficiency : 0.0;
  f.nccl_launch_us = shm ? 0.0 : c.nccl_launch_us;
  f.step_us = shm ? 0.0 : kGpuRuntimeStepUs;
  return f;
}

bool Offers(const Fabric& f, ModelAlgo a) {
  switch (a) {
    case ModelAlgo::kNcclNvls:
      return f.nvls && f.nodes == 1 && f.per_node >= 2;
    case ModelAlgo::kNcclNvlsTree:
      return f.nvls && f.nodes >= 2;
    case ModelAlgo::kHierarchical3:
      return f.groups >= 2;
    default:
      return true;
  }
}

ModelAlgo NcclChoice(const Fabric& f, double bytes, double wire_ratio) {
  ModelAlgo best = ModelAlgo::kNcclRing;
  double best_us = kInf;
  for (ModelAlgo a : {ModelAlgo::kNcclRing, ModelAlgo::kNcclTree, ModelAlgo::kNcclNvls, ModelAlgo::kNcclNvlsTree}) {
    if (!Offers(f, a)) continue;
    const double us = PredictAllReduceUs(f, a, bytes, wire_ratio);
    if (us < best_us) {
      best_us = us;
      best = a;
    }
  }
  return best;
}

double PredictAllReduceUs(const Fabric& f, ModelAlgo algo, double bytes, double wire_ratio, double codec_us) {
  if (!(wire_ratio > 0)) throw UsageError("wire ratio must be positive");
  if (!Offers(f, algo)) return kInf;
  const int p = f.nodes * f.per_node;
  const int l = f.per_node, n = f.nodes;
  if (p <= 1) return codec_us;
  const double wire = bytes / wire_ratio;
  double t = 0;
  switch (algo) {
    case ModelAlgo::kRing:
      t = RuntimeRing(wire, p, f.flat_ring, f.step_us);
      break;
    case ModelAlgo::kRecursiveDoubling:
      t = 2.0 * Log2Ceil(p) * (f.step_us + f.flat_ring.alpha_us) + 2.0 * (p - 1) / p * Beta(wire, f.flat_ring.bw_gbps);
      break;
    case ModelAlgo::kHierarchical:
      // One inter-node ring per rank of a node.
      t = 2.0 * RuntimeHalfRing(wire, l, f.intra, f.step_us) +
          RuntimeRing(wire / l, n, AcrossSpine(f, f.inter, l), f.step_us);
      break;
    case ModelAlgo::kHierarchical3: {
      // Within each group at the NICs' rate, then one inter-group ring per rank of a group.
      const int g = f.nodes_per_group;
      t = 2.0 * RuntimeHalfRing(wire, l, f.intra, f.step_us) + 2.0 * RuntimeHalfRing(wire / l, g, f.inter, f.step_us) +
          RuntimeRing(wire / (l * g), f.groups, AcrossSpine(f, f.inter, l * g), f.step_us);
      break;
    }
    case ModelAlgo::kNcclRing:
      t = NcclRingLatency(f) + 2.0 * (p - 1) / p * Beta(wire, f.flat_ring.bw_gbps);
      break;
    case ModelAlgo::kNcclTree: {
      // Pipelined: the slower of the intra-node chain (twice over each GPU's link) and the NICs.
      const double chain = l > 1 ? 2.0 * Beta(wire, f.intra.bw_gbps) : 0.0;
      t = NcclTreeLatency(f) + std::max(chain, TreeNetworkUs(f, wire));
      break;
    }
    case ModelAlgo::kNcclNvls:
    case ModelAlgo::kNcclNvlsTree: {
      // Each GPU port moves (1 + 1/L) of the message through the switch; the Simple protocol's
      // fixed cost on top of the LL algorithm's hops (cost_model.h).
      const double nvls = (1.0 + 1.0 / l) * Beta(wire, f.nvls_gbps);
      t = algo == ModelAlgo::kNcclNvls
              ? NcclRingLatency(f) + kNvlsExtraLatencyUs + nvls
              : NcclTreeLatency(f) + kNvlsExtraLatencyUs + std::max(nvls, TreeNetworkUs(f, wire));
      break;
    }
    case ModelAlgo::kNcclBest:
      t = PredictAllReduceUs(f, NcclChoice(f, bytes, wire_ratio), bytes, wire_ratio);
      break;
  }
  return t + codec_us;
}

double BusBwGbps(double bytes, int ranks, double time_us) {
  if (ranks <= 1 || time_us <= 0 || !std::isfinite(time_us)) return 0.0;
  return bytes / (time_us * 1e3) * 2.0 * (ranks - 1) / ranks;
}

double CodecKernelGbps(const Topology& t) {
  return t.device.memory_bw_gbps * (t.intra.fabric == "shm" ? kCpuCodecKernelBwFraction : kGpuCodecKernelBwFraction);
}

}  // namespace ciuic
