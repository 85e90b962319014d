#pragma once
// How ciuic-bench's ranks start where no mpiexec started them (bench/launch.cc).
#include "bench/cli_options.h"
#include "collectives/bootstrap/job_launch.h"

namespace ciuic {

// Replaces this process with `mpiexec -n N <self> args` (root-safe, --oversubscribe when N exceeds the
// cores), run as a child whose end maps onto the documented exit codes; SIGINT/SIGTERM/SIGHUP are
// passed on and end this process with 128 + the signal. Never returns.
[[noreturn]] void Relaunch(const Cli& cli, int ranks);

// One rank of a job torchrun or srun started: the ranks meet through the TCP store rank 0 serves and
// form a gloo world, or NCCL on the local rank's GPU. Every rank runs the sweep; rank 0 reports.
int RunAsJobRank(const Cli& cli, const JobRank& job);

}  // namespace ciuic
