// ciuic-tune studies end to end on the model: the profile written and read back, every trial in
// SQLite, an interrupted study resuming from its trials, exports, and the sanity of the choices: over
// a very slow inter-node link a lossy codec that passed the gate wins for large buckets; over a very
// fast one no codec does.
#include <gtest/gtest.h>

#include "tests/tuner/replace_once.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>
#include <tuple>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "collectives/backends/local/communicator.h"
#include "collectives/crossover.h"
#include "collectives/runtime_rules.h"
#include "core/database.h"
#include "core/error.h"
#include "core/sizes.h"
#include "kernels/codec_spec.h"
#include "tests/tuner/gate_cache.h"
#include "tuner/calibrate.h"
#include "tuner/exports/exports.h"
#include "tuner/gate.h"
#include "tuner/plan_space.h"
#include "tuner/study.h"
#include "tuner/workload.h"

namespace ciuic {
namespace {

class Study : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("ciuic_study_" + std::to_string(getpid()));
    std::filesystem::create_directories(dir_);
    testing_gate_cache::Seed((dir_ / "tune.db").string());
  }
  void TearDown() override {
    testing_gate_cache::Keep((dir_ / "tune.db").string());
    std::filesystem::remove_all(dir_);
  }
  TuneOptions Options(const std::string& topology, int nodes) {
    TuneOptions o;
    o.topology = topology;
    o.nodes = nodes;
    o.budget = 60;
    o.db = (dir_ / "tune.db").string();  // shared: the gate runs once per test and is reused
    o.gate_seeds = 1;  // a third of the gate's cost; seed 1 alone gives every codec the 3-seed verdict
    o.out = (dir_ / (topology + ".profile.json")).string();
    o.accumulation = {1};  // priced and gated in its own test
    return o;
  }
  // A DGX A100 with its NICs replaced by `gbps` links.
  std::string WithNics(double gbps) {
    std::ifstream f(ProfilesDir() + "/topologies/dgx_a100.json");
    nlohmann::json j = nlohmann::json::parse(f);
    j["name"] = "link_" + std::to_string(static_cast<int>(gbps));
    j["nics"]["gbps"] = gbps;
    j["intra"]["bw_gbps_per_device"] = std::min(1e5, std::max(300.0, gbps / 8.0 * 2.0));
    const std::string path = (dir_ / (j["name"].get<std::string>() + ".json")).string();
    std::ofstream(path) << j.dump(2);
    return path;
  }
  std::filesystem::path dir_;
  std::ostringstream log_;
};

TEST_F(Study, WritesProfileAndTrialsAndResumesAnInterruptedStudy) {
  const TuneOptions o = Options("dgx_a100", 2);
  const TuneResult a = RunStudy(o, log_);
  EXPECT_EQ(a.evaluations, 60);
  const Profile p = LoadProfile(a.profile_path);
  EXPECT_EQ(p.topology, "dgx_a100");
  EXPECT_EQ(p.rules.size(), SizeBands().size());
  EXPECT_LE(p.step_us, p.baseline_step_us);
  for (uint64_t bytes : {uint64_t{1}, uint64_t{100000}, uint64_t{1} << 30}) EXPECT_NO_THROW(p.RuleFor(bytes));
  for (const auto& format : ExportFormats()) EXPECT_FALSE(ExportProfile(p, format).empty()) << format;
  EXPECT_THROW(ExportProfile(p, "xml"), UsageError);
  {
    Database db(o.db);
    Statement q(db.handle(), "SELECT COUNT(*) FROM trials WHERE study_id = ?");
    q.Bind(1, a.study_id);
    ASSERT_TRUE(q.Step());
    // The search's 60, then the lossless twins of a lossy best and the lossless search, one log line each.
    const std::string said = log_.str();
    int64_t after = 0;
    for (const char* kind : {"  a lossless twin of the best  ", "  lossless search  "})
      for (size_t at = said.find(kind); at != std::string::npos; at = said.find(kind, at + 1)) ++after;
    EXPECT_EQ(q.ColumnInt(0), 60 + after);
    // Interrupt it: the study is running again and lost its last 20 trials.
    db.Exec("UPDATE studies SET status = 'running'");
    db.Exec("DELETE FROM trials WHERE idx >= 40");
  }
  const TuneResult b = RunStudy(o, log_);
  EXPECT_EQ(b.study_id, a.study_id);
  EXPECT_EQ(b.reused, 40);
  EXPECT_EQ(LoadProfile(b.profile_path).step_us, p.step_us);
}

// Gradient accumulation: priced on the chosen step (backward plus 1/k of what syncing adds), gated
// per k with the step's codec, suggested only at a k the gate passed, and exported as a suggestion.
TEST_F(Study, AccumulationIsPricedGatedAndSuggestedOnlyWhereTheGatePassed) {
  TuneOptions o = Options(WithNics(1), 2);
  o.budget = 30;
  o.accumulation = {1, 2, 4};
  o.min_gain = 0.01;  // a compressed step over 1 Gbit/s: syncing half as often gains a few percent
  const Profile p = LoadProfile(RunStudy(o, log_).profile_path);
  const AccumulationAdvice& a = p.accumulation;
  ASSERT_EQ(a.candidates.size(), 3u);
  EXPECT_EQ(a.priced, "model");
  const double c1 = a.candidates[0].step_us, c2 = a.candidates[1].step_us, c4 = a.candidates[2].step_us;
  EXPECT_DOUBLE_EQ(c1, p.step_us) << "k = 1 is the profile's own step";
  EXPECT_GT(c1, c2);
  EXPECT_NEAR(c1 - c2, 2 * (c2 - c4), 1e-6 * c1) << "what syncing adds is paid once per k micro-batches";
  // The verdicts are the gate's, stored under the accumulation's own key.
  Database db(o.db);
  const auto stored = [&](int k) {
    GateOptions g;
    g.seeds = o.gate_seeds;
    g.tolerance = o.gate_tolerance;
    g.accumulation_steps = k;
    Statement q(db.handle(), "SELECT passed FROM gate_results WHERE codec = ? AND config = ?");
    q.Bind(1, a.codec).Bind(2, GateConfigKey(g));
    EXPECT_TRUE(q.Step()) << a.codec << " at " << k;
    return q.ColumnInt(0) != 0 ? std::string("passed") : std::string("failed");
  };
  EXPECT_EQ(a.candidates[1].gate, stored(2));
  EXPECT_EQ(a.candidates[2].gate, stored(4));
  const auto plant = [&](int k, bool passed) {
    GateOptions g;
    g.seeds = o.gate_seeds;
    g.tolerance = o.gate_tolerance;
    g.accumulation_steps = k;
    Statement(db.handle(), "UPDATE gate_results SET passed = ? WHERE codec = ? AND config = ?")
        .Bind(1, int64_t{passed})
        .Bind(2, a.codec)
        .Bind(3, GateConfigKey(g))
        .Step();
  };
  // Planted verdicts: only k = 2 passes, then both; a failed k is never suggested.
  const auto suggested = [&](bool two, bool four) {
    plant(2, two);
    plant(4, four);
    return LoadProfile(RunStudy(o, log_).profile_path);
  };
  EXPECT_EQ(suggested(false, false).accumulation.steps, 1);
  const Profile only2 = suggested(true, false);
  EXPECT_EQ(only2.accumulation.steps, 2);
  EXPECT_DOUBLE_EQ(only2.accumulation.Gain(),
                   only2.accumulation.candidates[0].step_us / only2.accumulation.candidates[1].step_us);
  const Profile both = suggested(true, true);
  EXPECT_EQ(both.accumulation.steps, 4);
  const std::string ds = ExportProfile(both, "deepspeed"), ddp = ExportProfile(both, "ddp");
  EXPECT_NE(ds.find("gradient_accumulation_steps: 4"), std::string::npos) << ds;
  EXPECT_EQ(nlohmann::json::parse(ds).count("gradient_accumulation_steps"), 0u) << "a suggestion, never a setting";
  EXPECT_NE(ddp.find("ciuic.torch.Accumulation(model, 4)"), std::string::npos) << ddp;
  const std::string none_ds = ExportProfile(suggested(false, false), "deepspeed");
  EXPECT_EQ(none_ds.find("gradient_accumulation"), std::string::npos) << none_ds;
  o.min_gain = 0.9;  // passed, but gaining less than --min-gain: no suggestion
  EXPECT_EQ(suggested(true, true).accumulation.steps, 1);
  // {1} prices nothing: no key in the profile.
  o.accumulation = {1};
  EXPECT_TRUE(LoadProfile(RunStudy(o, log_).profile_path).accumulation.Empty());
  o.accumulation = {2, 4};
  EXPECT_THROW(RunStudy(o, log_), UsageError);
}

// The accumulation key reads back as written, and a suggestion the gate did not pass, a list without
// k = 1 first, a repeated k or a suggestion outside the list is refused.
TEST(ProfileAccumulation, ReadsBackAndRefusesWhatTheTunerNeverWrites) {
  Profile p = LoadProfile(ProfilesDir() + "/dgx_a100.profile.json");
  p.accumulation.steps = 2;
  p.accumulation.codec = "int8";
  p.accumulation.priced = "measured";
  p.accumulation.candidates = {{1, 300.0, "passed"}, {2, 200.0, "passed"}, {4, 150.0, "failed"}};
  const std::string ok = ProfileToJson(p);
  const Profile back = ParseProfile(ok, "p.json");
  ASSERT_EQ(back.accumulation.candidates.size(), 3u);
  EXPECT_EQ(back.accumulation.steps, 2);
  EXPECT_EQ(back.accumulation.priced, "measured");
  EXPECT_EQ(back.accumulation.candidates[2].gate, "failed");
  EXPECT_DOUBLE_EQ(back.accumulation.Gain(), 1.5);
  EXPECT_EQ(ProfileToJson(back), ok);
  auto swap = [&](const std::string& from, const std::string& to) { return ReplaceOnce(ok, from, to); };
  const std::pair<std::string, std::string> bad[] = {
      {swap("\"suggested_steps\": 2", "\"suggested_steps\": 4"), "did not pass the accuracy gate"},
      {swap("\"suggested_steps\": 2", "\"suggested_steps\": 8"), "not one of the candidates"},
      {swap("\"suggested_steps\": 2", "\"suggested_steps\": 0"), "suggested_steps"},
      {swap("\"steps\": 1\n", "\"steps\": 3\n"), "the first candidate is k = 1"},
      {swap("\"steps\": 4\n", "\"steps\": 2\n"), "a second candidate for 2 steps"},
      {swap("\"priced\": \"measured\"", "\"priced\": \"guessed\""), "priced"},
      {swap("\"codec\": \"int8\",\n    \"priced\"", "\"extra\": 1, \"codec\": \"int8\",\n    \"priced\""), "extra"}};
  for (const auto& [text, why] : bad) {
    try {
      ParseProfile(text, "p.json");
      ADD_FAILURE() << "accepted: " << why;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
    }
  }
}

TEST_F(Study, AStateMemoryLimitKeepsErrorFeedbackCodecsOutEvenOverASlowLink) {
  const Workload w = LoadWorkload("gpt2_xl");
  const double params = static_cast<double>(w.parameters), mb = 1 << 20;
  EXPECT_DOUBLE_EQ(CommStateBytes({"none", 32 * mb, 1, "nccl"}, w, 8), 3 * 32 * mb);  // bucket + send + receive
  const double int8 = CommStateBytes({"int8", 32 * mb, 1, "ring"}, w, 8);
  EXPECT_GT(int8, 4 * params);
  EXPECT_LT(int8, 4 * params + 3 * 32 * mb);
  EXPECT_NEAR(CommStateBytes({"sign1", 32 * mb, 1, "ring"}, w, 8) - CommStateBytes({"sign1", 32 * mb, 1, "ring"}, w, 4),
              4 * params / 8 - 4 * params / 4, 1.0);  // sign2's server residual is 1/P of the gradients
  EXPECT_GT(CommStateBytes({"powersgd:4", 32 * mb, 1, "ring"}, w, 8), 8 * params);
  // Over a 1 Gb/s link a lossy codec wins (next test); with 1 GiB for the runtime's state none fits but
  // the uncompressed allreduce, and the trials say why.
  TuneOptions o = Options(WithNics(1.0), 4);
  o.state_memory_gib = 1;
  const TuneResult r = RunStudy(o, log_);
  for (const auto& rule : r.profile.rules) EXPECT_EQ(rule.codec, "none") << rule.min_bytes;
  Database db(o.db);
  Statement q(db.handle(), "SELECT COUNT(*) FROM trials WHERE study_id = ? AND status = 'over-memory'");
  q.Bind(1, r.study_id);
  ASSERT_TRUE(q.Step());
  EXPECT_GT(q.ColumnInt(0), 0);
  o.state_memory_gib = 1e-3;  // not even one bucket fits
  EXPECT_THROW(RunStudy(o, log_), InputError);
  o.state_memory_gib = -5;
  EXPECT_THROW(RunStudy(o, log_), UsageError);
}

// The slow half (a 1 Gb/s link: a gated lossy codec for large buckets) is in
// StudyRowsProfileAndEveryExportAgreeFieldByField, which checks that study's rows and exports too.
// A CPU cluster's links come from a calibration made under its launcher (calibrate --ranks 2,4 through
// scripts/cluster-lab.sh): the ring step of 2 ranks on one host gives the intra-host link, that of all 4
// ranks the inter-host one; the model then prices buckets at those rates.
TEST_F(Study, AClusterTopologyTakesItsLinksFromACalibrationUnderItsLauncher) {
  const std::string cal_db = (dir_ / "lab_cal.db").string();
  const double big = 64.0 * (1 << 20);
  LinkSamples s;
  s[{2, 4096}] = {5.0};
  s[{2, 64u << 20}] = {5.0 + big / 8e3};  // 8 GB/s within a host
  s[{4, 4096}] = {80.0};
  s[{4, 64u << 20}] = {80.0 + big / 10.0};  // 0.01 GB/s between hosts
  StoreLinkMedians(cal_db, s);
  TuneOptions o = Options("cluster_lab", 0);
  o.budget = 4;
  o.target = "nccl";
  o.calibration_db = cal_db;
  const TuneResult r = RunStudy(o, log_);
  const std::string log = log_.str();
  EXPECT_NE(log.find("links: calibrated in " + cal_db +
                     ": within a host 8.00 GB/s, 5.0 us; between hosts 0.010 GB/s "
                     "per host (0.08 Gb/s), 80.0 us"),
            std::string::npos)
      << log;
  // The band of 16M..256M, priced at 64M: the library's ring moves 2(n-1)/n of it through each host's
  // 0.01 GB/s egress: about 10 s, where the topology's own 1 Gb/s would give about 0.8 s.
  bool seen = false;
  for (const auto& rule : r.profile.rules) {
    if (rule.min_bytes != (16u << 20)) continue;
    seen = true;
    EXPECT_GT(rule.predicted_us, 5e6) << rule.algo;
  }
  EXPECT_TRUE(seen);
}

TEST_F(Study, FastLinksPickNoCodec) {
  const TuneResult fast = RunStudy(Options(WithNics(1e5), 4), log_);
  for (const auto& r : fast.profile.rules) EXPECT_EQ(r.codec, "none") << r.min_bytes;
}

TEST_F(Study, ReducedPrecisionIsGatedStoredAndExportedAsWhatFrameworksCallIt) {
  const TuneResult r = RunStudy(Options("dgx_a100", 2), log_);
  {
    Database db((dir_ / "tune.db").string());
    for (const char* name : {"none@bf16", "none@fp16"}) {
      Statement q(db.handle(), "SELECT passed, final_loss, baseline_loss FROM gate_results WHERE codec = ?");
      q.Bind(1, std::string(name));
      ASSERT_TRUE(q.Step()) << name << " has a stored gate verdict";
      // The 16-bit reduction really ran: its loss is not the fp32 run's to the last bit.
      EXPECT_NE(q.ColumnDouble(1), q.ColumnDouble(2)) << name;
    }
  }
  Profile p = r.profile;
  ASSERT_FALSE(p.rules.empty());
  ProfileRule& big = p.rules.back();
  big.algo = "nccl";
  big.codec = "none";
  big.precision = "bf16";
  EXPECT_NO_THROW(ParseProfile(ProfileToJson(p), "p.json"));
  Profile uniform = p;  // one choice in every band: PyTorch's own hook (bands that differ take ciuic's)
  for (auto& r : uniform.rules) r = big;
  EXPECT_NE(ExportProfile(uniform, "ddp").find("default_hooks.bf16_compress_hook"), std::string::npos);
  EXPECT_NE(ExportProfile(p, "ddp").find("ciuic.torch.comm_hook"), std::string::npos);
  // A bf16 reduction for a bf16 job is DeepSpeed's default: left alone; for an fp32 job it is written.
  EXPECT_EQ(ExportProfile(p, "deepspeed").find("communication_data_type\":"), std::string::npos);
  EXPECT_NE(ExportProfile(p, "deepspeed", ExportOptions{"fp32"}).find("\"communication_data_type\": \"bf16\""),
            std::string::npos);
  EXPECT_EQ(ExportProfile(p, "horovod").find("Compression.fp16"), std::string::npos) << "fp16 was not gated";
  EXPECT_NE(ExportProfile(p, "nccl-env").find("reduction in bf16: NCCL has no variable"), std::string::npos);
  big.precision = "fp16";
  for (auto& r : uniform.rules) r = big;
  EXPECT_NE(ExportProfile(uniform, "ddp").find("default_hooks.fp16_compress_hook"), std::string::npos);
  EXPECT_NE(ExportProfile(p, "deepspeed").find("\"communication_data_type\": \"fp16\""), std::string::npos);
  EXPECT_NE(ExportProfile(p, "horovod").find("compression=hvd.Compression.fp16"), std::string::npos);
  // A 16-bit precision belongs to the library's uncompressed allreduce only.
  big.algo = "ring";
  EXPECT_THROW(ParseProfile(ProfileToJson(p), "p.json"), InputError);
  big.algo = "nccl";
  big.codec = "int8";
  EXPECT_THROW(ParseProfile(ProfileToJson(p), "p.json"), InputError);
}

// A topology's name comes from its JSON file: it names the default profile only as one plain file
// name, and every output is checked before the first trial.
TEST_F(Study, OutputsAreCheckedBeforeTheStudyAndNamesNeverBecomePaths) {
  std::ifstream f(ProfilesDir() + "/topologies/dgx_a100.json");
  nlohmann::json j = nlohmann::json::parse(f);
  const std::string escape = "../../ciuic_escape_" + std::to_string(getpid());
  const auto escaped = std::filesystem::path(DefaultProfilesDir()) / (escape + ".profile.json");
  for (const std::string& name : std::vector<std::string>{escape, "../x", ".hidden", "a/b"}) {
    j["name"] = name;
    const std::string path = (dir_ / "evil.json").string();
    std::ofstream(path) << j.dump(2);
    TuneOptions o = Options("dgx_a100", 1);
    o.topology = path;
    o.out.clear();  // the default: the data folder's profiles/<name>.profile.json
    o.db = (dir_ / "evil.db").string();
    try {
      RunStudy(o, log_);
      ADD_FAILURE() << "accepted the name '" << name << "'";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("name '" + name + "' cannot be a file name"), std::string::npos) << e.what();
    }
    EXPECT_FALSE(std::filesystem::exists(o.db)) << "a study started before the name was checked";
  }
  EXPECT_FALSE(std::filesystem::exists(escaped));
  std::filesystem::remove(escaped);
  std::filesystem::remove(dir_ / "tune.db");  // the gate cache's seed (SetUp): a refused study must make none
  TuneOptions o = Options("dgx_a100", 1);
  o.out = "/proc/nonexistent/p.json";
  EXPECT_THROW(RunStudy(o, log_), InputError);
  o = Options("dgx_a100", 1);
  o.db = "/proc/ciuic_study.db";
  EXPECT_THROW(RunStudy(o, log_), InputError);
  EXPECT_FALSE(std::filesystem::exists(dir_ / "tune.db"));
}

TEST_F(Study, ProfilesAreReadStrictly) {
  const TuneResult a = RunStudy(Options("dgx_h100", 1), log_);
  std::ifstream f(a.profile_path);
  std::stringstream s;
  s << f.rdbuf();
  const std::string ok = s.str();
  EXPECT_NO_THROW(ParseProfile(ok, "p.json"));
  auto swap = [&](const std::string& from, const std::string& to) { return ReplaceOnce(ok, from, to); };
  for (const std::string& bad :
       {swap("ciuic.profile/1", "ciuic.profile/2"), swap("\"op\": \"allreduce\"", "\"op\": \"alltoall\""),
        swap("\"precision\": \"fp32\"", "\"precision\": \"fp64\""),
        swap("\"workload\":", "\"extra\": 1, \"workload\":"), std::string("{}"), std::string("")})
    EXPECT_THROW(ParseProfile(bad, "p.json"), InputError);
  EXPECT_THROW(RunStudy(
                   [&] {
                     auto o = Options("dgx_a100", 1);
                     o.mode = "measure";
                     return o;
                   }(),
                   log_),
               UsageError);
}

}  // namespace
}  // namespace ciuic

namespace ciuic {
namespace {

std::string FileBytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// A --calibration database made by an older ciuic is read as it is: its rows count (version 2 rows as
// size-free rates), and the file is not migrated, backed up or touched.
TEST_F(Study, AnOlderCalibrationDatabaseIsReadWithoutBeingMigrated) {
  const std::string db = (dir_ / "old_cal.db").string();
  {
    Database d(db);  // today's schema, turned back into version 2 with two calibration rows
    d.Exec(
        "DROP TABLE validations; DROP TABLE calibrations; ALTER TABLE studies DROP COLUMN constraints; "
        "ALTER TABLE trials DROP COLUMN reason; "
        "CREATE TABLE calibrations (id INTEGER PRIMARY KEY, created TEXT NOT NULL, device TEXT NOT NULL, "
        "kernel TEXT NOT NULL, codec TEXT NOT NULL, gbps REAL NOT NULL); "
        "INSERT INTO calibrations (created, device, kernel, codec, gbps) VALUES ('t', 'cuda:NVIDIA H100', 'encode', "
        "'int8', 400); "
        "INSERT INTO calibrations (created, device, kernel, codec, gbps) VALUES ('t', 'cpu:x', 'encode', 'int8', "
        "12.5); "
        "PRAGMA user_version=2; PRAGMA wal_checkpoint(TRUNCATE);");
  }
  const std::string before = FileBytes(db);
  const Calibration cpu = LoadCalibration(db, "cpu:x");
  ASSERT_TRUE(cpu.kernels.count({"encode", "int8"}));
  // 16 MiB at 12.5 GB/s: the one point a size-free row stands for.
  EXPECT_NEAR(cpu.KernelUs("encode", "int8", 16 << 20), (16.0 * (1 << 20)) / 12.5e3, 1e-6);
  const Calibration gpu = LoadGpuCalibrationFor(db, "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(gpu.device, "cuda:NVIDIA H100");
  EXPECT_TRUE(gpu.kernels.count({"encode", "int8"}));
  EXPECT_EQ(FileBytes(db), before);
  EXPECT_FALSE(std::filesystem::exists(db + ".v2.bak"));
  Database reopened(db, Database::Access::kReadOnly);
  EXPECT_EQ(reopened.SchemaVersion(), 2);
}

// The kernel sweep times its copies on threads at once (one per copy, a barrier before each call):
// small enough (one codec, one size) for the thread sanitizer stage, which runs it (scripts/test.sh).
TEST(KernelSweep, CopiesRunAtOnceAndEachSweepAddsOneSamplePerKernel) {
  CalibrateOptions c;
  c.sizes = {16384};
  c.concurrency = 3;
  KernelSamples samples;
  for (int sweep = 1; sweep <= 2; ++sweep) {
    SweepKernels(c, {"int8"}, &samples);
    const std::tuple<uint64_t, std::string, std::string> keys[] = {
        {16384, "none", "add"},    {16384, "int8", "encode"},     {16384, "int8", "encode_ef"},
        {16384, "int8", "decode"}, {16384, "int8", "decode_acc"}, {16384, "int8", "hop"}};
    EXPECT_EQ(samples.size(), std::size(keys));
    for (const auto& key : keys) {
      ASSERT_TRUE(samples.count(key)) << std::get<2>(key);
      const std::vector<double>& us = samples.at(key);
      ASSERT_EQ(us.size(), static_cast<size_t>(sweep)) << std::get<2>(key);
      EXPECT_GT(us.back(), 0.0) << std::get<2>(key);
      EXPECT_LT(us.back(), 1e6) << std::get<2>(key);  // a 16 KiB kernel, not a second
    }
  }
}

// The copies of a CPU kernel are timed at once, not one after another: every copy's index is called and
// all of them are inside their call together (each call holds 2 ms, so copies run in turn would never
// overlap); the time returned is a call's, not the round's sum.
TEST(KernelSweep, ConcurrentTimingRunsEveryCopyAtOnce) {
  constexpr int kCopies = 3;
  std::mutex m;
  std::set<int> seen;
  std::atomic<int> inside{0}, most{0};
  const double us = ConcurrentMedianUs(kCopies, [&](int copy) {
    {
      const std::lock_guard<std::mutex> lock(m);
      seen.insert(copy);
    }
    const int now = ++inside;
    int prev = most.load();
    while (now > prev && !most.compare_exchange_weak(prev, now)) {
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    --inside;
  });
  EXPECT_EQ(seen, (std::set<int>{0, 1, 2}));
  EXPECT_EQ(most.load(), kCopies);
  EXPECT_GE(us, 2000.0);
  EXPECT_LT(us, 3 * 2000.0);  // not three calls in turn
}

TEST_F(Study, CalibrateStoresKernelCurvesPerSizeAndAStudyWithoutALinkSaysSo) {
  const std::string db = (dir_ / "cal.db").string();
  std::ostringstream out;
  CalibrateOptions c;
  c.sizes = {64 * 1024, 256 * 1024};
  c.concurrency = 2;
  RunCalibration(db, c, out);
  // auto's crossover shares the table (ciuic-tune calibrate --ranks): never read as a model kernel.
  CrossoverPoint x;
  x.bytes = 4096;
  x.library_us = 2;
  x.us[AllReduceAlgo::kRing] = 3;
  StoreCrossoverPoints(db, CalibrationDevice(false), "mpi", 8, {x});
  const Calibration cal = LoadCalibration(db, CalibrationDevice(false));
  EXPECT_EQ(cal.concurrency, 2);
  for (const auto& [key, curve] : cal.kernels)
    EXPECT_EQ(key.first.rfind("crossover", 0), std::string::npos) << key.first;
  EXPECT_TRUE(cal.Has("int8"));
  for (const char* k : {"encode", "encode_ef", "decode", "decode_acc", "hop"}) {
    ASSERT_TRUE(cal.kernels.count({k, "int8"})) << k;
    EXPECT_EQ(cal.kernels.at({k, "int8"}).points().size(), 2u) << k;
    EXPECT_GT(cal.KernelUs(k, "int8", 256 * 1024), 0.0) << k;
  }
  EXPECT_GT(cal.KernelUs("add", "none", 64 * 1024), 0.0);
  EXPECT_FALSE(cal.kernels.count({"hop", "topk:0.01"}));  // no fused hop for sparse codecs
  {
    // Three rounds (the default), one stored value per point: their median.
    Database d(db);
    Statement q(d.handle(), "SELECT COUNT(*) FROM calibrations WHERE kernel = 'encode' AND codec = 'int8'");
    ASSERT_TRUE(q.Step());
    EXPECT_EQ(q.ColumnInt(0), 2);
    EXPECT_NE(out.str().find("median of 3 rounds"), std::string::npos) << out.str();
  }
  EXPECT_FALSE(cal.HasLink(2));
  // Without the link measured, a cpu_local study keeps the alpha-beta model and says how to calibrate.
  TuneOptions o = Options("cpu_local", 0);
  o.workload = "resnet50";
  o.budget = 10;
  o.db = db;
  std::ostringstream log;
  RunStudy(o, log);
  EXPECT_NE(log.str().find("ciuic-tune calibrate --ranks"), std::string::npos) << log.str();
  // Its codec kernels already cost what was measured here.
  EXPECT_NE(log.str().find("codec kernels as calibrated on cpu:"), std::string::npos) << log.str();
  c.sizes = {100};
  EXPECT_THROW(RunCalibration(db, c, out), UsageError);
  c.sizes = {};
  EXPECT_THROW(RunCalibration(db, c, out), UsageError);
  c.link_ranks = {1};
  EXPECT_THROW(RunCalibration(db, c, out), UsageError);
  c = CalibrateOptions{};
  c.sizes = {64 * 1024};
  c.rounds = 0;
  EXPECT_THROW(RunCalibration(db, c, out), UsageError);
}

// The training kernels' rows ("train:<kernel>:<cols>", fused and unfused, one copy): read into their own
// curves, never as codec kernels (a calibration of them alone leaves the codec model unset) and never
// as the codec kernels' concurrency; what calibrate's CLI times is every shipped transformer's shapes.
TEST_F(Study, CalibrateStoresTheTrainingKernelsApart) {
  const std::string db = (dir_ / "train.db").string();
  std::ostringstream out;
  CalibrateOptions c;
  c.train = {{"add-ln", 16, 96}, {"bias-gelu", 16, 384}, {"add-ln", 64, 96}};
  RunCalibration(db, c, out);
  EXPECT_NE(out.str().find("training kernels, one copy"), std::string::npos) << out.str();
  Calibration cal = LoadCalibration(db, CalibrationDevice(false));
  EXPECT_TRUE(cal.empty());  // no codec kernel, no link
  EXPECT_TRUE(cal.kernels.empty());
  ASSERT_EQ(cal.train.size(), 4u);
  EXPECT_EQ(cal.train.at({"train:add-ln:96", "fused"}).points().size(), 2u);
  EXPECT_EQ(cal.train.at({"train:bias-gelu:384", "unfused"}).points().size(), 1u);
  EXPECT_GT(cal.TrainUs("train:add-ln:96", "fused", 16 * 96 * 4), 0.0);
  EXPECT_EQ(cal.TrainUs("train:add-ln:96", "fused", 0), 0.0);
  EXPECT_EQ(cal.TrainUs("train:add-ln:97", "fused", 4096), 0.0);
  // Codec kernels at two copies, then the training kernels (one copy) stored after them.
  c.sizes = {64 * 1024};
  c.concurrency = 2;
  c.rounds = 1;
  RunCalibration(db, c, out);
  cal = LoadCalibration(db, CalibrationDevice(false));
  EXPECT_FALSE(cal.empty());
  EXPECT_EQ(cal.concurrency, 2);
  for (const auto& [key, curve] : cal.kernels) EXPECT_EQ(key.first.rfind("train:", 0), std::string::npos);
  // The shipped workloads with a transformer shape give each of their two shapes once.
  const std::vector<FusionShape> shipped = TransformerFusionShapes();
  size_t transformers = 0;
  for (const std::string& name : BuiltinWorkloads()) transformers += LoadWorkload(name).transformer.hidden > 0;
  EXPECT_GE(transformers, 3u);
  EXPECT_EQ(shipped.size(), 2 * transformers);
  for (const FusionShape& s : shipped) {
    EXPECT_TRUE(s.kernel == "add-ln" || s.kernel == "bias-gelu") << s.kernel;
    EXPECT_GT(s.rows * s.cols, 0u);
  }
}

// A calibration made on a GPU (calibrate --device cuda, rows copied here under that GPU's device
// name) is what a study of a topology with that GPU uses for its codec kernels, read from --db or
// from --calibration; a topology with another GPU keeps the bandwidth estimate.
TEST_F(Study, AGpuCalibrationDrivesTheCodecCostsOfItsTopology) {
  const std::string cal_db = (dir_ / "gpu.db").string();
  std::ostringstream out;
  CalibrateOptions c;
  c.sizes = {1 << 20, 4 << 20};
  c.concurrency = 1;
  RunCalibration(cal_db, c, out);
  {
    Database d(cal_db);
    d.Exec("UPDATE calibrations SET device = 'cuda:NVIDIA H100 80GB HBM3'");
  }
  EXPECT_TRUE(LoadGpuCalibrationFor(cal_db, "NVIDIA A100-SXM4-80GB").empty());
  const Calibration h100 = LoadGpuCalibrationFor(cal_db, "NVIDIA H100 80GB HBM3 (SXM5)");
  ASSERT_FALSE(h100.empty());
  EXPECT_TRUE(IsGpuCalibration(h100));
  EXPECT_TRUE(h100.Has("int8"));

  TuneOptions o = Options("dgx_h100", 0);
  o.workload = "resnet50";
  o.budget = 10;
  std::ostringstream plain, calibrated;
  const TuneResult a = RunStudy(o, plain);
  EXPECT_NE(plain.str().find("calibrate --device cuda"), std::string::npos) << plain.str();
  o.calibration_db = cal_db;
  const TuneResult b = RunStudy(o, calibrated);
  EXPECT_NE(calibrated.str().find("codec kernels as calibrated on cuda:NVIDIA H100 80GB HBM3"), std::string::npos)
      << calibrated.str();
  EXPECT_NE(a.study_id, b.study_id);  // a different model: never resumed from the other's trials
  EXPECT_EQ(b.reused, 0);
  o.topology = "dgx_a100";
  std::ostringstream other;
  RunStudy(o, other);
  EXPECT_NE(other.str().find("codecs at the topology's memory bandwidth"), std::string::npos) << other.str();
  o.calibration_db = (dir_ / "missing.db").string();
  EXPECT_THROW(RunStudy(o, other), InputError);
}

}  // namespace
}  // namespace ciuic

namespace ciuic {
namespace {

// --min-gain: a lossy codec that wins over a slow link is chosen while its predicted gain over the
// best lossless configuration reaches the threshold; above its gain the lossless one is, and the log
// says why each time.
TEST_F(Study, ALossyCodecMustBeatLosslessByTheMinimumGain) {
  TuneOptions o = Options(WithNics(1.0), 4);
  o.min_gain = 0;
  std::ostringstream bands;
  const TuneResult lossy = RunStudy(o, bands);
  EXPECT_NE(lossy.profile.RuleFor(uint64_t{1} << 30).codec, "none");
  // A band that stays lossless where lossy rules were allowed says what the best lossy one would cost.
  for (const auto& rule : lossy.profile.rules) {
    if (rule.codec != "none" || rule.precision != "fp32") continue;
    const std::string band = fmt::format("band [{}, {}): lossless ", FormatSize(rule.min_bytes),
                                         rule.max_bytes ? FormatSize(rule.max_bytes) : "inf");
    const size_t at = bands.str().find(band);
    ASSERT_NE(at, std::string::npos) << band << "\n" << bands.str();
    const std::string line = bands.str().substr(at, bands.str().find('\n', at) - at);
    EXPECT_NE(line.find(" beats the best lossy, "), std::string::npos) << line;
  }
  EXPECT_EQ(bands.str().find("bands: lossless only"), std::string::npos) << bands.str();
  o.min_gain = 0.999;  // no codec is 1000x faster
  std::ostringstream why;
  const TuneResult lossless = RunStudy(o, why);
  for (const auto& rule : lossless.profile.rules) {
    EXPECT_EQ(rule.codec, "none") << rule.min_bytes;
    EXPECT_EQ(rule.precision, "fp32") << rule.min_bytes;
  }
  EXPECT_NE(why.str().find("< --min-gain 100%, lossless chosen"), std::string::npos) << why.str();
  EXPECT_LE(lossy.profile.step_us, lossless.profile.step_us);
}

// A lossy best is weighed against a lossless configuration that no single change of bucket, algorithm
// or streams makes faster, however small the budget: 4 random trials seldom meet a good lossless one.
TEST_F(Study, ALossyBestIsWeighedAgainstALocallyBestLosslessConfiguration) {
  TuneOptions o = Options(WithNics(1.0), 4);
  o.budget = 4;
  o.strategy = "random";
  o.min_gain = 0;
  std::ostringstream log;
  const TuneResult r = RunStudy(o, log);
  const std::string said = log.str();
  const size_t at = said.find("step: lossy ");
  ASSERT_NE(at, std::string::npos) << said;
  const std::string line = said.substr(at, said.find('\n', at) - at);
  const size_t from = line.find(" than lossless ") + 15;
  const std::string lossless = line.substr(from, line.find(" at ", from) - from);
  // Here the search's and the twins' best lossless step is 12.6 s (the library's allreduce); the lossless
  // search finds hier, under 10 s.
  EXPECT_NE(said.find("  lossless search  " + lossless + "\n"), std::string::npos) << said;
  std::map<std::string, double> scores;
  {
    Database db(o.db);
    Statement q(db.handle(), "SELECT config, score_us FROM trials WHERE study_id = ?");
    q.Bind(1, r.study_id);
    while (q.Step())  // NULL: infeasible (over the memory budget, or no such plan)
      scores[q.ColumnText(0)] = q.ColumnIsNull(1) ? std::numeric_limits<double>::infinity() : q.ColumnDouble(1);
  }
  ASSERT_TRUE(scores.count(lossless)) << lossless;
  // Every neighbour along bucket, algorithm and streams was scored, and none is faster.
  const std::pair<std::string, std::vector<std::string>> dims[] = {
      {"bucket_mb", {"1", "2", "4", "8", "16", "25", "32", "64", "128", "256"}},
      {"algo", {"nccl", "ring", "rd", "hier"}},
      {"streams", {"1", "2", "4", "8"}}};
  int neighbours = 0;
  for (const auto& [key, values] : dims) {
    const size_t k = lossless.find(key + "=") + key.size() + 1;
    const size_t end = lossless.find(' ', k);
    for (const auto& v : values) {
      const std::string other = lossless.substr(0, k) + v + lossless.substr(end);
      if (other == lossless) continue;
      ASSERT_TRUE(scores.count(other)) << other << " (a neighbour of " << lossless << ") was never scored\n" << said;
      EXPECT_GE(scores[other], scores[lossless]) << other << " beats " << lossless;
      ++neighbours;
    }
  }
  EXPECT_EQ(neighbours, 9 + 3 + 3);
}

}  // namespace
}  // namespace ciuic

namespace ciuic {
namespace {

// Racks of two hosts behind a spine slower than a host's link: the study searches hier's depth, a
// large band groups the nodes as the racks do, and the runtime runs that rule at depth 3 (its group
// size reaches the algorithm). Four racks: on two, the model gives large messages to the library's
// tree, which crosses the spine once per direction as depth 3 does without its in-rack step.
TEST_F(Study, AThreeLevelTopologyGetsADepthThreeRuleThatTheRuntimeRunsAtDepthThree) {
  TuneOptions o = Options("cluster_lab_racks", 8);
  o.min_gain = 0.99;  // lossless only: the depth decides, not a codec
  const TuneResult r = RunStudy(o, log_);
  const Profile p = LoadProfile(r.profile_path);
  const ProfileRule& big = p.RuleFor(uint64_t{1} << 30);
  EXPECT_EQ(big.codec, "none");
  EXPECT_EQ(big.algo, "hier");
  EXPECT_EQ(big.hierarchy_depth, 3);
  EXPECT_EQ(big.nodes_per_group, 2);
  for (const auto& rule : p.rules) EXPECT_EQ(rule.nodes_per_group, rule.hierarchy_depth == 3 ? 2 : 0);
  const std::string said = log_.str();
  EXPECT_NE(said.find(" depth=3"), std::string::npos) << said;  // trials searched the axis
  // The rule as the runtime takes it, on 16 thread ranks as 8 nodes of 2 (the runtime's own tests
  // check the sums: tests/collectives/runtime_rules_test.cc).
  RunLocalRanks(16, [&](Communicator& c) {
    RuleRuntimeConfig cfg;
    cfg.profile = std::make_shared<Profile>(p);
    cfg.fixed.algo.ranks_per_node = 2;
    RuleRuntime rt(c, cfg);
    const size_t n = (size_t{1} << 30) / 4;
    const RuntimeConfig& run = rt.ConfigFor(n, DType::kFloat32);
    EXPECT_EQ(run.algo.algo, AllReduceAlgo::kHierarchical);
    EXPECT_EQ(run.algo.nodes_per_group, 2);
    EXPECT_NE(ConfigKey(run).find(" 2 nodes/group"), std::string::npos) << ConfigKey(run);
  });
}

// --target: the profile is the best one for that consumer, never a choice it cannot run.
TEST_F(Study, ATargetOnlyGetsWhatItsConsumerCanRun) {
  for (const std::string target : {"nccl", "horovod", "deepspeed", "ddp"}) {
    TuneOptions o = Options(WithNics(1.0), 4);
    o.target = target;
    o.min_gain = 0;
    const TuneResult r = RunStudy(o, log_);
    for (const auto& rule : r.profile.rules) {
      PlanChoice c{rule.codec, static_cast<double>(rule.bucket_bytes), rule.streams,
                   rule.algo == "sign2" || rule.algo == "sparse" || rule.algo == "powersgd" ? "ring" : rule.algo,
                   rule.precision};
      EXPECT_TRUE(TargetRuns(target, c)) << target << ": " << rule.min_bytes << " " << GateName(c) << " " << rule.algo;
    }
    if (target == "nccl") {
      EXPECT_EQ(r.profile.RuleFor(uint64_t{1} << 30).codec, "none");
    }
  }
  TuneOptions bad = Options(WithNics(1.0), 4);
  bad.target = "mxnet";
  EXPECT_THROW(RunStudy(bad, log_), UsageError);
}

}  // namespace
}  // namespace ciuic

namespace ciuic {
namespace {

// Exports say what they do: each choice a format cannot express is listed in the export itself (and
// returned for stderr / --strict), never dropped; a profile a format can express fully lists none.
TEST(Exports, WhatAFormatCannotExpressIsListedNotDropped) {
  // A fixture (profiles/dgx_a100.profile.json as the old gate shipped it): a bf16 band, sign1 above 256M.
  const Profile p = LoadProfile(CIUIC_SOURCE_DIR "/tests/data/profiles/dgx_a100_mixed.profile.json");
  for (const auto& format : ExportFormats()) {
    const auto lost = UnexpressedChoices(p, format);
    const std::string text = ExportProfile(p, format);
    if (format == "json") {
      EXPECT_TRUE(lost.empty());
      continue;
    }
    if (format == "ddp") {  // python/ciuic's hook applies every band per bucket: nothing is lost
      EXPECT_TRUE(lost.empty());
      EXPECT_NE(text.find("ciuic.torch.comm_hook(CIUIC_PROFILE, module=_ciuic_module)"), std::string::npos) << text;
      for (const auto& r : p.rules)
        EXPECT_NE(text.find(fmt::format("{} codec {} in {}", r.algo, r.codec, r.precision)), std::string::npos) << text;
      continue;
    }
    EXPECT_FALSE(lost.empty()) << format;
    for (const auto& l : lost) {
      // deepspeed's JSON escapes nothing in these lines; the others carry them as comments
      EXPECT_NE(text.find(l), std::string::npos) << format << ": " << l;
    }
    if (format != "nccl-tuner") {
      EXPECT_NE(std::find_if(lost.begin(), lost.end(),
                             [](const std::string& l) { return l.find("[16M, 256M)") != std::string::npos; }),
                lost.end())
          << format << ": the bf16 band must be listed";
    }
  }
  // A profile of NCCL's uncompressed allreduce in every band: every consumer expresses it.
  Profile plain = p;
  for (auto& r : plain.rules) {
    r.algo = "nccl";
    r.codec = "none";
    r.precision = "fp32";
  }
  for (const auto& format : ExportFormats()) EXPECT_TRUE(UnexpressedChoices(plain, format).empty()) << format;
}

}  // namespace
}  // namespace ciuic

namespace ciuic {
namespace {

// The value after "KEY=" in an export's text ("" when absent).
std::string ExportValue(const std::string& text, const std::string& key) {
  const size_t at = text.find(key + "=");
  if (at == std::string::npos) return "";
  const size_t from = at + key.size() + 1;
  return text.substr(from, text.find_first_of(" \n", from) - from);
}

bool Listed(const std::vector<std::string>& lost, const std::string& what) {
  return std::any_of(lost.begin(), lost.end(), [&](const std::string& l) { return l.find(what) != std::string::npos; });
}

// Every field of the profile each export carries, read back from the export text: what the consumer
// can express has the rule's value, and each band's choice it cannot express is listed as lost.
void ExpectExportAgrees(const Profile& p, const std::string& format) {
  SCOPED_TRACE(format);
  const std::string text = ExportProfile(p, format);
  const std::vector<std::string> lost = UnexpressedChoices(p, format);
  const ProfileRule& big = p.rules.back();
  const CodecKind k = ParseCodec(big.codec).kind;
  // A global-settings consumer loses every band whose choice differs from the largest band's.
  const auto bands_beside_largest_listed = [&] {
    for (const auto& r : p.rules) {
      if (&r == &big || (r.algo == big.algo && r.codec == big.codec && r.precision == big.precision)) continue;
      EXPECT_TRUE(Listed(lost, fmt::format("band [{}, {}): {} codec {} in {}", FormatSize(r.min_bytes),
                                           FormatSize(r.max_bytes), r.algo, r.codec, r.precision)))
          << r.min_bytes << "\n"
          << text;
    }
  };
  for (const auto& l : lost) EXPECT_NE(text.find(l), std::string::npos) << l;
  if (format == "json") {
    const Profile back = ParseProfile(text, "export.json");
    ASSERT_EQ(back.rules.size(), p.rules.size());
    for (size_t i = 0; i < p.rules.size(); ++i) {
      const ProfileRule &a = p.rules[i], &b = back.rules[i];
      EXPECT_EQ(std::tie(a.op, a.min_bytes, a.max_bytes, a.algo, a.codec, a.streams, a.bucket_bytes, a.hierarchy_depth,
                         a.precision, a.gate),
                std::tie(b.op, b.min_bytes, b.max_bytes, b.algo, b.codec, b.streams, b.bucket_bytes, b.hierarchy_depth,
                         b.precision, b.gate))
          << i;
      EXPECT_DOUBLE_EQ(a.predicted_us, b.predicted_us) << i;
      EXPECT_EQ(std::tie(a.nccl.algo, a.nccl.proto, a.nccl.channels, a.nccl.chunk_bytes, a.nccl.measured),
                std::tie(b.nccl.algo, b.nccl.proto, b.nccl.channels, b.nccl.chunk_bytes, b.nccl.measured))
          << i;
    }
    ASSERT_EQ(back.communicators.size(), p.communicators.size());
    for (size_t i = 0; i < p.communicators.size(); ++i) {
      EXPECT_EQ(back.communicators[i].ranks, p.communicators[i].ranks);
      EXPECT_EQ(back.communicators[i].rules.size(), p.communicators[i].rules.size());
    }
    EXPECT_TRUE(lost.empty());
  } else if (format == "nccl-env") {
    // A variable only where every band measured the same value with NCCL; none where a band keeps
    // NCCL's own choice, has only the model's advice, or is not NCCL's to run.
    auto common = [&](auto get) {
      std::string v;
      for (const auto& r : p.rules) {
        const std::string x = r.nccl.measured ? get(r.nccl) : "";
        if (x.empty() || (!v.empty() && x != v)) return std::string();
        v = x;
      }
      return v;
    };
    const std::string algo =
        common([](const NcclSettings& c) { return c.algo.empty() ? std::string() : NcclAlgoEnvName(c.algo); });
    const std::string proto =
        common([](const NcclSettings& c) { return c.proto.empty() ? std::string() : NcclProtoEnvName(c.proto); });
    const std::string ctas =
        common([](const NcclSettings& c) { return c.channels ? std::to_string(c.channels) : std::string(); });
    EXPECT_EQ(ExportValue(text, "export NCCL_ALGO"), algo) << text;
    EXPECT_EQ(ExportValue(text, "export NCCL_PROTO"), proto) << text;
    EXPECT_EQ(ExportValue(text, "export NCCL_MIN_CTAS"), ctas) << text;
    EXPECT_EQ(ExportValue(text, "export NCCL_MAX_CTAS"), ctas) << text;
    if (algo.empty() && proto.empty() && ctas.empty()) {
      EXPECT_EQ(text.find("\nexport "), std::string::npos) << text;  // no line sets a variable
    }
    for (const auto& r : p.rules) {
      const std::string band =
          fmt::format("band [{}, {})", FormatSize(r.min_bytes), r.max_bytes ? FormatSize(r.max_bytes) : "inf");
      const bool own = r.algo == "nccl" && r.codec == "none" && r.precision == "fp32";
      EXPECT_NE(text.find(fmt::format("{}: {} codec {} in {}: {}", band, r.algo, r.codec, r.precision,
                                      r.nccl.measured ? "NCCL " + DescribeNcclSettings(r.nccl)
                                      : own           ? std::string("NCCL's own allreduce, left alone")
                                                      : std::string("not NCCL's to run"))),
                std::string::npos)
          << band << "\n"
          << text;
      EXPECT_EQ(Listed(lost, band + ": codec " + r.codec), r.codec != "none") << band;
      EXPECT_EQ(Listed(lost, band + ": reduction in " + r.precision), r.precision != "fp32") << band;
      EXPECT_EQ(Listed(lost, band + ": algorithm " + r.algo), r.algo != "nccl") << band;
      const bool per_size =
          r.nccl.measured && ((!r.nccl.algo.empty() && algo.empty()) || (!r.nccl.proto.empty() && proto.empty()) ||
                              (r.nccl.channels && ctas.empty()) || r.nccl.chunk_bytes);
      EXPECT_EQ(Listed(lost, band + ": measured NCCL"), per_size) << band;
    }
    EXPECT_EQ(Listed(lost, "rules for communicators of"), !p.communicators.empty());
  } else if (format == "nccl-tuner") {
    EXPECT_NE(ExportValue(text, "CIUIC_PROFILE"), "");
    std::vector<std::pair<const std::vector<ProfileRule>*, std::string>> sets = {
        {&p.rules, fmt::format("communicators of {} ranks on {} node(s):", p.ranks, p.nodes)}};
    for (const auto& c : p.communicators)
      sets.emplace_back(&c.rules, fmt::format("communicators of {} ranks on {} node(s):", c.ranks, c.nodes));
    for (const auto& [rules, head] : sets) {
      const size_t at = text.find(head);
      ASSERT_NE(at, std::string::npos) << head << "\n" << text;
      for (const auto& r : *rules) {
        // Applied exactly where NCCL measured it, with the measured settings.
        const std::string says = r.nccl.measured ? "NCCL " + DescribeNcclSettings(r.nccl) : "left to NCCL";
        EXPECT_NE(
            text.find(fmt::format("{} [{}, {}) {}, codec {}, {} -> {}", r.op, FormatSize(r.min_bytes),
                                  r.max_bytes ? FormatSize(r.max_bytes) : "inf", r.algo, r.codec, r.precision, says),
                      at),
            std::string::npos)
            << r.min_bytes << "\n"
            << text;
      }
    }
    for (const auto& r : p.rules) {
      const bool more_than_nccl = r.codec != "none" || r.precision != "fp32" || r.algo != "nccl";
      EXPECT_EQ(Listed(lost, fmt::format("band [{}, {}): {} {} {}", FormatSize(r.min_bytes),
                                         r.max_bytes ? FormatSize(r.max_bytes) : "inf", r.algo, r.codec, r.precision)),
                more_than_nccl)
          << r.min_bytes;
    }
  } else if (format == "ddp") {
    const bool builtin =
        k == CodecKind::kNone || k == CodecKind::kFp16 || k == CodecKind::kBf16 || k == CodecKind::kPowerSgd;
    if (!builtin) {  // ciuic's hook: every band, per bucket
      EXPECT_NE(text.find("ciuic.torch.comm_hook(CIUIC_PROFILE"), std::string::npos);
      for (const auto& r : p.rules)
        EXPECT_NE(
            text.find(fmt::format("{} codec {} in {}, pieces of {} B", r.algo, r.codec, r.precision, r.bucket_bytes)),
            std::string::npos)
            << r.min_bytes;
    } else {
      EXPECT_EQ(ExportValue(text, "bucket_cap_mb").substr(0, ExportValue(text, "bucket_cap_mb").find(')')),
                std::to_string(std::max<uint64_t>(1, big.bucket_bytes >> 20)));
      const std::string hook = big.precision == "fp16" || (big.precision == "fp32" && k == CodecKind::kFp16)
                                   ? "default_hooks.fp16_compress_hook"
                               : big.precision == "bf16" || k == CodecKind::kBf16 ? "default_hooks.bf16_compress_hook"
                               : k == CodecKind::kPowerSgd
                                   ? fmt::format("matrix_approximation_rank={}", ParseCodec(big.codec).rank)
                                   : "DDP's default hook";
      EXPECT_NE(text.find(hook), std::string::npos) << hook << "\n" << text;
      bands_beside_largest_listed();
    }
  } else if (format == "deepspeed") {
    // The job's gradients are bf16 (the default): buckets in bf16 elements, no stage, no optimizer, a
    // data type only where the profile reduces in another 16-bit type.
    const nlohmann::json j = nlohmann::json::parse(text);
    EXPECT_FALSE(j["zero_optimization"].contains("stage")) << text;
    EXPECT_FALSE(j.contains("optimizer")) << text;
    EXPECT_EQ(j["zero_optimization"]["reduce_bucket_size"].get<uint64_t>(), big.bucket_bytes / 2);
    EXPECT_EQ(j["zero_optimization"]["allgather_bucket_size"].get<uint64_t>(), big.bucket_bytes / 2);
    const std::string reduced = big.precision != "fp32" ? big.precision
                                : k == CodecKind::kFp16 ? "fp16"
                                : k == CodecKind::kBf16 ? "bf16"
                                                        : "";
    EXPECT_EQ(j.contains("communication_data_type"), !reduced.empty() && reduced != "bf16") << text;
    if (j.contains("communication_data_type")) {
      EXPECT_EQ(j["communication_data_type"].get<std::string>(), reduced);
    }
    EXPECT_EQ(j.contains("_ciuic_suggest"), k == CodecKind::kInt4 || k == CodecKind::kSign1) << text;
    EXPECT_EQ(j.value("_ciuic_not_expressed", nlohmann::json::array()).size(), lost.size());
    const nlohmann::json f = nlohmann::json::parse(ExportProfile(p, format, ExportOptions{"fp32"}));
    EXPECT_EQ(f["zero_optimization"]["reduce_bucket_size"].get<uint64_t>(), big.bucket_bytes / 4);
    EXPECT_EQ(f.contains("communication_data_type"), !reduced.empty());
    bands_beside_largest_listed();
  } else if (format == "horovod") {
    EXPECT_EQ(ExportValue(text, "HOROVOD_FUSION_THRESHOLD"), std::to_string(big.bucket_bytes));
    EXPECT_EQ(text.find("export HOROVOD_CYCLE_TIME"), std::string::npos) << "no study timed it";
    EXPECT_EQ(ExportValue(text, "HOROVOD_HIERARCHICAL_ALLREDUCE"), big.hierarchy_depth > 1 ? "1" : "0");
    EXPECT_EQ(text.find("hvd.Compression.fp16") != std::string::npos,
              big.precision == "fp16" || (big.precision == "fp32" && k == CodecKind::kFp16));
    bands_beside_largest_listed();
  } else {
    ADD_FAILURE() << "a format this test does not know: add its fields here";
  }
}

// Study, profile and exports agree on every field: the study's stored best configurations (one row
// per band), the profile it wrote (read back from disk) and every export of it.
TEST_F(Study, StudyRowsProfileAndEveryExportAgreeFieldByField) {
  const TuneOptions o = Options(WithNics(1.0), 4);  // a slow link: a gated lossy codec for large buckets
  const TuneResult r = RunStudy(o, log_);
  const ProfileRule& big_slow = r.profile.RuleFor(uint64_t{1} << 30);
  EXPECT_NE(big_slow.codec, "none");
  EXPECT_EQ(big_slow.gate, "passed");
  const Profile p = LoadProfile(r.profile_path);
  ASSERT_EQ(p.rules.size(), r.profile.rules.size());
  EXPECT_EQ(p.study_id, r.study_id);
  bool lossy = false;
  Database db(o.db);
  Statement rows(db.handle(),
                 "SELECT op, min_bytes, max_bytes, config, predicted_us FROM best_configs WHERE "
                 "study_id = ? AND topology_fingerprint = ? ORDER BY min_bytes");
  rows.Bind(1, r.study_id).Bind(2, p.fingerprint);
  for (const ProfileRule& rule : p.rules) {
    SCOPED_TRACE(rule.min_bytes);
    lossy = lossy || rule.codec != "none";
    ASSERT_TRUE(rows.Step());
    EXPECT_EQ(rows.ColumnText(0), rule.op);
    EXPECT_EQ(static_cast<uint64_t>(rows.ColumnInt(1)), rule.min_bytes);
    EXPECT_EQ(static_cast<uint64_t>(rows.ColumnInt(2)), rule.max_bytes);
    EXPECT_EQ(rows.ColumnText(3), fmt::format("algo={} codec={} precision={} streams={} bucket={}", rule.algo,
                                              rule.codec, rule.precision, rule.streams, rule.bucket_bytes));
    EXPECT_DOUBLE_EQ(rows.ColumnDouble(4), rule.predicted_us);
  }
  EXPECT_FALSE(rows.Step()) << "a stored band the profile lacks";
  EXPECT_TRUE(lossy) << "the slow link should make some band lossy";
  Statement study(db.handle(), "SELECT best_score_us, topology_fingerprint FROM studies WHERE id = ?");
  study.Bind(1, r.study_id);
  ASSERT_TRUE(study.Step());
  EXPECT_DOUBLE_EQ(study.ColumnDouble(0), p.step_us);
  EXPECT_EQ(study.ColumnText(1), p.fingerprint);
  for (const auto& format : ExportFormats()) ExpectExportAgrees(p, format);
  // The shipped profiles and a mixed fixture (bf16 band, sign1 above 256M) too.
  // NCCL's own settings measured per band (and a tensor-parallel communicator's rules) in fixtures:
  // there is no GPU here to measure them.
  for (const char* file :
       {"/profiles/dgx_a100.profile.json", "/profiles/dgx_h100.profile.json",
        "/tests/data/profiles/dgx_a100_mixed.profile.json", "/tests/data/profiles/dgx_h100_nccl_measured.profile.json",
        "/tests/data/profiles/dgx_h100_nccl_ring_everywhere.profile.json"}) {
    SCOPED_TRACE(file);
    const Profile shipped = LoadProfile(std::string(CIUIC_SOURCE_DIR) + file);
    for (const auto& format : ExportFormats()) ExpectExportAgrees(shipped, format);
  }
}

}  // namespace
}  // namespace ciuic
