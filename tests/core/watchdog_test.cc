#include <gtest/gtest.h>

#include <atomic>
#include <thread>

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

TEST(Watchdog, ZeroTimeoutIsOff) {
  std::atomic<int> fired{0};
  Watchdog w(0, [&](const std::string&, double) { ++fired; });
  w.Arm("x");
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(fired.load(), 0);
}

}  // namespace
}  // namespace ciuic
