#include "collectives/runtime_rules.h"

#include <sstream>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

#include "collectives/state_reader.h"
#include "core/error.h"
#include "core/files.h"
#include "core/watchdog.h"
#include "kernels/codec_kernels.h"

namespace ciuic {

namespace {

constexpr char kRulesMagic[8] = {'C', 'I', 'U', 'I', 'C', 'R', 'R', 'S'};
constexpr uint32_t kVersion = 1;
constexpr uint64_t kMaxKey = 4096;
// A rule without bucket_bytes reduces the whole message at once.
constexpr size_t kWholeMessage = size_t{1} << 60;

bool Is16(DType t) { return t == DType::kFloat16 || t == DType::kBFloat16; }

CodecSpec CastCodec(DType t) {
  CodecSpec c = ParseCodec(t == DType::kFloat16 ? "fp16" : "bf16");
  c.error_feedback = false;  // 16-bit values through a 16-bit wire: only the partial sums round
  return c;
}

uint64_t Fnv(std::string_view s, uint64_t h = 0xcbf29ce484222325ull) {
  for (char c : s) h = (h ^ static_cast<uint8_t>(c)) * 0x100000001b3ull;
  return h;
}

}  // namespace

RuntimeConfig ConfigForRule(const ProfileRule& rule, DType type, const RuntimeConfig& base, const Communicator& comm) {
  RuntimeConfig c = base;
  AlgoConfig& a = c.algo;
  const CodecSpec keep = a.codec;
  a.codec = ParseCodec(rule.codec);
  a.codec.block = keep.block;
  a.codec.error_feedback = keep.error_feedback;
  a.in_flight = rule.streams;
  a.precision = ParsePrecision(rule.precision);
  a.algo = rule.algo == "nccl" ? AllReduceAlgo::kNative : ParseAlgo(rule.algo);
  // A hier rule's depth is the profile's: 3 groups the nodes as the rule says, 2 does not group them.
  if (rule.algo == "hier") a.nodes_per_group = rule.hierarchy_depth == 3 ? rule.nodes_per_group : 0;
  c.bucket_bytes = rule.bucket_bytes ? rule.bucket_bytes : kWholeMessage;
  if (Is16(type) && a.codec.kind == CodecKind::kNone) {
    // Lossless for a 16-bit gradient: its own width on the wire, never twice the bytes.
    if (a.algo == AllReduceAlgo::kNative) {
      if (a.precision == DType::kFloat32) a.precision = type;
    } else {
      a.algo = AllReduceAlgo::kRing;  // rd moves fp32 only; ring and hier take the 16-bit wire
      if (rule.algo == "hier") a.algo = AllReduceAlgo::kHierarchical;
      a.codec = CastCodec(type);
    }
  }
  if (a.algo == AllReduceAlgo::kNative && a.precision != DType::kFloat32 &&
      !comm.Supports(Collective::kAllReduce, a.precision, ReduceOp::kSum, true)) {
    // The transport has no 16-bit sum (gloo has no bf16): the ring with that wire, fp32 accumulation.
    a.algo = AllReduceAlgo::kRing;
    a.codec = CastCodec(a.precision);
    a.precision = DType::kFloat32;
  }
  return c;
}

std::string ConfigKey(const RuntimeConfig& c) {
  // Every field that changes what the engine does: a 16-bit wire without error feedback is another
  // configuration than the fp16/bf16 codec with it.
  const bool no_ef = !c.algo.codec.error_feedback && c.algo.codec.kind != CodecKind::kNone;
  const uint32_t block = c.algo.codec.block;
  return fmt::format(
      "{} {} {} {} B x{}{}{}{}{}", AlgoName(c.algo.algo), CodecName(c.algo.codec), DTypeName(c.algo.precision),
      c.bucket_bytes >= kWholeMessage ? uint64_t{0} : uint64_t{c.bucket_bytes}, c.algo.in_flight, no_ef ? " no-ef" : "",
      block != CodecSpec().block ? fmt::format(" block {}", block) : std::string(),
      c.algo.ranks_per_node ? fmt::format(" {}/node", c.algo.ranks_per_node) : std::string(),
      c.algo.nodes_per_group ? fmt::format(" {} nodes/group", c.algo.nodes_per_group) : std::string());
}

void CheckProfileWorld(const Profile& profile, Communicator& comm, int ranks_per_node) {
  const auto hosts = GatherHostnames(comm);
  const int nodes = ranks_per_node > 0 ? (comm.Size() + ranks_per_node - 1) / ranks_per_node
                                       : static_cast<int>(std::set<std::string>(hosts.begin(), hosts.end()).size());
  const std::string device = comm.Device() == DeviceKind::kCuda ? "gpu" : "cpu";
  if (profile.ranks == comm.Size() && profile.nodes == nodes && profile.Device() == device) return;
  throw UsageError(fmt::format(
      "profile {}{} was tuned for {} {} rank{} on {} node{}; this job has {} {} rank{} on {} node{} (tune a profile "
      "for this world, or pass the override to apply it anyway)",
      profile.topology, profile.path.empty() ? "" : fmt::format(" ({})", PrintableLine(profile.path, 4096)),
      profile.ranks, profile.Device(), profile.ranks == 1 ? "" : "s", profile.nodes, profile.nodes == 1 ? "" : "s",
      comm.Size(), device, comm.Size() == 1 ? "" : "s", nodes, nodes == 1 ? "" : "s"));
}

RuleRuntime::RuleRuntime(Communicator& comm, RuleRuntimeConfig config) : comm_(comm), config_(std::move(config)) {
  timeout_s_ = config_.fixed.timeout_s;
  if (config_.profile && config_.profile->rules.empty()) throw InputError("the profile holds no rules");
  // Every rule's configuration is checked (and fp32's runtime made) now, not at the first message.
  if (config_.profile) {
    for (const auto& r : config_.profile->rules)
      if (r.op == "allreduce") ConfigForRule(r, DType::kFloat32, config_.fixed, comm_);
  } else {
    RuntimeOf(config_.fixed);
  }
}

const RuntimeConfig& RuleRuntime::ConfigFor(size_t n, DType type) {
  if (type != DType::kFloat32 && !Is16(type))
    throw UsageError(fmt::format("the ciuic runtime reduces fp32, fp16 and bf16, not {}", DTypeName(type)));
  if (!config_.profile) {
    const std::string key = ConfigKey(config_.fixed);
    if (type == DType::kFloat32) return configs_.at(key);
    RuntimeConfig c = config_.fixed;
    if (c.algo.codec.kind == CodecKind::kNone) {
      ProfileRule r;
      r.algo = c.algo.algo == AllReduceAlgo::kNative ? "nccl" : AlgoName(c.algo.algo);
      r.codec = "none";
      r.precision = DTypeName(c.algo.precision);
      r.streams = c.algo.in_flight;
      r.bucket_bytes = c.bucket_bytes;
      c = ConfigForRule(r, type, config_.fixed, comm_);
      c.bucket_bytes = config_.fixed.bucket_bytes;
    }
    const std::string k16 = ConfigKey(c);
    return configs_.emplace(k16, c).first->second;
  }
  const ProfileRule& rule = config_.profile->RuleFor(static_cast<uint64_t>(n) * DTypeSize(type));
  RuntimeConfig c = ConfigForRule(rule, type, config_.fixed, comm_);
  const std::string key = ConfigKey(c);
  return configs_.emplace(key, c).first->second;
}

Runtime& RuleRuntime::RuntimeOf(const RuntimeConfig& c) {
  const std::string key = ConfigKey(c);
  auto& slot = runtimes_[key];
  if (!slot) {
    configs_.emplace(key, c);
    RuntimeConfig made = c;
    made.timeout_s = timeout_s_;
    slot = std::make_unique<Runtime>(comm_, made);
    if (!trace_path_.empty()) {
      const size_t index = runtimes_.size() - 1;
      slot->SetTrace(index == 0 ? trace_path_ : fmt::format("{}.{}", trace_path_, index));
    }
  }
  return *slot;
}

Runtime& RuleRuntime::RuntimeFor(size_t n, DType type) { return RuntimeOf(ConfigFor(n, type)); }

void RuleRuntime::AllReduce(void* data, size_t n, DType type, uint64_t tensor_id, bool average) {
  Runtime& rt = RuntimeFor(n, type);
  if (type == DType::kFloat32) {
    rt.AllReduce(static_cast<float*>(data), n, tensor_id, average);
    return;
  }
  // Exact widening, the reduction in fp32 (16-bit wires where lossless), one rounding back.
  if (wide_.bytes() < n * 4 || wide_.kind() != comm_.BufferKind())
    wide_ = Buffer(std::max<size_t>(n, 1) * 4, comm_.BufferKind());
  QuantArgs cast;
  cast.kind = type == DType::kFloat16 ? CodecKind::kFp16 : CodecKind::kBf16;
  auto* bytes = static_cast<uint8_t*>(data);
  QuantDecode(cast, bytes, n, wide_.as<float>(), false, comm_.Stream());
  rt.AllReduce(wide_.as<float>(), n, tensor_id, average);
  QuantEncode(cast, wide_.as<float>(), nullptr, n, bytes, nullptr, comm_.Stream());
}

std::vector<float> RuleRuntime::Residual(uint64_t tensor_id, size_t n, DType type) {
  return RuntimeFor(n, type).Residual(tensor_id, n);
}

bool RuleRuntime::SetResidual(uint64_t tensor_id, size_t n, DType type, const float* values) {
  return RuntimeFor(n, type).SetResidual(tensor_id, n, values);
}

void RuleRuntime::Forget(uint64_t tensor_id) {
  for (auto& [key, rt] : runtimes_) rt->Forget(tensor_id);
}

std::string RuleRuntime::Fingerprint() const {
  if (!config_.profile) return "";
  uint64_t h = Fnv(config_.profile->fingerprint);
  for (const auto& r : config_.profile->rules)
    h = Fnv(fmt::format("{} {} {} {} {} {} {} {}", r.op, r.min_bytes, r.max_bytes, r.algo, r.codec, r.precision,
                        r.bucket_bytes, r.streams),
            h);
  return fmt::format("profile {} ({} rules) {:016x}", config_.profile->topology, config_.profile->rules.size(), h);
}

void RuleRuntime::Save(const std::string& path) const {
  if (!config_.profile) {
    // One configuration: the plain runtime's file, as ciuic_runtime_save writes it.
    runtimes_.at(ConfigKey(config_.fixed))->Save(path);
    return;
  }
  std::ostringstream out;
  out.write(kRulesMagic, 8);
  const uint32_t head[3] = {kVersion, static_cast<uint32_t>(comm_.Size()), static_cast<uint32_t>(comm_.Rank())};
  out.write(reinterpret_cast<const char*>(head), sizeof head);
  const auto put_string = [&](const std::string& s) {
    const uint64_t len = s.size();
    out.write(reinterpret_cast<const char*>(&len), 8);
    out.write(s.data(), static_cast<std::streamsize>(len));
  };
  put_string(Fingerprint());
  const uint64_t count = runtimes_.size();
  out.write(reinterpret_cast<const char*>(&count), 8);
  for (const auto& [key, rt] : runtimes_) {
    put_string(key);
    std::ostringstream inner;
    rt->Write(inner);
    put_string(inner.str());
  }
  WriteFileAtomically(path, out.str());  // a temporary file beside it, fsync'd, renamed over it
}

void RuleRuntime::Load(const std::string& path) {
  if (!config_.profile) {
    runtimes_.at(ConfigKey(config_.fixed))->Load(path);
    return;
  }
  const std::string shown = PrintableLine(path, 4096);
  int status = 0;
  uint64_t digest = 0;
  std::string error;
  std::map<std::string, Runtime::StateMap> loaded;
  try {
    StateFileIn file(path, shown);
    std::istream& in = file.in;
    BoundedReader r(in, file.size, fmt::format("state file '{}'", shown));
    char magic[8];
    if (r.left() < sizeof magic) throw InputError(fmt::format("'{}' is not a ciuic profile-runtime state file", shown));
    r.Read(magic, sizeof magic, "magic");
    if (std::memcmp(magic, kRulesMagic, sizeof magic) != 0)
      throw InputError(
          fmt::format("'{}' is not a ciuic profile-runtime state file (a runtime made without a profile "
                      "saves another format)",
                      shown));
    const auto version = r.Get<uint32_t>("format version");
    if (version == 0 || version > kVersion)
      r.Fail(fmt::format("format {} is not one this build reads (1 to {})", version, kVersion));
    const auto world = r.Get<uint32_t>("world size"), rank = r.Get<uint32_t>("rank");
    if (world != static_cast<uint32_t>(comm_.Size()))
      r.Fail(
          fmt::format("saved by {} ranks; the world now has {}: error-feedback state cannot be carried across "
                      "world sizes",
                      world, comm_.Size()));
    if (rank != static_cast<uint32_t>(comm_.Rank()))
      r.Fail(fmt::format("belongs to rank {}, not rank {}", rank, comm_.Rank()));
    const std::string fingerprint = r.String("profile fingerprint", kMaxKey);
    if (fingerprint != Fingerprint())
      r.Fail(fmt::format("saved under '{}', this runtime applies '{}'", PrintableLine(fingerprint), Fingerprint()));
    // The configurations this profile can make, for fp32 and 16-bit messages.
    std::map<std::string, RuntimeConfig> possible;
    for (const auto& rule : config_.profile->rules)
      for (DType t : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
        RuntimeConfig c = ConfigForRule(rule, t, config_.fixed, comm_);
        possible.emplace(ConfigKey(c), c);
      }
    const auto count = r.Get<uint64_t>("configuration count");
    if (count > possible.size())
      r.Fail(fmt::format("{} configurations, this profile makes at most {}", count, possible.size()));
    uint64_t d = 0xcbf29ce484222325ull;
    for (uint64_t i = 0; i < count; ++i) {
      const std::string key = r.String(fmt::format("configuration {} name", i), kMaxKey);
      const auto it = possible.find(key);
      if (it == possible.end())
        r.Fail(fmt::format("configuration {} '{}' is not one this profile makes", i, PrintableLine(key)));
      if (!loaded.empty() && !(loaded.rbegin()->first < key))
        r.Fail(
            fmt::format("configuration {} '{}' does not follow '{}': configurations are saved once each, in "
                        "ascending order",
                        i, PrintableLine(key), loaded.rbegin()->first));
      const auto bytes = r.Get<uint64_t>(fmt::format("configuration {} length", i));
      if (bytes > r.left())
        r.Fail(fmt::format("truncated: configuration {} claims {} bytes, {} are left", i, bytes, r.left()));
      Runtime& rt = RuntimeOf(it->second);
      loaded[key] = rt.Parse(in, bytes, fmt::format("{}' configuration '{}", shown, key));
      r.Skip(bytes);
      d = Fnv(fmt::format("{} {:x}", key, Runtime::DigestOf(loaded[key])), d);
    }
    if (r.left() != 0) r.Fail(fmt::format("{} bytes follow the last configuration", r.left()));
    digest = d;
  } catch (const InputError& e) {
    status = 1;
    error = e.what();
  } catch (const std::exception& e) {
    status = 2;
    error = fmt::format("state file '{}': {}", shown, e.what());
  }
  {
    // As Runtime::Load: a rank that never comes to the agreement ends the others with exit 2.
    const int rank = comm_.Rank();
    Watchdog watchdog(timeout_s_ < 0 ? DefaultTimeoutSeconds() : timeout_s_, [rank](const std::string& what, double t) {
      std::fputs(
          fmt::format("ciuic runtime: rank {}: no progress in {} s: {}; exiting with 2\n", rank, t, what).c_str(),
          stderr);
      std::fflush(stderr);
      std::_Exit(2);
    });
    watchdog.SetHeartbeats(Heartbeats::FromEnvironment());
    if (Liveness live = comm_.PeerLiveness(); live.beat) {
      watchdog.SetBeat(std::move(live.beat));
      watchdog.SetPeerReport(std::move(live.report));
    }
    watchdog.Arm(fmt::format("loading state file '{}' (the ranks' agreement)", shown));
    AgreeOnLoad(comm_, status, digest, error, path);
    watchdog.Disarm();
  }
  for (auto& [key, rt] : runtimes_) {
    auto it = loaded.find(key);
    rt->Commit(it == loaded.end() ? Runtime::StateMap() : std::move(it->second));
  }
}

void RuleRuntime::SetTimeout(double seconds) {
  if (!(seconds >= 0) || !std::isfinite(seconds))
    throw UsageError(fmt::format("runtime timeout {}: expected a non-negative number of seconds", seconds));
  timeout_s_ = seconds;
  for (auto& [key, rt] : runtimes_) rt->SetTimeout(seconds);
}

void RuleRuntime::SetTrace(const std::string& path) {
  trace_path_ = path;
  size_t i = 0;
  for (auto& [key, rt] : runtimes_) rt->SetTrace(path.empty() || i == 0 ? path : fmt::format("{}.{}", path, i)), ++i;
}

void RuleRuntime::FlushTrace() {
  for (auto& [key, rt] : runtimes_) rt->FlushTrace();
}

Counters RuleRuntime::counters() const {
  Counters sum;
  for (const auto& [key, rt] : runtimes_) {
    const Counters& c = rt->counters();
    sum.calls += c.calls;
    sum.raw_bytes += c.raw_bytes;
    sum.wire_bytes += c.wire_bytes;
    sum.encode_s += c.encode_s;
    sum.comm_s += c.comm_s;
    sum.reduce_s += c.reduce_s;
    sum.total_s += c.total_s;
    sum.mapped_calls += c.mapped_calls;
    sum.staged_calls += c.staged_calls;
    sum.native_calls += c.native_calls;
  }
  return sum;
}

uint64_t RuleRuntime::nonfinite() const {
  uint64_t n = 0;
  for (const auto& [key, rt] : runtimes_) n += rt->nonfinite();
  return n;
}

}  // namespace ciuic
