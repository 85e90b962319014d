// The main of every GoogleTest binary: exits 77 (ctest's SKIP_RETURN_CODE) when tests were selected
// and every one of them skipped (a gpu binary on a machine without a device), so that ctest reports
// the run as skipped instead of passed.
#include <gtest/gtest.h>

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  const int rc = RUN_ALL_TESTS();
  const testing::UnitTest& u = *testing::UnitTest::GetInstance();
  if (rc == 0 && u.test_to_run_count() > 0 && u.skipped_test_count() == u.test_to_run_count()) return 77;
  return rc;
}
