// nccl-tests' and OSU's habits (issue 15, item 5): their short flags parse to exactly what our long
// options do; -d all / -o all sweep every combination, and every output carries each row's dtype and
// op; a flag that disagrees with its long option, and the letters the two tools use differently, are
// refused in one line; rows carry the time spread (min <= p50 <= max) and a --baseline's share.
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "bench/baseline.h"
#include "bench/cli.h"
#include "core/dtype.h"
#include "core/error.h"

namespace ciuic {
namespace {

std::vector<std::string> Words(const std::string& s) {
  std::istringstream in(s);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

ParsedSweep Parse(const std::string& args) { return ParseBenchCommandLine(Words("allreduce --backend local " + args)); }

void ExpectSame(const std::string& short_flags, const std::string& long_options) {
  SCOPED_TRACE(short_flags + "  vs  " + long_options);
  const ParsedSweep a = Parse(short_flags), b = Parse(long_options);
  EXPECT_EQ(a.sizes, b.sizes);
  EXPECT_EQ(a.dtypes, b.dtypes);
  EXPECT_EQ(a.ops, b.ops);
  EXPECT_EQ(a.iters, b.iters);
  EXPECT_EQ(a.warmup, b.warmup);
  EXPECT_EQ(a.check, b.check);
  EXPECT_EQ(a.average, b.average);
  EXPECT_EQ(a.ranks, b.ranks);
}

// Each command line refused as a usage error whose one line names `message`.
template <size_t N>
void ExpectRefused(const std::pair<const char*, const char*> (&cases)[N]) {
  for (const auto& [args, message] : cases) {
    try {
      Parse(args);
      ADD_FAILURE() << args << ": accepted";
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << args << ": " << e.what();
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
    } catch (const std::exception& e) {
      ADD_FAILURE() << args << ": not a usage error: " << e.what();
    }
  }
}

TEST(NcclFlags, ShortFlagsParseToWhatTheLongOptionsDo) {
  ExpectSame("-b 8 -e 128M -f 2", "--sizes 8:128M:x2");
  ExpectSame("-b 1M -e 3M", "--sizes 1M:3M:+1M");  // nccl-tests' default step: 1M
  ExpectSame("-b 1K -e 9K --stepbytes 2K", "--sizes 1K:9K:+2K");
  ExpectSame("-e 64M -f 2", "--sizes 32M:64M");  // nccl-tests' default bounds: 32M
  ExpectSame("-b 8 -e 1G -f 4", "--sizes 8:1G:x4");
  ExpectSame("-n 7 -w 3 -c 2", "--iters 7 --warmup 3 --check 2");
  ExpectSame("-a 0", "--average rank0");
  ExpectSame("-a 1", "--average avg");
  ExpectSame("-a 2", "--average min");
  ExpectSame("-a 3", "--average max");
  ExpectSame("-o max -d half", "--op max --dtype fp16");
  ExpectSame("-g 4", "--ranks 4");
  ExpectSame("-g 1", "");  // one GPU per rank, nccl-tests' default: fixes no rank count
  // OSU
  ExpectSame("-m 8:1K", "--sizes 8:1K:x2");
  ExpectSame("-m 1K", "--sizes 4:1K");  // from one fp32 element
  ExpectSame("-m 64 -T mpi_char", "--sizes 1:64 --dtype int8");
  ExpectSame("-i 9 -x 4 -T mpi_int", "--iters 9 --warmup 4 --dtype int32");
  ExpectSame("-T mpi_float", "--dtype fp32");
  ExpectSame("-T MPI_DOUBLE", "--dtype fp64");
  // A short flag beside its long option is accepted when they agree.
  ExpectSame("--iters 5 -n 5 -i 5", "--iters 5");
  ExpectSame("--dtype fp16 -d half", "--dtype fp16");
  ExpectSame("--sizes 1K:4K:x2 -b 1K -e 4K -f 2", "--sizes 1K:4K");
  EXPECT_EQ(Parse("-z 0").blocking, 0);
  EXPECT_EQ(Parse("-z 3").blocking, 3);
  EXPECT_EQ(Parse("").blocking, -1);
}

TEST(NcclFlags, NcclTestsDatatypeNamesAreAccepted) {
  const std::map<std::string, std::string> names = {{"float", "fp32"},  {"half", "fp16"},      {"bfloat16", "bf16"},
                                                    {"double", "fp64"}, {"int8", "int8"},      {"uint8", "uint8"},
                                                    {"int32", "int32"}, {"int64", "int64"},    {"char", "int8"},
                                                    {"int", "int32"},   {"f8e4m3", "fp8e4m3"}, {"f8e5m2", "fp8e5m2"}};
  for (const auto& [nccl, ours] : names) EXPECT_EQ(Parse("-d " + nccl).dtypes, std::vector<std::string>{ours}) << nccl;
}

TEST(NcclFlags, AllSweepsEveryDtypeAndOp) {
  const ParsedSweep p = Parse("-d all -o all");
  std::vector<std::string> every;
  for (DType t : AllDTypes()) every.push_back(DTypeName(t));
  EXPECT_EQ(p.dtypes, every);
  EXPECT_EQ(p.ops, (std::vector<std::string>{"sum", "prod", "max", "min", "avg"}));  // nccl-tests' order
  EXPECT_EQ(Parse("--dtype all --op all").dtypes, every);
  EXPECT_EQ(Parse("-T all").dtypes, (std::vector<std::string>{"int8", "int32", "fp32"}));  // OSU's three
  EXPECT_EQ(Parse("-d int32,half -o max,sum").dtypes, (std::vector<std::string>{"int32", "fp16"}));
  EXPECT_EQ(Parse("-d int32,half -o max,sum").ops, (std::vector<std::string>{"max", "sum"}));
}

// Each refusal is one UsageError naming the flags; the tool prints it as its one line, exit 1.
TEST(NcclFlags, ClashesAndBadValuesAreRefused) {
  const std::pair<const char*, const char*> cases[] = {
      {"--iters 5 -n 6", "--iters 5 and -n 6 disagree"},
      {"-n 5 -i 6", "-n 5 and -i 6 disagree"},
      {"--warmup 1 -w 2", "--warmup 1 and -w 2 disagree"},
      {"-w 1 -x 2", "-w 1 and -x 2 disagree"},
      {"--check 1 -c 0", "--check 1 and -c 0 disagree"},
      {"--dtype fp16 -d float", "--dtype fp16 and -d float disagree"},
      {"-d float -T mpi_int", "-d float and -T mpi_int disagree"},
      {"--op sum -o max", "--op sum and -o max disagree"},
      {"--average max -a 1", "--average max and -a 1 disagree"},
      {"--ranks 2 -g 4", "--ranks 2 and -g 4 disagree"},
      {"--sizes 1K:8K -b 1K -e 4K", "--sizes 1K:8K and -b 1K -e 4K disagree"},
      {"-b 8 -e 1K -m 8:1K", "-m 8:1K: -m is OSU's message sizes here"},
      {"-b 8 -e 1K -i 100", "-i 100: beside -b/-e/-f it is ambiguous"},
      {"-i 1M", "-i 1M: -i is OSU's iteration count here; nccl-tests' step bytes: --stepbytes 1M"},
      {"-T 60", "-T 60: -T is OSU's datatype here; nccl-tests' timeout is --timeout 60"},
      {"-T mpi_complex", "-T mpi_complex: unknown OSU datatype"},
      {"-f 2 --stepbytes 1K", "-f and --stepbytes"},
      {"-b 1K -e 8 -f 2", "-b 1K -e 8 -f 2: "},
      {"-d uint32", "-d uint32: unknown dtype 'uint32'"},
      {"-d float,float", "-d float,float: 'float' is given twice"},
      {"-o mulsum", "-o mulsum: unknown reduction op"},
      {"-a 4", "-a 4: use 0 (rank 0)"},
      {"-z 4", "-z 4: must be in 0..3"},
      {"-n 0", "-n 0: must be in 1..10000000"},
      {"-n ten", "-n ten: not a whole number"},
      {"-g 0", "-g 0: must be in 1..4096"},
      {"-m 1K:", "-m 1K:: use -m MIN:MAX or -m MAX"},
      {"-m 2", "-m 2: bad size range '4:2:x2'"},  // OSU's -m MAX below one fp32 element
      {"--baseline nope", "--baseline nope: no such baseline (available: dgx_a100, dgx_h100, dgx_h100_ring;"},
  };
  ExpectRefused(cases);
  EXPECT_THROW(ParseBenchCommandLine(Words("allgather --backend local --baseline dgx_a100")), UsageError);
  EXPECT_THROW(ParseBenchCommandLine(Words("allreduce --backend ciuic --transport local -d all")), UsageError);
  EXPECT_THROW(ParseBenchCommandLine(Words("allreduce --backend ciuic --transport local -o all")), UsageError);
}

TEST(NcclFlags, ShippedBaselinesNameTheirSources) {
  const auto names = BaselineNames();
  EXPECT_EQ(names, (std::vector<std::string>{"dgx_a100", "dgx_h100", "dgx_h100_ring"}));
  for (const auto& n : names) {
    const Baseline b = LoadBaseline(n);
    EXPECT_EQ(b.name, n);
    EXPECT_EQ(b.collective, "allreduce");
    EXPECT_EQ(b.ranks, 8);
    ASSERT_FALSE(b.points.empty());
    for (const auto& p : b.points) {
      EXPECT_EQ(p.source.rfind("https://", 0), 0u) << n;
      EXPECT_GT(p.busbw_gbps, 100) << n;
      EXPECT_EQ(b.BusbwAt(p.bytes), p.busbw_gbps);
    }
    EXPECT_EQ(b.BusbwAt(4096), -1);
  }
  EXPECT_EQ(LoadBaseline("dgx_a100").BusbwAt(4ull << 30), 232.54);
  EXPECT_EQ(LoadBaseline("dgx_h100").BusbwAt(8ull << 30), 480);
  const std::string good = R"({"schema": "ciuic.baseline/1", "name": "x", "description": "d", "collective": "allreduce",
      "ranks": 2, "points": [{"bytes": 4096, "busbw_gbps": 1.5, "source": "https://example.org/a"}]})";
  EXPECT_EQ(ParseBaseline(good, "x.json").points.size(), 1u);
  const std::pair<std::string, std::string> bad[] = {
      {"\"source\": \"https://example.org/a\"", "\"source\": \"my notes\""},
      {"\"ranks\": 2", "\"ranks\": 2, \"extra\": 1"},
      {"ciuic.baseline/1", "ciuic.baseline/2"},
      {"\"busbw_gbps\": 1.5", "\"busbw_gbps\": -1"},
  };
  for (const auto& [from, to] : bad) {
    std::string text = good;
    text.replace(text.find(from), from.size(), to);
    EXPECT_THROW(ParseBaseline(text, "x.json"), InputError) << to;
  }
}

// ---- whole runs through the executable -------------------------------------------------------------

struct Result {
  int code = -1;
  std::string out, err;
};

std::string Slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

class NcclRun : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("ciuic_nccl_" + std::to_string(getpid()) + "_" +
                                                     testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string Path(const std::string& name) const { return (dir_ / name).string(); }
  Result Run(const std::string& args) const {
    const std::string cmd = std::string(CIUIC_BENCH_EXE) + " " + args + " >" + Path("out") + " 2>" + Path("err");
    const int status = std::system(cmd.c_str());
    return {WIFEXITED(status) ? WEXITSTATUS(status) : 128, Slurp(Path("out")), Slurp(Path("err"))};
  }
  std::filesystem::path dir_;
};

// -d int32,half -o sum,max over 2 sizes, 2 placements: 16 rows, one table, every output coherent.
TEST_F(NcclRun, ASweepOfDtypesAndOpsCarriesThemOnEveryRow) {
  const std::string base = "allreduce --backend local --ranks 2 -b 4K -e 8K -f 2 -n 20 -w 1 -d int32,half -o sum,max";
  const Result json = Run(base + " --format json --out " + Path("r.json") + " --db " + Path("r.db"));
  ASSERT_EQ(json.code, 0) << json.err;
  const auto j = nlohmann::json::parse(Slurp(Path("r.json")));
  EXPECT_EQ(j["context"]["dtype"], "int32,fp16");
  EXPECT_EQ(j["context"]["op"], "sum,max");
  ASSERT_EQ(j["results"].size(), 16u);
  std::set<std::tuple<std::string, std::string, uint64_t, bool>> seen;
  for (const auto& r : j["results"]) {
    seen.insert({r["dtype"].get<std::string>(), r["op"].get<std::string>(), r["size_bytes"].get<uint64_t>(),
                 r["inplace"].get<bool>()});
    EXPECT_EQ(r["wrong"], 0);
    EXPECT_EQ(r["count"].get<uint64_t>(), r["size_bytes"].get<uint64_t>() / (r["dtype"] == "int32" ? 4 : 2));
    // The spread of the timed iterations: min <= p50 <= p99 <= max, a standard deviation within it.
    const double lo = r["time_min_us"], p50 = r["time_p50_us"], p99 = r["time_p99_us"], hi = r["time_max_us"];
    const double sd = r["time_stddev_us"];
    EXPECT_GT(lo, 0);
    EXPECT_LE(lo, p50);
    EXPECT_LE(p50, p99);
    EXPECT_LE(p99, hi);
    EXPECT_GE(sd, 0);
    EXPECT_LE(sd, hi - lo);
  }
  EXPECT_EQ(seen.size(), 16u);  // every (dtype, op, size, placement) once
  const double avg = j["summary"]["avg_busbw_gbps"];
  double sum = 0;
  for (const auto& r : j["results"]) sum += r["busbw_gbps"].get<double>();
  EXPECT_NEAR(avg, sum / 16, 1e-9 * sum);

  // The table: dtype-major sections in one table, nccl-tests' type and redop names per row.
  std::vector<std::pair<std::string, std::string>> order;
  std::istringstream table(json.out);
  for (std::string line; std::getline(table, line);) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream f(line);
    std::string size, count, type, redop;
    f >> size >> count >> type >> redop;
    order.emplace_back(type, redop);
  }
  EXPECT_EQ(order, (std::vector<std::pair<std::string, std::string>>{{"int32", "sum"},
                                                                     {"int32", "sum"},
                                                                     {"int32", "max"},
                                                                     {"int32", "max"},
                                                                     {"half", "sum"},
                                                                     {"half", "sum"},
                                                                     {"half", "max"},
                                                                     {"half", "max"}}));

  // The database: one run per (dtype, op), each with its own rows and their spread.
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open_v2(Path("r.db").c_str(), &db, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
  sqlite3_stmt* q = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(db,
                               "SELECT r.dtype, r.redop, COUNT(*), SUM(w.time_min_us <= w.time_p50_us AND "
                               "w.time_p50_us <= w.time_max_us AND w.time_stddev_us >= 0) FROM bench_runs r JOIN "
                               "bench_rows w ON w.run_id = r.id GROUP BY r.id ORDER BY r.id",
                               -1, &q, nullptr),
            SQLITE_OK);
  std::vector<std::string> runs;
  while (sqlite3_step(q) == SQLITE_ROW) {
    runs.push_back(fmt::format("{} {} {} {}", reinterpret_cast<const char*>(sqlite3_column_text(q, 0)),
                               reinterpret_cast<const char*>(sqlite3_column_text(q, 1)), sqlite3_column_int(q, 2),
                               sqlite3_column_int(q, 3)));
  }
  sqlite3_finalize(q);
  sqlite3_close(db);
  EXPECT_EQ(runs, (std::vector<std::string>{"int32 sum 4 4", "int32 max 4 4", "fp16 sum 4 4", "fp16 max 4 4"}));

  // CSV: each line its own dtype and op.
  const Result csv = Run(base + " --format csv");
  ASSERT_EQ(csv.code, 0) << csv.err;
  std::istringstream lines(csv.out);
  std::string header, line;
  std::getline(lines, header);
  EXPECT_NE(header.find(",time_min_us,time_max_us,time_stddev_us,"), std::string::npos) << header;
  std::multiset<std::string> combos;
  while (std::getline(lines, line)) {
    std::vector<std::string> f;
    std::istringstream c(line);
    for (std::string x; std::getline(c, x, ',');) f.push_back(x);
    combos.insert(f.at(4) + " " + f.at(5));
  }
  EXPECT_EQ(combos,
            (std::multiset<std::string>{"int32 sum", "int32 sum", "int32 sum", "int32 sum", "int32 max", "int32 max",
                                        "int32 max", "int32 max", "fp16 sum", "fp16 sum", "fp16 sum", "fp16 sum",
                                        "fp16 max", "fp16 max", "fp16 max", "fp16 max"}));
}

// nccl-tests' columns first, in its order; ours after; its two closing lines.
TEST_F(NcclRun, TheTableIsColumnCompatibleWithNcclTests) {
  const Result r = Run("allreduce --backend local --ranks 2 -b 1K -e 4K -f 4 -n 3 -w 1 -z 1");
  ASSERT_EQ(r.code, 0) << r.err;
  std::istringstream in(r.out);
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  const auto find = [&](const std::string& prefix) {
    for (const auto& l : lines)
      if (l.rfind(prefix, 0) == 0) return l;
    return std::string();
  };
  EXPECT_EQ(find("#       size"),
            "#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   "
            "busbw  #wrong      algo");
  EXPECT_EQ(find("# timing host"),
            "# timing host: each op alone (barrier, op, wait for it), wall clock (nccl-tests' -z 1)");
  EXPECT_EQ(find("# Out of bounds values"), "# Out of bounds values : 0 OK");
  const std::string avg = find("# Avg bus bandwidth    : ");
  ASSERT_FALSE(avg.empty()) << r.out;
  EXPECT_EQ(avg.back(), ' ');  // as nccl-tests prints it without a check threshold
  EXPECT_GT(std::stod(avg.substr(avg.find(':') + 1)), 0);
  const std::string row = find("        1024");
  ASSERT_EQ(row.size(), 12 + 2 + 12 + 2 + 8 + 2 + 6 + 2 + 6 + 2 * (2 + 7 + 2 + 6 + 2 + 6 + 2 + 6) + 2 + 8) << row;
  EXPECT_EQ(row.substr(0, 54), "        1024           256     float     sum      -1  ");
  EXPECT_EQ(row.substr(row.size() - 8), "  native");
}

// --baseline FILE: %ref after nccl-tests' columns where the baseline has the size; "-" elsewhere; JSON
// fields per row and in the summary.
// -z 0 is nccl-tests' default: the timed iterations back to back, one wait, the wall clock over the
// count (so every iteration has the mean); -z 1 and --timing host time each op alone by the wall clock.
TEST_F(NcclRun, DashZZeroTimesTheIterationsBackToBack) {
  const Result r = Run("allreduce --backend local --ranks 2 -b 1K -e 4K -f 4 -n 5 -w 1 -z 0 --format json");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["context"]["timing"], "batch");
  ASSERT_EQ(j["results"].size(), 4u);  // 1K and 4K, out-of-place and in-place
  for (const auto& row : j["results"]) {
    EXPECT_GT(row["time_us"].get<double>(), 0);
    EXPECT_DOUBLE_EQ(row["time_p50_us"].get<double>(), row["time_us"].get<double>());
    EXPECT_DOUBLE_EQ(row["time_p99_us"].get<double>(), row["time_us"].get<double>());
  }
  const Result table = Run("allreduce --backend local --ranks 2 -b 1K -e 1K -n 3 -w 1 --timing batch");
  ASSERT_EQ(table.code, 0) << table.err;
  EXPECT_NE(table.out.find("# timing batch: the timed iterations back to back"), std::string::npos) << table.out;
  const Result host = Run("allreduce --backend local --ranks 2 -b 1K -e 1K -n 3 -w 1 -z 1 --format json");
  ASSERT_EQ(host.code, 0) << host.err;
  EXPECT_EQ(nlohmann::json::parse(host.out)["context"]["timing"], "host");
  const Result clash = Run("allreduce --backend local --ranks 2 -b 1K -e 1K --timing events -z 0");
  EXPECT_EQ(clash.code, 1);
  EXPECT_NE(clash.err.find("--timing events and -z 0 disagree"), std::string::npos) << clash.err;
  const Result bad = Run("allreduce --backend local --ranks 2 -b 1K -e 1K --timing gpu");
  EXPECT_EQ(bad.code, 1);
  EXPECT_NE(bad.err.find("--timing gpu: expected events, host or batch"), std::string::npos) << bad.err;
}

TEST_F(NcclRun, ABaselineAddsItsShareColumn) {
  {
    std::ofstream f(Path("ref.json"));
    f << R"({"schema": "ciuic.baseline/1", "name": "tiny", "description": "a made-up reference for this test",
             "collective": "allreduce", "ranks": 2,
             "points": [{"bytes": 4096, "busbw_gbps": 0.001, "source": "https://example.org/test"}]})";
  }
  const std::string run = "allreduce --backend local --ranks 2 --sizes 4K,8K -n 3 -w 1 --baseline " + Path("ref.json");
  const Result t = Run(run + " --format json --out " + Path("b.json"));
  ASSERT_EQ(t.code, 0) << t.err;
  EXPECT_NE(t.out.find("  #wrong      algo   %ref\n"), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("# baseline tiny: a made-up reference for this test (2 GPUs)"), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("# peak busbw vs baseline tiny: "), std::string::npos) << t.out;
  std::istringstream in(t.out);
  for (std::string l; std::getline(in, l);) {
    if (l.rfind("        4096", 0) == 0) EXPECT_NE(l.back(), '-') << l;
    if (l.rfind("        8192", 0) == 0) EXPECT_EQ(l.substr(l.size() - 7), "      -") << l;
  }
  const auto j = nlohmann::json::parse(Slurp(Path("b.json")));
  EXPECT_EQ(j["context"]["baseline"], "tiny");
  for (const auto& r : j["results"]) {
    if (r["size_bytes"] == 4096) {
      EXPECT_EQ(r["baseline_busbw_gbps"], 0.001);
      EXPECT_NEAR(r["pct_of_baseline"].get<double>(), 100 * r["busbw_gbps"].get<double>() / 0.001, 1e-6);
    } else {
      EXPECT_TRUE(r["baseline_busbw_gbps"].is_null());
      EXPECT_TRUE(r["pct_of_baseline"].is_null());
    }
  }
  EXPECT_EQ(j["summary"]["baseline_best_busbw_gbps"], 0.001);
  const Result bad = Run("allreduce --backend local --sizes 4K --baseline dgx_b200");
  EXPECT_EQ(bad.code, 1);
  EXPECT_EQ(bad.err,
            "ciuic-bench: --baseline dgx_b200: no such baseline (available: dgx_a100, dgx_h100, dgx_h100_ring; or a "
            "ciuic.baseline/1 FILE)\n");
  EXPECT_TRUE(bad.out.empty());
}

// nccl-tests' -J FILE and -I 0|1 (and their long options): the file must end in .json, -I 1 needs it,
// and the two spellings must agree.
TEST(NcclFlags, JsonOutputAndPerIterationFlags) {
  EXPECT_EQ(Parse("-J r.json -I 1").nccl_json, "r.json");
  EXPECT_TRUE(Parse("-J r.json -I 1").per_iter);
  EXPECT_TRUE(Parse("--nccl-json r.JSON --per-iter 1").per_iter);
  EXPECT_FALSE(Parse("-J r.json").per_iter);
  EXPECT_FALSE(Parse("-J r.json -I 0").per_iter);
  EXPECT_EQ(Parse("-I 0").nccl_json, "");
  EXPECT_EQ(Parse("-J r.json --nccl-json r.json").nccl_json, "r.json");
  const std::pair<const char*, const char*> cases[] = {
      {"-I 1", "-I 1 needs -J FILE.json"},
      {"--per-iter 1", "--per-iter 1 needs -J FILE.json"},
      {"-J r.json -I 2", "-I 2: must be in 0..1"},
      {"-J r.json -I yes", "-I yes: not a whole number"},
      {"-J r.json --per-iter 5", "--per-iter 5: must be in 0..1"},
      {"-J r.txt", "-J r.txt: must end in .json"},
      {"-J json", "-J json: must end in .json"},
      {"--nccl-json dir.json/r", "--nccl-json dir.json/r: must end in .json"},
      {"-J a.json --nccl-json b.json", "--nccl-json b.json and -J a.json disagree"},
      {"-J a.json --per-iter 1 -I 0", "--per-iter 1 and -I 0 disagree"},
  };
  ExpectRefused(cases);
  EXPECT_THROW(Parse("-J r.json --out r.json"), Error);  // one file for two outputs
}

// A 2-rank run with -J -I 1: nccl-tests' layout with one result per size, both placements, and per
// iteration each rank's own row, whose per-iteration maximum is times_us (what nccl-tests' tool
// checks); ciuic.bench/1 is written beside it unchanged.
TEST_F(NcclRun, NcclTestsJsonFromATwoRankRunHasPerIterationRecords) {
  const Result r = Run("allreduce --backend local --ranks 2 -b 4K -e 64K -f 4 -n 6 -w 1 -J " + Path("r.json") +
                       " -I 1 --format json --out " + Path("ours.json"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("nccl-tests' JSON, per-iteration records"), std::string::npos) << r.err;
  const auto j = nlohmann::ordered_json::parse(Slurp(Path("r.json")));
  EXPECT_EQ(j["version"], 3);
  EXPECT_EQ(j["config"]["iterations"], 6);
  EXPECT_EQ(j["config"]["step_factor"], 4);
  EXPECT_EQ(j["config"]["minimum_bytes"], 4096);
  EXPECT_EQ(j["config"]["maximum_bytes"], 65536);
  EXPECT_EQ(j["config"]["per_iter_timing"], "true");
  ASSERT_EQ(j["config"]["devices"].size(), 2u);
  EXPECT_EQ(j["args"][1], "allreduce");
  ASSERT_EQ(j["results"].size(), 3u);
  uint64_t size = 4096;
  for (const auto& res : j["results"]) {
    EXPECT_EQ(res["size"], size);
    EXPECT_EQ(res["type"], "float");
    EXPECT_EQ(res["redop"], "sum");
    EXPECT_EQ(res["actual_iterations"], 6);
    for (const char* placement : {"out_of_place", "in_place"}) {
      SCOPED_TRACE(std::to_string(size) + " " + placement);
      EXPECT_GT(res[placement]["time"].get<double>(), 0);
      EXPECT_EQ(res[placement]["nwrong"].get<double>(), 0.0);
      const auto& p = res[std::string(placement) + "_per_iter"];
      ASSERT_EQ(p["times_us"].size(), 6u);
      ASSERT_EQ(p["per_process_max_times_us"].size(), 2u);
      double lo = 1e300, hi = 0;
      for (size_t i = 0; i < 6; ++i) {
        const double t = p["times_us"][i];
        EXPECT_EQ(t, std::max(p["per_process_max_times_us"][0][i].get<double>(),
                              p["per_process_max_times_us"][1][i].get<double>()));
        EXPECT_GT(t, 0);
        lo = std::min(lo, t);
        hi = std::max(hi, t);
      }
      EXPECT_EQ(p["min_us"].get<double>(), lo);
      EXPECT_EQ(p["max_us"].get<double>(), hi);
      EXPECT_LE(p["p50_us"].get<double>(), p["p99_us"].get<double>());
    }
    size *= 4;
  }
  const auto ours = nlohmann::json::parse(Slurp(Path("ours.json")));
  EXPECT_EQ(ours["schema"], "ciuic.bench/1");
  EXPECT_EQ(ours["results"].size(), 6u);
}

}  // namespace
}  // namespace ciuic
