// Whole sweeps over the local backend: every collective, dtype and op verifies at 0 wrong on 1..8
// ranks; busbw = algbw x the documented factor; a planted wrong element is counted exactly once.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <string>

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

// Rank counts of the full sweep: 1, 2, 3 and 8. $CIUIC_TEST_RANKS (a comma list) narrows them where a
// sanitizer makes every rank-thread costly (scripts/test.sh's ASan stage: 2,3 — the 8-rank sweep
// took most of that stage's 190 s).
std::vector<int> SweepRankCounts() {
  std::vector<int> out;
  if (const char* env = std::getenv("CIUIC_TEST_RANKS"); env && *env) {
    std::string text = env;
    size_t at = 0;
    while (at <= text.size()) {
      const size_t comma = std::min(text.find(',', at), text.size());
      out.push_back(std::stoi(text.substr(at, comma - at)));
      at = comma + 1;
    }
    return out;
  }
  return {1, 2, 3, 8};
}

TEST(Runner, EveryCollectiveDtypeOpVerifies) {
  for (int ranks : SweepRankCounts()) {
    for (const CollSpec* spec : AllCollectives()) {
      for (DType t : AllDTypes()) {
        const std::vector<ReduceOp> ops = spec->reduces ? AllReduceOps() : std::vector<ReduceOp>{ReduceOp::kSum};
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
  const Want wants[] = {{&kAllReduceSpec, 1.5}, {&kAllGatherSpec, 0.75}, {&kReduceScatterSpec, 0.75},
                        {&kAllToAllSpec, 0.75}, {&kBroadcastSpec, 1.0},  {&kReduceSpec, 1.0},
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

namespace ciuic {
namespace {

TEST(Runner, OneRankInPlaceMovesNoBytesAndNeverSetsThePeak) {
  BenchOptions o = Small(&kBroadcastSpec, DType::kFloat32, ReduceOp::kSum);
  o.out_of_place = false;
  const BenchSummary s = Sweep(1, o);
  ASSERT_EQ(s.rows, 4);
  for (const BenchRow& r : s.all_rows) {
    EXPECT_FALSE(r.moves_bytes);
    EXPECT_EQ(r.busbw_gbps, 0.0);
    EXPECT_GT(r.time_us, 0.0);
  }
  EXPECT_EQ(s.peak_size_bytes, 0u);
  EXPECT_EQ(s.peak_busbw_gbps, 0.0);
  o.out_of_place = true;  // an out-of-place broadcast on one rank copies: that row counts
  const BenchSummary c = Sweep(1, o);
  EXPECT_GT(c.peak_size_bytes, 0u);
  EXPECT_FALSE(c.peak_inplace);
}

// Rank r holds r + 1 (and 10 (r + 1) in a second element): each statistic is what it names.
TEST(Runner, AverageCombinesTheRanksAsNamed) {
  EXPECT_EQ(ParseAverage("avg"), Average::kAvg);
  EXPECT_EQ(ParseAverage("rank0"), Average::kRank0);
  EXPECT_THROW(ParseAverage("mean"), UsageError);
  struct Want {
    Average a;
    double value;  // for 4 ranks
  };
  for (const Want w :
       {Want{Average::kAvg, 2.5}, Want{Average::kMax, 4}, Want{Average::kMin, 1}, Want{Average::kRank0, 1}}) {
    RunLocalRanks(4, [&](Communicator& c) {
      double v[2] = {c.Rank() + 1.0, 10.0 * (c.Rank() + 1)};
      CombineRanks(c, w.a, v, 2);
      EXPECT_EQ(v[0], w.value) << AverageName(w.a) << " rank " << c.Rank();
      EXPECT_EQ(v[1], 10 * w.value) << AverageName(w.a) << " rank " << c.Rank();
    });
  }
}

TEST(Runner, SmallMessagesGetManyTimedIterations) {
  BenchOptions o = Small(&kAllReduceSpec, DType::kFloat32, ReduceOp::kSum);
  o.iters = -1;
  o.warmup = -1;
  o.sizes = {64, 4 << 20};
  o.row_budget_s = 0.5;
  const BenchSummary s = Sweep(2, o);
  ASSERT_EQ(s.all_rows.size(), 4u);
  EXPECT_GE(s.all_rows[0].iters, 200);  // 64 B: up to 1000 within the budget (a few µs each)
  EXPECT_LE(s.all_rows[0].iters, 1000);
  EXPECT_LE(s.all_rows[2].iters, 20);  // 4 MiB: nccl-tests' 20 at most
  EXPECT_GE(s.all_rows[2].iters, 3);
}

}  // namespace
}  // namespace ciuic

namespace ciuic {
namespace {

// Ranks launched with different options (an MPMD launch) agree before each row, and every rank
// fails with the same usage error naming the field and the ranks instead of hanging.
TEST(Runner, RanksWithOtherOptionsFailTogetherBeforeTheRow) {
  struct Case {
    const char* field;
    void (*change)(BenchOptions&);
  };
  const Case cases[] = {
      {"element count",
       [](BenchOptions& o) {
         o.sizes = {128, 1000, 4096, 65536 + 8};
       }},
      {"number of sizes", [](BenchOptions& o) { o.sizes.push_back(1 << 20); }},
      {"dtype", [](BenchOptions& o) { o.type = DType::kInt32; }},
      {"op", [](BenchOptions& o) { o.op = ReduceOp::kMax; }},
      {"timing options", [](BenchOptions& o) { o.iters = 3; }},
      {"collective", [](BenchOptions& o) { o.spec = &kReduceScatterSpec; }},
  };
  for (const Case& k : cases) {
    std::vector<std::string> errors(3);
    RunLocalRanks(3, [&](Communicator& c) {
      BenchOptions o = Small(&kAllReduceSpec, DType::kFloat32, ReduceOp::kSum);
      if (c.Rank() == 2) k.change(o);
      const BenchContext ctx = MakeContext(c, o);
      try {
        RunBench(c, o, nullptr, ctx);
      } catch (const UsageError& e) {
        errors[c.Rank()] = e.what();
      }
    });
    for (int r = 0; r < 3; ++r) {
      EXPECT_NE(errors[r].find(k.field), std::string::npos) << k.field << " on rank " << r << ": " << errors[r];
      EXPECT_NE(errors[r].find("rank(s) 2 have"), std::string::npos) << errors[r];
      EXPECT_EQ(errors[r], errors[0]);
    }
  }
}

}  // namespace
}  // namespace ciuic
