#include "collectives/profile.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/files.h"
#include "core/json_reader.h"
#include "core/sizes.h"
#include "kernels/codec_spec.h"

namespace ciuic {

namespace {

using nlohmann::json;
constexpr const char* kProfileSchema = "ciuic.profile/1";

}  // namespace

std::vector<std::pair<uint64_t, uint64_t>> SizeBands() {
  return {{0, 64u << 10}, {64u << 10, 1u << 20}, {1u << 20, 16u << 20}, {16u << 20, 256u << 20}, {256u << 20, 0}};
}

const ProfileRule& Profile::RuleFor(uint64_t bytes, const std::string& op) const {
  for (const auto& r : rules)
    if (r.op == op && bytes >= r.min_bytes && (r.max_bytes == 0 || bytes < r.max_bytes)) return r;
  throw InputError(fmt::format("profile for {} has no {} rule for {} bytes", topology, op, bytes));
}

namespace {

json NcclToJson(const NcclSettings& c) {
  auto or_null = [](const std::string& v) { return v.empty() ? json(nullptr) : json(v); };
  return {{"algo", or_null(c.algo)},
          {"proto", or_null(c.proto)},
          {"channels", c.channels},
          {"chunk_bytes", c.chunk_bytes},
          {"measured", c.measured},
          {"measured_us", c.measured_us < 0 ? json(nullptr) : json(c.measured_us)},
          {"default_us", c.default_us < 0 ? json(nullptr) : json(c.default_us)}};
}

json RuleToJson(const ProfileRule& r) {
  json j = {{"op", r.op},
            {"min_bytes", r.min_bytes},
            {"max_bytes", r.max_bytes},
            {"algo", r.algo},
            {"codec", r.codec},
            {"streams", r.streams},
            {"bucket_bytes", r.bucket_bytes},
            {"hierarchy_depth", r.hierarchy_depth},
            {"precision", r.precision},
            {"predicted_us", r.predicted_us},
            {"measured_us", r.measured_us < 0 ? json(nullptr) : json(r.measured_us)},
            {"baseline_us", r.baseline_us < 0 ? json(nullptr) : json(r.baseline_us)},
            {"gate", r.gate}};
  if (r.hierarchy_depth == 3) j["nodes_per_group"] = r.nodes_per_group;
  if (!r.nccl.Empty() || r.nccl.measured) j["nccl"] = NcclToJson(r.nccl);
  return j;
}

}  // namespace

std::string ProfileToJson(const Profile& p) {
  json j;
  j["schema"] = kProfileSchema;
  j["topology"] = {{"name", p.topology},
                   {"fingerprint", p.fingerprint},
                   {"nodes", p.nodes},
                   {"ranks", p.ranks},
                   {"device", p.Device()}};
  j["workload"] = p.workload;
  j["provenance"] = {{"tool_version", p.tool_version},
                     {"git_commit", p.git_commit},
                     {"created", p.created},
                     {"study_id", p.study_id},
                     {"mode", p.mode},
                     {"strategy", p.strategy},
                     {"seed", p.seed},
                     {"budget", p.budget}};
  j["step"] = {{"predicted_us", p.step_us}, {"baseline_us", p.baseline_step_us}};
  j["rules"] = json::array();
  for (const auto& r : p.rules) j["rules"].push_back(RuleToJson(r));
  if (!p.communicators.empty()) {
    j["communicators"] = json::array();
    for (const CommunicatorRules& c : p.communicators) {
      json rules = json::array();
      for (const auto& r : c.rules) rules.push_back(RuleToJson(r));
      j["communicators"].push_back({{"ranks", c.ranks}, {"nodes", c.nodes}, {"rules", rules}});
    }
  }
  if (!p.accumulation.Empty()) {
    json c = json::array();
    for (const AccumulationCandidate& x : p.accumulation.candidates)
      c.push_back({{"steps", x.steps}, {"step_us", x.step_us}, {"gate", x.gate}});
    j["accumulation"] = {{"suggested_steps", p.accumulation.steps},
                         {"codec", p.accumulation.codec},
                         {"priced", p.accumulation.priced},
                         {"candidates", c}};
  }
  return j.dump(2) + "\n";
}

double AccumulationAdvice::Gain() const {
  const AccumulationCandidate* one = nullptr;
  const AccumulationCandidate* chosen = nullptr;
  for (const auto& c : candidates) {
    if (c.steps == 1) one = &c;
    if (c.steps == steps) chosen = &c;
  }
  return one && chosen && chosen->step_us > 0 ? one->step_us / chosen->step_us : 1.0;
}

namespace {

// The accumulation advice: candidates with distinct steps, k = 1 first; the suggestion one of them
// and, above 1, one the gate passed.
AccumulationAdvice ParseAccumulation(const JsonValue& a) {
  a.OnlyKeys({"suggested_steps", "codec", "priced", "candidates"});
  AccumulationAdvice x;
  x.steps = static_cast<int>(a["suggested_steps"].Integer(1, kMaxAccumulationSteps));
  x.codec = a["codec"].NonEmptyString();
  x.priced = a["priced"].OneOf({"model", "measured"});
  const std::vector<JsonValue> items = a["candidates"].Elements();
  if (items.empty()) a["candidates"].Fail("the advice needs its candidates (k = 1 first)");
  bool found = false;
  for (const JsonValue& c : items) {
    c.OnlyKeys({"steps", "step_us", "gate"});
    AccumulationCandidate y;
    y.steps = static_cast<int>(c["steps"].Integer(1, kMaxAccumulationSteps));
    y.step_us = c["step_us"].Number(0, kMaxProfileUs);
    y.gate = c["gate"].OneOf({"passed", "failed", "n/a"});
    if (x.candidates.empty() && y.steps != 1)
      c["steps"].Fail("the first candidate is k = 1 (every micro-batch synced)");
    for (const auto& z : x.candidates)
      if (z.steps == y.steps) c["steps"].Fail(fmt::format("a second candidate for {} steps", y.steps));
    if (y.steps == x.steps) {
      found = true;
      if (y.steps > 1 && y.gate != "passed")
        a["suggested_steps"].Fail(fmt::format("{} steps did not pass the accuracy gate (gate {})", y.steps, y.gate));
    }
    x.candidates.push_back(y);
  }
  if (!found) a["suggested_steps"].Fail(fmt::format("{} steps is not one of the candidates", x.steps));
  return x;
}

// NCCL's settings of a rule: each a value or null (NCCL's own); a measured choice names at least one.
NcclSettings ParseNccl(const JsonValue& n) {
  n.OnlyKeys({"algo", "proto", "channels", "chunk_bytes", "measured", "measured_us", "default_us"});
  NcclSettings c;
  auto one_of = [](const JsonValue& v, const std::vector<std::string>& names) {
    if (v.IsNull()) return std::string();
    const std::string s = v.String();
    if (std::find(names.begin(), names.end(), s) == names.end())
      v.Fail(fmt::format("{} is not one of {} (or null: NCCL's own)", v.Text(), fmt::join(names, ", ")));
    return s;
  };
  c.algo = one_of(n["algo"], NcclAlgorithms());
  c.proto = one_of(n["proto"], NcclProtocols());
  c.channels = static_cast<int>(n["channels"].Integer(0, kMaxNcclChannels));
  c.chunk_bytes = n["chunk_bytes"].Size(0, kMaxBucketBytes);
  c.measured = n["measured"].Bool();
  if (!n["measured_us"].IsNull()) c.measured_us = n["measured_us"].Number(0, kMaxProfileUs);
  if (!n["default_us"].IsNull()) c.default_us = n["default_us"].Number(0, kMaxProfileUs);
  if (c.proto.size() && c.algo.empty())
    n["proto"].Fail("a protocol needs its algorithm (NCCL takes the pair; null both to leave them to NCCL)");
  if ((c.algo == "nvls" || c.algo == "nvls_tree") && c.proto.size() && c.proto != "simple")
    n["proto"].Fail(fmt::format("NCCL runs {} with the simple protocol only", c.algo));
  if (c.measured && c.Empty()) n["measured"].Fail("a measured choice names an algorithm, channels or a chunk size");
  if (c.measured && c.measured_us < 0) n["measured_us"].Fail("a measured choice needs its time");
  return c;
}

// A rules array: each band of one op once, for a communicator spanning `nodes` nodes.
std::vector<ProfileRule> ParseRules(const JsonValue& array, int nodes) {
  const std::vector<JsonValue> rules = array.Elements();
  if (rules.empty()) array.Fail("a profile needs at least one rule");
  std::vector<ProfileRule> out;
  for (const JsonValue& r : rules) {
    r.OnlyKeys({"op", "min_bytes", "max_bytes", "algo", "codec", "streams", "bucket_bytes", "hierarchy_depth",
                "nodes_per_group", "precision", "predicted_us", "measured_us", "baseline_us", "gate", "nccl"});
    ProfileRule x;
    x.op = r["op"].OneOf({"allreduce"});
    x.min_bytes = r["min_bytes"].Size(0, kMaxProfileBandBytes);
    x.max_bytes = r["max_bytes"].Size(0, kMaxProfileBandBytes);
    if (x.max_bytes != 0 && x.max_bytes <= x.min_bytes)
      r["max_bytes"].Fail(fmt::format("{} is not above min_bytes {} (0: no upper bound)", x.max_bytes, x.min_bytes));
    x.algo = r["algo"].OneOf({"ring", "rd", "hier", "sparse", "sign2", "powersgd", "nccl"});
    const JsonValue codec = r["codec"];
    x.codec = codec.String();
    try {
      ParseCodec(x.codec);
    } catch (const Error& e) {
      codec.Fail(e.what());
    }
    x.streams = static_cast<int>(r["streams"].Integer(1, kMaxStreams));
    x.bucket_bytes = r["bucket_bytes"].Size(kMinBucketBytes, kMaxBucketBytes);
    x.hierarchy_depth = static_cast<int>(r["hierarchy_depth"].Integer(1, 3));
    if ((x.hierarchy_depth > 1) != (x.algo == "hier"))
      r["hierarchy_depth"].Fail(
          fmt::format("{} does not fit algo {} (depth 2 or 3 is hier's, 1 every other's)", x.hierarchy_depth, x.algo));
    // Depth 3 needs its group size (nodes per group, dividing the profile's nodes into several groups).
    if (x.hierarchy_depth == 3) {
      const JsonValue g = r["nodes_per_group"];
      x.nodes_per_group = static_cast<int>(g.Integer(2, kMaxProfileNodes));
      if (nodes % x.nodes_per_group != 0 || nodes == x.nodes_per_group)
        g.Fail(fmt::format("{} nodes do not form several groups of {}", nodes, x.nodes_per_group));
    } else if (r.Has("nodes_per_group")) {
      r["nodes_per_group"].Fail(
          fmt::format("applies to hierarchy_depth 3 only (this rule's is {})", x.hierarchy_depth));
    }
    const JsonValue precision = r["precision"];
    x.precision = precision.OneOf({"fp32", "bf16", "fp16"});
    if (x.precision != "fp32" && (x.algo != "nccl" || x.codec != "none"))
      precision.Fail(
          fmt::format("{} applies to algo nccl with codec none (the library's own allreduce); the "
                      "runtime's algorithms accumulate in fp32",
                      x.precision));
    x.predicted_us = r["predicted_us"].Number(0, kMaxProfileUs);
    const JsonValue measured = r["measured_us"];
    x.measured_us = measured.IsNull() ? -1 : measured.Number(0, kMaxProfileUs);
    if (r.Has("baseline_us")) {  // optional: profiles before it lack the key
      const JsonValue base = r["baseline_us"];
      x.baseline_us = base.IsNull() ? -1 : base.Number(0, kMaxProfileUs);
    }
    x.gate = r["gate"].OneOf({"passed", "failed", "n/a"});
    if (r.Has("nccl")) {
      if (x.algo != "nccl" || x.codec != "none")
        r["nccl"].Fail(fmt::format(
            "NCCL's own settings apply to algo nccl with codec none (this rule: {} with codec {})", x.algo, x.codec));
      x.nccl = ParseNccl(r["nccl"]);
    }
    out.push_back(x);
  }
  // Bands of one op may not overlap: a message size has exactly one rule.
  for (size_t a = 0; a < out.size(); ++a) {
    for (size_t b = 0; b < a; ++b) {
      const ProfileRule &x = out[a], &y = out[b];
      const bool below = x.max_bytes != 0 && x.max_bytes <= y.min_bytes;
      const bool above = y.max_bytes != 0 && y.max_bytes <= x.min_bytes;
      if (x.op == y.op && !below && !above)
        rules[a].Fail(fmt::format("band [{}, {}) overlaps {}[{}]'s [{}, {})", x.min_bytes,
                                  x.max_bytes ? std::to_string(x.max_bytes) : "inf", array.path(), b, y.min_bytes,
                                  y.max_bytes ? std::to_string(y.max_bytes) : "inf"));
    }
  }
  // And they leave no size without one: from 0 on, each band starts where the one below it ends and the
  // last has no end (a size in a gap would fail mid-run, not here).
  std::vector<size_t> order(out.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return out[a].op != out[b].op ? out[a].op < out[b].op : out[a].min_bytes < out[b].min_bytes;
  });
  for (size_t k = 0; k < order.size(); ++k) {
    const ProfileRule& x = out[order[k]];
    const bool first = k == 0 || out[order[k - 1]].op != x.op;
    const bool last = k + 1 == order.size() || out[order[k + 1]].op != x.op;
    const uint64_t from = first ? 0 : out[order[k - 1]].max_bytes;
    if (x.min_bytes != from)
      rules[order[k]].Fail(
          fmt::format("band [{}, {}) leaves {} sizes from {} to {} without a rule (an op's bands "
                      "cover every size from 0)",
                      x.min_bytes, x.max_bytes ? std::to_string(x.max_bytes) : "inf", x.op, from, x.min_bytes));
    if (last && x.max_bytes != 0)
      rules[order[k]].Fail(
          fmt::format("band [{}, {}) is {}'s last: sizes from {} have no rule (max_bytes 0: no "
                      "upper bound)",
                      x.min_bytes, x.max_bytes, x.op, x.max_bytes));
  }
  return out;
}

}  // namespace

Profile ParseProfile(const std::string& text, const std::string& origin) {
  const JsonDocument doc(text, "profile", origin);
  const JsonValue j = doc.Root();
  j.OnlyKeys({"schema", "topology", "workload", "provenance", "step", "rules", "communicators", "accumulation"});
  const JsonValue schema = j["schema"];
  if (schema.String() != kProfileSchema)
    schema.Fail(schema.String().rfind("ciuic.profile/", 0) == 0
                    ? fmt::format("{} is newer than this build reads ({})", schema.Text(), kProfileSchema)
                    : fmt::format("{} is not a ciuic profile ({})", schema.Text(), kProfileSchema));
  Profile p;
  const JsonValue t = j["topology"];
  t.OnlyKeys({"name", "fingerprint", "nodes", "ranks", "device"});
  p.topology = t["name"].NonEmptyString();
  if (t.Has("device")) p.device = t["device"].OneOf({"cpu", "gpu"});
  p.fingerprint = t["fingerprint"].NonEmptyString();
  p.nodes = static_cast<int>(t["nodes"].Integer(1, kMaxProfileNodes));
  p.ranks = static_cast<int>(t["ranks"].Integer(1, kMaxProfileRanks));
  if (p.ranks % p.nodes != 0) t["ranks"].Fail(fmt::format("{} ranks do not divide into {} nodes", p.ranks, p.nodes));
  p.workload = j["workload"].NonEmptyString();
  const JsonValue v = j["provenance"];
  v.OnlyKeys({"tool_version", "git_commit", "created", "study_id", "mode", "strategy", "seed", "budget"});
  p.tool_version = v["tool_version"].String();
  p.git_commit = v["git_commit"].String();
  p.created = v["created"].String();
  p.study_id = v["study_id"].Integer(0, INT64_MAX);
  p.mode = v["mode"].OneOf({"model", "measure"});
  p.strategy = v["strategy"].OneOf({"grid", "random", "cd", "bayes"});
  p.seed = v["seed"].Unsigned(0, UINT64_MAX);
  p.budget = static_cast<int>(v["budget"].Integer(0, INT32_MAX));
  const JsonValue s = j["step"];
  s.OnlyKeys({"predicted_us", "baseline_us"});
  p.step_us = s["predicted_us"].Number(0, kMaxProfileUs);
  p.baseline_step_us = s["baseline_us"].Number(0, kMaxProfileUs);
  p.rules = ParseRules(j["rules"], p.nodes);
  if (j.Has("communicators")) {
    for (const JsonValue& c : j["communicators"].Elements()) {
      c.OnlyKeys({"ranks", "nodes", "rules"});
      CommunicatorRules x;
      x.nodes = static_cast<int>(c["nodes"].Integer(1, kMaxProfileNodes));
      x.ranks = static_cast<int>(c["ranks"].Integer(1, kMaxProfileRanks));
      if (x.ranks % x.nodes != 0)
        c["ranks"].Fail(fmt::format("{} ranks do not divide into {} nodes", x.ranks, x.nodes));
      if (x.ranks == p.ranks && x.nodes == p.nodes)
        c["ranks"].Fail(
            fmt::format("{} ranks on {} node(s) is the profile's own world (profile.rules)", x.ranks, x.nodes));
      for (const CommunicatorRules& y : p.communicators)
        if (y.ranks == x.ranks && y.nodes == x.nodes)
          c["ranks"].Fail(fmt::format("a second entry for {} ranks on {} node(s)", x.ranks, x.nodes));
      x.rules = ParseRules(c["rules"], x.nodes);
      const std::vector<JsonValue> items = c["rules"].Elements();
      for (size_t i = 0; i < x.rules.size(); ++i)
        if (x.rules[i].algo != "nccl" || x.rules[i].codec != "none")
          items[i]["algo"].Fail(
              fmt::format("{} with codec {}: rules for other communicators steer NCCL's own "
                          "allreduce (algo nccl, codec none) through the tuner plugin",
                          x.rules[i].algo, x.rules[i].codec));
      p.communicators.push_back(std::move(x));
    }
  }
  if (j.Has("accumulation")) p.accumulation = ParseAccumulation(j["accumulation"]);
  return p;
}

Profile LoadProfile(const std::string& path) {
  Profile p = ParseProfile(ReadTextFile(path, "profile"), path);
  p.path = path;
  return p;
}

void WriteProfile(const std::string& path, const Profile& p) { WriteFileAtomically(path, ProfileToJson(p)); }

std::vector<std::string> NcclAlgorithms() {
  return {"ring", "tree", "collnet_direct", "collnet_chain", "nvls", "nvls_tree", "pat"};
}
std::vector<std::string> NcclProtocols() { return {"ll", "ll128", "simple"}; }

std::string NcclAlgoEnvName(const std::string& algo) {
  static const std::pair<const char*, const char*> names[] = {{"ring", "Ring"},
                                                              {"tree", "Tree"},
                                                              {"collnet_direct", "CollnetDirect"},
                                                              {"collnet_chain", "CollnetChain"},
                                                              {"nvls", "NVLS"},
                                                              {"nvls_tree", "NVLSTree"},
                                                              {"pat", "PAT"}};
  for (const auto& [ours, nccls] : names)
    if (algo == ours) return nccls;
  throw UsageError(fmt::format("{} is not an NCCL algorithm ({})", algo, fmt::join(NcclAlgorithms(), ", ")));
}

std::string NcclProtoEnvName(const std::string& proto) {
  if (proto == "ll") return "LL";
  if (proto == "ll128") return "LL128";
  if (proto == "simple") return "Simple";
  throw UsageError(fmt::format("{} is not an NCCL protocol ({})", proto, fmt::join(NcclProtocols(), ", ")));
}

const std::vector<ProfileRule>* RulesForCommunicator(const Profile& p, int64_t ranks, int64_t nodes) {
  if (ranks == p.ranks && nodes == p.nodes) return &p.rules;
  for (const CommunicatorRules& c : p.communicators)
    if (ranks == c.ranks && nodes == c.nodes) return &c.rules;
  return nullptr;
}

std::string DescribeNcclSettings(const NcclSettings& c) {
  std::vector<std::string> parts;
  if (!c.algo.empty()) parts.push_back(c.proto.empty() ? c.algo : c.algo + "/" + c.proto);
  if (c.channels > 0) parts.push_back(fmt::format("{} channels", c.channels));
  if (c.chunk_bytes > 0) parts.push_back("chunk " + FormatSize(c.chunk_bytes));
  return parts.empty() ? "NCCL's own" : fmt::format("{}", fmt::join(parts, ", "));
}

NcclTunerChoice NcclTunerChoiceFor(const ProfileRule& r) {
  // The plugin steers NCCL only where NCCL ran under the setting and was timed faster: a rule of
  // ciuic's runtime (its ring, rd, hier, a codec) says nothing about NCCL's algorithms, and the cost
  // model's advice on NCCL's axis was never checked against NCCL.
  NcclTunerChoice out;
  if (r.algo != "nccl")
    out.why = r.codec != "none"
                  ? fmt::format("{} with codec {} runs in ciuic's runtime; NCCL cannot compress", r.algo, r.codec)
                  : fmt::format(
                        "{} is ciuic's runtime's algorithm; no measurement of NCCL's algorithms "
                        "stands behind this band",
                        r.algo);
  else if (r.nccl.Empty())
    out.why = r.precision == "fp32" ? "the profile keeps NCCL's own allreduce and its own settings here"
                                    : fmt::format(
                                          "the profile keeps NCCL's own allreduce here, in {} (the framework "
                                          "casts: ciuic-tune export --format ddp or deepspeed)",
                                          r.precision);
  else if (!r.nccl.measured)
    out.why = fmt::format(
        "{} is the cost model's advice, never timed with NCCL (ciuic-tune --mode measure "
        "--transport nccl times it)",
        DescribeNcclSettings(r.nccl));
  else {
    out.apply = true;
    out.choice = r.nccl;
    out.why = r.nccl.default_us >= 0 ? fmt::format("measured {:.1f} us against NCCL's own {:.1f} us",
                                                   r.nccl.measured_us, r.nccl.default_us)
                                     : fmt::format("measured {:.1f} us", r.nccl.measured_us);
  }
  return out;
}

}  // namespace ciuic
