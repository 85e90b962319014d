#pragma once
// ciuic::Runtime: the compressed allreduce that tuned profiles drive. It takes a Communicator and a
// config (algorithm, codec, bucket bytes), allreduces a flat buffer or a list of tensors (assembled
// into buckets in list order with one flatten launch per bucket), keeps error-feedback state per
// (tensor id, bucket) with save/load, refuses NaN/Inf on every rank at once, and counts bytes on the
// wire and time per phase.
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "collectives/algorithms/allreduce.h"
#include "collectives/communicator.h"
#include "kernels/codec.h"

namespace ciuic {

struct RuntimeConfig {
  AlgoConfig algo;
  size_t bucket_bytes = 25u << 20;  // DDP's default bucket_cap_mb
  bool check_finite = true;          // one fused pass + a one-word allreduce per bucket
};

class Runtime {
 public:
  Runtime(Communicator& comm, const RuntimeConfig& config);

  // data: n fp32 in the communicator's memory, reduced in place (sum, or average).
  void AllReduce(float* data, size_t n, uint64_t tensor_id, bool average = false);
  // Tensors (ids[i] for tensors[i]) packed into buckets of at most bucket_bytes in list order.
  void AllReduceTensors(const std::vector<TensorRef>& tensors, const std::vector<uint64_t>& ids,
                        bool average = false);

  // Error-feedback state (residuals, PowerSGD Q, steps) to a file and back. Load refuses a file of
  // another world size, rank, codec or format version with InputError and leaves the state as it was.
  void Save(const std::string& path) const;
  void Load(const std::string& path);

  const Counters& counters() const { return engine_.counters(); }
  const AllReduceEngine& engine() const { return engine_; }
  size_t StateCount() const { return states_.size(); }

 private:
  void Reduce(float* data, size_t n, uint64_t key_id, uint64_t key_bucket, bool average);
  Communicator& comm_;
  RuntimeConfig config_;
  AllReduceEngine engine_;
  std::map<std::pair<uint64_t, uint64_t>, CodecState> states_;
  Buffer flag_, bucket_;
};

}  // namespace ciuic
