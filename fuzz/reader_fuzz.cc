// libFuzzer harness for the files users hand to ciuic's readers beyond the JSON configs (text_fuzz.cc):
// a ciuic-bench result compared (`compare A B`: the run reader and the row matching, verdicts and
// ratios on whatever numbers it holds), a baseline, the published nccl-tests figures, and arbitrary
// bytes as a SQLite database (compare's run reader over --db, the calibration and crossover readers,
// then a read-write open, which migrates an older schema after a backup). Built once per reader
// (CIUIC_FUZZ_TARGET names it). A refusal must be a ciuic::Error; any other exception, a crash or a
// sanitizer report is a finding. Run with its seed corpus: scripts/fuzz.sh SECONDS run_json (or
// baseline, published, sqlite).
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "core/error.h"
#if CIUIC_FUZZ_TARGET == 0
#include "bench/compare.h"
#elif CIUIC_FUZZ_TARGET == 1
#include "bench/baseline.h"
#elif CIUIC_FUZZ_TARGET == 2
#include "tuner/published.h"
#elif CIUIC_FUZZ_TARGET == 3
#include "bench/compare.h"
#include "collectives/crossover.h"
#include "core/database.h"
#include "tuner/calibrate.h"
#endif

namespace {

#if CIUIC_FUZZ_TARGET == 0 || CIUIC_FUZZ_TARGET == 3
// A file holding `bytes` (the readers take paths), alone in a folder of this process emptied first
// (SQLite's -wal and -shm, a migration's .bak from the input before).
std::string WriteInput(const uint8_t* data, size_t size, const char* name) {
  static const std::filesystem::path dir = [] {
    const auto d = std::filesystem::temp_directory_path() / ("ciuic-fuzz-" + std::to_string(getpid()));
    std::atexit([] {
      std::error_code ignored;
      std::filesystem::remove_all(std::filesystem::temp_directory_path() / ("ciuic-fuzz-" + std::to_string(getpid())),
                                  ignored);
    });
    return d;
  }();
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string path = (dir / name).string();
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  return path;
}

// `ciuic-bench compare ARGS...` with its table going nowhere.
void Compare(std::vector<std::string> args) {
  args.insert(args.begin(), {"ciuic-bench", "compare"});
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  (void)ciuic::CompareMain(static_cast<int>(args.size()), argv.data());
}
#endif

}  // namespace

// 0 run_json, 1 baseline, 2 published, 3 sqlite
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const bool quiet = [] {
    std::cout.setstate(std::ios::failbit);  // the compare table: nothing to read, only to produce
    return true;
  }();
  (void)quiet;
  try {
#if CIUIC_FUZZ_TARGET == 0
    const std::string run = WriteInput(data, size, "run.json");
    Compare({run, run, "--format", "json"});
    Compare({run, run, "--noise", "2%"});
#elif CIUIC_FUZZ_TARGET == 1
    (void)ciuic::ParseBaseline(std::string(reinterpret_cast<const char*>(data), size), "fuzz.json");
#elif CIUIC_FUZZ_TARGET == 2
    (void)ciuic::ParsePublished(std::string(reinterpret_cast<const char*>(data), size), "fuzz.json");
#elif CIUIC_FUZZ_TARGET == 3
    const std::string db = WriteInput(data, size, "input.db");
    try {
      Compare({"1", "2", "--db", db});
    } catch (const ciuic::Error&) {
    }
    try {
      (void)ciuic::LoadCalibration(db, "cpu");
      (void)ciuic::LoadCrossoverPoints(db, "cpu", "mpi", 2, nullptr);
    } catch (const ciuic::Error&) {
    }
    ciuic::Database rw(db);  // opens for writing: an older schema is backed up and migrated
    (void)rw.SchemaVersion();
#endif
  } catch (const ciuic::Error&) {
    // refused with a message: what bad input must get
  }
  return 0;
}
