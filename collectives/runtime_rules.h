#pragma once
// ciuic::RuleRuntime: the runtime as a training job runs it. Created from a tuned profile (or one
// fixed configuration), it reduces each message with the rule of its byte size band, exactly as
// `ciuic-bench --backend ciuic --profile` does: the rule's algorithm, codec, precision, bucket bytes
// and streams, one ciuic::Runtime per distinct configuration (error feedback per tensor id inside
// it). Messages may be fp32, fp16 or bf16: a 16-bit message is looked up by its own bytes and sent
// at its own width where the rule is lossless (the transport's 16-bit sum where it has one, else
// the ring with the fp16/bf16 wire, fp32 accumulation); a lossy codec encodes its fp32 values and
// the result is cast back. State for several configurations saves to one file (format below).
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "collectives/communicator.h"
#include "collectives/profile.h"
#include "collectives/runtime.h"
#include "core/dtype.h"

namespace ciuic {

struct RuleRuntimeConfig {
  // Null: every message runs `fixed`. Otherwise `fixed` gives only the settings a profile does not
  // hold (deadline, finite check, NaN/Inf handling, the hier node size).
  std::shared_ptr<const Profile> profile;
  RuntimeConfig fixed;
};

// The configuration a message of `n` elements of `type` runs under `rule` on `comm` (16-bit widths
// as described above). "nccl" in a profile is the transport's own allreduce.
RuntimeConfig ConfigForRule(const ProfileRule& rule, DType type, const RuntimeConfig& base, const Communicator& comm);
// A stable one-line name of a configuration ("ring int8 fp32 4194304 B x4"): the key of its state.
std::string ConfigKey(const RuntimeConfig& c);

// Throws UsageError naming both when the job's world (ranks, nodes: by host name or ranks_per_node,
// cpu or gpu) is not the one `profile` was tuned for. Collective (gathers host names).
void CheckProfileWorld(const Profile& profile, Communicator& comm, int ranks_per_node);

class RuleRuntime {
 public:
  RuleRuntime(Communicator& comm, RuleRuntimeConfig config);

  // data: n elements of type (fp32, fp16, bf16) in the communicator's memory, reduced in place (sum
  // or mean). Collective, as Runtime::AllReduce.
  void AllReduce(void* data, size_t n, DType type, uint64_t tensor_id, bool average);

  // Error feedback of a tensor reduced as (n, type): see Runtime::Residual. Local.
  std::vector<float> Residual(uint64_t tensor_id, size_t n, DType type);
  bool SetResidual(uint64_t tensor_id, size_t n, DType type, const float* values);
  void Forget(uint64_t tensor_id);

  // Without a profile: Runtime's own file (format 1). With one: magic "CIUICRRS", u32 version 1,
  // u32 world size, u32 rank, u64 length + the profile's fingerprint, u64 entry count, then per
  // configuration u64 length + ConfigKey, u64 length + its Runtime state (Runtime's format 1). Load
  // is collective and all-or-nothing across ranks and configurations (AgreeOnLoad).
  void Save(const std::string& path) const;
  void Load(const std::string& path);

  void SetTimeout(double seconds);
  void SetTrace(const std::string& path);
  void FlushTrace();
  Counters counters() const;
  uint64_t nonfinite() const;
  const RuntimeConfig& ConfigFor(size_t n, DType type);  // the configuration a message would run

 private:
  Runtime& RuntimeFor(size_t n, DType type);
  Runtime& RuntimeOf(const RuntimeConfig& c);
  std::string Fingerprint() const;

  Communicator& comm_;
  RuleRuntimeConfig config_;
  std::map<std::string, std::unique_ptr<Runtime>> runtimes_;  // by ConfigKey
  std::map<std::string, RuntimeConfig> configs_;
  std::string trace_path_;
  double timeout_s_ = -1;
  Buffer wide_;  // fp32 copy of a 16-bit message
};

}  // namespace ciuic
