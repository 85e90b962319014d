// Traces on a GPU (CUPTI builds): a traced int8 ring over 2 thread ranks on device buffers writes GPU
// records (our kernels, the exchanges' device copies) on "gpu stream N" tracks of each rank, stamped
// on the host trace clock (inside the host spans' time range) and linked by flow arrows to the host
// phase that launched them. Skips without a device or without CUPTI.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <vector>

#include <unistd.h>
#include <nlohmann/json.hpp>

#include "collectives/backends/local/communicator.h"
#include "collectives/runtime.h"
#include "core/buffer.h"
#include "core/config.h"
#include "core/trace.h"
#include "tests/trace_check.h"

namespace ciuic {
namespace {

TEST(GpuTrace, CuptiRecordsLandOnEachRanksGpuTrackLinkedToTheirPhase) {
  if (!CIUIC_HAVE_CUPTI) GTEST_SKIP() << "this build has no CUPTI";
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  const std::string path =
      (std::filesystem::temp_directory_path() / ("ciuic_gpu_trace_" + std::to_string(getpid()) + ".json")).string();
  constexpr size_t n = 1 << 20;
  RunLocalRanks(
      2,
      [&](Communicator& comm) {
        RuntimeConfig c;
        c.algo.algo = AllReduceAlgo::kRing;
        c.algo.codec = ParseCodec("int8");
        c.bucket_bytes = 1 << 20;
        c.timeout_s = 0;
        Runtime rt(comm, c);
        rt.SetTrace(path);
        std::mt19937 rng(comm.Rank() + 1);
        std::normal_distribution<float> d(0, 1);
        std::vector<float> host(n);
        for (auto& x : host) x = d(rng);
        Buffer dev(n * 4, MemoryKind::kDevice);
        CopyBytes(dev.data(), MemoryKind::kDevice, host.data(), MemoryKind::kHost, n * 4);
        for (int step = 0; step < 2; ++step) rt.AllReduce(dev.as<float>(), n, 0);
      },
      DeviceKind::kCuda);
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  const auto t = nlohmann::json::parse(s.str());
  ASSERT_EQ(testing_trace::CheckTraceEvents(t), "");
  for (int rank = 0; rank < 2; ++rank) {
    double host_lo = 1e300, host_hi = -1e300;
    int kernels = 0, linked = 0, flows = 0;
    std::string labels;
    for (const auto& e : t["traceEvents"]) {
      if (e["pid"] != rank) continue;
      if (e["name"] == "process_labels") labels = e["args"]["labels"];
      if (e["ph"] == "s") ++flows;
      if (e["ph"] != "X") continue;
      const double ts = e["ts"], end = ts + e["dur"].get<double>();
      const std::string cat = e["cat"];
      if (cat.rfind("gpu.", 0) != 0) {
        host_lo = std::min(host_lo, ts);
        host_hi = std::max(host_hi, end);
        continue;
      }
      EXPECT_GE(e["tid"].get<int64_t>(), trace::kGpuTidBase);
      kernels += cat == "gpu.kernel";
      if (e.contains("args") && e["args"].contains("launched_by")) ++linked;
    }
    EXPECT_NE(labels.find("gpu: CUPTI activity records"), std::string::npos) << labels;
    EXPECT_GT(kernels, 0) << "rank " << rank;
    EXPECT_GT(linked, 0) << "rank " << rank;
    EXPECT_GT(flows, 0) << "rank " << rank;
    // Same clock: every GPU record a span launched lies within the host spans' range (plus the final
    // synchronize). Records launched outside any span (this test's own upload) are kept but unlinked.
    for (const auto& e : t["traceEvents"]) {
      if (e["pid"] != rank || e["ph"] != "X" || e["cat"].get<std::string>().rfind("gpu.", 0) != 0) continue;
      if (!e.contains("args") || !e["args"].contains("launched_by")) continue;
      EXPECT_GE(e["ts"].get<double>(), host_lo - 1.0) << e.dump();
      EXPECT_LE(e["ts"].get<double>() + e["dur"].get<double>(), host_hi + 1.0) << e.dump();
    }
  }
  const auto shares = trace::Summarize(t);
  ASSERT_EQ(shares.size(), 2u);
  for (const auto& sh : shares) EXPECT_GT(sh.gpu_kernel_us, 0);
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace ciuic
