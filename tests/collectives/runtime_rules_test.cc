// The runtime as a training job runs it (RuleRuntime, AsyncRuntime) over thread ranks, and the gloo
// world made from a job's key-value store: the rule of each message's byte size, 16-bit messages at
// their own width, NaN/Inf summed uncompressed without touching error feedback, the state of several
// configurations saved and loaded as one, residuals moved between tensor ids, the world check, and
// the asynchronous queue giving the synchronous bits.
#include <cmath>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include "collectives/backends/gloo/communicator.h"
#include "collectives/backends/local/communicator.h"
#include "collectives/bootstrap/store.h"
#include "collectives/runtime_async.h"
#include "collectives/runtime_rules.h"
#include "core/config.h"
#include "core/dtype.h"
#include "core/error.h"

namespace ciuic {
namespace {

ProfileRule Rule(uint64_t lo, uint64_t hi, const char* algo, const char* codec, uint64_t bucket,
                 const char* precision = "fp32") {
  ProfileRule r;
  r.min_bytes = lo;
  r.max_bytes = hi;
  r.algo = algo;
  r.codec = codec;
  r.bucket_bytes = bucket;
  r.precision = precision;
  r.gate = std::string(codec) == "none" ? "n/a" : "passed";
  return r;
}

// Three bands: the library's allreduce below 16 KiB, int8 on the ring in 8 KiB pieces up to 256 KiB,
// topk above.
std::shared_ptr<Profile> ThreeBands(int ranks) {
  auto p = std::make_shared<Profile>();
  p->topology = "cpu_local";
  p->device = "cpu";
  p->ranks = ranks;
  p->nodes = 1;
  p->rules = {Rule(0, 16 << 10, "nccl", "none", 0), Rule(16 << 10, 256 << 10, "ring", "int8", 8 << 10),
              Rule(256 << 10, 0, "sparse", "topk:0.05", 64 << 10)};
  return p;
}

std::vector<float> RulesGradient(size_t n, int rank, int step) {
  std::mt19937 rng(1000 * rank + step + 7);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> g(n);
  for (auto& x : g) x = d(rng);
  return g;
}

TEST(RuleRuntime, EachMessageTakesTheRuleOfItsByteSize) {
  RunLocalRanks(2, [&](Communicator& c) {
    RuleRuntimeConfig cfg;
    cfg.profile = ThreeBands(2);
    RuleRuntime rt(c, cfg);
    EXPECT_EQ(ConfigKey(rt.ConfigFor(1000, DType::kFloat32)), "native none fp32 0 B x1");
    EXPECT_EQ(ConfigKey(rt.ConfigFor(5000, DType::kFloat32)), "ring int8 fp32 8192 B x1");
    // 5000 bf16 elements are 10000 bytes: the first band, at their own width (the thread backend sums
    // bf16, so the library's own sum stays, in bf16).
    EXPECT_EQ(ConfigKey(rt.ConfigFor(5000, DType::kBFloat16)), "native none bf16 0 B x1");
    EXPECT_EQ(ConfigKey(rt.ConfigFor(100000, DType::kFloat16)), "ring int8 fp32 8192 B x1");
    EXPECT_EQ(ConfigKey(rt.ConfigFor(100000, DType::kFloat32)), "sparse topk:0.05 fp32 65536 B x1");
    EXPECT_THROW(rt.ConfigFor(10, DType::kInt32), UsageError);
  });
  // The 16-bit wire of a lossless rule keeps no error feedback; a rule's own fp16 codec does: two
  // configurations, two runtimes (one key would share one state between them).
  RunLocalRanks(2, [&](Communicator& c) {
    auto p = ThreeBands(2);
    p->rules = {Rule(0, 16 << 10, "ring", "none", 8 << 10), Rule(16 << 10, 0, "ring", "fp16", 8 << 10)};
    RuleRuntimeConfig cfg;
    cfg.profile = p;
    RuleRuntime rt(c, cfg);
    EXPECT_EQ(ConfigKey(rt.ConfigFor(5000, DType::kFloat16)), "ring fp16 fp32 8192 B x1 no-ef");
    EXPECT_EQ(ConfigKey(rt.ConfigFor(5000, DType::kFloat32)), "ring fp16 fp32 8192 B x1");
  });
}

TEST(RuleRuntime, LosslessSixteenBitMessagesTravelAtTheirOwnWidth) {
  // A lossless ring rule: an fp32 message moves 4 bytes per element, a bf16 one 2 (the bf16 wire).
  constexpr int kRanks = 3;
  constexpr size_t n = 3000;
  std::vector<std::vector<uint16_t>> out(kRanks);
  std::vector<double> wire32(kRanks), wire16(kRanks);
  RunLocalRanks(kRanks, [&](Communicator& c) {
    auto p = std::make_shared<Profile>();
    p->topology = "cpu_local";
    p->ranks = kRanks;
    p->rules = {Rule(0, 0, "ring", "none", 0)};
    RuleRuntimeConfig cfg;
    cfg.profile = p;
    cfg.fixed.algo.staged_bytes = 0;  // the fp32 ring over the transport too (staged, it sends nothing)
    RuleRuntime rt(c, cfg);
    auto g = RulesGradient(n, c.Rank(), 0);
    rt.AllReduce(g.data(), n, DType::kFloat32, 1, false);
    wire32[c.Rank()] = rt.counters().wire_bytes;
    std::vector<uint16_t> h(n);
    for (size_t i = 0; i < n; ++i) h[i] = FloatToBFloat16(RulesGradient(n, c.Rank(), 1)[i]);
    EXPECT_EQ(ConfigKey(rt.ConfigFor(n, DType::kBFloat16)), "ring bf16 fp32 0 B x1 no-ef");
    rt.AllReduce(h.data(), n, DType::kBFloat16, 2, false);
    wire16[c.Rank()] = rt.counters().wire_bytes - wire32[c.Rank()];
    out[c.Rank()] = h;
  });
  std::vector<std::vector<float>> g(kRanks);
  for (int r = 0; r < kRanks; ++r) g[r] = RulesGradient(n, r, 1);
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_EQ(out[r], out[0]) << "rank " << r;
    EXPECT_NEAR(wire16[r], wire32[r] / 2, 64) << "rank " << r;
  }
  // Each of the 2P - 1 roundings to bf16 (P inputs, P - 1 partial sums) errs by at most 2^-8 of |v|.
  for (size_t i = 0; i < n; ++i) {
    double exact = 0, s = 0;
    for (int r = 0; r < kRanks; ++r) {
      const double x = BFloat16ToFloat(FloatToBFloat16(g[r][i]));
      exact += x;
      s += std::abs(x);
    }
    ASSERT_LE(std::abs(BFloat16ToFloat(out[0][i]) - exact), (2 * kRanks - 1) * std::ldexp(s, -8) + 1e-30) << i;
  }
}

TEST(RuleRuntime, NonFiniteIsSummedUncompressedAndKeepsTheResidual) {
  constexpr size_t n = 5000;  // the int8 band
  std::vector<int> all_nan(2), same_residual(2);
  std::vector<uint64_t> counted(2);
  RunLocalRanks(2, [&](Communicator& c) {
    RuleRuntimeConfig cfg;
    cfg.profile = ThreeBands(2);
    cfg.fixed.propagate_nonfinite = true;
    RuleRuntime rt(c, cfg);
    auto g = RulesGradient(n, c.Rank(), 0);
    rt.AllReduce(g.data(), n, DType::kFloat32, 9, true);
    const auto before = rt.Residual(9, n, DType::kFloat32);
    g = RulesGradient(n, c.Rank(), 1);
    if (c.Rank() == 1) g[4321] = std::nanf("");
    rt.AllReduce(g.data(), n, DType::kFloat32, 9, true);
    // The piece holding the NaN (elements 4096..4999) was summed uncompressed: the NaN on every rank,
    // its neighbours finite; the other pieces went through the int8 ring as usual.
    all_nan[c.Rank()] = std::isnan(g[4321]) && !std::isnan(g[4096]) && !std::isnan(g[4999]) && !std::isnan(g[0]);
    const auto after = rt.Residual(9, n, DType::kFloat32);
    same_residual[c.Rank()] = std::equal(before.begin() + 4096, before.end(), after.begin() + 4096) &&
                              !std::equal(before.begin(), before.begin() + 4096, after.begin());
    counted[c.Rank()] = rt.nonfinite();
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(all_nan[r]) << r;
    EXPECT_TRUE(same_residual[r]) << r;
    EXPECT_EQ(counted[r], 1u) << r;
  }
}

TEST(RuleRuntime, WithoutPropagationNonFiniteFailsEveryRank) {
  std::vector<int> input_error(2);
  RunLocalRanks(2, [&](Communicator& c) {
    RuleRuntimeConfig cfg;
    cfg.profile = ThreeBands(2);
    RuleRuntime rt(c, cfg);
    auto g = RulesGradient(5000, c.Rank(), 0);
    if (c.Rank() == 0) g[7] = INFINITY;
    try {
      rt.AllReduce(g.data(), g.size(), DType::kFloat32, 1, true);
    } catch (const InputError& e) {
      input_error[c.Rank()] = std::string(e.what()).find("rank 0") != std::string::npos;
    }
  });
  EXPECT_TRUE(input_error[0]);
  EXPECT_TRUE(input_error[1]);
}

TEST(RuleRuntime, StateOfEveryConfigurationSavesAndLoadsAsOne) {
  const auto dir = std::filesystem::temp_directory_path() / fmt::format("ciuic_rules_{}", getpid());
  std::filesystem::create_directories(dir);
  constexpr size_t small = 5000, big = 80000;  // the int8 band and the topk band
  std::vector<std::vector<float>> continued(2), resumed(2);
  std::vector<int> refused(2), kept(2);
  RunLocalRanks(2, [&](Communicator& c) {
    RuleRuntimeConfig cfg;
    cfg.profile = ThreeBands(2);
    const std::string path = (dir / fmt::format("state.{}", c.Rank())).string();
    std::vector<float> a, b;
    {
      RuleRuntime rt(c, cfg);
      for (int step = 0; step < 3; ++step) {
        a = RulesGradient(small, c.Rank(), step);
        b = RulesGradient(big, c.Rank(), step);
        rt.AllReduce(a.data(), small, DType::kFloat32, 1, true);
        rt.AllReduce(b.data(), big, DType::kFloat32, 2, true);
      }
      rt.Save(path);
      a = RulesGradient(small, c.Rank(), 3);
      b = RulesGradient(big, c.Rank(), 3);
      rt.AllReduce(a.data(), small, DType::kFloat32, 1, true);
      rt.AllReduce(b.data(), big, DType::kFloat32, 2, true);
      continued[c.Rank()] = a;
      continued[c.Rank()].insert(continued[c.Rank()].end(), b.begin(), b.end());
    }
    RuleRuntime fresh(c, cfg);
    // A damaged file on rank 1 only: every rank refuses, nothing is loaded anywhere.
    const std::string bad = (dir / fmt::format("bad.{}", c.Rank())).string();
    std::filesystem::copy_file(path, bad, std::filesystem::copy_options::overwrite_existing);
    if (c.Rank() == 1) std::filesystem::resize_file(bad, std::filesystem::file_size(bad) - 3);
    try {
      fresh.Load(bad);
    } catch (const InputError& e) {
      refused[c.Rank()] = std::string(e.what()).find("rank 1") != std::string::npos;
    }
    kept[c.Rank()] = fresh.Residual(1, small, DType::kFloat32) == std::vector<float>(small, 0.0f);
    fresh.Load(path);
    a = RulesGradient(small, c.Rank(), 3);
    b = RulesGradient(big, c.Rank(), 3);
    fresh.AllReduce(a.data(), small, DType::kFloat32, 1, true);
    fresh.AllReduce(b.data(), big, DType::kFloat32, 2, true);
    resumed[c.Rank()] = a;
    resumed[c.Rank()].insert(resumed[c.Rank()].end(), b.begin(), b.end());
  });
  std::filesystem::remove_all(dir);
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(refused[r]) << r;
    EXPECT_TRUE(kept[r]) << r;
    EXPECT_EQ(resumed[r], continued[r]) << "rank " << r << ": the resumed step differs";
  }
}

TEST(RuleRuntime, ResidualMovesBetweenTensorIds) {
  constexpr size_t n = 5000;
  std::vector<int> ok(2);
  RunLocalRanks(2, [&](Communicator& c) {
    RuleRuntimeConfig cfg;
    cfg.profile = ThreeBands(2);
    RuleRuntime rt(c, cfg);
    auto g = RulesGradient(n, c.Rank(), 0);
    rt.AllReduce(g.data(), n, DType::kFloat32, 1, true);
    const auto r1 = rt.Residual(1, n, DType::kFloat32);
    bool good = std::any_of(r1.begin(), r1.end(), [](float x) { return x != 0; });
    good &= rt.SetResidual(2, n, DType::kFloat32, r1.data());
    rt.Forget(1);
    good &= rt.Residual(2, n, DType::kFloat32) == r1;
    good &= rt.Residual(1, n, DType::kFloat32) == std::vector<float>(n, 0.0f);
    // The library's band keeps none: nothing to carry.
    good &= !rt.SetResidual(3, 100, DType::kFloat32, r1.data());
    std::vector<float> bad(n, 0.0f);
    bad[3] = NAN;
    try {
      rt.SetResidual(2, n, DType::kFloat32, bad.data());
      good = false;
    } catch (const InputError&) {
    }
    ok[c.Rank()] = good;
  });
  EXPECT_TRUE(ok[0]);
  EXPECT_TRUE(ok[1]);
}

// A hier rule's depth is the profile's: depth 3 groups the nodes by the rule's nodes_per_group (a
// size that does not divide them fails as only the grouped hierarchy can), depth 2 does not group
// them whatever the fixed settings say. 8 ranks as 4 nodes of 2, the sum of small integers exact.
TEST(RuleRuntime, AHierRuleRunsAtItsOwnDepthWithItsGroupSize) {
  const auto profile = [](int depth, int nodes_per_group) {
    auto p = ThreeBands(8);
    p->nodes = 4;
    ProfileRule r = Rule(0, 0, "hier", "none", 64 << 10);
    r.hierarchy_depth = depth;
    r.nodes_per_group = nodes_per_group;
    p->rules = {r};
    return p;
  };
  RunLocalRanks(8, [&](Communicator& c) {
    RuleRuntimeConfig cfg;
    cfg.profile = profile(3, 2);
    cfg.fixed.algo.ranks_per_node = 2;
    RuleRuntime rt(c, cfg);
    EXPECT_EQ(rt.ConfigFor(1000, DType::kFloat32).algo.nodes_per_group, 2);
    EXPECT_EQ(ConfigKey(rt.ConfigFor(1000, DType::kFloat32)), "hier none fp32 65536 B x1 2/node 2 nodes/group");
    const size_t n = 40000;
    std::vector<float> x(n);
    for (size_t i = 0; i < n; ++i) x[i] = static_cast<float>((i * 7 + static_cast<size_t>(c.Rank()) * 13) % 101);
    rt.AllReduce(x.data(), n, DType::kFloat32, 1, false);
    for (size_t i = 0; i < n; i += 997) {
      float want = 0;
      for (int k = 0; k < 8; ++k) want += static_cast<float>((i * 7 + static_cast<size_t>(k) * 13) % 101);
      ASSERT_EQ(x[i], want) << i;
    }
  });
  RunLocalRanks(8, [&](Communicator& c) {
    RuleRuntimeConfig cfg;
    cfg.profile = profile(3, 3);  // 4 nodes in groups of 3
    cfg.fixed.algo.ranks_per_node = 2;
    RuleRuntime rt(c, cfg);
    std::vector<float> x(1000, 1.0f);
    EXPECT_THROW(rt.AllReduce(x.data(), x.size(), DType::kFloat32, 1, false), UsageError);
  });
  RunLocalRanks(8, [&](Communicator& c) {
    RuleRuntimeConfig cfg;
    cfg.profile = profile(2, 0);
    cfg.fixed.algo.ranks_per_node = 2;
    cfg.fixed.algo.nodes_per_group = 2;  // the rule says depth 2
    RuleRuntime rt(c, cfg);
    EXPECT_EQ(rt.ConfigFor(1000, DType::kFloat32).algo.nodes_per_group, 0);
  });
}

TEST(RuleRuntime, AProfileOfAnotherWorldIsRefusedNamingBoth) {
  std::vector<std::string> msg(2);
  RunLocalRanks(2, [&](Communicator& c) {
    auto p = ThreeBands(16);
    p->device = "gpu";
    p->nodes = 2;
    try {
      CheckProfileWorld(*p, c, 0);
    } catch (const UsageError& e) {
      msg[c.Rank()] = e.what();
    }
    CheckProfileWorld(*ThreeBands(2), c, 0);  // its own world passes
  });
  for (const auto& m : msg) {
    EXPECT_NE(m.find("16 gpu ranks on 2 nodes"), std::string::npos) << m;
    EXPECT_NE(m.find("this job has 2 cpu ranks on 1 node"), std::string::npos) << m;
  }
}

TEST(AsyncRuntime, QueuedReductionsGiveTheSynchronousBitsInOrder) {
  constexpr int kRanks = 3, kCalls = 6;
  std::vector<std::vector<float>> sync_out(kRanks), async_out(kRanks);
  std::vector<std::vector<int>> order(kRanks);
  RunLocalRanks(kRanks, [&](Communicator& c) {
    RuleRuntimeConfig cfg;
    cfg.profile = ThreeBands(kRanks);
    {
      RuleRuntime rt(c, cfg);
      for (int i = 0; i < kCalls; ++i) {
        auto g = RulesGradient(1000 + 20000 * i, c.Rank(), i);
        rt.AllReduce(g.data(), g.size(), DType::kFloat32, i, true);
        sync_out[c.Rank()].insert(sync_out[c.Rank()].end(), g.begin(), g.end());
      }
    }
    std::vector<std::vector<float>> bufs;
    for (int i = 0; i < kCalls; ++i) bufs.push_back(RulesGradient(1000 + 20000 * i, c.Rank(), i));
    std::mutex m;
    {
      AsyncRuntime rt(c, cfg);
      std::vector<std::shared_ptr<AsyncRequest>> reqs;
      for (int i = 0; i < kCalls; ++i)
        reqs.push_back(rt.Enqueue(bufs[i].data(), bufs[i].size(), DType::kFloat32, i, true, nullptr,
                                  [&, i](WorkStatus s, const std::string&) {
                                    std::lock_guard<std::mutex> lock(m);
                                    order[c.Rank()].push_back(s == WorkStatus::kOk ? i : -1);
                                  }));
      for (auto& r : reqs) EXPECT_EQ(r->Wait(), WorkStatus::kOk);
      // A bad request fails alone and the queue goes on.
      std::string error;
      EXPECT_EQ(rt.Enqueue(bufs[0].data(), 10, DType::kInt8, 5, true, nullptr, {})->Wait(&error), WorkStatus::kUsage);
      EXPECT_NE(error.find("int8"), std::string::npos) << error;
    }
    for (auto& b : bufs) async_out[c.Rank()].insert(async_out[c.Rank()].end(), b.begin(), b.end());
  });
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_EQ(async_out[r], sync_out[r]) << "rank " << r;
    EXPECT_EQ(async_out[r], async_out[0]) << "rank " << r;
    EXPECT_EQ(order[r], (std::vector<int>{0, 1, 2, 3, 4, 5})) << "rank " << r;
  }
}

TEST(AsyncRuntime, ACompletionMayCallTheRuntime) {
  // torch runs a Future's then-callbacks inside set_result, on the runtime's thread: a call into the
  // runtime from there runs inline instead of waiting for itself.
  std::vector<int> ok(2);
  RunLocalRanks(2, [&](Communicator& c) {
    RuleRuntimeConfig cfg;
    cfg.profile = ThreeBands(2);
    AsyncRuntime rt(c, cfg);
    auto g = RulesGradient(5000, c.Rank(), 0);
    std::vector<float> residual;
    auto req = rt.Enqueue(g.data(), g.size(), DType::kFloat32, 4, true, nullptr, [&](WorkStatus, const std::string&) {
      rt.Call([&](RuleRuntime& r) { residual = r.Residual(4, 5000, DType::kFloat32); });
    });
    ok[c.Rank()] = req->Wait() == WorkStatus::kOk;
    rt.Call([](RuleRuntime&) {});  // the completion has returned once the queue moved on
    ok[c.Rank()] &= residual.size() == 5000 && std::any_of(residual.begin(), residual.end(), [](float x) { return x; });
  });
  EXPECT_TRUE(ok[0]);
  EXPECT_TRUE(ok[1]);
}

// An in-memory store shared by thread ranks: Get waits for its key, as torch's store does.
class MemoryStore : public KeyValueStore {
 public:
  void Set(const std::string& key, const std::vector<char>& value) override {
    std::lock_guard<std::mutex> lock(m_);
    data_[key] = value;
    cv_.notify_all();
  }
  std::vector<char> Get(const std::string& key) override {
    std::unique_lock<std::mutex> lock(m_);
    if (!cv_.wait_for(lock, std::chrono::seconds(30), [&] { return data_.count(key) > 0; }))
      throw RuntimeError("no key " + key);
    return data_[key];
  }

 private:
  std::mutex m_;
  std::condition_variable cv_;
  std::map<std::string, std::vector<char>> data_;
};

TEST(GlooStoreWorld, RanksMeetThroughTheJobsStoreWithoutMpi) {
  if (!CIUIC_HAVE_GLOO) GTEST_SKIP() << "this build has no gloo";
  constexpr int kRanks = 4;
  constexpr size_t n = 40000;
  auto store = std::make_shared<MemoryStore>();
  std::vector<std::vector<float>> out(kRanks);
  std::vector<double> host(kRanks);
  std::vector<std::string> errors(kRanks);
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r)
    threads.emplace_back([&, r] {
      try {
        GlooOptions o;
        o.timeout_s = 30;
        auto comm = MakeGlooStoreWorld(store, r, kRanks, "test/world", o);
        double v = r + 1;
        comm->HostAllReduce(&v, 1, ReduceOp::kSum);
        host[r] = v;
        // hier splits the world (a second rendezvous through the store), two "nodes" of two.
        auto p = std::make_shared<Profile>();
        p->topology = "cpu_local";
        p->ranks = kRanks;
        p->nodes = 2;
        p->rules = {Rule(0, 0, "hier", "int8", 0)};
        RuleRuntimeConfig cfg;
        cfg.profile = p;
        cfg.fixed.algo.ranks_per_node = 2;
        CheckProfileWorld(*p, *comm, 2);
        AsyncRuntime rt(*comm, cfg);
        auto g = RulesGradient(n, r, 0);
        EXPECT_EQ(rt.Enqueue(g.data(), n, DType::kFloat32, 1, true, nullptr, {})->Wait(), WorkStatus::kOk);
        out[r] = g;
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  std::vector<std::vector<float>> g(kRanks);
  for (int r = 0; r < kRanks; ++r) g[r] = RulesGradient(n, r, 0);
  for (int r = 0; r < kRanks; ++r) {
    ASSERT_EQ(errors[r], "") << "rank " << r;
    EXPECT_EQ(host[r], 10.0);
    EXPECT_EQ(out[r], out[0]) << "rank " << r;
  }
  // int8 across the two nodes: each of at most P + 1 encodes (of sums of at most P values) errs by half
  // a step of its block's absmax, so |out - mean| <= (P + 1) P max|g| / (2 127 P).
  double worst = 0, amax = 0;
  for (int r = 0; r < kRanks; ++r)
    for (float x : g[r]) amax = std::max(amax, std::abs(double(x)));
  for (size_t i = 0; i < n; ++i) {
    double mean = 0;
    for (int r = 0; r < kRanks; ++r) mean += double(g[r][i]) / kRanks;
    worst = std::max(worst, std::abs(out[0][i] - mean));
  }
  EXPECT_LE(worst, (kRanks + 1) * amax / 254) << "the int8 hier mean is off";
  EXPECT_GT(worst, 0.0) << "int8 is lossy: an exact mean means the codec did not run";
}

}  // namespace
}  // namespace ciuic
