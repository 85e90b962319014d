// Golden output of the three text reporters for a fixed context and rows.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <sstream>

#include "bench/record.h"

namespace ciuic {
namespace {

BenchContext Context() {
  BenchContext c;
  c.tool_version = "0.1.0";
  c.git_commit = "abc123";
  c.collective = "allreduce";
  c.backend = "mpi";
  c.device = "cpu";
  c.world_size = 2;
  c.dtype = "fp32";
  c.dtype_table = "float";
  c.redop = "sum";
  c.busbw_factor = 1.0;
  c.busbw_formula = "2(n-1)/n";
  c.hostnames = {"node1", "node1"};
  c.library_versions = {{"mpi", "Open MPI v4.1.4"}};
  c.start_time = "2026-11-22T12:00:00Z";
  c.command_line = "ciuic-bench allreduce";
  return c;
}

std::vector<BenchRow> Rows() {
  BenchRow a;
  a.size_bytes = 1048576;
  a.count = 262144;
  a.iters = 20;
  a.time_us = 400.5;
  a.time_p50_us = 399.25;
  a.time_p99_us = 450.0;
  a.time_min_us = 380.0;
  a.time_max_us = 460.0;
  a.time_stddev_us = 12.5;
  a.algbw_gbps = 1048576 / 400.5e-6 / 1e9;
  a.busbw_gbps = a.algbw_gbps;
  BenchRow b = a;
  b.inplace = true;
  b.error = "in-place allreduce not supported by the x backend";
  b.skipped = true;
  return {a, b};
}

std::vector<std::string> Lines(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

// nccl-tests' 13 columns in its widths and order, ours after them, its two closing lines, then ours.
TEST(Reporters, TableGolden) {
  std::ostringstream out;
  auto r = MakeTableReporter(out);
  r->Begin(Context());
  r->Size(Rows());
  BenchSummary s;
  s.peak_busbw_gbps = Rows()[0].busbw_gbps;
  s.peak_size_bytes = 1048576;
  s.peak_algbw_gbps = s.peak_busbw_gbps;
  s.peak_algbw_size_bytes = 1048576;
  s.avg_busbw_gbps = s.peak_busbw_gbps;
  r->End(s);
  const auto lines = Lines(out.str());
  ASSERT_EQ(lines.size(), 16u) << out.str();
  EXPECT_EQ(lines[0],
            "# ciuic-bench allreduce  backend mpi  device cpu  ranks 2  dtype fp32  op sum  algo native  codec none");
  EXPECT_EQ(lines[1], "# ciuic 0.1.0 (abc123)  started 2026-11-22T12:00:00Z  mpi Open MPI v4.1.4");
  EXPECT_EQ(lines[2], "# hosts: node1 (2 ranks)");
  EXPECT_EQ(lines[3],
            "# warmup auto  iters auto  check 1  timing host  average max (max over ranks of each rank's mean)");
  EXPECT_EQ(
      lines[5],
      "#                                                              out-of-place                       in-place");
  EXPECT_EQ(lines[6],
            "#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   "
            "busbw  #wrong      algo");
  EXPECT_EQ(
      lines[7],
      "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  (GB/s)  (GB/s)");
  EXPECT_EQ(lines[8],
            "     1048576        262144     float     sum      -1   400.50    2.62    2.62       0      n/a     n/a    "
            " n/a     n/a    native");
  EXPECT_EQ(lines[9], "# n/a 1M in-place: in-place allreduce not supported by the x backend");
  EXPECT_EQ(lines[10], "# Out of bounds values : 0 OK");
  EXPECT_EQ(lines[11], "# Avg bus bandwidth    : 2.61817 ");
  EXPECT_EQ(lines[12], "#");
  EXPECT_EQ(lines[13], "# peak busbw: 2.62 GB/s at 1048576 B (1M, out-of-place)");
  EXPECT_EQ(lines[14], "# peak algbw: 2.62 GB/s at 1048576 B (1M)");
  EXPECT_EQ(lines[15],
            "# time: max over ranks of each rank's mean; algbw = size / time (GB = 1e9 B); busbw = algbw x "
            "2(n-1)/n = algbw x 1.0000 (n = 2); avg bus bandwidth: mean busbw of every row that moved bytes");
}

// A time too wide for nccl-tests' 7 characters drops decimals, then goes to an exponent, as nccl-tests
// prints it; a lossy codec's error and a baseline's share follow the algorithm.
TEST(Reporters, TableCellsKeepNcclTestsWidths) {
  BenchContext c = Context();
  c.codec = "int8";
  c.baseline = "ref";
  c.baseline_description = "a reference";
  std::ostringstream out;
  auto r = MakeTableReporter(out);
  r->Begin(c);
  BenchRow a = Rows()[0];
  a.time_us = 12345678.9;
  a.rel_l2_error = 0.0125;
  a.max_abs_error = 0.5;
  a.baseline_busbw_gbps = 5.2363;
  BenchRow b = a;
  b.inplace = true;
  b.time_us = 123456.7;
  r->Size({a, b});
  r->End(BenchSummary{});
  const auto lines = Lines(out.str());
  std::string row;
  for (const auto& l : lines)
    if (l.rfind("     1048576", 0) == 0) row = l;
  EXPECT_EQ(row,
            "     1048576        262144     float     sum      -1  1.2e+07    2.62    2.62       0   123457    2.62    "
            "2.62       0    native  1.250e-02  5.000e-01  50.00")
      << out.str();
}

// One rank in place: the collective is a no-op, so the row has a time but no bandwidth, and a run
// of only such rows has no peak (it once printed "peak busbw 576041.75 GB/s").
TEST(Reporters, ARowThatMovesNoBytesHasNoBandwidthAndNoPeak) {
  BenchContext c = Context();
  c.world_size = 1;
  c.average = "avg";
  c.average_description = "average over ranks of each rank's mean";
  BenchRow a = Rows()[0];
  a.inplace = true;
  a.moves_bytes = false;
  a.algbw_gbps = a.busbw_gbps = 0;
  std::ostringstream table, json, csv;
  auto t = MakeTableReporter(table);
  auto j = MakeJsonReporter(json);
  auto v = MakeCsvReporter(csv);
  for (Reporter* r : {t.get(), j.get(), v.get()}) {
    r->Begin(c);
    r->Size({a});
    r->End(BenchSummary{});
  }
  const auto lines = Lines(table.str());
  EXPECT_EQ(lines[3],
            "# warmup auto  iters auto  check 1  timing host  average avg (average over ranks of each rank's mean)");
  EXPECT_EQ(lines[8],
            "     1048576        262144     float     sum      -1      n/a     n/a     n/a     n/a   400.50     n/a    "
            " n/a       0    native");
  EXPECT_EQ(lines[9], "# Out of bounds values : 0 OK");
  EXPECT_EQ(lines[10], "# Avg bus bandwidth    : 0 ");  // no row moved bytes: nccl-tests prints 0 for one GPU
  EXPECT_EQ(lines[12], "# peak busbw: n/a (no row moved bytes between ranks)");
  const auto doc = nlohmann::json::parse(json.str());
  EXPECT_TRUE(doc["results"][0]["busbw_gbps"].is_null());
  EXPECT_TRUE(doc["results"][0]["algbw_gbps"].is_null());
  EXPECT_EQ(doc["results"][0]["time_us"].get<double>(), 400.5);
  EXPECT_FALSE(doc["results"][0]["moves_bytes"].get<bool>());
  EXPECT_TRUE(doc["summary"]["peak_busbw_gbps"].is_null());
  EXPECT_EQ(doc["context"]["average"], "avg");
  EXPECT_EQ(Lines(csv.str())[1],
            "allreduce,mpi,cpu,1,fp32,sum,native,none,1048576,262144,true,-1,20,400.500,399.250,"
            "450.000,380.000,460.000,12.500,,,0,,");
}

TEST(Reporters, CsvGolden) {
  std::ostringstream out;
  auto r = MakeCsvReporter(out);
  r->Begin(Context());
  r->Size(Rows());
  r->End({});
  const auto lines = Lines(out.str());
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0],
            "collective,backend,device,world_size,dtype,redop,algo,codec,size_bytes,count,inplace,root,iters,time_us,"
            "time_p50_us,time_p99_us,time_min_us,time_max_us,time_stddev_us,algbw_gbps,busbw_gbps,wrong,"
            "baseline_busbw_gbps,error");
  EXPECT_EQ(lines[1],
            "allreduce,mpi,cpu,2,fp32,sum,native,none,1048576,262144,false,-1,20,400.500,399.250,450.000,"
            "380.000,460.000,12.500,2.6182,2.6182,0,,");
  EXPECT_EQ(lines[2],
            "allreduce,mpi,cpu,2,fp32,sum,native,none,1048576,262144,true,-1,20,,,,,,,,,,,in-place "
            "allreduce not supported by the x backend");
}

TEST(Reporters, JsonSchemaAndFields) {
  std::ostringstream out;
  auto r = MakeJsonReporter(out);
  r->Begin(Context());
  r->Size(Rows());
  BenchSummary s;
  s.rows = 2;
  s.skipped_rows = 1;
  r->End(s);
  const auto j = nlohmann::json::parse(out.str());
  EXPECT_EQ(j["schema"], "ciuic.bench/1");
  for (const char* k : {"tool_version", "git_commit", "backend", "device", "world_size", "dtype", "op", "codec", "algo",
                        "hostnames", "library_versions", "start_time"}) {
    EXPECT_TRUE(j["context"].contains(k)) << k;
  }
  ASSERT_EQ(j["results"].size(), 2u);
  const auto& a = j["results"][0];
  for (const char* k : {"size_bytes", "count", "inplace", "dtype", "op", "time_us", "time_p50_us", "time_p99_us",
                        "time_min_us", "time_max_us", "time_stddev_us", "algbw_gbps", "busbw_gbps", "wrong"}) {
    EXPECT_TRUE(a.contains(k)) << k;
  }
  EXPECT_EQ(a["dtype"], "fp32");
  EXPECT_EQ(a["op"], "sum");
  EXPECT_EQ(a["time_min_us"].get<double>(), 380.0);
  EXPECT_EQ(a["time_max_us"].get<double>(), 460.0);
  EXPECT_EQ(a["time_stddev_us"].get<double>(), 12.5);
  EXPECT_FALSE(a.contains("baseline_busbw_gbps"));  // only with --baseline
  EXPECT_TRUE(j["results"][1]["time_min_us"].is_null());
  EXPECT_TRUE(j["summary"].contains("avg_busbw_gbps"));
  EXPECT_TRUE(a["inplace"].is_boolean());
  EXPECT_TRUE(a["time_us"].is_number());
  EXPECT_TRUE(a["wrong"].is_number_integer());
  EXPECT_EQ(a["time_us"].get<double>(), 400.5);
  const auto& b = j["results"][1];
  EXPECT_TRUE(b["time_us"].is_null());
  EXPECT_TRUE(b["skipped"].get<bool>());
  EXPECT_EQ(j["summary"]["skipped_rows"], 1);
}

// The keys of an object, in order.
std::vector<std::string> Keys(const nlohmann::ordered_json& j) {
  std::vector<std::string> out;
  for (auto it = j.begin(); it != j.end(); ++it) out.push_back(it.key());
  return out;
}

std::string NcclTestsJson(const std::vector<std::vector<BenchRow>>& sizes, bool per_iter, BenchSummary s = {}) {
  BenchContext c = Context();
  c.pids = {4242, 4243};
  c.check = 1;
  c.iters = -1;  // auto: the file's "iterations" is the count the rows share
  std::ostringstream out;
  auto r =
      MakeNcclTestsJsonReporter(out, {{"ciuic-bench", "allreduce", "-J", "r.json"}, {"NCCL_DEBUG=WARN"}, per_iter});
  r->Begin(c);
  for (const auto& rows : sizes) r->Size(rows);
  s.avg_busbw_gbps = 2.5;
  s.end_time = "2026-11-22T12:00:05Z";
  r->End(s);
  return out.str();
}

// Two sizes (x4), both placements, 2 ranks, 4 iterations whose per-rank times are known exactly.
std::vector<std::vector<BenchRow>> PerIterRows() {
  std::vector<std::vector<BenchRow>> sizes;
  for (uint64_t size : {4096ull, 16384ull}) {
    BenchRow a;
    a.size_bytes = size;
    a.count = size / 4;
    a.iters = 4;
    a.time_us = 20.0;
    a.algbw_gbps = static_cast<double>(size) / 20e-6 / 1e9;
    a.busbw_gbps = a.algbw_gbps;
    a.rank_iter_times_us = {{10, 12, 11, 30}, {11, 9, 13, 12}};
    BenchRow b = a;
    b.inplace = true;
    b.wrong = 3;
    b.rank_iter_times_us = {{5, 6, 7, 8}, {8, 7, 6, 5}};
    sizes.push_back({a, b});
  }
  return sizes;
}

// nccl-tests' -J layout (its JSON version 3, as its src/util.cu writes it): the keys in nccl-tests'
// order and nesting, its value types (booleans as the strings "true"/"false", the root as its column
// text), and with -I 1 the per-iteration records its tools/analyze_perf_json.py reads.
TEST(Reporters, NcclTestsJsonHasNcclTestsKeysAndNesting) {
  const auto j = nlohmann::ordered_json::parse(NcclTestsJson(PerIterRows(), /*per_iter=*/true));
  EXPECT_EQ(Keys(j),
            (std::vector<std::string>{"version", "start_time", "args", "env", "nccl_version", "config", "results",
                                      "out_of_bounds", "average_bus_bandwidth", "errors", "end_time"}));
  EXPECT_EQ(j["version"], 3);
  EXPECT_EQ(j["start_time"], "2026-11-22 12:00:00");
  EXPECT_EQ(j["end_time"], "2026-11-22 12:00:05");
  EXPECT_EQ(j["args"], nlohmann::ordered_json({"ciuic-bench", "allreduce", "-J", "r.json"}));
  EXPECT_EQ(j["env"], nlohmann::ordered_json({"NCCL_DEBUG=WARN"}));
  EXPECT_TRUE(j["nccl_version"].is_null());  // an MPI run used no NCCL
  const auto& config = j["config"];
  EXPECT_EQ(Keys(config), (std::vector<std::string>{
                              "nthreads", "ngpus", "minimum_bytes", "maximum_bytes", "step_factor", "warmup_iters",
                              "iterations", "aggregated_iterations", "validation", "graph", "blocking_collectives",
                              "per_iter_timing", "per_iter_skip", "parallel_init", "devices"}));
  EXPECT_EQ(config["minimum_bytes"], 4096);
  EXPECT_EQ(config["maximum_bytes"], 16384);
  EXPECT_EQ(config["step_factor"], 4);
  EXPECT_EQ(config["iterations"], 4);
  EXPECT_EQ(config["per_iter_timing"], "true");
  EXPECT_EQ(config["blocking_collectives"], "true");
  EXPECT_EQ(config["parallel_init"], "false");
  ASSERT_EQ(config["devices"].size(), 2u);
  EXPECT_EQ(Keys(config["devices"][1]),
            (std::vector<std::string>{"rank", "group", "pid", "hostname", "device", "device_hex", "device_info"}));
  EXPECT_EQ(config["devices"][1]["rank"], 1);
  EXPECT_EQ(config["devices"][1]["pid"], 4243);
  EXPECT_EQ(config["devices"][1]["hostname"], "node1");

  ASSERT_EQ(j["results"].size(), 2u);  // one result per size, both placements in it
  const auto& r = j["results"][1];
  EXPECT_EQ(Keys(r),
            (std::vector<std::string>{"size", "count", "type", "redop", "root", "out_of_place", "out_of_place_per_iter",
                                      "in_place", "in_place_per_iter", "actual_iterations", "experiment_name"}));
  EXPECT_EQ(r["size"], 16384);
  EXPECT_EQ(r["count"], 4096);
  EXPECT_EQ(r["type"], "float");
  EXPECT_EQ(r["redop"], "sum");
  EXPECT_EQ(r["root"], "    -1");
  EXPECT_EQ(r["actual_iterations"], 4);
  EXPECT_EQ(Keys(r["out_of_place"]), (std::vector<std::string>{"time", "alg_bw", "bus_bw", "nwrong"}));
  EXPECT_EQ(r["out_of_place"]["time"].get<double>(), 20.0);
  EXPECT_DOUBLE_EQ(r["out_of_place"]["alg_bw"].get<double>(), 16384 / 20e-6 / 1e9);
  EXPECT_EQ(r["out_of_place"]["nwrong"].get<double>(), 0.0);
  EXPECT_EQ(r["in_place"]["nwrong"].get<double>(), 3.0);

  // Each iteration's time is its slowest rank's; the summary is nccl-tests' (p50 the middle sample,
  // p95/p99 nearest-rank, population standard deviation).
  const auto& p = r["out_of_place_per_iter"];
  EXPECT_EQ(Keys(p),
            (std::vector<std::string>{"skipped_iterations", "min_us", "max_us", "avg_us", "p50_us", "p95_us", "p99_us",
                                      "stdev_us", "cv_pct", "times_us", "per_process_max_times_us"}));
  EXPECT_EQ(p["times_us"], nlohmann::ordered_json({11.0, 12.0, 13.0, 30.0}));
  EXPECT_EQ(p["per_process_max_times_us"], nlohmann::ordered_json({{10.0, 12.0, 11.0, 30.0}, {11.0, 9.0, 13.0, 12.0}}));
  EXPECT_EQ(p["skipped_iterations"], 0);
  EXPECT_EQ(p["min_us"].get<double>(), 11.0);
  EXPECT_EQ(p["max_us"].get<double>(), 30.0);
  EXPECT_EQ(p["avg_us"].get<double>(), 16.5);
  EXPECT_EQ(p["p50_us"].get<double>(), 13.0);
  EXPECT_EQ(p["p95_us"].get<double>(), 30.0);
  EXPECT_EQ(p["p99_us"].get<double>(), 30.0);
  EXPECT_DOUBLE_EQ(p["stdev_us"].get<double>(), std::sqrt(245.0 / 4));
  EXPECT_DOUBLE_EQ(p["cv_pct"].get<double>(), std::sqrt(245.0 / 4) / 16.5 * 100);
  EXPECT_EQ(r["in_place_per_iter"]["times_us"], nlohmann::ordered_json({8.0, 7.0, 7.0, 8.0}));

  EXPECT_EQ(Keys(j["out_of_bounds"]), (std::vector<std::string>{"count", "okay"}));
  EXPECT_EQ(j["out_of_bounds"]["okay"], "true");
  EXPECT_EQ(Keys(j["average_bus_bandwidth"]), (std::vector<std::string>{"bandwidth", "okay"}));
  EXPECT_EQ(j["average_bus_bandwidth"]["bandwidth"].get<double>(), 2.5);
  EXPECT_EQ(j["average_bus_bandwidth"]["okay"], "unchecked");
  EXPECT_TRUE(j["errors"].is_array());
  EXPECT_TRUE(j["errors"].empty());
}

// Without -I 1 no per-iteration keys; a failed or skipped placement is null and its reason goes to
// nccl-tests' "errors"; a list of sizes that is no progression has no step key.
TEST(Reporters, NcclTestsJsonWithoutPerIterAndWithAFailedRow) {
  auto sizes = PerIterRows();
  sizes.push_back(Rows());  // 1 MiB: out-of-place ok, in-place skipped
  BenchSummary s;
  s.total_wrong = 3;
  const auto j = nlohmann::ordered_json::parse(NcclTestsJson(sizes, /*per_iter=*/false, s));
  EXPECT_EQ(j["config"]["per_iter_timing"], "false");
  EXPECT_FALSE(j["config"].contains("step_factor"));
  EXPECT_FALSE(j["config"].contains("step_bytes"));
  EXPECT_TRUE(j["config"]["iterations"].is_null());  // the rows ran 4 and 20 iterations
  ASSERT_EQ(j["results"].size(), 3u);
  for (const auto& r : j["results"]) {
    EXPECT_FALSE(r.contains("out_of_place_per_iter"));
    EXPECT_FALSE(r.contains("in_place_per_iter"));
  }
  EXPECT_TRUE(j["results"][2]["out_of_place"].is_object());
  EXPECT_TRUE(j["results"][2]["in_place"].is_null());
  EXPECT_EQ(j["results"][2]["actual_iterations"], 20);
  ASSERT_EQ(j["errors"].size(), 1u);
  EXPECT_EQ(j["errors"][0], "1048576 B float sum in-place: in-place allreduce not supported by the x backend");
  EXPECT_EQ(j["out_of_bounds"]["count"], 3);
  EXPECT_EQ(j["out_of_bounds"]["okay"], "false");
}

}  // namespace
}  // namespace ciuic
