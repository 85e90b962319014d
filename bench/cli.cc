// ciuic-bench's entry point: routes the subcommands (compress and kernel, compare, plot) and, for a
// collective, chooses how its ranks run: under mpiexec, as threads of this process, self-launched or
// under torchrun/srun (bench/launch.cc); the sweep on each rank is bench/run.cc. Errors become exit codes.
#include "bench/cli.h"
#include "bench/cli_options.h"
#include "bench/crossover_table.h"
#include "bench/launch.h"
#include "bench/reporters/context_json.h"
#include "bench/run.h"
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
    // Ctrl-C or SIGTERM ends the run as the self-launch's does: one line, 130 / 143, no output written.
    ExitOnInterrupt("ciuic-bench", fmt::format("this run ({} ranks as threads)", ranks), true);
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
