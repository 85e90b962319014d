// libnccl-tuner-ciuic.so: NCCL's tuner plugin over a ciuic profile (the file $CIUIC_PROFILE names).
// For a communicator of a size the profile has rules for (its world, or a `communicators` entry), it
// applies per allreduce size band the choices on NCCL's own axis that were measured with NCCL
// (NcclTunerChoiceFor): the algorithm/protocol cell of NCCL's cost table set to 0 (the algorithm's
// cheapest runnable protocol when only the algorithm was measured), the channel count, and (v6) the
// chunk size. Every other cell, band, collective and communicator, and every model-mode advice, is
// left to NCCL, each logged once. It never fails NCCL: NCCL 2.19-2.30 fail a communicator's creation
// when the tuner's init returns an error, so a missing or broken profile is one WARN line and a
// plugin that does nothing.
#include <fmt/format.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <cstdio>
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

// The plugin carries core/files.cc for the profile reader, whose write paths log through this; in
// NCCL's process there is no progress line to draw around (core/progress.cc is not linked in).
namespace ciuic::detail {
void WriteLogLine(const std::string& line) { std::fputs(line.c_str(), stderr); }
}  // namespace ciuic::detail

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

// NCCL's index of a profile's algorithm / protocol name (ciuic::NcclAlgorithms order differs from
// NCCL's); kAlgoUndef / kProtoUndef for "" (NCCL's own).
int AlgoIndex(const std::string& name) {
  if (name.empty()) return abi::kAlgoUndef;
  const std::string nccl = ciuic::NcclAlgoEnvName(name);
  for (int a = 0; a < abi::kNumAlgorithms; ++a)
    if (nccl == kAlgoNames[a] || (a == abi::kAlgoCollNetDirect && nccl == "CollnetDirect") ||
        (a == abi::kAlgoCollNetChain && nccl == "CollnetChain"))
      return a;
  return abi::kAlgoUndef;
}
int ProtoIndex(const std::string& name) {
  for (int p = 0; p < abi::kNumProtocols; ++p)
    if (!name.empty() && ciuic::NcclProtoEnvName(name) == kProtoNames[p]) return p;
  return abi::kProtoUndef;
}
std::string AlgoName(int a) {
  return a >= 0 && a < abi::kNumAlgorithms ? kAlgoNames[a] : fmt::format("algorithm {}", a);
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

// One communicator's view of the profile (every interface version keeps one per communicator; v1,
// which has no context, one per process).
class Tuner {
 public:
  Tuner(uint64_t comm_id, size_t n_ranks, size_t n_nodes, abi::Logger log) : log_(log) {
    // v3 and v4 get no communicator id; v5 and v6 get NCCL's hash of it, the one NCCL's own log prints.
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
    const std::vector<ciuic::ProfileRule>* rules =
        ciuic::RulesForCommunicator(p, static_cast<int64_t>(n_ranks), static_cast<int64_t>(n_nodes));
    if (rules == nullptr) {
      // Routine for sub-communicators the profile has no rules for (NCCL's own splits): INFO, not WARN.
      std::string sizes = fmt::format("{} ranks on {} node(s)", p.ranks, p.nodes);
      for (const ciuic::CommunicatorRules& c : p.communicators)
        sizes += fmt::format(", {} ranks on {} node(s)", c.ranks, c.nodes);
      Log(log_, abi::kLogInfo, abi::kSubsysInit | abi::kSubsysTuning,
          fmt::format("{}: profile {} has rules for {}: every choice is left to NCCL", comm, path, sizes));
      return;
    }
    int applied = 0;
    for (const ciuic::ProfileRule& r : *rules) {
      const ciuic::NcclTunerChoice c = ciuic::NcclTunerChoiceFor(r);
      Band b;
      b.func = r.op == "allreduce" ? abi::kFuncAllReduce : -1;
      b.min_bytes = r.min_bytes;
      b.max_bytes = r.max_bytes;
      b.apply = c.apply;
      b.algo = c.apply ? AlgoIndex(c.choice.algo) : abi::kAlgoUndef;
      b.proto = c.apply ? ProtoIndex(c.choice.proto) : abi::kProtoUndef;
      b.channels = c.apply ? c.choice.channels : 0;
      b.chunk_bytes = c.apply ? c.choice.chunk_bytes : 0;
      b.text = fmt::format("{} {}, codec {}, {}", BandText(r), r.algo, r.codec, r.precision);
      b.plan = c.apply ? fmt::format("{} -> {}: {}", b.text, ciuic::DescribeNcclSettings(c.choice), c.why)
                       : fmt::format("{} -> left to NCCL: {}", b.text, c.why);
      applied += c.apply;
      bands_.push_back(std::move(b));
    }
    band_logged_ = std::vector<std::atomic<bool>>(bands_.size());
    chunk_logged_ = std::vector<std::atomic<bool>>(bands_.size());
    Log(log_, abi::kLogInfo, abi::kSubsysInit | abi::kSubsysTuning,
        fmt::format("{}: profile {} (topology {}, workload {}, study {}, {} mode): {} of {} bands carry a choice "
                    "measured with NCCL; the rest, other collectives and NCCL's other cells stay NCCL's",
                    comm, path, p.topology, p.workload, p.study_id, p.mode, applied, bands_.size()));
    for (const Band& b : bands_) Log(log_, abi::kLogInfo, abi::kSubsysInit | abi::kSubsysTuning, "  " + b.plan);
    active_ = true;
  }

  // v3 .. v6: the cost table (float[num_algo][num_proto], contiguous, passed as float**).
  void GetCollInfo(int coll, size_t n_bytes, float** cost_table, int num_algo, int num_proto, int* n_channels) {
    size_t index = 0;
    const Band* band = Find(coll, n_bytes, &index);
    if (band == nullptr || cost_table == nullptr || num_algo <= 0 || num_proto <= 0) return;
    const bool first = FirstTime(band_logged_[index]);
    std::string did;
    if (band->algo != abi::kAlgoUndef) {
      float* row = reinterpret_cast<float*>(cost_table) +
                   static_cast<size_t>(std::min(band->algo, num_algo - 1)) * static_cast<size_t>(num_proto);
      int cell = band->proto;
      if (band->algo >= num_algo) {
        did = fmt::format("this NCCL's table has no {}: algorithm left to NCCL", AlgoName(band->algo));
      } else if (cell != abi::kProtoUndef) {
        if (cell >= num_proto || row[cell] < 0.0f) {
          did = fmt::format("NCCL does not run {}/{} here (unsupported or disabled): left to NCCL",
                            AlgoName(band->algo), ProtoName(cell));
        } else {
          did = fmt::format("{}/{}, NCCL's {:.1f} us -> 0", AlgoName(band->algo), ProtoName(cell), row[cell]);
          row[cell] = 0.0f;
        }
      } else {
        for (int p = 0; p < num_proto; ++p)
          if (row[p] >= 0.0f && (cell == abi::kProtoUndef || row[p] < row[cell])) cell = p;
        if (cell == abi::kProtoUndef) {
          did = fmt::format("NCCL runs no protocol of {} here: left to NCCL", AlgoName(band->algo));
        } else {
          did = fmt::format("{}/{} (NCCL's cheapest protocol of {}), NCCL's {:.1f} us -> 0", AlgoName(band->algo),
                            ProtoName(cell), AlgoName(band->algo), row[cell]);
          row[cell] = 0.0f;
        }
      }
    }
    if (band->channels > 0 && n_channels != nullptr) {
      *n_channels = band->channels;
      did += fmt::format("{}{} channels", did.empty() ? "" : "; ", band->channels);
    }
    if (first && !did.empty())
      Log(log_, abi::kLogInfo, abi::kSubsysTuning,
          fmt::format("{} bytes, the first in {} -> {}", n_bytes, band->text, did));
  }

  // v6: NCCL's chunk size for the algorithm and protocol it chose; the profile's only where it was
  // measured for that band (and for that algorithm/protocol when the band names them).
  void GetChunkSize(int coll, size_t n_bytes, int algo, int proto, size_t* chunk) {
    size_t index = 0;
    const Band* band = Find(coll, n_bytes, &index, /*log=*/false);
    if (band == nullptr || chunk == nullptr || band->chunk_bytes == 0) return;
    const bool matches = (band->algo == abi::kAlgoUndef || band->algo == algo) &&
                         (band->proto == abi::kProtoUndef || band->proto == proto);
    if (FirstTime(chunk_logged_[index]))
      Log(log_, abi::kLogInfo, abi::kSubsysTuning,
          matches ? fmt::format("{} bytes, the first in {} -> chunk {} bytes (NCCL's {})", n_bytes, band->text,
                                band->chunk_bytes, *chunk)
                  : fmt::format("{} bytes, the first in {}: NCCL chose {}/{}, not the measured one: chunk size left "
                                "to NCCL",
                                n_bytes, band->text, AlgoName(algo), ProtoName(proto)));
    if (matches) *chunk = static_cast<size_t>(band->chunk_bytes);
  }

  // v2 and v1: no table; an algorithm is set only together with a protocol, so a band that measured
  // an algorithm alone is left to NCCL there (its channels still apply).
  void GetCollInfoLegacy(int coll, size_t n_bytes, int collnet_support, int nvls_support, int* algorithm, int* protocol,
                         int* n_channels) {
    size_t index = 0;
    const Band* band = Find(coll, n_bytes, &index);
    if (band == nullptr) return;
    const bool first = FirstTime(band_logged_[index]);
    std::string did;
    if (band->algo != abi::kAlgoUndef) {
      const bool collnet = band->algo == abi::kAlgoCollNetDirect || band->algo == abi::kAlgoCollNetChain;
      const bool nvls = band->algo == abi::kAlgoNvls || band->algo == abi::kAlgoNvlsTree;
      if (band->proto == abi::kProtoUndef) {
        did =
            "this NCCL's tuner interface takes an algorithm only with a protocol, and none was measured: left to "
            "NCCL";
      } else if ((collnet && !collnet_support) || (nvls && !nvls_support) || band->algo == abi::kAlgoPat) {
        did = fmt::format("NCCL cannot run {} here: left to NCCL", AlgoName(band->algo));
      } else if (algorithm != nullptr && protocol != nullptr) {
        *algorithm = band->algo;
        *protocol = band->proto;
        did = fmt::format("{}/{}", AlgoName(band->algo), ProtoName(band->proto));
      }
    }
    if (band->channels > 0 && n_channels != nullptr) {
      *n_channels = band->channels;
      did += fmt::format("{}{} channels", did.empty() ? "" : "; ", band->channels);
    }
    if (first && !did.empty())
      Log(log_, abi::kLogInfo, abi::kSubsysTuning,
          fmt::format("{} bytes, the first in {} -> {}", n_bytes, band->text, did));
  }

 private:
  struct Band {
    int func = -1;                          // abi::Func; -1 for an op the tuner is never asked about
    uint64_t min_bytes = 0, max_bytes = 0;  // max 0: no upper bound
    bool apply = false;                     // a measured choice: the plugin acts on this band
    int algo = abi::kAlgoUndef;             // NCCL algorithm index; kAlgoUndef: NCCL's
    int proto = abi::kProtoUndef;           // kProtoUndef: the algorithm's cheapest runnable one
    int channels = 0;                       // 0: NCCL's
    uint64_t chunk_bytes = 0;               // 0: NCCL's
    std::string text;                       // "allreduce [1M, 16M) nccl, codec none, fp32"
    std::string plan;                       // text + what the plugin does with it and why
  };

  // The band applying to a call, or nullptr (logged once per band or collective: left to NCCL).
  const Band* Find(int coll, size_t n_bytes, size_t* index, bool log = true) {
    if (!active_) return nullptr;
    for (size_t i = 0; i < bands_.size(); ++i) {
      const Band& b = bands_[i];
      if (b.func == coll && n_bytes >= b.min_bytes && (b.max_bytes == 0 || n_bytes < b.max_bytes)) {
        if (!b.apply) {
          if (log && FirstTime(band_logged_[i]))
            Log(log_, abi::kLogInfo, abi::kSubsysTuning, fmt::format("{} bytes, the first in {}", n_bytes, b.plan));
          return nullptr;
        }
        *index = i;
        return &b;
      }
    }
    std::atomic<bool>& once =
        coll >= 0 && coll < static_cast<int>(coll_logged_.size()) ? coll_logged_[coll] : other_logged_;
    if (log && FirstTime(once))
      Log(log_, abi::kLogInfo, abi::kSubsysTuning,
          fmt::format("{} of {} bytes, the first: no rule of the profile covers it -> left to NCCL", FuncName(coll),
                      n_bytes));
    return nullptr;
  }

  abi::Logger log_;
  bool active_ = false;
  std::vector<Band> bands_;
  // The first call of each band and of each collective without a rule is logged, once per
  // communicator. One communicator's calls can come from more than one thread (a nonblocking
  // communicator's launches run on NCCL's own thread): atomics, so a racing pair logs once.
  std::vector<std::atomic<bool>> band_logged_, chunk_logged_;
  std::array<std::atomic<bool>, 16> coll_logged_{};
  std::atomic<bool> other_logged_{false};
};

Tuner* NewTuner(uint64_t comm_id, size_t n_ranks, size_t n_nodes, abi::Logger log) {
  try {
    return new Tuner(comm_id, n_ranks, n_nodes, log);
  } catch (const std::exception& e) {  // out of memory while reading the profile: NCCL goes on without us
    try {
      Log(log, abi::kLogWarn, abi::kSubsysInit | abi::kSubsysTuning,
          fmt::format("cannot start: {}: every choice is left to NCCL", e.what()));
    } catch (...) {
    }
  }
  return nullptr;
}

abi::Result Init(void** context, uint64_t comm_id, size_t n_ranks, size_t n_nodes, abi::Logger log) {
  if (context != nullptr) *context = NewTuner(comm_id, n_ranks, n_nodes, log);
  return abi::kSuccess;
}

abi::Result GetCollInfo(void* context, abi::Func coll, size_t n_bytes, float** cost_table, int num_algo, int num_proto,
                        int* n_channels) {
  if (context != nullptr) {
    try {
      static_cast<Tuner*>(context)->GetCollInfo(coll, n_bytes, cost_table, num_algo, num_proto, n_channels);
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
  return Init(context, comm_id, n_ranks, n_nodes, log);
}
abi::Result InitV3(size_t n_ranks, size_t n_nodes, abi::Logger log, void** context) {
  return Init(context, 0, n_ranks, n_nodes, log);
}
abi::Result GetCollInfoV4(void* context, abi::Func coll, size_t n_bytes, int, float** cost_table, int num_algo,
                          int num_proto, int, int* n_channels) {
  return GetCollInfo(context, coll, n_bytes, cost_table, num_algo, num_proto, n_channels);
}
abi::Result GetCollInfoV3(void* context, abi::Func coll, size_t n_bytes, int, float** cost_table, int num_algo,
                          int num_proto, int* n_channels) {
  return GetCollInfo(context, coll, n_bytes, cost_table, num_algo, num_proto, n_channels);
}
abi::Result GetChunkSizeV6(void* context, abi::Func coll, size_t n_bytes, int algo, int proto, int,
                           size_t* chunk_size) {
  if (context != nullptr) {
    try {
      static_cast<Tuner*>(context)->GetChunkSize(coll, n_bytes, algo, proto, chunk_size);
    } catch (...) {
    }
  }
  return abi::kSuccess;
}

abi::Result InitV2(size_t n_ranks, size_t n_nodes, abi::Logger log, void** context) {
  return Init(context, 0, n_ranks, n_nodes, log);
}
abi::Result GetCollInfoV2(void* context, abi::Func coll, size_t n_bytes, int collnet_support, int nvls_support, int,
                          int* algorithm, int* protocol, int* n_channels) {
  if (context != nullptr) {
    try {
      static_cast<Tuner*>(context)->GetCollInfoLegacy(coll, n_bytes, collnet_support, nvls_support, algorithm, protocol,
                                                      n_channels);
    } catch (...) {
    }
  }
  return abi::kSuccess;
}
// v1 has no context: one tuner for the process, the last initialised (NCCL 2.19/2.20 call init per
// communicator and destroy at the end).
std::atomic<Tuner*> v1_tuner{nullptr};
abi::Result InitV1(size_t n_ranks, size_t n_nodes, abi::Logger log) {
  delete v1_tuner.exchange(NewTuner(0, n_ranks, n_nodes, log));
  return abi::kSuccess;
}
abi::Result GetCollInfoV1(abi::Func coll, size_t n_bytes, int collnet_support, int nvls_support, int pipe_ops,
                          int* algorithm, int* protocol, int* n_channels) {
  return GetCollInfoV2(v1_tuner.load(), coll, n_bytes, collnet_support, nvls_support, pipe_ops, algorithm, protocol,
                       n_channels);
}
abi::Result DestroyV1() {
  delete v1_tuner.exchange(nullptr);
  return abi::kSuccess;
}

}  // namespace

// What NCCL looks up with dlsym: the only symbols with default visibility (the library is compiled
// with hidden visibility, and exports.map keeps what static libraries bring in local).
#define CIUIC_TUNER_EXPORT __attribute__((visibility("default")))
extern "C" {
CIUIC_TUNER_EXPORT extern const abi::TunerV6 ncclTunerPlugin_v6;
CIUIC_TUNER_EXPORT extern const abi::TunerV5 ncclTunerPlugin_v5;
CIUIC_TUNER_EXPORT extern const abi::TunerV4 ncclTunerPlugin_v4;
CIUIC_TUNER_EXPORT extern const abi::TunerV3 ncclTunerPlugin_v3;
CIUIC_TUNER_EXPORT extern const abi::TunerV2 ncclTunerPlugin_v2;
CIUIC_TUNER_EXPORT extern const abi::TunerV1 ncclTunerPlugin_v1;
const abi::TunerV6 ncclTunerPlugin_v6 = {kPluginName, InitV5, GetCollInfoV4, DeleteTuner, GetChunkSizeV6};
const abi::TunerV5 ncclTunerPlugin_v5 = {kPluginName, InitV5, GetCollInfoV4, DeleteTuner};
const abi::TunerV4 ncclTunerPlugin_v4 = {kPluginName, InitV3, GetCollInfoV4, DeleteTuner};
const abi::TunerV3 ncclTunerPlugin_v3 = {kPluginName, InitV3, GetCollInfoV3, DeleteTuner};
const abi::TunerV2 ncclTunerPlugin_v2 = {kPluginName, InitV2, GetCollInfoV2, DeleteTuner};
const abi::TunerV1 ncclTunerPlugin_v1 = {kPluginName, InitV1, GetCollInfoV1, DestroyV1};
}
