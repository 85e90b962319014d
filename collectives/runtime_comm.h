#pragma once
// A Communicator whose AllReduce is the bundled runtime (AllReduceEngine over a transport
// communicator, buffers split into buckets); every other call goes to the transport. This is what
// `ciuic-bench --backend ciuic` measures, with the same runner and verification as the libraries.
#include <memory>

#include "collectives/algorithms/allreduce.h"
#include "collectives/communicator.h"
#include "collectives/profile.h"

namespace ciuic {

struct RuntimeCommConfig {
  AlgoConfig algo;
  size_t bucket_bytes = 0;  // 0: one bucket per call
  // With a tuned profile each call applies the rule of its size band (algorithm, codec, streams,
  // bucket bytes; algo "nccl" = the transport's own allreduce) instead of `algo` and `bucket_bytes`.
  std::shared_ptr<const Profile> profile;
};

std::unique_ptr<Communicator> MakeRuntimeCommunicator(std::unique_ptr<Communicator> transport,
                                                      const RuntimeCommConfig& config);
// The same over a transport the caller keeps (it must outlive the result): what `ciuic-bench
// --crossover-table` times beside the transport's own call and the bare engines.
std::unique_ptr<Communicator> MakeRuntimeCommunicatorOver(Communicator& transport, const RuntimeCommConfig& config);

}  // namespace ciuic
