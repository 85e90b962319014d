#pragma once
// A Communicator whose AllReduce is the bundled runtime (AllReduceEngine over a transport
// communicator, buffers split into buckets); every other call goes to the transport. This is what
// `ciuic-bench --backend ciuic` measures, with the same runner and verification as the libraries.
#include <memory>

#include "collectives/algorithms/allreduce.h"
#include "collectives/communicator.h"

namespace ciuic {

struct RuntimeCommConfig {
  AlgoConfig algo;
  size_t bucket_bytes = 0;  // 0: one bucket per call
};

std::unique_ptr<Communicator> MakeRuntimeCommunicator(std::unique_ptr<Communicator> transport,
                                                      const RuntimeCommConfig& config);

}  // namespace ciuic
