#pragma once
// Topologies (`ciuic.topology/1`): the hardware the tuner models. Loaded strictly: unknown keys,
// missing fields, out-of-range numbers, a newer schema and a number without a source are InputError.
// Measured figures to validate the model against are not part of a topology: they live apart, in
// profiles/published/nccl_tests.json (tuner/published.h), so no model input is taken from them.
// `cpu_local` is detected (hwloc: sockets, cores, NUMA nodes) with a measured memcpy bandwidth.
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace ciuic {

// Limits of a topology's counts (and of --nodes).
constexpr int kMaxNodes = 100000;
constexpr int kMaxDevicesPerNode = 4096;

struct TopologyDevice {
  std::string name;
  double memory_gib = 0;
  double memory_bw_gbps = 0;
  double peak_tflops_bf16 = 0;
};

struct TopologyLink {
  std::string fabric;  // nvswitch | nvlink | pcie | shm | infiniband | ethernet
  double bw_gbps = 0;  // per device, one direction (GB/s)
  double latency_us = 0;
  bool nvls = false;
};

struct TopologyNics {
  int count = 0;
  double gbps = 0;  // per NIC, Gb/s
  double latency_us = 0;
  bool rail_optimized = false;
};

// An optional third level: nodes in groups (racks, pods) behind an oversubscribed spine. A group's
// nodes reach one another through their NICs (a leaf switch); traffic between groups crosses the
// spine, where each node gets `gbps_per_node` (the group's uplink shared by its nodes) and each hop
// adds `latency_us` to the NICs' latency.
struct TopologySpine {
  int nodes_per_group = 0;   // fan-in; 0: no third level
  double gbps_per_node = 0;  // Gb/s per node across the spine, all nodes of a group sending at once
  double latency_us = 0;     // added per hop that crosses the spine
};

struct Topology {
  std::string name;
  int nodes = 1;
  int devices_per_node = 1;
  TopologyDevice device;
  TopologyLink intra;
  TopologyNics nics;
  TopologySpine spine;                         // nodes_per_group 0: two levels
  std::map<std::string, std::string> sources;  // field -> where the number comes from
  std::string origin;                          // file path or "detected"
  std::set<std::string> live;                  // fields measured when loaded (cpu_local): not fingerprinted

  int ranks() const { return nodes * devices_per_node; }
  // Whether the nodes form several groups behind a spine (the third level hier depth 3 runs on).
  bool HasSpine() const { return spine.nodes_per_group > 0 && nodes > spine.nodes_per_group; }
  // Nodes fill whole groups, or fit in one (--nodes below the fan-in).
  int groups() const { return HasSpine() ? nodes / spine.nodes_per_group : 1; }
  // Stable hash of what defines the topology (counts, device name, fabric, NICs, the spine where there
  // is one, and the figures a file gives; not sources, nor `live` measurements): keys stored results and resumed
  // studies.
  std::string Fingerprint() const;
};

// Names of the built-in topologies (profiles/topologies/*.json plus cpu_local).
std::vector<std::string> BuiltinTopologies();
// NAME (built-in) or a path to a JSON file. `nodes` > 0 overrides the node count.
Topology LoadTopology(const std::string& name_or_path, int nodes = 0);
Topology ParseTopology(const std::string& json_text, const std::string& origin);
// This machine: hwloc counts and a measured single-core memcpy bandwidth.
Topology DetectCpuLocal();
// Folder of the built-in profiles (CIUIC_PROFILES_DIR, else the source tree's profiles/).
std::string ProfilesDir();

}  // namespace ciuic
