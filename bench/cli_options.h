#pragma once
// ciuic-bench's command line: the option table, its parsing and checks, and the checks that need the
// world size. The sweep's options with nccl-tests' and OSU's flags mapped onto ours: bench/cli_flags.h.
// bench/cli.cc launches (mpiexec, a job launcher's ranks, rank-threads) and runs.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "bench/baseline.h"
#include "bench/crossover_table.h"
#include "bench/runner.h"
#include "collectives/backends/gloo/communicator.h"
#include "collectives/runtime_comm.h"

namespace ciuic {

struct Cli {
  std::string op;
  BenchOptions bench;
  std::string sizes_text;  // --sizes as given, for the messages that refuse one of its sizes
  std::string backend;
  std::string transport;  // ciuic: what the runtime runs over (mpi | local | nccl | gloo)
  RuntimeCommConfig runtime;
  CrossoverCli crossover;  // --crossover, --crossover-out, --crossover-table (auto's table)
  GlooOptions gloo;        // --backend gloo or --transport gloo: algorithm, store, interface, timeout
  std::string device;
  std::string format = "table";
  std::string out_path;
  std::string db_path;
  std::string trace_path;      // --trace: one Chrome trace-event file of every rank's phases
  std::string nccl_json_path;  // --nccl-json / nccl-tests' -J: nccl-tests' JSON layout
  std::string nccl_json_flag;  // the option that gave it, for messages
  int ranks = 0;               // 0: default
  bool ranks_given = false;
  bool dry_run = false;  // --dry-run: every check a run makes before its ranks start, then exit 0
  double timeout_s = 60;
  bool expect = false;
  double expect_busbw = 0;
  uint64_t expect_size = 0;       // 0: the peak
  bool profile_override = false;  // --profile-override: a profile tuned for another topology is applied anyway
  std::string profile_path;
  int gpus_per_rank = 1;  // nccl-tests' -g N (> 1: N ranks, one GPU each, started here)
  int blocking = -1;      // nccl-tests' -z as given (-1: not given)
  // --nccl-algo/--nccl-proto/--nccl-channels: NCCL's variables, set in each rank before its NCCL
  // communicator starts (what the tuner's NCCL axis times).
  std::vector<std::pair<std::string, std::string>> nccl_env;
  std::shared_ptr<const Baseline> baseline;  // --baseline
  std::vector<std::string> argv;
};

// An error as the one line the tool prints: whatever a message quotes (a value with a newline, a
// file's bytes) cannot split it.
std::string OneLine(const std::exception& e);
// Whether mpiexec started this process (false in a build without MPI).
bool UnderMpiLauncherOrNone();
// The backends this build has ("local, mpi, nccl, gloo, ciuic").
std::string AvailableBackends();
// The whole command line, checked: UsageError / InputError name the option.
Cli ParseCli(int argc, char** argv);
void ApplyNcclSettings(const Cli& cli);
void ValidateOutputs(const Cli& cli);
void CheckWorld(const Cli& cli, int world);
void CheckSizesFitMemory(const Cli& cli, int ranks);
int DefaultRanks(const Cli& cli);
bool NeedsMpiLaunch(const Cli& cli);

}  // namespace ciuic
