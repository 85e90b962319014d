#include "bench/cli.h"
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

namespace ciuic {

namespace {

// Replaces this process with `mpiexec -n N <self> args` (root-safe, --oversubscribe when N exceeds
// the cores). Returns only on failure.
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

// A live progress line on stderr, unless the --format output goes to stdout (JSON or CSV there is
// for a program; the table is for a person).
bool ProgressWanted(const Cli& cli) { return cli.format == "table" || !cli.out_path.empty(); }

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

// For ranks as threads: "; ranks 0 and 2 saw it (local backend: rank 1 failed)" when ranks other than
// the first to fail (failures[0]) ended with an error naming it; "" otherwise (every rank refused the
// same input, or nobody else noticed).
std::string SurvivorsSaw(const std::vector<std::pair<int, std::string>>& failures) {
  if (failures.size() < 2) return "";
  const std::string mark = fmt::format("rank {} failed", failures[0].first);
  std::vector<int> who;
  std::string said;
  for (size_t i = 1; i < failures.size(); ++i) {
    const size_t at = failures[i].second.find(mark);
    if (at == std::string::npos) continue;
    who.push_back(failures[i].first);
    if (said.empty()) said = failures[i].second.substr(0, at + mark.size());
  }
  if (who.empty()) return "";
  std::sort(who.begin(), who.end());
  std::string names;
  for (size_t i = 0; i < who.size(); ++i)
    names += (i == 0 ? "" : i + 1 == who.size() ? " and " : ", ") + std::to_string(who[i]);
  return fmt::format("; {} {} saw it ({})", who.size() == 1 ? "rank" : "ranks", names, said);
}

int ListBuild() {
  std::cout << "ciuic-bench " << CIUIC_VERSION << " (" << CIUIC_GIT_COMMIT << ")\n";
  std::cout << "backends:    " << AvailableBackends() << "\n";
  std::cout << "devices:     cpu";
  const int gpus = CudaDeviceCount();
  for (int i = 0; i < gpus; ++i) {
    CudaSetDevice(i);
    std::cout << fmt::format(", cuda:{} ({})", i, CudaDeviceName());
  }
  std::cout << "\n";
  if (CIUIC_HAVE_NCCL)
    std::cout << "nccl:        built " << NcclBuildVersion() << ", loaded " << NcclRuntimeVersion() << "\n";
  if (CIUIC_HAVE_GLOO) std::cout << "gloo:        " << GlooVersion() << ", TCP transport\n";
  std::cout << "collectives:";
  for (const CollSpec* s : AllCollectives()) std::cout << " " << s->name;
  std::cout << "\ndtypes:     ";
  for (DType t : AllDTypes()) std::cout << " " << DTypeName(t);
  std::cout << "\nops:        ";
  for (ReduceOp op : AllReduceOps()) std::cout << " " << ReduceOpName(op);
  std::cout << "\nalgorithms:  auto (the library's own)";
  if (CIUIC_HAVE_GLOO) std::cout << "; gloo allreduce: ring ring-chunked halving-doubling bcube";
  std::cout << "; ciuic: ring rd hier sparse sign2 powersgd native\ncodecs:     ";
  for (const auto& c : CodecNames()) std::cout << " " << c;
  std::cout << "\nkernels:     cpu" << (cuda::Available() ? ", cuda" : "") << "\n";
  return 0;
}

// Collective: every rank's trace events to rank 0, which writes --trace and prints the summary.
void WriteBenchTrace(Communicator& comm, const Cli& cli, const BenchContext& ctx, trace::Recorder& recorder,
                     Watchdog* watchdog) {
  if (watchdog) watchdog->Arm(fmt::format("gathering the trace on rank {}", comm.Rank()));
  // The trace's metadata is the run's context, as --format json records it.
  const nlohmann::json other = nlohmann::json::parse(RunContextJson(ctx).dump());
  // The summary covers the timed iterations, what the table's times measure.
  const auto lines = WriteTrace(comm, recorder, cli.trace_path, other, "timed", "in the timed iterations");
  if (watchdog) watchdog->Disarm();
  if (comm.Rank() != 0) return;
  LogInfo("wrote trace {} ({} ranks; open it in https://ui.perfetto.dev)", cli.trace_path, comm.Size());
  for (const auto& line : lines) LogInfo("trace {}", line);
}

// The environment recorded in nccl-tests' JSON "env": NCCL's, CUDA's device list and ours only (nccl-tests
// records all of it; a results file is shared, and an environment holds tokens).
std::vector<std::string> RecordedEnvironment() {
  std::vector<std::string> out;
  for (char** e = environ; e && *e; ++e) {
    const std::string_view v = *e;
    if (v.rfind("NCCL_", 0) == 0 || v.rfind("CIUIC_", 0) == 0 || v.rfind("CUDA_VISIBLE_DEVICES=", 0) == 0)
      out.emplace_back(v);
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Runs the sweep on one rank's communicator; rank 0 reports. Returns the exit code.
// --backend ciuic: the runtime over `transport`, with auto's crossover resolved on it (collective
// when measured: every rank calls this). With --crossover-table the table is printed instead: the
// transport comes back unwrapped and *table_done is set.
std::unique_ptr<Communicator> WrapRuntime(std::unique_ptr<Communicator> transport, const Cli& cli, Watchdog* watchdog,
                                          bool* table_done) {
  RuntimeCommConfig rc = cli.runtime;
  const AlgoConfig& a = rc.algo;
  if (a.algo == AllReduceAlgo::kAuto && a.codec.kind == CodecKind::kNone && a.precision == DType::kFloat32 &&
      !rc.profile) {
    try {
      if (cli.crossover.source == "measure" || cli.crossover.table) {
        // A measurement on registered buffers makes a window on every rank (collective).
        if (watchdog) watchdog->Arm("the ranks' agreement on --register");
        AgreeOnRegister(*transport, cli.bench.shared);
        // (a sweep's runner says it itself)
        if (cli.bench.shared && cli.crossover.table && transport->Rank() == 0)
          if (const std::string note = SharedWindow::HugePageNote(); !note.empty())
            LogInfo("note: --register: {}", note);
      }
      // Collective for every source (a measurement, the ranks agreeing on what their databases hold,
      // or gathering their host names for the built-in table and a file's).
      if (watchdog)
        watchdog->Arm(cli.crossover.source == "db"        ? "auto's crossover from the calibration database"
                      : cli.crossover.source == "measure" ? "auto's crossover measurement"
                                                          : "auto's crossover (the ranks' host names)");
      rc.algo.crossover = ResolveCrossover(*transport, cli.crossover);
      if (watchdog) watchdog->Disarm();
      if (cli.crossover.table) {
        RunCrossoverTable(*transport, rc.algo.crossover, cli.bench.sizes, cli.crossover, std::cout);
        *table_done = true;
        return transport;
      }
    } catch (const UsageError& e) {
      // Found alike by every rank (ranks that disagree on --register, windows every rank refuses):
      // rank 0 says it in one line, and the ranks end together.
      if (transport->Rank() == 0) LogInfo("{}", OneLine(e));
      double done = 0;
      transport->HostAllReduce(&done, 1, ReduceOp::kMax);
      throw ReportedByLead(ExitCode::kUsage);
    }
  }
  return MakeRuntimeCommunicator(std::move(transport), rc);
}

int RunOnComm(Communicator& comm, const Cli& cli, int local_ranks, Watchdog* watchdog) {
  if (comm.Rank() == 0) EnableProgress(ProgressWanted(cli));
  BenchOptions o = cli.bench;
  o.local_ranks = local_ranks;
  o.watchdog = watchdog;
  if (watchdog) watchdog->Arm(fmt::format("the context exchange (host names) on rank {}", comm.Rank()));
  BenchContext ctx = MakeContext(comm, o);
  if (watchdog) watchdog->Disarm();
  for (const auto& a : cli.argv) ctx.command_line += (ctx.command_line.empty() ? "" : " ") + a;
  if (cli.backend == "nccl" || cli.transport == "nccl") ctx.library_versions["nccl-build"] = NcclBuildVersion();
  if (cli.backend == "gloo" || cli.transport == "gloo") {
    ctx.library_versions["gloo"] = GlooVersion();
    ctx.library_versions["gloo-store"] = cli.gloo.store_dir.empty() ? "tcp" : "file";
  }
  if (cli.backend == "gloo" && cli.bench.spec == &kAllReduceSpec) ctx.algo = GlooAlgoName(cli.gloo.algo);
  if (cli.backend == "ciuic") {
    ctx.codec = CodecName(cli.runtime.algo.codec);
    const AlgoConfig& ra = cli.runtime.algo;
    const bool per_size = ra.algo == AllReduceAlgo::kAuto && ra.codec.kind == CodecKind::kNone;
    ctx.algo = per_size ? (ra.precision == DType::kFloat32 ? "auto" : "native")
                        : AlgoName(ra.algo == AllReduceAlgo::kAuto ? DefaultAlgo(ra.codec.kind) : ra.algo);
    if (cli.runtime.algo.precision != DType::kFloat32)
      ctx.algo += fmt::format("({})", DTypeName(cli.runtime.algo.precision));
    ctx.library_versions["transport"] = cli.transport;
    if (cli.runtime.profile) {
      ctx.codec = "profile";
      ctx.algo = "profile";
      ctx.library_versions["profile"] = cli.runtime.profile->topology + "/" + cli.runtime.profile->fingerprint;
    }
  }
  ctx.blocking = cli.blocking;
  if (cli.bench.shared) ctx.buffers = "registered";
  if (cli.baseline) {
    ctx.baseline = cli.baseline->name;
    ctx.baseline_description = fmt::format("{} ({} GPUs)", cli.baseline->description, cli.baseline->ranks);
  }
  MultiReporter reporters;
  std::ostringstream file_text;
  std::ostringstream nccl_json_text;
  const bool lead = comm.Rank() == 0;
  if (lead) {
    if (cli.format == "table" || !cli.out_path.empty()) reporters.Add(MakeTableReporter(std::cout));
    std::ostream& fmt_out = cli.out_path.empty() ? static_cast<std::ostream&>(std::cout) : file_text;
    if (cli.format == "csv") reporters.Add(MakeCsvReporter(fmt_out));
    if (cli.format == "json") reporters.Add(MakeJsonReporter(fmt_out));
    if (cli.format == "table" && !cli.out_path.empty()) reporters.Add(MakeTableReporter(file_text));
    if (!cli.db_path.empty()) reporters.Add(MakeSqliteReporter(cli.db_path));
    if (!cli.nccl_json_path.empty())
      reporters.Add(MakeNcclTestsJsonReporter(nccl_json_text, {cli.argv, RecordedEnvironment(), cli.bench.per_iter}));
  }
  // Reporters are only written by rank 0; others pass none. A usage error found by the ranks
  // together (their agreement before each row) is the same on every rank: rank 0 says it.
  BenchSummary s;
  std::unique_ptr<trace::Recorder> recorder;
  bool gpu_trace = false;
  if (!cli.trace_path.empty()) {
    recorder = std::make_unique<trace::Recorder>(
        comm.Rank(), fmt::format("rank {} ({})", comm.Rank(), ctx.hostnames[static_cast<size_t>(comm.Rank())]));
    if (comm.Device() == DeviceKind::kCuda) {
      const std::string why = trace::StartGpuCollection();
      gpu_trace = why.empty();
      recorder->SetNote("gpu", gpu_trace ? "CUPTI activity records" : "not collected: " + why);
      if (!gpu_trace && lead) LogInfo("--trace: no GPU records: {}", why);
    }
  }
  try {
    const trace::Bind bind(recorder.get());
    s = RunBench(comm, o, lead ? &reporters : nullptr, ctx);
  } catch (const UsageError& e) {
    if (gpu_trace) trace::StopGpuCollection();
    if (lead) LogInfo("{}", OneLine(e));
    return 1;
  }
  if (recorder) WriteBenchTrace(comm, cli, ctx, *recorder, watchdog);
  if (gpu_trace) trace::StopGpuCollection();
  if (!lead) return s.total_wrong > 0 ? 3 : 0;
  if (!cli.out_path.empty()) {
    WriteFileAtomically(cli.out_path, file_text.str());
    LogInfo("wrote {}", cli.out_path);
  }
  if (!cli.nccl_json_path.empty()) {
    WriteFileAtomically(cli.nccl_json_path, nccl_json_text.str());
    LogInfo("wrote {} (nccl-tests' JSON{})", cli.nccl_json_path, cli.bench.per_iter ? ", per-iteration records" : "");
  }
  if (!cli.db_path.empty()) LogInfo("appended the run to {}", cli.db_path);
  if (s.failed_rows > 0) {
    LogInfo("{} row(s) failed (see n/a rows)", s.failed_rows);
    return 2;
  }
  if (s.total_wrong > 0) {
    LogInfo("verification failed: {} wrong element(s)", s.total_wrong);
    return 3;
  }
  if (cli.expect) {
    double got = -1;
    std::string where = "peak";
    if (cli.expect_size) {
      where = "at " + FormatSize(cli.expect_size);
      for (const auto& r : s.all_rows) {
        if (r.ok() && r.size_bytes == cli.expect_size) got = std::max(got, r.busbw_gbps);
      }
    } else {
      got = s.peak_busbw_gbps;
    }
    if (got < cli.expect_busbw) {
      LogInfo("expectation missed: busbw {} {} GB/s < {} GB/s", where, got < 0 ? "n/a" : fmt::format("{:.2f}", got),
              cli.expect_busbw);
      return 3;
    }
  }
  return 0;
}

void OnTimeout(const std::string& what, double timeout_s) {
  LogInfo("timeout: no progress in {} s: {}", timeout_s, what);
#if CIUIC_HAVE_MPI
  if (MpiSession::Active()) MpiSession::Abort(2);
#endif
  std::_Exit(2);
}

#if CIUIC_HAVE_MPI
// A rank of an mpiexec job whose error leaves its peers waiting for it: it says why and ends at
// once, its record marked; its launcher ends the others, which name it ("rank 1 (pid ...) ended with
// an error in the middle of the run"). An error that only reports a peer that failed first (a
// connection the dead peer closed) names that peer and marks this rank as one that gave up, so
// nobody takes it for the culprit. `rank` -1: from the launcher's environment.
[[noreturn]] void EndRankAfterError(const std::exception& e, int rank, Watchdog& watchdog) {
  if (rank < 0) {
    const char* env = std::getenv("OMPI_COMM_WORLD_RANK");
    rank = env ? std::atoi(env) : 0;
  }
  const auto* error = dynamic_cast<const Error*>(&e);
  const std::string text = error ? OneLine(*error) : "internal error: " + OneLine(e);
  const int code = error ? static_cast<int>(error->code()) : 2;
  const std::string who = text.rfind("rank ", 0) == 0 ? "" : fmt::format("rank {}: ", rank);
  // A peer killed a moment ago has closed its connections before its process is seen to be gone:
  // half a second for it to show before this error counts as this rank's own.
  std::string failed = watchdog.FailedPeers();
  for (int i = 0; failed.empty() && i < 10; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    failed = watchdog.FailedPeers();
  }
  if (!failed.empty()) {
    LogInfo("{}{} (after {}); exit {}", who, text, failed, code);
    Heartbeats::ExitAfterError(code, /*lost_a_peer=*/true);
  }
  LogInfo("{}{}; exit {}", who, text, code);
  Heartbeats::ExitAfterError(code, /*lost_a_peer=*/false);
}
#endif

// --dry-run: what a run checks before its ranks start (options, the world, outputs: done by the
// caller) and the sizes against this host's memory; rank 0 says what would run. Nothing starts, nothing
// is written. Exit 0, or 1 with the refusal's one line (rank 0's).
int DryRun(const Cli& cli, int world, int rank, int local, const std::string& how) {
  try {
    CheckSizesFitMemory(cli, local);
  } catch (const UsageError& e) {
    if (rank == 0) LogInfo("{}", OneLine(e));
    return 1;
  }
  if (rank != 0) return 0;
  const BenchOptions& b = cli.bench;
  std::string types, ops;
  for (DType t : b.types) types += fmt::format("{}{}", types.empty() ? "" : ",", DTypeName(t));
  for (ReduceOp op : b.ops) ops += fmt::format("{}{}", ops.empty() ? "" : ",", ReduceOpName(op));
  const auto [lo, hi] = std::minmax_element(b.sizes.begin(), b.sizes.end());
  const std::string lib = cli.backend == "ciuic" ? "ciuic over " + cli.transport : cli.backend;
  fmt::print(
      "# dry run: {} {}{}, {} size(s) from {} to {}, {}, {} rank(s) ({}), backend {} on {}: the checks made "
      "before ranks start passed (options, world, sizes against memory, outputs); nothing was run\n",
      cli.op, types, b.spec->reduces ? " " + ops : "", b.sizes.size(), FormatSize(*lo), FormatSize(*hi),
      b.in_place && b.out_of_place ? "out-of-place and in-place"
      : b.in_place                 ? "in-place"
                                   : "out-of-place",
      world, how, lib, cli.device);
  std::fflush(stdout);
  return 0;
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

int Run(int argc, char** argv) {
  SetLogPrefix("ciuic-bench");
  Cli cli = ParseCli(argc, argv);
  if (cli.op == "list") return ListBuild();
  // The libraries' own waits (NCCL's non-blocking start-up) use the same limit as the watchdog.
  setenv("CIUIC_TIMEOUT", fmt::format("{}", cli.timeout_s).c_str(), 1);

  const bool launched = CIUIC_HAVE_MPI && ([] {
#if CIUIC_HAVE_MPI
                          return UnderMpiLauncher();
#else
                          return false;
#endif
                        })();
  if (!launched) {
    if (const auto job = JobFromEnvironment()) return RunAsJobRank(cli, *job);
  }
  if (NeedsMpiLaunch(cli) && !launched) {
    const int ranks = cli.ranks_given ? cli.ranks : DefaultRanks(cli);
    // Everything a rank could reject is checked here, once, before any rank starts (and before
    // anything is said about starting them).
    CheckWorld(cli, ranks);
    CheckSizesFitMemory(cli, ranks);
    ValidateOutputs(cli);
    if (cli.dry_run)
      return DryRun(cli, ranks, 0, ranks, ranks > 1 ? "mpiexec, started by ciuic-bench" : "this process");
    if (!cli.ranks_given) {
      LogInfo("no launcher and no --ranks: starting {} rank(s) ({})", ranks,
              cli.device == "cuda" ? "one per GPU" : "CPU-only machine");
    }
    if (ranks > 1) Relaunch(cli, ranks);
  }

  // Without MPI a gloo world's ranks are threads of this process, bootstrapped over a local world.
  const bool gloo_threads = !CIUIC_HAVE_MPI && (cli.backend == "gloo" || cli.transport == "gloo");
  const bool local_transport =
      cli.backend == "local" || (cli.backend == "ciuic" && cli.transport == "local") || gloo_threads;
  if (local_transport) {
    const int ranks = cli.ranks_given ? cli.ranks : 2;
    CheckWorld(cli, ranks);
    CheckSizesFitMemory(cli, ranks);
    ValidateOutputs(cli);
    if (cli.dry_run) return DryRun(cli, ranks, 0, ranks, "threads of this process");
    SetParallelThreads(std::max(1u, std::thread::hardware_concurrency() / ranks));
    Watchdog watchdog(cli.timeout_s, OnTimeout);
    watchdog.SetPeerReport(DescribeLocalRanks);  // a timeout names the rank the others wait on
    int code = 0;
    std::mutex mu;
    std::vector<std::pair<int, std::string>> failures;  // (rank, error) in the order the ranks failed
    try {
      RunLocalRanks(
          ranks,
          [&](Communicator& base) {
            try {
              std::unique_ptr<Communicator> wrapped;
              if (gloo_threads) wrapped = MakeGlooWorld(base.Split(0, base.Rank()), cli.gloo);
              bool table_done = false;
              if (cli.backend == "ciuic")
                wrapped =
                    WrapRuntime(wrapped ? std::move(wrapped) : base.Split(0, base.Rank()), cli, nullptr, &table_done);
              Communicator& comm = wrapped ? *wrapped : base;
              const int c = table_done ? 0 : RunOnComm(comm, cli, ranks, &watchdog);
              std::lock_guard lock(mu);
              if (comm.Rank() == 0) code = c;
            } catch (const std::exception& e) {
              std::lock_guard lock(mu);
              failures.emplace_back(base.Rank(), e.what());
              throw;
            }
          },
          cli.device == "cuda" ? DeviceKind::kCuda : DeviceKind::kCpu);
    } catch (const ReportedByLead&) {
      throw;
    } catch (const Error& e) {
      // The first error is the failed rank's own; the line also says which ranks saw it fail from
      // their side (their blocked calls were ended naming it), as a launcher's survivors do.
      if (const std::string seen = SurvivorsSaw(failures); !seen.empty()) throw Error(e.code(), e.what() + seen);
      throw;
    }
    return code;
  }

#if CIUIC_HAVE_MPI
  // Armed before MPI_Init: a rank that never arrives (stopped, killed, unreachable) fails the
  // start-up within the timeout instead of hanging every rank.
  Watchdog watchdog(cli.timeout_s, OnTimeout);
  watchdog.SetHeartbeats(Heartbeats::FromEnvironment());
  watchdog.EndOnLauncherSignal();  // mpiexec ending the job after a rank failed: this rank names it
  Heartbeats::TreatExitAsFailure();
  watchdog.Arm("MPI start-up (MPI_Init, the world's first exchanges)");
  try {
    FaultPoint("startup", 0);
  } catch (const UsageError&) {
    throw;  // a malformed $CIUIC_FAULT: the same on every rank, no failure of this one
  } catch (const std::exception& e) {
    EndRankAfterError(e, -1, watchdog);
  }
  MpiSession mpi(&argc, &argv);
  auto world = MakeMpiWorld();
  if (cli.gpus_per_rank > 1 && launched && !getenv("CIUIC_LAUNCHED_BY_BENCH")) {
    if (world->Rank() == 0) {
      LogInfo(
          "-g {}: ciuic-bench drives one GPU per rank; under a launcher start every rank there (and give -g 1 "
          "or no -g)",
          cli.gpus_per_rank);
    }
    return 1;
  }
  if (cli.ranks_given && launched && cli.ranks != world->Size()) {
    if (world->Rank() == 0) {
      LogInfo("--ranks {} but the launcher started {} rank(s)", cli.ranks, world->Size());
    }
    return 1;
  }
  try {
    CheckWorld(cli, world->Size());  // the same verdict on every rank: one line, from rank 0
  } catch (const UsageError& e) {
    if (world->Rank() == 0) LogInfo("{}", OneLine(e));
    return 1;
  }
  if (!launched || world->Rank() == 0) ValidateOutputs(cli);
  const auto hosts = GatherHostnames(*world);
  const int local = static_cast<int>(std::count(hosts.begin(), hosts.end(), hosts[world->Rank()]));
  if (cli.dry_run) {
    const int code = DryRun(cli, world->Size(), world->Rank(), local, launched ? "mpiexec" : "this process");
    watchdog.Arm(fmt::format("shut-down (MPI_Finalize) on rank {}", world->Rank()));
    return code;
  }
  SetParallelThreads(std::max(1u, std::thread::hardware_concurrency() / local));
  std::unique_ptr<Communicator> comm;
  if (cli.backend == "nccl" || (cli.backend == "ciuic" && cli.transport == "nccl")) {
    watchdog.Arm("NCCL communicator start-up");
    ApplyNcclSettings(cli);
    comm = MakeNcclWorld(std::move(world));
  } else if (cli.backend == "gloo" || (cli.backend == "ciuic" && cli.transport == "gloo")) {
    watchdog.Arm(fmt::format("the gloo rendezvous on rank {}", world->Rank()));
    comm = MakeGlooWorld(std::move(world), cli.gloo);
  } else {
    comm = std::move(world);
  }
  watchdog.Disarm();
  bool table_done = false;
  if (cli.backend == "ciuic") {
    try {
      comm = WrapRuntime(std::move(comm), cli, &watchdog, &table_done);
    } catch (const ReportedByLead& e) {
      // Every rank agreed to end: each lets go of its heartbeat file before MPI_Finalize, which waits
      // for all, so no rank exits while another still holds one (the launcher would count that one as
      // not ending cleanly, and a refusal as a runtime failure).
      watchdog.SetHeartbeats(nullptr);
      watchdog.Arm("shut-down (MPI_Finalize) after a refusal every rank agreed on");
      return static_cast<int>(e.code());
    }
  }
  int code = 0;
  try {
    code = table_done ? 0 : RunOnComm(*comm, cli, local, &watchdog);
  } catch (const ReportedByLead&) {
    throw;  // every rank agreed: each ends through MPI_Finalize
  } catch (const std::exception& e) {
    const auto* error = dynamic_cast<const Error*>(&e);
    if (error && error->code() == ExitCode::kUsage) throw;  // found by the ranks together, the same on each
    // This rank's own failure inside a row: its peers wait in a collective it will not join, so
    // MPI_Finalize would wait for ever.
    EndRankAfterError(e, comm->Rank(), watchdog);
  }
  // MPI_Finalize waits for every rank: one that is gone or stopped must not hang the others here.
  watchdog.Arm(fmt::format("shut-down (MPI_Finalize) on rank {}", comm->Rank()));
  comm.reset();
  return code;
#else
  // nccl without MPI: a world of one process over a one-rank local control plane.
  if (cli.ranks_given && cli.ranks != 1) {
    throw UsageError(fmt::format("--ranks {}: this build has no MPI, so the nccl backend runs one rank", cli.ranks));
  }
  CheckWorld(cli, 1);
  ValidateOutputs(cli);
  if (cli.dry_run) return DryRun(cli, 1, 0, 1, "this process");
  auto control = MakeLocalWorld(1);
  ApplyNcclSettings(cli);
  std::unique_ptr<Communicator> comm = MakeNcclWorld(std::move(control[0]));
  Watchdog watchdog(cli.timeout_s, OnTimeout);
  bool table_done = false;
  if (cli.backend == "ciuic") comm = WrapRuntime(std::move(comm), cli, &watchdog, &table_done);
  return table_done ? 0 : RunOnComm(*comm, cli, 1, &watchdog);
#endif
}

}  // namespace

ParsedSweep ParseBenchCommandLine(const std::vector<std::string>& args) {
  std::vector<std::string> words = {"ciuic-bench"};
  words.insert(words.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& w : words) argv.push_back(w.data());
  argv.push_back(nullptr);
  const Cli cli = ParseCli(static_cast<int>(words.size()), argv.data());
  ParsedSweep p;
  const BenchOptions& b = cli.bench;
  p.collective = b.spec ? b.spec->name : "";
  p.sizes = b.sizes;
  for (DType t : b.types) p.dtypes.push_back(DTypeName(t));
  for (ReduceOp op : b.ops) p.ops.push_back(ReduceOpName(op));
  p.iters = b.iters;
  p.warmup = b.warmup;
  p.check = b.check;
  p.average = AverageName(b.average);
  p.ranks = cli.ranks_given ? cli.ranks : 0;
  p.blocking = cli.blocking;
  p.baseline = cli.baseline ? cli.baseline->name : "";
  p.nccl_json = cli.nccl_json_path;
  p.per_iter = b.per_iter;
  return p;
}

int BenchMain(int argc, char** argv) {
  try {
    if (argc > 1 && (std::string_view(argv[1]) == "compress" || std::string_view(argv[1]) == "kernel")) {
      SetLogPrefix("ciuic-bench");
      // A training kernel's name (`kernel NAME`, --name N or --name=N) routes to its own benchmark.
      std::string_view name = argc > 2 && argv[2][0] != '-' ? argv[2] : "";
      for (int i = 2; i < argc; ++i) {
        const std::string_view a = argv[i];
        if (a == "--name" && i + 1 < argc) name = argv[i + 1];
        if (a.rfind("--name=", 0) == 0) name = a.substr(7);
      }
      if (std::string_view(argv[1]) == "kernel" && IsTrainKernelName(name)) return TrainKernelBenchMain(argc, argv);
      return CodecBenchMain(argc, argv);
    }
    if (argc > 1 && std::string_view(argv[1]) == "compare") {
      SetLogPrefix("ciuic-bench");
      return CompareMain(argc, argv);
    }
    if (argc > 1 && std::string_view(argv[1]) == "plot") {
      SetLogPrefix("ciuic-bench");
      return PlotMain("ciuic-bench", argc - 1, argv + 1);
    }
    return Run(argc, argv);
  } catch (const ReportedByLead& e) {
    return static_cast<int>(e.code());
  } catch (const Error& e) {
    LogInfo("{}", OneLine(e));
    return static_cast<int>(e.code());
  } catch (const std::exception& e) {
    LogInfo("internal error: {}", OneLine(e));
    return 2;
  }
}

}  // namespace ciuic
