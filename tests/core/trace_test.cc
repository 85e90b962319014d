// core/trace: spans only where a recorder is bound, nesting and arguments as written, the rendered
// JSON read back by the checker and the summary, and the summary's shares on a hand-made trace.
#include "core/trace.h"

#include <gtest/gtest.h>

#include <thread>

#include <nlohmann/json.hpp>

#include "core/buffer.h"
#include "core/cupti.h"
#include "core/error.h"
#include "tests/trace_check.h"

namespace ciuic::trace {
namespace {

nlohmann::json Parse(const Recorder& r) {
  return nlohmann::json::parse("{\"traceEvents\":[" + r.RenderEvents(r.FirstNs()) + "]}");
}

TEST(Trace, SpansRecordOnlyWhereARecorderIsBound) {
  Recorder r(3, "rank 3 (test)");
  { Span unbound("encode", Category::kCompute); }
  EXPECT_EQ(r.size(), 0u);
  {
    const Bind bind(&r);
    Span outer("bucket", Category::kPhase);
    outer.With("bucket", 7).With("bytes", 4096);
    { Span inner("encode", Category::kCompute); }
    { Span inner("recv", Category::kComm); }
  }
  EXPECT_EQ(Current(), nullptr);
  { Span after("decode", Category::kCompute); }
  ASSERT_EQ(r.size(), 3u);
  const auto t = Parse(r);
  EXPECT_EQ(testing_trace::CheckTraceEvents(t), "");
  EXPECT_EQ(testing_trace::SpanNames(t, 3), (std::set<std::string>{"bucket", "encode", "recv"}));
  for (const auto& e : t["traceEvents"]) {
    if (e["name"] == "process_name") {
      EXPECT_EQ(e["args"]["name"], "rank 3 (test)");
    }
    if (e["name"] == "bucket") {
      EXPECT_EQ(e["cat"], "phase");
      EXPECT_EQ(e["args"]["bucket"], 7);
      EXPECT_EQ(e["args"]["bytes"], 4096);
      EXPECT_EQ(e["ts"], 0.0);  // the origin is the first event
    }
  }
}

TEST(Trace, ThreadsGetTheirOwnTracks) {
  Recorder r(0, "rank 0");
  auto work = [&] {
    const Bind bind(&r);
    for (int i = 0; i < 50; ++i) Span s("reduce", Category::kCompute);
  };
  std::thread a(work), b(work);
  a.join();
  b.join();
  EXPECT_EQ(r.size(), 100u);
  const auto t = Parse(r);
  EXPECT_EQ(testing_trace::CheckTraceEvents(t), "");
  std::set<int> tids;
  for (const auto& e : t["traceEvents"])
    if (e["ph"] == "X") tids.insert(e["tid"].get<int>());
  EXPECT_EQ(tids, (std::set<int>{1, 2}));
}

TEST(Trace, GpuRecordsLinkToTheirHostSpan) {
  Recorder r(1, "rank 1");
  {
    const Bind bind(&r);
    Span s("decode", Category::kCompute);
  }
  const int64_t t0 = r.FirstNs();
  r.AddGpu("quant_decode_kernel", Category::kGpuKernel, t0 + 500, 2000, 7, 1, -1);
  r.AddGpu("memcpy DtoH", Category::kGpuMemcpy, t0 + 3000, 1000, 7, 0, 4096);
  const auto t = Parse(r);
  EXPECT_EQ(testing_trace::CheckTraceEvents(t), "");
  int flows = 0;
  for (const auto& e : t["traceEvents"]) {
    if (e["name"] == "quant_decode_kernel") {
      EXPECT_EQ(e["tid"], kGpuTidBase + 7);
      EXPECT_EQ(e["args"]["launched_by"], "decode");
      EXPECT_DOUBLE_EQ(e["ts"].get<double>(), 0.5);
      EXPECT_DOUBLE_EQ(e["dur"].get<double>(), 2.0);
    }
    if (e["name"] == "thread_name" && e["tid"] == kGpuTidBase + 7) {
      EXPECT_EQ(e["args"]["name"], "gpu stream 7");
    }
    flows += e["ph"] == "s" || e["ph"] == "f";
  }
  EXPECT_EQ(flows, 2);  // one arrow, from the span to the kernel; the copy had no span
  const auto shares = Summarize(t);
  ASSERT_EQ(shares.size(), 1u);
  EXPECT_NEAR(shares[0].gpu_us, 3.5, 1e-9);
  EXPECT_NEAR(shares[0].gpu_kernel_us, 2.0, 1e-9);
  EXPECT_NEAR(shares[0].gpu_copy_us, 1.0, 1e-9);
  EXPECT_NEAR(shares[0].gpu_idle_us, 0.5, 1e-9);
}

nlohmann::json X(const char* name, const char* cat, int pid, double ts, double dur) {
  return {{"name", name}, {"cat", cat}, {"ph", "X"}, {"pid", pid}, {"tid", 1}, {"ts", ts}, {"dur", dur}};
}

TEST(Trace, SummaryCountsEachMomentForTheInnermostSpan) {
  // rank 0, 100 us: a bucket (phase) holding encode 0-20, recv 20-50 (a nested reduce 30-40), wait
  // 60-80; 50-60 and 80-100 are the bucket's own time (other).
  nlohmann::json t = {{"traceEvents",
                       {X("bucket", "phase", 0, 0, 100), X("encode", "compute", 0, 0, 20), X("recv", "comm", 0, 20, 30),
                        X("reduce", "compute", 0, 30, 10), X("agree", "wait", 0, 60, 20), X("timed", "phase", 1, 0, 10),
                        X("allreduce", "comm", 1, 2, 4), X("allreduce", "comm", 1, 20, 4)}}};
  const auto shares = Summarize(t);
  ASSERT_EQ(shares.size(), 2u);
  const RankShare& s = shares[0];
  EXPECT_DOUBLE_EQ(s.host_us, 100);
  EXPECT_DOUBLE_EQ(s.compute_us, 30);
  EXPECT_DOUBLE_EQ(s.comm_us, 20);
  EXPECT_DOUBLE_EQ(s.wait_us, 20);
  EXPECT_DOUBLE_EQ(s.other_us, 30);
  // Only inside "timed": rank 1 counts 0-10 (4 us of allreduce); the call at 20 is outside.
  const auto timed = Summarize(t, "timed");
  EXPECT_DOUBLE_EQ(timed[1].host_us, 10);
  EXPECT_DOUBLE_EQ(timed[1].comm_us, 4);
  EXPECT_DOUBLE_EQ(timed[1].other_us, 6);
  EXPECT_DOUBLE_EQ(timed[0].host_us, 0);  // rank 0 has no timed span
  const auto lines = SummaryLines(shares);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0], "rank 0: 100.0 us on the host: kernels 30.0%, communication 20.0%, waiting 20.0%, other 30.0%");
}

TEST(Trace, SummaryRefusesWhatIsNotATrace) {
  EXPECT_THROW(Summarize(nlohmann::json::array()), InputError);
  EXPECT_THROW(Summarize({{"traceEvents", 3}}), InputError);
  nlohmann::json negative = {{"traceEvents", {X("a", "comm", 0, 0, -1)}}};
  try {
    Summarize(negative);
    FAIL() << "a negative dur was accepted";
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "trace: traceEvents[0]: \"dur\" must not be negative");
  }
  nlohmann::json no_ts = {{"traceEvents", {{{"name", "a"}, {"ph", "X"}, {"pid", 0}, {"tid", 1}, {"dur", 1}}}}};
  EXPECT_THROW(Summarize(no_ts), InputError);
}

// Without a device (or without CUPTI in the build) GPU collection says why and nothing changes.
TEST(Trace, GpuCollectionWithoutADeviceSaysWhy) {
  if (CudaDeviceCount() > 0) GTEST_SKIP() << "a device is present (tests/gpu/trace_test.cc covers it)";
  EXPECT_NE(StartGpuCollection(), "");
  Recorder r(0, "rank 0");
  FlushGpuCollection(r, true);
  StopGpuCollection();
  EXPECT_EQ(r.size(), 0u);
}

TEST(Trace, RecorderStopsAtItsLimitAndCountsTheRest) {
  Recorder r(0, "rank 0");
  const Arg none[1] = {{"x", 0}};
  for (size_t i = 0; i < kMaxEvents + 5; ++i) r.Add("x", Category::kComm, static_cast<int64_t>(i), 1, 0, none, 0);
  EXPECT_EQ(r.size(), kMaxEvents);
  EXPECT_EQ(r.dropped(), 5u);
}

}  // namespace
}  // namespace ciuic::trace
