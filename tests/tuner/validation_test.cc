// Every value read is validated, with one message format naming the JSON path or the option:
// profiles, topologies and workloads refused with "ORIGIN: PATH: PROBLEM" (never the JSON library's
// text); ciuic-tune's bad option values with "--OPTION VALUE: PROBLEM", exit 1, one line. And
// resume: cpu_local's fingerprint does not move with its live memcpy measurement, so an interrupted
// study resumes; a measurement whose ciuic-bench died is a failed trial with its reason, the study
// going on.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "collectives/profile.h"
#include "core/database.h"
#include "core/error.h"
#include "tests/tuner/gate_cache.h"
#include "tuner/bench_runner.h"
#include "tuner/study.h"
#include "tuner/topology.h"
#include "tuner/workload.h"

namespace ciuic {
namespace {

using nlohmann::json;

std::string Slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// The InputError message `parse` throws ("" when it does not throw).
template <class F>
std::string Refusal(F parse) {
  try {
    parse();
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

json Builtin(const std::string& rel) { return json::parse(Slurp(ProfilesDir() + "/" + rel)); }

struct JsonCase {
  const char* name;
  void (*edit)(json&);
  const char* message;  // the whole message after "ORIGIN: "
};

TEST(Validation, ProfileValuesAreRefusedWithTheirJsonPath) {
  const json good = Builtin("dgx_h100.profile.json");
  ASSERT_NO_THROW(ParseProfile(good.dump(), "p.json"));
  const JsonCase cases[] = {
      {"negative bucket", [](json& j) { j["rules"][2]["bucket_bytes"] = -5; },
       "profile.rules[2].bucket_bytes: -5 is not a positive size"},
      {"huge bucket", [](json& j) { j["rules"][4]["bucket_bytes"] = uint64_t{1} << 50; },
       "profile.rules[4].bucket_bytes: 1125899906842624 is above the largest allowed size, "
       "1099511627776 (1T)"},
      {"tiny bucket", [](json& j) { j["rules"][0]["bucket_bytes"] = 1; },
       "profile.rules[0].bucket_bytes: 1 is below the smallest allowed size, 4096 (4K)"},
      {"float streams", [](json& j) { j["rules"][1]["streams"] = 2.5; },
       "profile.rules[1].streams: 2.5 is not a whole number"},
      {"streams range", [](json& j) { j["rules"][1]["streams"] = 65; }, "profile.rules[1].streams: 65 is not in 1..64"},
      {"string streams", [](json& j) { j["rules"][1]["streams"] = "4"; },
       "profile.rules[1].streams: \"4\" is a string, not a whole number"},
      {"overlapping bands", [](json& j) { j["rules"][2]["min_bytes"] = 512 * 1024; },
       "profile.rules[2]: band [524288, 16777216) overlaps profile.rules[1]'s [65536, 1048576)"},
      {"duplicate band", [](json& j) { j["rules"].push_back(j["rules"][0]); },
       "profile.rules[5]: band [0, 65536) overlaps profile.rules[0]'s [0, 65536)"},
      {"missing field", [](json& j) { j["rules"][0].erase("gate"); }, "profile.rules[0].gate: required but missing"},
      {"missing section", [](json& j) { j.erase("topology"); }, "profile.topology: required but missing"},
      {"unknown key", [](json& j) { j["rules"][3]["speed"] = 1; },
       "profile.rules[3].speed: unknown key (known: op min_bytes max_bytes algo codec streams "
       "bucket_bytes "
       "hierarchy_depth nodes_per_group precision predicted_us measured_us baseline_us gate nccl)"},
      {"negative nodes", [](json& j) { j["topology"]["nodes"] = -1; },
       "profile.topology.nodes: -1 is not in 1..100000"},
      {"ranks not per node", [](json& j) { j["topology"]["ranks"] = 15; },
       "profile.topology.ranks: 15 ranks do not divide into 2 nodes"},
      {"bad enum", [](json& j) { j["rules"][0]["gate"] = "maybe"; },
       "profile.rules[0].gate: \"maybe\" is not one of passed failed n/a"},
      {"bad codec", [](json& j) { j["rules"][0]["codec"] = "int9"; },
       "profile.rules[0].codec: unknown codec 'int9' (known: none fp16 bf16 fp8e4m3 fp8e5m2 int8 "
       "int4 sign1 "
       "topk:RATIO randomk:RATIO powersgd:RANK)"},
      {"negative time", [](json& j) { j["rules"][0]["predicted_us"] = -3; },
       "profile.rules[0].predicted_us: -3 is not in 0..1000000000000"},
      {"negative band edge", [](json& j) { j["rules"][0]["min_bytes"] = -1; },
       "profile.rules[0].min_bytes: -1 is not a size (a byte count >= 0)"},
      {"rules not a list", [](json& j) { j["rules"] = json::object(); },
       "profile.rules: {} is an object, not an array"},
      {"no rules", [](json& j) { j["rules"] = json::array(); }, "profile.rules: a profile needs at least one rule"},
      {"depth without hier", [](json& j) { j["rules"][0]["hierarchy_depth"] = 2; },
       "profile.rules[0].hierarchy_depth: 2 does not fit algo nccl (depth 2 or 3 is hier's, 1 "
       "every other's)"},
      {"newer schema", [](json& j) { j["schema"] = "ciuic.profile/2"; },
       "profile.schema: \"ciuic.profile/2\" is newer than this build reads (ciuic.profile/1)"},
      {"seed negative", [](json& j) { j["provenance"]["seed"] = -1; },
       "profile.provenance.seed: -1 is not in 0..18446744073709551615"},
  };
  for (const auto& c : cases) {
    json j = good;
    c.edit(j);
    EXPECT_EQ(Refusal([&] { ParseProfile(j.dump(), "p.json"); }), std::string("p.json: ") + c.message) << c.name;
  }
  // Not JSON at all: where, never the library's text.
  EXPECT_EQ(Refusal([&] { ParseProfile("{\"schema\": ", "p.json"); }),
            "p.json: not valid JSON (syntax error at byte 12)");
  EXPECT_EQ(Refusal([&] { ParseProfile("", "p.json"); }), "p.json: not valid JSON (the file is empty)");
  EXPECT_EQ(Refusal([&] { ParseProfile("[1]", "p.json"); }), "p.json: profile: [1] is an array, not an object");
}

TEST(Validation, TopologyValuesAreRefusedWithTheirJsonPath) {
  const json good = Builtin("topologies/dgx_h100.json");
  ASSERT_NO_THROW(ParseTopology(good.dump(), "t.json"));
  const JsonCase cases[] = {
      {"float nodes", [](json& j) { j["nodes"] = 1.5; }, "topology.nodes: 1.5 is not a whole number"},
      {"huge nodes", [](json& j) { j["nodes"] = 100000000; }, "topology.nodes: 100000000 is not in 1..100000"},
      {"missing nic field", [](json& j) { j["nics"].erase("gbps"); }, "topology.nics.gbps: required but missing"},
      {"bad fabric", [](json& j) { j["intra"]["fabric"] = "warp"; },
       "topology.intra.fabric: \"warp\" is not one of nvswitch nvlink pcie shm"},
      {"bool as number", [](json& j) { j["intra"]["nvls"] = 1; },
       "topology.intra.nvls: 1 is a number, not true or false"},
      {"negative bandwidth", [](json& j) { j["device"]["memory_bw_gbps"] = -5; },
       "topology.device.memory_bw_gbps: -5 is not in 0.001..1000000"},
      {"empty source", [](json& j) { j["sources"]["intra.latency_us"] = ""; },
       "topology.sources[\"intra.latency_us\"]: an empty string is not allowed here"},
      {"no source", [](json& j) { j["sources"].erase("intra.latency_us"); },
       "topology.sources: no source for 'intra.latency_us' (add it to \"sources\")"},
      {"nodes without nics",
       [](json& j) {
         j["nodes"] = 2;
         j["nics"]["count"] = 0;
       },
       "topology.nics.count: 0 NICs cannot connect 2 nodes"},
  };
  for (const auto& c : cases) {
    json j = good;
    c.edit(j);
    EXPECT_EQ(Refusal([&] { ParseTopology(j.dump(), "t.json"); }), std::string("t.json: ") + c.message) << c.name;
  }
  EXPECT_THROW(LoadTopology("dgx_h100", 100000000), UsageError);
}

TEST(Validation, WorkloadValuesAreRefusedWithTheirJsonPath) {
  const json good = Builtin("workloads/resnet50.json");
  ASSERT_NO_THROW(ParseWorkload(good.dump(), "w.json"));
  const JsonCase cases[] = {
      {"negative dimension", [](json& j) { j["tensors"][3]["shape"][0] = -2; },
       "workload.tensors[3].shape[0]: -2 is not in 1..10000000000000"},
      {"float dimension", [](json& j) { j["tensors"][3]["shape"][0] = 2.5; },
       "workload.tensors[3].shape[0]: 2.5 is not a whole number"},
      {"string flops", [](json& j) { j["tensors"][5]["forward_flops"] = "x"; },
       "workload.tensors[5].forward_flops: \"x\" is a string, not a number"},
      {"missing name", [](json& j) { j["tensors"][2].erase("name"); },
       "workload.tensors[2].name: required but missing"},
      {"zero batch", [](json& j) { j["default_batch_per_device"] = 0; },
       "workload.default_batch_per_device: 0 is not in 1..1048576"},
      {"wrong total", [](json& j) { j["parameters"] = 5; },
       "workload.parameters: 5 but the tensors hold 25557032 parameters"},
      {"unknown tensor key", [](json& j) { j["tensors"][0]["dtype"] = "fp16"; },
       "workload.tensors[0].dtype: unknown key (known: name shape forward_flops)"},
      {"no tensors", [](json& j) { j["tensors"] = json::array(); },
       "workload.tensors: a workload needs at least one tensor"},
      {"order", [](json& j) { j["order"] = "forward"; }, "workload.order: \"forward\" is not one of backward"},
  };
  for (const auto& c : cases) {
    json j = good;
    c.edit(j);
    EXPECT_EQ(Refusal([&] { ParseWorkload(j.dump(), "w.json"); }), std::string("w.json: ") + c.message) << c.name;
  }
}

TEST(Validation, CpuLocalFingerprintIsStableAndLeavesOutLiveMeasurements) {
  const Topology a = LoadTopology("cpu_local"), b = LoadTopology("cpu_local");
  EXPECT_EQ(a.Fingerprint(), b.Fingerprint());
  Topology faster = a;
  faster.device.memory_bw_gbps *= 3;  // a live figure: the same machine
  faster.intra.bw_gbps *= 3;
  EXPECT_EQ(faster.Fingerprint(), a.Fingerprint());
  Topology bigger = a;
  bigger.devices_per_node += 1;  // another machine
  EXPECT_NE(bigger.Fingerprint(), a.Fingerprint());
  Topology renamed = a;
  renamed.device.name += " (other)";
  EXPECT_NE(renamed.Fingerprint(), a.Fingerprint());
  // A file's figures define its topology: they stay in.
  Topology file = LoadTopology("dgx_a100");
  const std::string before = file.Fingerprint();
  file.intra.bw_gbps *= 2;
  EXPECT_NE(file.Fingerprint(), before);
  // The shipped profiles carry their topology's fingerprint.
  EXPECT_EQ(LoadProfile(ProfilesDir() + "/dgx_a100.profile.json").fingerprint,
            LoadTopology("dgx_a100", 1).Fingerprint());
  EXPECT_EQ(LoadProfile(ProfilesDir() + "/dgx_h100.profile.json").fingerprint,
            LoadTopology("dgx_h100", 2).Fingerprint());
}

class Resume : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("ciuic_resume_" + std::to_string(getpid()));
    std::filesystem::create_directories(dir_);
    testing_gate_cache::Seed((dir_ / "tune.db").string());
  }
  void TearDown() override {
    testing_gate_cache::Keep((dir_ / "tune.db").string());
    unsetenv("CIUIC_BENCH_EXE");
    std::filesystem::remove_all(dir_);
  }
  TuneOptions Options() {
    TuneOptions o;
    o.topology = "cpu_local";
    o.workload = "resnet50";
    o.strategy = "random";
    o.budget = 10;
    o.seed = 5;
    o.db = (dir_ / "tune.db").string();
    o.gate_seeds = 1;
    o.out = (dir_ / "cpu_local.profile.json").string();
    return o;
  }
  int64_t Count(const std::string& where, int64_t study) {
    Database db(Options().db);
    Statement q(db.handle(), "SELECT COUNT(*) FROM trials WHERE study_id = ? AND " + where);
    q.Bind(1, study);
    EXPECT_TRUE(q.Step());
    return q.ColumnInt(0);
  }
  // A stand-in ciuic-bench (a shell script: kFakeBenchArgs, then what it writes to $out for $size),
  // used by --mode measure once UseFakeBench() is called.
  static constexpr const char* kFakeBenchArgs = R"(#!/bin/sh
out=""; size=""; prev=""
for a in "$@"; do
  [ "$prev" = "--out" ] && out="$a"
  [ "$prev" = "--sizes" ] && size="$a"
  prev="$a"
done)";
  std::string FakeBench() const { return (dir_ / "fake-bench").string(); }
  void UseFakeBench() const {
    chmod(FakeBench().c_str(), 0755);
    setenv("CIUIC_BENCH_EXE", FakeBench().c_str(), 1);
  }
  std::filesystem::path dir_;
  std::ostringstream log_;
};

// The study a crash leaves behind (status 'running', its last trials never stored) is resumed by
// the same command: the same study id, its stored trials reused, the rest appended after them.
TEST_F(Resume, AnInterruptedCpuLocalStudyResumes) {
  const TuneResult a = RunStudy(Options(), log_);
  EXPECT_EQ(a.evaluations, 10);
  const int64_t stored = Count("1", a.study_id);  // the search's 10, and any lossless twins of the best
  EXPECT_GE(stored, 10);
  {
    Database db(Options().db);
    db.Exec("UPDATE studies SET status = 'running'");
    db.Exec("DELETE FROM trials WHERE idx >= 6");
  }
  std::ostringstream again;
  const TuneResult b = RunStudy(Options(), again);
  EXPECT_EQ(b.study_id, a.study_id) << again.str();
  EXPECT_EQ(b.reused, 6);
  EXPECT_NE(again.str().find(fmt::format("study {}: resuming, 6 trial(s) stored", a.study_id)), std::string::npos)
      << again.str();
  EXPECT_EQ(Count("1", a.study_id), stored);  // the rest appended again, none written over a stored one
  Database db(Options().db);
  Statement s(db.handle(), "SELECT status FROM studies WHERE id = ?");
  s.Bind(1, a.study_id);
  ASSERT_TRUE(s.Step());
  EXPECT_EQ(s.ColumnText(0), "done");
}

// --mode measure with a ciuic-bench that dies (SIGKILL) for one setting: those trials are stored as
// failed with the reason, the others measured, the study finishes.
TEST_F(Resume, AMeasurementWhoseBenchDiedIsAFailedTrialAndTheStudyGoesOn) {
  std::ofstream(FakeBench()) << kFakeBenchArgs << R"(
case " $* " in *" --streams 2 "*) echo "rank 1 killed" >&2; kill -9 $$ ;; esac
printf '{"results": [{"size_bytes": %s, "time_p50_us": 100}]}' "$size" > "$out"
)";
  UseFakeBench();
  TuneOptions o = Options();
  o.mode = "measure";
  o.budget = 40;  // random: every streams value is drawn
  const TuneResult r = RunStudy(o, log_);
  const int64_t failed =
      Count("status = 'failed' AND reason LIKE '%--streams 2: killed by signal 9 (Killed)%'", r.study_id);
  EXPECT_GT(failed, 0) << log_.str();
  EXPECT_EQ(Count("status = 'failed'", r.study_id), failed);
  EXPECT_EQ(Count("status = 'infeasible' AND config LIKE '%streams=2%'", r.study_id), 0);
  EXPECT_GT(Count("status = 'ok'", r.study_id), 0);
  EXPECT_NE(log_.str().find("stored as a failed trial; the study goes on"), std::string::npos) << log_.str();
  EXPECT_EQ(DescribeExit(9), "killed by signal 9 (Killed)");
  EXPECT_EQ(DescribeExit(2 << 8), "exit 2");
}

// --mode measure bands: the choice and the baseline are timed again in turn, five pairs below 256 MiB
// and one above, and the band keeps the pair whose speed-up is the median of the pairs'. The fake
// ciuic-bench at 4 MiB: the baseline (a whole-message library call) takes 90 us first, then 30, 100,
// 70, 90 and 110 in the five pairs; every other choice 35 first, then 200, 50, 45, 60 and 40. The open
// band is timed at 256 MiB (resnet50's gradients, 97 MiB, are smaller than its 1 GiB), where a choice is
// faster (50 us) only in its first run.
TEST_F(Resume, ABandKeepsItsMedianPairOfTimings) {
  std::ofstream(FakeBench()) << kFakeBenchArgs << R"(
key=$(echo "$*" | sed 's/--out .*//' | cksum | cut -d' ' -f1)
n=$(cat "$(dirname "$0")/calls.$key" 2>/dev/null || echo 0); n=$((n + 1)); echo $n > "$(dirname "$0")/calls.$key"
t=100
case " $* " in
  *" --iters 5 "*) ;;
  *" --sizes 4194304 "*" --bucket 4194304 --algo native --format "*)
    case $n in 1) t=90 ;; 2) t=30 ;; 3) t=100 ;; 4) t=70 ;; 5) t=90 ;; *) t=110 ;; esac ;;
  *" --sizes 4194304 "*)
    case $n in 1) t=35 ;; 2) t=200 ;; 3) t=50 ;; 4) t=45 ;; 5) t=60 ;; *) t=40 ;; esac ;;
  *" --sizes 268435456 "*" --bucket 26214400 --algo native --format "*) ;;
  *" --sizes 268435456 "*) [ $n -eq 1 ] && t=50 ;;
esac
printf '{"results": [{"size_bytes": %s, "time_p50_us": %s}]}' "$size" "$t" > "$out"
)";
  UseFakeBench();
  TuneOptions o = Options();
  o.mode = "measure";
  o.budget = 4;
  const TuneResult r = RunStudy(o, log_);
  const std::string said = log_.str();
  const ProfileRule& mid = r.profile.RuleFor(uint64_t{4} << 20);
  // Five pairs at 4 MiB, the choice against the baseline: 200/30, 50/100, 45/70, 60/90, 40/110 us. The
  // median speed-up is the third pair's, 1.56x. The first timings (35/90), the first or the last pair,
  // each side's median (50/90) or mean (79/80) would each keep other times.
  EXPECT_DOUBLE_EQ(mid.measured_us, 45) << said;
  EXPECT_DOUBLE_EQ(mid.baseline_us, 70) << said;
  EXPECT_FALSE(mid.algo == "nccl" && mid.bucket_bytes >= (uint64_t{4} << 20)) << "the baseline kept";
  EXPECT_NE(said.find("band [1M, 16M): pair 1/5: "), std::string::npos) << said;
  EXPECT_NE(said.find(" 200.0 us, the baseline 30.0 us (0.15x)\n"), std::string::npos) << said;
  EXPECT_NE(said.find("band [1M, 16M): pair 5/5: "), std::string::npos) << said;
  EXPECT_NE(said.find("band [1M, 16M): the median pair of 5 timed: 3\n"), std::string::npos) << said;
  // From 256 MiB up one pair: the choice's 100 us against the baseline's 100, the baseline kept.
  EXPECT_NE(said.find("band [256M, inf) at 256M: "), std::string::npos) << said;
  EXPECT_NE(said.find("band [256M, inf): timed again: "), std::string::npos) << said;
  EXPECT_EQ(said.find("band [256M, inf): pair"), std::string::npos) << said;
  const ProfileRule& big = r.profile.RuleFor(uint64_t{1} << 30);
  EXPECT_EQ(big.algo, "nccl");
  EXPECT_EQ(big.bucket_bytes, uint64_t{25} << 20);
  EXPECT_DOUBLE_EQ(big.measured_us, 100);
  EXPECT_DOUBLE_EQ(big.baseline_us, 100);
}

// ciuic-tune: a bad option value is one line naming the option and the value, exit 1.
int RunTuneStderr(const std::string& args, std::string* err) {
  const std::string base = ::testing::TempDir() + "/ciuic_tune_v" + std::to_string(getpid());
  const int status = std::system((std::string(CIUIC_TUNE_EXE) + " " + args + " >/dev/null 2>" + base + "_err").c_str());
  *err = Slurp(base + "_err");
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

TEST(Validation, TuneOptionValuesAreOneLineNamingTheOption) {
  const std::string db = " --db " + ::testing::TempDir() + "/ciuic_tune_v.db";
  const std::pair<std::string, std::string> cases[] = {
      {"--topology dgx_a100 --nodes 100000000", "--nodes 100000000: must be in 1..100000"},
      {"--topology dgx_a100 --nodes -1", "--nodes -1: must be in 1..100000"},
      {"--topology dgx_a100 --nodes abc", "--nodes abc: not a number"},
      {"--topology dgx_a100 --budget 0", "--budget 0: must be in 1..1000000"},
      {"--topology dgx_a100 --patience -1", "--patience -1: must be in 0..1000000"},
      {"--topology dgx_a100 --strategy anneal", "--strategy anneal: use grid, random, cd or bayes"},
      {"--topology dgx_a100 --mode guess", "--mode guess: use model or measure"},
      {"--topology dgx_a100 --gate-tolerance 2", "--gate-tolerance 2: must be in 0..1"},
      {"--topology dgx_a100 --state-memory -1", "--state-memory -1: must be in 0..1000000"},
      {"--topology dgx_a100 --seed -1", "--seed -1: out of range for this option"},
      {"validate --max-error -1" + db, "--max-error -1: must be in 0..100"},
      {"validate --repeat 0" + db, "--repeat 0: must be in 1..20"},
      {"validate --ranks 1" + db, "--ranks 1: must be in 2..4096"},
      {"validate --ranks 2,x" + db, "--ranks 2,x: a comma list of whole numbers"},
      {"validate --codecs int8,int9" + db, "--codecs int8,int9: unknown codec 'int9'"},
      {"validate --kernel-sizes 1X" + db, "--kernel-sizes 1X: bad size '1X'"},
      {"validate --kernels maybe" + db, "--kernels maybe: use timed or stored"},
      {"calibrate --rounds 0" + db, "--rounds 0: must be in 1..99"},
      {"gate --codecs int8,int9", "--codecs int8,int9: unknown codec 'int9'"},
      {"gate --codecs sign1@bf16", "--codecs sign1@bf16: only codec none takes @PRECISION"},
      {"gate --codecs none@fp8", "--codecs none@fp8: reduction precision 'fp8': use none@bf16 or none@fp16"},
      {"gate --gate-seeds 0", "--gate-seeds 0: must be in 1..20"},
      {"gate --format csv", "--format csv: use text or json"},
      {"--topology dgx_a100 --gate-seeds 21", "--gate-seeds 21: must be in 1..20"},
      {"--topology dgx_a100 --band-candidates 0", "--band-candidates 0: must be in 1..16"},
      {"--topology dgx_a100 --band-candidates x", "--band-candidates x: not a number"},
      {"calibrate --concurrency -1" + db, "--concurrency -1: must be in 0..4096"},
      {"calibrate --device tpu" + db, "--device tpu: use cpu or cuda"},
      {"model --topology dgx_a100 --sizes 0", "--sizes 0: bad size '0': must be positive"},
      {"export --profile " + ProfilesDir() + "/dgx_a100.profile.json --format xml",
       "--format xml: use json, nccl-env, nccl-tuner, ddp, deepspeed or horovod"},
      {"export --profile " + ProfilesDir() + "/dgx_a100.profile.json --format deepspeed --grad-dtype int8",
       "--grad-dtype int8: use fp32, fp16 or bf16"},
      {"export --profile " + ProfilesDir() + "/dgx_a100.profile.json --format horovod --grad-dtype fp16",
       "--grad-dtype applies to --format deepspeed"},
      {"run --topology cpu_local --transport gloo", "--transport applies to --mode measure"},
      {"run --topology cpu_local --mode measure --transport tcp", "--transport tcp: use mpi or gloo"},
      {"model --topology dgx_a100 --no-such", "--no-such: unknown option"},
      {"model --topology", "--topology: needs a value"},
      // A list with an empty item names its option.
      {"calibrate --ranks 2,,3" + db, "--ranks 2,,3: an empty item in a comma list"},
      {"calibrate --ranks 2," + db, "--ranks 2,: an empty item in a comma list"},
      {"validate --ranks ''" + db, "--ranks '': an empty list"},
      {"validate --codecs ,int8" + db, "--codecs ,int8: an empty item in a comma list"},
      // An option of another subcommand is refused, not ignored.
      {"show --budget -5" + db, "--budget is not an option of 'show' (its options: --db)"},
      {"show --nodes 0" + db, "--nodes is not an option of 'show'"},
      {"model --topology dgx_a100 --strategy foo", "--strategy is not an option of 'model'"},
      {"model --topology dgx_a100 --workload nonexistent", "--workload is not an option of 'model'"},
      {"model --topology dgx_a100 --ranks 1", "--ranks is not an option of 'model'"},
      {"export --profile " + ProfilesDir() + "/dgx_a100.profile.json --device quantum",
       "--device is not an option of 'export'"},
      {"calibrate --codecs int9" + db, "--codecs is not an option of 'calibrate'"},
      {"--topology dgx_a100 --published x.json", "--published is not an option of 'run'"},
  };
  for (const auto& [args, message] : cases) {
    std::string err;
    EXPECT_EQ(RunTuneStderr(args, &err), 1) << args << ": " << err;
    EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << args << ": " << err;
    EXPECT_EQ(err.rfind("ciuic-tune: " + message, 0), 0u) << args << ": " << err;
  }
  // A missing profile field is one line with its path, exit 1 (it was "internal error", exit 2).
  json p = Builtin("dgx_a100.profile.json");
  p["rules"][1].erase("streams");
  const std::string path = ::testing::TempDir() + "/ciuic_missing.profile.json";
  std::ofstream(path) << p.dump();
  std::string err;
  EXPECT_EQ(RunTuneStderr("export --profile " + path, &err), 1) << err;
  EXPECT_EQ(err, "ciuic-tune: " + path + ": profile.rules[1].streams: required but missing\n");
}

// A refused option creates no database and overwrites no file: every option is checked before --db is
// opened, an empty path is never "not given", and no output may be another output or an input.
TEST(Validation, TuneRefusedOptionsWriteNothing) {
  const std::string dir = ::testing::TempDir() + "/ciuic_tune_nothing" + std::to_string(getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string topology = dir + "/t.json", db = dir + "/t.db";
  std::filesystem::copy_file(ProfilesDir() + "/topologies/dgx_a100.json", topology);
  const std::string original = Slurp(topology);
  const std::pair<std::string, std::string> cases[] = {
      {"validate --ranks 1 --db " + db, "--ranks 1: must be in 2..4096"},
      {"validate --codecs int9 --db " + db, "--codecs int9: unknown codec 'int9'"},
      {"validate --max-error -1 --db " + db, "--max-error -1: must be in 0..100"},
      {"calibrate --ranks 2,,3 --db " + db, "--ranks 2,,3: an empty item in a comma list"},
      {"run --topology dgx_a100 --db " + db + " --out ''", "--out '': an empty path"},
      {"run --topology dgx_a100 --db ''", "--db '': an empty path"},
      {"run --topology dgx_a100 --db " + db + " --calibration ''", "--calibration '': an empty path"},
      {"run --topology dgx_a100 --db " + db + " --out " + db,
       "--out '" + db + "' and --db '" + db + "' name the same file"},
      {"run --topology " + topology + " --db " + db + " --out " + topology,
       "--topology '" + topology + "' and --out '" + topology + "' name the same file"},
      {"run --topology " + topology + " --db " + topology + " --out " + dir + "/p.json",
       "--topology '" + topology + "' and --db '" + topology + "' name the same file"},
  };
  for (const auto& [args, message] : cases) {
    std::string err;
    EXPECT_EQ(RunTuneStderr(args, &err), 1) << args << ": " << err;
    EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << args << ": " << err;
    EXPECT_EQ(err.rfind("ciuic-tune: " + message, 0), 0u) << args << ": " << err;
    EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir), {}), 1) << args;
    EXPECT_EQ(Slurp(topology), original) << args;
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace ciuic
