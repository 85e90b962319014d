#pragma once
// Alpha-beta cost model of allreduce on a topology: effective link classes (intra-node, inter-node),
// the runtime's algorithms (ring, recursive halving/doubling, hierarchical) and NCCL's ring and tree
// latency structure for the uncompressed baseline, plus codec compute at a kernel throughput.
//
// Constants and where they come from:
//   NVLink/NVSwitch/PCIe protocol efficiency 0.8: NCCL's maintainers on nccl-tests — H100 "450 line
//     rate … ~20% protocol overhead"; A100 "effective ceiling 240 (20 GB/s per link × 12 at 128 B SM
//     payload)" of 25 GB/s links.
//   InfiniBand HDR/NDR payload efficiency 64/66: the 64b/66b line encoding of the IBTA specification.
//   shared memory (cpu_local): the measured memcpy is already an effective rate (efficiency 1).
//   GPU kernel fixed cost 6 µs per launch: an H100's bf16 cast, event-timed, took 7.2 µs at 1 MiB and
//     10.4 µs at 4 MiB (bench/results/2026-11-22-h100-codecs): ~6 µs plus the streaming time.
#include <cstddef>
#include <string>

#include "tuner/topology.h"

namespace ciuic {

constexpr double kGpuKernelLaunchUs = 6.0;  // see above

struct LinkClass {
  double bw_gbps = 0;  // effective one-way bandwidth per rank (GB/s)
  double alpha_us = 0;
};

struct Fabric {
  int nodes = 1, per_node = 1;
  LinkClass intra;      // between ranks of a node
  LinkClass inter;      // a rank's share of its node's NICs (rail-optimized: one NIC per rank)
  LinkClass flat_ring;  // the bottleneck of a ring spanning every rank
};

Fabric EffectiveFabric(const Topology& t);

enum class ModelAlgo { kRing, kRecursiveDoubling, kHierarchical, kNcclRing, kNcclTree, kNcclBest };
const char* ModelAlgoName(ModelAlgo a);

// Predicted time (µs) of an allreduce of `bytes` per rank over every rank of the topology, with the
// wire shrunk by `wire_ratio` (uncompressed bytes / wire bytes; 1 = none) and `codec_us` of kernel
// time added (compute is not overlapped with the transfer it feeds).
double PredictAllReduceUs(const Fabric& f, ModelAlgo algo, double bytes, double wire_ratio = 1.0,
                          double codec_us = 0.0);
// busbw for a predicted time, as nccl-tests defines it: bytes / t × 2(P-1)/P.
double BusBwGbps(double bytes, int ranks, double time_us);

}  // namespace ciuic
