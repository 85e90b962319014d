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
constexpr const char* kSchema = "ciuic.profile/1";

}  // namespace

std::vector<std::pair<uint64_t, uint64_t>> SizeBands() {
  return {{0, 64u << 10}, {64u << 10, 1u << 20}, {1u << 20, 16u << 20}, {16u << 20, 256u << 20}, {256u << 20, 0}};
}

const ProfileRule& Profile::RuleFor(uint64_t bytes, const std::string& op) const {
  for (const auto& r : rules)
    if (r.op == op && bytes >= r.min_bytes && (r.max_bytes == 0 || bytes < r.max_bytes)) return r;
  throw InputError(fmt::format("profile for {} has no {} rule for {} bytes", topology, op, bytes));
}

std::string ProfileToJson(const Profile& p) {
  json j;
  j["schema"] = kSchema;
  j["topology"] = {{"name", p.topology}, {"fingerprint", p.fingerprint}, {"nodes", p.nodes}, {"ranks", p.ranks},
                   {"device", p.Device()}};
  j["workload"] = p.workload;
  j["provenance"] = {{"tool_version", p.tool_version}, {"git_commit", p.git_commit}, {"created", p.created},
                     {"study_id", p.study_id},         {"mode", p.mode},             {"strategy", p.strategy},
                     {"seed", p.seed},                 {"budget", p.budget}};
  j["step"] = {{"predicted_us", p.step_us}, {"baseline_us", p.baseline_step_us}};
  j["rules"] = json::array();
  for (const auto& r : p.rules) {
    j["rules"].push_back({{"op", r.op},
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
                          {"gate", r.gate}});
  }
  return j.dump(2) + "\n";
}

Profile ParseProfile(const std::string& text, const std::string& origin) {
  const JsonDocument doc(text, "profile", origin);
  const JsonValue j = doc.Root();
  j.OnlyKeys({"schema", "topology", "workload", "provenance", "step", "rules"});
  const JsonValue schema = j["schema"];
  if (schema.String() != kSchema)
    schema.Fail(schema.String().rfind("ciuic.profile/", 0) == 0
                    ? fmt::format("{} is newer than this build reads ({})", schema.Text(), kSchema)
                    : fmt::format("{} is not a ciuic profile ({})", schema.Text(), kSchema));
  Profile p;
  const JsonValue t = j["topology"];
  t.OnlyKeys({"name", "fingerprint", "nodes", "ranks", "device"});
  p.topology = t["name"].NonEmptyString();
  if (t.Has("device")) p.device = t["device"].OneOf({"cpu", "gpu"});
  p.fingerprint = t["fingerprint"].NonEmptyString();
  p.nodes = static_cast<int>(t["nodes"].Integer(1, kMaxProfileNodes));
  p.ranks = static_cast<int>(t["ranks"].Integer(1, kMaxProfileRanks));
  if (p.ranks % p.nodes != 0)
    t["ranks"].Fail(fmt::format("{} ranks do not divide into {} nodes", p.ranks, p.nodes));
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
  const std::vector<JsonValue> rules = j["rules"].Elements();
  if (rules.empty()) j["rules"].Fail("a profile needs at least one rule");
  for (const JsonValue& r : rules) {
    r.OnlyKeys({"op", "min_bytes", "max_bytes", "algo", "codec", "streams", "bucket_bytes", "hierarchy_depth",
                "precision", "predicted_us", "measured_us", "baseline_us", "gate"});
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
      r["hierarchy_depth"].Fail(fmt::format("{} does not fit algo {} (depth 2 or 3 is hier's, 1 every other's)",
                                            x.hierarchy_depth, x.algo));
    const JsonValue precision = r["precision"];
    x.precision = precision.OneOf({"fp32", "bf16", "fp16"});
    if (x.precision != "fp32" && (x.algo != "nccl" || x.codec != "none"))
      precision.Fail(fmt::format("{} applies to algo nccl with codec none (the library's own allreduce); the "
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
    p.rules.push_back(x);
  }
  // Bands of one op may not overlap: a message size has exactly one rule.
  for (size_t a = 0; a < p.rules.size(); ++a) {
    for (size_t b = 0; b < a; ++b) {
      const ProfileRule &x = p.rules[a], &y = p.rules[b];
      const bool below = x.max_bytes != 0 && x.max_bytes <= y.min_bytes;
      const bool above = y.max_bytes != 0 && y.max_bytes <= x.min_bytes;
      if (x.op == y.op && !below && !above)
        rules[a].Fail(fmt::format("band [{}, {}) overlaps profile.rules[{}]'s [{}, {})", x.min_bytes,
                                  x.max_bytes ? std::to_string(x.max_bytes) : "inf", b, y.min_bytes,
                                  y.max_bytes ? std::to_string(y.max_bytes) : "inf"));
    }
  }
  return p;
}

Profile LoadProfile(const std::string& path) {
  Profile p = ParseProfile(ReadTextFile(path, "profile"), path);
  p.path = path;
  return p;
}

void WriteProfile(const std::string& path, const Profile& p) { WriteFileAtomically(path, ProfileToJson(p)); }

NcclTunerChoice NcclTunerChoiceFor(const ProfileRule& r, int nodes) {
  // A rule is ciuic's runtime's choice; NCCL can take its algorithm family, nothing else: codecs
  // and ciuic's own algorithms do not exist in NCCL, and no rule says which protocol or how many
  // channels (streams count ciuic's pieces in flight, not NCCL's CTAs).
  if (r.algo == "nccl")
    return {"", r.precision == "fp32" ? "the profile keeps NCCL's own allreduce here"
                                      : fmt::format("the profile keeps NCCL's own allreduce here, in {}; the framework "
                                                    "casts (ciuic-tune export --format ddp or deepspeed)",
                                                    r.precision)};
  if (r.codec != "none")
    return {"", fmt::format("codec {} is ciuic's own; NCCL cannot compress, the ciuic runtime applies it", r.codec)};
  if (r.algo == "ring") return {"Ring", "ciuic's ring is NCCL's Ring"};
  if (r.algo == "hier" && nodes > 1)
    return {"Tree", "NCCL's two-level algorithm, chains inside nodes and a tree across them, is the nearest to hier"};
  if (r.algo == "rd") return {"", "recursive doubling has no NCCL counterpart; NCCL's Tree is a chain inside a node"};
  return {"", fmt::format("{} over {} node(s) has no NCCL counterpart", r.algo, nodes)};
}

}  // namespace ciuic
