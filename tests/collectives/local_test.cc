// The local (threads) backend against hand-computed results: every collective, 1..16 ranks.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "collectives/backends/local/communicator.h"
#include "core/error.h"

namespace ciuic {
namespace {

class LocalRanks : public testing::TestWithParam<int> {};

TEST_P(LocalRanks, AllReduceSumMaxAvgInAndOutOfPlace) {
  const int n = GetParam();
  RunLocalRanks(n, [&](Communicator& c) {
    const int r = c.Rank();
    std::vector<float> in(1001), out(1001, -1);
    for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(r + 1 + static_cast<int>(i));
    c.AllReduce(in.data(), out.data(), in.size(), DType::kFloat32, ReduceOp::kSum);
    for (size_t i = 0; i < in.size(); ++i) ASSERT_EQ(out[i], n * (n + 1) / 2.0f + n * static_cast<float>(i));
    c.AllReduce(in.data(), out.data(), in.size(), DType::kFloat32, ReduceOp::kMax);
    for (size_t i = 0; i < in.size(); ++i) ASSERT_EQ(out[i], static_cast<float>(n + i));
    std::vector<int32_t> v(64, r * 2);
    c.AllReduce(v.data(), v.data(), v.size(), DType::kInt32, ReduceOp::kAvg);
    for (int x : v) ASSERT_EQ(x, n - 1);  // mean of 0, 2, ..., 2(n-1)
  });
}

TEST_P(LocalRanks, AllGatherReduceScatterAllToAll) {
  const int n = GetParam();
  RunLocalRanks(n, [&](Communicator& c) {
    const int r = c.Rank();
    const size_t k = 5;
    std::vector<int64_t> mine(k), all(k * n, -1);
    for (size_t i = 0; i < k; ++i) mine[i] = r * 100 + static_cast<int64_t>(i);
    c.AllGather(mine.data(), all.data(), k, DType::kInt64);
    for (int q = 0; q < n; ++q) {
      for (size_t i = 0; i < k; ++i) ASSERT_EQ(all[q * k + i], q * 100 + static_cast<int64_t>(i));
    }
    // In place: my block already sits at slot r.
    std::vector<int64_t> buf(k * n, -1);
    for (size_t i = 0; i < k; ++i) buf[r * k + i] = mine[i];
    c.AllGather(buf.data() + r * k, buf.data(), k, DType::kInt64);
    EXPECT_EQ(buf, all);

    std::vector<int64_t> full(k * n), slice(k, -1);
    for (size_t i = 0; i < full.size(); ++i) full[i] = static_cast<int64_t>(i) * (r + 1);
    c.ReduceScatter(full.data(), slice.data(), k, DType::kInt64, ReduceOp::kSum);
    for (size_t i = 0; i < k; ++i) ASSERT_EQ(slice[i], static_cast<int64_t>(r * k + i) * n * (n + 1) / 2);

    std::vector<int32_t> send(k * n), recv(k * n, -1);
    for (int q = 0; q < n; ++q) {
      for (size_t i = 0; i < k; ++i) send[q * k + i] = r * 1000 + q * 10 + static_cast<int>(i);
    }
    c.AllToAll(send.data(), recv.data(), k, DType::kInt32);
    for (int q = 0; q < n; ++q) {
      for (size_t i = 0; i < k; ++i) ASSERT_EQ(recv[q * k + i], q * 1000 + r * 10 + static_cast<int>(i));
    }
    c.AllToAll(send.data(), send.data(), k, DType::kInt32);
    EXPECT_EQ(send, recv);
  });
}

TEST_P(LocalRanks, RootedAndPointToPoint) {
  const int n = GetParam();
  RunLocalRanks(n, [&](Communicator& c) {
    const int r = c.Rank();
    const int root = n - 1;
    std::vector<double> b(17, r == root ? 3.5 : -1.0), out(17, 0);
    c.Broadcast(b.data(), out.data(), b.size(), DType::kFloat64, root);
    for (double x : out) ASSERT_EQ(x, 3.5);
    std::vector<double> mine(17, r + 1.0), red(17, 0);
    c.Reduce(mine.data(), red.data(), mine.size(), DType::kFloat64, ReduceOp::kProd, root);
    double fact = 1;
    for (int q = 1; q <= n; ++q) fact *= q;
    if (r == root) {
      for (double x : red) ASSERT_EQ(x, fact);
    }
    std::vector<uint8_t> s(9, static_cast<uint8_t>(r)), got(9, 255);
    c.SendRecv(s.data(), (r + 1) % n, got.data(), (r + n - 1) % n, s.size(), DType::kUInt8);
    for (auto x : got) ASSERT_EQ(x, (r + n - 1) % n);
    // Asynchronous ring exchange.
    int32_t token = r * 7, from = -1;
    auto rq = c.IRecv(&from, sizeof(from), (r + n - 1) % n, 3);
    auto sq = c.ISend(&token, sizeof(token), (r + 1) % n, 3);
    c.Wait(*sq);
    c.Wait(*rq);
    EXPECT_EQ(from, ((r + n - 1) % n) * 7);
  });
}

TEST_P(LocalRanks, SplitIntoNodes) {
  const int n = GetParam();
  RunLocalRanks(n, [&](Communicator& c) {
    const int per_node = 2;
    auto node = c.Split(c.Rank() / per_node, c.Rank());
    const int expect_size = std::min(per_node, n - (c.Rank() / per_node) * per_node);
    ASSERT_EQ(node->Size(), expect_size);
    EXPECT_EQ(node->Rank(), c.Rank() % per_node);
    int32_t v = c.Rank(), sum = 0;
    node->AllReduce(&v, &sum, 1, DType::kInt32, ReduceOp::kSum);
    const int first = (c.Rank() / per_node) * per_node;
    int want = 0;
    for (int q = first; q < first + expect_size; ++q) want += q;
    EXPECT_EQ(sum, want);
  });
}

INSTANTIATE_TEST_SUITE_P(Ranks, LocalRanks, testing::Values(1, 2, 3, 4, 5, 8, 16));

TEST(Local, FailingRankDoesNotHangPeers) {
  EXPECT_THROW(RunLocalRanks(4,
                             [](Communicator& c) {
                               if (c.Rank() == 2) throw RuntimeError("planted failure");
                               c.Barrier();
                               c.Barrier();
                             }),
               RuntimeError);
}

// The peers of a rank that failed are told which one and why: their blocked calls (a barrier, a
// receive, a split's collective) fail naming it, and the first error is the culprit's own.
TEST(Local, PeersNameTheRankThatFailed) {
  std::mutex mu;
  std::vector<std::string> peers;
  try {
    RunLocalRanks(4, [&](Communicator& c) {
      auto half = c.Split(c.Rank() % 2, c.Rank());  // ranks 0 and 2, 1 and 3
      if (c.Rank() == 2) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the others are blocked by now
        throw RuntimeError("planted failure");
      }
      try {
        if (c.Rank() == 0) {
          float x = 1, y = 0;
          half->AllReduce(&x, &y, 1, DType::kFloat32, ReduceOp::kSum);  // with rank 2, in the split
        } else if (c.Rank() == 1) {
          int v = 0;
          auto request = c.IRecv(&v, sizeof(v), 2, 7);
          c.Wait(*request);
        } else {
          c.Barrier();
        }
      } catch (const RuntimeError& e) {
        std::lock_guard lock(mu);
        peers.push_back(e.what());
        throw;
      }
    });
    FAIL() << "no error";
  } catch (const RuntimeError& e) {
    EXPECT_EQ(std::string(e.what()), "planted failure");
  }
  ASSERT_EQ(peers.size(), 3u);
  for (const auto& p : peers) EXPECT_EQ(p, "local backend: rank 2 failed: planted failure");
}

// While ranks wait, the deadline's message names the rank that does not: a hung rank, not its peers.
TEST(Local, DescribesTheRankTheOthersWaitOn) {
  std::atomic<bool> release{false};
  std::string seen, idle;
  RunLocalRanks(3, [&](Communicator& c) {
    if (c.Rank() == 1) {
      idle = DescribeLocalRanks();  // nobody waits yet, or only some: at most this rank is named
      std::this_thread::sleep_for(std::chrono::milliseconds(300));  // "hung" outside the backend
      seen = DescribeLocalRanks();
      release = true;
    }
    c.Barrier();
  });
  EXPECT_TRUE(release.load());
  EXPECT_EQ(seen, "rank 1 is not waiting on any peer (hung or busy outside the backend; 2 rank(s) wait)");
  EXPECT_EQ(DescribeLocalRanks(), "");  // nothing runs now
}

}  // namespace
}  // namespace ciuic
