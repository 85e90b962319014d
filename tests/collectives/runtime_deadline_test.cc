// The runtime's deadline: an allreduce whose peer never arrives ends the process with exit 2 and
// one line naming the stuck call, within about the timeout; a healthy run longer than the timeout
// (many buckets, each one progress) is not cut short.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>
#include <vector>

#include "collectives/backends/local/communicator.h"
#include "collectives/runtime.h"
#include "core/error.h"
#include "core/timer.h"

namespace ciuic {
namespace {

TEST(RuntimeDeadlineDeathTest, APeerThatNeverArrivesEndsTheProcessWithExitTwo) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        RunLocalRanks(2, [](Communicator& comm) {
          RuntimeConfig c;
          c.timeout_s = 1;
          Runtime rt(comm, c);
          std::vector<float> x(1000, 1.0f);
          if (comm.Rank() == 0) rt.AllReduce(x.data(), x.size(), 7);
          std::this_thread::sleep_for(std::chrono::seconds(30));  // rank 1 never joins
        });
        std::exit(0);
      },
      testing::ExitedWithCode(2), "rank 0: no progress in 1 s: allreduce call 0 \\(tensor 7");
}

TEST(RuntimeDeadlineDeathTest, AFractionalTimeoutIsNamedAsSet) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        RunLocalRanks(2, [](Communicator& comm) {
          RuntimeConfig c;
          c.timeout_s = 0.25;
          Runtime rt(comm, c);
          std::vector<float> x(1000, 1.0f);
          if (comm.Rank() == 0) rt.AllReduce(x.data(), x.size(), 3);
          std::this_thread::sleep_for(std::chrono::seconds(30));  // rank 1 never joins
        });
        std::exit(0);
      },
      testing::ExitedWithCode(2), "rank 0: no progress in 0.25 s: allreduce call 0 \\(tensor 3");
}

// Each call waits on its peer for 0.3 of the timeout (the ranks take turns to come late), so the
// watchdog sees most calls armed across its polls; the run lasts 2.5 timeouts, past the 1.2x the
// polling allows, so a deadline that a new call or a finished one did not restart would end it.
// Rank 0 alone decides when to stop and says so in the reduced data: with each rank reading its own
// clock, one rank could leave the loop a call before the other, which then waited out its deadline
// (seen once under TSan: "rank 0: no progress in 0.5 s: allreduce call 29").
TEST(RuntimeDeadline, AHealthyRunLongerThanTheTimeoutIsNotCutShort) {
  constexpr double kTimeout = 1.0;
  RunLocalRanks(2, [&](Communicator& comm) {
    RuntimeConfig c;
    c.timeout_s = kTimeout;
    c.bucket_bytes = 4096;
    Runtime rt(comm, c);
    EXPECT_EQ(rt.timeout(), kTimeout);
    std::vector<float> x(1024, 1.0f);
    const double start = NowSeconds();
    int calls = 0;
    for (bool more = true; more; ++calls) {
      x.assign(x.size(), comm.Rank() == 0 && NowSeconds() - start >= 2.5 * kTimeout ? 0.0f : 1.0f);
      if (calls % 2 == comm.Rank()) std::this_thread::sleep_for(std::chrono::duration<double>(0.3 * kTimeout));
      rt.AllReduce(x.data(), x.size(), 1);
      more = x[0] == 2.0f;
    }
    if (comm.Rank() == 0) {
      EXPECT_GE(NowSeconds() - start, 2.5 * kTimeout);
    }
    EXPECT_GE(calls, 8);
    EXPECT_THROW(rt.SetTimeout(-1), UsageError);
    rt.SetTimeout(0);
    EXPECT_EQ(rt.timeout(), 0.0);
  });
}

}  // namespace
}  // namespace ciuic
