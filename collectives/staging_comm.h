#pragma once
// Device buffers over a host transport: a Communicator whose buffers live on the current CUDA device
// and whose every message and native collective goes through host memory (copied out on its own
// stream after the work queued there, moved by the host transport, copied back). The algorithms and
// codec kernels run on the device as over NCCL; only the wire is the host transport's. For jobs whose
// GPU buckets cannot take NCCL: several processes sharing one GPU (NCCL refuses two ranks on one
// device), or no NCCL at all. Slower than NCCL by the two copies per message; gloo's TCP is the limit
// anyway.
#include <memory>

#include "collectives/communicator.h"

namespace ciuic {

// Takes ownership of `host` (a host-memory transport: gloo, MPI, the thread backend). Throws
// RuntimeError in a build without CUDA or where no device is usable.
std::unique_ptr<Communicator> MakeDeviceStagingCommunicator(std::unique_ptr<Communicator> host);

}  // namespace ciuic
