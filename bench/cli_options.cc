#include "bench/cli_options.h"

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
#include "bench/cli_args.h"
#include "bench/cli_flags.h"
#include "bench/codec_bench.h"
#include "bench/coll_spec.h"
#include "bench/compare.h"
#include "bench/crossover_table.h"
#include "bench/plot.h"
#include "bench/record.h"
#include "bench/reporters/context_json.h"
#include "bench/runner.h"
#include "collectives/backends/gloo/communicator.h"
#include "collectives/backends/local/communicator.h"
#include "collectives/backends/nccl/communicator.h"
#include "collectives/bootstrap/job_launch.h"
#include "collectives/runtime_comm.h"
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
#include "kernels/codec_kernels.h"
#if CIUIC_HAVE_MPI
#include "collectives/backends/mpi/communicator.h"
#endif

namespace ciuic {

// An error as the one line the tool prints: whatever a message quotes (a value with a newline, a
// file's bytes) cannot split it.
std::string OneLine(const std::exception& e) { return PrintableLine(e.what(), 2000); }

namespace {

struct Subcommand {
  const char* name;
  const char* summary;
};

}  // namespace

// Whether mpiexec started this process (false in a build without MPI).
bool UnderMpiLauncherOrNone() {
#if CIUIC_HAVE_MPI
  return UnderMpiLauncher();
#else
  return false;
#endif
}

namespace {

// The subcommand table: collectives come from the spec registry; the rest are listed here.
std::vector<Subcommand> Subcommands() {
  std::vector<Subcommand> out;
  for (const CollSpec* s : AllCollectives()) out.push_back({s->name, s->summary});
  out.push_back({"compress", "codec encode/decode/decode-accumulate speed, wire ratio, error (--codec C)"});
  out.push_back({"kernel",
                 "fused kernels: ef-quantize, decode-accumulate, decode-add-encode, flatten, unscale; "
                 "training: ln-dropout-gelu, bias-gelu, add-ln (fused vs unfused vs torch)"});
  out.push_back({"list", "backends, devices, dtypes, ops and collectives in this build"});
  out.push_back(
      {"compare", "two runs (--db run ids or JSON files) per size: verdict, exit 3 on a regression (compare --help)"});
  out.push_back(
      {"plot", "PNG plots of runs: busbw, time or algbw vs size (plot --help; needs /usr/bin/python3 matplotlib)"});
  return out;
}

}  // namespace

std::string AvailableBackends() {
  std::string s = "local";
  if (CIUIC_HAVE_MPI) s += ", mpi";
  if (CIUIC_HAVE_NCCL) s += ", nccl";
  if (CIUIC_HAVE_GLOO) s += ", gloo";
  s += ", ciuic";
  return s;
}

namespace {

cxxopts::Options MakeOptions() {
  std::string help = "Subcommands:\n";
  for (const auto& s : Subcommands()) help += fmt::format("  {:<14} {}\n", s.name, s.summary);
  cxxopts::Options o("ciuic-bench",
                     "Benchmark collectives with exact verification.\n\nUsage: ciuic-bench OP [options]\n\n" + help);
  o.add_options()("sizes", "MIN:MAX[:xF|:+STEP] or a comma list; K/M/G binary, KB/MB/GB decimal",
                  cxxopts::value<std::string>()->default_value("1K:1G"))(
      "backend", "mpi | nccl | gloo | local | ciuic (default: nccl on cuda, mpi on cpu)",
      cxxopts::value<std::string>())("transport",
                                     "ciuic: mpi | local | nccl | gloo (default: nccl on cuda, mpi on cpu)",
                                     cxxopts::value<std::string>())(
      "gloo-store",
      "gloo: rendezvous through gloo's FileStore in DIR, a folder every rank sees (default: a TCP store rank 0 serves)",
      cxxopts::value<std::string>())(
      "gloo-iface",
      "gloo: the network interface of gloo's TCP pairs (default: $GLOO_SOCKET_IFNAME, else the host name's address)",
      cxxopts::value<std::string>())("block", "ciuic codecs: elements per scale block (multiple of 32)",
                                     cxxopts::value<uint32_t>()->default_value("256"))(
      "rounding", "ciuic codecs: nearest | stochastic", cxxopts::value<std::string>()->default_value("nearest"))(
      "prescale", "ciuic fp16/bf16: multiply before the cast (e.g. 1/ranks so sums stay in range)",
      cxxopts::value<float>()->default_value("1"))("bucket", "ciuic: bucket bytes (0: one bucket per call)",
                                                   cxxopts::value<std::string>()->default_value("0"))(
      "streams", "ciuic: pieces in flight per direction (K)", cxxopts::value<int>()->default_value("4"))(
      "piece", "ciuic: pipelining piece bytes", cxxopts::value<std::string>()->default_value("1M"))(
      "profile", "ciuic: a tuned profile (ciuic.profile/1); each size uses its band's rule",
      cxxopts::value<std::string>())(
      "crossover",
      "ciuic --algo auto: the table auto chooses from per size: db (the calibration database's for this machine, "
      "transport and world: ciuic-tune calibrate --ranks N; the built-in one when none is stored) | builtin | measure "
      "(a short calibration on this world first) | FILE (written by --crossover-out)",
      cxxopts::value<std::string>()->default_value("db"))(
      "crossover-out", "ciuic --crossover measure: write the measured table to FILE (JSON)",
      cxxopts::value<std::string>())(
      "crossover-rounds", "ciuic --crossover measure, --crossover-table: alternating rounds, the median per point",
      cxxopts::value<int>()->default_value("3"))(
      "crossover-slot-ms",
      "ciuic --crossover measure, --crossover-table: timed milliseconds per candidate, size and round",
      cxxopts::value<double>()->default_value("4"))("crossover-table",
                                                    "ciuic --algo auto: instead of the sweep, print per size the "
                                                    "library, each runtime algorithm, auto's choice and auto/best")(
      "profile-override",
      "ciuic: apply --profile to a run whose ranks or device differ from the topology it was tuned for")(
      "ranks-per-node", "ciuic hier: R (depth 2) or R,G (depth 3: G nodes per group); 0: nodes by host name",
      cxxopts::value<std::string>()->default_value("0"))(
      "device", "cpu | cuda (default: cuda when a GPU and NCCL are present)", cxxopts::value<std::string>())(
      "dtype",
      "fp32 fp64 fp16 bf16 fp8e4m3 fp8e5m2 int8 uint8 int32 int64 (or nccl-tests' names), a comma list, or all",
      cxxopts::value<std::string>()->default_value("fp32"))("op", "sum | avg | min | max | prod, a comma list, or all",
                                                            cxxopts::value<std::string>()->default_value("sum"))(
      "root", "root rank of broadcast and reduce", cxxopts::value<int>()->default_value("0"))(
      "algo",
      "ciuic: auto ring rd hier sparse sign2 powersgd native; gloo allreduce: ring ring-chunked halving-doubling bcube "
      "(others: the library's own)",
      cxxopts::value<std::string>()->default_value("auto"))(
      "precision", "ciuic native: the dtype the transport reduces in: fp32 | bf16 | fp16",
      cxxopts::value<std::string>()->default_value("fp32"))(
      "codec", "ciuic: none fp16 bf16 fp8e4m3 fp8e5m2 int8 int4 sign1 topk:R randomk:R powersgd:N",
      cxxopts::value<std::string>()->default_value("none"))(
      "iters",
      "timed iterations per row (default: auto, ~1 s per row: up to 1000 below 8 KiB, 200 below 1 MiB, 20 above)",
      cxxopts::value<int>())(
      "timing",
      "events (GPU: CUDA events around each op alone; the default) | host (wall clock around each op and its wait: "
      "nccl-tests -z 1) | batch (iterations back to back, one wait: nccl-tests -z 0)",
      cxxopts::value<std::string>())(
      "warmup", "warm-up iterations per row (default: auto, up to 200 / 20 / 5 by the same sizes)",
      cxxopts::value<int>())("average", "a row's time over the ranks' means: avg | max | min | rank0 (nccl-tests' -a)",
                             cxxopts::value<std::string>()->default_value("max"))(
      "check", "exact verification iterations per row", cxxopts::value<int>()->default_value("1"))(
      "inplace", "yes | no | both", cxxopts::value<std::string>()->default_value("both"))(
      "register",
      "ciuic: yes | no. yes places the buffers in shared windows every rank maps (one host, CPU), where the ring "
      "reads and writes the peers' buffers where they lie (nccl-tests' -R)",
      cxxopts::value<std::string>()->default_value("no"))("format", "table | csv | json",
                                                          cxxopts::value<std::string>()->default_value("table"))(
      "out", "write the --format output to FILE, - for stdout (with a FILE the table still goes to stdout)",
      cxxopts::value<std::string>())("db", "append the run to this SQLite database", cxxopts::value<std::string>())(
      "trace",
      "write a Chrome trace-event JSON of every rank's phases to FILE (open in ui.perfetto.dev); a summary goes to "
      "stderr",
      cxxopts::value<std::string>())("ranks",
                                     "ranks to start when not under a launcher (mpiexec, torchrun, srun: their world "
                                     "is used; default: one per GPU, or 2 on CPU)",
                                     cxxopts::value<int>())(
      "dry-run",
      "check every option, the world, the sizes against memory and the outputs; say what would run and start "
      "nothing")("nccl-algo",
                 "NCCL: ring tree nvls nvls_tree collnet_direct collnet_chain pat (sets NCCL_ALGO in each rank)",
                 cxxopts::value<std::string>())("nccl-proto", "NCCL: ll ll128 simple (sets NCCL_PROTO in each rank)",
                                                cxxopts::value<std::string>())(
      "nccl-channels", "NCCL: channels 1-64 (sets NCCL_MIN_CTAS and NCCL_MAX_CTAS in each rank)",
      cxxopts::value<std::string>())(
      "timeout", "seconds without progress before the run fails with exit 2 (0: off; default: $CIUIC_TIMEOUT or 60)",
      cxxopts::value<double>())("expect", "busbw>=GBPS[@SIZE]: exit 3 unless the peak (or SIZE's) busbw reaches GBPS",
                                cxxopts::value<std::string>())("seed", "input pattern seed",
                                                               cxxopts::value<uint64_t>()->default_value("97"))(
      "debug-corrupt", "test hook RANK:INDEX: damage one received element", cxxopts::value<std::string>())(
      "baseline",
      "allreduce: a %ref column, busbw as a share of published nccl-tests figures: NAME (see profiles/baselines/) or a "
      "ciuic.baseline/1 FILE",
      cxxopts::value<std::string>())(
      "stepbytes", "nccl-tests' --stepbytes (its -i): with -b/-e and no -f, SIZE between sizes (default 1M)",
      cxxopts::value<std::string>())(
      "nccl-json",
      "also write the run in nccl-tests' JSON layout (its -J) to FILE.json, for nccl-tests' analysis tools",
      cxxopts::value<std::string>())("per-iter", "0 | 1: with --nccl-json, nccl-tests' per-iteration records (its -I)",
                                     cxxopts::value<std::string>())("h,help", "this help")(
      "version", "print the version")("command", "", cxxopts::value<std::string>());
  // nccl-tests' and OSU's short flags, with their meaning; each must agree with its long option
  // when both are given (docs/ciuic-bench.md, nccl-tests' and OSU's flags).
  o.add_options("nccl-tests and OSU short flag")("b", "nccl-tests: min bytes (default 32M)",
                                                 cxxopts::value<std::string>())(
      "e", "nccl-tests: max bytes (default 32M)", cxxopts::value<std::string>())(
      "f", "nccl-tests: step factor (without it: + --stepbytes, default 1M)", cxxopts::value<std::string>())(
      "g", "nccl-tests: GPUs per thread: -g N starts N ranks, one GPU each (--ranks N)", cxxopts::value<std::string>())(
      "n", "nccl-tests: iterations (--iters)", cxxopts::value<std::string>())(
      "w", "nccl-tests: warm-up iterations (--warmup)", cxxopts::value<std::string>())(
      "c", "nccl-tests: check iterations (--check)", cxxopts::value<std::string>())(
      "o", "nccl-tests: op sum prod max min avg, or all (--op)", cxxopts::value<std::string>())(
      "d", "nccl-tests: datatype float half bfloat16 double int8 uint8 int32 int64 ..., or all (--dtype)",
      cxxopts::value<std::string>())("a", "nccl-tests: average 0=rank0 1=avg 2=min 3=max (--average)",
                                     cxxopts::value<std::string>())(
      "z",
      "nccl-tests: blocking: 0 times the iterations back to back (--timing batch), 1-3 each op alone by the wall clock "
      "(--timing host)",
      cxxopts::value<std::string>())("J", "nccl-tests: JSON output FILE.json in nccl-tests' layout (--nccl-json)",
                                     cxxopts::value<std::string>())(
      "I", "nccl-tests: per-iteration timing 0|1, recorded in the -J file (--per-iter)", cxxopts::value<std::string>())(
      "m", "OSU: message sizes MIN:MAX or MAX, doubling (not nccl-tests' -m)", cxxopts::value<std::string>())(
      "i", "OSU: iterations (--iters; nccl-tests' -i is --stepbytes here)", cxxopts::value<std::string>())(
      "x", "OSU: warm-up iterations (--warmup)", cxxopts::value<std::string>())(
      "T", "OSU: datatype mpi_char mpi_int mpi_float mpi_double ..., or all (--dtype; not nccl-tests' -T)",
      cxxopts::value<std::string>());
  o.parse_positional({"command"});
  o.positional_help("OP");
  return o;
}

void ParseExpect(const std::string& text, Cli& cli) {
  const std::string prefix = "busbw>=";
  if (text.rfind(prefix, 0) != 0) throw BadOption("expect", text, "use busbw>=GBPS[@SIZE]");
  std::string rest = text.substr(prefix.size());
  const size_t at = rest.find('@');
  if (at != std::string::npos) {
    try {
      cli.expect_size = ParseSize(rest.substr(at + 1));
    } catch (const Error& e) {
      throw BadOption("expect", text, fmt::format("SIZE after '@': {}", e.what()));
    }
    rest = rest.substr(0, at);
  }
  char* end = nullptr;
  cli.expect_busbw = std::strtod(rest.c_str(), &end);
  if (rest.empty() || *end != '\0' || !(cli.expect_busbw >= 0) || !std::isfinite(cli.expect_busbw)) {
    throw BadOption("expect", text, "GBPS must be a non-negative number (busbw>=GBPS[@SIZE])");
  }
  cli.expect = true;
}

// Parses argv against the option table; --help and --version print and exit; an OP is required
// and nothing may be left over.
cxxopts::ParseResult ParseArguments(cxxopts::Options& options, int argc, char** argv) {
  cxxopts::ParseResult r =
      ParseOrExit(options, argc, argv, fmt::format("ciuic-bench {} ({})", CIUIC_VERSION, CIUIC_GIT_COMMIT));
  if (!r.count("command")) throw UsageError("missing OP (try --help)");
  return r;
}

// The collective and its sweep: sizes, dtype(s), op(s), root, iteration counts, in-place, input seed
// (bench/cli_flags.cc maps nccl-tests' and OSU's flags onto ours).
void ParseSweep(const cxxopts::ParseResult& r, Cli& cli) {
  const CollSpec* spec = FindCollective(cli.op);
  if (!spec) {
    std::string known;
    for (const auto& s : Subcommands()) known += std::string(known.empty() ? "" : ", ") + s.name;
    throw UsageError(fmt::format("unknown OP '{}' (known: {})", cli.op, known));
  }
  cli.bench.spec = spec;
  ParseSweepFlags(r, cli);
}

bool CiuicBackend(const cxxopts::ParseResult& r) {
  return r.count("backend") && Get<std::string>(r, "backend") == "ciuic";
}
bool GlooBackend(const cxxopts::ParseResult& r) {
  return r.count("backend") && Get<std::string>(r, "backend") == "gloo";
}

// --algo (other than the library's own), --precision, --codec and the runtime's knobs belong to the
// bundled runtime: given to another backend they are refused, never silently ignored.
void RequireCiuicForRuntimeOptions(const cxxopts::ParseResult& r) {
  const std::string algo = Get<std::string>(r, "algo");
  const std::string codec = Get<std::string>(r, "codec");
  for (const char* knob :
       {"block", "rounding", "prescale", "bucket", "streams", "piece", "profile", "profile-override", "ranks-per-node",
        "crossover", "crossover-out", "crossover-table", "crossover-rounds", "crossover-slot-ms", "register"}) {
    if (r.count(knob))
      throw UsageError(fmt::format("--{}: applies to --backend ciuic (the bundled runtime) only", knob));
  }
  if (algo != "auto" && algo != "native" && !GlooBackend(r)) {
    throw UsageError(
        fmt::format("--algo {}: the mpi, nccl and local backends run their own algorithm; use --backend "
                    "ciuic (gloo's allreduce algorithms: --backend gloo)",
                    PrintableLine(algo)));
  }
  if (Get<std::string>(r, "precision") != "fp32")
    throw UsageError(
        "--precision: the runtime's native algorithm casts around the library's allreduce; use --backend ciuic --algo "
        "native (or --dtype for the library alone)");
  if (codec != "none") {
    throw UsageError(fmt::format("--codec {}: codecs run through the bundled runtime; use --backend ciuic", codec));
  }
}

// --nccl-algo, --nccl-proto, --nccl-channels: NCCL's own variables for the run, on NCCL only.
void ParseNcclSettings(const cxxopts::ParseResult& r, Cli& cli) {
  const bool any = r.count("nccl-algo") || r.count("nccl-proto") || r.count("nccl-channels");
  if (!any) return;
  const char* flag = r.count("nccl-algo") ? "--nccl-algo" : r.count("nccl-proto") ? "--nccl-proto" : "--nccl-channels";
  if (cli.backend != "nccl" && !(cli.backend == "ciuic" && cli.transport == "nccl"))
    throw UsageError(fmt::format("{} applies to NCCL: --backend nccl, or --backend ciuic --transport nccl", flag));
  std::string algo;
  if (r.count("nccl-algo")) {
    algo = Get<std::string>(r, "nccl-algo");
    try {
      cli.nccl_env.emplace_back("NCCL_ALGO", NcclAlgoEnvName(algo));
    } catch (const UsageError&) {
      throw BadOption("nccl-algo", algo, fmt::format("use one of {}", fmt::join(NcclAlgorithms(), ", ")));
    }
  }
  if (r.count("nccl-proto")) {
    const std::string proto = Get<std::string>(r, "nccl-proto");
    if (algo.empty()) throw UsageError("--nccl-proto needs --nccl-algo (NCCL takes the pair)");
    try {
      cli.nccl_env.emplace_back("NCCL_PROTO", NcclProtoEnvName(proto));
    } catch (const UsageError&) {
      throw BadOption("nccl-proto", proto, fmt::format("use one of {}", fmt::join(NcclProtocols(), ", ")));
    }
    if ((algo == "nvls" || algo == "nvls_tree") && proto != "simple")
      throw BadOption("nccl-proto", proto, fmt::format("NCCL runs {} with simple only", algo));
  }
  if (r.count("nccl-channels")) {
    const std::string text = Get<std::string>(r, "nccl-channels");
    int n = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
    if (text.empty() || ec != std::errc() || end != text.data() + text.size() || n < 1 || n > kMaxNcclChannels)
      throw BadOption("nccl-channels", text, fmt::format("use a whole number in 1..{}", kMaxNcclChannels));
    cli.nccl_env.emplace_back("NCCL_MIN_CTAS", std::to_string(n));
    cli.nccl_env.emplace_back("NCCL_MAX_CTAS", std::to_string(n));
  }
}

}  // namespace

// Each rank's NCCL reads its variables when its first communicator starts: set them just before.
void ApplyNcclSettings(const Cli& cli) {
  for (const auto& [name, value] : cli.nccl_env) setenv(name.c_str(), value.c_str(), 1);
}

namespace {

// --ranks-per-node R or R,G (hier depth 2 or 3); whether they divide the world: CheckWorld.
void ParseRanksPerNode(const std::string& rpn, AlgoConfig& a) {
  const size_t comma = rpn.find(',');
  try {
    size_t used = 0;
    a.ranks_per_node = std::stoi(rpn.substr(0, comma), &used);
    if (used != rpn.substr(0, comma).size()) throw std::invalid_argument(rpn);
    if (comma != std::string::npos) {
      a.nodes_per_group = std::stoi(rpn.substr(comma + 1), &used);
      if (used != rpn.size() - comma - 1) throw std::invalid_argument(rpn);
    }
  } catch (const std::exception&) {
    throw BadOption("ranks-per-node", rpn, "use R or R,G (whole numbers)");
  }
  if (a.ranks_per_node < 0 || a.ranks_per_node > kMaxRanks)
    throw BadOption("ranks-per-node", rpn, fmt::format("R must be in 0..{} (0: nodes by host name)", kMaxRanks));
  if (comma != std::string::npos && (a.ranks_per_node == 0 || a.nodes_per_group < 1 || a.nodes_per_group > kMaxRanks))
    throw BadOption("ranks-per-node", rpn, fmt::format("R,G needs R in 1..{} and G in 1..{}", kMaxRanks, kMaxRanks));
}

// The runtime's knobs: each value checked against its range.
void ParseRuntimeKnobs(const cxxopts::ParseResult& r, Cli& cli) {
  AlgoConfig& a = cli.runtime.algo;
  a.codec.block = Get<uint32_t>(r, "block");
  if (a.codec.block < 32 || a.codec.block > 65536 || a.codec.block % 32 != 0)
    throw BadOption("block", std::to_string(a.codec.block), "must be a multiple of 32 in 32..65536");
  a.codec.rounding = Named(r, "rounding", [](const std::string& v) { return ParseRounding(v); });
  a.codec.prescale = Get<float>(r, "prescale");
  if (!(a.codec.prescale > 0) || !std::isfinite(a.codec.prescale))
    throw BadOption("prescale", fmt::format("{}", a.codec.prescale), "must be a positive finite number");
  a.in_flight = OptionInRange("streams", Get<int>(r, "streams"), 1, kMaxStreams);
  a.piece_bytes = SizeOption("piece", Get<std::string>(r, "piece"), 4096, kMaxBucketBytes);
  ParseRanksPerNode(Get<std::string>(r, "ranks-per-node"), a);
  const std::string bucket = Get<std::string>(r, "bucket");
  cli.runtime.bucket_bytes = bucket == "0" ? 0 : SizeOption("bucket", bucket, kMinBucketBytes, kMaxBucketBytes);
  cli.profile_override = r.count("profile-override") > 0;
}

// --backend ciuic: codec, algorithm, precision, pipelining, hierarchy, profile and bucket of the
// runtime, and what the runtime can run (fp32 allreduce, sum or avg).
void ParseRuntime(const cxxopts::ParseResult& r, Cli& cli) {
  BenchOptions& b = cli.bench;
  const std::string algo = Get<std::string>(r, "algo");
  const std::string codec = Get<std::string>(r, "codec");
  AlgoConfig& a = cli.runtime.algo;
  a.codec = Named(r, "codec", [](const std::string& v) { return ParseCodec(v); });
  ParseRuntimeKnobs(r, cli);
  a.codec.error_feedback = false;  // rows report the one-shot error; timing loops must not feed it
  a.algo = Named(r, "algo", [](const std::string& v) { return ParseAlgo(v); });
  a.precision = Named(r, "precision", [](const std::string& v) { return ParsePrecision(v); });
  // With a profile its own checks speak first: it sets the precision per size.
  if (!r.count("profile") && a.precision != DType::kFloat32 && a.algo != AllReduceAlgo::kNative)
    throw UsageError(
        fmt::format("--precision {}: a 16-bit reduction is --algo native's (the runtime's own "
                    "algorithms accumulate in fp32; 16-bit wires: --codec fp16|bf16)",
                    Get<std::string>(r, "precision")));
  if (r.count("profile")) {
    cli.profile_path = Get<std::string>(r, "profile");
    cli.runtime.profile = std::make_shared<Profile>(LoadProfile(cli.profile_path));
    if (algo != "auto" || codec != "none")
      throw UsageError("--profile chooses algorithm and codec per size: drop --algo/--codec");
    if (Get<std::string>(r, "precision") != "fp32")
      throw UsageError("--profile chooses the precision per size: drop --precision");
    // Each rule sets these for its sizes: a value given here would be silently replaced.
    for (const char* knob : {"bucket", "streams", "rounding", "prescale"})
      if (r.count(knob))
        throw UsageError(fmt::format("--{}: --profile sets it per size (each rule's own): drop --{}", knob, knob));
    for (const auto& rule : cli.runtime.profile->rules) b.lossy |= rule.codec != "none" || rule.precision != "fp32";
  } else if (a.codec.kind == CodecKind::kNone) {
    for (const char* knob : {"block", "rounding", "prescale"})
      if (r.count(knob))
        throw UsageError(fmt::format("--{}: applies to a compressing --codec (this run's is none)", knob));
  }
  Codec check(a.codec);  // validates block and parameters now, not on every rank later
  (void)check;
  if (b.spec != &kAllReduceSpec) throw UsageError("--backend ciuic runs allreduce (the bundled runtime)");
  for (DType t : b.types)
    if (t != DType::kFloat32) throw UsageError(fmt::format("--backend ciuic reduces fp32 (not {})", DTypeName(t)));
  for (ReduceOp op : b.ops)
    if (op != ReduceOp::kSum && op != ReduceOp::kAvg)
      throw UsageError(fmt::format("--backend ciuic reduces with sum or avg (not {})", ReduceOpName(op)));
  if (!cli.runtime.profile) {
    // The runtime's own verdict on the algorithm/codec pair, asked once here of an engine over a
    // one-rank world (it communicates nothing when made) rather than by every rank after start-up.
    try {
      auto probe_world = MakeLocalWorld(1);
      AllReduceEngine probe(*probe_world[0], a);
    } catch (const UsageError& e) {
      throw UsageError(fmt::format("--algo {} --codec {}: {}", PrintableLine(algo), PrintableLine(codec), e.what()));
    }
  }
  b.lossy = b.lossy || a.codec.kind != CodecKind::kNone || a.precision != DType::kFloat32;
  CrossoverCli& x = cli.crossover;
  x.source = Get<std::string>(r, "crossover");
  x.source_given = r.count("crossover") > 0;
  if (r.count("db")) x.db_path = Get<std::string>(r, "db");
  if (r.count("crossover-out")) x.out_path = Get<std::string>(r, "crossover-out");
  x.table = r.count("crossover-table") > 0;
  x.in_place = b.in_place;
  x.out_of_place = b.out_of_place;
  x.rounds = Get<int>(r, "crossover-rounds");
  x.slot_s = Get<double>(r, "crossover-slot-ms") / 1e3;
  const bool per_size = a.algo == AllReduceAlgo::kAuto && a.codec.kind == CodecKind::kNone &&
                        a.precision == DType::kFloat32 && !cli.runtime.profile;
  for (const char* knob : {"crossover", "crossover-out", "crossover-table", "crossover-rounds", "crossover-slot-ms"}) {
    if (r.count(knob) && !per_size)
      throw UsageError(
          fmt::format("--{}: applies to --algo auto, uncompressed fp32, without --profile (auto then "
                      "chooses the algorithm per size)",
                      knob));
  }
  if (x.source.empty()) throw BadOption("crossover", x.source, "db, builtin, measure or a crossover file");
  const std::string reg = Get<std::string>(r, "register");
  if (reg != "yes" && reg != "no") throw BadOption("register", reg, "yes or no");
  b.shared = reg == "yes";
  x.registered = b.shared;
  // The uncompressed ring is what reads and writes registered buffers (--algo ring, or auto where its
  // table names the ring): elsewhere --register would change nothing but the header.
  if (b.shared && (a.codec.kind != CodecKind::kNone || a.precision != DType::kFloat32 || cli.runtime.profile ||
                   (a.algo != AllReduceAlgo::kRing && a.algo != AllReduceAlgo::kAuto)))
    throw UsageError(fmt::format(
        "--register: the uncompressed ring reads and writes registered buffers; use --algo ring or auto "
        "without --codec, --precision or --profile (this run: {})",
        cli.runtime.profile ? "--profile"
                            : fmt::format("--algo {} --codec {} --precision {}", algo, codec, DTypeName(a.precision))));
  if ((r.count("crossover-rounds") || r.count("crossover-slot-ms")) && x.source != "measure" && !x.table)
    throw UsageError("--crossover-rounds/--crossover-slot-ms: apply to --crossover measure and --crossover-table");
  CheckCrossoverOptions(x);
}

// --backend gloo's allreduce algorithm (--algo), and the rendezvous store and interface of gloo's
// world (--backend gloo or --transport gloo). Called once the backend is resolved.
void ParseGloo(const cxxopts::ParseResult& r, Cli& cli) {
  const bool gloo = cli.backend == "gloo" || (cli.backend == "ciuic" && cli.transport == "gloo");
  for (const char* knob : {"gloo-store", "gloo-iface"}) {
    if (r.count(knob) && !gloo)
      throw UsageError(fmt::format("--{}: applies to --backend gloo or --backend ciuic --transport gloo", knob));
  }
  cli.gloo.timeout_s = cli.timeout_s;
  if (cli.backend == "gloo") {
    const std::string algo = Get<std::string>(r, "algo");
    if (algo == "native")
      throw BadOption("algo", algo,
                      "the bundled runtime's (--backend ciuic); gloo's allreduce algorithms are ring, ring-chunked, "
                      "halving-doubling, bcube");
    cli.gloo.algo = Named(r, "algo", [](const std::string& v) { return ParseGlooAlgo(v); });
    if (cli.gloo.algo != GlooAlgo::kAuto && cli.bench.spec != &kAllReduceSpec)
      throw BadOption("algo", algo,
                      fmt::format("chooses gloo's allreduce algorithm; gloo's {} has one", cli.bench.spec->name));
  }
  if (!gloo) return;
  if (r.count("gloo-store")) {
    cli.gloo.store_dir = Get<std::string>(r, "gloo-store");
    std::error_code ec;
    if (cli.gloo.store_dir.empty() || !std::filesystem::is_directory(cli.gloo.store_dir, ec))
      throw BadOption("gloo-store", cli.gloo.store_dir, "not a directory (give a folder every rank sees)");
    if (access(cli.gloo.store_dir.c_str(), W_OK | X_OK) != 0)
      throw BadOption("gloo-store", cli.gloo.store_dir, fmt::format("cannot write there: {}", std::strerror(errno)));
  }
  if (r.count("gloo-iface")) {
    cli.gloo.iface = Get<std::string>(r, "gloo-iface");
    CheckGlooInterface(cli.gloo.iface, "--gloo-iface");
  } else if (const char* env = std::getenv("GLOO_SOCKET_IFNAME"); env && *env) {
    CheckGlooInterface(env, "GLOO_SOCKET_IFNAME");
  }
}

// nccl-tests' JSON: --nccl-json FILE / -J FILE and --per-iter 0|1 / -I 0|1. The file must end in .json
// (nccl-tests infers the type from the suffix and knows only json); -I 1 writes into that file, so
// without one it would change nothing and is refused.
void ParseNcclTestsJson(const cxxopts::ParseResult& r, Cli& cli) {
  Setting<std::string> path;
  for (const auto& [key, flag] : {std::pair{"nccl-json", "--nccl-json"}, std::pair{"J", "-J"}}) {
    if (!r.count(key)) continue;
    const std::string text = Get<std::string>(r, key);
    CheckPathGiven(flag, text);
    path.Add(flag, text, text);
    if (cli.nccl_json_flag.empty()) cli.nccl_json_flag = flag;
  }
  Setting<int> per_iter;
  for (const auto& [key, flag] : {std::pair{"per-iter", "--per-iter"}, std::pair{"I", "-I"}}) {
    if (!r.count(key)) continue;
    const std::string text = Get<std::string>(r, key);
    per_iter.Add(flag, text, WholeFlag(flag, text, 0, 1));
  }
  if (per_iter.given() && per_iter.value() == 1 && !path.given())
    throw UsageError(
        fmt::format("{} 1 needs -J FILE.json (or --nccl-json): the per-iteration records go into "
                    "nccl-tests' JSON",
                    r.count("per-iter") ? "--per-iter" : "-I"));
  if (!path.given()) return;
  const std::string& p = path.value();
  const size_t dot = p.find_last_of('.');
  const size_t slash = p.find_last_of('/');
  std::string suffix = dot == std::string::npos || (slash != std::string::npos && dot < slash) ? "" : p.substr(dot + 1);
  std::transform(suffix.begin(), suffix.end(), suffix.begin(), [](unsigned char c) { return std::tolower(c); });
  if (suffix != "json")
    throw BadFlag(cli.nccl_json_flag, p,
                  "must end in .json (nccl-tests' output type comes from the suffix; json is the one it writes)");
  CheckDifferentFiles(cli.nccl_json_flag, p, "--out", cli.out_path);
  CheckDifferentFiles(cli.nccl_json_flag, p, "--db", cli.db_path);
  CheckDifferentFiles(cli.nccl_json_flag, p, "--trace", cli.trace_path);
  cli.nccl_json_path = p;
  cli.bench.per_iter = per_iter.value() == 1;
}

// Where the results go: --format, --out, --db (an empty path is a mistake, not "not given"; the
// two never name one file).
void ParseOutputs(const cxxopts::ParseResult& r, Cli& cli) {
  cli.format = Get<std::string>(r, "format");
  if (cli.format != "table" && cli.format != "csv" && cli.format != "json") {
    throw BadOption("format", cli.format, "use table, csv or json");
  }
  if (r.count("out")) {
    cli.out_path = Get<std::string>(r, "out");
    CheckPathGiven("--out", cli.out_path);
    if (cli.out_path == "-") cli.out_path.clear();  // stdout: where the --format output goes without --out
  }
  if (r.count("db")) {
    cli.db_path = Get<std::string>(r, "db");
    CheckPathGiven("--db", cli.db_path);
  }
  CheckDifferentFiles("--out", cli.out_path, "--db", cli.db_path);
  if (r.count("trace")) {
    cli.trace_path = Get<std::string>(r, "trace");
    CheckPathGiven("--trace", cli.trace_path);
    CheckDifferentFiles("--trace", cli.trace_path, "--out", cli.out_path);
    CheckDifferentFiles("--trace", cli.trace_path, "--db", cli.db_path);
  }
  ParseNcclTestsJson(r, cli);
  // The crossover table's file (ParseRuntime read it) is one more output.
  const std::string& table = cli.crossover.out_path;
  CheckDifferentFiles("--crossover-out", table, "--out", cli.out_path);
  CheckDifferentFiles("--crossover-out", table, "--db", cli.db_path);
  CheckDifferentFiles("--crossover-out", table, "--trace", cli.trace_path);
  CheckDifferentFiles("--crossover-out", table, cli.nccl_json_flag, cli.nccl_json_path);
}

// --debug-corrupt RANK:INDEX, both whole numbers; whether they lie in the world and the receive
// buffers: CheckWorld.
void ParseDebugCorrupt(const std::string& text, BenchOptions& b) {
  const size_t colon = text.find(':');
  const auto whole = [](std::string_view digits, auto& v) {
    const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v);
    return !digits.empty() && digits.front() != '-' && ec == std::errc() && end == digits.data() + digits.size();
  };
  int rank = -1;
  uint64_t index = 0;
  if (colon == std::string::npos || !whole(std::string_view(text).substr(0, colon), rank) ||
      !whole(std::string_view(text).substr(colon + 1), index))
    throw BadOption("debug-corrupt", text,
                    "use RANK:INDEX (whole numbers: a rank and an element of its receive buffer)");
  b.corrupt_rank = rank;
  b.corrupt_index = index;
}

// How the run is started and judged: --ranks, --timeout, --expect, --debug-corrupt.
void ParseRunControls(const cxxopts::ParseResult& r, Cli& cli) {
  Setting<int> ranks;
  if (r.count("ranks"))
    ranks.Add("--ranks", std::to_string(Get<int>(r, "ranks")),
              OptionInRange("ranks", Get<int>(r, "ranks"), 1, kMaxRanks));
  // nccl-tests' -g N drives N GPUs from one thread; here every GPU is its own rank, so -g N starts N
  // ranks (-g 1, nccl-tests' default, fixes nothing).
  if (r.count("g")) {
    cli.gpus_per_rank = WholeFlag("-g", Get<std::string>(r, "g"), 1, kMaxRanks);
    if (cli.gpus_per_rank > 1) ranks.Add("-g", Get<std::string>(r, "g"), cli.gpus_per_rank);
  }
  if (ranks.given()) {
    cli.ranks = ranks.value();
    cli.ranks_given = true;
  }
  cli.dry_run = r.count("dry-run") > 0;
  Setting<Timing> timing;
  if (r.count("timing")) {
    const std::string t = Get<std::string>(r, "timing");
    if (t != "events" && t != "host" && t != "batch") throw BadFlag("--timing", t, "expected events, host or batch");
    timing.Add("--timing", t, t == "batch" ? Timing::kBatch : t == "host" ? Timing::kHost : Timing::kEvents);
  }
  if (r.count("z")) {
    cli.blocking = WholeFlag("-z", Get<std::string>(r, "z"), 0, 3);
    timing.Add("-z", Get<std::string>(r, "z"), cli.blocking == 0 ? Timing::kBatch : Timing::kHost);
  }
  if (timing.given()) cli.bench.timing = timing.value();
  if (r.count("baseline")) {
    const std::string name = Get<std::string>(r, "baseline");
    auto baseline = std::make_shared<const Baseline>(LoadBaseline(name));
    if (baseline->collective != cli.bench.spec->name)
      throw BadOption("baseline", name,
                      fmt::format("its figures are {}'s; this run is {}", baseline->collective, cli.bench.spec->name));
    cli.baseline = std::move(baseline);
    cli.bench.baseline = cli.baseline.get();
  }
  cli.timeout_s = DefaultTimeoutSeconds();
  CheckProgressSetting();
  if (r.count("timeout")) cli.timeout_s = Get<double>(r, "timeout");
  if (!(cli.timeout_s >= 0) || !std::isfinite(cli.timeout_s)) {
    throw UsageError("--timeout must be a non-negative number of seconds");
  }
  if (r.count("expect")) {
    const std::string expect = Get<std::string>(r, "expect");
    ParseExpect(expect, cli);
    // A SIZE no row has would be judged "n/a" after the whole sweep: refused now.
    const auto& sizes = cli.bench.sizes;
    if (cli.expect_size && std::find(sizes.begin(), sizes.end(), cli.expect_size) == sizes.end())
      throw BadOption(
          "expect", expect,
          fmt::format("SIZE {} is not one of --sizes {}", FormatSize(cli.expect_size), PrintableLine(cli.sizes_text)));
  }
  if (r.count("debug-corrupt")) ParseDebugCorrupt(Get<std::string>(r, "debug-corrupt"), cli.bench);
}

// Device and backend defaults, then whether this build and machine can run the combination.
void ResolveDeviceAndBackend(const cxxopts::ParseResult& r, Cli& cli) {
  const bool have_gpu = CIUIC_HAVE_NCCL && CudaDeviceCount() > 0;
  if (r.count("device")) {
    cli.device = Get<std::string>(r, "device");
    if (cli.device != "cpu" && cli.device != "cuda") throw BadOption("device", cli.device, "use cpu or cuda");
  } else {
    cli.device = (r.count("backend") && Get<std::string>(r, "backend") != "nccl") ? "cpu" : (have_gpu ? "cuda" : "cpu");
  }
  // Started by torchrun or srun (not mpiexec): the defaults are what such a job can run (gloo on CPU).
  const bool job_rank = !UnderMpiLauncherOrNone() && JobFromEnvironment().has_value();
  const std::string host_default = job_rank && CIUIC_HAVE_GLOO ? "gloo" : (CIUIC_HAVE_MPI ? "mpi" : "local");
  if (r.count("backend")) {
    cli.backend = Get<std::string>(r, "backend");
  } else {
    cli.backend = cli.device == "cuda" ? "nccl" : host_default;
  }
  if (r.count("transport") && cli.backend != "ciuic") throw UsageError("--transport applies to --backend ciuic");
  if (cli.backend == "ciuic") {
    cli.transport =
        r.count("transport") ? Get<std::string>(r, "transport") : (cli.device == "cuda" ? "nccl" : host_default);
    if (cli.transport != "local" && cli.transport != "mpi" && cli.transport != "nccl" && cli.transport != "gloo")
      throw BadOption("transport", cli.transport, "the runtime runs over mpi, local, nccl or gloo");
  } else if (cli.backend != "local" && cli.backend != "mpi" && cli.backend != "nccl" && cli.backend != "gloo") {
    throw BadOption("backend", cli.backend, fmt::format("unknown backend (this build has: {})", AvailableBackends()));
  }
  ParseNcclSettings(r, cli);
  // What the library comes from: --backend, or --transport under --backend ciuic.
  const std::string& lib = cli.backend == "ciuic" ? cli.transport : cli.backend;
  const char* lib_option = cli.backend == "ciuic" ? "transport" : "backend";
  if (lib == "mpi" && !CIUIC_HAVE_MPI)
    throw BadOption(lib_option, lib, "this build has no MPI (its backends: " + AvailableBackends() + ")");
  if (lib == "nccl" && !CIUIC_HAVE_NCCL)
    throw BadOption(lib_option, lib, "this build has no NCCL (its backends: " + AvailableBackends() + ")");
  if (lib == "gloo" && !CIUIC_HAVE_GLOO)
    throw BadOption(lib_option, lib, "this build has no Gloo (its backends: " + AvailableBackends() + ")");
  if (lib == "nccl" && cli.device != "cuda") throw BadOption(lib_option, lib, "needs --device cuda");
  if ((lib == "mpi" || lib == "gloo") && cli.device == "cuda")
    throw BadOption(lib_option, lib, "runs on host memory; use --device cpu");
  // The local transport runs on device buffers too: ranks as threads on the one GPU.
  if (lib == "local" && cli.device == "cuda" && CudaDeviceCount() == 0) {
    throw RuntimeError(
        fmt::format("--device cuda: no CUDA device is visible on this machine (the {} transport "
                    "runs its ranks on one GPU)",
                    lib));
  }
  if (lib == "nccl" && CudaDeviceCount() == 0) {
    throw RuntimeError("--backend nccl: no CUDA device is visible on this machine");
  }
}

}  // namespace

Cli ParseCli(int argc, char** argv) {
  Cli cli;
  for (int i = 0; i < argc; ++i) cli.argv.push_back(argv[i]);
  auto options = MakeOptions();
  const cxxopts::ParseResult r = ParseArguments(options, argc, argv);
  cli.op = Get<std::string>(r, "command");
  if (cli.op == "list") {
    for (const auto& given : r.arguments())
      if (given.key() != "command")
        throw UsageError(fmt::format("list takes no options ({}{} given): it names what this build has",
                                     given.key().size() == 1 ? "-" : "--", given.key()));
    return cli;
  }
  ParseSweep(r, cli);
  if (CiuicBackend(r)) {
    ParseRuntime(r, cli);
  } else {
    ParseRuntimeKnobs(r, cli);  // a bad value is refused as such before "not this backend's"
    RequireCiuicForRuntimeOptions(r);
  }
  ParseOutputs(r, cli);
  ParseRunControls(r, cli);
  ResolveDeviceAndBackend(r, cli);
  ParseGloo(r, cli);
  if (cli.bench.shared && cli.device != "cpu")
    throw UsageError(
        fmt::format("--register: shared windows are host memory; this run's buffers are on the {} "
                    "(--device cpu)",
                    cli.device));
  return cli;
}

// Opens (and closes) the output file and database once before any rank starts, so a bad path or
// a foreign database is one clear error instead of a failure after the run.
void ValidateOutputs(const Cli& cli) {
  if (!cli.out_path.empty()) CheckWritableOutput(cli.out_path, "--out");
  if (!cli.trace_path.empty()) CheckWritableOutput(cli.trace_path, "--trace");
  if (!cli.nccl_json_path.empty()) CheckWritableOutput(cli.nccl_json_path, cli.nccl_json_flag);
  if (!cli.db_path.empty()) {
    CheckWritableOutput(cli.db_path, "--db", /*regular_file_only=*/true);
    // A dry run creates and migrates nothing: the file is inspected as a write would find it.
    Database probe(cli.db_path, cli.dry_run ? Database::Access::kCheckOnly : Database::Access::kReadWrite);
  }
}

namespace {

// --debug-corrupt RANK:INDEX names a rank of the world and an element every row's receive buffer has
// (rows too small for the world are skipped and damage nothing).
void CheckDebugCorrupt(const BenchOptions& b, int world) {
  const std::string text = fmt::format("{}:{}", b.corrupt_rank, b.corrupt_index);
  if (b.corrupt_rank >= world)
    throw BadOption("debug-corrupt", text, fmt::format("RANK must be in 0..{} (a rank of {})", world - 1, world));
  // Off the root a reduce's receive buffer holds no result: damage there would go unseen.
  if (b.spec->kind == Collective::kReduce && b.corrupt_rank != b.root)
    throw BadOption("debug-corrupt", text,
                    fmt::format("RANK must be the root ({}): only its receive buffer holds reduce's result", b.root));
  // Every dtype of a sweep: the widest has the fewest elements.
  for (DType type : b.types.empty() ? std::vector<DType>{b.type} : b.types) {
    CollArgs args;
    args.nranks = world;
    args.root = b.root;
    args.type = type;
    args.op = b.op;
    size_t smallest = 0;
    uint64_t smallest_size = 0;
    for (uint64_t size : b.sizes) {
      const CollCounts c = b.spec->counts(size, DTypeSize(type), args);
      if (c.send == 0 || c.recv == 0) continue;
      if (smallest == 0 || c.recv < smallest) {
        smallest = c.recv;
        smallest_size = size;
      }
    }
    if (smallest > 0 && b.corrupt_index >= smallest)
      throw BadOption("debug-corrupt", text,
                      fmt::format("INDEX must be in 0..{} (the receive buffer of the {} row holds {} {} element(s))",
                                  smallest - 1, FormatSize(smallest_size), smallest, DTypeName(type)));
  }
}

}  // namespace

// What can only be judged once the world size is known: the root, the hierarchy's groups and a
// profile's topology. UsageError naming the option.
void CheckWorld(const Cli& cli, int world) {
  const BenchOptions& b = cli.bench;
  if (b.spec && b.spec->rooted && b.root >= world)
    throw BadOption("root", std::to_string(b.root), fmt::format("must be in 0..{} (a rank of {})", world - 1, world));
  if (b.corrupt_rank >= 0) CheckDebugCorrupt(b, world);
  if (cli.backend != "ciuic") return;
  const AlgoConfig& a = cli.runtime.algo;
  const std::string rpn = a.nodes_per_group > 0 ? fmt::format("{},{}", a.ranks_per_node, a.nodes_per_group)
                                                : std::to_string(a.ranks_per_node);
  if (a.ranks_per_node > 0 && (a.ranks_per_node > world || world % a.ranks_per_node != 0))
    throw BadOption(
        "ranks-per-node", rpn,
        fmt::format("{} ranks do not split into nodes of {} (R must divide the rank count)", world, a.ranks_per_node));
  if (a.ranks_per_node > 0 && a.nodes_per_group > 0 && (world / a.ranks_per_node) % a.nodes_per_group != 0)
    throw BadOption("ranks-per-node", rpn,
                    fmt::format("{} nodes do not split into groups of {} (G must divide the node count)",
                                world / a.ranks_per_node, a.nodes_per_group));
  const Profile* p = cli.runtime.profile.get();
  if (!p || cli.profile_override) return;
  // A profile's rules were chosen for its topology: applied to another, they are somebody else's answer.
  const bool cpu_profile = p->Device() == "cpu";
  std::string why;
  if (p->ranks != world) {
    why = fmt::format("tuned for {} ({} rank(s) on {} node(s)), this run has {} rank(s)", p->topology, p->ranks,
                      p->nodes, world);
  } else if (cpu_profile != (cli.device == "cpu")) {
    why = fmt::format("tuned for {} ({}), this run is on {}", p->topology, cpu_profile ? "CPU ranks" : "GPUs",
                      cli.device);
  }
  if (!why.empty())
    throw UsageError(fmt::format("--profile {}: {}; --profile-override applies it anyway", cli.profile_path, why));
}

// The sweep's largest buffers against this host's (or GPU's) free memory for `ranks` ranks on this
// host, refused as a value of --sizes.
void CheckSizesFitMemory(const Cli& cli, int ranks) {
  BenchOptions o = cli.bench;
  o.local_ranks = ranks;
  try {
    CheckSizesFit(o, ranks, cli.device == "cuda" ? MemoryKind::kDevice : MemoryKind::kHost);
  } catch (const InputError& e) {
    throw BadOption("sizes", cli.sizes_text, e.what());
  }
}

int DefaultRanks(const Cli& cli) {
  if (cli.device == "cuda") return std::max(1, CudaDeviceCount());
  return 2;
}

bool NeedsMpiLaunch(const Cli& cli) {
  const std::string& lib = cli.backend == "ciuic" ? cli.transport : cli.backend;
  return CIUIC_HAVE_MPI && (lib == "mpi" || lib == "nccl" || lib == "gloo");
}

}  // namespace ciuic
