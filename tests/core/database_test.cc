#include <gtest/gtest.h>
#include <sqlite3.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/database.h"
#include "core/error.h"

namespace ciuic {
namespace {

class DatabaseTest : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("ciuic_db_" + std::to_string(::getpid()) + "_" + testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string Path(const char* name) { return (dir_ / name).string(); }
  static std::string Slurp(const std::string& p) {
    std::ifstream f(p, std::ios::binary);
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
  }
  static void RawExec(const std::string& path, const char* sql) {
    sqlite3* db;
    ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(db, sql, nullptr, nullptr, nullptr), SQLITE_OK);
    sqlite3_close(db);
  }
  std::filesystem::path dir_;
};

TEST_F(DatabaseTest, CreatesVersionedSchemaAndReopens) {
  const auto p = Path("a.db");
  {
    Database db(p);
    EXPECT_EQ(db.SchemaVersion(), kDatabaseSchemaVersion);
    {
      Statement q(db.handle(), "PRAGMA application_id");
      ASSERT_TRUE(q.Step());
      EXPECT_EQ(q.ColumnInt(0), kDatabaseApplicationId);
      Statement j(db.handle(), "PRAGMA journal_mode");
      ASSERT_TRUE(j.Step());
      EXPECT_EQ(j.ColumnText(0), "wal");
    }
    Database::Transaction tx(db);
    db.Exec("INSERT INTO bench_runs(start_time, tool_version, git_commit, collective, backend, device, world_size, "
            "dtype, redop, codec, algo, hostnames, context_json) VALUES('t','v','c','allreduce','mpi','cpu',2,"
            "'fp32','sum','none','native','h','{}')");
    tx.Commit();
  }
  Database again(p);
  Statement n(again.handle(), "SELECT count(*) FROM bench_runs");
  ASSERT_TRUE(n.Step());
  EXPECT_EQ(n.ColumnInt(0), 1);
}

TEST_F(DatabaseTest, UncommittedTransactionRollsBack) {
  const auto p = Path("r.db");
  Database db(p);
  {
    Database::Transaction tx(db);
    db.Exec("INSERT INTO bench_runs(start_time, tool_version, git_commit, collective, backend, device, world_size, "
            "dtype, redop, codec, algo, hostnames, context_json) VALUES('t','v','c','x','mpi','cpu',2,'fp32','sum',"
            "'none','native','h','{}')");
  }
  Statement n(db.handle(), "SELECT count(*) FROM bench_runs");
  ASSERT_TRUE(n.Step());
  EXPECT_EQ(n.ColumnInt(0), 0);
}

TEST_F(DatabaseTest, RefusesGarbageWithoutTouchingIt) {
  const auto p = Path("garbage.db");
  {
    std::ofstream f(p, std::ios::binary);
    for (int i = 0; i < 5000; ++i) f << "not a database " << i << "\n";
  }
  const std::string before = Slurp(p);
  EXPECT_THROW(Database db(p), InputError);
  EXPECT_EQ(Slurp(p), before);
}

TEST_F(DatabaseTest, RefusesForeignDatabase) {
  const auto p = Path("foreign.db");
  RawExec(p, "CREATE TABLE users(id INTEGER); INSERT INTO users VALUES(1);");
  const std::string before = Slurp(p);
  EXPECT_THROW(Database db(p), InputError);
  EXPECT_EQ(Slurp(p), before);
  const auto q = Path("other_app.db");
  RawExec(q, "PRAGMA application_id=1234;");
  EXPECT_THROW(Database db(q), InputError);
}

TEST_F(DatabaseTest, RefusesNewerSchema) {
  const auto p = Path("newer.db");
  { Database db(p); }
  RawExec(p, "PRAGMA user_version=99;");
  const std::string before = Slurp(p);
  try {
    Database db(p);
    FAIL() << "accepted a newer schema";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("newer"), std::string::npos);
  }
  EXPECT_EQ(Slurp(p), before);
}

TEST_F(DatabaseTest, RefusesMissingDirectory) { EXPECT_THROW(Database db(Path("no/such/dir/x.db")), InputError); }

}  // namespace
}  // namespace ciuic

namespace ciuic {
namespace {

TEST(DatabaseMigrationTest, VersionOneIsMigratedAfterABackupAndKeepsItsRuns) {
  const auto dir = std::filesystem::temp_directory_path() / ("ciuic_mig_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "old.db").string();
  {
    Database db(path);  // today's schema; turn it back into a version-1 file holding one run
    db.Exec("DROP TABLE studies; DROP TABLE trials; DROP TABLE best_configs; DROP TABLE calibrations; "
            "DROP TABLE gate_results; DROP TABLE validations; PRAGMA user_version=1;");
    db.Exec("INSERT INTO bench_runs (start_time, tool_version, git_commit, collective, backend, device, world_size, "
            "dtype, redop, codec, algo, hostnames, context_json) VALUES ('t', 'v', 'c', 'allreduce', 'mpi', 'cpu', 2, "
            "'fp32', 'sum', 'none', 'native', 'h', '{}')");
  }
  Database db(path);
  EXPECT_EQ(db.SchemaVersion(), kDatabaseSchemaVersion);
  EXPECT_TRUE(std::filesystem::exists(path + ".v1.bak"));
  Statement runs(db.handle(), "SELECT COUNT(*) FROM bench_runs");
  ASSERT_TRUE(runs.Step());
  EXPECT_EQ(runs.ColumnInt(0), 1);
  Statement studies(db.handle(), "SELECT COUNT(*) FROM studies");
  ASSERT_TRUE(studies.Step());
  EXPECT_EQ(studies.ColumnInt(0), 0);
  std::filesystem::remove_all(dir);
}

TEST(DatabaseMigrationTest, VersionTwoCalibrationsKeepTheirValuesAsSizeFreeRows) {
  const auto dir = std::filesystem::temp_directory_path() / ("ciuic_mig2_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "v2.db").string();
  {
    Database db(path);  // today's schema, turned back into version 2 with one calibration row
    db.Exec("DROP TABLE validations; DROP TABLE calibrations; ALTER TABLE studies DROP COLUMN constraints; "
            "CREATE TABLE calibrations (id INTEGER PRIMARY KEY, created TEXT NOT NULL, device TEXT NOT NULL, "
            "kernel TEXT NOT NULL, codec TEXT NOT NULL, gbps REAL NOT NULL); "
            "INSERT INTO calibrations (created, device, kernel, codec, gbps) VALUES ('t', 'cpu:x', 'encode', 'int8', 12.5); "
            "PRAGMA user_version=2;");
  }
  Database db(path);
  EXPECT_EQ(db.SchemaVersion(), kDatabaseSchemaVersion);
  EXPECT_TRUE(std::filesystem::exists(path + ".v2.bak"));
  Statement q(db.handle(), "SELECT gbps, bytes, ranks FROM calibrations");
  ASSERT_TRUE(q.Step());
  EXPECT_DOUBLE_EQ(q.ColumnDouble(0), 12.5);
  EXPECT_EQ(q.ColumnInt(1), 0);
  EXPECT_EQ(q.ColumnInt(2), 1);
  Statement v(db.handle(), "SELECT COUNT(*) FROM validations");
  ASSERT_TRUE(v.Step());
  EXPECT_EQ(v.ColumnInt(0), 0);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace ciuic
