#include "tuner/nccl_axis.h"

#include <cmath>
#include <limits>
#include <sstream>

#include <fmt/format.h>

#include "core/error.h"
#include "core/sizes.h"
#include "tuner/bench_runner.h"
#include "tuner/cost_model.h"

namespace ciuic {

namespace {

bool OnNcclsAllreduce(const ProfileRule& r) { return r.algo == "nccl" && r.codec == "none"; }

// The profile's name of the NCCL algorithm the model picks ("" for a runtime algorithm).
std::string ProfileAlgo(ModelAlgo a) {
  switch (a) {
    case ModelAlgo::kNcclRing:
      return "ring";
    case ModelAlgo::kNcclTree:
      return "tree";
    case ModelAlgo::kNcclNvls:
      return "nvls";
    case ModelAlgo::kNcclNvlsTree:
      return "nvls_tree";
    default:
      return "";
  }
}

// The protocols NCCL runs an algorithm with (NVLS and CollNet: Simple only).
std::vector<std::string> ProtocolsOf(const std::string& algo) {
  if (algo == "nvls" || algo == "nvls_tree" || algo == "collnet_direct" || algo == "collnet_chain") return {"simple"};
  return NcclProtocols();
}

}  // namespace

uint64_t NcclAxisBandBytes(uint64_t lo, uint64_t hi) {
  if (hi == 0) return std::max<uint64_t>(2 * lo, 8);
  if (lo == 0) return std::max<uint64_t>(hi / 2, 8);
  const double mid = std::sqrt(static_cast<double>(lo) * static_cast<double>(hi));
  return uint64_t{1} << static_cast<int>(std::lround(std::log2(mid)));
}

void AdviseNcclAxis(Profile& p, const Topology& t) {
  const Fabric f = EffectiveFabric(t);
  for (ProfileRule& r : p.rules) {
    if (!OnNcclsAllreduce(r) || r.nccl.measured) continue;
    const std::string algo = ProfileAlgo(NcclChoice(f, static_cast<double>(NcclAxisBandBytes(r.min_bytes, r.max_bytes)),
                                                    r.precision == "fp32" ? 1.0 : 2.0));
    if (algo.empty()) continue;
    r.nccl = NcclSettings{};
    r.nccl.algo = algo;
  }
}

NcclTimer BenchNcclTimer(int ranks) {
  return [ranks](const NcclSettings& s, uint64_t bytes, std::string* failure) {
    std::string args =
        fmt::format("allreduce --backend nccl --sizes {} --ranks {} --inplace yes --iters 20 --warmup 5", bytes, ranks);
    if (!s.algo.empty()) args += " --nccl-algo " + s.algo;
    if (!s.proto.empty()) args += " --nccl-proto " + s.proto;
    if (s.channels > 0) args += fmt::format(" --nccl-channels {}", s.channels);
    try {
      const double us = BenchP50Us(RunBenchJson(args), static_cast<double>(bytes));
      if (!std::isfinite(us) && failure) *failure = "no row of that size in its results";
      return us;
    } catch (const Error& e) {
      if (failure) *failure = e.what();
      return std::numeric_limits<double>::infinity();
    }
  };
}

Profile MeasureNcclAxis(const Profile& p, const NcclAxisOptions& o, const NcclTimer& time, std::ostream& out_log) {
  // Written out once NCCL ran at all: where it never did, the refusal is the only line.
  std::ostringstream log;
  const int ranks = o.ranks > 0 ? o.ranks : p.ranks;
  const int nodes = o.nodes > 0 ? o.nodes : (o.ranks > 0 ? 1 : p.nodes);
  if (ranks % nodes != 0) throw UsageError(fmt::format("{} ranks do not divide into {} nodes", ranks, nodes));
  Profile out = p;
  std::vector<ProfileRule>* rules = nullptr;
  if (ranks == p.ranks && nodes == p.nodes) {
    rules = &out.rules;
  } else {
    for (CommunicatorRules& c : out.communicators)
      if (c.ranks == ranks && c.nodes == nodes) rules = &c.rules;
    if (rules == nullptr) {  // a new communicator: the profile's size bands, each on NCCL's allreduce
      CommunicatorRules c;
      c.ranks = ranks;
      c.nodes = nodes;
      for (const auto& [lo, hi] : SizeBands()) {
        ProfileRule r;
        r.min_bytes = lo;
        r.max_bytes = hi;
        r.algo = "nccl";
        r.codec = "none";
        r.bucket_bytes = p.rules.back().bucket_bytes;
        c.rules.push_back(r);
      }
      out.communicators.push_back(std::move(c));
      rules = &out.communicators.back().rules;
    }
  }
  log << fmt::format("nccl-axis: NCCL's algorithm, protocol and channels for communicators of {} ranks on {} node(s)\n",
                     ranks, nodes);
  int measured = 0, tried = 0, failed = 0;
  std::string first_failure;
  for (ProfileRule& r : *rules) {
    const std::string band =
        fmt::format("[{}, {})", FormatSize(r.min_bytes), r.max_bytes ? FormatSize(r.max_bytes) : "inf");
    if (!OnNcclsAllreduce(r)) {
      log << fmt::format("nccl-axis: {} runs {} with codec {} in ciuic's runtime: not NCCL's\n", band, r.algo, r.codec);
      continue;
    }
    const uint64_t bytes = NcclAxisBandBytes(r.min_bytes, r.max_bytes);
    std::string why;
    const double base = time(NcclSettings{}, bytes, &why);
    ++tried;
    if (!std::isfinite(base)) {
      if (failed++ == 0) first_failure = why;
      log << fmt::format("nccl-axis: {} at {}: NCCL's default failed ({}): band left as it was\n", band,
                         FormatSize(bytes), why);
      continue;
    }
    NcclSettings best;
    double best_us = base;
    auto consider = [&](const NcclSettings& s) {
      std::string failure;
      const double us = time(s, bytes, &failure);
      log << fmt::format("nccl-axis: {} at {}: {:<28} {}\n", band, FormatSize(bytes), DescribeNcclSettings(s),
                         std::isfinite(us) ? fmt::format("{:.1f} us", us) : "not run: " + failure);
      if (us < best_us) best_us = us, best = s;
    };
    log << fmt::format("nccl-axis: {} at {}: {:<28} {:.1f} us\n", band, FormatSize(bytes), "NCCL's own", base);
    for (const std::string& algo : NcclAlgorithms()) {
      if (algo == "pat") continue;  // NCCL runs PAT for allgather and reducescatter only
      for (const std::string& proto : ProtocolsOf(algo)) {
        NcclSettings s;
        s.algo = algo;
        s.proto = proto;
        consider(s);
      }
    }
    const NcclSettings pair = best;
    for (const int ch : o.channels) {
      NcclSettings s = pair;
      s.channels = ch;
      consider(s);
    }
    r.nccl = NcclSettings{};
    if (!best.Empty() && best_us <= base * (1.0 - o.min_gain)) {
      r.nccl = best;
      r.nccl.measured = true;
      r.nccl.measured_us = best_us;
      r.nccl.default_us = base;
      ++measured;
      log << fmt::format("nccl-axis: {} -> {}: {:.1f} us against NCCL's own {:.1f} us\n", band,
                         DescribeNcclSettings(best), best_us, base);
    } else {
      log << fmt::format("nccl-axis: {} -> NCCL's own: nothing beat its {:.1f} us by {:.0f}%\n", band, base,
                         100 * o.min_gain);
    }
    if (r.measured_us < 0 && &out.rules != rules) r.measured_us = r.nccl.measured ? best_us : base;
  }
  if (tried > 0 && failed == tried)
    throw UsageError(
        fmt::format("nccl-axis: NCCL's allreduce did not run on {} ranks here ({}): NCCL's axis is timed "
                    "on the GPUs the profile is for",
                    ranks, first_failure));
  log << fmt::format("nccl-axis: {} band(s) measured faster than NCCL's own choice\n", measured);
  out_log << log.str();
  return out;
}

}  // namespace ciuic
