// How ciuic-bench starts its ranks outside a launcher, and runs as one rank of a job a launcher other
// than mpiexec started: Relaunch forks `mpiexec -n N <self> args` and maps its end onto our exit codes
// (forwarding SIGINT/SIGTERM/SIGHUP, naming the rank a timeout waited on); RunAsJobRank meets torchrun's
// or srun's ranks through the job's TCP store (collectives/bootstrap/job_launch.h) and runs the sweep there.
#include "bench/launch.h"
#include "bench/cli_options.h"
#include "bench/crossover_table.h"
#include "bench/reporters/context_json.h"
#include "collectives/bootstrap/job_launch.h"

#include "bench/cli_args.h"
#include "bench/codec_bench.h"
#include "bench/compare.h"
#include "bench/plot.h"
#include "bench/train_kernel_bench.h"
#include "kernels/codec_kernels.h"

#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <cxxopts.hpp>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include "bench/coll_spec.h"
#include "bench/record.h"
#include "bench/runner.h"
#include "collectives/backends/gloo/communicator.h"
#include "collectives/backends/local/communicator.h"
#include "collectives/backends/nccl/communicator.h"
#include "collectives/runtime_comm.h"
#include "collectives/shared_window.h"
#include "collectives/trace_comm.h"
#include "core/config.h"
#include "core/cupti.h"
#include "core/database.h"
#include "core/error.h"
#include "core/fault.h"
#include "core/files.h"
#include "core/log.h"
#include "core/parallel.h"
#include "core/progress.h"
#include "core/sizes.h"
#include "core/watchdog.h"
#if CIUIC_HAVE_MPI
#include "collectives/backends/mpi/communicator.h"
#endif
#include "bench/run.h"

namespace ciuic {

namespace {

pid_t g_launcher_child = 0;
volatile sig_atomic_t g_launcher_signal = 0;  // the first SIGINT/SIGTERM/SIGHUP the self-launch got

extern "C" void ForwardToLauncherChild(int sig) {
  if (!g_launcher_signal) g_launcher_signal = sig;
  if (g_launcher_child > 0) kill(g_launcher_child, sig);
}

// The launcher's exit code: mpiexec's own when it is one of ours (0 ok, 1 input, 2 runtime, 3
// verification: every rank exits with the same code), otherwise 2 (a rank died, was killed, or
// mpiexec itself failed) with one line naming what happened.
int LauncherExitCode(const std::string& mpiexec, int status) {
  if (WIFEXITED(status)) {
    const int code = WEXITSTATUS(status);
    if (code <= 3) return code;
    LogInfo("{} exited {}: a rank ended abnormally; exit 2", mpiexec, code);
    return 2;
  }
  if (WIFSIGNALED(status)) {
    LogInfo("{} ended by signal {} ({}); exit 2", mpiexec, WTERMSIG(status), strsignal(WTERMSIG(status)));
    return 2;
  }
  return 2;
}

}  // namespace

// Replaces this process with `mpiexec -n N <self> args` (root-safe, --oversubscribe when N exceeds
// the cores). Returns only on failure.
[[noreturn]] void Relaunch(const Cli& cli, int ranks) {
  std::string mpiexec = CIUIC_MPIEXEC;
  if (mpiexec.empty() || access(mpiexec.c_str(), X_OK) != 0) mpiexec = "mpiexec";
  std::vector<std::string> args = {mpiexec, "-n", std::to_string(ranks), "--quiet"};
  if (ranks > static_cast<int>(std::thread::hardware_concurrency())) args.push_back("--oversubscribe");
  // Gloo does its I/O on a thread of its own, which retries at once a pair whose lock the caller holds:
  // bound to one core (Open MPI's default for a few ranks), the two can take turns a scheduler slice
  // apart, about 4 ms a call. Unbound, each has a core when one is free.
  if ((cli.backend == "ciuic" ? cli.transport : cli.backend) == "gloo") args.insert(args.end(), {"--bind-to", "none"});
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  args.push_back(ec ? cli.argv[0] : self.string());
  for (size_t i = 1; i < cli.argv.size(); ++i) args.push_back(cli.argv[i]);
  if (geteuid() == 0) {
    setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
    setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
  }
  setenv("CIUIC_LAUNCHED_BY_BENCH", "1", 1);
  // The ranks' output reaches this terminal through mpiexec's pipes, stdout and stderr apart: rank 0
  // draws the live line when this process would have, on stdout when the table goes to the terminal
  // too, so the two stay in order (core/progress).
  if (ProgressWanted(cli) && isatty(STDERR_FILENO) && !getenv("CIUIC_PROGRESS"))
    setenv("CIUIC_PROGRESS", isatty(STDOUT_FILENO) ? "stdout" : "1", 1);
  std::string shown;
  for (const auto& a : args) shown += (shown.empty() ? "" : " ") + a;
  LogInfo("starting {} ranks: {}", ranks, shown);
  std::vector<char*> cargs;
  for (auto& a : args) cargs.push_back(a.data());
  cargs.push_back(nullptr);
  // mpiexec runs as a child so its ending maps onto the documented exit codes: a rank that died or
  // was killed makes mpiexec exit 137 or similar, which is exit 2 here, with a line saying so.
  // The ranks' heartbeat folder (core/watchdog.h): a timeout names the rank that went silent.
  char hb_template[] = "/dev/shm/ciuic-hb-XXXXXX";
  const char* hb = mkdtemp(hb_template);
  if (hb) setenv("CIUIC_HEARTBEAT_DIR", hb, 1);
  const pid_t parent = getpid();
  const pid_t child = fork();
  if (child < 0) throw RuntimeError(fmt::format("cannot start {}: {}", mpiexec, std::strerror(errno)));
  if (child == 0) {
    // mpiexec (and so every rank) ends with this process, even when it is SIGKILLed.
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) std::_Exit(143);
    execvp(cargs[0], cargs.data());
    std::fprintf(stderr, "ciuic-bench: cannot start %s: %s\n", mpiexec.c_str(), std::strerror(errno));
    std::_Exit(2);
  }
  g_launcher_child = child;
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) std::signal(sig, ForwardToLauncherChild);
  int status = 0;
  while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  if (g_launcher_signal) {
    // The user's (or the scheduler's) signal: mpiexec had it and has ended every rank.
    const int sig = g_launcher_signal;
    std::error_code ignored;
    if (hb) std::filesystem::remove_all(hb, ignored);
    LogInfo("interrupted ({}): every rank has ended; exit {}",
            sig == SIGINT    ? "SIGINT"
            : sig == SIGTERM ? "SIGTERM"
                             : "SIGHUP",
            128 + sig);
    std::exit(128 + sig);
  }
  int code = LauncherExitCode(mpiexec, status);
  if (hb) {
    // Exit 1 means every rank refused the input together, each ending cleanly; a rank that did
    // not end cleanly (exit() mid-run, killed) makes it a runtime failure.
    if (code == 1 && Heartbeats::AnyLeft(hb, ranks)) {
      LogInfo("{} exited 1 but a rank did not end cleanly; exit 2", mpiexec);
      code = 2;
    }
    if (code == 2) {
      if (const std::string who = Heartbeats::FirstSilent(hb, ranks); !who.empty()) LogInfo("{}", who);
    }
    std::filesystem::remove_all(hb, ec);  // what killed ranks left behind
  }
  std::exit(code);
}

// One rank of a job torchrun or srun started (collectives/bootstrap/job_launch.h): the ranks meet through the TCP
// store rank 0 serves and form a gloo world (the control plane; the data plane of gloo and of the
// runtime over gloo), or NCCL on the local rank's GPU. Every rank runs the sweep; rank 0 reports.
int RunAsJobRank(const Cli& cli, const JobRank& job) {
  if (cli.backend == "mpi" || cli.backend == "local" ||
      (cli.backend == "ciuic" && cli.transport != "gloo" && cli.transport != "nccl")) {
    const std::string what =
        cli.backend == "ciuic" ? "--backend ciuic --transport " + cli.transport : "--backend " + cli.backend;
    throw UsageError(
        fmt::format("{} needs mpiexec (or --ranks, which starts it); under {} (rank {} of {}) use "
                    "--backend gloo, nccl, or ciuic --transport gloo|nccl",
                    what, job.launcher, job.rank, job.size));
  }
  if (cli.ranks_given && cli.ranks != job.size)
    throw UsageError(fmt::format("--ranks {} but {} started {} rank(s)", cli.ranks, job.launcher, job.size));
  CheckWorld(cli, job.size);
  if (job.rank == 0) ValidateOutputs(cli);
  if (cli.dry_run) return DryRun(cli, job.size, job.rank, job.local_size, job.launcher);
  // The launcher passes on the user's Ctrl-C or SIGTERM to every rank (rank 0 says so for the job);
  // torchrun's agent SIGKILLed passes on nothing, so each rank it started watches for its end.
  ExitOnInterrupt("ciuic-bench", fmt::format("rank {} of {} ({})", job.rank, job.size, job.launcher), job.rank == 0);
  if (ParentIsTorchrunAgent(job))
    EndWhenParentEnds(fmt::format("rank {} of {}: its launcher ({}, pid {}) has ended; ending this rank", job.rank,
                                  job.size, job.launcher, getppid()));
  // A peer that ended closed its connections: writing to them is an error that names it, not a silent
  // death by SIGPIPE.
  std::signal(SIGPIPE, SIG_IGN);
  SetParallelThreads(std::max(1u, std::thread::hardware_concurrency() / static_cast<unsigned>(job.local_size)));
  Watchdog watchdog(cli.timeout_s, OnTimeout);
  watchdog.Arm(fmt::format("rank {} meeting the job's ranks through the store at {}:{} ({})", job.rank, job.store_host,
                           job.store_port, job.launcher));
  GlooOptions gloo = cli.gloo;
  std::unique_ptr<Communicator> comm = MakeGlooTcpJobWorld(job.rank, job.size, job.store_host, job.store_port, gloo);
  // No heartbeat files under a job launcher (nor shared across hosts): the job's store tells the
  // deadline which rank went silent.
  if (Liveness live = comm->PeerLiveness(); live.beat) {
    watchdog.SetBeat(std::move(live.beat));
    watchdog.SetPeerReport(std::move(live.report));
  }
  if (cli.backend == "nccl" || (cli.backend == "ciuic" && cli.transport == "nccl")) {
    // NCCL's start-up is non-blocking and ends itself after the same limit, naming the ranks that
    // never reached it (a roll call in the job's store): the watchdog would only say "start-up".
    watchdog.Disarm();
    ApplyNcclSettings(cli);
    const JobRollCall call = MakeJobRollCall(job.store_host, job.store_port, job.rank, job.size, "nccl-startup");
    const NcclStartupRollCall roll{call.arrive, call.absent};
    comm = MakeNcclWorld(std::move(comm), job.local_rank, &roll);
  }
  watchdog.Disarm();
  bool table_done = false;
  if (cli.backend == "ciuic") comm = WrapRuntime(std::move(comm), cli, &watchdog, &table_done);
  const int code = table_done ? 0 : RunOnComm(*comm, cli, job.local_size, &watchdog);
  watchdog.Arm(fmt::format("shut-down on rank {}", job.rank));
  comm.reset();
  // With SIGPIPE ignored a closed stdout (`| head`) is a write error, not the end: end as the signal
  // would have ended the process outside a job, not with exit 0 and the report lost.
  std::cout.flush();
  if (std::fflush(stdout) != 0 || std::ferror(stdout) || std::cout.fail()) {
    std::signal(SIGPIPE, SIG_DFL);
    if (errno == EPIPE) raise(SIGPIPE);
    LogInfo("rank {}: writing the report to stdout failed: {}", job.rank, std::strerror(errno));
    return 2;
  }
  return code;
}

}  // namespace ciuic
