#pragma once
// The accuracy gate's verdicts are a pure function of (codec, gate settings): each test's study
// database starts with every verdict an earlier test of this build computed, and hands its own back,
// so the gate (23 codecs, a few seconds each) runs once per build instead of once per test. Studies
// still read the verdicts from their own database, as they do in use; only the computing is shared.
#include <cstdlib>
#include <filesystem>
#include <string>

#include "core/database.h"

namespace ciuic::testing_gate_cache {

// Named after this test binary's link time: a relinked binary (a changed gate) starts a cache of its own.
// $CIUIC_TEST_GATE_CACHE names another: scripts/test.sh gives the instrumented build a copy of the
// uninstrumented build's verdicts (the same sources), as the gate instrumented takes minutes.
inline std::string CachePath() {
  if (const char* path = std::getenv("CIUIC_TEST_GATE_CACHE"); path && *path) return path;
  std::error_code ec;
  const auto stamp = std::filesystem::last_write_time("/proc/self/exe", ec).time_since_epoch().count();
  return std::string(CIUIC_TEST_BINARY_DIR) + "/gate_cache-" +
         std::to_string(static_cast<unsigned long long>(ec ? 0 : stamp)) + ".db";
}

// Copies the cached verdicts into the (new) study database `db_path`.
inline void Seed(const std::string& db_path) {
  if (!std::filesystem::exists(CachePath())) return;
  try {
    Database db(db_path);
    Statement(db.handle(), "ATTACH DATABASE ? AS cache").Bind(1, CachePath()).Step();
    Statement(db.handle(), "INSERT OR IGNORE INTO gate_results SELECT * FROM cache.gate_results").Step();
    Statement(db.handle(), "DETACH DATABASE cache").Step();
  } catch (const std::exception&) {  // a cache another build left unreadable: the gate runs here
  }
}

// Adds the verdicts of the study database `db_path` to the cache.
inline void Keep(const std::string& db_path) {
  if (!std::filesystem::exists(db_path)) return;
  try {
    Database cache(CachePath());
    Statement(cache.handle(), "ATTACH DATABASE ? AS run").Bind(1, db_path).Step();
    Statement(cache.handle(), "INSERT OR IGNORE INTO gate_results SELECT * FROM run.gate_results").Step();
    Statement(cache.handle(), "DETACH DATABASE run").Step();
  } catch (const std::exception&) {  // a test's own damaged database: nothing to keep
  }
}

}  // namespace ciuic::testing_gate_cache
