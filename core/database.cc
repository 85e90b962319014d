#include "core/database.h"

#include <sqlite3.h>

#include <filesystem>
#include <vector>

#include "core/error.h"

#define CIUIC_SQLITE_CHECK(db, call)                                                          \
  do {                                                                                        \
    int ciuic_sqlite_rc_ = (call);                                                            \
    if (ciuic_sqlite_rc_ != SQLITE_OK && ciuic_sqlite_rc_ != SQLITE_DONE &&                   \
        ciuic_sqlite_rc_ != SQLITE_ROW) {                                                     \
      throw ::ciuic::RuntimeError(::ciuic::FormatCallFailure(                                 \
          #call, (db) ? sqlite3_errmsg(db) : sqlite3_errstr(ciuic_sqlite_rc_), __FILE__, __LINE__)); \
    }                                                                                         \
  } while (0)

namespace ciuic {

namespace {

// migrations[v] takes a database at schema version v to v + 1 (v = 0 is a new file).
const std::vector<const char*> kMigrations = {
    R"sql(
CREATE TABLE bench_runs (
  id INTEGER PRIMARY KEY,
  start_time TEXT NOT NULL,
  tool_version TEXT NOT NULL,
  git_commit TEXT NOT NULL,
  collective TEXT NOT NULL,
  backend TEXT NOT NULL,
  device TEXT NOT NULL,
  world_size INTEGER NOT NULL,
  dtype TEXT NOT NULL,
  redop TEXT NOT NULL,
  codec TEXT NOT NULL,
  algo TEXT NOT NULL,
  hostnames TEXT NOT NULL,
  context_json TEXT NOT NULL,
  peak_busbw_gbps REAL,
  total_wrong INTEGER
);
CREATE TABLE bench_rows (
  run_id INTEGER NOT NULL REFERENCES bench_runs(id) ON DELETE CASCADE,
  size_bytes INTEGER NOT NULL,
  count INTEGER NOT NULL,
  inplace INTEGER NOT NULL,
  root INTEGER NOT NULL,
  iters INTEGER NOT NULL,
  time_us REAL,
  time_p50_us REAL,
  time_p99_us REAL,
  algbw_gbps REAL,
  busbw_gbps REAL,
  wrong INTEGER,
  error TEXT
);
CREATE INDEX bench_rows_run ON bench_rows(run_id);
)sql",
    // v2: ciuic-tune studies, their trials, the best configuration per (topology, op, size band).
    R"sql(
CREATE TABLE studies (
  id INTEGER PRIMARY KEY,
  created TEXT NOT NULL,
  tool_version TEXT NOT NULL,
  git_commit TEXT NOT NULL,
  topology TEXT NOT NULL,
  topology_fingerprint TEXT NOT NULL,
  nodes INTEGER NOT NULL,
  workload TEXT NOT NULL,
  strategy TEXT NOT NULL,
  budget INTEGER NOT NULL,
  seed INTEGER NOT NULL,
  mode TEXT NOT NULL,
  status TEXT NOT NULL,
  best_score_us REAL,
  best_config TEXT,
  profile_path TEXT
);
CREATE TABLE trials (
  study_id INTEGER NOT NULL REFERENCES studies(id) ON DELETE CASCADE,
  idx INTEGER NOT NULL,
  config TEXT NOT NULL,
  score_us REAL,
  mode TEXT NOT NULL,
  status TEXT NOT NULL,
  elapsed_s REAL NOT NULL,
  PRIMARY KEY (study_id, idx)
);
CREATE TABLE best_configs (
  topology_fingerprint TEXT NOT NULL,
  op TEXT NOT NULL,
  min_bytes INTEGER NOT NULL,
  max_bytes INTEGER NOT NULL,
  config TEXT NOT NULL,
  predicted_us REAL,
  measured_us REAL,
  study_id INTEGER NOT NULL,
  updated TEXT NOT NULL,
  PRIMARY KEY (topology_fingerprint, op, min_bytes)
);
CREATE TABLE calibrations (
  id INTEGER PRIMARY KEY,
  created TEXT NOT NULL,
  device TEXT NOT NULL,
  kernel TEXT NOT NULL,
  codec TEXT NOT NULL,
  gbps REAL NOT NULL
);
CREATE TABLE gate_results (
  codec TEXT NOT NULL,
  config TEXT NOT NULL,
  final_loss REAL NOT NULL,
  baseline_loss REAL NOT NULL,
  passed INTEGER NOT NULL,
  created TEXT NOT NULL,
  PRIMARY KEY (codec, config)
);
)sql",
    // v3: calibrations measured per size and rank count; study constraints; cost-model validations.
    R"sql(
ALTER TABLE calibrations ADD COLUMN bytes INTEGER NOT NULL DEFAULT 0;
ALTER TABLE calibrations ADD COLUMN ranks INTEGER NOT NULL DEFAULT 1;
ALTER TABLE studies ADD COLUMN constraints TEXT NOT NULL DEFAULT '';
CREATE TABLE validations (
  id INTEGER PRIMARY KEY,
  created TEXT NOT NULL,
  device TEXT NOT NULL,
  ranks INTEGER NOT NULL,
  codec TEXT NOT NULL,
  algo TEXT NOT NULL,
  bytes INTEGER NOT NULL,
  measured_us REAL NOT NULL,
  predicted_us REAL NOT NULL
);
)sql",
};

bool IsEmptyFile(const std::string& path) {
  std::error_code ec;
  return !std::filesystem::exists(path, ec) || std::filesystem::file_size(path, ec) == 0;
}

}  // namespace

Statement::Statement(sqlite3* db, std::string_view sql) : db_(db) {
  CIUIC_SQLITE_CHECK(db_, sqlite3_prepare_v2(db_, sql.data(), static_cast<int>(sql.size()), &stmt_, nullptr));
}
Statement::~Statement() { sqlite3_finalize(stmt_); }
Statement& Statement::Bind(int i, int64_t v) {
  CIUIC_SQLITE_CHECK(db_, sqlite3_bind_int64(stmt_, i, v));
  return *this;
}
Statement& Statement::Bind(int i, double v) {
  CIUIC_SQLITE_CHECK(db_, sqlite3_bind_double(stmt_, i, v));
  return *this;
}
Statement& Statement::Bind(int i, const std::string& v) {
  CIUIC_SQLITE_CHECK(db_, sqlite3_bind_text(stmt_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT));
  return *this;
}
Statement& Statement::BindNull(int i) {
  CIUIC_SQLITE_CHECK(db_, sqlite3_bind_null(stmt_, i));
  return *this;
}
bool Statement::Step() {
  const int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  CIUIC_SQLITE_CHECK(db_, rc);
  return false;
}
void Statement::Reset() {
  sqlite3_reset(stmt_);
  sqlite3_clear_bindings(stmt_);
}
int64_t Statement::ColumnInt(int c) const { return sqlite3_column_int64(stmt_, c); }
double Statement::ColumnDouble(int c) const { return sqlite3_column_double(stmt_, c); }
bool Statement::ColumnIsNull(int col) const { return sqlite3_column_type(stmt_, col) == SQLITE_NULL; }
std::string Statement::ColumnText(int c) const {
  const unsigned char* t = sqlite3_column_text(stmt_, c);
  return t ? reinterpret_cast<const char*>(t) : "";
}

Database::Database(const std::string& path) : path_(path) {
  const bool fresh = IsEmptyFile(path);
  if (sqlite3_open_v2(path.c_str(), &db_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr) != SQLITE_OK) {
    const std::string msg = db_ ? sqlite3_errmsg(db_) : "out of memory";
    sqlite3_close(db_);
    db_ = nullptr;
    throw InputError(fmt::format("cannot open database '{}': {}", path, msg));
  }
  sqlite3_busy_timeout(db_, 10000);
  int32_t app_id = 0;
  int version = 0;
  int64_t tables = 0;
  try {
    Statement q(db_, "PRAGMA application_id");
    if (q.Step()) app_id = static_cast<int32_t>(q.ColumnInt(0));
    Statement v(db_, "PRAGMA user_version");
    if (v.Step()) version = static_cast<int>(v.ColumnInt(0));
    Statement t(db_, "SELECT count(*) FROM sqlite_master");
    if (t.Step()) tables = t.ColumnInt(0);
  } catch (const Error&) {
    sqlite3_close(db_);
    db_ = nullptr;
    throw InputError(fmt::format("'{}' is not a SQLite database (left unchanged)", path));
  }
  auto refuse = [&](const std::string& why) {
    sqlite3_close(db_);
    db_ = nullptr;
    throw InputError(fmt::format("refusing database '{}': {} (left unchanged)", path, why));
  };
  if (app_id != kDatabaseApplicationId && !(app_id == 0 && (fresh || tables == 0))) {
    refuse("it was not written by ciuic");
  }
  if (version > kDatabaseSchemaVersion) {
    refuse(fmt::format("schema version {} is newer than this ciuic ({})", version, kDatabaseSchemaVersion));
  }
  Exec("PRAGMA journal_mode=WAL");
  Exec("PRAGMA foreign_keys=ON");
  if (version < kDatabaseSchemaVersion) Migrate(version);
}

Database::~Database() {
  if (db_) sqlite3_close(db_);
}

void Database::Migrate(int from) {
  if (from > 0) {
    // Keep the old file before touching its schema.
    Exec("PRAGMA wal_checkpoint(TRUNCATE)");
    const std::string backup = fmt::format("{}.v{}.bak", path_, from);
    std::error_code ec;
    std::filesystem::copy_file(path_, backup, std::filesystem::copy_options::overwrite_existing, ec);
    if (ec) throw RuntimeError(fmt::format("cannot back up '{}' before migrating: {}", path_, ec.message()));
  }
  Transaction tx(*this);
  for (int v = from; v < kDatabaseSchemaVersion; ++v) Exec(kMigrations[v]);
  Exec(fmt::format("PRAGMA application_id={}", kDatabaseApplicationId));
  Exec(fmt::format("PRAGMA user_version={}", kDatabaseSchemaVersion));
  tx.Commit();
}

void Database::Exec(std::string_view sql) {
  char* err = nullptr;
  const std::string text(sql);
  if (sqlite3_exec(db_, text.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
    std::string msg = err ? err : "unknown error";
    sqlite3_free(err);
    throw RuntimeError(fmt::format("database '{}': {}", path_, msg));
  }
}

int64_t Database::LastInsertId() const { return sqlite3_last_insert_rowid(db_); }

int Database::SchemaVersion() const {
  Statement v(db_, "PRAGMA user_version");
  return v.Step() ? static_cast<int>(v.ColumnInt(0)) : 0;
}

Database::Transaction::Transaction(Database& db) : db_(db) { db_.Exec("BEGIN IMMEDIATE"); }
Database::Transaction::~Transaction() {
  if (!done_) {
    try {
      db_.Exec("ROLLBACK");
    } catch (...) {
    }
  }
}
void Database::Transaction::Commit() {
  db_.Exec("COMMIT");
  done_ = true;
}

}  // namespace ciuic
