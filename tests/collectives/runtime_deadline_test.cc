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

TEST(RuntimeDeadline, AHealthyRunLongerThanTheTimeoutIsNotCutShort) {
  RunLocalRanks(2, [](Communicator& comm) {
    RuntimeConfig c;
    c.timeout_s = 0.5;
    c.bucket_bytes = 4096;
    Runtime rt(comm, c);
    EXPECT_EQ(rt.timeout(), 0.5);
    std::vector<float> x(1024, 1.0f);
    const double start = NowSeconds();
    while (NowSeconds() - start < 1.5) {  // three timeouts long, progress every call
      rt.AllReduce(x.data(), x.size(), 1);
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    EXPECT_THROW(rt.SetTimeout(-1), UsageError);
    rt.SetTimeout(0);
    EXPECT_EQ(rt.timeout(), 0.0);
  });
}

}  // namespace
}  // namespace ciuic
