#pragma once
// NCCL backend: device buffers, one GPU per rank, work enqueued on the communicator's own stream.
// Bootstrap goes over a host control communicator (MPI when present; a one-rank local world
// otherwise, giving a world of size 1), which also carries barriers, timings and error counts.
#include <functional>
#include <memory>
#include <string>

#include "collectives/communicator.h"

namespace ciuic {

// Who reached NCCL's start-up, kept outside NCCL (the job's store): `arrived` is called just before
// this rank joins ncclCommInitRankConfig; when start-up does not finish within the limit, `absent`
// names the ranks that never arrived ("rank 1") or returns "" when every rank did.
struct NcclStartupRollCall {
  std::function<void()> arrived;
  std::function<std::string()> absent;
};

// Takes ownership of `control`. device < 0: picks the GPU local_rank % devices
// (OMPI_COMM_WORLD_LOCAL_RANK, LOCAL_RANK or the control rank); else that device (a job that chose its
// GPU itself). Start-up is non-blocking and ends, aborted, after the in-progress limit ($CIUIC_TIMEOUT);
// with `roll` its error names the ranks that never arrived. Throws RuntimeError when there is no CUDA
// device or NCCL fails.
std::unique_ptr<Communicator> MakeNcclWorld(std::unique_ptr<Communicator> control, int device = -1,
                                            const NcclStartupRollCall* roll = nullptr);

// "2.28.9" of the NCCL library loaded at run time; "" without NCCL.
std::string NcclRuntimeVersion();
// "2.28.9" of the headers this build compiled against; "" without NCCL.
std::string NcclBuildVersion();

}  // namespace ciuic
