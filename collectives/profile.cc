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
  j["topology"] = {{"name", p.topology}, {"fingerprint", p.fingerprint}, {"nodes", p.nodes}, {"ranks", p.ranks}};
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
  t.OnlyKeys({"name", "fingerprint", "nodes", "ranks"});
  p.topology = t["name"].NonEmptyString();
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
                "precision", "predicted_us", "measured_us", "gate"});
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

std::vector<std::string> ExportFormats() { return {"json", "nccl-env", "nccl-tuner", "ddp", "deepspeed", "horovod"}; }

namespace {

std::string BandName(const ProfileRule& r) {
  return fmt::format("band [{}, {})", FormatSize(r.min_bytes), r.max_bytes ? FormatSize(r.max_bytes) : "inf");
}

// Whether the ddp export runs python/ciuic's comm hook: the largest band's codec has no PyTorch
// built-in hook (none, fp16, bf16, powersgd). Otherwise PyTorch's own hook stays, which also runs on
// GPU buckets (ciuic's hook reduces CPU buckets only), with ciuic's as a commented alternative.
bool DdpNeedsCiuicHook(const Profile& p) {
  const ProfileRule& big = p.rules.back();
  const CodecKind k = ParseCodec(big.codec).kind;
  return !(k == CodecKind::kNone || k == CodecKind::kFp16 || k == CodecKind::kBf16 || k == CodecKind::kPowerSgd);
}

// A shell/Python-safe quoted path of the profile for an export (PROFILE.json when it has none).
std::string ProfilePathForExport(const Profile& p) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path profile = p.path.empty() ? fs::path("PROFILE.json") : fs::absolute(p.path, ec);
  if (ec) profile = p.path;
  return profile.lexically_normal().string();
}

std::string ExportBody(const Profile& p, const std::string& format);

}  // namespace

std::vector<std::string> UnexpressedChoices(const Profile& p, const std::string& format) {
  std::vector<std::string> out;
  if (format == "json" || p.rules.empty()) return out;
  const ProfileRule& big = p.rules.back();
  const auto same = [](const ProfileRule& a, const ProfileRule& b) {
    return a.algo == b.algo && a.codec == b.codec && a.precision == b.precision;
  };
  if (format == "nccl-tuner") {
    // Per band; only the bands whose choice is more than NCCL's own uncompressed allreduce are lost.
    for (const auto& r : p.rules) {
      const NcclTunerChoice c = NcclTunerChoiceFor(r, p.nodes);
      if (c.algo.empty() && (r.codec != "none" || r.precision != "fp32" || r.algo != "nccl"))
        out.push_back(fmt::format("{}: {} {} {}: {}", BandName(r), r.algo, r.codec, r.precision, c.why));
    }
    return out;
  }
  // DDP: a profile whose largest band's codec PyTorch has no hook for is exported as
  // ciuic.torch.comm_hook, which applies each band's rule per bucket.
  if (format == "ddp" && DdpNeedsCiuicHook(p)) {
    for (const auto& r : p.rules)
      if (r.codec == "none" && r.algo == "rd")
        out.push_back(fmt::format("{}: algorithm rd: DDP's process group runs its own allreduce", BandName(r)));
    return out;
  }
  // The other formats set global values: the largest band's choice (what gradient buckets look like).
  for (const auto& r : p.rules) {
    if (&r == &big || same(r, big)) continue;
    out.push_back(fmt::format("{}: {} codec {} in {}: {} settings are global; the largest band's choice ({} codec {} "
                              "in {}) applies to every size",
                              BandName(r), r.algo, r.codec, r.precision, format, big.algo, big.codec, big.precision));
  }
  const CodecKind k = ParseCodec(big.codec).kind;
  const std::string band = BandName(big);
  const bool dedicated_algo = big.algo != "nccl" && big.algo != "ring" && big.algo != "rd";
  if (format == "nccl-env") {
    if (k != CodecKind::kNone)
      out.push_back(fmt::format("{}: codec {}: NCCL cannot compress (the ciuic runtime or its DDP hook runs it)", band,
                                big.codec));
    if (big.precision != "fp32")
      out.push_back(fmt::format("{}: reduction in {}: NCCL has no variable for it (the framework casts)", band,
                                big.precision));
    if (dedicated_algo)
      out.push_back(fmt::format("{}: algorithm {} is ciuic's; NCCL_ALGO=Ring stands in", band, big.algo));
  } else if (format == "ddp") {
    const bool builtin = k == CodecKind::kNone || k == CodecKind::kFp16 || k == CodecKind::kBf16 ||
                         k == CodecKind::kPowerSgd;
    if (!builtin)
      out.push_back(fmt::format("{}: codec {}: PyTorch has no built-in hook for it (python/ciuic's comm_hook runs "
                                "it: ciuic.torch.comm_hook(profile))",
                                band, big.codec));
    if (big.algo == "rd" || big.algo == "hier")
      out.push_back(fmt::format("{}: algorithm {}: DDP's process group runs its own allreduce", band, big.algo));
  } else if (format == "deepspeed") {
    if (k == CodecKind::kInt4)
      out.push_back(fmt::format("{}: codec int4: the nearest is ZeRO++'s zero_quantized_gradients (4-bit blocks, "
                                "reduce-scatter by all-to-all, ZeRO stage 3), not ciuic's ring with error feedback",
                                band));
    else if (k == CodecKind::kSign1)
      out.push_back(fmt::format("{}: codec sign1 as 1-bit Adam: it replaces Adam only and runs at ZeRO stage 0, "
                                "where the bucket size ({} B) is not DeepSpeed's to set",
                                band, big.bucket_bytes));
    else if (k != CodecKind::kNone && k != CodecKind::kFp16 && k != CodecKind::kBf16)
      out.push_back(fmt::format("{}: codec {}: DeepSpeed has no such gradient compression", band, big.codec));
    if (big.algo == "rd" || big.algo == "hier" || big.algo == "sparse" || big.algo == "powersgd")
      out.push_back(fmt::format("{}: algorithm {}: DeepSpeed's allreduce is NCCL's", band, big.algo));
  } else if (format == "horovod") {
    if (big.precision == "bf16" || k == CodecKind::kBf16)
      out.push_back(fmt::format("{}: bf16: Horovod's built-in compression has fp16 only", band));
    else if (k != CodecKind::kNone && k != CodecKind::kFp16)
      out.push_back(fmt::format("{}: codec {}: Horovod has no such compression", band, big.codec));
    if (dedicated_algo && big.algo != "hier")
      out.push_back(fmt::format("{}: algorithm {} is ciuic's; Horovod runs its own allreduce", band, big.algo));
  }
  if (!out.empty() && k != CodecKind::kNone && format != "nccl-tuner")
    out.push_back(fmt::format("{}: the bucket size (and Horovod's cycle time) were tuned with codec {}: ciuic-tune run "
                              "--target {} tunes them for what {} can run",
                              band, big.codec, format == "nccl-env" ? "nccl" : format, format));
  return out;
}

std::string ExportProfile(const Profile& p, const std::string& format) {
  std::string body = ExportBody(p, format);
  const std::vector<std::string> lost = UnexpressedChoices(p, format);
  if (lost.empty()) return body;
  if (format == "deepspeed") {
    json j = json::parse(body);
    j["_ciuic_not_expressed"] = lost;
    return j.dump(2) + "\n";
  }
  body += fmt::format("# not expressed by {} ({} choice(s) of the profile; ciuic-tune export --strict refuses):\n",
                      format, lost.size());
  for (const auto& l : lost) body += "#   " + l + "\n";
  return body;
}

namespace {

// The ddp export with PyTorch's own hook for the largest band's choice (its bucket cap, its codec).
std::string DdpBuiltinHook(const Profile& p, const std::string& head) {
  const ProfileRule& big = p.rules.back();
  const CodecSpec codec = ParseCodec(big.codec);
  std::string out = "# " + head + "\n";
  out += "from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook\n";
  out += "from torch.nn.parallel import DistributedDataParallel as DDP\n\n";
  out += fmt::format("model = DDP(model, bucket_cap_mb={})\n", std::max<uint64_t>(1, big.bucket_bytes >> 20));
  if (big.precision == "fp16") {  // the hook is exactly this: ÷ world size, cast, NCCL fp16 allreduce, cast back
    out += "model.register_comm_hook(None, default_hooks.fp16_compress_hook)\n";
    return out;
  }
  if (big.precision == "bf16") {
    out += "# bf16_compress_hook: PyTorch requires CUDA 11+ and NCCL 2.10+ for it (refused on CPU/gloo)\n";
    out += "model.register_comm_hook(None, default_hooks.bf16_compress_hook)\n";
    return out;
  }
  if (codec.kind == CodecKind::kFp16 || codec.kind == CodecKind::kBf16)
    out += fmt::format("# closest built-in to codec {}: the hook sums in {} inside NCCL where the ciuic ring "
                       "accumulates each hop in fp32\n", big.codec, big.codec);
  switch (codec.kind) {
    case CodecKind::kFp16: out += "model.register_comm_hook(None, default_hooks.fp16_compress_hook)\n"; break;
    case CodecKind::kBf16:
      out += "# bf16_compress_hook: PyTorch requires CUDA 11+ and NCCL 2.10+ for it (refused on CPU/gloo)\n";
      out += "model.register_comm_hook(None, default_hooks.bf16_compress_hook)\n";
      break;
    case CodecKind::kPowerSgd:
      out += fmt::format(
          "state = powerSGD_hook.PowerSGDState(process_group=None, matrix_approximation_rank={}, "
          "start_powerSGD_iter=10, use_error_feedback=True, warm_start=True)\n"
          "model.register_comm_hook(state, powerSGD_hook.powerSGD_hook)\n",
          codec.rank);
      break;
    case CodecKind::kNone: out += "# uncompressed allreduce: DDP's default hook\n"; break;
    default:
      out += fmt::format("# codec {} has no PyTorch built-in hook: the uncompressed default stays; "
                         "the ciuic runtime (C API) applies it\n",
                         big.codec);
  }
  return out;
}

std::string ExportBody(const Profile& p, const std::string& format) {
  const ProfileRule& big = p.rules.back();  // the largest band: what gradient buckets look like
  const CodecSpec codec = ParseCodec(big.codec);
  const std::string head = fmt::format("ciuic-tune export {}: topology {} ({}), workload {}, study {}, {} mode", format,
                                       p.topology, p.fingerprint, p.workload, p.study_id, p.mode);
  if (format == "json") return ProfileToJson(p);
  if (format == "nccl-env") {
    // NCCL's own knobs for the uncompressed path: the algorithm the model prefers for large messages,
    // the Simple protocol once buckets are bandwidth-bound, and buffers sized to the bucket.
    std::string out = "# " + head + "\n";
    const bool tree = big.algo == "rd";
    out += fmt::format("export NCCL_ALGO={}\n", tree ? "Tree" : "Ring");
    if (big.bucket_bytes >= (16u << 20)) out += "export NCCL_PROTO=Simple  # buckets >= 16 MiB are bandwidth-bound\n";
    out += fmt::format("export NCCL_BUFFSIZE={}\n", big.bucket_bytes >= (64u << 20) ? (8u << 20) : (4u << 20));
    const int ctas = std::max(2, std::min(32, big.streams * 2));
    out += fmt::format("export NCCL_MIN_CTAS={}\nexport NCCL_MAX_CTAS={}\n", ctas, std::max(ctas, 16));
    if (big.precision != "fp32")
      out += fmt::format("# the profile reduces gradients in {}: NCCL has no variable for that; the framework casts "
                         "(ciuic-tune export --format ddp | deepspeed)\n",
                         big.precision);
    return out;
  }
  if (format == "nccl-tuner") {
    // The environment that makes NCCL load the ciuic tuner plugin with this profile (the library is
    // built into lib/ beside this tool's bin/), and what the plugin does with each band: the same
    // NcclTunerChoiceFor the plugin calls.
    namespace fs = std::filesystem;
    const auto shell_word = [](const std::string& s) {
      if (!s.empty() && s.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_./+,:@%=-") ==
                            std::string::npos)
        return s;
      std::string q = "'";
      for (const char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
      return q + "'";
    };
    std::error_code ec;
    fs::path lib = "libnccl-tuner-ciuic.so";
    if (const fs::path self = fs::read_symlink("/proc/self/exe", ec); !ec)
      lib = (self.parent_path() / ".." / "lib" / lib).lexically_normal();
    std::string out = "# " + head + "\n";
    out += "# NCCL (2.19 or later) loads the ciuic tuner plugin, which reads the profile named here:\n";
    out += "export NCCL_TUNER_PLUGIN=" + shell_word(lib.string()) + "\n";
    if (!fs::exists(lib, ec)) out += "#   (not built yet: cmake --build build --target nccl-tuner-ciuic)\n";
    out += "export CIUIC_PROFILE=" + shell_word(ProfilePathForExport(p)) + "\n";
    out += fmt::format("# It acts on communicators of {} ranks on {} node(s) and needs NCCL 2.22 or later (its cost\n"
                       "# table); other communicators, and NCCL 2.19-2.21, keep NCCL's own choices. Per size band it\n"
                       "# prefers an algorithm; NCCL still picks that algorithm's protocol and the channel count:\n",
                       p.ranks, p.nodes);
    for (const auto& r : p.rules) {
      const NcclTunerChoice c = NcclTunerChoiceFor(r, p.nodes);
      out += fmt::format("#   {} [{}, {}) {}, codec {}, {} -> {}: {}\n", r.op, FormatSize(r.min_bytes),
                         r.max_bytes ? FormatSize(r.max_bytes) : "inf", r.algo, r.codec, r.precision,
                         c.algo.empty() ? "left to NCCL" : "prefers NCCL's " + c.algo, c.why);
    }
    out += "#   allgather, reducescatter, broadcast, reduce -> left to NCCL: the profile has allreduce rules only\n";
    out += "# To see it in NCCL's log: NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,TUNING\n";
    return out;
  }
  if (format == "ddp" && DdpNeedsCiuicHook(p)) {
    // Every band per bucket, through python/ciuic on libciuic (ctypes).
    std::string out = "# " + head + "\n";
    out += "# Every size band of the profile, per DDP bucket, with ciuic's codecs: python/ciuic on libciuic\n"
           "# (PYTHONPATH=<ciuic>/python; CIUIC_LIBRARY=<ciuic>/build/lib/libciuic.so). It reduces CPU buckets over\n"
           "# gloo, or runs the ciuic runtime when launched by mpiexec; it refuses GPU buckets (for a GPU job:\n"
           "# ciuic-tune run --target ddp, which keeps to PyTorch's own hooks). Save state.state_dict() with\n"
           "# each rank's checkpoint and load it back after register_comm_hook to resume bit for bit.\n";
    out += "import ciuic.torch\n";
    out += "from torch.nn.parallel import DistributedDataParallel as DDP\n\n";
    out += "CIUIC_PROFILE = " + json(ProfilePathForExport(p)).dump() + "\n";
    out += "_ciuic_module = model\n";
    out += fmt::format("model = DDP(model, **ciuic.torch.ddp_kwargs(CIUIC_PROFILE))  # bucket_cap_mb={}\n",
                       static_cast<double>(big.bucket_bytes) / (1 << 20));
    out += "state, hook = ciuic.torch.comm_hook(CIUIC_PROFILE, module=_ciuic_module)\n";
    out += "model.register_comm_hook(state, hook)\n";
    for (const auto& r : p.rules)
      out += fmt::format("#   {} {} codec {} in {}, pieces of {} B\n", BandName(r), r.algo, r.codec, r.precision,
                         r.bucket_bytes);
    return out;
  }
  if (format == "ddp") {
    std::string out = DdpBuiltinHook(p, head);
    bool uniform = true;
    for (const auto& r : p.rules)
      uniform = uniform && r.algo == big.algo && r.codec == big.codec && r.precision == big.precision;
    if (!uniform)
      out += "# Every size band per bucket instead (CPU buckets over gloo, or the ciuic runtime under mpiexec):\n"
             "#   import ciuic.torch  # PYTHONPATH=<ciuic>/python\n"
             "#   model = DDP(module, **ciuic.torch.ddp_kwargs(" + json(ProfilePathForExport(p)).dump() + "))\n"
             "#   state, hook = ciuic.torch.comm_hook(" + json(ProfilePathForExport(p)).dump() + ", module=module)\n"
             "#   model.register_comm_hook(state, hook)\n";
    return out;
  }
  if (format == "deepspeed") {
    json j;
    // The bucket sizes (in elements) apply in ZeRO stages 1-3 (stage 3 reads reduce_bucket_size only):
    // stage 1 is the lowest that applies them. int4 maps to ZeRO++'s 4-bit quantized gradients, which
    // need stage 3; 1-bit Adam (sign1) does not run under ZeRO: stage 0, where these keys do nothing.
    const int stage = codec.kind == CodecKind::kInt4 ? 3 : codec.kind == CodecKind::kSign1 ? 0 : 1;
    j["zero_optimization"] = {{"stage", stage}};
    if (stage > 0) j["zero_optimization"]["reduce_bucket_size"] = big.bucket_bytes / 4;
    if (stage > 0 && stage < 3) j["zero_optimization"]["allgather_bucket_size"] = big.bucket_bytes / 4;
    if (codec.kind == CodecKind::kInt4) j["zero_optimization"]["zero_quantized_gradients"] = true;
    // The reduction precision; a 16-bit codec's nearest equivalent is reducing in that type.
    j["communication_data_type"] = big.precision != "fp32"           ? big.precision
                                   : codec.kind == CodecKind::kFp16 ? "fp16"
                                   : codec.kind == CodecKind::kBf16 ? "bf16"
                                                                    : "fp32";
    if (codec.kind == CodecKind::kSign1) {
      j["optimizer"] = {{"type", "OneBitAdam"},
                        {"params", {{"lr", 1e-4}, {"freeze_step", 1000}, {"cuda_aware", false}, {"comm_backend_name", "nccl"}}}};
    }
    j["_ciuic"] = head;
    j["_ciuic_merge"] = fmt::format(
        "merge into your DeepSpeed config key by key: these keys replace yours, the rest of yours stays. Keep your "
        "own zero_optimization.stage if it is {} (the bucket sizes apply in stages 1-3; stage 3 reads "
        "reduce_bucket_size only); at stage 0 they do nothing.{}",
        stage == 3 ? "3 (zero_quantized_gradients needs it)" : stage == 0 ? "0 (1-bit Adam does not run under ZeRO)"
                                                                          : "1, 2 or 3",
        codec.kind == CodecKind::kSign1 ? " The optimizer block replaces yours: 1-bit Adam stands for Adam." : "");
    return j.dump(2) + "\n";
  }
  if (format == "horovod") {
    std::string out = "# " + head + "\n";
    out += fmt::format("export HOROVOD_FUSION_THRESHOLD={}\n", big.bucket_bytes);
    const double cycle_ms = std::clamp(big.predicted_us / 1000.0, 1.0, 25.0);
    out += fmt::format("export HOROVOD_CYCLE_TIME={:.1f}  # ms: about one bucket's predicted allreduce\n", cycle_ms);
    out += fmt::format("export HOROVOD_HIERARCHICAL_ALLREDUCE={}\n", big.hierarchy_depth > 1 ? 1 : 0);
    if (big.precision == "fp16" || codec.kind == CodecKind::kFp16)
      out += "# in the training script: hvd.DistributedOptimizer(opt, compression=hvd.Compression.fp16)\n";
    else if (big.precision == "bf16" || codec.kind == CodecKind::kBf16)
      out += "# bf16: Horovod's built-in compression has fp16 only (the profile chose bf16): compression stays none\n";
    else if (codec.kind != CodecKind::kNone)
      out += fmt::format("# codec {} has no Horovod built-in: compression stays none\n", big.codec);
    return out;
  }
  std::string known;
  for (const auto& f : ExportFormats()) known += (known.empty() ? "" : " ") + f;
  throw UsageError(fmt::format("unknown export format '{}' ({})", format, known));
}

}  // namespace

}  // namespace ciuic
