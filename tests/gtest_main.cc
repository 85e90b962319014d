// The main of every GoogleTest binary: exits 77 (ctest's SKIP_RETURN_CODE) when tests were selected
// and every one of them skipped (a gpu binary on a machine without a device), so that ctest reports
// the run as skipped instead of passed. The tools' default data folder (database, profiles) is a
// temporary one of this process unless the caller chose one: no test writes into the user's home.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  std::string data;
  if (!std::getenv("CIUIC_DATA_DIR")) {
    data = (std::filesystem::temp_directory_path() / ("ciuic_test_data_" + std::to_string(::getpid()))).string();
    setenv("CIUIC_DATA_DIR", data.c_str(), 1);
  }
  const int rc = RUN_ALL_TESTS();
  if (!data.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(data, ec);
  }
  const testing::UnitTest& u = *testing::UnitTest::GetInstance();
  if (rc == 0 && u.test_to_run_count() > 0 && u.skipped_test_count() == u.test_to_run_count()) return 77;
  return rc;
}
