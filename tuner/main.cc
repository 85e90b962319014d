// ciuic-tune: the tuner's command line. Subcommands come from one table (which also makes the help).
// run (the default), show, calibrate, validate, export, topologies (built-ins and the model against
// published nccl-tests figures, fitted and held-out apart) and model (predicted allreduce time and busbw
// per algorithm and size).
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cxxopts.hpp>
#include <filesystem>
#include <iostream>
#include <optional>
#include <sstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/cli_args.h"
#include "bench/plot.h"
#include "collectives/bootstrap/job_launch.h"
#include "collectives/profile.h"
#include "core/config.h"
#include "core/database.h"
#include "core/error.h"
#include "core/files.h"
#include "core/log.h"
#include "core/progress.h"
#include "core/sizes.h"
#include "core/watchdog.h"
#include "kernels/codec_spec.h"
#include "tuner/bench_runner.h"
#include "tuner/calibrate.h"
#include "tuner/cost_model.h"
#include "tuner/exports/exports.h"
#include "tuner/gate.h"
#include "tuner/nccl_axis.h"
#include "tuner/plan_space.h"
#include "tuner/published.h"
#include "tuner/search.h"
#include "tuner/study.h"
#include "tuner/topology.h"
#include "tuner/validate.h"

namespace ciuic {
namespace {

struct Subcommand {
  const char* name;
  const char* summary;
  // The options it reads: any other one given is refused, never silently ignored.
  std::vector<std::string> options;
  int (*run)(const cxxopts::ParseResult&);
};

// Most evaluations a study may ask for (and most without improvement before it stops).
constexpr int kMaxBudget = 1'000'000;

// `value` when it is one of `known`; else "--OPTION VALUE: use A, B or C".
void OneOfOption(const char* option, const std::string& value, const std::vector<std::string>& known) {
  if (std::find(known.begin(), known.end(), value) != known.end()) return;
  std::string list;
  for (size_t i = 0; i < known.size(); ++i) list += (i == 0 ? "" : i + 1 == known.size() ? " or " : ", ") + known[i];
  throw BadOption(option, value, "use " + list);
}

// A size list option (core/sizes.h grammar), `fallback` when not given.
std::vector<uint64_t> SizeListOption(const cxxopts::ParseResult& r, const char* option, const std::string& fallback) {
  const std::string text = r.count(option) || fallback.empty() ? r[option].as<std::string>() : fallback;
  try {
    return ParseSizeList(text);
  } catch (const Error& e) {
    throw BadOption(option, text, e.what());
  }
}

// The built-in topologies with the library's allreduce as the model predicts it (algorithm NCCL
// would pick and busbw at 8 GiB), then the model against the published figures: the fitted
// constants refitted from the fit figures, and the fit and held-out figures listed and summarised
// apart.
int Topologies(const cxxopts::ParseResult& r) {
  const int nodes = r["nodes"].as<int>();
  // The published figures are loaded, fitted and compared before anything is printed: a bad
  // --published file is one line on stderr, not a table followed by an error.
  const PublishedSet set =
      LoadPublished(r.count("published") ? r["published"].as<std::string>() : DefaultPublishedPath());
  const ModelConstants refit = FitModelConstants(set);
  const auto rows = ComparePublished(set, kFittedConstants);
  const double big = 8.0 * (1u << 30);  // 8 GiB: the bandwidth-bound end of nccl-tests sweeps
  std::ostringstream out;               // printed whole at the end, so a failure part-way prints nothing
  out << fmt::format("# {:<10} {:>5} {:>4} {:>7} {:>4} {:>6} {:>6}  {:<30} {:<13} {:>7} {:>8}\n", "topology", "nodes",
                     "dev", "intra", "nvls", "nic", "mem", "device", "nccl algo", "busbw", "8B time");
  out << fmt::format("# {:<10} {:>5} {:>4} {:>7} {:>4} {:>6} {:>6}  {:<30} {:<13} {:>7} {:>8}\n", "", "", "", "(GB/s)",
                     "", "(Gb/s)", "(GB/s)", "", "(8 GiB)", "(GB/s)", "(us)");
  for (const std::string& name : BuiltinTopologies()) {
    const std::vector<int> node_counts = nodes > 0 ? std::vector<int>{nodes} : std::vector<int>{1, 2, 4};
    for (int n : node_counts) {
      Topology t;
      try {
        t = LoadTopology(name, n);
      } catch (const InputError&) {
        if (n > 1) continue;  // no NICs: single node only
        throw;
      }
      const Fabric f = EffectiveFabric(t);
      const ModelAlgo algo = NcclChoice(f, big);
      out << fmt::format(
          "  {:<10} {:>5} {:>4} {:>7.1f} {:>4} {:>6.0f} {:>6.0f}  {:<30} {:<13} {:>7.1f} "
          "{:>8.1f}\n",
          t.name, t.nodes, t.devices_per_node, t.intra.bw_gbps, t.intra.nvls ? "yes" : "no", t.nics.gbps,
          t.device.memory_bw_gbps, t.device.name.substr(0, 30), ModelAlgoName(algo),
          BusBwGbps(big, t.ranks(), PredictAllReduceUs(f, algo, big)), PredictAllReduceUs(f, ModelAlgo::kNcclBest, 8));
    }
  }
  out << fmt::format(
      "#\n# fitted constants (cost_model.h kFittedConstants, used above and below) and a refit on "
      "the fit figures of {}:\n",
      set.origin);
  const std::pair<const char*, double ModelConstants::*> constants[] = {
      {"nvlink_efficiency", &ModelConstants::nvlink_efficiency},
      {"nvls_efficiency", &ModelConstants::nvls_efficiency},
      {"nccl_launch_us", &ModelConstants::nccl_launch_us}};
  for (const auto& [cname, member] : constants) {
    int used = 0;
    for (const auto& fig : set.figures) used += fig.role == FigureRole::kFit && fig.fits == cname ? 1 : 0;
    out << fmt::format("#   {:<18} {:>9.4f}  refit {:>9.4f}  from {} fit figure(s)\n", cname, kFittedConstants.*member,
                       refit.*member, used);
  }
  for (FigureRole role : {FigureRole::kFit, FigureRole::kHeldOut}) {
    const bool fit = role == FigureRole::kFit;
    out << (fit ? "#\n# fit figures (each determines the constant named; error after the fit):\n"
                : "#\n# held-out figures (never used to fit):\n");
    out << fmt::format("# {:<28} {:<13} {:>5} {:>4} {:<13} {:>10} {:>10} {:>10} {:>7}  {}\n", "figure", "system",
                       "nodes", "gpus", "model algo", "size (B)", "published", "predicted", "error", "source");
    int count = 0;
    for (const auto& row : rows) {
      const PublishedFigure& fig = *row.figure;
      if (fig.role != role) continue;
      ++count;
      const bool time = fig.metric == FigureMetric::kTimeUs;
      out << fmt::format(
          "  {:<28} {:<13} {:>5} {:>4} {:<13} {:>10.0f} {:>7.1f}{:<3} {:>7.1f}{:<3} {:>+6.1f}%  "
          "{}{}\n",
          fig.id, fig.system, fig.nodes, fig.gpus_per_node, row.nccl_algo, fig.bytes, fig.value, time ? "us" : "",
          row.predicted, time ? "us" : "", 100 * row.error, fig.source, fit ? " [" + fig.fits + "]" : "");
    }
    const double median = MedianAbsError(rows, role);
    out << fmt::format("# {} median |error| {:.1f}% over {} figure(s)\n", fit ? "fit:     " : "held-out:", 100 * median,
                       count);
  }
  out << "# busbw as nccl-tests defines it (bytes / time x 2(P-1)/P); 'us' marks a time at "
         "the figure's size. Figures and their sources: profiles/published/README.md\n";
  std::cout << out.str();
  return 0;
}

int Model(const cxxopts::ParseResult& r) {
  if (!r.count("topology")) throw UsageError("model: --topology NAME|FILE is required");
  const Topology t = LoadTopology(r["topology"].as<std::string>(), r["nodes"].as<int>());
  const Fabric f = EffectiveFabric(t);
  const auto sizes = SizeListOption(r, "sizes", "1K:8G:x8");
  std::cout << fmt::format("# ciuic-tune model  topology {}  nodes {}  ranks {}  fingerprint {}\n", t.name, t.nodes,
                           t.ranks(), t.Fingerprint());
  std::cout << fmt::format(
      "# effective links: intra {:.1f} GB/s {:.1f} us; inter {:.1f} GB/s/rank {:.1f} us; flat ring "
      "{:.1f} GB/s; NVLS {}; NCCL call {:.1f} us, runtime step {:.1f} us\n",
      f.intra.bw_gbps, f.intra.alpha_us, f.inter.bw_gbps, f.inter.alpha_us, f.flat_ring.bw_gbps,
      f.nvls ? fmt::format("{:.1f} GB/s per port", f.nvls_gbps) : "no", f.nccl_launch_us, f.step_us);
  std::vector<ModelAlgo> algos = {ModelAlgo::kNcclBest, ModelAlgo::kRing, ModelAlgo::kRecursiveDoubling,
                                  ModelAlgo::kHierarchical};
  if (f.groups > 1) {
    std::cout << fmt::format("# spine: {} groups of {} nodes, each group's uplink {:.3f} GB/s, {:.1f} us per hop\n",
                             f.groups, f.nodes_per_group, f.group_uplink_gbps, f.spine_alpha_us);
    algos.push_back(ModelAlgo::kHierarchical3);
  }
  std::string head = fmt::format("#{:>12}", "size");
  for (ModelAlgo a : algos) head += fmt::format(" {:>10} {:>8}", std::string(ModelAlgoName(a)) + "_us", "busbw");
  std::cout << head << "\n";
  for (uint64_t s : sizes) {
    std::string line = fmt::format(" {:>12}", s);
    for (ModelAlgo a : algos) {
      const double us = PredictAllReduceUs(f, a, static_cast<double>(s));
      line += fmt::format(" {:>10.1f} {:>8.1f}", us, BusBwGbps(static_cast<double>(s), t.ranks(), us));
    }
    std::cout << line << "\n";
  }
  return 0;
}

// --db as given (an empty value refused), else the data folder's ciuic.db (DataHome; with `create`
// the folder is made on first use).
std::string DbOption(const cxxopts::ParseResult& r, bool create = true) {
  if (!r.count("db"))
    return create ? DefaultDatabasePath() : (std::filesystem::path(DataHome(false)) / "ciuic.db").string();
  const std::string db = r["db"].as<std::string>();
  CheckPathGiven("--db", db);
  return db;
}

std::vector<std::string> ParseList(const char* option, const std::string& text);

// --accumulation: "1,2,4,8" (run: 1 first, increasing) or one count (gate); whole numbers in 1..1024.
std::vector<int> AccumulationOption(const std::string& text) {
  std::vector<int> out;
  for (const std::string& item : ParseList("accumulation", text)) {
    int n = 0;
    const auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), n);
    if (ec != std::errc() || end != item.data() + item.size() || n < 1 || n > kMaxAccumulationSteps)
      throw BadOption("accumulation", text,
                      fmt::format("micro-batches per sync are whole numbers in 1..{}", kMaxAccumulationSteps));
    if (!out.empty() && n <= out.back()) throw BadOption("accumulation", text, "the counts go in increasing order");
    out.push_back(n);
  }
  return out;
}

// How long a following rank waits for rank 0's next run (the accuracy gate trains models between
// runs); rank 0's store closing ends the wait at once.
constexpr double kFollowSeconds = 24 * 3600;

int RunStudyAndReport(TuneOptions o);

int RunTune(const cxxopts::ParseResult& r) {
  TuneOptions o;
  if (!r.count("topology")) throw UsageError("run: --topology NAME|FILE is required (see ciuic-tune topologies)");
  o.topology = r["topology"].as<std::string>();
  o.nodes = r["nodes"].as<int>();
  o.workload = r["workload"].as<std::string>();
  o.strategy = r["strategy"].as<std::string>();
  o.budget = r["budget"].as<int>();
  o.seed = r["seed"].as<uint64_t>();
  o.patience = r["patience"].as<int>();
  o.mode = r["mode"].as<std::string>();
  o.transport = r["transport"].as<std::string>();
  // Under torchrun or srun the job's ranks time over gloo: mpiexec did not start them.
  const std::optional<JobRank> job = JobFromEnvironment();
  if (job && o.mode == "measure" && !r.count("transport")) o.transport = "gloo";
  if (r.count("db")) o.db = DbOption(r);  // else RunStudy takes the default once the inputs are good
  // An empty --out or --calibration is a mistake, not "use the default".
  if (r.count("out")) {
    o.out = r["out"].as<std::string>();
    CheckPathGiven("--out", o.out);
  }
  if (r.count("calibration")) {
    o.calibration_db = r["calibration"].as<std::string>();
    CheckPathGiven("--calibration", o.calibration_db);
  }
  o.gate_tolerance = OptionInRange("gate-tolerance", r["gate-tolerance"].as<double>(), 0.0, 1.0);
  o.gate_seeds = OptionInRange("gate-seeds", r["gate-seeds"].as<int>(), 1, 20);
  if (const std::string m = r["state-memory"].as<std::string>(); m != "auto") {
    o.state_memory_gib = OptionInRange("state-memory", NumberOption("state-memory", m), 0.0, 1e6);
  }
  o.min_gain = OptionInRange("min-gain", r["min-gain"].as<double>(), 0.0, 0.99);
  o.band_candidates = OptionInRange("band-candidates", r["band-candidates"].as<int>(), 1, 16);
  if (r.count("accumulation")) {
    o.accumulation = AccumulationOption(r["accumulation"].as<std::string>());
    if (o.accumulation.front() != 1)
      throw BadOption("accumulation", r["accumulation"].as<std::string>(),
                      "run: the list starts with 1 (every micro-batch synced), e.g. 1,2,4,8; 1 alone prices nothing");
  }
  o.target = r["target"].as<std::string>();
  OneOfOption("target", o.target, TuneTargets());
  o.budget = OptionInRange("budget", o.budget, 1, kMaxBudget);
  o.patience = OptionInRange("patience", o.patience, 0, kMaxBudget);
  OneOfOption("strategy", o.strategy, SearchStrategies());
  OneOfOption("mode", o.mode, {"model", "measure"});
  OneOfOption("transport", o.transport, {"mpi", "gloo"});
  if (r.count("transport") && o.mode != "measure")
    throw UsageError("--transport applies to --mode measure (the model prices the topology's links)");
  if (o.transport == "gloo" && !CIUIC_HAVE_GLOO)
    throw UsageError("--transport gloo: this build has no gloo (install libgloo-dev and configure again)");
  if (job && o.mode == "measure" && o.transport != "gloo")
    throw UsageError(
        fmt::format("--transport {} needs mpiexec; under {} (rank {} of {}) --mode measure times over "
                    "gloo (leave --transport out, or give gloo)",
                    o.transport, job->launcher, job->rank, job->size));
  const auto db_dir = std::filesystem::path(o.db).parent_path();
  if (!db_dir.empty() && !std::filesystem::is_directory(db_dir))
    throw InputError(
        fmt::format("--db '{}': folder '{}' does not exist", PrintableLine(o.db), PrintableLine(db_dir.string())));
  // torchrun's agent SIGKILLed passes on no signal: each rank it started watches for its end and ends
  // as if by SIGTERM (rank 0's study keeps what it stored; every ciuic-bench run it started ends with it).
  if (job && ParentIsTorchrunAgent(*job))
    EndWhenParentEnds(fmt::format("rank {} of {}: its launcher ({}, pid {}) has ended; ending this rank", job->rank,
                                  job->size, job->launcher, getppid()));
  if (job && job->rank != 0) {
    // Rank 0 runs the study; this rank starts each of its measurements' runs with it.
    const int code = FollowJobRuns(*job, kFollowSeconds);
    if (code != 0)
      LogInfo("rank {} of {}: rank 0's study ended with exit {} (its own line says why)", job->rank, job->size, code);
    return code;
  }
  if (job) LeadJobRuns(*job);
  try {
    const int code = RunStudyAndReport(o);
    EndJobRuns(code);
    return code;
  } catch (const Interrupted& e) {
    EndJobRuns(128 + e.signal());
    throw;
  } catch (const Error& e) {
    EndJobRuns(static_cast<int>(e.code()));
    throw;
  } catch (const std::exception&) {
    EndJobRuns(2);
    throw;
  }
}

// The study of RunTune's options, its table on stdout (stderr with --out -). Returns the exit code.
int RunStudyAndReport(TuneOptions o) {
  // --out -: the profile is stdout's, and everything else goes to stderr.
  const bool profile_to_stdout = o.out == "-";
  if (profile_to_stdout) o.out = "/dev/stdout";
  std::ostream& log = profile_to_stdout ? std::cerr : std::cout;
  EnableProgress(true);  // a live line on a terminal's stderr (core/progress)
  const TuneResult res = RunStudy(o, log);
  const Profile& p = res.profile;
  log << fmt::format(
      "# study {}: {} evaluation(s) ({} from a resumed study); predicted step {:.1f} us vs NCCL "
      "defaults {:.1f} us ({:.2f}x)\n",
      res.study_id, res.evaluations, res.reused, p.step_us, p.baseline_step_us, p.baseline_step_us / p.step_us);
  // --mode measure adds each band's measured time and the baseline's beside it (- where a run failed).
  const bool measured = o.mode == "measure";
  const auto us = [](double v) { return v < 0 ? std::string("-") : fmt::format("{:.1f}", v); };
  log << fmt::format("# {:>11} {:>11} {:<9} {:<12} {:<9} {:>7} {:>10} {:>12}{}  gate\n", "min_bytes", "max_bytes",
                     "algo", "codec", "precision", "streams", "bucket", "predicted_us",
                     measured ? fmt::format(" {:>12} {:>12}", "measured_us", "baseline_us") : "");
  for (const auto& rule : p.rules)
    log << fmt::format("  {:>11} {:>11} {:<9} {:<12} {:<9} {:>7} {:>10} {:>12.1f}{}  {}\n", rule.min_bytes,
                       rule.max_bytes ? std::to_string(rule.max_bytes) : "-", rule.algo, rule.codec, rule.precision,
                       rule.streams, FormatSize(rule.bucket_bytes), rule.predicted_us,
                       measured ? fmt::format(" {:>12} {:>12}", us(rule.measured_us), us(rule.baseline_us)) : "",
                       rule.gate);
  log << fmt::format("# wrote {} and study {} in {}\n", profile_to_stdout ? "the profile to stdout" : res.profile_path,
                     res.study_id, res.db_path);
  return 0;
}

// The items of a comma list option; an empty list or item is "--OPTION TEXT: ...".
std::vector<std::string> ParseList(const char* option, const std::string& text) {
  if (text.empty()) throw BadOption(option, text, "an empty list");
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos <= text.size()) {
    const size_t comma = std::min(text.find(',', pos), text.size());
    if (comma == pos) throw BadOption(option, text, "an empty item in a comma list");
    std::string item = text.substr(pos, comma - pos);
    if (std::find(out.begin(), out.end(), item) != out.end())
      throw BadOption(option, text, fmt::format("'{}' is given twice", PrintableLine(item)));
    out.push_back(std::move(item));
    pos = comma + 1;
  }
  return out;
}

std::vector<int> ParseRanks(const std::string& text) {
  std::vector<int> out;
  for (const std::string& item : ParseList("ranks", text)) {
    size_t used = 0;
    int v = 0;
    try {
      v = std::stoi(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != item.size()) throw BadOption("ranks", text, "a comma list of whole numbers");
    if (std::find(out.begin(), out.end(), v) != out.end())
      throw BadOption("ranks", text, fmt::format("{} is given twice", v));
    out.push_back(OptionInRange("ranks", v, 2, 4096));
  }
  return out;
}

// --db, opened once so that a refused database is one line before the measurements, not after them:
// called after every other option is checked (a bad option creates no database).
std::string CheckedDb(const cxxopts::ParseResult& r) {
  const std::string db = DbOption(r);
  CheckWritableOutput(db, "--db", /*regular_file_only=*/true);
  Database probe(db);
  return db;
}

int Calibrate(const cxxopts::ParseResult& r) {
  const std::string device = r.count("device") ? r["device"].as<std::string>() : "cpu";
  OneOfOption("device", device, {"cpu", "cuda"});
  CalibrateOptions o;
  o.cuda = device == "cuda";
  o.sizes = SizeListOption(r, "sizes", "64K:64M:x4");
  o.concurrency = OptionInRange("concurrency", r["concurrency"].as<int>(), 0, 4096);  // 0: this machine's cores
  o.rounds = OptionInRange("rounds", r["rounds"].as<int>(), 1, 99);
  if (r.count("ranks")) o.link_ranks = ParseRanks(r["ranks"].as<std::string>());
  const std::string train = r["train-kernels"].as<std::string>();
  OneOfOption("train-kernels", train, {"yes", "no"});
  if (train == "yes") o.train = TransformerFusionShapes();
  if (r.count("link-sizes")) {
    if (o.link_ranks.empty()) throw UsageError("--link-sizes: the link is measured with --ranks");
    o.link_sizes = r["link-sizes"].as<std::string>();
    SizeListOption(r, "link-sizes", "");
  }
  CheckKernelSizesFit(o, "--sizes");
  // The link's sizes are ciuic-bench's to judge (its ranks' memory): asked now, not after the kernels.
  if (!o.link_ranks.empty())
    CheckBenchAccepts(fmt::format("allreduce --backend mpi --ranks {} --sizes {}",
                                  *std::max_element(o.link_ranks.begin(), o.link_ranks.end()), o.link_sizes),
                      r.count("link-sizes") ? "--link-sizes" : "the link's sizes", o.link_sizes);
  EnableProgress(true);  // a live line on a terminal's stderr (core/progress)
  RunCalibration(CheckedDb(r), o, std::cout);
  return 0;
}

constexpr const char* kValidateSizes = "256K:64M:x4";  // validate's message sizes by default

int Validate(const cxxopts::ParseResult& r) {
  ValidateOptions o;
  if (r.count("ranks")) o.ranks = ParseRanks(r["ranks"].as<std::string>());
  o.sizes = SizeListOption(r, "sizes", kValidateSizes);
  o.codecs = ParseList("codecs", r["codecs"].as<std::string>());
  for (const auto& codec : o.codecs) {
    try {
      ParseCodec(codec);
    } catch (const Error& e) {
      throw BadOption("codecs", r["codecs"].as<std::string>(), e.what());
    }
  }
  o.repeat = OptionInRange("repeat", r["repeat"].as<int>(), 1, 20);
  o.kernel_sizes = r["kernel-sizes"].as<std::string>();
  const std::string kernels = r["kernels"].as<std::string>();
  OneOfOption("kernels", kernels, {"timed", "stored"});  // timed in the passes | the database's
  o.stored_kernels = kernels == "stored";
  CalibrateOptions kernel_sweep;                               // as validate times them: one copy per core
  kernel_sweep.sizes = SizeListOption(r, "kernel-sizes", "");  // refused now rather than after the measurements
  CheckKernelSizesFit(kernel_sweep, "--kernel-sizes");
  // A fraction (0.25: 25%); 0 never fails. Checked before the measurements, not after.
  const double limit = OptionInRange("max-error", r["max-error"].as<double>(), 0.0, 100.0);
  // The message sizes are ciuic-bench's to judge at the most ranks: asked now, not after the kernels.
  CheckValidateOptions(o);
  const std::string sizes_text = r.count("sizes") ? r["sizes"].as<std::string>() : kValidateSizes;
  CheckBenchAccepts(fmt::format("allreduce --backend ciuic --ranks {} --sizes {}",
                                *std::max_element(o.ranks.begin(), o.ranks.end()), sizes_text),
                    "--sizes", sizes_text);
  o.db = CheckedDb(r);
  EnableProgress(true);  // a live line on a terminal's stderr (core/progress)
  const ValidationResult res = RunValidation(o, std::cout);
  if (limit > 0 && res.median_abs_error > limit) {
    std::cerr << fmt::format("ciuic-tune: validate: median |error| {:.1f}% is above --max-error {:.1f}%\n",
                             100 * res.median_abs_error, 100 * limit);
    return 1;
  }
  return 0;
}

int Show(const cxxopts::ParseResult& r) {
  ShowStudies(DbOption(r, /*create=*/false), std::cout);
  return 0;
}

int Export(const cxxopts::ParseResult& r) {
  if (!r.count("profile")) throw UsageError("export: --profile FILE is required");
  OneOfOption("format", r["format"].as<std::string>(), ExportFormats());
  const std::string format = r["format"].as<std::string>();
  ExportOptions o;
  if (r.count("grad-dtype")) {
    o.grad_dtype = r["grad-dtype"].as<std::string>();
    OneOfOption("grad-dtype", o.grad_dtype, {"fp32", "fp16", "bf16"});
    if (format != "deepspeed") throw UsageError("--grad-dtype applies to --format deepspeed");
  }
  const Profile p = LoadProfile(r["profile"].as<std::string>());
  const std::vector<std::string> lost = UnexpressedChoices(p, format, o);
  if (!lost.empty() && r["strict"].as<bool>()) {
    std::string all;
    for (const auto& l : lost) all += (all.empty() ? "" : "; ") + l;
    throw InputError(fmt::format("export --strict: {} cannot express {} choice(s) of {}: {}", format, lost.size(),
                                 PrintableLine(r["profile"].as<std::string>()), all));
  }
  std::cout << ExportProfile(p, format, o);
  for (const auto& l : lost) LogInfo("export {}: not expressed: {}", format, l);
  return 0;
}

// NCCL's own axis timed on this machine's GPUs for a profile's bands kept on NCCL's allreduce
// (tuner/nccl_axis.h); the profile is rewritten with the measured choices (--out: elsewhere).
int NcclAxis(const cxxopts::ParseResult& r) {
  if (!r.count("profile")) throw UsageError("nccl-axis: --profile FILE is required");
  const std::string path = r["profile"].as<std::string>();
  std::string out = path;
  if (r.count("out")) {
    out = r["out"].as<std::string>();
    CheckPathGiven("--out", out);
  }
  NcclAxisOptions o;
  if (r.count("ranks")) {
    const std::string text = r["ranks"].as<std::string>();
    int n = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
    if (text.empty() || ec != std::errc() || end != text.data() + text.size() || n < 1 || n > 4096)
      throw BadOption("ranks", text, "nccl-axis: the communicator's rank count, a whole number in 1..4096");
    o.ranks = n;
  }
  if (r["nodes"].as<int>() != 0) o.nodes = OptionInRange("nodes", r["nodes"].as<int>(), 1, kMaxNodes);
  if (r.count("nccl-channels")) {
    o.channels.clear();
    for (const std::string& item : ParseList("nccl-channels", r["nccl-channels"].as<std::string>())) {
      int n = 0;
      const auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), n);
      if (ec != std::errc() || end != item.data() + item.size() || n < 1 || n > kMaxNcclChannels)
        throw BadOption("nccl-channels", r["nccl-channels"].as<std::string>(),
                        fmt::format("channel counts are whole numbers in 1..{}", kMaxNcclChannels));
      o.channels.push_back(n);
    }
  }
  o.min_gain = OptionInRange("min-gain", r["min-gain"].as<double>(), 0.0, 0.99);
  const Profile p = LoadProfile(path);
  if (p.Device() != "gpu")
    throw UsageError(
        fmt::format("nccl-axis: {} was tuned for CPU ranks; NCCL's axis is timed on the GPUs a profile "
                    "is for",
                    PrintableLine(path)));
  CheckWritableOutput(out, "--out", /*regular_file_only=*/true);
  const Profile measured = MeasureNcclAxis(p, o, BenchNcclTimer(o.ranks > 0 ? o.ranks : p.ranks), std::cerr);
  WriteProfile(out, measured);
  LogInfo("nccl-axis: wrote {}", out);
  return 0;
}

// The accuracy gate alone: each codec's verdict and every seed's run, as a table or JSON
// (scripts/digits_tta.py compares it with real training).
int Gate(const cxxopts::ParseResult& r) {
  GateOptions g;
  g.tolerance = OptionInRange("gate-tolerance", r["gate-tolerance"].as<double>(), 0.0, 1.0);
  g.seeds = OptionInRange("gate-seeds", r["gate-seeds"].as<int>(), 1, 20);
  if (r.count("accumulation")) {
    const std::vector<int> k = AccumulationOption(r["accumulation"].as<std::string>());
    if (k.size() != 1)
      throw BadOption("accumulation", r["accumulation"].as<std::string>(), "gate: one count of micro-batches per sync");
    g.accumulation_steps = k.front();
    if (g.accumulation_steps > g.steps)
      throw BadOption("accumulation", r["accumulation"].as<std::string>(),
                      fmt::format("gate: at most the gate's {} micro-batches", g.steps));
  }
  const std::string format = r.count("format") ? r["format"].as<std::string>() : "text";
  OneOfOption("format", format, {"text", "json"});
  std::vector<std::string> codecs;
  if (r.count("codecs")) {
    codecs = ParseList("codecs", r["codecs"].as<std::string>());
  } else {  // what a study gates: the space's codecs and the 16-bit reductions
    codecs = PlanSpaceCodecs();
    codecs.insert(codecs.end(), {"none@bf16", "none@fp16"});
  }
  for (const auto& codec : codecs) {
    try {
      const size_t at = codec.find('@');
      ParseCodec(codec.substr(0, at));
      if (at != std::string::npos) {
        if (codec.substr(0, at) != "none") throw UsageError("only codec none takes @PRECISION");
        if (const std::string prec = codec.substr(at + 1); prec != "bf16" && prec != "fp16")
          throw UsageError(fmt::format("reduction precision '{}': use none@bf16 or none@fp16", PrintableLine(prec)));
      }
    } catch (const Error& e) {
      throw BadOption("codecs", r["codecs"].as<std::string>(), e.what());
    }
  }
  nlohmann::json verdicts = nlohmann::json::array();
  if (format == "text")
    std::cout << fmt::format(
        "# accuracy gate: {}\n# {:<13} verdict  per seed: held-out accuracy % (codec/uncompressed), "
        "S = at the stress learning rate\n",
        GateConfigKey(g), "codec");
  for (const auto& codec : codecs) {
    const GateResult res = RunAccuracyGate(codec, g);
    nlohmann::json runs = nlohmann::json::array();
    std::string line;
    for (const auto& s : res.seeds) {
      runs.push_back({{"seed", s.seed},
                      {"stress", s.stress},
                      {"accuracy", s.accuracy},
                      {"baseline_accuracy", s.baseline_accuracy},
                      {"loss", std::isfinite(s.loss) ? nlohmann::json(s.loss) : nlohmann::json(nullptr)},
                      {"baseline_loss", s.baseline_loss},
                      {"passed", s.passed}});
      line += fmt::format("  {}{:.1f}/{:.1f}{}", s.stress ? "S" : "", 100 * s.accuracy, 100 * s.baseline_accuracy,
                          s.passed ? "" : "!");
    }
    verdicts.push_back({{"codec", codec}, {"passed", res.passed}, {"runs", runs}});
    if (format == "text") std::cout << fmt::format("  {:<13} {:<7}{}\n", codec, res.passed ? "pass" : "fail", line);
  }
  if (format == "json")
    std::cout << nlohmann::json{{"config", GateConfigKey(g)}, {"verdicts", verdicts}}.dump(1) << "\n";
  return 0;
}

// `ciuic-tune plot ...` runs scripts/plot.py before any option is parsed here (Run); reaching the table
// means options came before the word plot.
int PlotNotFirst(const cxxopts::ParseResult&) {
  throw UsageError("plot takes its own options after it: ciuic-tune plot KIND [options] (ciuic-tune plot --help)");
}

const Subcommand kSubcommands[] = {
    {"run",
     "search for the best configuration (the default with --topology), store it, write the profile",
     {"topology", "nodes", "workload", "strategy", "budget", "seed", "patience", "mode", "transport", "db",
      "calibration", "out", "state-memory", "target", "min-gain", "band-candidates", "gate-tolerance", "gate-seeds",
      "accumulation"},
     RunTune},
    {"show", "stored studies and best configurations", {"db"}, Show},
    {"calibrate",
     "measure the model's primitives here: kernels (cpu or cuda) and the link (--ranks) -> --db",
     {"device", "sizes", "concurrency", "rounds", "ranks", "link-sizes", "train-kernels", "db"},
     Calibrate},
    {"validate",
     "the local model vs ciuic-bench on this machine",
     {"ranks", "sizes", "codecs", "repeat", "kernel-sizes", "kernels", "max-error", "db"},
     Validate},
    {"export",
     "a profile for other tools: json, nccl-env, nccl-tuner, ddp, deepspeed or horovod",
     {"profile", "format", "strict", "grad-dtype"},
     Export},
    {"nccl-axis",
     "time NCCL's algorithm x protocol x channels for a profile's NCCL bands on this machine's GPUs",
     {"profile", "out", "ranks", "nodes", "nccl-channels", "min-gain"},
     NcclAxis},
    {"topologies",
     "built-in topologies, and the model against published nccl-tests figures (fit and held-out apart)",
     {"nodes", "published"},
     Topologies},
    {"gate",
     "the accuracy gate's verdict per codec (default: every codec a study gates), text or json",
     {"codecs", "gate-tolerance", "gate-seeds", "format", "accumulation"},
     Gate},
    {"model", "predicted uncompressed allreduce time and busbw per algorithm", {"topology", "nodes", "sizes"}, Model},
    {"plot",
     "PNG plots by /usr/bin/python3 matplotlib: convergence, model (predicted vs measured), tta; plot --help",
     {},
     PlotNotFirst},
};

// "--a --b --c", wrapped to 100 columns under the summaries of the help.
std::string OptionList(const Subcommand& s, const std::string& indent) {
  if (s.options.empty()) return "";  // plot: the script's own options (ciuic-tune plot --help)
  std::string text, line = indent;
  for (const auto& o : s.options) {
    if (line.size() > indent.size() && line.size() + 3 + o.size() > 100) {
      text += line + "\n";
      line = indent;
    }
    line += (line.size() > indent.size() ? " --" : "--") + o;
  }
  return text + line + "\n";
}

// An option the subcommand does not read is refused: it would otherwise be a value silently ignored
// (`show --budget -5`, `model --strategy foo`).
void CheckOptionsOf(const Subcommand& s, const cxxopts::ParseResult& r) {
  for (const auto& given : r.arguments()) {
    if (given.key() == "command" || std::find(s.options.begin(), s.options.end(), given.key()) != s.options.end())
      continue;
    std::string own;
    for (const auto& o : s.options) own += (own.empty() ? "--" : ", --") + o;
    throw UsageError(fmt::format("--{} is not an option of '{}' (its options: {})", given.key(), s.name, own));
  }
}

int Run(int argc, char** argv) {
  CheckProgressSetting();
  if (argc > 1 && std::string(argv[1]) == "plot") return PlotMain("ciuic-tune", argc - 1, argv + 1);
  std::string help = "Tune gradient communication.\n\nSubcommands (and the options each takes):\n";
  for (const auto& s : kSubcommands)
    help += fmt::format("  {:<12} {}\n", s.name, s.summary) + OptionList(s, std::string(15, ' '));
  cxxopts::Options opts("ciuic-tune", help);
  opts.add_options()("topology", "NAME (see topologies) or a ciuic.topology/1 JSON file",
                     cxxopts::value<std::string>())("nodes", "override the topology's node count",
                                                    cxxopts::value<int>()->default_value("0"))(
      "sizes", "model: message sizes; calibrate: kernel sizes (64K:64M:x4); validate: message sizes (256K:64M:x4)",
      cxxopts::value<std::string>()->default_value("1K:8G:x8"))(
      "workload", "resnet50 bert_large gpt2_xl llama2_7b or a ciuic.workload/1 file",
      cxxopts::value<std::string>()->default_value("gpt2_xl"))("strategy", "grid | random | cd | bayes",
                                                               cxxopts::value<std::string>()->default_value("bayes"))(
      "budget", "evaluations (grid: all)", cxxopts::value<int>()->default_value("100"))(
      "seed", "search seed", cxxopts::value<uint64_t>()->default_value("1"))(
      "patience", "stop after N evaluations without improvement (0: off)", cxxopts::value<int>()->default_value("0"))(
      "mode", "model | measure (time the runtime on this machine's ranks)",
      cxxopts::value<std::string>()->default_value("model"))(
      "transport", "run --mode measure: mpi | gloo (gloo: as a torch job's ciuic.torch hook runs)",
      cxxopts::value<std::string>()->default_value("mpi"))(
      "db", "SQLite database (default: ciuic.db in $CIUIC_DATA_DIR, $XDG_DATA_HOME/ciuic or ~/.local/share/ciuic)",
      cxxopts::value<std::string>())("calibration",
                                     "run: database to read calibrations from (default --db), e.g. one made by "
                                     "calibrate --device cuda on the target GPU",
                                     cxxopts::value<std::string>())(
      "out", "profile path, - for stdout (default: the data folder's profiles/<topology>.profile.json)",
      cxxopts::value<std::string>())(
      "state-memory",
      "run: GiB per rank the runtime may keep (EF residuals, PowerSGD state, buckets); 0: no limit; "
      "auto: a quarter of the topology's device memory",
      cxxopts::value<std::string>()->default_value("auto"))(
      "target", "run: the consumer to tune for: ciuic | ddp | nccl | deepspeed | horovod (only what it can run)",
      cxxopts::value<std::string>()->default_value("ciuic"))(
      "nccl-channels", "nccl-axis: channel counts tried for the fastest algorithm/protocol (default 4,8,16,32)",
      cxxopts::value<std::string>())(
      "min-gain",
      "run: a lossy codec must predict a step (and a band) this fraction faster than the best lossless "
      "configuration",
      cxxopts::value<double>()->default_value("0.05"))(
      "band-candidates",
      "run --mode measure: the model's best configurations each size band times beside the "
      "baseline (the fastest measured is the band's rule)",
      cxxopts::value<int>()->default_value("4"))(
      "gate-tolerance", "accuracy gate: held-out accuracy (fraction) a codec may lose per seed",
      cxxopts::value<double>()->default_value("0.01"))("gate-seeds", "accuracy gate: seeds, each must pass",
                                                       cxxopts::value<int>()->default_value("3"))(
      "accumulation",
      "run: micro-batches per sync to price and gate, a suggestion in the profile (default 1,2,4,8; "
      "1 prices nothing); gate: one count, judged against syncing every micro-batch",
      cxxopts::value<std::string>())("profile", "export: the profile to read", cxxopts::value<std::string>())(
      "format", "export: the format; gate: text | json", cxxopts::value<std::string>()->default_value("json"))(
      "grad-dtype",
      "export --format deepspeed: the job's gradient dtype, fp32 | fp16 | bf16 (default bf16): bucket "
      "sizes in its elements; a reduction in it is left to DeepSpeed",
      cxxopts::value<std::string>())(
      "strict", "export: exit 1 when the format cannot express a choice of the profile (default: listed, exit 0)",
      cxxopts::value<bool>()->default_value("false"))(
      "published", "topologies: published figures (default profiles/published/nccl_tests.json)",
      cxxopts::value<std::string>())("device", "calibrate: cpu | cuda", cxxopts::value<std::string>())(
      "ranks", "calibrate/validate: local rank counts, e.g. 2,3,4", cxxopts::value<std::string>())(
      "concurrency", "calibrate: kernel copies timed at once (0: cores)", cxxopts::value<int>()->default_value("0"))(
      "rounds", "calibrate: kernel sweeps, median per point", cxxopts::value<int>()->default_value("3"))(
      "train-kernels",
      "calibrate: yes | no: the training kernels a study's fusion line sums, at the shipped transformer "
      "workloads' shapes",
      cxxopts::value<std::string>()->default_value("yes"))(
      "codecs", "validate/gate: codecs (gate: codec or none@bf16/none@fp16)",
      cxxopts::value<std::string>()->default_value("none,fp16,int8,int4,sign1,topk:0.01"))(
      "link-sizes", "calibrate --ranks: message sizes of the ring step and the transport's allreduce",
      cxxopts::value<std::string>()->default_value("4K:64M:x2"))(
      "kernel-sizes", "validate: kernel sizes (timed in the passes, or calibrated when missing)",
      cxxopts::value<std::string>()->default_value("64K:64M:x4"))(
      "kernels", "validate: timed (kernels and ring steps swept before each pass) | stored (the database's)",
      cxxopts::value<std::string>()->default_value("timed"))("repeat", "validate: interleaved measurement passes",
                                                             cxxopts::value<int>()->default_value("3"))(
      "max-error", "validate: exit 1 when the median |error| exceeds this (0: never)",
      cxxopts::value<double>()->default_value("0"))("h,help", "this help")("version", "print the version")(
      "command", "", cxxopts::value<std::string>());
  opts.parse_positional({"command"});
  const cxxopts::ParseResult r =
      ParseOrExit(opts, argc, argv, fmt::format("ciuic-tune {} ({})", CIUIC_VERSION, CIUIC_GIT_COMMIT));
  // `ciuic-tune --topology dgx_a100` is `ciuic-tune run --topology dgx_a100`.
  const std::string cmd = r.count("command") ? r["command"].as<std::string>() : (r.count("topology") ? "run" : "");
  for (const auto& s : kSubcommands) {
    if (cmd != s.name) continue;
    if (s.run != PlotNotFirst) CheckOptionsOf(s, r);
    if (r.count("nodes")) OptionInRange("nodes", r["nodes"].as<int>(), 1, kMaxNodes);
    return s.run(r);
  }
  std::string known;
  for (const auto& s : kSubcommands) known += std::string(known.empty() ? "" : ", ") + s.name;
  throw UsageError(cmd.empty()
                       ? fmt::format("missing SUBCOMMAND (this build has: {})", known)
                       : fmt::format("unknown subcommand '{}' (this build has: {})", PrintableLine(cmd), known));
}

}  // namespace
}  // namespace ciuic

int main(int argc, char** argv) {
  ciuic::SetLogPrefix("ciuic-tune");
  ciuic::InstallInterruptHandlers();
  try {
    return ciuic::Run(argc, argv);
  } catch (const ciuic::Interrupted& e) {
    ciuic::LogInfo("{}; exit {}", e.what(), 128 + e.signal());
    return 128 + e.signal();
  } catch (const ciuic::Error& e) {
    // One line whatever a value it echoes holds (a newline in a path or a name).
    ciuic::LogInfo("{}", ciuic::PrintableLine(e.what(), 2000));
    return static_cast<int>(e.code());
  } catch (const std::exception& e) {
    ciuic::LogInfo("internal error: {}", ciuic::PrintableLine(e.what(), 2000));
    return 2;
  }
}
