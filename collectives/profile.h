#pragma once
// Tuned profiles (`ciuic.profile/1`): per op and message-size band the chosen algorithm, codec and
// its parameter, precision, bucket bytes, streams, hierarchy depth, predicted (and, when measured,
// measured) time and the accuracy-gate verdict, plus the topology fingerprint and provenance. Readers
// reject unknown schema versions, keys and enum values; writers go through a temp file and rename.
// The runtime reads profiles (rule per message size); ciuic-tune writes them, and its exports
// (tuner/exports/) turn them into what other tools read.
#include <cstdint>
#include <string>
#include <vector>

namespace ciuic {

// What a profile (and the runtime's command line) may ask for. Streams: pieces in flight per direction
// (the runtime's limit). Buckets: at least one 4 KiB piece, at most 1 TiB (more than any device holds).
constexpr int kMaxStreams = 64;
constexpr uint64_t kMinBucketBytes = 4096;
constexpr uint64_t kMaxBucketBytes = uint64_t{1} << 40;
// Limits of the other profile fields: the topology loader's (100000 nodes x 4096 devices), band
// edges up to 1 PiB, times up to 1e12 us (11.6 days).
constexpr int64_t kMaxProfileNodes = 100000;
constexpr int64_t kMaxProfileRanks = kMaxProfileNodes * 4096;
constexpr uint64_t kMaxProfileBandBytes = uint64_t{1} << 50;
constexpr double kMaxProfileUs = 1e12;

// A choice on NCCL's own axis for a band kept on NCCL's allreduce (algo "nccl", codec none): the
// algorithm, protocol, channel count and chunk size NCCL runs it with. Empty strings and zeros are
// NCCL's own choice. `measured`: timed with NCCL under those settings (ciuic-tune --mode measure
// --transport nccl on GPUs); false: the cost model's advice, which the tuner plugin never applies.
struct NcclSettings {
  std::string algo;          // ring tree nvls nvls_tree collnet_direct collnet_chain pat; "" NCCL's
  std::string proto;         // ll ll128 simple; "" NCCL's (an algorithm's cheapest runnable protocol)
  int channels = 0;          // 0: NCCL's count
  uint64_t chunk_bytes = 0;  // 0: NCCL's chunk size (tuner interface v6)
  bool measured = false;
  double measured_us = -1;  // the timing behind a measured choice; -1 none
  double default_us = -1;   // NCCL with none of these settings, same run; -1 none
  bool Empty() const { return algo.empty() && proto.empty() && channels == 0 && chunk_bytes == 0; }
};
// NCCL's names for the settings (NCCL_ALGO / NCCL_PROTO values; the tuner plugin's log).
std::vector<std::string> NcclAlgorithms();               // ring tree collnet_direct collnet_chain nvls nvls_tree pat
std::vector<std::string> NcclProtocols();                // ll ll128 simple
std::string NcclAlgoEnvName(const std::string& algo);    // "Ring", "NVLSTree", "CollnetDirect" ...
std::string NcclProtoEnvName(const std::string& proto);  // "LL", "LL128", "Simple"
// NCCL's channels (CTAs) per collective: 1..64 (MAXCHANNELS since 2.12).
constexpr int kMaxNcclChannels = 64;

struct ProfileRule {
  std::string op = "allreduce";
  uint64_t min_bytes = 0;
  uint64_t max_bytes = 0;  // 0: no upper bound
  std::string algo;        // ring rd hier sparse sign2 powersgd nccl
  std::string codec;       // none int8 topk:0.01 …
  int streams = 1;
  uint64_t bucket_bytes = 0;
  int hierarchy_depth = 1;
  int nodes_per_group = 0;  // hier depth 3: nodes per group (the topology's spine fan-in); else 0
  std::string precision = "fp32";
  double predicted_us = 0;
  double measured_us = -1;  // -1: not measured
  // The baseline (the library's allreduce in 25 MiB buckets) measured beside measured_us at the band's
  // representative size (--mode measure); -1: not measured.
  double baseline_us = -1;
  std::string gate = "n/a";  // passed | failed | n/a (lossless)
  NcclSettings nccl;         // algo "nccl" with codec none only; empty elsewhere
};

// Rules for a communicator of another size than the profile's world (a tensor-parallel group, a
// pipeline stage): what the tuner plugin applies to a communicator of `ranks` ranks on `nodes` nodes.
// The ciuic runtime and the other exports use the world's rules only.
struct CommunicatorRules {
  int ranks = 1, nodes = 1;
  std::vector<ProfileRule> rules;
};

// Gradient accumulation (`accumulation`): syncing every `steps` micro-batches (DDP's no_sync) instead
// of every one. It changes the effective batch, a training hyperparameter, so it is a suggestion the
// job opts into (ciuic.torch.Accumulation), never applied by the runtime or written as a setting by an
// export. Per candidate k: the step time per micro-batch the tuner priced (backward compute plus 1/k of
// what a synchronised step adds), and the accuracy gate's verdict on the profile's codec at k.
struct AccumulationCandidate {
  int steps = 1;
  double step_us = 0;        // per micro-batch
  std::string gate = "n/a";  // passed | failed | n/a (k = 1: the profile's own verdict)
};
struct AccumulationAdvice {
  int steps = 1;       // the suggestion: the fastest candidate that passed the gate and gains --min-gain
  std::string codec;   // what the gate judged it with (the step's codec, "none@bf16" for a reduction)
  std::string priced;  // "model" | "measured" (bucket times measured in --mode measure)
  std::vector<AccumulationCandidate> candidates;  // k = 1 first
  bool Empty() const { return candidates.empty(); }
  // The suggestion's step time per micro-batch against k = 1's (1 when none is suggested).
  double Gain() const;
};
// Accumulation steps a profile may suggest: 1..1024.
constexpr int kMaxAccumulationSteps = 1024;

struct Profile {
  std::string topology, fingerprint;
  int nodes = 1, ranks = 1;
  // "cpu" or "gpu": the ranks it was tuned for; "" (a file without the key): see Device().
  std::string device;
  // device, else cpu for cpu_local and gpu for every other topology (profiles before the key).
  std::string Device() const { return !device.empty() ? device : topology == "cpu_local" ? "cpu" : "gpu"; }
  std::string workload;
  std::string tool_version, git_commit, created, mode, strategy;
  int64_t study_id = 0;
  uint64_t seed = 0;
  int budget = 0;
  double step_us = 0, baseline_step_us = 0;  // predicted step time, tuned vs NCCL uncompressed defaults
  std::vector<ProfileRule> rules;
  std::vector<CommunicatorRules> communicators;  // optional; never the world's own size
  AccumulationAdvice accumulation;               // optional (empty: not priced)
  std::string path;  // the file LoadProfile read it from; empty for a profile made in memory

  // The rule for a message of `bytes` (the band containing it); throws InputError when none does.
  const ProfileRule& RuleFor(uint64_t bytes, const std::string& op = "allreduce") const;
};

// Size bands the rules cover (bytes): [0,64K) [64K,1M) [1M,16M) [16M,256M) [256M,∞).
std::vector<std::pair<uint64_t, uint64_t>> SizeBands();

std::string ProfileToJson(const Profile& p);
Profile ParseProfile(const std::string& text, const std::string& origin);
Profile LoadProfile(const std::string& path);
void WriteProfile(const std::string& path, const Profile& p);

// The rules the tuner plugin applies to a communicator of `ranks` ranks on `nodes` nodes: the world's
// or a CommunicatorRules entry's; nullptr when the profile has none for that size.
const std::vector<ProfileRule>* RulesForCommunicator(const Profile& p, int64_t ranks, int64_t nodes);

// What NCCL's tuner plugin (plugins/nccl_tuner, libnccl-tuner-ciuic.so) takes from a rule: only a
// measured choice on NCCL's own axis (`apply` true, `choice` = rule.nccl). Everything else is left
// to NCCL's own model; `why` says why, for the plugin's log and the nccl-tuner export alike.
struct NcclTunerChoice {
  bool apply = false;
  NcclSettings choice;
  std::string why;
};
NcclTunerChoice NcclTunerChoiceFor(const ProfileRule& r);
// "ring/simple, 16 channels, chunk 512K" (the parts that are set; "NCCL's own" when none).
std::string DescribeNcclSettings(const NcclSettings& c);

}  // namespace ciuic
