#pragma once
// Open MPI backend (host buffers). Native collectives call MPI itself, so `--backend mpi` measures
// the library: fp32/fp64/int types use MPI's built-in types and ops; fp16, bf16 and fp8 use
// user-defined types and ops that reduce with the CPU reference kernels; avg is sum then divide.
#include <memory>

#include "collectives/communicator.h"

namespace ciuic {

// True when this process was started by mpiexec/srun (a PMI/PMIx environment is present).
bool UnderMpiLauncher();

// Initializes MPI for the life of the object (MPI_THREAD_SINGLE: MPI calls from the main thread only).
class MpiSession {
 public:
  MpiSession(int* argc, char*** argv);
  ~MpiSession();
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;
  static bool Active();
  static bool ThreadMultiple();
  // Ends every rank with this exit code (from any thread when ThreadMultiple()).
  [[noreturn]] static void Abort(int code);
};

// MPI_COMM_WORLD as a Communicator. Needs an active MpiSession.
std::unique_ptr<Communicator> MakeMpiWorld();

}  // namespace ciuic
