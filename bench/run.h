#pragma once
// The sweep on one rank, shared by every way ciuic-bench starts its ranks (bench/cli.cc: mpiexec, threads,
// one process; bench/launch.cc: the self-launch, torchrun and srun).
#include <memory>
#include <string>

#include "bench/cli_options.h"
#include "collectives/communicator.h"
#include "core/watchdog.h"

namespace ciuic {

// A live progress line on stderr, unless the --format output goes to stdout (JSON or CSV there is
// for a program; the table is for a person).
bool ProgressWanted(const Cli& cli);

// --backend ciuic: the runtime over `transport`, with auto's crossover resolved on it (collective
// when measured: every rank calls this). With --crossover-table the table is printed instead: the
// transport comes back unwrapped and *table_done is set.
std::unique_ptr<Communicator> WrapRuntime(std::unique_ptr<Communicator> transport, const Cli& cli, Watchdog* watchdog,
                                          bool* table_done);

// Runs the sweep on one rank's communicator; rank 0 reports. Returns the exit code.
int RunOnComm(Communicator& comm, const Cli& cli, int local_ranks, Watchdog* watchdog);

// The watchdog's end of a rank: says what made no progress, aborts MPI where it runs, exit 2.
void OnTimeout(const std::string& what, double timeout_s);

// --dry-run: what a run checks before its ranks start (options, the world, outputs: done by the
// caller) and the sizes against this host's memory; rank 0 says what would run. Nothing starts, nothing
// is written. Exit 0, or 1 with the refusal's one line (rank 0's).
int DryRun(const Cli& cli, int world, int rank, int local, const std::string& how);

}  // namespace ciuic
