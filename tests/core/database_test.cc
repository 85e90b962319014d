#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <climits>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <sstream>

#include <fmt/format.h>

#include "core/database.h"
#include "core/error.h"

namespace ciuic {
namespace {

class DatabaseTest : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("ciuic_db_" + std::to_string(::getpid()) + "_" +
                                                     testing::UnitTest::GetInstance()->current_test_info()->name());
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
    db.Exec(
        "INSERT INTO bench_runs(start_time, tool_version, git_commit, collective, backend, device, world_size, "
        "dtype, redop, codec, algo, hostnames, context_json) VALUES('t','v','c','allreduce','mpi','cpu',2,"
        "'fp32','sum','none','native','h','{}')");
    tx.Commit();
  }
  Database again(p);
  Statement n(again.handle(), "SELECT count(*) FROM bench_runs");
  ASSERT_TRUE(n.Step());
  EXPECT_EQ(n.ColumnInt(0), 1);
}

// A trigger of the user's that can refuse or skip rows (RAISE) is refused when the file is opened for
// writing, byte-identical; a read-only open reads it. One added while the file is open (past that
// check) still cannot pass a refused or a skipped row as stored: the insert is an InputError.
TEST_F(DatabaseTest, TriggersThatRefuseOrSkipRowsAreInputErrorsAndNothingIsStored) {
  const auto p = Path("t.db");
  { Database db(p); }
  RawExec(p, "CREATE TRIGGER users_rule BEFORE INSERT ON bench_runs BEGIN SELECT RAISE(ABORT, 'no more'); END");
  const std::string before = Slurp(p);
  try {
    Database db(p);
    ADD_FAILURE() << "a RAISE trigger was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("trigger 'users_rule' can refuse or skip"), std::string::npos) << e.what();
  }
  EXPECT_EQ(Slurp(p), before);
  EXPECT_NO_THROW(Database(p, Database::Access::kReadOnly));
  RawExec(p, "DROP TRIGGER users_rule; CREATE TRIGGER audit AFTER INSERT ON bench_runs BEGIN SELECT 1; END");
  const char* insert =
      "INSERT INTO bench_runs(start_time, tool_version, git_commit, collective, backend, device, world_size, "
      "dtype, redop, codec, algo, hostnames, context_json) VALUES('t','v','c','allreduce','mpi','cpu',2,"
      "'fp32','sum','none','native','h','{}')";
  Database db(p);  // a trigger without RAISE is the user's business
  for (const char* action : {"RAISE(ABORT, 'no more')", "RAISE(IGNORE)"}) {
    RawExec(p, fmt::format("DROP TRIGGER IF EXISTS late; CREATE TRIGGER late BEFORE INSERT ON bench_runs BEGIN "
                           "SELECT {}; END",
                           action)
                   .c_str());
    {
      Database::Transaction tx(db);
      Statement ins(db.handle(), insert);
      try {
        ins.Step();
        ADD_FAILURE() << action << ": the insert passed";
      } catch (const InputError& e) {
        EXPECT_NE(std::string(e.what()).find(std::string(action).find("IGNORE") != std::string::npos
                                                 ? "skipped a row it wrote"
                                                 : "refused a row: no more"),
                  std::string::npos)
            << e.what();
      }
    }
    Statement n(db.handle(), "SELECT count(*) FROM bench_runs");
    ASSERT_TRUE(n.Step());
    EXPECT_EQ(n.ColumnInt(0), 0) << action;
  }
}

// kCheckOnly (ciuic-bench --dry-run): a missing file stays missing, a good one (WAL) stays
// byte-identical with no companions left, and what a write would refuse is refused.
TEST_F(DatabaseTest, CheckOnlyWritesNothingAndRefusesWhatAWriteWould) {
  const auto none = Path("none.db");
  EXPECT_NO_THROW(Database(none, Database::Access::kCheckOnly));
  EXPECT_FALSE(std::filesystem::exists(none));
  const auto p = Path("good.db");
  { Database db(p); }
  const std::string before = Slurp(p);
  EXPECT_NO_THROW(Database(p, Database::Access::kCheckOnly));
  EXPECT_EQ(Slurp(p), before);
  EXPECT_FALSE(std::filesystem::exists(p + "-wal"));
  EXPECT_FALSE(std::filesystem::exists(p + "-shm"));
  RawExec(p, "CREATE TRIGGER users_rule BEFORE INSERT ON bench_rows BEGIN SELECT RAISE(IGNORE); END");
  const std::string with_trigger = Slurp(p);
  EXPECT_THROW(Database(p, Database::Access::kCheckOnly), InputError);
  EXPECT_EQ(Slurp(p), with_trigger);
}

TEST_F(DatabaseTest, UncommittedTransactionRollsBack) {
  const auto p = Path("r.db");
  Database db(p);
  {
    Database::Transaction tx(db);
    db.Exec(
        "INSERT INTO bench_runs(start_time, tool_version, git_commit, collective, backend, device, world_size, "
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

void InsertRun(Database& db, const std::string& tag, int context_bytes = 2) {
  Database::Transaction tx(db);
  Statement run(db.handle(),
                "INSERT INTO bench_runs(start_time, tool_version, git_commit, collective, backend, device, world_size, "
                "dtype, redop, codec, algo, hostnames, context_json) VALUES(?,'v','c','allreduce','mpi','cpu',2,"
                "'fp32','sum','none','native','h',?)");
  run.Bind(1, tag).Bind(2, std::string(context_bytes, 'x'));
  run.Step();
  tx.Commit();
}

void InsertRunAt(const std::string& path, const std::string& tag) {
  Database db(path);
  InsertRun(db, tag);
}

std::string RefusalOf(const std::string& path) {
  try {
    Database db(path);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

// A foreign file in WAL mode: a read-write open would have rewritten its header before refusing it.
TEST_F(DatabaseTest, RefusedWalFileIsByteIdenticalAndGetsNoCompanions) {
  const auto p = Path("foreign_wal.db");
  RawExec(p, "PRAGMA journal_mode=WAL; CREATE TABLE users(id INTEGER); INSERT INTO users VALUES(1);");
  const std::string before = Slurp(p);
  const auto entries_before = std::distance(std::filesystem::directory_iterator(dir_), {});
  EXPECT_NE(RefusalOf(p).find("not written by ciuic"), std::string::npos);
  EXPECT_EQ(Slurp(p), before);
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir_), {}), entries_before);
}

TEST_F(DatabaseTest, QuickCheckFailureIsRefusedAndLeftByteIdentical) {
  const auto p = Path("corrupt.db");
  {
    Database db(p);
    for (int i = 0; i < 200; ++i) InsertRun(db, "run" + std::to_string(i), 1500);
  }  // the last connection checkpoints: everything is in the main file now
  std::string bytes = Slurp(p);
  const size_t page = (static_cast<unsigned char>(bytes[16]) << 8) | static_cast<unsigned char>(bytes[17]);
  ASSERT_GE(bytes.size() / page, 50u);
  // A page in the middle of bench_runs' tree (fresh inserts: no free pages) becomes garbage; page 1
  // (header, schema) stays valid so only the integrity check can tell.
  const size_t victim = bytes.size() / page / 2;
  for (size_t i = 0; i < page; ++i) bytes[victim * page + i] = static_cast<char>(0xA5 ^ (i * 131));
  {
    std::ofstream f(p, std::ios::binary | std::ios::trunc);
    f << bytes;
  }
  const std::string why = RefusalOf(p);
  EXPECT_TRUE(why.find("quick_check") != std::string::npos || why.find("corrupt") != std::string::npos) << why;
  EXPECT_EQ(why.find('\n'), std::string::npos) << why;
  EXPECT_TRUE(Slurp(p) == bytes);
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir_), {}), 1);  // no -wal, -shm left behind
  // The schema page itself garbled after the header: refused as corrupt, not a raw SQL error.
  for (size_t i = 100; i < page; ++i) bytes[i] = static_cast<char>(i * 37);
  {
    std::ofstream f(p, std::ios::binary | std::ios::trunc);
    f << bytes;
  }
  EXPECT_NE(RefusalOf(p).find("it is corrupt"), std::string::npos) << RefusalOf(p);
  EXPECT_TRUE(Slurp(p) == bytes);
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir_), {}), 1);
}

TEST_F(DatabaseTest, InconsistentSchemaIsRefusedNamingTheTable) {
  const auto p = Path("inconsistent.db");
  { Database db(p); }
  RawExec(p, "DROP TABLE bench_rows;");
  const std::string before = Slurp(p);
  const std::string why = RefusalOf(p);
  EXPECT_NE(why.find("table 'bench_rows' is missing"), std::string::npos) << why;
  EXPECT_EQ(Slurp(p), before);
  const auto q = Path("missing_column.db");
  { Database db(q); }
  RawExec(q, "ALTER TABLE studies DROP COLUMN constraints;");
  EXPECT_NE(RefusalOf(q).find("table 'studies' has no column 'constraints'"), std::string::npos) << RefusalOf(q);
}

// ciuic writes versions 1..kDatabaseSchemaVersion only; a negative one used to index the migrations
// at -1 (a crash) or to be "migrated".
TEST_F(DatabaseTest, RefusesNegativeSchemaVersionsWithoutTouchingTheFile) {
  for (const int version : {-1, -7, INT32_MIN}) {
    SCOPED_TRACE(version);
    const auto p = Path(fmt::format("negative{}.db", version).c_str());
    { Database db(p); }
    InsertRunAt(p, "kept");
    RawExec(p, fmt::format("PRAGMA user_version={};", version).c_str());
    const std::string before = Slurp(p);
    const auto entries_before = std::distance(std::filesystem::directory_iterator(dir_), {});
    const std::string why = RefusalOf(p);
    EXPECT_NE(why.find(fmt::format("schema version {} is not one ciuic writes", version)), std::string::npos) << why;
    EXPECT_NE(why.find(p), std::string::npos) << why;
    EXPECT_TRUE(Slurp(p) == before);
    EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir_), {}), entries_before);  // no -wal, .bak
  }
}

// A file tagged ciuic at version 0 has had no schema from ciuic, so tables in it are someone else's:
// the migrations (CREATE TABLE IF NOT EXISTS) would have built ours around them and stamped it v4.
TEST_F(DatabaseTest, RefusesAVersionZeroFileHoldingTablesWithoutTouchingIt) {
  const struct {
    const char* table;
    const char* sql;
  } foreign[] = {
      {"bench_runs", "CREATE TABLE bench_runs (a, b); INSERT INTO bench_runs VALUES (1, 2);"},
      {"studies", "CREATE TABLE studies (x); INSERT INTO studies VALUES ('mine');"},
      {"photos", "CREATE TABLE photos (id INTEGER PRIMARY KEY, path TEXT); INSERT INTO photos VALUES (1, 'a.jpg');"},
  };
  for (const auto& f : foreign) {
    SCOPED_TRACE(f.table);
    const auto p = Path(fmt::format("v0_{}.db", f.table).c_str());
    RawExec(p, fmt::format("{} PRAGMA application_id={};", f.sql, kDatabaseApplicationId).c_str());
    const std::string before = Slurp(p);
    const auto entries_before = std::distance(std::filesystem::directory_iterator(dir_), {});
    const std::string why = RefusalOf(p);
    EXPECT_NE(why.find(fmt::format("version 0 file holds no tables, yet table '{}' is there", f.table)),
              std::string::npos)
        << why;
    EXPECT_TRUE(Slurp(p) == before);
    EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir_), {}), entries_before);  // no -wal, .bak
  }
  // Tagged but still empty (no table yet): nothing to lose, it gets the schema like a new file.
  const auto q = Path("v0_empty.db");
  RawExec(q, fmt::format("PRAGMA application_id={};", kDatabaseApplicationId).c_str());
  Database db(q);
  EXPECT_EQ(db.SchemaVersion(), kDatabaseSchemaVersion);
}

TEST_F(DatabaseTest, RefusesNonRegularFiles) {
  EXPECT_NE(RefusalOf("/dev/null").find("not a regular file"), std::string::npos);
  EXPECT_NE(RefusalOf(dir_.string()).find("not a regular file"), std::string::npos);
}

// 8 processes open a database that does not exist yet at the same moment, each storing its runs:
// every one succeeds and every run is there (before: "table bench_runs already exists", "database is
// locked").
TEST_F(DatabaseTest, ConcurrentWritersOnAFreshFileLoseNothing) {
  constexpr int kWriters = 8, kRuns = 25, kRounds = 4;
  for (int round = 0; round < kRounds; ++round) {
    const auto p = Path(("fresh" + std::to_string(round) + ".db").c_str());
    int go[2];
    ASSERT_EQ(::pipe(go), 0);
    std::vector<pid_t> pids;
    for (int w = 0; w < kWriters; ++w) {
      const pid_t pid = ::fork();
      ASSERT_GE(pid, 0);
      if (pid == 0) {
        ::close(go[1]);
        char c;
        (void)!::read(go[0], &c, 1);  // all start together when the parent closes the pipe
        int code = 0;
        try {
          Database db(p);
          for (int k = 0; k < kRuns; ++k) InsertRun(db, fmt::format("w{}-{}", w, k));
        } catch (const std::exception& e) {
          std::fprintf(stderr, "writer %d: %s\n", w, e.what());
          code = 2;
        }
        ::_exit(code);
      }
      pids.push_back(pid);
    }
    ::close(go[0]);
    const auto t0 = std::chrono::steady_clock::now();
    ::close(go[1]);
    int failed = 0;
    for (pid_t pid : pids) {
      int status = 0;
      ASSERT_EQ(::waitpid(pid, &status, 0), pid);
      failed += !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_EQ(failed, 0) << "round " << round;
    Database db(p);
    std::set<std::string> tags;
    Statement q(db.handle(), "SELECT start_time FROM bench_runs");
    while (q.Step()) tags.insert(q.ColumnText(0));
    EXPECT_EQ(tags.size(), size_t{kWriters * kRuns}) << "round " << round;
    for (int w = 0; w < kWriters; ++w)
      for (int k = 0; k < kRuns; ++k) EXPECT_TRUE(tags.count(fmt::format("w{}-{}", w, k))) << w << "-" << k;
    Statement check(db.handle(), "PRAGMA integrity_check");
    ASSERT_TRUE(check.Step());
    EXPECT_EQ(check.ColumnText(0), "ok");
    Statement mode(db.handle(), "PRAGMA journal_mode");
    ASSERT_TRUE(mode.Step());
    EXPECT_EQ(mode.ColumnText(0), "wal");
    std::printf("round %d: %d writers x %d runs in %.2f s, %d failed, %zu runs stored\n", round, kWriters, kRuns, s,
                failed, tags.size());
  }
}

}  // namespace
}  // namespace ciuic

namespace ciuic {
namespace {

// What version 5 added (bench rows' time spread): dropped to turn today's schema back into an older one.
constexpr const char* kDropV5Columns =
    "ALTER TABLE bench_rows DROP COLUMN time_min_us; ALTER TABLE bench_rows DROP COLUMN time_max_us; "
    "ALTER TABLE bench_rows DROP COLUMN time_stddev_us; ";

// A version-4 file's bench rows are kept, with no time spread (NULL), after a backup.
TEST(DatabaseMigrationTest, VersionFourBenchRowsGainTheTimeSpreadColumnsEmpty) {
  const auto dir = std::filesystem::temp_directory_path() / ("ciuic_mig4_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "v4.db").string();
  {
    Database db(path);  // today's schema, turned back into version 4 with one run and one row
    db.Exec(std::string(kDropV5Columns) + "PRAGMA user_version=4;");
    db.Exec(
        "INSERT INTO bench_runs (start_time, tool_version, git_commit, collective, backend, device, world_size, "
        "dtype, redop, codec, algo, hostnames, context_json) VALUES ('t', 'v', 'c', 'allreduce', 'mpi', 'cpu', 2, "
        "'fp32', 'sum', 'none', 'native', 'h', '{}')");
    db.Exec(
        "INSERT INTO bench_rows (run_id, size_bytes, count, inplace, root, iters, time_us, time_p50_us, "
        "time_p99_us, algbw_gbps, busbw_gbps, wrong) VALUES (1, 1024, 256, 0, -1, 20, 12.5, 12.0, 14.0, 0.08, "
        "0.08, 0)");
  }
  Database db(path);
  EXPECT_EQ(db.SchemaVersion(), kDatabaseSchemaVersion);
  EXPECT_TRUE(std::filesystem::exists(path + ".v4.bak"));
  Statement q(db.handle(), "SELECT time_us, time_p50_us, time_min_us, time_max_us, time_stddev_us FROM bench_rows");
  ASSERT_TRUE(q.Step());
  EXPECT_DOUBLE_EQ(q.ColumnDouble(0), 12.5);
  EXPECT_DOUBLE_EQ(q.ColumnDouble(1), 12.0);
  EXPECT_TRUE(q.ColumnIsNull(2));
  EXPECT_TRUE(q.ColumnIsNull(3));
  EXPECT_TRUE(q.ColumnIsNull(4));
  EXPECT_FALSE(q.Step());
  std::filesystem::remove_all(dir);
}

// A file already at the backup's name (an earlier migration's backup, or anything the user keeps
// there, a folder included) is never replaced: the backup takes the next free numbered name.
TEST(DatabaseMigrationTest, TheBackupNeverReplacesAFileAtItsName) {
  const auto dir = std::filesystem::temp_directory_path() / ("ciuic_migbak_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "v4.db").string();
  {
    Database db(path);
    db.Exec(std::string(kDropV5Columns) + "PRAGMA user_version=4;");
  }
  {
    std::ofstream kept(path + ".v4.bak");
    kept << "precious";
  }
  std::filesystem::create_directories(path + ".v4.bak.1");
  {
    Database db(path);
    EXPECT_EQ(db.SchemaVersion(), kDatabaseSchemaVersion);
    EXPECT_EQ(db.backup(), path + ".v4.bak.2");
  }
  std::ifstream kept(path + ".v4.bak");
  std::string text((std::istreambuf_iterator<char>(kept)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, "precious");
  EXPECT_TRUE(std::filesystem::is_directory(path + ".v4.bak.1"));
  Database old(path + ".v4.bak.2", Database::Access::kReadOnly);
  EXPECT_EQ(old.SchemaVersion(), 4);
  Database again(path);  // nothing left to migrate: no backup
  EXPECT_EQ(again.backup(), "");
  std::filesystem::remove_all(dir);
}

TEST(DatabaseMigrationTest, VersionOneIsMigratedAfterABackupAndKeepsItsRuns) {
  const auto dir = std::filesystem::temp_directory_path() / ("ciuic_mig_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "old.db").string();
  {
    Database db(path);  // today's schema; turn it back into a version-1 file holding one run
    db.Exec(
        "DROP TABLE studies; DROP TABLE trials; DROP TABLE best_configs; DROP TABLE calibrations; "
        "DROP TABLE gate_results; DROP TABLE validations; " +
        std::string(kDropV5Columns) + "PRAGMA user_version=1;");
    db.Exec(
        "INSERT INTO bench_runs (start_time, tool_version, git_commit, collective, backend, device, world_size, "
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
    db.Exec(
        "DROP TABLE validations; DROP TABLE calibrations; ALTER TABLE studies DROP COLUMN constraints; "
        "ALTER TABLE trials DROP COLUMN reason; " +
        std::string(kDropV5Columns) +
        "CREATE TABLE calibrations (id INTEGER PRIMARY KEY, created TEXT NOT NULL, device TEXT NOT NULL, "
        "kernel TEXT NOT NULL, codec TEXT NOT NULL, gbps REAL NOT NULL); "
        "INSERT INTO calibrations (created, device, kernel, codec, gbps) VALUES ('t', 'cpu:x', 'encode', 'int8', "
        "12.5); "
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
