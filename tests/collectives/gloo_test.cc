// The gloo backend with ranks as threads: a local world is the control plane, gloo's TCP pairs run
// over loopback. Every collective x dtype x op through ciuic-bench's runner (exact expected values
// for every element, in and out of place) on 2, 3 and 4 ranks, each allreduce algorithm on fresh
// random integer-valued inputs (CIUIC_TEST_SEED replays them), the runtime's ring and hier over gloo
// point-to-point, the file store, and a peer that leaves or never calls: an error naming it, not a hang.
#include <gtest/gtest.h>

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "bench/runner.h"
#include "collectives/algorithms/allreduce.h"
#include "collectives/backends/gloo/communicator.h"
#include "collectives/backends/local/communicator.h"
#include "core/config.h"
#include "core/error.h"
#include "tests/test_seed.h"

namespace ciuic {
namespace {

#define SKIP_WITHOUT_GLOO() \
  if (!CIUIC_HAVE_GLOO) GTEST_SKIP() << "this build has no Gloo"

GlooOptions Loopback(GlooAlgo algo = GlooAlgo::kAuto) {
  GlooOptions o;
  o.algo = algo;
  o.iface = "lo";
  o.timeout_s = 30;
  return o;
}

// fn on `ranks` threads, each with a gloo world bootstrapped over its local-world communicator.
void RunGloo(int ranks, const GlooOptions& options, const std::function<void(Communicator&)>& fn) {
  RunLocalRanks(ranks, [&](Communicator& base) {
    auto gloo = MakeGlooWorld(base.Split(0, base.Rank()), options);
    fn(*gloo);
    // Gloo's legacy algorithms finish on a rank once it has received what it needs, while its last
    // send may still wait in the pair's queue: a world torn down then closes the socket under it and a
    // peer still in the call reads "Connection closed by peer" (seen once at 4 ranks in a loaded run).
    // Every rank leaves only when all have finished.
    gloo->Barrier();
  });
}

BenchSummary Sweep(int ranks, const GlooOptions& options, const BenchOptions& o) {
  BenchSummary out;
  std::mutex mu;
  RunGloo(ranks, options, [&](Communicator& c) {
    const BenchContext ctx = MakeContext(c, o);
    const BenchSummary s = RunBench(c, o, nullptr, ctx);
    std::lock_guard lock(mu);
    if (c.Rank() == 0) out = s;
  });
  return out;
}

bool GlooReduces(DType t) { return t != DType::kBFloat16 && t != DType::kFloat8E4M3 && t != DType::kFloat8E5M2; }

BenchOptions Small(const CollSpec* spec) {
  BenchOptions o;
  o.spec = spec;
  o.sizes = {64, 65536 + 8};
  // One timed call and one checked call per row: the rows' cost is the runner's per-row exchanges,
  // and every element is checked either way.
  o.iters = 1;
  o.warmup = 0;
  o.check = 1;
  o.seed = testing_seed::TestSeed();
  return o;
}

// Every row of a sweep verified, and skipped exactly where the backend says it does not offer it.
void ExpectSweep(const BenchSummary& s, const CollSpec& spec, int ranks, const std::string& what) {
  ASSERT_EQ(s.failed_rows, 0) << what;
  ASSERT_EQ(s.total_wrong, 0) << what;
  for (const auto& r : s.all_rows) {
    const DType t = ParseDType(r.dtype);
    const bool offered = !(r.inplace && (spec.kind == Collective::kAllToAll || spec.kind == Collective::kSendRecv)) &&
                         (!spec.reduces || GlooReduces(t));
    const bool too_small = r.error.find("size below") != std::string::npos;
    if (too_small) continue;
    EXPECT_EQ(r.skipped, !offered) << what << " " << r.dtype << " " << r.redop << " " << r.size_bytes << " "
                                   << (r.inplace ? "in-place" : "out-of-place") << ": " << r.error;
    if (!offered) {
      EXPECT_NE(r.error.find("not supported by the gloo backend"), std::string::npos) << r.error;
    }
  }
  (void)ranks;
}

class GlooRanks : public testing::TestWithParam<int> {};

TEST_P(GlooRanks, EveryCollectiveDtypeOpVerifiesExactly) {
  SKIP_WITHOUT_GLOO();
  const int n = GetParam();
  for (const CollSpec* spec : AllCollectives()) {
    BenchOptions o = Small(spec);
    o.types = AllDTypes();
    o.ops = spec->reduces ? AllReduceOps() : std::vector<ReduceOp>{ReduceOp::kSum};
    o.type = o.types.front();
    o.op = o.ops.front();
    o.root = n - 1;
    const BenchSummary s = Sweep(n, Loopback(), o);
    ExpectSweep(s, *spec, n, fmt::format("{} n={}", spec->name, n));
    EXPECT_EQ(s.all_rows.size(), SweepCombinations(o).size() * o.sizes.size() * 2) << spec->name;
  }
}

TEST_P(GlooRanks, EachAllReduceAlgorithmVerifiesExactly) {
  SKIP_WITHOUT_GLOO();
  const int n = GetParam();
  for (GlooAlgo algo : {GlooAlgo::kRing, GlooAlgo::kRingChunked, GlooAlgo::kHalvingDoubling, GlooAlgo::kBcube}) {
    BenchOptions o = Small(&kAllReduceSpec);
    // Every dtype x op runs through the default algorithm above; here the types by width and the
    // ops by kind (a sum, a selection, the division after the sum).
    o.types = {DType::kFloat32, DType::kFloat16, DType::kInt64};
    o.ops = {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kAvg};
    o.type = o.types.front();
    o.op = o.ops.front();
    o.sizes = {4, 1000, (1 << 20) + 8};
    const BenchSummary s = Sweep(n, Loopback(algo), o);
    ExpectSweep(s, kAllReduceSpec, n, fmt::format("allreduce {} n={}", GlooAlgoName(algo), n));
  }
}

// Hand-checked sums of fresh random integers held in floats (exact in fp32 at these magnitudes), with
// counts that do not divide among the ranks: every element, every algorithm, both placements.
TEST_P(GlooRanks, RandomIntegerSumsEveryAlgorithm) {
  SKIP_WITHOUT_GLOO();
  const int n = GetParam();
  const uint64_t seed = testing_seed::TestSeed();
  for (GlooAlgo algo :
       {GlooAlgo::kAuto, GlooAlgo::kRing, GlooAlgo::kRingChunked, GlooAlgo::kHalvingDoubling, GlooAlgo::kBcube}) {
    RunGloo(n, Loopback(algo), [&](Communicator& c) {
      for (size_t count : {1ul, 7ul, 1001ul, 300001ul}) {
        std::vector<std::vector<float>> in(n);
        for (int r = 0; r < n; ++r) {
          std::mt19937_64 rng(seed + r * 7919 + count);
          std::uniform_int_distribution<int> d(-100000, 100000);
          in[r].resize(count);
          for (float& x : in[r]) x = static_cast<float>(d(rng));
        }
        std::vector<float> want(count, 0);
        for (int r = 0; r < n; ++r)
          for (size_t i = 0; i < count; ++i) want[i] += in[r][i];
        std::vector<float> out(count, -1);
        c.AllReduce(in[c.Rank()].data(), out.data(), count, DType::kFloat32, ReduceOp::kSum);
        for (size_t i = 0; i < count; ++i)
          ASSERT_EQ(out[i], want[i]) << GlooAlgoName(algo) << " count " << count << " element " << i << " seed "
                                     << seed;
        std::vector<float> buf = in[c.Rank()];
        c.AllReduce(buf.data(), buf.data(), count, DType::kFloat32, ReduceOp::kSum);
        ASSERT_EQ(buf, want) << GlooAlgoName(algo) << " in place, count " << count << " seed " << seed;
      }
    });
  }
}

// The runtime's own algorithms over gloo's pairs (ISend/IRecv/Wait on unbound buffers), the
// hierarchy over sub-worlds made by Split (their own rendezvous), and the ring staged through the
// engine's window between gloo's barriers: exact integer sums.
TEST_P(GlooRanks, RuntimeRingAndHierOverGlooPointToPoint) {
  SKIP_WITHOUT_GLOO();
  const int n = GetParam();
  const uint64_t seed = testing_seed::TestSeed();
  std::vector<AlgoConfig> configs(3);
  configs[0].algo = AllReduceAlgo::kRing;
  configs[0].piece_bytes = 4096;
  configs[0].staged_bytes = 0;  // over gloo's pairs
  configs[1].algo = AllReduceAlgo::kHierarchical;
  configs[1].ranks_per_node = n % 2 == 0 ? 2 : 1;
  configs[1].piece_bytes = 4096;
  configs[2].algo = AllReduceAlgo::kRing;  // staged: every count below fits its 1 MiB
  for (const AlgoConfig& cfg : configs) {
    RunGloo(n, Loopback(), [&](Communicator& c) {
      AllReduceEngine engine(c, cfg);
      for (size_t count : {3ul, 1000ul, 100003ul}) {
        std::vector<double> want(count, 0);
        std::vector<float> mine;
        for (int r = 0; r < n; ++r) {
          std::mt19937_64 rng(seed + r * 104729 + count);
          std::uniform_int_distribution<int> d(-1000, 1000);
          for (size_t i = 0; i < count; ++i) {
            const float x = static_cast<float>(d(rng));
            want[i] += x;
            if (r == c.Rank()) mine.push_back(x);
          }
        }
        engine.Run(mine.data(), count, nullptr, false);
        for (size_t i = 0; i < count; ++i)
          ASSERT_EQ(mine[i], static_cast<float>(want[i]))
              << AlgoName(cfg.algo) << " count " << count << " element " << i;
      }
      const bool staged = cfg.algo == AllReduceAlgo::kRing && cfg.staged_bytes > 0 && n > 1;
      EXPECT_EQ(engine.counters().staged_calls, staged ? 3u : 0u) << AlgoName(cfg.algo);
    });
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, GlooRanks, testing::Values(2, 3, 4));

TEST(Gloo, FileStoreRendezvousLeavesNoFiles) {
  SKIP_WITHOUT_GLOO();
  const auto dir = std::filesystem::temp_directory_path() / fmt::format("ciuic-gloo-store-{}", getpid());
  std::filesystem::create_directories(dir);
  GlooOptions o = Loopback();
  o.store_dir = dir.string();
  RunGloo(3, o, [&](Communicator& c) {
    std::vector<int32_t> v(5, c.Rank() + 1);
    c.AllReduce(v.data(), v.data(), v.size(), DType::kInt32, ReduceOp::kSum);
    for (int x : v) ASSERT_EQ(x, 6);
    auto sub = c.Split(c.Rank() % 2, c.Rank());
    std::vector<int32_t> w(3, c.Rank());
    sub->AllReduce(w.data(), w.data(), w.size(), DType::kInt32, ReduceOp::kSum);
    for (int x : w) ASSERT_EQ(x, c.Rank() % 2 == 0 ? 0 + 2 : 1);
  });
  EXPECT_TRUE(std::filesystem::is_empty(dir));
  std::filesystem::remove_all(dir);
}

TEST(Gloo, NamesItselfAndItsAlgorithms) {
  SKIP_WITHOUT_GLOO();
  EXPECT_EQ(GlooVersion(), "Gloo 0.5.0");
  EXPECT_EQ(ParseGlooAlgo("halving-doubling"), GlooAlgo::kHalvingDoubling);
  EXPECT_STREQ(GlooAlgoName(GlooAlgo::kAuto), "ring");
  EXPECT_THROW(ParseGlooAlgo("rd"), UsageError);
  EXPECT_THROW(CheckGlooInterface("nosuchif0", "--gloo-iface"), UsageError);
  RunGloo(2, Loopback(), [&](Communicator& c) {
    EXPECT_EQ(c.BackendName(), "gloo");
    EXPECT_EQ(c.LibraryVersion(), "Gloo 0.5.0");
  });
}

// A peer that is gone (its connections closed) fails the call at once; one that never calls fails it
// at gloo's timeout. Either way a RuntimeError naming the call, the rank and the peer (whose
// connection closed, or whom the call waits for), within seconds.
TEST(Gloo, DeadOrSilentPeerIsAnErrorNotAHang) {
  SKIP_WITHOUT_GLOO();
  for (const bool gone : {true, false}) {
    GlooOptions o = Loopback();
    o.timeout_s = 2;
    std::string message;
    std::mutex mu;
    const auto start = std::chrono::steady_clock::now();
    RunLocalRanks(2, [&](Communicator& base) {
      auto gloo = MakeGlooWorld(base.Split(0, base.Rank()), o);
      base.Barrier();
      if (base.Rank() == 1) {
        if (gone) gloo.reset();
        base.Barrier();  // rank 0 is now in its call
        if (!gone) std::this_thread::sleep_for(std::chrono::seconds(4));
        return;
      }
      std::vector<float> v(1 << 16, 1.0f);
      try {
        base.Barrier();
        gloo->AllReduce(v.data(), v.data(), v.size(), DType::kFloat32, ReduceOp::kSum);
      } catch (const RuntimeError& e) {
        std::lock_guard lock(mu);
        message = e.what();
      }
    });
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_NE(message.find("rank 0"), std::string::npos) << message;
    EXPECT_NE(message.find("allreduce"), std::string::npos) << message;
    EXPECT_NE(message.find(gone ? "(the connection to rank 1)" : "(waiting for rank 1)"), std::string::npos) << message;
    EXPECT_LT(s, 10) << message;
  }
}

// The runtime's algorithms over gloo move their bytes point to point: a transfer whose peer is gone
// names that peer (gloo's own error gives a connection's address, not a rank).
TEST(Gloo, APointToPointTransferNamesTheDeadPeer) {
  SKIP_WITHOUT_GLOO();
  GlooOptions o = Loopback();
  o.timeout_s = 2;
  std::string message;
  RunLocalRanks(3, [&](Communicator& base) {
    auto gloo = MakeGlooWorld(base.Split(0, base.Rank()), o);
    base.Barrier();
    if (base.Rank() == 2) gloo.reset();  // its connections close
    base.Barrier();
    if (base.Rank() != 0) return;
    std::vector<float> v(1 << 16, 1.0f);
    try {
      auto r = gloo->IRecv(v.data(), v.size() * 4, 2, 5);
      gloo->Wait(*r);
    } catch (const RuntimeError& e) {
      message = e.what();
    }
  });
  EXPECT_NE(message.find("(a receive from rank 2)"), std::string::npos) << message;
}

}  // namespace
}  // namespace ciuic
