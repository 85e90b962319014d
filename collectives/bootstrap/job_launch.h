#pragma once
// A process as one rank of a job started by torchrun or Slurm's srun (not mpiexec): the rank, world
// size and local rank from the launcher's variables, and the address where the ranks meet. Rank 0
// serves a TCP store there (torchrun's own agent already serves one on MASTER_PORT, so ours takes
// MASTER_PORT + 1 unless CIUIC_STORE_PORT names a port); the ranks form a gloo world through it (the
// control plane, and the data plane of --backend gloo and --transport gloo), or NCCL on the local
// rank's GPU for --backend nccl. ciuic-tune's ranks use the port after it (tuner/bench_runner.h).
#include <optional>
#include <string>

namespace ciuic {

struct JobRank {
  std::string launcher;  // "torchrun" or "srun"
  int rank = 0, size = 1, local_rank = 0, local_size = 1;
  std::string store_host;  // MASTER_ADDR, or the first host of SLURM_NODELIST (or SLURM_STEP_NODELIST)
  int store_port = 0;
};

// torchrun: RANK, WORLD_SIZE, LOCAL_RANK (LOCAL_WORLD_SIZE), MASTER_ADDR, MASTER_PORT. srun:
// SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID (SLURM_NTASKS_PER_NODE), SLURM_STEP_NODELIST or
// SLURM_NODELIST; the port is CIUIC_STORE_PORT, else MASTER_PORT, else 29400 + SLURM_JOB_ID % 1000.
// Nothing when neither launcher's variables are set; UsageError naming the variable when one is set
// and another is missing or out of range.
std::optional<JobRank> JobFromEnvironment();

// Whether this process's parent is torchrun's agent (its command line names torch's launcher): the
// launcher whose SIGKILL would leave this rank running, so it watches for the agent's end
// (EndWhenParentEnds, core/watchdog.h). Not under srun, whose tasks' parent is slurmstepd (Slurm ends a
// step's tasks itself), and not a shell that started a rank with torchrun's variables by hand and may
// well exit before it (nohup, `&`).
bool ParentIsTorchrunAgent(const JobRank& job);

// The first host of a Slurm node list: "gpu[003-005,010],cpu1" -> "gpu003". UsageError when empty.
std::string FirstSlurmHost(const std::string& nodelist);

}  // namespace ciuic
