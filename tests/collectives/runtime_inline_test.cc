// ciuic::Runtime's small calls (collectives/runtime.cc): a bucket of up to 22 floats that runs the
// transport's fp32 allreduce on host memory travels inside the call agreement's own message, so the
// safe call makes one exchange, not two. These tests hold it to what the two exchanges gave: the
// transport's bits on 2 ranks (sum and average), one agreed result from 3 ranks, a call disagreement
// or a NaN/Inf failing (or propagating) on every rank alike, and larger or compressed calls unchanged.
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "collectives/crossover.h"
#include "collectives/runtime.h"
#include "core/error.h"
#include "tests/test_seed.h"
#include "tests/traced_ranks.h"

namespace ciuic {
namespace {

// Floats over a wide range of magnitudes and both signs (the sums round), distinct per rank and call,
// from the test process's seed (CIUIC_TEST_SEED replays it).
// Each test sets it on its own thread before its ranks draw.
uint32_t g_seed = 0;

std::vector<float> Spread(int rank, size_t n, uint32_t call) {
  std::mt19937 rng(g_seed ^ (1000u * call + static_cast<uint32_t>(rank) + 1));
  std::uniform_real_distribution<float> mant(-1.0f, 1.0f);
  std::uniform_int_distribution<int> expo(-30, 30);
  std::vector<float> v(n);
  for (auto& x : v) x = std::ldexp(mant(rng), expo(rng));
  return v;
}

RuntimeConfig Native() {
  RuntimeConfig c;
  c.algo.algo = AllReduceAlgo::kNative;
  return c;
}

// The bits of a float vector, for exact comparison (NaN too).
std::vector<uint32_t> Bits(const std::vector<float>& v) {
  std::vector<uint32_t> b(v.size());
  std::memcpy(b.data(), v.data(), v.size() * 4);
  return b;
}

TEST(RuntimeInline, SmallNativeCallsGiveTheTransportsBitsInOneExchange) {
  g_seed = testing_seed::TestSeed();
  for (const bool average : {false, true}) {
    for (const size_t n : {size_t{1}, size_t{2}, size_t{7}, size_t{22}, size_t{23}, size_t{100}}) {
      std::vector<std::vector<float>> got(2), want(2);
      uint64_t calls[2] = {};
      const auto events = testing_trace::TracedRanks(2, [&](Communicator& comm) {
        const int r = comm.Rank();
        Runtime rt(comm, Native());
        std::vector<float> x = Spread(r, n, 1);
        std::vector<float> ref = x;
        comm.AllReduce(ref.data(), ref.data(), n, DType::kFloat32, average ? ReduceOp::kAvg : ReduceOp::kSum);
        rt.AllReduce(x.data(), n, 3, average);
        got[r] = x;
        want[r] = ref;
        calls[r] = rt.counters().calls;
      });
      const std::string what = "n " + std::to_string(n) + (average ? ", average" : ", sum");
      for (int r = 0; r < 2; ++r) {
        EXPECT_EQ(Bits(got[r]), Bits(want[r])) << what << ", rank " << r;
        EXPECT_EQ(calls[r], 1u) << what;  // counted as the engine's call either way
        // Up to 22 floats the agreement carried the call; above, the transport's call ran after it.
        EXPECT_EQ(testing_trace::HasSpan(events[r], "inline native"), n <= 22) << what << ", rank " << r;
        EXPECT_EQ(testing_trace::HasSpan(events[r], "native allreduce"), n > 22) << what << ", rank " << r;
      }
    }
  }
}

TEST(RuntimeInline, FromThreeRanksEveryRankHoldsTheSameRoundedSum) {
  g_seed = testing_seed::TestSeed();
  for (const int ranks : {3, 4}) {
    std::vector<std::vector<float>> got(static_cast<size_t>(ranks));
    RunLocalRanks(ranks, [&](Communicator& comm) {
      Runtime rt(comm, Native());
      std::vector<float> x = Spread(comm.Rank(), 22, 2);
      rt.AllReduce(x.data(), x.size(), 1);
      got[static_cast<size_t>(comm.Rank())] = x;
    });
    // The sum of each float over the ranks in fp64, rounded once.
    for (size_t i = 0; i < 22; ++i) {
      double sum = 0;
      for (int r = 0; r < ranks; ++r) sum += Spread(r, 22, 2)[i];
      EXPECT_EQ(got[0][i], static_cast<float>(sum)) << ranks << " ranks, element " << i;
    }
    for (int r = 1; r < ranks; ++r) EXPECT_EQ(Bits(got[static_cast<size_t>(r)]), Bits(got[0])) << "rank " << r;
  }
}

// Auto whose table names native for small messages carries them too; a table naming the ring, a
// codec or a 16-bit precision does not (their results are not the transport's fp32 sum).
TEST(RuntimeInline, OnlyCallsThatRunTheTransportsFp32SumTravelInline) {
  struct Case {
    const char* name;
    RuntimeConfig cfg;
    bool inline_sum;
  };
  std::vector<Case> cases;
  {
    RuntimeConfig c;
    auto table = std::make_shared<Crossover>();
    table->source = "test";
    table->bands = {{64, AllReduceAlgo::kNative}, {UINT64_MAX, AllReduceAlgo::kRing}};
    c.algo.crossover = table;
    cases.push_back({"auto, native below 64 B", c, true});
    auto ring = std::make_shared<Crossover>(*table);
    ring->bands = {{64, AllReduceAlgo::kRing}, {UINT64_MAX, AllReduceAlgo::kNative}};
    c.algo.crossover = ring;
    cases.push_back({"auto, ring below 64 B", c, false});
  }
  {
    RuntimeConfig c = Native();
    c.algo.precision = DType::kBFloat16;
    cases.push_back({"native in bf16", c, false});
  }
  {
    RuntimeConfig c;
    c.algo.algo = AllReduceAlgo::kRing;
    c.algo.codec = ParseCodec("int8");
    cases.push_back({"ring int8", c, false});
  }
  {
    RuntimeConfig c = Native();
    c.check_finite = false;  // no agreement: nothing to carry the call in
    cases.push_back({"native without the agreement", c, false});
  }
  for (const Case& k : cases) {
    std::vector<float> got(2);
    const auto events = testing_trace::TracedRanks(2, [&](Communicator& comm) {
      Runtime rt(comm, k.cfg);
      std::vector<float> x(8, static_cast<float>(comm.Rank() + 1));
      rt.AllReduce(x.data(), x.size(), 1);
      got[static_cast<size_t>(comm.Rank())] = x[0];
    });
    for (int r = 0; r < 2; ++r) {
      EXPECT_EQ(testing_trace::HasSpan(events[r], "inline native"), k.inline_sum) << k.name << ", rank " << r;
      EXPECT_EQ(got[static_cast<size_t>(r)], 3.0f) << k.name;
    }
  }
}

// A rank whose call differs (another size, one inline and one not, or both inline) fails with every
// other rank, naming it, and nothing is written into any rank's data; the world works afterwards.
TEST(RuntimeInline, ADisagreementOnASmallCallFailsEveryRankAndChangesNothing) {
  g_seed = testing_seed::TestSeed();
  for (const size_t odd : {size_t{5}, size_t{40}}) {
    std::vector<std::string> errors(3);
    std::vector<int> unchanged(3, 0);
    std::vector<float> after(3, 0.0f);
    RunLocalRanks(3, [&](Communicator& comm) {
      const int r = comm.Rank();
      Runtime rt(comm, Native());
      const size_t n = r == 1 ? odd : 6;
      std::vector<float> x = Spread(r, n, 3);
      const std::vector<float> before = x;
      try {
        rt.AllReduce(x.data(), n, 9);
      } catch (const UsageError& e) {
        errors[static_cast<size_t>(r)] = e.what();
      }
      unchanged[static_cast<size_t>(r)] = Bits(x) == Bits(before);
      std::vector<float> y(4, 1.0f);
      rt.AllReduce(y.data(), y.size(), 9);
      after[static_cast<size_t>(r)] = y[3];
    });
    for (int r = 0; r < 3; ++r) {
      const std::string& e = errors[static_cast<size_t>(r)];
      EXPECT_NE(e.find("rank 1 tensor 9 bucket 0 (" + std::to_string(odd) + " elements)"), std::string::npos)
          << "odd " << odd << ", rank " << r << ": " << e;
      EXPECT_EQ(e, errors[0]);
      EXPECT_TRUE(unchanged[static_cast<size_t>(r)]) << "odd " << odd << ", rank " << r;
      EXPECT_EQ(after[static_cast<size_t>(r)], 3.0f) << "odd " << odd << ", rank " << r;
    }
  }
}

// Ranks whose precision differs (one would sum inline, the other call the transport in bf16) fail
// together, naming the rank, instead of pairing one rank's call with another's next agreement.
TEST(RuntimeInline, RanksWithAnotherPrecisionFailTogether) {
  std::vector<std::string> errors(2);
  RunLocalRanks(2, [&](Communicator& comm) {
    RuntimeConfig c = Native();
    if (comm.Rank() == 1) c.algo.precision = DType::kBFloat16;
    Runtime rt(comm, c);
    std::vector<float> x(4, 1.0f);
    try {
      rt.AllReduce(x.data(), x.size(), 1);
    } catch (const UsageError& e) {
      errors[static_cast<size_t>(comm.Rank())] = e.what();
    }
  });
  for (const std::string& e : errors)
    EXPECT_NE(e.find("rank 1 run another codec, algorithm, precision or bucket size"), std::string::npos) << e;
}

// A NaN on one rank: with propagation every rank holds the plain sum (the NaN where it was, the
// others summed) and counts it; without, every rank refuses and its data stays as it was.
TEST(RuntimeInline, ANanInASmallCallPropagatesOrFailsOnEveryRank) {
  for (const bool propagate : {true, false}) {
    std::vector<std::vector<float>> got(2);
    std::vector<std::string> errors(2);
    std::vector<uint64_t> counted(2);
    RunLocalRanks(2, [&](Communicator& comm) {
      const int r = comm.Rank();
      RuntimeConfig c = Native();
      c.propagate_nonfinite = propagate;
      Runtime rt(comm, c);
      std::vector<float> x = {1.0f, 2.0f, 3.0f, 4.0f};
      if (r == 1) x[2] = std::numeric_limits<float>::quiet_NaN();
      try {
        rt.AllReduce(x.data(), x.size(), 2);
      } catch (const InputError& e) {
        errors[static_cast<size_t>(r)] = e.what();
      }
      got[static_cast<size_t>(r)] = x;
      counted[static_cast<size_t>(r)] = rt.nonfinite();
    });
    for (int r = 0; r < 2; ++r) {
      const auto& x = got[static_cast<size_t>(r)];
      if (propagate) {
        EXPECT_EQ(errors[static_cast<size_t>(r)], "") << "rank " << r;
        EXPECT_EQ(x[0], 2.0f);
        EXPECT_EQ(x[1], 4.0f);
        EXPECT_TRUE(std::isnan(x[2]));
        EXPECT_EQ(x[3], 8.0f);
        EXPECT_EQ(counted[static_cast<size_t>(r)], 1u);
      } else {
        EXPECT_NE(errors[static_cast<size_t>(r)].find("NaN or Inf on rank 1"), std::string::npos)
            << errors[static_cast<size_t>(r)];
        EXPECT_EQ(x[0], 1.0f) << "rank " << r << ": nothing reduced";
        EXPECT_EQ(x[3], 4.0f) << "rank " << r;
      }
    }
  }
}

}  // namespace
}  // namespace ciuic
