// NCCL backend on the GPU (world size 1 without a launcher): every collective verifies for the
// dtypes NCCL supports, including bf16 and fp8; a planted wrong element is caught. Skips cleanly
// where there is no CUDA device or the build has no NCCL.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "bench/runner.h"
#include "collectives/algorithms/allreduce.h"
#include "collectives/backends/local/communicator.h"
#include "collectives/backends/nccl/communicator.h"
#include "core/buffer.h"
#include "core/config.h"

namespace ciuic {
namespace {

std::unique_ptr<Communicator> MakeWorld() {
  auto control = MakeLocalWorld(1);
  return MakeNcclWorld(std::move(control[0]));
}

bool HaveNcclAndGpu() { return CIUIC_HAVE_NCCL && CudaDeviceCount() > 0; }

TEST(Nccl, EveryCollectiveAndDtypeVerifies) {
  if (!HaveNcclAndGpu()) GTEST_SKIP() << "no CUDA device or no NCCL in this build";
  auto comm = MakeWorld();
  for (const CollSpec* spec : AllCollectives()) {
    for (DType t : AllDTypes()) {
      const std::vector<ReduceOp> ops = spec->reduces ? AllReduceOps() : std::vector<ReduceOp>{ReduceOp::kSum};
      for (ReduceOp op : ops) {
        BenchOptions o;
        o.spec = spec;
        o.type = t;
        o.op = op;
        o.sizes = {1024, 1 << 20, (1 << 22) + 64};
        o.iters = 3;
        o.check = 2;
        const BenchSummary s = RunBench(*comm, o, nullptr, MakeContext(*comm, o));
        std::string errors;
        for (const auto& r : s.all_rows) errors += r.error.empty() ? "" : "\n  " + r.error;
        EXPECT_EQ(s.failed_rows, 0) << spec->name << " " << DTypeName(t) << " " << ReduceOpName(op) << errors;
        EXPECT_EQ(s.total_wrong, 0) << spec->name << " " << DTypeName(t) << " " << ReduceOpName(op);
      }
    }
  }
}

TEST(Nccl, PlantedWrongElementIsCaught) {
  if (!HaveNcclAndGpu()) GTEST_SKIP() << "no CUDA device or no NCCL in this build";
  auto comm = MakeWorld();
  BenchOptions o;
  o.type = DType::kBFloat16;
  o.sizes = {1 << 20};
  o.iters = 2;
  o.corrupt_rank = 0;
  o.corrupt_index = 12345;
  const BenchSummary s = RunBench(*comm, o, nullptr, MakeContext(*comm, o));
  EXPECT_EQ(s.total_wrong, 2);
}

// The runtime's native algorithm over NCCL on device buffers, in fp32 and the 16-bit reduction
// precisions: the same bits as over the one-rank thread backend on host memory (the cast kernels are
// bit-exact twins), for sums and means.
TEST(Nccl, NativeReductionPrecisionsMatchTheHostPath) {
  if (!HaveNcclAndGpu()) GTEST_SKIP() << "no CUDA device or no NCCL in this build";
  auto comm = MakeWorld();
  const size_t n = (1 << 20) + 37;
  std::vector<float> input(n);
  for (size_t i = 0; i < n; ++i) input[i] = std::ldexp(static_cast<float>(i % 9973) - 4986.0f, -7) + 1e-3f * (i % 7);
  for (DType prec : {DType::kFloat32, DType::kBFloat16, DType::kFloat16}) {
    for (bool average : {false, true}) {
      AlgoConfig cfg;
      cfg.algo = AllReduceAlgo::kNative;
      cfg.precision = prec;
      std::vector<float> host = input;
      RunLocalRanks(1, [&](Communicator& c) { AllReduceEngine(c, cfg).Run(host.data(), n, nullptr, average); });
      Buffer dev(n * 4, MemoryKind::kDevice);
      CopyBytes(dev.data(), MemoryKind::kDevice, input.data(), MemoryKind::kHost, n * 4);
      AllReduceEngine(*comm, cfg).Run(dev.as<float>(), n, nullptr, average);
      std::vector<float> got(n);
      CopyBytes(got.data(), MemoryKind::kHost, dev.data(), MemoryKind::kDevice, n * 4);
      EXPECT_EQ(0, std::memcmp(got.data(), host.data(), n * 4)) << DTypeName(prec) << " average=" << average;
    }
  }
}

}  // namespace
}  // namespace ciuic
