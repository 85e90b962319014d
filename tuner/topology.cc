#include "tuner/topology.h"

#include <hwloc.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/files.h"
#include "core/json_reader.h"
#include "core/timer.h"

namespace ciuic {

namespace {

constexpr const char* kTopologySchema = "ciuic.topology/1";

double MeasureMemcpyGbps() {
  const size_t bytes = 64u << 20;
  std::vector<char> a(bytes, 1), b(bytes, 2);
  std::vector<double> t;
  for (int i = 0; i < 7; ++i) {
    const double t0 = NowSeconds();
    std::memcpy(b.data(), a.data(), bytes);
    t.push_back(NowSeconds() - t0);
    a[static_cast<size_t>(i)] = b[static_cast<size_t>(i) + 1];
  }
  std::sort(t.begin(), t.end());
  return static_cast<double>(bytes) / t[t.size() / 2] / 1e9;
}

}  // namespace

std::string ProfilesDir() {
  if (std::string dir = FolderFromEnvironment("CIUIC_PROFILES_DIR"); !dir.empty()) return dir;
  return (std::filesystem::path(ShareDir()) / "profiles").string();
}

std::string Topology::Fingerprint() const {
  // What defines the hardware, not what was measured on it when loaded: a live figure (cpu_local's
  // memcpy bandwidth) differs on every run, and a fingerprint that moved with it would make every run
  // a new topology, so no interrupted study would ever resume.
  auto figure = [&](const char* field, double v) {
    return live.count(field) ? std::string("live") : fmt::format("{:.6g}", v);
  };
  std::string text = fmt::format(
      "{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}", nodes, devices_per_node, device.name,
      figure("device.memory_gib", device.memory_gib), figure("device.memory_bw_gbps", device.memory_bw_gbps),
      figure("device.peak_tflops_bf16", device.peak_tflops_bf16), intra.fabric,
      figure("intra.bw_gbps_per_device", intra.bw_gbps), figure("intra.latency_us", intra.latency_us), intra.nvls,
      nics.count, figure("nics.gbps", nics.gbps), figure("nics.latency_us", nics.latency_us), nics.rail_optimized);
  // Only where there is a spine: a two-level topology keeps the fingerprint it always had.
  if (spine.nodes_per_group > 0)
    text += fmt::format("|spine|{}|{}|{}", spine.nodes_per_group, figure("spine.gbps_per_node", spine.gbps_per_node),
                        figure("spine.latency_us", spine.latency_us));
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : text) h = (h ^ c) * 1099511628211ull;
  return fmt::format("{:016x}", h);
}

Topology ParseTopology(const std::string& text, const std::string& origin) {
  const JsonDocument doc(text, "topology", origin);
  const JsonValue j = doc.Root();
  if (j.Has("published"))
    j["published"].Fail(
        "no longer part of a topology: validation figures live in "
        "profiles/published/nccl_tests.json (ciuic.published/1), apart from model inputs");
  j.OnlyKeys({"schema", "name", "nodes", "devices_per_node", "device", "intra", "nics", "spine", "sources"});
  const JsonValue schema = j["schema"];
  if (schema.String() != kTopologySchema)
    schema.Fail(schema.String().rfind("ciuic.topology/", 0) == 0
                    ? fmt::format("{} is newer than this build reads ({})", schema.Text(), kTopologySchema)
                    : fmt::format("{} is not a ciuic topology ({})", schema.Text(), kTopologySchema));
  Topology t;
  t.origin = origin;
  t.name = j["name"].NonEmptyString();
  t.nodes = static_cast<int>(j["nodes"].Integer(1, kMaxNodes));
  t.devices_per_node = static_cast<int>(j["devices_per_node"].Integer(1, kMaxDevicesPerNode));
  const JsonValue d = j["device"];
  d.OnlyKeys({"name", "memory_gib", "memory_bw_gbps", "peak_tflops_bf16"});
  t.device.name = d["name"].NonEmptyString();
  t.device.memory_gib = d["memory_gib"].Number(0.001, 1e6);
  t.device.memory_bw_gbps = d["memory_bw_gbps"].Number(0.001, 1e6);
  t.device.peak_tflops_bf16 = d["peak_tflops_bf16"].Number(1e-6, 1e6);
  const JsonValue in = j["intra"];
  in.OnlyKeys({"fabric", "bw_gbps_per_device", "latency_us", "nvls"});
  t.intra.fabric = in["fabric"].OneOf({"nvswitch", "nvlink", "pcie", "shm"});
  t.intra.bw_gbps = in["bw_gbps_per_device"].Number(1e-3, 1e5);
  t.intra.latency_us = in["latency_us"].Number(0, 1e6);
  t.intra.nvls = in["nvls"].Bool();
  const JsonValue n = j["nics"];
  n.OnlyKeys({"count", "gbps", "latency_us", "rail_optimized"});
  t.nics.count = static_cast<int>(n["count"].Integer(0, 64));
  t.nics.gbps = n["gbps"].Number(0, 1e5);
  if (t.nics.count > 0 && !(t.nics.gbps > 0))  // 0 only where there are no NICs: else every time is infinite
    n["gbps"].Fail(fmt::format("{} NIC(s) at 0 Gb/s: give their rate (above 0)", t.nics.count));
  t.nics.latency_us = n["latency_us"].Number(0, 1e6);
  t.nics.rail_optimized = n["rail_optimized"].Bool();
  if (j.Has("spine")) {
    const JsonValue sp = j["spine"];
    sp.OnlyKeys({"nodes_per_group", "gbps_per_node", "latency_us"});
    const JsonValue fan_in = sp["nodes_per_group"];
    t.spine.nodes_per_group = static_cast<int>(fan_in.Integer(2, kMaxNodes));
    t.spine.gbps_per_node = sp["gbps_per_node"].Number(1e-6, 1e5);
    t.spine.latency_us = sp["latency_us"].Number(0, 1e6);
    if (t.nodes > t.spine.nodes_per_group && t.nodes % t.spine.nodes_per_group != 0)
      fan_in.Fail(fmt::format("{} nodes do not divide into groups of {}", t.nodes, t.spine.nodes_per_group));
  }
  const JsonValue s = j["sources"];
  for (const auto& [k, v] : s.Members()) t.sources[k] = v.NonEmptyString();
  // Every number the model reads carries its source.
  std::vector<std::string> need = {"device.memory_bw_gbps", "device.peak_tflops_bf16", "intra.bw_gbps_per_device",
                                   "intra.latency_us"};
  if (t.intra.nvls) need.push_back("intra.nvls");  // NVLS changes the library's allreduce (cost_model.h)
  if (t.nics.count > 0) {
    need.push_back("nics.gbps");
    need.push_back("nics.latency_us");
  }
  if (t.spine.nodes_per_group > 0)
    for (const char* k : {"spine.nodes_per_group", "spine.gbps_per_node", "spine.latency_us"}) need.push_back(k);
  for (const auto& k : need)
    if (!t.sources.count(k)) s.Fail(fmt::format("no source for '{}' (add it to \"sources\")", k));
  if (t.nodes > 1 && t.nics.count == 0) n["count"].Fail(fmt::format("0 NICs cannot connect {} nodes", t.nodes));
  return t;
}

std::vector<std::string> BuiltinTopologies() {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(std::filesystem::path(ProfilesDir()) / "topologies", ec))
    if (e.path().extension() == ".json") names.push_back(e.path().stem().string());
  names.push_back("cpu_local");
  std::sort(names.begin(), names.end());
  return names;
}

Topology LoadTopology(const std::string& name_or_path, int nodes) {
  Topology t;
  if (name_or_path == "cpu_local") {
    t = DetectCpuLocal();
  } else if (name_or_path.find('/') != std::string::npos || name_or_path.find(".json") != std::string::npos) {
    t = ParseTopology(ReadTextFile(name_or_path, "topology"), name_or_path);
  } else {
    const auto path = std::filesystem::path(ProfilesDir()) / "topologies" / (name_or_path + ".json");
    if (!std::filesystem::exists(path)) {
      std::string known;
      for (const auto& n : BuiltinTopologies()) known += (known.empty() ? "" : " ") + n;
      throw InputError(fmt::format("unknown topology '{}' (built-in: {}; or a path to a JSON file; looked in {})",
                                   name_or_path, known, PrintableLine(path.parent_path().string(), 4096)));
    }
    t = ParseTopology(ReadTextFile(path.string(), "topology"), path.string());
  }
  if (nodes > 0) {
    if (nodes > kMaxNodes) throw UsageError(fmt::format("--nodes {}: must be in 1..{}", nodes, kMaxNodes));
    if (nodes > 1 && t.nics.count == 0)
      throw InputError(fmt::format("--nodes {}: topology '{}' has no NICs between nodes", nodes, t.name));
    if (t.spine.nodes_per_group > 0 && nodes > t.spine.nodes_per_group && nodes % t.spine.nodes_per_group != 0)
      throw UsageError(fmt::format("--nodes {}: topology '{}' groups its nodes {} per spine group (a multiple of {})",
                                   nodes, t.name, t.spine.nodes_per_group, t.spine.nodes_per_group));
    t.nodes = nodes;
  }
  return t;
}

Topology DetectCpuLocal() {
  hwloc_topology_t topo;
  if (hwloc_topology_init(&topo) != 0 || hwloc_topology_load(topo) != 0)
    throw RuntimeError("hwloc could not read this machine's topology");
  const int sockets = std::max(1, hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PACKAGE));
  const int cores = std::max(1, hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE));
  const int numa = std::max(1, hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE));
  uint64_t mem = 0;
  if (hwloc_obj_t root = hwloc_get_root_obj(topo)) mem = root->total_memory;
  hwloc_topology_destroy(topo);
  const double copy = MeasureMemcpyGbps();
  Topology t;
  t.name = "cpu_local";
  t.origin = "detected";
  t.nodes = 1;
  t.devices_per_node = cores;
  t.device.name = fmt::format("{} socket(s), {} core(s), {} NUMA node(s)", sockets, cores, numa);
  t.device.memory_gib = static_cast<double>(mem) / (1u << 30);
  t.device.memory_bw_gbps = copy;
  t.device.peak_tflops_bf16 = 0.05 * cores;
  t.intra.fabric = "shm";
  t.intra.bw_gbps = copy;
  t.intra.latency_us = 1.0;
  t.live = {"device.memory_bw_gbps", "intra.bw_gbps_per_device"};
  t.sources = {{"device.memory_bw_gbps", fmt::format("measured: single-core memcpy of 64 MiB, {:.1f} GB/s", copy)},
               {"device.peak_tflops_bf16", "assumed: 0.05 TFLOPS per core (fp32 SIMD, sustained)"},
               {"intra.bw_gbps_per_device", "measured: single-core memcpy (a shared-memory message is one copy)"},
               {"intra.latency_us", "assumed: ~1 us shared-memory message latency; calibrate"},
               {"devices_per_node", "hwloc: cores"}};
  return t;
}

}  // namespace ciuic
