// Runtime allreduce algorithms over the thread backend, 1..16 ranks: exact sums for lossless runs,
// stated bounds for lossy codecs, identical bits on every rank, and the error-feedback invariant.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <mutex>
#include <random>
#include <vector>

#include "collectives/algorithms/allreduce.h"
#include "collectives/runtime.h"

#include <atomic>
#include <cstdio>
#include "collectives/backends/local/communicator.h"
#include "core/error.h"

namespace ciuic {
namespace {

std::vector<float> Gradient(int rank, size_t n, uint64_t step, bool integers = false) {
  std::mt19937_64 rng(rank * 1000003ull + step * 7919ull + n);
  std::vector<float> g(n);
  if (integers) {
    std::uniform_int_distribution<int> d(-1000, 1000);
    for (float& x : g) x = static_cast<float>(d(rng));
  } else {
    std::normal_distribution<float> d(0.0f, 1e-2f);
    for (float& x : g) x = d(rng);
  }
  return g;
}

struct Outcome {
  std::vector<std::vector<float>> results;  // per rank
};

// Runs one allreduce of per-rank gradients on `ranks` threads.
Outcome RunOnce(int ranks, const AlgoConfig& cfg, size_t n, bool integers) {
  Outcome o;
  o.results.resize(ranks);
  RunLocalRanks(ranks, [&](Communicator& comm) {
    AllReduceEngine engine(comm, cfg);
    std::vector<float> data = Gradient(comm.Rank(), n, 0, integers);
    CodecState st;
    engine.Run(data.data(), n, &st, false);
    o.results[comm.Rank()] = data;
  });
  return o;
}

std::vector<double> ExactSum(int ranks, size_t n, bool integers) {
  std::vector<double> s(n, 0.0);
  for (int r = 0; r < ranks; ++r) {
    const auto g = Gradient(r, n, 0, integers);
    for (size_t i = 0; i < n; ++i) s[i] += g[i];
  }
  return s;
}

void ExpectIdenticalOnAllRanks(const Outcome& o, const std::string& what) {
  for (size_t r = 1; r < o.results.size(); ++r)
    ASSERT_EQ(0, std::memcmp(o.results[r].data(), o.results[0].data(), o.results[0].size() * 4))
        << what << ": rank " << r << " differs from rank 0";
}

AlgoConfig Config(AllReduceAlgo algo, const char* codec, size_t piece = 4096, int rpn = 0) {
  AlgoConfig c;
  c.algo = algo;
  c.codec = ParseCodec(codec);
  c.codec.block = 64;
  c.piece_bytes = piece;
  c.in_flight = 3;
  c.ranks_per_node = rpn;
  return c;
}

TEST(AllReduceAlgo, LosslessAlgorithmsAreExactFrom1To16Ranks) {
  for (int ranks : {1, 2, 3, 4, 5, 7, 8, 16}) {
    for (size_t n : {size_t{1}, size_t{13}, size_t{5000}}) {
      const auto want = ExactSum(ranks, n, true);
      std::vector<AlgoConfig> cfgs = {Config(AllReduceAlgo::kRing, "none"),
                                      Config(AllReduceAlgo::kRecursiveDoubling, "none")};
      if (ranks % 2 == 0) cfgs.push_back(Config(AllReduceAlgo::kHierarchical, "none", 4096, 2));
      if (ranks % 4 == 0) cfgs.push_back(Config(AllReduceAlgo::kHierarchical, "none", 4096, 4));
      if (ranks % 4 == 0) {  // depth 3: pairs of ranks per node, pairs of nodes per group
        cfgs.push_back(Config(AllReduceAlgo::kHierarchical, "none", 4096, 2));
        cfgs.back().nodes_per_group = 2;
      }
      for (const AlgoConfig& cfg : cfgs) {
        const Outcome o = RunOnce(ranks, cfg, n, true);
        const std::string what = fmt::format("{} ranks={} n={}", AlgoName(cfg.algo), ranks, n);
        ExpectIdenticalOnAllRanks(o, what);
        for (size_t i = 0; i < n; ++i) ASSERT_EQ(o.results[0][i], static_cast<float>(want[i])) << what << " i=" << i;
      }
    }
  }
}

struct LossyCase {
  AllReduceAlgo algo;
  const char* codec;
  double rel_l2_bound;  // stated bound on ||result - exact|| / ||exact|| for normal gradients
};

class LossyAlgo : public ::testing::TestWithParam<LossyCase> {};

TEST_P(LossyAlgo, IdenticalBitsAndWithinTheStatedBound) {
  const LossyCase c = GetParam();
  for (int ranks : {1, 2, 3, 4, 8, 16}) {
    const size_t n = 4099;
    AlgoConfig cfg = Config(c.algo, c.codec);
    if (c.algo == AllReduceAlgo::kHierarchical && ranks % 2 != 0) continue;
    if (c.algo == AllReduceAlgo::kHierarchical) cfg.ranks_per_node = 2;
    if (c.algo == AllReduceAlgo::kHierarchical && ranks % 4 == 0) cfg.nodes_per_group = 2;  // depth 3
    const Outcome o = RunOnce(ranks, cfg, n, false);
    const std::string what = fmt::format("{} {} ranks={}", AlgoName(c.algo), c.codec, ranks);
    ExpectIdenticalOnAllRanks(o, what);
    const auto want = ExactSum(ranks, n, false);
    double num = 0, den = 0;
    for (size_t i = 0; i < n; ++i) {
      ASSERT_TRUE(std::isfinite(o.results[0][i])) << what;
      num += (o.results[0][i] - want[i]) * (o.results[0][i] - want[i]);
      den += want[i] * want[i];
    }
    EXPECT_LE(std::sqrt(num / den), c.rel_l2_bound) << what;
  }
}

// Bounds: casts and 8-bit formats re-round at each of the P-1 hops (error grows ~ sqrt(P) × one
// rounding); int4/sign1/sparse/low-rank are coarse by design (one step, no feedback yet).
INSTANTIATE_TEST_SUITE_P(
    Codecs, LossyAlgo,
    ::testing::Values(LossyCase{AllReduceAlgo::kRing, "fp16", 2e-3}, LossyCase{AllReduceAlgo::kRing, "bf16", 2e-2},
                      LossyCase{AllReduceAlgo::kRing, "int8", 5e-2}, LossyCase{AllReduceAlgo::kRing, "fp8e4m3", 0.15},
                      LossyCase{AllReduceAlgo::kRing, "fp8e5m2", 0.3}, LossyCase{AllReduceAlgo::kRing, "int4", 0.6},
                      LossyCase{AllReduceAlgo::kRing, "sign1", 2.0},
                      LossyCase{AllReduceAlgo::kHierarchical, "int8", 5e-2},
                      LossyCase{AllReduceAlgo::kHierarchical, "fp16", 2e-3},
                      LossyCase{AllReduceAlgo::kHierarchical, "bf16", 2e-2},
                      LossyCase{AllReduceAlgo::kHierarchical, "fp8e4m3", 0.15},
                      LossyCase{AllReduceAlgo::kHierarchical, "fp8e5m2", 0.3},
                      LossyCase{AllReduceAlgo::kHierarchical, "int4", 0.6},
                      LossyCase{AllReduceAlgo::kHierarchical, "sign1", 2.0},
                      LossyCase{AllReduceAlgo::kSparse, "topk:0.3", 1.0},
                      LossyCase{AllReduceAlgo::kRing, "randomk:0.5", 1.0},
                      LossyCase{AllReduceAlgo::kTwoPhaseSign, "sign1", 1.5},
                      LossyCase{AllReduceAlgo::kPowerSgd, "powersgd:4", 1.0}),
    [](const auto& info) {
      std::string s = std::string(AlgoName(info.param.algo)) + "_" + info.param.codec;
      for (char& ch : s)
        if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
      return s;
    });

// Σ over steps of the allreduce result + Σ over ranks of the final residuals = Σ of all gradients, for
// the schemes whose result is the sum of what each rank contributed (sparse, randomk, sign2, powersgd).
class FeedbackInvariant : public ::testing::TestWithParam<LossyCase> {};

TEST_P(FeedbackInvariant, HoldsOver50Steps) {
  const LossyCase c = GetParam();
  const int ranks = 4;
  const size_t n = 2000;
  std::vector<double> sent(n, 0.0), total(n, 0.0), residuals(n, 0.0);
  double scale = 0;
  std::mutex mu;
  RunLocalRanks(ranks, [&](Communicator& comm) {
    AllReduceEngine engine(comm, Config(c.algo, c.codec));
    CodecState st;
    for (int t = 0; t < 50; ++t) {
      std::vector<float> g = Gradient(comm.Rank(), n, static_cast<uint64_t>(t));
      {
        std::lock_guard lock(mu);
        for (size_t i = 0; i < n; ++i) {
          total[i] += g[i];
          scale = std::max(scale, std::fabs(static_cast<double>(g[i])));
        }
      }
      engine.Run(g.data(), n, &st, false);
      if (comm.Rank() == 0)
        for (size_t i = 0; i < n; ++i) sent[i] += g[i];
    }
    std::lock_guard lock(mu);
    if (st.residual.bytes())
      for (size_t i = 0; i < n; ++i) residuals[i] += st.residual.as<float>()[i];
    if (st.server_residual.bytes()) {
      // Server residuals cover the rank's own chunk of a 4-way split on 64-element blocks.
      const size_t units = (n + 63) / 64, b = units * comm.Rank() / ranks * 64;
      const size_t e = std::min(n, units * (comm.Rank() + 1) / ranks * 64);
      for (size_t i = b; i < e; ++i) residuals[i] += st.server_residual.as<float>()[i - b];
    }
  });
  double worst = 0;
  for (size_t i = 0; i < n; ++i) worst = std::max(worst, std::fabs(sent[i] + residuals[i] - total[i]));
  EXPECT_LE(worst, 2e-3 * scale) << AlgoName(c.algo) << " " << c.codec;
}

INSTANTIATE_TEST_SUITE_P(Schemes, FeedbackInvariant,
                         ::testing::Values(LossyCase{AllReduceAlgo::kSparse, "topk:0.05", 0},
                                           LossyCase{AllReduceAlgo::kRing, "randomk:0.05", 0},
                                           LossyCase{AllReduceAlgo::kTwoPhaseSign, "sign1", 0},
                                           LossyCase{AllReduceAlgo::kPowerSgd, "powersgd:2", 0}),
                         [](const auto& info) {
                           std::string s = std::string(AlgoName(info.param.algo));
                           return s;
                         });

TEST(AllReduceAlgo, AlgorithmCodecMismatchIsAUsageError) {
  RunLocalRanks(1, [](Communicator& comm) {
    EXPECT_THROW(AllReduceEngine(comm, Config(AllReduceAlgo::kRecursiveDoubling, "int8")), UsageError);
    EXPECT_THROW(AllReduceEngine(comm, Config(AllReduceAlgo::kSparse, "int8")), UsageError);
    EXPECT_THROW(AllReduceEngine(comm, Config(AllReduceAlgo::kRing, "topk:0.1")), UsageError);
    EXPECT_THROW(ParseAlgo("tree"), UsageError);
  });
}

TEST(AllReduceAlgo, NativeInFp32IsTheTransportsExactAllreduce) {
  for (int ranks : {1, 2, 3, 5}) {
    const size_t n = 1001;
    const Outcome o = RunOnce(ranks, Config(AllReduceAlgo::kNative, "none"), n, true);
    const auto want = ExactSum(ranks, n, true);
    ExpectIdenticalOnAllRanks(o, "native fp32");
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(o.results[0][i], static_cast<float>(want[i])) << "ranks=" << ranks << " i=" << i;
  }
}

// A 16-bit reduction: identical bits on every rank, within the format's rounding of the exact sum
// (one rounding of the pre-scaled input, one per reduction step), for sums and means, and no
// overflow where the 16-bit sum of the raw values would leave fp16's range.
TEST(AllReduceAlgo, NativeIn16BitsRoundsLikeTheFormatAndCannotOverflow) {
  for (DType prec : {DType::kBFloat16, DType::kFloat16}) {
    const double unit = prec == DType::kBFloat16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11);  // half an ulp
    for (int ranks : {1, 2, 3, 4, 8}) {
      for (bool average : {false, true}) {
        const size_t n = 2049;
        AlgoConfig cfg = Config(AllReduceAlgo::kNative, "none");
        cfg.precision = prec;
        Outcome o;
        o.results.resize(ranks);
        RunLocalRanks(ranks, [&](Communicator& comm) {
          AllReduceEngine engine(comm, cfg);
          std::vector<float> data = Gradient(comm.Rank(), n, 0, true);  // |x| <= 1000
          for (float& x : data) x *= 50.0f;                               // up to 50000: sums pass 65504
          engine.Run(data.data(), n, nullptr, average);
          o.results[comm.Rank()] = data;
        });
        const std::string what = fmt::format("{} ranks={} average={}", DTypeName(prec), ranks, average);
        ExpectIdenticalOnAllRanks(o, what);
        const auto sum = ExactSum(ranks, n, true);
        double max_abs = 0;
        for (int r = 0; r < ranks; ++r)
          for (float x : Gradient(r, n, 0, true)) max_abs = std::max(max_abs, 50.0 * std::fabs(x));
        // Worst case over the pre-scaled addends y = x/P (|y| <= m): P input roundings of u·m and a
        // step rounding of u·k·m after the k-th addend: u·m·(P + P(P+1)/2); a sum is that × P.
        const double p = ranks, m = max_abs / p;
        const double bound = unit * m * (p + p * (p + 1) / 2) * (average ? 1 : p);
        double largest = 0;
        for (size_t i = 0; i < n; ++i) {
          const double want = 50.0 * sum[i] / (average ? ranks : 1);
          largest = std::max(largest, std::fabs(want));
          ASSERT_TRUE(std::isfinite(o.results[0][i])) << what << " i=" << i;
          ASSERT_LE(std::fabs(o.results[0][i] - want), bound) << what << " i=" << i;
        }
        if (!average && ranks >= 2) {
          EXPECT_GT(largest, 65504.0) << what << ": the data must pass fp16's range";
        }
      }
    }
  }
}

TEST(AllReduceAlgo, A16BitPrecisionIsTheNativeAlgorithmsOnly) {
  RunLocalRanks(1, [](Communicator& comm) {
    AlgoConfig ring = Config(AllReduceAlgo::kRing, "none");
    ring.precision = DType::kBFloat16;
    EXPECT_THROW(AllReduceEngine(comm, ring), UsageError);
    AlgoConfig fp8 = Config(AllReduceAlgo::kNative, "none");
    fp8.precision = DType::kFloat8E4M3;
    EXPECT_THROW(AllReduceEngine(comm, fp8), UsageError);
    EXPECT_THROW(AllReduceEngine(comm, Config(AllReduceAlgo::kNative, "int8")), UsageError);
    EXPECT_THROW(ParsePrecision("fp64"), UsageError);
    EXPECT_EQ(ParsePrecision("bf16"), DType::kBFloat16);
  });
}

TEST(AllReduceAlgo, UnequalNodesAreRefused) {
  EXPECT_THROW(RunLocalRanks(3, [](Communicator& comm) {
                 AllReduceEngine e(comm, Config(AllReduceAlgo::kHierarchical, "none", 4096, 2));
                 std::vector<float> d(10, 1.0f);
                 e.Run(d.data(), d.size(), nullptr, false);
               }),
               UsageError);
}

}  // namespace
}  // namespace ciuic

namespace ciuic {
namespace {

RuntimeConfig RtConfig(const char* codec, size_t bucket_bytes) {
  RuntimeConfig c;
  c.algo.codec = ParseCodec(codec);
  c.algo.codec.block = 64;
  c.bucket_bytes = bucket_bytes;
  return c;
}

TEST(Runtime, SaveThenLoadMidRunContinuesBitIdentically) {
  for (const char* codec : {"int8", "topk:0.05", "sign1", "powersgd:2", "fp8e4m3"}) {
    const int ranks = 3;
    const size_t n = 3000;
    std::vector<std::vector<float>> straight(ranks), resumed(ranks);
    const std::string dir = ::testing::TempDir();
    RunLocalRanks(ranks, [&](Communicator& comm) {
      const std::string path = dir + "/ciuic_state_" + std::to_string(comm.Rank()) + ".bin";
      Runtime rt(comm, RtConfig(codec, 4000));  // 3000 floats: 3 buckets of 1000
      for (int t = 0; t < 20; ++t) {
        if (t == 10) rt.Save(path);
        std::vector<float> g = Gradient(comm.Rank(), n, static_cast<uint64_t>(t));
        rt.AllReduce(g.data(), n, 42);
        if (t == 19) straight[comm.Rank()] = g;
      }
      Runtime again(comm, RtConfig(codec, 4000));
      again.Load(path);
      for (int t = 10; t < 20; ++t) {
        std::vector<float> g = Gradient(comm.Rank(), n, static_cast<uint64_t>(t));
        again.AllReduce(g.data(), n, 42);
        if (t == 19) resumed[comm.Rank()] = g;
      }
      std::remove(path.c_str());
    });
    for (int r = 0; r < ranks; ++r)
      ASSERT_EQ(0, std::memcmp(straight[r].data(), resumed[r].data(), n * 4)) << codec << " rank " << r;
  }
}

TEST(Runtime, LoadRefusesAnotherWorldSizeOrCodecAndKeepsItsState) {
  const std::string path = ::testing::TempDir() + "/ciuic_state_world.bin";
  RunLocalRanks(2, [&](Communicator& comm) {
    Runtime rt(comm, RtConfig("int8", 1 << 20));
    std::vector<float> g = Gradient(comm.Rank(), 100, 0);
    rt.AllReduce(g.data(), g.size(), 1);
    if (comm.Rank() == 0) rt.Save(path);
  });
  RunLocalRanks(3, [&](Communicator& comm) {
    Runtime rt(comm, RtConfig("int8", 1 << 20));
    std::vector<float> g = Gradient(comm.Rank(), 100, 0);
    rt.AllReduce(g.data(), g.size(), 1);
    EXPECT_THROW(rt.Load(path), InputError);
    EXPECT_EQ(rt.StateCount(), 1u);
  });
  RunLocalRanks(2, [&](Communicator& comm) {
    Runtime rt(comm, RtConfig("fp8e4m3", 1 << 20));
    if (comm.Rank() == 0) {
      EXPECT_THROW(rt.Load(path), InputError);
    }
  });
  std::remove(path.c_str());
}

TEST(Runtime, TensorListIsBucketedAndExact) {
  const int ranks = 4;
  RunLocalRanks(ranks, [&](Communicator& comm) {
    Runtime rt(comm, RtConfig("none", 1000 * 4));
    std::vector<std::vector<float>> ts;
    std::vector<TensorRef> refs;
    std::vector<uint64_t> ids;
    for (int t = 0; t < 30; ++t) {
      ts.push_back(Gradient(comm.Rank(), 1 + (t * 97) % 700, static_cast<uint64_t>(t), true));
      ids.push_back(static_cast<uint64_t>(t));
    }
    ts.push_back(Gradient(comm.Rank(), 2500, 99, true));  // larger than a bucket: split on its own
    ids.push_back(99);
    for (auto& t : ts) refs.push_back({t.data(), t.size()});
    rt.AllReduceTensors(refs, ids);
    for (size_t t = 0; t < ts.size(); ++t) {
      std::vector<double> want(ts[t].size(), 0.0);
      for (int r = 0; r < ranks; ++r) {
        const auto g = Gradient(r, ts[t].size(), t < 30 ? t : 99, true);
        for (size_t i = 0; i < g.size(); ++i) want[i] += g[i];
      }
      for (size_t i = 0; i < ts[t].size(); ++i)
        ASSERT_EQ(ts[t][i], static_cast<float>(want[i])) << "tensor " << t << " element " << i;
    }
    EXPECT_GT(rt.StateCount(), 1u);
  });
}

TEST(Runtime, NanOnOneRankFailsEveryRankWithoutHanging) {
  std::atomic<int> failed{0};
  RunLocalRanks(3, [&](Communicator& comm) {
    Runtime rt(comm, RtConfig("int8", 1 << 20));
    std::vector<float> g = Gradient(comm.Rank(), 500, 0);
    if (comm.Rank() == 1) g[77] = NAN;
    try {
      rt.AllReduce(g.data(), g.size(), 5);
    } catch (const InputError&) {
      ++failed;
    }
  });
  EXPECT_EQ(failed.load(), 3);
}

}  // namespace
}  // namespace ciuic
