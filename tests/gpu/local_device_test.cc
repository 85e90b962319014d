// The multi-rank GPU paths on one GPU: the local transport with device buffers (ranks as threads,
// one CUDA stream each, exchanges as stream-ordered device copies) runs every runtime algorithm x
// codec at 2, 3, 4 and 8 ranks, and each rank's result equals the same run on host buffers bit for
// bit (the CUDA kernels are bit-exact twins of the CPU ones), over three error-feedback steps.
// Also the whole bench path (the runner over the runtime communicator). Skips without a device.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <cstdio>
#include <cstring>
#include <mutex>
#include <random>
#include <vector>

#include "bench/runner.h"
#include "collectives/algorithms/allreduce.h"
#include "collectives/backends/local/communicator.h"
#include "collectives/runtime_comm.h"
#include "core/buffer.h"
#include "kernels/codec.h"

namespace ciuic {
namespace {

bool HaveGpu() { return CudaDeviceCount() > 0; }

std::vector<float> Gradient(int rank, size_t n, int step) {
  std::mt19937_64 rng(rank * 7919ull + step * 104729ull + n);
  std::normal_distribution<float> d(0.0f, 1e-2f);
  std::vector<float> g(n);
  for (float& x : g) x = d(rng);
  return g;
}

struct Combo {
  AllReduceAlgo algo;
  const char* codec;
  DType precision = DType::kFloat32;
};

std::vector<Combo> Combos() {
  std::vector<Combo> c;
  for (const char* codec : {"none", "fp16", "bf16", "int8", "int4", "fp8e4m3", "fp8e5m2", "sign1"})
    c.push_back({AllReduceAlgo::kRing, codec});
  for (const char* codec : {"none", "int8", "sign1"}) c.push_back({AllReduceAlgo::kHierarchical, codec});
  c.push_back({AllReduceAlgo::kRecursiveDoubling, "none"});
  c.push_back({AllReduceAlgo::kSparse, "topk:0.05"});
  c.push_back({AllReduceAlgo::kRing, "randomk:0.1"});
  c.push_back({AllReduceAlgo::kTwoPhaseSign, "sign1"});
  c.push_back({AllReduceAlgo::kPowerSgd, "powersgd:4"});
  for (DType p : {DType::kFloat32, DType::kBFloat16, DType::kFloat16}) c.push_back({AllReduceAlgo::kNative, "none", p});
  return c;
}

// Each rank's results of `steps` allreduces (same tensor id, error feedback carried).
std::vector<std::vector<float>> RunSteps(int ranks, const Combo& combo, size_t n, int steps, DeviceKind device) {
  std::vector<std::vector<float>> out(ranks);
  RunLocalRanks(
      ranks,
      [&](Communicator& comm) {
        AlgoConfig cfg;
        cfg.algo = combo.algo;
        cfg.codec = ParseCodec(combo.codec);
        cfg.precision = combo.precision;
        cfg.piece_bytes = 4096;  // many pieces in flight
        cfg.in_flight = 3;
        if (combo.algo == AllReduceAlgo::kHierarchical) cfg.ranks_per_node = ranks % 2 == 0 ? 2 : 1;
        AllReduceEngine engine(comm, cfg);
        CodecState st;
        Buffer buf(n * 4, comm.BufferKind());
        std::vector<float>& mine = out[comm.Rank()];
        for (int s = 0; s < steps; ++s) {
          const std::vector<float> g = Gradient(comm.Rank(), n, s);
          CopyBytes(buf.data(), buf.kind(), g.data(), MemoryKind::kHost, n * 4, comm.Stream());
          engine.Run(buf.as<float>(), n, &st, true);
          std::vector<float> r(n);
          CopyBytes(r.data(), MemoryKind::kHost, buf.data(), buf.kind(), n * 4, comm.Stream());
          mine.insert(mine.end(), r.begin(), r.end());
        }
      },
      device);
  return out;
}

TEST(LocalDevice, EveryAlgorithmAndCodecEqualsTheHostRunBitForBit) {
  if (!HaveGpu()) GTEST_SKIP() << "no CUDA device";
  const size_t n = 50021;  // not a multiple of any chunk or block
  int runs = 0;
  for (int ranks : {2, 3, 4, 8}) {
    for (const Combo& c : Combos()) {
      const std::string what =
          fmt::format("{} {} {} ranks={}", AlgoName(c.algo), c.codec, DTypeName(c.precision), ranks);
      const auto host = RunSteps(ranks, c, n, 3, DeviceKind::kCpu);
      const auto dev = RunSteps(ranks, c, n, 3, DeviceKind::kCuda);
      for (int r = 0; r < ranks; ++r) {
        ASSERT_EQ(host[r].size(), dev[r].size()) << what;
        size_t first = host[r].size();
        for (size_t i = 0; i < host[r].size() && first == host[r].size(); ++i)
          if (std::memcmp(&host[r][i], &dev[r][i], 4) != 0) first = i;
        ASSERT_EQ(first, host[r].size()) << what << ": rank " << r << " element " << first << " host " << host[r][first]
                                         << " device " << dev[r][first];
      }
      ++runs;
    }
  }
  std::printf("local device transport: %d algorithm x codec x ranks runs bit-identical to host\n", runs);
}

// The bench path of `ciuic-bench allreduce --backend ciuic --transport local --device cuda`: the
// runner over the runtime communicator on device ranks verifies exactly.
TEST(LocalDevice, BenchRunnerOverTheRuntimeVerifies) {
  if (!HaveGpu()) GTEST_SKIP() << "no CUDA device";
  for (const char* algo : {"ring", "rd", "hier"}) {
    BenchSummary summary;
    std::mutex mu;
    RunLocalRanks(
        4,
        [&](Communicator& base) {
          RuntimeCommConfig rc;
          rc.algo.algo = ParseAlgo(algo);
          rc.algo.ranks_per_node = 2;
          auto comm = MakeRuntimeCommunicator(base.Split(0, base.Rank()), rc);
          BenchOptions o;
          o.sizes = {4, 4096, 1 << 20, (1 << 20) + 4};
          o.iters = 3;
          o.warmup = 1;
          o.check = 2;
          const BenchSummary s = RunBench(*comm, o, nullptr, MakeContext(*comm, o));
          std::lock_guard lock(mu);
          if (comm->Rank() == 0) summary = s;
        },
        DeviceKind::kCuda);
    EXPECT_EQ(summary.failed_rows, 0) << algo;
    EXPECT_EQ(summary.total_wrong, 0) << algo;
    EXPECT_EQ(summary.rows, 8) << algo;
  }
}

}  // namespace
}  // namespace ciuic
