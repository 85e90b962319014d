// ciuic-bench compare as a CI gate and ciuic-bench plot: a real small run (local ranks) is the
// baseline; a copy with 25% longer times on some sizes (a 20% busbw drop) must fail the gate naming
// exactly those sizes, the unchanged run must pass, and bad inputs are one line and exit 1. The
// verdict rule against the noise band is checked on a recorded H100 run whose large rows have tight
// spreads. The plot test skips (77) where /usr/bin/python3 has no matplotlib.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <tuple>

#include "bench/compare.h"
#include "core/database.h"
#include "core/error.h"
#include "core/sizes.h"

namespace ciuic {
namespace {

namespace fs = std::filesystem;

struct Result {
  int code = -1;
  std::string out, err;
};

std::string Slurp(const fs::path& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

fs::path Dir() {
  static const fs::path dir = [] {
    const fs::path d = fs::temp_directory_path() / ("ciuic_compare_test_" + std::to_string(getpid()));
    fs::create_directories(d);
    return d;
  }();
  return dir;
}

Result Bench(const std::string& args) {
  const fs::path out = Dir() / "stdout", err = Dir() / "stderr";
  const std::string cmd = std::string(CIUIC_BENCH_EXE) + " " + args + " >" + out.string() + " 2>" + err.string();
  const int status = std::system(cmd.c_str());
  Result r;
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128;
  r.out = Slurp(out);
  r.err = Slurp(err);
  return r;
}

int Lines(const std::string& s) { return static_cast<int>(std::count(s.begin(), s.end(), '\n')); }

nlohmann::json ReadJson(const fs::path& p) { return nlohmann::json::parse(Slurp(p)); }
void WriteJson(const fs::path& p, const nlohmann::json& j) { std::ofstream(p) << j.dump(2); }

// B: every row of the given sizes 25% slower (times x1.25, bandwidths / 1.25), as a real regression
// would show; other rows unchanged.
nlohmann::json Slowed(nlohmann::json run, const std::set<uint64_t>& sizes) {
  for (auto& row : run["results"]) {
    if (!sizes.count(row["size_bytes"].get<uint64_t>()) || row["time_us"].is_null()) continue;
    for (const char* k : {"time_us", "time_p50_us", "time_p99_us", "time_min_us", "time_max_us", "time_stddev_us"})
      if (row.contains(k) && row[k].is_number()) row[k] = row[k].get<double>() * 1.25;
    for (const char* k : {"algbw_gbps", "busbw_gbps"})
      if (row[k].is_number()) row[k] = row[k].get<double>() / 1.25;
  }
  return run;
}

// One real small run of 2 local ranks, as JSON and as run 1 of a database.
class Compare : public testing::Test {
 protected:
  static void SetUpTestSuite() {
    fs::remove(Dir() / "runs.db");
    const Result r = Bench("allreduce --backend local --sizes 4K:256K:x4 --iters 20 --warmup 2 --format json --out " +
                           (Dir() / "a.json").string() + " --db " + (Dir() / "runs.db").string());
    ASSERT_EQ(r.code, 0) << r.err;
  }
  static void TearDownTestSuite() { fs::remove_all(Dir()); }
  static std::string A() { return (Dir() / "a.json").string(); }
  static std::string Db() { return (Dir() / "runs.db").string(); }
};

TEST(CompareRule, VerdictAgainstThresholdAndNoise) {
  EXPECT_EQ(JudgeRatio(1.0, 0.05, 0.0), CompareVerdict::kSame);
  EXPECT_EQ(JudgeRatio(1.05, 0.05, 0.0), CompareVerdict::kSame);
  EXPECT_EQ(JudgeRatio(1.06, 0.05, 0.0), CompareVerdict::kRegressed);
  EXPECT_EQ(JudgeRatio(1.25, 0.05, 0.10), CompareVerdict::kRegressed);
  EXPECT_EQ(JudgeRatio(1.25, 0.05, 0.30), CompareVerdict::kSlower);  // within the noise: reported, not failed
  EXPECT_EQ(JudgeRatio(0.90, 0.05, 0.0), CompareVerdict::kFaster);
  EXPECT_EQ(JudgeRatio(0.90, 0.05, 0.10), CompareVerdict::kSame);  // faster only beyond the noise
  // The margin is taken from B's side: 14x faster is faster even in rows whose noise passes 100%.
  EXPECT_EQ(JudgeRatio(0.068, 0.05, 2.86), CompareVerdict::kFaster);
  EXPECT_EQ(JudgeRatio(0.3, 0.05, 2.86), CompareVerdict::kSame);
  EXPECT_DOUBLE_EQ(ParsePercentOption("threshold", "5%"), 0.05);
  EXPECT_DOUBLE_EQ(ParsePercentOption("threshold", "12.5"), 0.125);
  EXPECT_THROW(ParsePercentOption("threshold", "5%%"), Error);
  EXPECT_THROW(ParsePercentOption("threshold", "-1"), Error);
  EXPECT_THROW(ParsePercentOption("threshold", ""), Error);
}

TEST_F(Compare, PlantedRegressionIsCaughtNamingItsSizes) {
  const fs::path b = Dir() / "b_slow.json";
  WriteJson(b, Slowed(ReadJson(A()), {16 << 10, 256 << 10}));
  // The threshold alone (--noise 0): a 2-core VM's p99 is far from its p50, which would hide it.
  const Result r = Bench("compare " + A() + " " + b.string() + " --noise 0");
  EXPECT_EQ(r.code, 3) << r.out << r.err;
  ASSERT_EQ(Lines(r.err), 1) << r.err;
  EXPECT_EQ(r.err,
            "ciuic-bench: compare: B regressed past 5.0% + noise at 16K (out-of-place), 16K (in-place), 256K "
            "(out-of-place), 256K (in-place)\n");
  EXPECT_NE(r.out.find("# 8 row(s): 0 faster, 4 same, 0 slower, 4 regressed"), std::string::npos) << r.out;
  // The same pair the other way round: B faster everywhere it changed, nothing regressed.
  const Result back = Bench("compare " + b.string() + " " + A() + " --noise 0 --format json");
  EXPECT_EQ(back.code, 0) << back.err;
  const auto j = nlohmann::json::parse(back.out);
  EXPECT_EQ(j["schema"], "ciuic.compare/1");
  EXPECT_EQ(j["summary"]["faster"], 4);
  EXPECT_EQ(j["summary"]["same"], 4);
  for (const auto& row : j["rows"]) {
    if (row["verdict"] == "faster") {
      EXPECT_NEAR(row["time_ratio"].get<double>(), 0.8, 1e-9);
    }
  }
}

TEST_F(Compare, UnchangedRunPasses) {
  for (const char* noise : {"", " --noise 0"}) {
    const Result r = Bench("compare " + A() + " " + A() + noise + " --format json");
    EXPECT_EQ(r.code, 0) << r.err;
    EXPECT_TRUE(r.err.empty()) << r.err;
    const auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["summary"]["rows"], 8);
    EXPECT_EQ(j["summary"]["same"], 8);
    for (const auto& row : j["rows"]) EXPECT_DOUBLE_EQ(row["time_ratio"].get<double>(), 1.0);
  }
}

// The verdict on rows with their own noise: a recorded H100 NCCL run (tests/data/results, from
// bench/results/2026-11-22-h100-nccl) whose 128M and 512M out-of-place rows have p99 within 2% of p50, and in-place
// rows that do not.
TEST_F(Compare, NoiseBandDecidesOnARecordedGpuRun) {
  const std::string a = CIUIC_SOURCE_DIR "/tests/data/results/h100-nccl-allreduce-fp32.json";
  const fs::path b = Dir() / "h100_slow.json";
  const std::set<uint64_t> planted = {128ull << 20, 512ull << 20};
  WriteJson(b, Slowed(ReadJson(a), planted));
  const Result r = Bench("compare " + a + " " + b.string() + " --format json");
  EXPECT_EQ(r.code, 3) << r.err;
  EXPECT_NE(r.err.find("at 128M (out-of-place), 512M (out-of-place)"), std::string::npos) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  int regressed = 0;
  for (const auto& row : j["rows"]) {
    const auto spread = [](const nlohmann::json& s) {
      return std::max(0.0, s["time_p99_us"].get<double>() / s["time_p50_us"].get<double>() - 1);
    };
    const double noise = std::max(spread(row["a"]), spread(row["b"]));
    const bool slowed = planted.count(row["size_bytes"].get<uint64_t>()) > 0;
    const std::string want = !slowed ? "same" : 0.25 > 0.05 + noise + 1e-9 ? "regressed" : "slower";
    EXPECT_EQ(row["verdict"], want) << row.dump();
    EXPECT_NEAR(row["noise"].get<double>(), noise, 1e-12);
    regressed += want == "regressed";
  }
  EXPECT_EQ(regressed, 2);
}

// Runs by id in the database ciuic-bench --db wrote: run 2 a copy of run 1, run 3 a copy with 64K
// 25% slower.
TEST_F(Compare, RunIdsInTheDatabase) {
  {
    Database db(Db());
    std::string cols;
    Statement info(db.handle(), "PRAGMA table_info(bench_rows)");
    while (info.Step()) {
      if (info.ColumnText(1) == "run_id") continue;
      if (!cols.empty()) cols += ", ";
      cols += info.ColumnText(1);
    }
    for (int copy = 2; copy <= 3; ++copy) {
      db.Exec(
          "INSERT INTO bench_runs(start_time, tool_version, git_commit, collective, backend, device, world_size, "
          "dtype, redop, codec, algo, hostnames, context_json, peak_busbw_gbps, total_wrong) SELECT start_time, "
          "tool_version, git_commit, collective, backend, device, world_size, dtype, redop, codec, algo, hostnames, "
          "context_json, peak_busbw_gbps, total_wrong FROM bench_runs WHERE id = 1");
      db.Exec("INSERT INTO bench_rows(run_id, " + cols + ") SELECT " + std::to_string(copy) + ", " + cols +
              " FROM bench_rows WHERE run_id = 1");
    }
    db.Exec(
        "UPDATE bench_rows SET time_us = time_us * 1.25, time_p50_us = time_p50_us * 1.25, time_p99_us = "
        "time_p99_us * 1.25, busbw_gbps = busbw_gbps / 1.25 WHERE run_id = 3 AND size_bytes = 65536");
  }
  const Result same = Bench("compare 1 2 --db " + Db());
  EXPECT_EQ(same.code, 0) << same.err;
  EXPECT_NE(same.out.find("# A: run 1 in "), std::string::npos) << same.out;
  EXPECT_NE(same.out.find("8 same, 0 slower, 0 regressed"), std::string::npos) << same.out;
  const Result slow = Bench("compare 1 3 --noise 0 --db " + Db());
  EXPECT_EQ(slow.code, 3) << slow.out;
  EXPECT_EQ(slow.err, "ciuic-bench: compare: B regressed past 5.0% + noise at 64K (out-of-place), 64K (in-place)\n");
  // A database run against a JSON file of the same run.
  const Result mixed = Bench("compare 1 " + A() + " --db " + Db());
  EXPECT_EQ(mixed.code, 0) << mixed.err;
}

// B is a gate: a row it could not time (failed, or no median) exits 3 naming the row, like a
// regression; the same row missing a time in A alone goes unjudged and the run passes.
TEST_F(Compare, ARowBCouldNotTimeFailsTheGate) {
  nlohmann::json failed = ReadJson(A()), empty = ReadJson(A());
  ASSERT_GE(failed["results"].size(), 2u);
  failed["results"][1]["error"] = "rank 1 died";
  failed["results"][1]["time_us"] = nullptr;
  WriteJson(Dir() / "failed.json", failed);
  for (const char* k : {"time_us", "time_p50_us"})
    if (empty["results"][0].contains(k)) empty["results"][0][k] = 0.0;
  WriteJson(Dir() / "zero.json", empty);
  const std::string d = Dir().string() + "/";
  const uint64_t failed_size = failed["results"][1]["size_bytes"].get<uint64_t>();
  const Result rf = Bench("compare " + A() + " " + d + "failed.json");
  EXPECT_EQ(rf.code, 3) << rf.err;
  EXPECT_EQ(Lines(rf.err), 1) << rf.err;
  EXPECT_NE(rf.err.find("B has no time at " + FormatSize(failed_size)), std::string::npos) << rf.err;
  EXPECT_NE(rf.err.find("failed"), std::string::npos) << rf.err;
  const Result rz = Bench("compare " + A() + " " + d + "zero.json");
  EXPECT_EQ(rz.code, 3) << rz.err;
  EXPECT_NE(rz.err.find("no median time"), std::string::npos) << rz.err;
  const Result ra = Bench("compare " + d + "failed.json " + A());  // failed in A only: unjudged, passes
  EXPECT_EQ(ra.code, 0) << ra.err;
  EXPECT_NE(ra.out.find("n/a (failed in A)"), std::string::npos) << ra.out;
}

TEST_F(Compare, BadInputIsOneLineAndExitOne) {
  nlohmann::json other = ReadJson(A());
  other["context"]["collective"] = "allgather";
  WriteJson(Dir() / "allgather.json", other);
  other = ReadJson(A());
  other["context"]["dtype"] = "bf16";
  WriteJson(Dir() / "bf16.json", other);
  other = ReadJson(A());
  for (auto& row : other["results"]) row["size_bytes"] = row["size_bytes"].get<uint64_t>() * 3;
  WriteJson(Dir() / "shifted.json", other);
  other = ReadJson(A());
  other["schema"] = "ciuic.bench/2";
  WriteJson(Dir() / "newer.json", other);
  const std::string d = Dir().string() + "/";
  const std::pair<std::string, std::string> cases[] = {
      {"compare " + A(), "needs two runs"},
      {"compare " + A() + " " + d + "missing.json", "cannot read run B"},
      {"compare " + A() + " " + d + "allgather.json", "A is allreduce and B is allgather: different collectives"},
      {"compare " + A() + " " + d + "bf16.json", "different dtypes"},
      {"compare " + A() + " " + d + "shifted.json", "share no size"},
      {"compare " + A() + " " + d + "newer.json", "'ciuic.bench/2' is newer than this build reads"},
      {"compare 1 99 --db " + Db(), "no run 99 (its runs: "},
      {"compare 1 2", "A '1': a run id needs --db FILE"},
      {"compare 1 2 --db " + d + "none.db", "none.db"},
      {"compare " + A() + " " + A() + " --threshold abc", "--threshold abc: use a percentage"},
      {"compare " + A() + " " + A() + " --threshold -5%", "--threshold -5%: must be in 0%..1000%"},
      {"compare " + A() + " " + A() + " --noise lots", "--noise lots"},
      {"compare " + A() + " " + A() + " --format xml", "--format xml"},
      {"compare " + A() + " " + A() + " extra", "unexpected argument 'extra'"},
  };
  for (const auto& [args, says] : cases) {
    const Result r = Bench(args);
    EXPECT_EQ(r.code, 1) << args << "\n" << r.err;
    EXPECT_EQ(Lines(r.err), 1) << args << "\n" << r.err;
    EXPECT_EQ(r.err.rfind("ciuic-bench: ", 0), 0u) << r.err;
    EXPECT_NE(r.err.find(says), std::string::npos) << args << "\n" << r.err;
    EXPECT_TRUE(r.out.empty()) << args << "\n" << r.out;
  }
}

// Text stored in a run (a commit, a host name) reaches the terminal on one line: control bytes (an
// escape sequence, a newline) as '?', in the header and in the file name shown.
TEST_F(Compare, StoredControlBytesNeverReachTheTerminal) {
  nlohmann::json b = ReadJson(A());
  b["context"]["git_commit"] = "abc\x1b[31mRED\nline2";
  const fs::path path = Dir() / "esc\x1b.json";
  WriteJson(path, b);
  const Result r = Bench("compare " + A() + " '" + path.string() + "'");
  EXPECT_EQ(r.out.find('\x1b'), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("commit abc?[31mRED?line2,"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("line2\n"), std::string::npos) << r.out;
}

bool HaveMatplotlib() { return std::system("/usr/bin/python3 -c 'import matplotlib' >/dev/null 2>&1") == 0; }

// ciuic-bench plot busbw on the run (as a JSON file and as a database run id): a PNG appears.
TEST_F(Compare, PlotBusbwWritesAPng) {
  if (!HaveMatplotlib()) GTEST_SKIP() << "/usr/bin/python3 cannot import matplotlib";
  const fs::path png = Dir() / "busbw.png";
  const Result r = Bench("plot busbw " + A() + " 1 --db " + Db() + " --out " + png.string());
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  const std::string bytes = Slurp(png);
  ASSERT_GT(bytes.size(), 10000u);
  EXPECT_EQ(bytes.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  const Result bad = Bench("plot busbw " + (Dir() / "missing.json").string() + " --out " + png.string());
  EXPECT_EQ(bad.code, 1);
  EXPECT_EQ(Lines(bad.err), 1) << bad.err;
}

// Run ids out of SQLite's range or by the billion, and a database edited by hand (values no ciuic tool
// writes): one line and exit 1, never a Python trace or a MemoryError; the database is left as it was.
TEST_F(Compare, PlotRefusesBadIdsAndHandEditedDatabasesInOneLine) {
  if (!HaveMatplotlib()) GTEST_SKIP() << "/usr/bin/python3 cannot import matplotlib";
  const fs::path png = Dir() / "bad.png";
  const std::vector<std::pair<std::string, std::string>> ids = {
      {"99999999999999999999", "use ids"},
      {"9223372036854775808", "an id is 1 to 9223372036854775807"},
      {"0", "an id is 1 to"},
      {"1-99999999999", "more than 1000 ids"},
  };
  for (const auto& [id, says] : ids) {
    const Result r = Bench("plot busbw " + id + " --db " + Db() + " --out " + png.string());
    EXPECT_EQ(r.code, 1) << id << "\n" << r.err;
    EXPECT_EQ(Lines(r.err), 1) << id << "\n" << r.err;
    EXPECT_NE(r.err.find(says), std::string::npos) << id << "\n" << r.err;
  }
  // A row a hand edit made impossible is named (it was dropped from the plot unseen); other stored
  // values no tool writes fail in one line too.
  const std::vector<std::pair<std::string, std::string>> edits = {
      {"UPDATE bench_rows SET size_bytes = -1", "run 1: row 1: size -1 is not a positive whole number of bytes"},
      {"UPDATE bench_rows SET time_us = -5 WHERE rowid = 2", "run 1: row 2 ("},
      {"UPDATE bench_rows SET busbw_gbps = 'fast'", "run 1: row 1 ("},
      {"UPDATE bench_runs SET context_json = '[]'", "holds values ciuic does not write"},
  };
  for (const auto& [sql, says] : edits) {
    const fs::path edited = Dir() / "edited.db";
    fs::copy_file(Db(), edited, fs::copy_options::overwrite_existing);
    ASSERT_EQ(std::system(("/usr/bin/python3 -c \"import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); "
                           "c.execute(sys.argv[2]); c.commit()\" " +
                           edited.string() + " \"" + sql + "\"")
                              .c_str()),
              0);
    const std::string before = Slurp(edited);
    const Result r = Bench("plot busbw 1 --db " + edited.string() + " --out " + png.string());
    EXPECT_EQ(r.code, 1) << sql << "\n" << r.err;
    EXPECT_EQ(Lines(r.err), 1) << sql << "\n" << r.err;
    EXPECT_NE(r.err.find(says), std::string::npos) << sql << "\n" << r.err;
    EXPECT_EQ(Slurp(edited), before) << sql;
  }
  // The same in a run's JSON: a negative time, a size that is not a whole number.
  const fs::path json = Dir() / "run.json";
  for (const auto& [field, value, says] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {"time_us", "-3.5", "row 1 (1024 B): time_us -3.5 is not a finite number >= 0"},
           {"size_bytes", "1.5", "row 1: size 1.5 is not a positive whole number of bytes"}}) {
    nlohmann::json run = {{"schema", "ciuic.bench/1"},
                          {"context",
                           {{"collective", "allreduce"},
                            {"backend", "mpi"},
                            {"algo", "-"},
                            {"codec", "none"},
                            {"dtype", "fp32"},
                            {"op", "sum"},
                            {"world_size", 2},
                            {"device", "cpu"},
                            {"git_commit", "x"},
                            {"start_time", "t"}}}};
    nlohmann::json row = {
        {"size_bytes", 1024}, {"inplace", false}, {"time_us", 2.0}, {"algbw_gbps", 0.5}, {"busbw_gbps", 0.5}};
    row[field] = nlohmann::json::parse(value);
    run["results"] = nlohmann::json::array({row});
    std::ofstream(json) << run.dump();
    const Result r = Bench("plot busbw " + json.string() + " --out " + png.string());
    EXPECT_EQ(r.code, 1) << field << "\n" << r.err;
    EXPECT_EQ(Lines(r.err), 1) << field << "\n" << r.err;
    EXPECT_NE(r.err.find(says), std::string::npos) << field << "\n" << r.err;
  }
}

}  // namespace
}  // namespace ciuic
