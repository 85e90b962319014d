#pragma once
// Alpha-beta cost model of allreduce on a topology: effective link classes (intra-node,
// inter-node, and across the spine where nodes form groups), the runtime's algorithms (ring,
// recursive halving/doubling, hierarchical at depth 2 and 3) and NCCL's own (ring, double binary
// tree, NVLink SHARP and NVLS-tree) for the library's allreduce, plus codec kernels.
//
// The spine (a topology's third level, groups of nodes behind oversubscribed uplinks): a ring laid
// out group by group crosses each group's uplink once per direction, so every ring that spans the
// groups shares that uplink: the flat ring (one ring) gets all of it, hier depth 2's inter-node step
// (one ring per rank of a node) a 1/ranks-per-node share, depth 3's inter-group step (one ring per
// rank of a group) a 1/ranks-per-group share of a message already cut to that share. Each hop across
// the spine costs the NICs' latency plus the spine's. NCCL's tree carries the message through each
// group's uplink as often as through a node's NICs on that many nodes (TreeNicPasses of the groups).
//
// NCCL's structure (what NCCL does, not its numbers; NVIDIA/nccl src/graph/tuning.cc and the
// maintainers' explanations in the NCCL issues named below):
//   ring       2(P-1) steps, 2(N-1) of them across the network; each rank moves 2(P-1)/P of the
//              message over its slowest link (busbw = that link's rate).
//   tree       a chain inside each node and a double binary tree across the N nodes: 2 × ((L-1)
//              intra + log2 N network) hops; the chain moves the message twice over each GPU's
//              NVLink; each node's NICs carry it once each way on 2 nodes and twice beyond (a
//              node is interior in one of the two trees), so 2 nodes reach a higher busbw than 4
//              ("on two nodes NCCL uses the tree (or nvlstree) algorithm which can go beyond the
//              network bottleneck", NVIDIA/nccl-tests #196; NVIDIA/nccl #812).
//   nvls       one node with NVLink SHARP (H100 NVSwitch): the switch reduces (multimem
//              load-reduce of each GPU's 1/L slice) and multicasts the result, so each GPU port
//              moves (1 + 1/L) of the message: busbw = 2(L-1)/(L+1) × the port rate NVLS reaches
//              (the "1+1/n" factor of NVIDIA/nccl #2140); a higher fixed cost
//              (kNvlsExtraLatencyUs).
//   nvls-tree  several nodes with NVLink SHARP: NVLS inside each node, the tree across the NICs.
// NCCL picks per size; "nccl" (kNcclBest) is the fastest of those the fabric offers.
//
// Fitted constants (ModelConstants, kFittedConstants) come from the "fit" figures of
// profiles/published/nccl_tests.json (FitModelConstants, tuner/published.h); the remaining figures
// are held out and `ciuic-tune topologies` prints both errors apart. A test asserts these values
// equal the fit.
//
// Measured constants (this repository's bench/results, not published figures):
//   GPU kernel fixed cost 6 µs per launch: an H100's bf16 cast, event-timed, took 7.2 µs at
//     1 MiB and 10.4 µs at 4 MiB (bench/results/2026-11-22-h100-codecs): ~6 µs plus streaming.
//   Runtime step 12.4 µs on a GPU: the runtime's ring, rd and hier exchange each step as one
//     grouped ncclSend/ncclRecv (collectives/algorithms/hops.cc, Exchange); one such group on
//     an H100 (one rank sending to itself) took 12.4–13.8 µs at 1–32 KiB
//     (bench/results/2026-11-22-h100-nccl/sendrecv-fp32.txt); the link's hop latency comes on top.
//   Codec kernel rate: a fraction of the device's datasheet memory bandwidth, in fp32 bytes per
//     pass, fitted on the H100 calibration's int8 and fp16 kernels (bench/results/
//     2026-11-22-h100-codecs/cuda-calibration.db); the other codecs are held out
//     (tests/tuner/cost_model_test.cc prints both). Top-k selection and PowerSGD's products count
//     several passes each (local_model.h KernelWorkFactor, measured at 64 MiB on the same
//     calibration; other sizes held out).
//   InfiniBand payload efficiency 64/66: the 64b/66b line encoding of the IBTA specification.
//   shared memory (cpu_local): the measured memcpy is already an effective rate (efficiency 1).
#include <cstddef>
#include <string>

#include "tuner/topology.h"

namespace ciuic {

constexpr double kGpuKernelLaunchUs = 6.0;  // see above
// NVLS runs NCCL's Simple protocol only; NCCL's own latency model puts its fixed cost at 23 µs
// against 6.6 µs for the LL ring (NVIDIA/nccl src/graph/tuning.cc, baseLat NVLS/NVLSTree Simple and
// Ring LL, NCCL 2.18-2.19), so NVLS costs the ring's or tree's latency plus the difference and NCCL
// keeps the LL algorithms for small messages.
constexpr double kNvlsExtraLatencyUs = 23.0 - 6.6;
constexpr double kGpuRuntimeStepUs = 12.4;  // see above
// Fraction of the datasheet memory bandwidth a codec kernel streams its fp32 input at (GPU), fitted
// as above; 0.85 of the measured memcpy on a CPU (no CPU fit: cpu_local is calibrated instead).
constexpr double kGpuCodecKernelBwFraction = 0.2934;
constexpr double kCpuCodecKernelBwFraction = 0.85;

// The constants fitted on published figures (tuner/published.h: FitModelConstants).
struct ModelConstants {
  double nvlink_efficiency = 0;  // ring busbw / NVLink (or PCIe) line rate per direction
  double nvls_efficiency = 0;    // NVLS: port rate NVLS reaches / line rate per direction
  double nccl_launch_us = 0;     // fixed cost of one NCCL collective (launch, LL handshake)
};
// Fitted on the "fit" figures of profiles/published/nccl_tests.json; tests/tuner/cost_model_test.cc
// asserts that refitting gives these values.
constexpr ModelConstants kFittedConstants{0.7942, 0.6864, 9.90};

struct LinkClass {
  double bw_gbps = 0;   // effective one-way bandwidth per rank (GB/s)
  double alpha_us = 0;  // per hop
};

struct Fabric {
  int nodes = 1, per_node = 1;
  LinkClass intra;           // between ranks of a node
  LinkClass inter;           // a rank's share of its node's NICs (rail-optimized: one NIC per rank)
  LinkClass flat_ring;       // the bottleneck of a ring spanning every rank
  double node_nic_gbps = 0;  // all NICs of a node together, after line encoding
  // The third level (Topology::HasSpine): groups of nodes_per_group nodes, each group's uplink
  // (all its nodes' spine shares, after line encoding) and one hop across the spine.
  int groups = 1, nodes_per_group = 1;
  double group_uplink_gbps = 0;
  double spine_alpha_us = 0;
  bool nvls = false;     // NVLink SHARP inside a node
  double nvls_gbps = 0;  // per-GPU port rate NVLS reaches
  // Fixed cost of one call of the library's allreduce (0 on cpu_local: MPI's, in the link's alpha).
  double nccl_launch_us = 0;
  // Fixed cost of one point-to-point step of the runtime (GPU: a grouped ncclSend/ncclRecv; CPU: in
  // the link's alpha).
  double step_us = 0;
};

Fabric EffectiveFabric(const Topology& t, const ModelConstants& c = kFittedConstants);
// The per-NIC line rate (Gb/s, the topology's nics.gbps) at which a node of `nics` NICs moves
// node_gb_per_s GB/s after EffectiveFabric's line encoding (a measured rate put back into a topology).
double NicGbpsFor(double node_gb_per_s, int nics);

enum class ModelAlgo {
  kRing,
  kRecursiveDoubling,
  kHierarchical,   // depth 2: intra-node, inter-node
  kHierarchical3,  // depth 3: intra-node, intra-group, across the spine (needs groups)
  kNcclRing,
  kNcclTree,
  kNcclNvls,
  kNcclNvlsTree,
  kNcclBest
};
const char* ModelAlgoName(ModelAlgo a);
// Whether the fabric offers an algorithm (NVLS needs NVLink SHARP and one node, NVLS-tree several;
// hier depth 3 a spine between groups of nodes).
bool Offers(const Fabric& f, ModelAlgo a);
// The NCCL algorithm kNcclBest picks for `bytes` (the fastest offered).
ModelAlgo NcclChoice(const Fabric& f, double bytes, double wire_ratio = 1.0);

// Predicted time (µs) of an allreduce of `bytes` per rank over every rank of the topology, with the
// wire shrunk by `wire_ratio` (uncompressed bytes / wire bytes; 1 = none) and `codec_us` of kernel
// time added (the runtime does not overlap codec kernels with the transfers they feed). An
// algorithm the fabric does not offer costs +inf.
double PredictAllReduceUs(const Fabric& f, ModelAlgo algo, double bytes, double wire_ratio = 1.0,
                          double codec_us = 0.0);
// busbw for a predicted time, as nccl-tests defines it: bytes / t × 2(P-1)/P.
double BusBwGbps(double bytes, int ranks, double time_us);
// GB/s of fp32 gradient one codec kernel pass streams on the topology's device (no calibration).
double CodecKernelGbps(const Topology& t);

}  // namespace ciuic
