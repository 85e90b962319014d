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
#include "core/timer.h"

#ifndef CIUIC_SOURCE_PROFILES_DIR
#define CIUIC_SOURCE_PROFILES_DIR "profiles"
#endif

namespace ciuic {

namespace {

using nlohmann::json;

constexpr const char* kSchema = "ciuic.topology/1";

void OnlyKeys(const json& j, const std::set<std::string>& allowed, const std::string& where, const std::string& origin) {
  if (!j.is_object()) throw InputError(fmt::format("{}: '{}' must be an object", origin, where));
  for (const auto& [k, v] : j.items()) {
    if (!allowed.count(k)) throw InputError(fmt::format("{}: unknown key '{}{}'", origin, where.empty() ? "" : where + ".", k));
  }
}

const json& Field(const json& j, const std::string& key, const std::string& where, const std::string& origin) {
  if (!j.contains(key)) throw InputError(fmt::format("{}: missing '{}{}'", origin, where.empty() ? "" : where + ".", key));
  return j.at(key);
}

double Number(const json& j, const std::string& key, const std::string& where, const std::string& origin, double lo,
              double hi) {
  const json& v = Field(j, key, where, origin);
  const std::string path = where.empty() ? key : where + "." + key;
  if (!v.is_number()) throw InputError(fmt::format("{}: '{}' must be a number", origin, path));
  const double x = v.get<double>();
  if (!std::isfinite(x) || x < lo || x > hi)
    throw InputError(fmt::format("{}: '{}' = {} is outside {}..{}", origin, path, x, lo, hi));
  return x;
}

std::string String(const json& j, const std::string& key, const std::string& where, const std::string& origin) {
  const json& v = Field(j, key, where, origin);
  if (!v.is_string() || v.get<std::string>().empty())
    throw InputError(fmt::format("{}: '{}{}' must be a non-empty string", origin, where.empty() ? "" : where + ".", key));
  return v.get<std::string>();
}

bool Bool(const json& j, const std::string& key, const std::string& where, const std::string& origin) {
  const json& v = Field(j, key, where, origin);
  if (!v.is_boolean())
    throw InputError(fmt::format("{}: '{}{}' must be true or false", origin, where.empty() ? "" : where + ".", key));
  return v.get<bool>();
}

std::string ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw InputError(fmt::format("cannot read topology '{}'", path));
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

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
  if (const char* env = std::getenv("CIUIC_PROFILES_DIR")) return env;
  return CIUIC_SOURCE_PROFILES_DIR;
}

std::string Topology::Fingerprint() const {
  const std::string text =
      fmt::format("{}|{}|{:.6g}|{:.6g}|{:.6g}|{}|{:.6g}|{:.6g}|{}|{}|{:.6g}|{:.6g}|{}", nodes, devices_per_node,
                  device.memory_gib, device.memory_bw_gbps, device.peak_tflops_bf16, intra.fabric, intra.bw_gbps,
                  intra.latency_us, intra.nvls, nics.count, nics.gbps, nics.latency_us, nics.rail_optimized);
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : text) h = (h ^ c) * 1099511628211ull;
  return fmt::format("{:016x}", h);
}

Topology ParseTopology(const std::string& text, const std::string& origin) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    throw InputError(fmt::format("{}: not valid JSON ({})", origin, e.what()));
  }
  if (j.is_object() && j.contains("published"))
    throw InputError(fmt::format("{}: 'published' is no longer part of a topology: validation figures live in "
                                 "profiles/published/nccl_tests.json (ciuic.published/1), apart from model inputs",
                                 origin));
  OnlyKeys(j, {"schema", "name", "nodes", "devices_per_node", "device", "intra", "nics", "sources"}, "", origin);
  const std::string schema = String(j, "schema", "", origin);
  if (schema != kSchema) {
    if (schema.rfind("ciuic.topology/", 0) == 0)
      throw InputError(fmt::format("{}: schema '{}' is newer than this build reads ({})", origin, schema, kSchema));
    throw InputError(fmt::format("{}: schema '{}' is not a ciuic topology ({})", origin, schema, kSchema));
  }
  Topology t;
  t.origin = origin;
  t.name = String(j, "name", "", origin);
  t.nodes = static_cast<int>(Number(j, "nodes", "", origin, 1, 100000));
  t.devices_per_node = static_cast<int>(Number(j, "devices_per_node", "", origin, 1, 4096));
  const json& d = Field(j, "device", "", origin);
  OnlyKeys(d, {"name", "memory_gib", "memory_bw_gbps", "peak_tflops_bf16"}, "device", origin);
  t.device.name = String(d, "name", "device", origin);
  t.device.memory_gib = Number(d, "memory_gib", "device", origin, 0.001, 1e6);
  t.device.memory_bw_gbps = Number(d, "memory_bw_gbps", "device", origin, 0.001, 1e6);
  t.device.peak_tflops_bf16 = Number(d, "peak_tflops_bf16", "device", origin, 1e-6, 1e6);
  const json& in = Field(j, "intra", "", origin);
  OnlyKeys(in, {"fabric", "bw_gbps_per_device", "latency_us", "nvls"}, "intra", origin);
  t.intra.fabric = String(in, "fabric", "intra", origin);
  static const std::set<std::string> kFabrics = {"nvswitch", "nvlink", "pcie", "shm"};
  if (!kFabrics.count(t.intra.fabric))
    throw InputError(fmt::format("{}: intra.fabric '{}' is not one of nvswitch nvlink pcie shm", origin, t.intra.fabric));
  t.intra.bw_gbps = Number(in, "bw_gbps_per_device", "intra", origin, 1e-3, 1e5);
  t.intra.latency_us = Number(in, "latency_us", "intra", origin, 0, 1e6);
  t.intra.nvls = Bool(in, "nvls", "intra", origin);
  const json& n = Field(j, "nics", "", origin);
  OnlyKeys(n, {"count", "gbps", "latency_us", "rail_optimized"}, "nics", origin);
  t.nics.count = static_cast<int>(Number(n, "count", "nics", origin, 0, 64));
  t.nics.gbps = Number(n, "gbps", "nics", origin, 0, 1e5);
  t.nics.latency_us = Number(n, "latency_us", "nics", origin, 0, 1e6);
  t.nics.rail_optimized = Bool(n, "rail_optimized", "nics", origin);
  const json& s = Field(j, "sources", "", origin);
  if (!s.is_object()) throw InputError(fmt::format("{}: 'sources' must be an object", origin));
  for (const auto& [k, v] : s.items()) {
    if (!v.is_string() || v.get<std::string>().empty())
      throw InputError(fmt::format("{}: sources.{} must name where the number comes from", origin, k));
    t.sources[k] = v.get<std::string>();
  }
  // Every number the model reads carries its source.
  std::vector<std::string> need = {"device.memory_bw_gbps", "device.peak_tflops_bf16", "intra.bw_gbps_per_device",
                                   "intra.latency_us"};
  if (t.intra.nvls) need.push_back("intra.nvls");  // NVLS changes the library's allreduce (cost_model.h)
  if (t.nics.count > 0) {
    need.push_back("nics.gbps");
    need.push_back("nics.latency_us");
  }
  for (const auto& k : need)
    if (!t.sources.count(k)) throw InputError(fmt::format("{}: no source for '{}' (add it to \"sources\")", origin, k));
  if (t.nodes > 1 && t.nics.count == 0)
    throw InputError(fmt::format("{}: {} nodes but no NICs to connect them", origin, t.nodes));
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
    t = ParseTopology(ReadFile(name_or_path), name_or_path);
  } else {
    const auto path = std::filesystem::path(ProfilesDir()) / "topologies" / (name_or_path + ".json");
    if (!std::filesystem::exists(path)) {
      std::string known;
      for (const auto& n : BuiltinTopologies()) known += (known.empty() ? "" : " ") + n;
      throw InputError(fmt::format("unknown topology '{}' (built-in: {}; or a path to a JSON file)", name_or_path, known));
    }
    t = ParseTopology(ReadFile(path.string()), path.string());
  }
  if (nodes > 0) {
    if (nodes > 1 && t.nics.count == 0)
      throw InputError(fmt::format("--nodes {}: topology '{}' has no NICs between nodes", nodes, t.name));
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
  t.sources = {{"device.memory_bw_gbps", fmt::format("measured: single-core memcpy of 64 MiB, {:.1f} GB/s", copy)},
               {"device.peak_tflops_bf16", "assumed: 0.05 TFLOPS per core (fp32 SIMD, sustained)"},
               {"intra.bw_gbps_per_device", "measured: single-core memcpy (a shared-memory message is one copy)"},
               {"intra.latency_us", "assumed: ~1 us shared-memory message latency; calibrate"},
               {"devices_per_node", "hwloc: cores"}};
  return t;
}

}  // namespace ciuic
