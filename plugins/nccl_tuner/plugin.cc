// libnccl-tuner-ciuic.so: NCCL's tuner plugin over a ciuic profile (the file $CIUIC_PROFILE names).
// For a communicator of the profile's rank and node count it prefers, per allreduce size band, the
// NCCL algorithm NcclTunerChoiceFor names, by setting that algorithm's cheapest cell of NCCL's cost
// table to 0 (NCCL keeps choosing the protocol among that algorithm's and the channel count). Other
// collectives, codecs, ciuic-only algorithms and other communicators are left to NCCL, each logged
// once. It never fails NCCL: NCCL 2.19-2.30 fail a communicator's creation when the tuner's init
// returns an error, so a missing or broken profile is one WARN line and a plugin that does nothing.
#include <fmt/format.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include "collectives/profile.h"
#include "core/config.h"
#include "core/sizes.h"
#include "plugins/nccl_tuner/nccl_tuner_abi.h"

#if CIUIC_HAVE_NCCL
// Where NCCL is installed, its nccl.h (the one tuner type it publishes) checks ours.
#include <nccl.h>
static_assert(sizeof(ciuic::nccl_abi::Result) == sizeof(ncclResult_t) &&
              int{ciuic::nccl_abi::kSuccess} == int{ncclSuccess} &&
              int{ciuic::nccl_abi::kInternalError} == int{ncclInternalError} &&
              int{ciuic::nccl_abi::kInProgress} == int{ncclInProgress});
#endif

namespace {

namespace abi = ciuic::nccl_abi;

constexpr const char* kPluginName = "ciuic";
constexpr std::array<const char*, abi::kNumAlgorithms> kAlgoNames = {
    "Tree", "Ring", "CollNetDirect", "CollNetChain", "NVLS", "NVLSTree", "PAT"};
constexpr std::array<const char*, abi::kNumProtocols> kProtoNames = {"LL", "LL128", "Simple"};
constexpr std::array<const char*, 11> kFuncNames = {"Broadcast", "Reduce",   "AllGather", "ReduceScatter",
                                                    "AllReduce", "SendRecv", "Send",      "Recv",
                                                    "AlltoAll",  "Scatter",  "Gather"};

std::string FuncName(int f) {
  return f >= 0 && f < static_cast<int>(kFuncNames.size()) ? kFuncNames[f] : fmt::format("collective {}", f);
}

std::string ProtoName(int p) {
  return p >= 0 && p < abi::kNumProtocols ? kProtoNames[p] : fmt::format("protocol {}", p);
}

// The NCCL algorithm index of a name NcclTunerChoiceFor returns; kAlgoUndef for "" (left to NCCL).
int AlgoIndex(const std::string& name) {
  for (int a = 0; a < abi::kNumAlgorithms; ++a)
    if (name == kAlgoNames[a]) return a;
  return abi::kAlgoUndef;
}

std::string BandText(const ciuic::ProfileRule& r) {
  return fmt::format("{} [{}, {})", r.op, ciuic::FormatSize(r.min_bytes),
                     r.max_bytes ? ciuic::FormatSize(r.max_bytes) : "inf");
}

// True for the first caller only; later calls cost one relaxed load, not a locked exchange.
bool FirstTime(std::atomic<bool>& done) { return !done.load(std::memory_order_relaxed) && !done.exchange(true); }

void Log(abi::Logger log, abi::LogLevel level, unsigned long flags, const std::string& line) {
  if (log != nullptr) log(level, flags, __FILE__, __LINE__, "TUNER/ciuic: %s", line.c_str());
}

// One communicator's view of the profile (v3, v4, v5 contexts).
class Tuner {
 public:
  Tuner(uint64_t comm_id, size_t n_ranks, size_t n_nodes, abi::Logger log) : log_(log) {
    // v3 and v4 get no communicator id; v5 gets NCCL's hash of it, the one NCCL's own log prints.
    const std::string comm = fmt::format("communicator{} ({} ranks, {} node(s))",
                                         comm_id ? fmt::format(" {:#x}", comm_id) : "", n_ranks, n_nodes);
    const char* path = std::getenv("CIUIC_PROFILE");
    if (path == nullptr || *path == '\0') {
      Log(log_, abi::kLogWarn, abi::kSubsysInit | abi::kSubsysTuning,
          comm + ": CIUIC_PROFILE is not set: every choice is left to NCCL");
      return;
    }
    ciuic::Profile p;
    try {
      p = ciuic::LoadProfile(path);
    } catch (const std::exception& e) {
      Log(log_, abi::kLogWarn, abi::kSubsysInit | abi::kSubsysTuning,
          fmt::format("{}: CIUIC_PROFILE unusable, every choice is left to NCCL: {}", comm, e.what()));
      return;
    }
    if (static_cast<size_t>(p.ranks) != n_ranks || static_cast<size_t>(p.nodes) != n_nodes) {
      // Routine for sub-communicators (tensor/pipeline groups, NCCL's own splits): INFO, not WARN.
      Log(log_, abi::kLogInfo, abi::kSubsysInit | abi::kSubsysTuning,
          fmt::format("{}: profile {} is for {} ranks on {} node(s): every choice is left to NCCL", comm, path, p.ranks,
                      p.nodes));
      return;
    }
    int preferred = 0;
    for (const ciuic::ProfileRule& r : p.rules) {
      const ciuic::NcclTunerChoice c = ciuic::NcclTunerChoiceFor(r, p.nodes);
      Band b{r.op == "allreduce" ? abi::kFuncAllReduce : -1,
             r.min_bytes,
             r.max_bytes,
             AlgoIndex(c.algo),
             fmt::format("{} {}, codec {}, {}", BandText(r), r.algo, r.codec, r.precision),
             ""};
      b.plan = b.algo != abi::kAlgoUndef
                   ? fmt::format("{} -> prefers NCCL's {}: {}", b.text, c.algo, c.why)
                   : fmt::format("{} -> left to NCCL: {}{}", b.text, c.why,
                                 c.algo.empty() ? "" : "; this plugin does not know NCCL algorithm " + c.algo);
      preferred += b.algo != abi::kAlgoUndef;
      bands_.push_back(std::move(b));
    }
    band_logged_ = std::vector<std::atomic<bool>>(bands_.size());
    Log(log_, abi::kLogInfo, abi::kSubsysInit | abi::kSubsysTuning,
        fmt::format("{}: profile {} (topology {}, workload {}, study {}, {} mode): {} of {} bands prefer an NCCL "
                    "algorithm; protocols, channels and other collectives stay NCCL's",
                    comm, path, p.topology, p.workload, p.study_id, p.mode, preferred, bands_.size()));
    for (const Band& b : bands_) Log(log_, abi::kLogInfo, abi::kSubsysInit | abi::kSubsysTuning, "  " + b.plan);
    active_ = true;
  }

  void GetCollInfo(int coll, size_t n_bytes, float** cost_table, int num_algo, int num_proto) {
    if (!active_ || cost_table == nullptr || num_algo <= 0 || num_proto <= 0) return;
    const Band* band = nullptr;
    size_t index = 0;
    for (; index < bands_.size(); ++index) {
      const Band& b = bands_[index];
      if (b.func == coll && n_bytes >= b.min_bytes && (b.max_bytes == 0 || n_bytes < b.max_bytes)) {
        band = &b;
        break;
      }
    }
    if (band == nullptr) {
      std::atomic<bool>& once =
          coll >= 0 && coll < static_cast<int>(coll_logged_.size()) ? coll_logged_[coll] : other_logged_;
      if (FirstTime(once))
        Log(log_, abi::kLogInfo, abi::kSubsysTuning,
            fmt::format("{} of {} bytes, the first: no rule of the profile covers it -> left to NCCL", FuncName(coll),
                        n_bytes));
      return;
    }
    const bool first = FirstTime(band_logged_[index]);
    if (band->algo == abi::kAlgoUndef || band->algo >= num_algo) {
      if (first)
        Log(log_, abi::kLogInfo, abi::kSubsysTuning,
            fmt::format("{} bytes, the first in {}", n_bytes,
                        band->algo == abi::kAlgoUndef
                            ? band->plan
                            : band->text + " -> left to NCCL: this NCCL's table has no " + kAlgoNames[band->algo]));
      return;
    }
    // The table is float[num_algo][num_proto], contiguous, passed as float**.
    float* row = reinterpret_cast<float*>(cost_table) + static_cast<size_t>(band->algo) * num_proto;
    int best = abi::kProtoUndef;
    for (int p = 0; p < num_proto; ++p)
      if (row[p] >= 0.0f && (best == abi::kProtoUndef || row[p] < row[best])) best = p;
    if (best == abi::kProtoUndef) {
      if (first)
        Log(log_, abi::kLogInfo, abi::kSubsysTuning,
            fmt::format("{} bytes, the first in {} -> left to NCCL: NCCL runs no protocol of {} here, every cell "
                        "ignored",
                        n_bytes, band->text, kAlgoNames[band->algo]));
      return;
    }
    if (first)
      Log(log_, abi::kLogInfo, abi::kSubsysTuning,
          fmt::format("{} bytes, the first in {} -> prefers {}/{}, NCCL's {:.1f} us -> 0", n_bytes, band->text,
                      kAlgoNames[band->algo], ProtoName(best), row[best]));
    row[best] = 0.0f;
  }

 private:
  struct Band {
    int func;                       // abi::Func; -1 for an op the tuner is never asked about
    uint64_t min_bytes, max_bytes;  // max 0: no upper bound
    int algo;                       // NCCL algorithm index; kAlgoUndef: left to NCCL
    std::string text;               // "allreduce [1M, 16M) ring, codec none, fp32"
    std::string plan;               // text + what the plugin does with it and why
  };
  abi::Logger log_;
  bool active_ = false;
  std::vector<Band> bands_;
  // The first call of each band and of each collective without a rule is logged, once per
  // communicator. One communicator's calls can come from more than one thread (a nonblocking
  // communicator's launches run on NCCL's own thread): atomics, so a racing pair logs once.
  std::vector<std::atomic<bool>> band_logged_;
  std::array<std::atomic<bool>, 16> coll_logged_{};
  std::atomic<bool> other_logged_{false};
};

abi::Result NewTuner(void** context, uint64_t comm_id, size_t n_ranks, size_t n_nodes, abi::Logger log) {
  if (context == nullptr) return abi::kSuccess;
  *context = nullptr;
  try {
    *context = new Tuner(comm_id, n_ranks, n_nodes, log);
  } catch (const std::exception& e) {  // out of memory while reading the profile: NCCL goes on without us
    Log(log, abi::kLogWarn, abi::kSubsysInit | abi::kSubsysTuning,
        fmt::format("cannot start: {}: every choice is left to NCCL", e.what()));
  }
  return abi::kSuccess;
}

abi::Result GetCollInfo(void* context, abi::Func coll, size_t n_bytes, float** cost_table, int num_algo,
                        int num_proto) {
  if (context != nullptr) {
    try {
      static_cast<Tuner*>(context)->GetCollInfo(coll, n_bytes, cost_table, num_algo, num_proto);
    } catch (...) {  // a log line that could not be formatted: the table is as NCCL made it
    }
  }
  return abi::kSuccess;
}

abi::Result DeleteTuner(void* context) {
  delete static_cast<Tuner*>(context);
  return abi::kSuccess;
}

abi::Result InitV5(void** context, uint64_t comm_id, size_t n_ranks, size_t n_nodes, abi::Logger log,
                   abi::NvlDomainInfoV5*, abi::TunerConstantsV5*) {
  return NewTuner(context, comm_id, n_ranks, n_nodes, log);
}
abi::Result InitV3(size_t n_ranks, size_t n_nodes, abi::Logger log, void** context) {
  return NewTuner(context, 0, n_ranks, n_nodes, log);
}
abi::Result GetCollInfoV4(void* context, abi::Func coll, size_t n_bytes, int, float** cost_table, int num_algo,
                          int num_proto, int, int*) {
  return GetCollInfo(context, coll, n_bytes, cost_table, num_algo, num_proto);
}
abi::Result GetCollInfoV3(void* context, abi::Func coll, size_t n_bytes, int, float** cost_table, int num_algo,
                          int num_proto, int*) {
  return GetCollInfo(context, coll, n_bytes, cost_table, num_algo, num_proto);
}

// v1 and v2 take an algorithm only together with a protocol, and show no cost table to pick NCCL's
// best protocol from; a profile names none, so under NCCL 2.19-2.21 the plugin loads, says so once
// per communicator and leaves every choice to NCCL.
void LogLegacy(abi::Logger log, int version) {
  Log(log, abi::kLogInfo, abi::kSubsysInit | abi::kSubsysTuning,
      fmt::format("NCCL uses tuner interface v{} (NCCL 2.19-2.21), which takes a protocol with every algorithm and "
                  "shows no cost table; a ciuic profile names no protocol, so every choice is left to NCCL (NCCL "
                  "2.22 or later applies the profile)",
                  version));
}
int legacy_context;  // v2's non-null context: the plugin keeps no state for v2
abi::Result InitV2(size_t, size_t, abi::Logger log, void** context) {
  try {
    LogLegacy(log, 2);
  } catch (...) {
  }
  if (context != nullptr) *context = &legacy_context;
  return abi::kSuccess;
}
abi::Result GetCollInfoV2(void*, abi::Func, size_t, int, int, int, int*, int*, int*) { return abi::kSuccess; }
abi::Result DestroyV2(void*) { return abi::kSuccess; }
abi::Result InitV1(size_t, size_t, abi::Logger log) {
  try {
    LogLegacy(log, 1);
  } catch (...) {
  }
  return abi::kSuccess;
}
abi::Result GetCollInfoV1(abi::Func, size_t, int, int, int, int*, int*, int*) { return abi::kSuccess; }
abi::Result DestroyV1() { return abi::kSuccess; }

}  // namespace

// What NCCL looks up with dlsym: the only symbols with default visibility (the library is compiled
// with hidden visibility, and exports.map keeps what static libraries bring in local).
#define CIUIC_TUNER_EXPORT __attribute__((visibility("default")))
extern "C" {
CIUIC_TUNER_EXPORT extern const abi::TunerV5 ncclTunerPlugin_v5;
CIUIC_TUNER_EXPORT extern const abi::TunerV4 ncclTunerPlugin_v4;
CIUIC_TUNER_EXPORT extern const abi::TunerV3 ncclTunerPlugin_v3;
CIUIC_TUNER_EXPORT extern const abi::TunerV2 ncclTunerPlugin_v2;
CIUIC_TUNER_EXPORT extern const abi::TunerV1 ncclTunerPlugin_v1;
const abi::TunerV5 ncclTunerPlugin_v5 = {kPluginName, InitV5, GetCollInfoV4, DeleteTuner};
const abi::TunerV4 ncclTunerPlugin_v4 = {kPluginName, InitV3, GetCollInfoV4, DeleteTuner};
const abi::TunerV3 ncclTunerPlugin_v3 = {kPluginName, InitV3, GetCollInfoV3, DeleteTuner};
const abi::TunerV2 ncclTunerPlugin_v2 = {kPluginName, InitV2, GetCollInfoV2, DestroyV2};
const abi::TunerV1 ncclTunerPlugin_v1 = {kPluginName, InitV1, GetCollInfoV1, DestroyV1};
}
