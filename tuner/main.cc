// ciuic-tune: the tuner's command line. Subcommands come from one table (which also makes the help).
// This build has `topologies` (built-ins, their numbers and the model's validation against the
// published busbw figures) and `model` (predicted allreduce time and busbw per algorithm and size).
#include <cxxopts.hpp>
#include <iostream>
#include <vector>

#include "core/config.h"
#include "core/error.h"
#include "core/log.h"
#include "core/sizes.h"
#include "tuner/cost_model.h"
#include "tuner/topology.h"

namespace ciuic {
namespace {

struct Subcommand {
  const char* name;
  const char* summary;
  int (*run)(const cxxopts::ParseResult&);
};

// Predicted large-message busbw of NCCL's ring next to the topology's published figures.
int Topologies(const cxxopts::ParseResult& r) {
  const int nodes = r["nodes"].as<int>();
  std::cout << fmt::format("# {:<10} {:>5} {:>4} {:>9} {:>9} {:>9}  {:<34} {:>9} {:>9} {:>7}\n", "topology", "nodes",
                           "dev", "intra", "nic", "mem", "device", "predicted", "published", "error");
  std::cout << fmt::format("# {:<10} {:>5} {:>4} {:>9} {:>9} {:>9}  {:<34} {:>9} {:>9} {:>7}\n", "", "", "", "(GB/s)",
                           "(Gb/s)", "(GB/s)", "", "busbw", "busbw", "");
  for (const std::string& name : BuiltinTopologies()) {
    const std::vector<int> node_counts = nodes > 0 ? std::vector<int>{nodes} : std::vector<int>{1, 2};
    for (int n : node_counts) {
      Topology t;
      try {
        t = LoadTopology(name, n);
      } catch (const InputError&) {
        if (n > 1) continue;  // no NICs: single node only
        throw;
      }
      const Fabric f = EffectiveFabric(t);
      const double bytes = 8.0 * (1u << 30);  // 8 GiB: the bandwidth-bound end of nccl-tests sweeps
      const double bus = BusBwGbps(bytes, t.ranks(), PredictAllReduceUs(f, ModelAlgo::kNcclRing, bytes));
      const char* key = n > 1 ? "allreduce_busbw_inter_per_nic_gbps" : "allreduce_busbw_intra_gbps";
      double published = -1;
      if (auto it = t.published.find(key); it != t.published.end())
        published = n > 1 ? it->second * t.nics.count : it->second;
      std::cout << fmt::format("  {:<10} {:>5} {:>4} {:>9.1f} {:>9.0f} {:>9.0f}  {:<34} {:>9.1f} {:>9} {:>7}\n", t.name,
                               t.nodes, t.devices_per_node, t.intra.bw_gbps, t.nics.gbps, t.device.memory_bw_gbps,
                               t.device.name.substr(0, 34), bus,
                               published > 0 ? fmt::format("{:.0f}", published) : "-",
                               published > 0 ? fmt::format("{:+.1f}%", 100 * (bus / published - 1)) : "-");
    }
  }
  std::cout << "# predicted: NCCL ring busbw at 8 GiB from the cost model; published: nccl-tests figures (sources in "
               "each topology file; 2 nodes: per-NIC figure x NICs)\n";
  return 0;
}

int Model(const cxxopts::ParseResult& r) {
  if (!r.count("topology")) throw UsageError("model: --topology NAME|FILE is required");
  const Topology t = LoadTopology(r["topology"].as<std::string>(), r["nodes"].as<int>());
  const Fabric f = EffectiveFabric(t);
  const auto sizes = ParseSizeList(r["sizes"].as<std::string>());
  std::cout << fmt::format("# ciuic-tune model  topology {}  nodes {}  ranks {}  fingerprint {}\n", t.name, t.nodes,
                           t.ranks(), t.Fingerprint());
  std::cout << fmt::format("# effective links: intra {:.1f} GB/s {:.1f} us; inter {:.1f} GB/s/rank {:.1f} us; flat ring "
                           "{:.1f} GB/s\n",
                           f.intra.bw_gbps, f.intra.alpha_us, f.inter.bw_gbps, f.inter.alpha_us, f.flat_ring.bw_gbps);
  const ModelAlgo algos[] = {ModelAlgo::kNcclBest, ModelAlgo::kRing, ModelAlgo::kRecursiveDoubling,
                             ModelAlgo::kHierarchical};
  std::string head = fmt::format("#{:>12}", "size");
  for (ModelAlgo a : algos) head += fmt::format(" {:>10} {:>8}", std::string(ModelAlgoName(a)) + "_us", "busbw");
  std::cout << head << "\n";
  for (uint64_t s : sizes) {
    std::string line = fmt::format(" {:>12}", s);
    for (ModelAlgo a : algos) {
      const double us = PredictAllReduceUs(f, a, static_cast<double>(s));
      line += fmt::format(" {:>10.1f} {:>8.1f}", us, BusBwGbps(static_cast<double>(s), t.ranks(), us));
    }
    std::cout << line << "\n";
  }
  return 0;
}

const Subcommand kSubcommands[] = {
    {"topologies", "built-in topologies, their numbers, and the model against published busbw", Topologies},
    {"model", "predicted uncompressed allreduce time and busbw per algorithm (--topology, --sizes)", Model},
};

int Run(int argc, char** argv) {
  std::string help = "Tune gradient communication.\n\nSubcommands:\n";
  for (const auto& s : kSubcommands) help += fmt::format("  {:<12} {}\n", s.name, s.summary);
  cxxopts::Options opts("ciuic-tune", help);
  opts.add_options()("topology", "NAME (see topologies) or a ciuic.topology/1 JSON file", cxxopts::value<std::string>())(
      "nodes", "override the topology's node count", cxxopts::value<int>()->default_value("0"))(
      "sizes", "message sizes for model", cxxopts::value<std::string>()->default_value("1K:8G:x8"))(
      "h,help", "this help")("version", "print the version")("command", "", cxxopts::value<std::string>());
  opts.parse_positional({"command"});
  cxxopts::ParseResult r;
  try {
    r = opts.parse(argc, argv);
  } catch (const cxxopts::exceptions::exception& e) {
    throw UsageError(e.what());
  }
  if (r.count("help")) {
    std::cout << opts.help() << "\n";
    return 0;
  }
  if (r.count("version")) {
    std::cout << "ciuic-tune " << CIUIC_VERSION << " (" << CIUIC_GIT_COMMIT << ")\n";
    return 0;
  }
  if (!r.unmatched().empty()) throw UsageError(fmt::format("unexpected argument '{}'", r.unmatched().front()));
  if (r["nodes"].as<int>() < 0) throw UsageError("--nodes must be >= 1");
  const std::string cmd = r.count("command") ? r["command"].as<std::string>() : "";
  for (const auto& s : kSubcommands)
    if (cmd == s.name) return s.run(r);
  std::string known;
  for (const auto& s : kSubcommands) known += std::string(known.empty() ? "" : ", ") + s.name;
  throw UsageError(cmd.empty() ? fmt::format("missing SUBCOMMAND (this build has: {})", known)
                               : fmt::format("unknown subcommand '{}' (this build has: {})", cmd, known));
}

}  // namespace
}  // namespace ciuic

int main(int argc, char** argv) {
  ciuic::SetLogPrefix("ciuic-tune");
  try {
    return ciuic::Run(argc, argv);
  } catch (const ciuic::Error& e) {
    ciuic::LogInfo("{}", e.what());
    return static_cast<int>(e.code());
  } catch (const std::exception& e) {
    ciuic::LogInfo("internal error: {}", e.what());
    return 2;
  }
}
