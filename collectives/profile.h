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

struct ProfileRule {
  std::string op = "allreduce";
  uint64_t min_bytes = 0;
  uint64_t max_bytes = 0;  // 0: no upper bound
  std::string algo;        // ring rd hier sparse sign2 powersgd nccl
  std::string codec;       // none int8 topk:0.01 …
  int streams = 1;
  uint64_t bucket_bytes = 0;
  int hierarchy_depth = 1;
  std::string precision = "fp32";
  double predicted_us = 0;
  double measured_us = -1;   // -1: not measured
  // The baseline (the library's allreduce in 25 MiB buckets) measured beside measured_us at the band's
  // representative size (--mode measure); -1: not measured.
  double baseline_us = -1;
  std::string gate = "n/a";  // passed | failed | n/a (lossless)
};

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

// What NCCL's tuner plugin (plugins/nccl_tuner, libnccl-tuner-ciuic.so) takes from a rule, for a
// communicator spanning `nodes` nodes: `algo` names the NCCL algorithm it prefers ("Ring", "Tree"),
// empty when the rule is left to NCCL's own model; `why` says why, for the plugin's log and the
// nccl-tuner export alike. NCCL's protocol and channel count are never taken from a profile.
struct NcclTunerChoice {
  std::string algo;
  std::string why;
};
NcclTunerChoice NcclTunerChoiceFor(const ProfileRule& r, int nodes);

}  // namespace ciuic
