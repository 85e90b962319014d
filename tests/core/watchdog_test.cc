#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "core/timer.h"
#include "core/watchdog.h"

namespace ciuic {
namespace {

TEST(Watchdog, FiresOnlyWhenArmedPastDeadline) {
  std::atomic<int> fired{0};
  std::string what;
  {
    Watchdog w(0.2, [&](const std::string& s, double) {
      what = s;
      ++fired;
    });
    w.Arm("quick step");
    w.Disarm();
    std::this_thread::sleep_for(std::chrono::milliseconds(400));
    EXPECT_EQ(fired.load(), 0);
    w.Arm("stuck step");
    std::this_thread::sleep_for(std::chrono::milliseconds(600));
  }
  EXPECT_EQ(fired.load(), 1);
  EXPECT_EQ(what, "stuck step");
}

// The deadline is time without progress: a healthy phase three times longer than the timeout that
// reports progress every 20 ms never fires; once progress stops it fires within about 1.1x.
TEST(Watchdog, ProgressRestartsTheClockAndSilenceFires) {
  std::atomic<int> fired{0};
  std::atomic<double> fired_at{0};
  Watchdog w(0.3, [&](const std::string&, double) {
    fired_at = NowSeconds();
    ++fired;
  });
  w.Arm("long healthy phase");
  const double start = NowSeconds();
  while (NowSeconds() - start < 0.9) {
    w.Progress();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(fired.load(), 0);
  const double silent = NowSeconds();
  while (fired.load() == 0 && NowSeconds() - silent < 2.0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_EQ(fired.load(), 1);
  EXPECT_GE(fired_at.load() - silent, 0.25);
  EXPECT_LE(fired_at.load() - silent, 0.3 * 1.1 + 0.1);  // scheduling slack on a busy 2-core VM
}

TEST(Watchdog, ZeroTimeoutIsOff) {
  std::atomic<int> fired{0};
  Watchdog w(0, [&](const std::string&, double) { ++fired; });
  w.Arm("x");
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(fired.load(), 0);
}

}  // namespace
}  // namespace ciuic
