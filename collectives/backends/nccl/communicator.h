#pragma once
// NCCL backend: device buffers, one GPU per rank, work enqueued on the communicator's own stream.
// Bootstrap goes over a host control communicator (MPI when present; a one-rank local world
// otherwise, giving a world of size 1), which also carries barriers, timings and error counts.
#include <memory>

#include "collectives/communicator.h"

namespace ciuic {

// Takes ownership of `control`. device < 0: picks the GPU local_rank % devices
// (OMPI_COMM_WORLD_LOCAL_RANK, LOCAL_RANK or the control rank); else that device (a job that chose its
// GPU itself). Throws RuntimeError when there is no CUDA device or NCCL fails.
std::unique_ptr<Communicator> MakeNcclWorld(std::unique_ptr<Communicator> control, int device = -1);

// "2.28.9" of the NCCL library loaded at run time; "" without NCCL.
std::string NcclRuntimeVersion();
// "2.28.9" of the headers this build compiled against; "" without NCCL.
std::string NcclBuildVersion();

}  // namespace ciuic
