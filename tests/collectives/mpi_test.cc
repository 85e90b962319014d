// Every collective x dtype x op over real Open MPI processes (run by ctest under mpiexec with 2 and
// 3 ranks), verified element by element; a planted wrong element on one rank is seen by all.
#include <gtest/gtest.h>

#include "bench/runner.h"
#include "collectives/backends/mpi/communicator.h"

namespace ciuic {
namespace {

Communicator* g_world = nullptr;

BenchSummary Sweep(BenchOptions o) {
  const BenchContext ctx = MakeContext(*g_world, o);
  return RunBench(*g_world, o, nullptr, ctx);
}

TEST(Mpi, EveryCollectiveDtypeOpVerifies) {
  for (const CollSpec* spec : AllCollectives()) {
    for (DType t : AllDTypes()) {
      const std::vector<ReduceOp> ops = spec->reduces ? AllReduceOps() : std::vector<ReduceOp>{ReduceOp::kSum};
      for (ReduceOp op : ops) {
        BenchOptions o;
        o.spec = spec;
        o.type = t;
        o.op = op;
        o.root = g_world->Size() - 1;
        o.sizes = {96, 4096, 300000};
        o.iters = 2;
        o.warmup = 1;
        o.check = 2;
        const BenchSummary s = Sweep(o);
        ASSERT_EQ(s.failed_rows, 0) << spec->name << " " << DTypeName(t) << " " << ReduceOpName(op);
        ASSERT_EQ(s.total_wrong, 0) << spec->name << " " << DTypeName(t) << " " << ReduceOpName(op);
      }
    }
  }
}

TEST(Mpi, PlantedWrongElementSeenByAllRanks) {
  BenchOptions o;
  o.spec = &kReduceScatterSpec;
  o.type = DType::kFloat16;
  o.sizes = {1 << 16};
  o.iters = 2;
  o.corrupt_rank = g_world->Size() - 1;
  o.corrupt_index = 3;
  const BenchSummary s = Sweep(o);
  EXPECT_EQ(s.total_wrong, 2);  // out-of-place and in-place, one check each
}

TEST(Mpi, SplitAndPointToPoint) {
  auto half = g_world->Split(g_world->Rank() % 2, g_world->Rank());
  double v = 1;
  half->HostAllReduce(&v, 1, ReduceOp::kSum);
  EXPECT_EQ(v, half->Size());
  const int n = g_world->Size(), r = g_world->Rank();
  int64_t token = r * 11, got = -1;
  auto rq = g_world->IRecv(&got, sizeof(got), (r + n - 1) % n, 9);
  auto sq = g_world->ISend(&token, sizeof(token), (r + 1) % n, 9);
  g_world->Wait(*sq);
  g_world->Wait(*rq);
  EXPECT_EQ(got, ((r + n - 1) % n) * 11);
}

}  // namespace
}  // namespace ciuic

int main(int argc, char** argv) {
  ciuic::MpiSession mpi(&argc, &argv);
  auto world = ciuic::MakeMpiWorld();
  ciuic::g_world = world.get();
  testing::InitGoogleTest(&argc, argv);
  if (world->Rank() != 0) {
    auto& listeners = testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  int failed = RUN_ALL_TESTS();
  double any = failed;
  world->HostAllReduce(&any, 1, ciuic::ReduceOp::kMax);
  world.reset();
  return any > 0 ? 1 : 0;
}
