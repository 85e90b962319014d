// Traces of the bundled runtime over the thread backend: a traced allreduce with a lossy codec gives
// the same bits as an untraced one and one trace file with a track per rank holding the runtime's
// phases, valid trace-event JSON whose summary shares add up; the C API's ciuic_runtime_set_trace and
// $CIUIC_TRACE write the same file; a path that cannot be written is refused before anything runs.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>
#include <nlohmann/json.hpp>

#include "collectives/backends/local/communicator.h"
#include "collectives/ciuic.h"
#include "collectives/runtime.h"
#include "core/error.h"
#include "core/trace.h"
#include "tests/trace_check.h"

namespace ciuic {
namespace {

std::string TempPath(const std::string& name) {
  return (std::filesystem::temp_directory_path() / (name + "." + std::to_string(getpid()) + ".json")).string();
}

nlohmann::json ReadJson(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return nlohmann::json::parse(s.str());
}

std::vector<float> TraceGradient(int rank, size_t n) {
  std::mt19937 rng(1234 + rank);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

constexpr int kRanks = 3;
constexpr size_t kFloats = 40000;  // 160 KB: three buckets of 64 KiB

RuntimeConfig TraceConfig() {
  RuntimeConfig c;
  c.algo.algo = AllReduceAlgo::kRing;
  c.algo.codec = ParseCodec("int8");
  c.bucket_bytes = 64 << 10;
  c.timeout_s = 0;
  return c;
}

TEST(RuntimeTrace, LossyRingWritesOneValidFileWithATrackPerRank) {
  const std::string path = TempPath("ciuic_runtime_trace");
  std::filesystem::remove(path);
  std::vector<std::vector<float>> plain(kRanks), traced(kRanks);
  testing::internal::CaptureStderr();
  RunLocalRanks(kRanks, [&](Communicator& comm) {
    const int r = comm.Rank();
    {
      Runtime rt(comm, TraceConfig());
      plain[r] = TraceGradient(r, kFloats);
      rt.AllReduce(plain[r].data(), kFloats, 1);
      EXPECT_EQ(trace::Current(), nullptr);
    }
    Runtime rt(comm, TraceConfig());
    rt.SetTrace(path);
    traced[r] = TraceGradient(r, kFloats);
    rt.AllReduce(traced[r].data(), kFloats, 1);
    // Destruction writes the trace (collective).
  });
  const std::string err = testing::internal::GetCapturedStderr();
  for (int r = 0; r < kRanks; ++r) EXPECT_EQ(traced[r], plain[r]) << "rank " << r << ": tracing changed the result";
  for (int r = 1; r < kRanks; ++r) EXPECT_EQ(traced[r], traced[0]) << "rank " << r;
  EXPECT_NE(err.find("ciuic runtime: wrote trace " + path), std::string::npos) << err;
  for (int r = 0; r < kRanks; ++r)
    EXPECT_NE(err.find(fmt::format("ciuic runtime: trace rank {}: ", r)), std::string::npos) << err;

  const nlohmann::json t = ReadJson(path);
  ASSERT_EQ(testing_trace::CheckTraceEvents(t), "");
  EXPECT_EQ(t["otherData"]["schema"], "ciuic.trace/1");
  EXPECT_EQ(t["otherData"]["world_size"], kRanks);
  EXPECT_EQ(t["otherData"]["codec"], "int8");
  const std::set<std::string> expected = {
      "allreduce",         "bucket",    "finite check", "agree", "ring",       "encode", "decode", "reduce-scatter",
      "decode-add-encode", "allgather", "send",         "recv",  "synchronize"};
  std::set<int> pids;
  for (const auto& e : t["traceEvents"]) pids.insert(e["pid"].get<int>());
  EXPECT_EQ(pids, (std::set<int>{0, 1, 2}));
  for (int r = 0; r < kRanks; ++r) {
    const auto names = testing_trace::SpanNames(t, r);
    for (const auto& n : expected) EXPECT_TRUE(names.count(n)) << "rank " << r << " has no " << n << " span";
  }
  // Three buckets per rank, each naming its bucket index and bytes.
  int buckets = 0;
  for (const auto& e : t["traceEvents"]) {
    if (e["name"] != "bucket" || e["pid"] != 0) continue;
    ++buckets;
    EXPECT_TRUE(e["args"].contains("bucket"));
    EXPECT_GT(e["args"]["bytes"].get<int64_t>(), 0);
  }
  EXPECT_EQ(buckets, 3);

  const auto shares = trace::Summarize(t);
  ASSERT_EQ(shares.size(), static_cast<size_t>(kRanks));
  for (const auto& s : shares) {
    EXPECT_GT(s.host_us, 0);
    EXPECT_GT(s.compute_us, 0) << "rank " << s.rank;
    EXPECT_GT(s.comm_us, 0) << "rank " << s.rank;
    EXPECT_NEAR(s.compute_us + s.comm_us + s.wait_us + s.other_us, s.host_us, 1e-6 * s.host_us + 1e-3);
    EXPECT_EQ(s.gpu_us, 0);
  }
  std::filesystem::remove(path);
}

TEST(RuntimeTrace, UnwritablePathIsRefusedBeforeRecording) {
  RunLocalRanks(1, [&](Communicator& comm) {
    Runtime rt(comm, TraceConfig());
    try {
      rt.SetTrace("/no/such/dir/t.json");
      FAIL() << "an unwritable trace path was accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("/no/such/dir/t.json"), std::string::npos) << e.what();
    }
  });
}

struct CApiRun {
  CApiRun(const char* c, const char* t) : codec(c), trace(t) {}
  const char* codec;
  const char* trace;  // null: $CIUIC_TRACE only
  ciuic_status_t set_status = CIUIC_OK;
  std::string error;
  std::mutex mu;
};

void CApiRank(ciuic_comm_t* comm, void* arg) {
  auto* run = static_cast<CApiRun*>(arg);
  ciuic_runtime_t* rt = nullptr;
  if (ciuic_runtime_create(comm, "ring", run->codec, 32 << 10, &rt) != CIUIC_OK) {
    std::lock_guard lock(run->mu);
    run->error = ciuic_last_error();
    return;
  }
  if (run->trace) {
    const ciuic_status_t s = ciuic_runtime_set_trace(rt, run->trace);
    std::lock_guard lock(run->mu);
    run->set_status = s;
    if (s != CIUIC_OK) run->error = ciuic_last_error();
  }
  std::vector<float> g = TraceGradient(ciuic_comm_rank(comm), 20000);
  ciuic_allreduce(rt, g.data(), g.size(), 5, 0);
  ciuic_runtime_destroy(rt);
}

TEST(RuntimeTrace, CApiSetTraceAndEnvironmentWriteTheFile) {
  const std::string path = TempPath("ciuic_c_trace");
  std::filesystem::remove(path);
  {
    CApiRun run("bf16", path.c_str());
    testing::internal::CaptureStderr();
    ASSERT_EQ(ciuic_local_run(2, CApiRank, &run), CIUIC_OK) << ciuic_last_error();
    testing::internal::GetCapturedStderr();
    EXPECT_EQ(run.set_status, CIUIC_OK) << run.error;
    const nlohmann::json t = ReadJson(path);
    ASSERT_EQ(testing_trace::CheckTraceEvents(t), "");
    EXPECT_TRUE(testing_trace::SpanNames(t, 1).count("decode-add-encode"));
    EXPECT_EQ(trace::Summarize(t).size(), 2u);
  }
  std::filesystem::remove(path);
  {
    setenv("CIUIC_TRACE", path.c_str(), 1);
    CApiRun run("none", nullptr);
    testing::internal::CaptureStderr();
    const ciuic_status_t s = ciuic_local_run(2, CApiRank, &run);
    testing::internal::GetCapturedStderr();
    unsetenv("CIUIC_TRACE");
    ASSERT_EQ(s, CIUIC_OK) << ciuic_last_error();
    EXPECT_EQ(run.error, "");
    const nlohmann::json t = ReadJson(path);
    ASSERT_EQ(testing_trace::CheckTraceEvents(t), "");
    // The uncompressed ring's adds, staged through the engine's window on the thread world.
    EXPECT_TRUE(testing_trace::SpanNames(t, 0).count("reduce"));
    EXPECT_TRUE(testing_trace::SpanNames(t, 0).count("staged ring"));
  }
  std::filesystem::remove(path);
  {
    CApiRun run("none", "/no/such/dir/t.json");
    ASSERT_EQ(ciuic_local_run(1, CApiRank, &run), CIUIC_OK);
    EXPECT_EQ(run.set_status, CIUIC_ERR_INPUT);
    EXPECT_NE(run.error.find("/no/such/dir/t.json"), std::string::npos) << run.error;
  }
}

}  // namespace
}  // namespace ciuic
