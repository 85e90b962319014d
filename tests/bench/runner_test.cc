// Whole sweeps over the local backend: every collective, dtype and op verifies at 0 wrong on 1..8
// ranks; busbw = algbw x the documented factor; a planted wrong element is counted exactly once.
#include <gtest/gtest.h>

#include <mutex>

#include "bench/runner.h"
#include "collectives/backends/local/communicator.h"
#include "core/error.h"

namespace ciuic {
namespace {

BenchSummary Sweep(int ranks, BenchOptions o) {
  BenchSummary out;
  std::mutex mu;
  RunLocalRanks(ranks, [&](Communicator& c) {
    const BenchContext ctx = MakeContext(c, o);
    const BenchSummary s = RunBench(c, o, nullptr, ctx);
    std::lock_guard lock(mu);
    if (c.Rank() == 0) out = s;
  });
  return out;
}

BenchOptions Small(const CollSpec* spec, DType t, ReduceOp op) {
  BenchOptions o;
  o.spec = spec;
  o.type = t;
  o.op = op;
  o.sizes = {64, 1000, 4096, 65536 + 8};
  o.iters = 2;
  o.warmup = 1;
  o.check = 2;
  return o;
}

TEST(Runner, EveryCollectiveDtypeOpVerifies) {
  for (int ranks : {1, 2, 3, 8}) {
    for (const CollSpec* spec : AllCollectives()) {
      for (DType t : AllDTypes()) {
        const std::vector<ReduceOp> ops =
            spec->reduces ? AllReduceOps() : std::vector<ReduceOp>{ReduceOp::kSum};
        for (ReduceOp op : ops) {
          BenchOptions o = Small(spec, t, op);
          o.root = ranks - 1;
          const BenchSummary s = Sweep(ranks, o);
          ASSERT_EQ(s.failed_rows, 0) << spec->name << " " << DTypeName(t) << " " << ReduceOpName(op) << " n=" << ranks;
          ASSERT_EQ(s.total_wrong, 0) << spec->name << " " << DTypeName(t) << " " << ReduceOpName(op) << " n=" << ranks;
          ASSERT_EQ(s.rows, 8);
        }
      }
    }
  }
}

TEST(Runner, BusBwIsAlgBwTimesFactor) {
  struct Want {
    const CollSpec* spec;
    double factor;  // for n = 4
  };
  const Want wants[] = {{&kAllReduceSpec, 1.5},     {&kAllGatherSpec, 0.75}, {&kReduceScatterSpec, 0.75},
                        {&kAllToAllSpec, 0.75},     {&kBroadcastSpec, 1.0},  {&kReduceSpec, 1.0},
                        {&kSendRecvSpec, 1.0}};
  for (const auto& w : wants) {
    BenchOptions o = Small(w.spec, DType::kFloat32, ReduceOp::kSum);
    o.sizes = {4096, 1 << 20};
    const BenchSummary s = Sweep(4, o);
    ASSERT_EQ(s.all_rows.size(), 4u);
    for (const auto& r : s.all_rows) {
      ASSERT_TRUE(r.ok()) << r.error;
      EXPECT_GT(r.time_us, 0);
      EXPECT_NEAR(r.algbw_gbps, r.size_bytes / (r.time_us * 1e-6) / 1e9, 1e-9 * r.algbw_gbps) << w.spec->name;
      EXPECT_NEAR(r.busbw_gbps, r.algbw_gbps * w.factor, 1e-12 * r.busbw_gbps) << w.spec->name;
      EXPECT_LE(r.time_p50_us, r.time_p99_us);
    }
  }
}

TEST(Runner, PlantedWrongElementIsCounted) {
  for (const CollSpec* spec : {&kAllReduceSpec, &kAllGatherSpec, &kAllToAllSpec}) {
    BenchOptions o = Small(spec, DType::kBFloat16, ReduceOp::kSum);
    o.sizes = {8192};
    o.check = 3;
    o.corrupt_rank = 1;
    o.corrupt_index = 77;
    const BenchSummary s = Sweep(3, o);
    // One element per check iteration, in each of the two placements.
    EXPECT_EQ(s.total_wrong, 2 * 3) << spec->name;
  }
}

TEST(Runner, SizesTooSmallAreSkippedNotFailed) {
  BenchOptions o = Small(&kAllGatherSpec, DType::kFloat64, ReduceOp::kSum);
  o.sizes = {8, 64};  // 8 B cannot hold 4 ranks x 8 B
  const BenchSummary s = Sweep(4, o);
  EXPECT_EQ(s.skipped_rows, 2);
  EXPECT_EQ(s.failed_rows, 0);
  EXPECT_EQ(s.total_wrong, 0);
}

TEST(Runner, SizeThatCannotFitIsRefusedBeforeAllocating) {
  BenchOptions o = Small(&kAllReduceSpec, DType::kFloat32, ReduceOp::kSum);
  o.sizes = {1ull << 50};
  EXPECT_THROW(CheckSizesFit(o, 2, MemoryKind::kHost), InputError);
}

TEST(Runner, RootOutOfRangeIsUsageError) {
  BenchOptions o = Small(&kBroadcastSpec, DType::kFloat32, ReduceOp::kSum);
  o.root = 5;
  EXPECT_THROW(Sweep(2, o), UsageError);
}

}  // namespace
}  // namespace ciuic
