#include "collectives/profile.h"

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/files.h"
#include "kernels/codec_spec.h"

namespace ciuic {

namespace {

using nlohmann::json;
constexpr const char* kSchema = "ciuic.profile/1";
const std::set<std::string> kAlgos = {"ring", "rd", "hier", "sparse", "sign2", "powersgd", "nccl"};
const std::set<std::string> kGates = {"passed", "failed", "n/a"};

template <class T>
T Get(const json& j, const char* key, const std::string& origin) {
  if (!j.contains(key)) throw InputError(fmt::format("{}: missing '{}'", origin, key));
  try {
    return j.at(key).get<T>();
  } catch (const json::exception&) {
    throw InputError(fmt::format("{}: '{}' has the wrong type", origin, key));
  }
}

void OnlyKeys(const json& j, std::initializer_list<const char*> keys, const std::string& where) {
  for (const auto& [k, v] : j.items())
    if (std::find_if(keys.begin(), keys.end(), [&](const char* x) { return k == x; }) == keys.end())
      throw InputError(fmt::format("{}: unknown key '{}'", where, k));
}

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
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    throw InputError(fmt::format("{}: not valid JSON ({})", origin, e.what()));
  }
  if (!j.is_object()) throw InputError(fmt::format("{}: a profile is a JSON object", origin));
  OnlyKeys(j, {"schema", "topology", "workload", "provenance", "step", "rules"}, origin);
  const auto schema = Get<std::string>(j, "schema", origin);
  if (schema != kSchema)
    throw InputError(schema.rfind("ciuic.profile/", 0) == 0
                         ? fmt::format("{}: schema '{}' is newer than this build reads ({})", origin, schema, kSchema)
                         : fmt::format("{}: schema '{}' is not a ciuic profile", origin, schema));
  Profile p;
  const json& t = j.at("topology");
  OnlyKeys(t, {"name", "fingerprint", "nodes", "ranks"}, origin + " topology");
  p.topology = Get<std::string>(t, "name", origin);
  p.fingerprint = Get<std::string>(t, "fingerprint", origin);
  p.nodes = Get<int>(t, "nodes", origin);
  p.ranks = Get<int>(t, "ranks", origin);
  p.workload = Get<std::string>(j, "workload", origin);
  const json& v = Get<json>(j, "provenance", origin);
  OnlyKeys(v, {"tool_version", "git_commit", "created", "study_id", "mode", "strategy", "seed", "budget"},
           origin + " provenance");
  p.tool_version = Get<std::string>(v, "tool_version", origin);
  p.git_commit = Get<std::string>(v, "git_commit", origin);
  p.created = Get<std::string>(v, "created", origin);
  p.study_id = Get<int64_t>(v, "study_id", origin);
  p.mode = Get<std::string>(v, "mode", origin);
  if (p.mode != "model" && p.mode != "measure") throw InputError(fmt::format("{}: mode '{}' is not model|measure", origin, p.mode));
  p.strategy = Get<std::string>(v, "strategy", origin);
  p.seed = Get<uint64_t>(v, "seed", origin);
  p.budget = Get<int>(v, "budget", origin);
  const json& s = Get<json>(j, "step", origin);
  OnlyKeys(s, {"predicted_us", "baseline_us"}, origin + " step");
  p.step_us = Get<double>(s, "predicted_us", origin);
  p.baseline_step_us = Get<double>(s, "baseline_us", origin);
  for (const auto& r : Get<json>(j, "rules", origin)) {
    OnlyKeys(r, {"op", "min_bytes", "max_bytes", "algo", "codec", "streams", "bucket_bytes", "hierarchy_depth",
                 "precision", "predicted_us", "measured_us", "gate"},
             origin + " rule");
    ProfileRule x;
    x.op = Get<std::string>(r, "op", origin);
    if (x.op != "allreduce") throw InputError(fmt::format("{}: unknown op '{}'", origin, x.op));
    x.min_bytes = Get<uint64_t>(r, "min_bytes", origin);
    x.max_bytes = Get<uint64_t>(r, "max_bytes", origin);
    if (x.max_bytes != 0 && x.max_bytes <= x.min_bytes)
      throw InputError(fmt::format("{}: a rule's max_bytes {} is not above min_bytes {}", origin, x.max_bytes, x.min_bytes));
    x.algo = Get<std::string>(r, "algo", origin);
    if (!kAlgos.count(x.algo)) throw InputError(fmt::format("{}: unknown algo '{}'", origin, x.algo));
    x.codec = Get<std::string>(r, "codec", origin);
    try {
      ParseCodec(x.codec);
    } catch (const Error& e) {
      throw InputError(fmt::format("{}: {}", origin, e.what()));
    }
    x.streams = Get<int>(r, "streams", origin);
    x.bucket_bytes = Get<uint64_t>(r, "bucket_bytes", origin);
    x.hierarchy_depth = Get<int>(r, "hierarchy_depth", origin);
    if (x.streams < 1 || x.streams > 64 || x.hierarchy_depth < 1 || x.hierarchy_depth > 3)
      throw InputError(fmt::format("{}: streams or hierarchy_depth out of range", origin));
    x.precision = Get<std::string>(r, "precision", origin);
    if (x.precision != "fp32" && x.precision != "bf16" && x.precision != "fp16")
      throw InputError(fmt::format("{}: unknown precision '{}' (fp32 bf16 fp16)", origin, x.precision));
    if (x.precision != "fp32" && (x.algo != "nccl" || x.codec != "none"))
      throw InputError(fmt::format("{}: precision {} applies to algo nccl with codec none (the library's own "
                                   "allreduce); the runtime's algorithms accumulate in fp32",
                                   origin, x.precision));
    x.predicted_us = Get<double>(r, "predicted_us", origin);
    x.measured_us = r.at("measured_us").is_null() ? -1 : Get<double>(r, "measured_us", origin);
    x.gate = Get<std::string>(r, "gate", origin);
    if (!kGates.count(x.gate)) throw InputError(fmt::format("{}: unknown gate verdict '{}'", origin, x.gate));
    p.rules.push_back(x);
  }
  if (p.rules.empty()) throw InputError(fmt::format("{}: a profile needs at least one rule", origin));
  return p;
}

Profile LoadProfile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw InputError(fmt::format("cannot read profile '{}'", path));
  std::stringstream s;
  s << f.rdbuf();
  return ParseProfile(s.str(), path);
}

void WriteProfile(const std::string& path, const Profile& p) { WriteFileAtomically(path, ProfileToJson(p)); }

std::vector<std::string> ExportFormats() { return {"json", "nccl-env", "nccl-tuner", "ddp", "deepspeed", "horovod"}; }

std::string ExportProfile(const Profile& p, const std::string& format) {
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
    std::string out = "# ciuic nccl-tuner rules v1\n# " + head + "\n# op min_bytes max_bytes algo proto channels\n";
    for (const auto& r : p.rules) {
      const bool small = r.max_bytes != 0 && r.max_bytes <= (1u << 20);
      out += fmt::format("{} {} {} {} {} {}\n", r.op, r.min_bytes, r.max_bytes, r.algo == "rd" ? "tree" : "ring",
                         small ? "ll128" : "simple", std::max(2, r.streams * 2));
    }
    return out;
  }
  if (format == "ddp") {
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
  if (format == "deepspeed") {
    json j;
    j["zero_optimization"] = {{"reduce_bucket_size", big.bucket_bytes / 4}, {"allgather_bucket_size", big.bucket_bytes / 4}};
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
      out += "# bf16: Horovod's built-in compression has fp16 only (the gate passed bf16, not fp16): compression "
             "stays none\n";
    else if (codec.kind != CodecKind::kNone)
      out += fmt::format("# codec {} has no Horovod built-in: compression stays none\n", big.codec);
    return out;
  }
  std::string known;
  for (const auto& f : ExportFormats()) known += (known.empty() ? "" : " ") + f;
  throw UsageError(fmt::format("unknown export format '{}' ({})", format, known));
}

}  // namespace ciuic
