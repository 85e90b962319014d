#pragma once
// Local backend: N ranks as threads of one process. Point-to-point is buffered (a send copies into
// the receiver's mailbox and completes at once); native collectives read the peers' published
// buffers directly, reduce in rank order (deterministic), and end with a barrier. A rank that throws
// poisons the world so its peers fail instead of hanging.
//
// With DeviceKind::kCuda every rank's buffers are device memory of the one GPU and each rank has its
// own non-blocking CUDA stream (shared with the communicators it splits off): a send is a
// cudaMemcpyAsync on the sender's stream into a stream-ordered allocation plus an event, the
// receive waits for the event on the receiver's stream and copies out, so kernels before a send
// and after a receive are ordered without the host waiting. Native collectives stage through host
// memory. It is the multi-rank GPU path on a one-GPU machine (NCCL refuses two ranks on one device).
#include <functional>
#include <memory>
#include <string>

#include "collectives/communicator.h"

namespace ciuic {

class LocalWorld;

// Runs fn on `size` threads, each with its own rank's communicator; rethrows the first exception.
// A rank that throws poisons the world: its peers' blocked calls fail with "local backend: rank R
// failed: <its error>".
void RunLocalRanks(int size, const std::function<void(Communicator&)>& fn, DeviceKind device = DeviceKind::kCpu);

// For a deadline's message while RunLocalRanks runs: the ranks that are neither waiting on a peer in
// the backend nor finished while others wait ("rank 1 is not waiting on any peer (hung or busy
// outside the backend; 2 rank(s) wait)"), "every rank waits on a peer", or "" when no rank waits.
std::string DescribeLocalRanks();

// The communicators of a new world, one per rank (each used by one thread).
std::vector<std::unique_ptr<Communicator>> MakeLocalWorld(int size, DeviceKind device = DeviceKind::kCpu);

}  // namespace ciuic
