#include "tuner/study.h"

#include "tuner/bands.h"
#include "tuner/fusion.h"
#include "tuner/meter.h"
#include "tuner/nccl_axis.h"

#include <unistd.h>
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>

#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <set>

#include <nlohmann/json.hpp>

#include "core/config.h"
#include "core/database.h"
#include "core/error.h"
#include "core/files.h"
#include "core/progress.h"
#include "core/sizes.h"
#include "core/timer.h"
#include "kernels/codec_spec.h"
#include "tuner/bench_runner.h"
#include "tuner/calibrate.h"
#include "tuner/cost_model.h"
#include "tuner/gate.h"

namespace ciuic {

namespace {

// One codec's verdict under `g` (GateConfigKey: with accumulation steps above 1, its own key), from
// the database or run now and stored; logged either way as "gate  NAME ...".
bool GateVerdict(Database& db, const std::string& codec, const GateOptions& g, std::ostream& log) {
  const std::string key = GateConfigKey(g);
  const std::string name = g.accumulation_steps == 1 ? codec : fmt::format("{} k={}", codec, g.accumulation_steps);
  Statement q(db.handle(), "SELECT passed, final_loss, baseline_loss FROM gate_results WHERE codec = ? AND config = ?");
  q.Bind(1, codec).Bind(2, key);
  if (q.Step()) {
    const bool passed = q.ColumnInt(0) != 0;
    log << fmt::format("gate  {:<13} {} (stored: worst seed's held-out loss {:.4f} vs {:.4f})\n", name,
                       passed ? "pass" : "fail", q.ColumnDouble(1), q.ColumnDouble(2));
    return passed;
  }
  const GateResult r = RunAccuracyGate(codec, g);
  Database::Transaction tx(db);
  Statement ins(db.handle(),
                "INSERT OR REPLACE INTO gate_results (codec, config, final_loss, baseline_loss, passed, created) "
                "VALUES (?, ?, ?, ?, ?, ?)");
  ins.Bind(1, codec)
      .Bind(2, key)
      .Bind(3, r.final_loss)
      .Bind(4, r.baseline_loss)
      .Bind(5, int64_t{r.passed})
      .Bind(6, IsoNow());
  ins.Step();
  tx.Commit();
  log << fmt::format(
      "gate  {:<13} {} ({} of {} seeds x 2 learning rates: held-out accuracy {:.1f}% vs "
      "uncompressed {:.1f}%, loss {:.4f} vs {:.4f}; tolerance {:.1f} points)\n",
      name, r.passed ? "pass" : "fail", r.passed ? "worst" : "first failing", g.seeds, 100 * r.accuracy,
      100 * r.baseline_accuracy, r.final_loss, r.baseline_loss, 100 * g.tolerance);
  return r.passed;
}

// Gate verdicts for every codec and reduction precision of the space (GateName), from the database
// or run now (and stored). The stored losses are the worst seed's. A codec or precision the --target
// cannot run in any configuration is not gated (it is never proposed): its verdict is "fail".
std::map<std::string, bool> GateAll(Database& db, const SearchSpace& space, const std::string& target, double tolerance,
                                    int seeds, std::ostream& log) {
  GateOptions g;
  g.tolerance = tolerance;
  g.seeds = seeds;
  std::map<std::string, bool> pass;
  std::vector<std::string> names;
  std::vector<std::string> skipped;
  const auto runnable = [&](const std::string& codec, const std::string& prec) {
    for (const auto& algo : space.dims[kAlgoDim].values)
      if (TargetRuns(target, PlanChoice{codec, 0, 1, algo, prec})) return true;
    return false;
  };
  for (const auto& codec : PlanSpaceCodecs()) (runnable(codec, "fp32") ? names : skipped).push_back(codec);
  for (const auto& prec : space.dims[kPrecisionDim].values) {
    if (prec == "fp32") continue;
    const std::string name = GateName(PlanChoice{"none", 0, 1, "nccl", prec});
    (runnable("none", prec) ? names : skipped).push_back(name);
  }
  for (const auto& name : skipped) {
    pass[name] = false;
    log << fmt::format("gate  {:<13} not run (--target {} cannot run it)\n", name, target);
  }
  Progress progress("accuracy gate", static_cast<double>(names.size()), static_cast<int>(names.size()));
  for (const auto& codec : names) {
    progress.Begin(codec);
    struct ItemDone {
      Progress& p;
      ~ItemDone() { p.Done(); }
    } item_done{progress};
    pass[codec] = GateVerdict(db, codec, g, log);
  }
  return pass;
}

// One study, step by step: RunStudy below calls these in order; each step reads what the earlier
// ones filled in.
struct Study {
  Study(const TuneOptions& options, std::ostream& progress) : o(options), log(progress) {}

  const TuneOptions& o;
  std::ostream& log;
  // LoadInputs
  Topology topo;
  Workload work;
  SearchSpace space;
  int batch = 1;
  // StartMeter (--mode measure only)
  std::unique_ptr<BucketMeter> meter;
  // LoadCodecCosts
  std::string cal_db;
  Calibration cal;
  const Calibration* calp = nullptr;
  // LogCostModel, SetConstraints
  std::string model_note;  // part of a study's settings: a resumed study used the same codec costs
  std::string constraints;
  double state_limit_gib = 0;  // 0: no limit
  // the gate, OpenOrResume, Search
  std::map<std::string, bool> gate;
  TuneResult res;
  std::map<std::string, double> stored;  // a resumed study's trials: config -> score
  int64_t next_idx = 0;                  // the index the next stored trial takes
  int64_t evaluated = 0;                 // trials stored so far
  Objective objective;                   // scores (and stores) one point of the space
  std::unique_ptr<Progress> progress;    // the live line during the search (core/progress)

  static void CheckOptions(const TuneOptions& o) {
    if (o.mode != "model" && o.mode != "measure") throw UsageError(fmt::format("--mode {}: model | measure", o.mode));
    if (o.budget < 1) throw UsageError(fmt::format("--budget {} must be at least 1", o.budget));
    const auto targets = TuneTargets();
    if (std::find(targets.begin(), targets.end(), o.target) == targets.end())
      throw UsageError(fmt::format("--target {}: ciuic | ddp | nccl | deepspeed | horovod", o.target));
    if (o.accumulation.empty() || o.accumulation.front() != 1)
      throw UsageError("--accumulation: the list starts with 1 (every micro-batch synced), e.g. 1,2,4,8");
    for (size_t i = 0; i < o.accumulation.size(); ++i)
      if (o.accumulation[i] < 1 || o.accumulation[i] > kMaxAccumulationSteps ||
          (i > 0 && o.accumulation[i] <= o.accumulation[i - 1]))
        throw UsageError(fmt::format("--accumulation: {} is not in increasing order within 1..{}", o.accumulation[i],
                                     kMaxAccumulationSteps));
  }

  // Topology, workload, and the space of plans the topology offers.
  void LoadInputs() {
    topo = LoadTopology(o.topology, o.nodes);
    work = LoadWorkload(o.workload);
    space = AllReducePlanSpace(topo);
    if (o.target != "ciuic") {
      space.valid = [plain = space, target = o.target](const Point& p) {
        return plain.Valid(p) && TargetRuns(target, ChoiceOf(plain, p));
      };
    }
    batch = work.default_batch;
  }

  // Where the profile and the study go, checked before any trial runs. The default profile path takes
  // the topology's name, read from its JSON file: only a plain file name, never "../x". No output may
  // be another output or an input file (the profile written over its own --topology).
  void CheckOutputs() {
    const char* profile_option = o.out.empty() ? "profile" : "--out";
    if (o.out.empty()) {
      // Never into the source tree's profiles/ (shipped examples): the data folder's own.
      CheckFileNameComponent(topo.name, fmt::format("{}: name", o.topology));
      res.profile_path = (std::filesystem::path(DefaultProfilesDir()) / (topo.name + ".profile.json")).string();
    } else {
      res.profile_path = o.out;
    }
    const std::string topology_file = topo.origin == "detected" ? "" : topo.origin;
    CheckDifferentFiles(profile_option, res.profile_path, "--db", o.db);
    const std::pair<const char*, std::string> inputs[] = {{"--topology", topology_file}, {"--workload", work.origin}};
    for (const auto& [option, path] : inputs) {
      CheckDifferentFiles(option, path, profile_option, res.profile_path);
      CheckDifferentFiles(option, path, "--db", o.db);
    }
    CheckDifferentFiles("--calibration", o.calibration_db, profile_option, res.profile_path);
    CheckWritableOutput(res.profile_path, profile_option);
    CheckWritableOutput(o.db, "--db", /*regular_file_only=*/true);
  }

  // CPU ranks: this machine (cpu_local) or a cluster of CPU hosts (intra fabric shm, e.g. cluster_lab).
  bool CpuTopology() const { return topo.intra.fabric == "shm"; }

  void StartMeter() {
    if (o.mode == "measure" && !CpuTopology())
      throw UsageError(
          fmt::format("--mode measure runs on the target hardware: this machine's CPU ranks (cpu_local) "
                      "or a CPU cluster reached through mpiexec (intra fabric shm), not {}",
                      topo.name));
    if (o.mode != "measure") return;
    // cpu_local: the ranks the study models, all of them on this host.
    if (topo.name == "cpu_local" && topo.nodes != 1)
      throw UsageError(
          fmt::format("--mode measure times cpu_local's ranks on this host: a {}-node study cannot "
                      "be measured here (--nodes 1, a cluster topology under its launcher, or --mode "
                      "model)",
                      topo.nodes));
    meter = std::make_unique<BucketMeter>(topo.ranks(), topo.nodes, o.transport, log);
  }

  // Codec costs: this machine's calibration when tuning for it; on a GPU topology a calibration of its
  // GPU (calibrate --device cuda, here or in --calibration) when there is one; else memory bandwidth.
  void LoadCodecCosts() {
    cal_db = o.calibration_db.empty() ? o.db : o.calibration_db;
    if (!o.calibration_db.empty() && !std::filesystem::is_regular_file(o.calibration_db)) {
      std::error_code ec;
      const auto kind = std::filesystem::status(o.calibration_db, ec).type();
      throw InputError(fmt::format("--calibration '{}': {}", PrintableLine(o.calibration_db),
                                   kind == std::filesystem::file_type::not_found ? "no such database file"
                                   : kind == std::filesystem::file_type::directory
                                       ? "is a folder, not a database file"
                                       : "not a regular file (a database file is)"));
    }
    if (CpuTopology()) {
      cal = LoadCalibration(cal_db, CalibrationDevice(false));
    } else {
      cal = LoadGpuCalibrationFor(cal_db, topo.device.name);
    }
    calp = cal.empty() ? nullptr : &cal;
    if (CpuTopology() && topo.nodes > 1) CalibrateClusterLinks();
  }

  // A CPU cluster's links from `calibrate --ranks PER_NODE,RANKS` run under its launcher: a ring step
  // of PER_NODE ranks stays on the first host (the hostfile fills it first), one of all the ranks
  // crosses between hosts with one sender per host egress. Each curve gives a latency (its smallest
  // message) and a rate (its largest, after that latency), replacing the topology's figures.
  void CalibrateClusterLinks() {
    const int per_node = topo.devices_per_node, ranks = topo.ranks();
    if (!calp || !cal.HasLink(per_node) || !cal.HasLink(ranks) || per_node < 2) {
      log << fmt::format(
          "links: the topology's figures (calibrate them under the cluster's launcher: ciuic-tune "
          "calibrate --ranks {},{}, e.g. through scripts/cluster-lab.sh --run)\n",
          per_node, ranks);
      return;
    }
    auto fit = [&](int n, double* gb_per_s, double* alpha_us) {
      const auto& pts = cal.sendrecv.at(n).points();
      const double alpha = pts.front().second;
      const auto [bytes, us] = pts.back();
      *alpha_us = alpha;
      *gb_per_s = bytes / std::max(us - alpha, 1e-3) / 1e3;
    };
    double intra_gbps, intra_us, node_gbps, inter_us;
    fit(per_node, &intra_gbps, &intra_us);
    fit(ranks, &node_gbps, &inter_us);
    topo.intra.bw_gbps = intra_gbps;
    topo.intra.latency_us = intra_us;
    topo.nics.gbps = NicGbpsFor(node_gbps, topo.nics.count);
    topo.nics.latency_us = inter_us;
    for (const char* f : {"intra.bw_gbps_per_device", "intra.latency_us", "nics.gbps", "nics.latency_us"})
      topo.live.insert(f);
    topo.sources["intra.bw_gbps_per_device"] = topo.sources["intra.latency_us"] =
        fmt::format("calibrated: ring step of {} ranks on one host ({})", per_node, cal_db);
    topo.sources["nics.gbps"] = topo.sources["nics.latency_us"] =
        fmt::format("calibrated: ring step of {} ranks across {} hosts ({})", ranks, topo.nodes, cal_db);
    log << fmt::format(
        "links: calibrated in {}: within a host {:.2f} GB/s, {:.1f} us; between hosts {:.3f} GB/s "
        "per host ({:.2f} Gb/s), {:.1f} us\n",
        cal_db, intra_gbps, intra_us, node_gbps, node_gbps * 8, inter_us);
  }

  // Says which cost model the study runs on; a calibrated kernel model becomes part of its settings.
  void LogCostModel() {
    if (calp && topo.name == "cpu_local" && cal.HasLink(topo.ranks())) {
      log << fmt::format(
          "cost model: calibrated local model ({} values measured on {}; ciuic-tune validate checks it)\n",
          cal.values(), cal.device);
    } else if (calp) {
      log << fmt::format("cost model: alpha-beta transfers, codec kernels as calibrated on {} ({} values from {}){}\n",
                         cal.device, cal.values(), cal_db,
                         topo.name == "cpu_local"
                             ? fmt::format("; the link at {} ranks is not calibrated (ciuic-tune calibrate --ranks {} "
                                           "measures it)",
                                           topo.ranks(), topo.ranks())
                             : "");
      model_note = "codec_kernels=" + cal.device;
    } else {
      log << (topo.name == "cpu_local"
                  ? fmt::format("cost model: alpha-beta with codecs at the memory bandwidth (no calibration of {} "
                                "ranks in {}: ciuic-tune calibrate --sizes 64K:64M:x4 --ranks {} measures one)\n",
                                topo.ranks(), cal_db, topo.ranks())
                  : fmt::format("cost model: alpha-beta, codecs at the topology's memory bandwidth (no calibration of "
                                "'{}' in {}: ciuic-tune calibrate --device cuda on that GPU makes one)\n",
                                topo.device.name, cal_db));
    }
  }

  void LogSettings() {
    log << fmt::format(
        "study: topology {} ({} nodes x {} devices, fingerprint {}), workload {} ({} parameters), "
        "strategy {}, budget {}, seed {}\n",
        topo.name, topo.nodes, topo.devices_per_node, topo.Fingerprint(), work.name, work.parameters, o.strategy,
        o.budget, o.seed);
  }

  // The state-memory limit, the lossy-gain threshold and the model note: settings a resumed study
  // must share.
  void SetConstraints() {
    if (o.state_memory_gib < 0 && o.state_memory_gib != TuneOptions::kAutoStateMemory)
      throw UsageError("--state-memory must be >= 0 GiB (0: no limit) or auto");
    if (!(o.min_gain >= 0 && o.min_gain < 1)) throw UsageError("--min-gain must be in [0, 1)");
    std::string why;
    if (o.state_memory_gib > 0) {
      state_limit_gib = o.state_memory_gib;
      why = "--state-memory";
    } else if (o.state_memory_gib < 0 && topo.device.memory_gib > 0) {
      state_limit_gib = topo.device.memory_gib / 4;
      why = fmt::format("auto: a quarter of the {} GiB of a {}", topo.device.memory_gib, topo.device.name);
    }
    constraints = state_limit_gib > 0 ? fmt::format("state_memory_gib={}", state_limit_gib) : "";
    if (o.target != "ciuic") {
      constraints += std::string(constraints.empty() ? "" : ";") + "target=" + o.target;
      log << fmt::format("constraint: only configurations {} can run (--target {})\n", o.target, o.target);
    }
    if (o.min_gain != 0.05) constraints += (constraints.empty() ? "" : ";") + fmt::format("min_gain={}", o.min_gain);
    if (!model_note.empty()) constraints += (constraints.empty() ? "" : ";") + model_note;
    // Timings over gloo are another study than over MPI (a resumed study keeps its transport).
    if (o.mode == "measure" && o.transport != "mpi")
      constraints += std::string(constraints.empty() ? "" : ";") + "transport=" + o.transport;
    if (state_limit_gib > 0)
      log << fmt::format("constraint: communication state <= {:.4g} GiB per rank ({})\n", state_limit_gib, why);
    log << fmt::format(
        "constraint: a lossy codec must be >= {:.0f}% faster than the best lossless configuration "
        "(--min-gain)\n",
        100 * o.min_gain);
  }

  bool StateFits(const PlanChoice& c) const {
    return !(state_limit_gib > 0) || CommStateBytes(c, work, topo.ranks()) <= state_limit_gib * (1 << 30);
  }

  // Resume a study with the same settings (and constraints) that did not finish, or start one.
  void OpenOrResume(Database& db) {
    {
      Statement q(db.handle(),
                  "SELECT id FROM studies WHERE topology_fingerprint = ? AND workload = ? AND strategy = ? "
                  "AND budget = ? AND seed = ? AND mode = ? AND constraints = ? AND status = 'running' "
                  "ORDER BY id DESC LIMIT 1");
      q.Bind(1, topo.Fingerprint())
          .Bind(2, work.name)
          .Bind(3, o.strategy)
          .Bind(4, int64_t{o.budget})
          .Bind(5, static_cast<int64_t>(o.seed))
          .Bind(6, o.mode)
          .Bind(7, constraints);
      if (q.Step()) res.study_id = q.ColumnInt(0);
    }
    if (res.study_id) {
      // A failed trial (its ciuic-bench died) is run again: the failure may not repeat.
      Statement t(db.handle(), "SELECT config, score_us FROM trials WHERE study_id = ? AND status != 'failed'");
      t.Bind(1, res.study_id);
      while (t.Step())
        stored[t.ColumnText(0)] = t.ColumnIsNull(1) ? std::numeric_limits<double>::infinity() : t.ColumnDouble(1);
      Statement n(db.handle(), "SELECT COALESCE(MAX(idx) + 1, 0) FROM trials WHERE study_id = ?");
      n.Bind(1, res.study_id);
      if (n.Step()) next_idx = n.ColumnInt(0);
      log << fmt::format("study {}: resuming, {} trial(s) stored\n", res.study_id, stored.size());
    } else {
      Database::Transaction tx(db);
      Statement ins(db.handle(),
                    "INSERT INTO studies (created, tool_version, git_commit, topology, topology_fingerprint, nodes, "
                    "workload, strategy, budget, seed, mode, constraints, status) "
                    "VALUES (?,?,?,?,?,?,?,?,?,?,?,?, 'running')");
      ins.Bind(1, IsoNow())
          .Bind(2, std::string(CIUIC_VERSION))
          .Bind(3, std::string(CIUIC_GIT_COMMIT))
          .Bind(4, topo.name)
          .Bind(5, topo.Fingerprint())
          .Bind(6, int64_t{topo.nodes})
          .Bind(7, work.name)
          .Bind(8, o.strategy)
          .Bind(9, int64_t{o.budget})
          .Bind(10, static_cast<int64_t>(o.seed))
          .Bind(11, o.mode)
          .Bind(12, constraints);
      ins.Step();
      res.study_id = db.LastInsertId();
      tx.Commit();
    }
  }

  // The search over the space, every trial stored (a resumed study's stored trials are reused).
  SearchResult SearchPlans(Database& db) {
    evaluated = next_idx;  // a resumed study appends after its stored trials
    progress = std::make_unique<Progress>(o.mode == "measure" ? "measured trials" : "trials", o.budget, o.budget);
    objective = [this, &db](const Point& p) {
      const std::string config = space.Describe(p);
      // The live line follows the search's trials (the lossless twins scored later are not counted).
      if (progress) progress->Begin(fmt::format("trial {}: {}", evaluated + 1, config));
      struct ItemDone {
        Progress* p;
        ~ItemDone() {
          if (p) p->Done();
        }
      } item_done{progress.get()};
      if (auto it = stored.find(config); it != stored.end()) {
        ++res.reused;
        return it->second;
      }
      const double t0 = NowSeconds();
      const PlanChoice c = ChoiceOf(space, p, topo);
      const bool ok = gate.at(GateName(c));  // the space proposes only offered combinations: all gated
      const bool fits = StateFits(c);
      double score = std::numeric_limits<double>::infinity();
      std::string failure;  // why a measurement failed
      if (ok && !fits) {
        // over the memory budget: infeasible, never measured
      } else if (ok && !meter) {
        score = ModelStepUs(c, topo, work, batch, calp);
      } else if (ok) {
        bool feasible = false;
        const CommPlan plan = PlanOf(c, topo, &feasible, calp);
        if (feasible) {
          // Measured bucket time at the nominal bucket size; partial buckets scale with their bytes.
          const double full = meter->Us(c, static_cast<uint64_t>(c.bucket_bytes), &failure);
          const StepTiming st = ScheduleStep(
              work, topo, plan, batch, [&](double bytes) { return full * std::min(1.0, bytes / c.bucket_bytes); });
          score = std::isfinite(full) ? StepScore(st) : full;
        }
      }
      Statement ins(db.handle(),
                    "INSERT OR REPLACE INTO trials (study_id, idx, config, score_us, mode, status, elapsed_s, "
                    "reason) VALUES (?,?,?,?,?,?,?,?)");
      ins.Bind(1, res.study_id).Bind(2, evaluated).Bind(3, config);
      if (std::isfinite(score))
        ins.Bind(4, score);
      else
        ins.BindNull(4);
      ins.Bind(5, o.mode)
          .Bind(6, std::string(!ok                    ? "gate-failed"
                               : !fits                ? "over-memory"
                               : !failure.empty()     ? "failed"
                               : std::isfinite(score) ? "ok"
                                                      : "infeasible"))
          .Bind(7, NowSeconds() - t0)
          .Bind(8, failure);
      ins.Step();
      ++evaluated;
      return score;
    };
    SearchOptions so;
    so.strategy = o.strategy;
    so.budget = o.budget;
    so.seed = o.seed;
    so.patience = o.patience;
    double best_so_far = std::numeric_limits<double>::infinity();
    SearchResult sr = Search(space, objective, so, [&](const Trial& t) {
      if (t.score < best_so_far) {
        best_so_far = t.score;
        log << fmt::format("trial {:>4}: {:>12.1f} us/step  best  {}\n", t.index + 1, t.score, space.Describe(t.point));
      } else if ((t.index + 1) % 25 == 0) {
        log << fmt::format("trial {:>4}: best so far {:.1f} us/step\n", t.index + 1, best_so_far);
      }
    });
    res.evaluations = static_cast<int>(sr.trials.size());
    progress.reset();
    return sr;
  }

  static bool Lossless(const PlanChoice& c) { return IsLossless(c); }

  bool LossyPays(const std::string& what, const std::string& lossy, double lossy_us, const std::string& lossless,
                 double lossless_us) {
    return ciuic::LossyPays(log, o.min_gain, what, lossy, lossy_us, lossless, lossless_us);
  }

  // A lossy best is weighed against the best lossless configuration, which a small budget may never
  // have come near (on the lab a budget of 12 found hier in 1 MiB buckets at 832 ms one day, and
  // nothing lossless under 1038 ms the next). So a short lossless search: coordinate descent from the
  // best lossless trial over the bucket, the algorithm and the streams (codec none at fp32), each pass
  // moving to the best value of one dimension at a time, until a pass moves nowhere or
  // kLosslessSearchTrials new trials were scored. Points already scored are not scored again.
  static constexpr int kLosslessSearchTrials = 32;
  Trial LosslessSearch(SearchResult& sr, Trial at) {
    std::map<std::string, Trial> seen;  // config -> its trial, as stored
    for (const Trial& t : sr.trials) seen[space.Describe(t.point)] = t;
    int added = 0;
    const auto score = [&](const Point& p) -> std::optional<Trial> {
      const std::string config = space.Describe(p);
      if (auto it = seen.find(config); it != seen.end()) return it->second;
      if (!space.Valid(p) || added >= kLosslessSearchTrials) return std::nullopt;  // p is Canonical
      const Trial t{static_cast<int>(sr.trials.size()), p, objective(p)};
      sr.trials.push_back(t);
      seen[config] = t;
      ++added;
      log << fmt::format("trial {:>4}: {:>12.1f} us/step  lossless search  {}\n", t.index + 1, t.score, config);
      return t;
    };
    for (bool moved = true; moved && added < kLosslessSearchTrials;) {
      moved = false;
      for (const int dim : {kBucketDim, kAlgoDim, kDepthDim, kStreamsDim}) {
        const Trial from = at;
        const int n = static_cast<int>(space.dims[static_cast<size_t>(dim)].values.size());
        for (int v = 0; v < n; ++v) {
          Point q = from.point;
          q[static_cast<size_t>(dim)] = v;
          q = space.Canonical(q);  // leaving hier drops its depth
          if (const auto t = score(q); t && t->score < at.score) at = *t;
        }
        moved = moved || at.point != from.point;
      }
    }
    return at;
  }

  // The best trial's plan; refuses a study where nothing was feasible. A lossy best must beat the
  // best lossless configuration by --min-gain: the best's lossless twins, then LosslessSearch from the
  // best lossless trial, are scored here.
  PlanChoice Best(SearchResult& sr) {
    if (std::isfinite(sr.best.score) && !Lossless(ChoiceOf(space, sr.best.point))) {
      std::optional<Trial> lossless;
      // The best's lossless twins (its bucket and streams, codec none at fp32, with its algorithm and
      // with the library's own allreduce), so the comparison is never against a lossless point the
      // search happened to miss.
      const auto index_of = [&](int dim, const std::string& v) {
        const auto& vals = space.dims[static_cast<size_t>(dim)].values;
        const auto it = std::find(vals.begin(), vals.end(), v);
        return it == vals.end() ? -1 : static_cast<int>(it - vals.begin());
      };
      const int none = index_of(kCodecDim, "none"), fp32 = index_of(kPrecisionDim, "fp32"),
                nccl = index_of(kAlgoDim, "nccl");
      if (none >= 0 && fp32 >= 0) {
        Point twin = sr.best.point;
        twin[kCodecDim] = none;
        twin[kPrecisionDim] = fp32;
        twin = space.Canonical(twin);  // no ratio or rank without a codec
        std::vector<Point> twins = {twin};
        if (nccl >= 0 && twin[kAlgoDim] != nccl) {
          twins.push_back(twin);
          twins.back()[kAlgoDim] = nccl;
          twins.back() = space.Canonical(twins.back());
        }
        for (const Point& p : twins) {
          const std::string config = space.Describe(p);
          if (!space.Valid(p) || std::any_of(sr.trials.begin(), sr.trials.end(),
                                             [&](const Trial& t) { return space.Describe(t.point) == config; }))
            continue;
          const Trial t{static_cast<int>(sr.trials.size()), p, objective(p)};
          sr.trials.push_back(t);
          log << fmt::format("trial {:>4}: {:>12.1f} us/step  a lossless twin of the best  {}\n", t.index + 1, t.score,
                             config);
        }
      }
      for (const Trial& t : sr.trials) {
        if (Lossless(ChoiceOf(space, t.point)) && (!lossless || t.score < lossless->score)) lossless = t;
      }
      if (lossless && std::isfinite(lossless->score)) lossless = LosslessSearch(sr, *lossless);
      if (lossless && !LossyPays("step", space.Describe(sr.best.point), sr.best.score, space.Describe(lossless->point),
                                 lossless->score)) {
        sr.best = *lossless;
      }
    }
    if (!std::isfinite(sr.best.score))
      throw InputError(
          fmt::format("no configuration is feasible (every trial failed the gate{}, or could not run)",
                      state_limit_gib > 0
                          ? fmt::format(", or needs more than {:.4g} GiB of state (--state-memory)", state_limit_gib)
                          : ""));
    const PlanChoice best = ChoiceOf(space, sr.best.point, topo);
    log << fmt::format("best: {} (communication state {:.2f} GiB per rank)\n", space.Describe(sr.best.point),
                       CommStateBytes(best, work, topo.ranks()) / (1 << 30));
    return best;
  }

  // The profile's provenance, the best step time and the uncompressed baseline's.
  void DescribeProfile(const SearchResult& sr) {
    Profile& prof = res.profile;
    prof.topology = topo.name;
    prof.fingerprint = topo.Fingerprint();
    prof.nodes = topo.nodes;
    prof.ranks = topo.ranks();
    prof.device = CpuTopology() ? "cpu" : "gpu";
    prof.workload = work.name;
    prof.tool_version = CIUIC_VERSION;
    prof.git_commit = CIUIC_GIT_COMMIT;
    prof.created = IsoNow();
    prof.study_id = res.study_id;
    prof.mode = o.mode;
    prof.strategy = o.strategy;
    prof.seed = o.seed;
    prof.budget = o.budget;
    prof.step_us = sr.best.score;
    const PlanChoice baseline{"none", 25.0 * (1 << 20), 1, "nccl"};
    prof.baseline_step_us = ModelStepUs(baseline, topo, work, batch, calp);
    if (meter) {  // measured like the trials: the library's own allreduce with 25 MiB buckets
      bool feasible = false;
      const CommPlan plan = PlanOf(baseline, topo, &feasible);
      const double full = meter->Us(baseline, static_cast<uint64_t>(baseline.bucket_bytes));
      prof.baseline_step_us = StepScore(ScheduleStep(
          work, topo, plan, batch, [&](double bytes) { return full * std::min(1.0, bytes / baseline.bucket_bytes); }));
    }
  }

  // Gradient accumulation (--accumulation): syncing every k micro-batches, priced on the step the study
  // chose (backward compute, plus 1/k of what a synchronised step adds to it: exposed communication and
  // the score's share of the rest) and gated with the step's codec at k against uncompressed at 1 on
  // the same samples. The suggestion is the fastest k that passed and gains --min-gain over k = 1.
  void AdviseAccumulation(Database& db, const PlanChoice& best) {
    if (o.accumulation.size() < 2) return;
    AccumulationAdvice& adv = res.profile.accumulation;
    adv.codec = GateName(best);
    adv.priced = meter ? "measured" : "model";
    bool feasible = false;
    const CommPlan plan = PlanOf(best, topo, &feasible, calp);
    const double backward = ScheduleStep(work, topo, EffectiveFabric(topo), plan, batch).backward_us;
    const double step = res.profile.step_us, sync = std::max(0.0, step - backward);
    GateOptions g;
    g.tolerance = o.gate_tolerance;
    g.seeds = o.gate_seeds;
    const AccumulationCandidate* chosen = nullptr;
    for (int k : o.accumulation) {
      AccumulationCandidate c;
      c.steps = k;
      c.step_us = backward + sync / k;
      if (k == 1) {
        c.gate = Lossless(best) ? "n/a" : "passed";
      } else {
        g.accumulation_steps = k;
        c.gate = GateVerdict(db, adv.codec, g, log) ? "passed" : "failed";
      }
      adv.candidates.push_back(c);
    }
    for (const auto& c : adv.candidates)
      if (c.steps > 1 && c.gate == "passed" && c.step_us * (1 + o.min_gain) <= adv.candidates.front().step_us &&
          (!chosen || c.step_us < chosen->step_us))
        chosen = &c;
    adv.steps = chosen ? chosen->steps : 1;
    std::string line;
    for (const auto& c : adv.candidates)
      line += fmt::format("  k={} {:.1f} ms ({}{})", c.steps, c.step_us / 1000, c.gate,
                          c.steps == 1 ? "" : fmt::format(", {:.2f}x", adv.candidates.front().step_us / c.step_us));
    log << fmt::format("accumulation (per micro-batch, {}; gate on {}):{}\n",
                       meter ? "priced from measured bucket times" : "priced by the model", adv.codec, line);
    log << (chosen ? fmt::format("accumulation: suggest syncing every {} micro-batches ({:.2f}x per micro-batch; a "
                                 "training hyperparameter: the job opts in)\n",
                                 adv.steps, adv.Gain())
                   : std::string("accumulation: no suggestion (no k above 1 passed the gate and gains --min-gain)\n"));
  }

  // Rules per size band (tuner/bands.h).
  void PickRules(const PlanChoice& best) {
    const auto fits = [this](const PlanChoice& c) { return StateFits(c); };
    BandInputs in{topo, space, gate, calp, o.target, o.min_gain, o.band_candidates, fits, meter.get()};
    in.largest_message = 4.0 * static_cast<double>(work.parameters);  // fp32 gradients
    res.profile.rules = PickBandRules(in, best, log);
  }

  void WriteProfileFile() { WriteProfile(res.profile_path, res.profile); }

  // Marks the study done and stores its rules as the topology's best configurations.
  void Store(Database& db, const SearchResult& sr) {
    const Profile& prof = res.profile;
    Database::Transaction tx(db);
    Statement done(db.handle(),
                   "UPDATE studies SET status = 'done', best_score_us = ?, best_config = ?, profile_path = ? "
                   "WHERE id = ?");
    done.Bind(1, sr.best.score).Bind(2, space.Describe(sr.best.point)).Bind(3, res.profile_path).Bind(4, res.study_id);
    done.Step();
    for (const auto& r : prof.rules) {
      Statement up(db.handle(),
                   "INSERT OR REPLACE INTO best_configs (topology_fingerprint, op, min_bytes, max_bytes, config, "
                   "predicted_us, measured_us, study_id, updated) VALUES (?,?,?,?,?,?,?,?,?)");
      up.Bind(1, prof.fingerprint)
          .Bind(2, r.op)
          .Bind(3, static_cast<int64_t>(r.min_bytes))
          .Bind(4, static_cast<int64_t>(r.max_bytes))
          .Bind(5, fmt::format("algo={} codec={} precision={} streams={} bucket={}{}", r.algo, r.codec, r.precision,
                               r.streams, r.bucket_bytes,
                               r.hierarchy_depth == 3 ? fmt::format(" depth=3 group={}", r.nodes_per_group) : ""))
          .Bind(6, r.predicted_us)
          .Bind(8, res.study_id)
          .Bind(9, IsoNow());
      if (r.measured_us >= 0) {
        up.Bind(7, r.measured_us);
      } else {
        up.BindNull(7);
      }
      up.Step();
    }
    tx.Commit();
  }
};

}  // namespace

std::string DefaultDatabasePath() { return (std::filesystem::path(DataHome(true)) / "ciuic.db").string(); }

std::string DefaultProfilesDir() {
  const std::filesystem::path dir = std::filesystem::path(DataHome(true)) / "profiles";
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw InputError(fmt::format("cannot create '{}': {} (give --out)", dir.string(), ec.message()));
  return dir.string();
}

TuneResult RunStudy(const TuneOptions& options, std::ostream& log) {
  TuneOptions o = options;
  Study::CheckOptions(o);
  Study s(o, log);  // holds a reference to o: sees the default database below
  s.LoadInputs();
  // The data folder is made (and said) only for a run whose options and inputs are good.
  if (o.db.empty()) o.db = DefaultDatabasePath();
  s.res.db_path = o.db;
  s.CheckOutputs();
  s.StartMeter();
  s.LoadCodecCosts();
  Database db(o.db);
  s.LogCostModel();
  s.LogSettings();
  s.gate = GateAll(db, s.space, o.target, o.gate_tolerance, o.gate_seeds, log);
  s.SetConstraints();
  s.OpenOrResume(db);
  SearchResult sr = s.SearchPlans(db);
  const PlanChoice best = s.Best(sr);
  s.DescribeProfile(sr);
  s.PickRules(best);
  s.AdviseAccumulation(db, best);
  s.log << FusionAdvice(s.work, s.batch, !s.CpuTopology(), s.topo.device.name, &s.cal) << "\n";
  // The bands kept on NCCL's allreduce: NCCL's algorithm there as the model sees it, advice only
  // (the tuner plugin applies measured choices alone: ciuic-tune nccl-axis on the GPUs).
  if (!s.CpuTopology()) AdviseNcclAxis(s.res.profile, s.topo);
  s.WriteProfileFile();
  s.Store(db, sr);
  return s.res;
}

void ShowStudies(const std::string& db_path, std::ostream& out) {
  if (!std::filesystem::exists(db_path))
    throw InputError(fmt::format("no database at '{}' (run ciuic-tune first)", db_path));
  Database db(db_path);
  out << fmt::format("# {:>4} {:<20} {:<10} {:<11} {:<8} {:>6} {:<8} {:>14}  {}\n", "id", "created", "topology",
                     "workload", "strategy", "trials", "status", "best_us/step", "best config");
  Statement q(db.handle(),
              "SELECT s.id, s.created, s.topology, s.workload, s.strategy, (SELECT COUNT(*) FROM trials t WHERE "
              "t.study_id = s.id), s.status, s.best_score_us, s.best_config FROM studies s ORDER BY s.id DESC");
  while (q.Step()) {
    out << fmt::format("  {:>4} {:<20} {:<10} {:<11} {:<8} {:>6} {:<8} {:>14.1f}  {}\n", q.ColumnInt(0),
                       q.ColumnText(1), q.ColumnText(2), q.ColumnText(3), q.ColumnText(4), q.ColumnInt(5),
                       q.ColumnText(6), q.ColumnDouble(7), q.ColumnText(8));
  }
  out << "# best per (topology, op, size band)\n";
  Statement b(db.handle(),
              "SELECT topology_fingerprint, op, min_bytes, max_bytes, config, predicted_us, study_id FROM "
              "best_configs ORDER BY topology_fingerprint, min_bytes");
  while (b.Step()) {
    out << fmt::format("  {} {} [{}, {}) {}  predicted {:.1f} us  (study {})\n", b.ColumnText(0), b.ColumnText(1),
                       b.ColumnInt(2), b.ColumnInt(3) ? std::to_string(b.ColumnInt(3)) : "inf", b.ColumnText(4),
                       b.ColumnDouble(5), b.ColumnInt(6));
  }
}

}  // namespace ciuic
