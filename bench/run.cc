// The sweep on one rank, whichever way the rank was started (bench/cli.cc, bench/launch.cc): the runtime
// wrapped around the transport for --backend ciuic (auto's crossover resolved, or its table printed),
// the sweep with its reports, traces and database rows, --dry-run, and the end of a rank whose deadline passed.
#include "bench/run.h"
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

// A live progress line on stderr, unless the --format output goes to stdout (JSON or CSV there is
// for a program; the table is for a person).
bool ProgressWanted(const Cli& cli) { return cli.format == "table" || !cli.out_path.empty(); }

namespace {

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

}  // namespace

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
        // The runtime as this run's --backend ciuic would call it, over the same transport: its column.
        const std::unique_ptr<Communicator> runtime = MakeRuntimeCommunicatorOver(*transport, rc);
        RunCrossoverTable(*transport, rc.algo.crossover, cli.bench.sizes, cli.crossover, std::cout, runtime.get());
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
  // After the sweep: --db holds the run (its reporter commits at the sweep's end), --out is still to
  // be written by rank 0.
  FaultPoint("report", comm.Rank());
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

}  // namespace ciuic
