#include "core/database.h"

#include <fcntl.h>
#include <sqlite3.h>

#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/files.h"
#include "core/log.h"

#define CIUIC_SQLITE_CHECK(db, call)                                                                          \
  do {                                                                                                        \
    int ciuic_sqlite_rc_ = (call);                                                                            \
    if (ciuic_sqlite_rc_ != SQLITE_OK && ciuic_sqlite_rc_ != SQLITE_DONE && ciuic_sqlite_rc_ != SQLITE_ROW) { \
      throw ::ciuic::RuntimeError(::ciuic::FormatCallFailure(                                                 \
          #call, (db) ? sqlite3_errmsg(db) : sqlite3_errstr(ciuic_sqlite_rc_), __FILE__, __LINE__));          \
    }                                                                                                         \
  } while (0)

namespace ciuic {

namespace {

// migrations[v] takes a database at schema version v to v + 1 (v = 0 is a new file).
const std::vector<const char*> kMigrations = {
    R"sql(
CREATE TABLE IF NOT EXISTS bench_runs (
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
CREATE TABLE IF NOT EXISTS bench_rows (
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
CREATE INDEX IF NOT EXISTS bench_rows_run ON bench_rows(run_id);
)sql",
    // v2: ciuic-tune studies, their trials, the best configuration per (topology, op, size band).
    R"sql(
CREATE TABLE IF NOT EXISTS studies (
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
CREATE TABLE IF NOT EXISTS trials (
  study_id INTEGER NOT NULL REFERENCES studies(id) ON DELETE CASCADE,
  idx INTEGER NOT NULL,
  config TEXT NOT NULL,
  score_us REAL,
  mode TEXT NOT NULL,
  status TEXT NOT NULL,
  elapsed_s REAL NOT NULL,
  PRIMARY KEY (study_id, idx)
);
CREATE TABLE IF NOT EXISTS best_configs (
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
CREATE TABLE IF NOT EXISTS calibrations (
  id INTEGER PRIMARY KEY,
  created TEXT NOT NULL,
  device TEXT NOT NULL,
  kernel TEXT NOT NULL,
  codec TEXT NOT NULL,
  gbps REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS gate_results (
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
CREATE TABLE IF NOT EXISTS validations (
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
    // v4: why a trial failed (a measurement whose ciuic-bench died: its exit or signal and last line).
    R"sql(
ALTER TABLE trials ADD COLUMN reason TEXT NOT NULL DEFAULT '';
)sql",
    // v5: the spread of a bench row's timed iterations (min, max, sample standard deviation); rows
    // stored before have none (NULL).
    R"sql(
ALTER TABLE bench_rows ADD COLUMN time_min_us REAL;
ALTER TABLE bench_rows ADD COLUMN time_max_us REAL;
ALTER TABLE bench_rows ADD COLUMN time_stddev_us REAL;
)sql",
};

bool IsEmptyFile(const std::string& path) {
  std::error_code ec;
  return !std::filesystem::exists(path, ec) || std::filesystem::file_size(path, ec) == 0;
}

}  // namespace

Statement::Statement(sqlite3* db, std::string_view sql) : db_(db) {
  CIUIC_SQLITE_CHECK(db_, sqlite3_prepare_v2(db_, sql.data(), static_cast<int>(sql.size()), &stmt_, nullptr));
  // One row given as VALUES, stored or replacing another: such an insert changes one row unless a
  // trigger skipped it (INSERT OR IGNORE and INSERT ... SELECT may change none by design).
  std::string up(sql);
  for (char& c : up) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  one_row_insert_ = (up.rfind("INSERT INTO", 0) == 0 || up.rfind("INSERT OR REPLACE INTO", 0) == 0) &&
                    up.find("VALUES") != std::string::npos && up.find("SELECT") == std::string::npos;
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
  // A trigger the user added to the file (none of ciuic's schema has one) may refuse a row, RAISE
  // ABORT, FAIL or ROLLBACK, or skip it, RAISE(IGNORE): the file's own rule, so bad input (exit 1), and
  // a skipped row must not pass as stored (a run's rows would join an older run's id).
  const auto file = [this] {
    const char* f = sqlite3_db_filename(db_, "main");
    return PrintableLine(f && *f ? f : ":memory:", 300);
  };
  if (rc == SQLITE_DONE) {
    if (one_row_insert_ && sqlite3_changes(db_) == 0)
      throw InputError(
          fmt::format("database '{}': a trigger ciuic did not create skipped a row it wrote "
                      "(RAISE(IGNORE)); the write was abandoned",
                      file()));
    return false;
  }
  if (sqlite3_extended_errcode(db_) == SQLITE_CONSTRAINT_TRIGGER)
    throw InputError(
        fmt::format("database '{}' refused a row: {} (a trigger ciuic did not create); the write was "
                    "abandoned",
                    file(), PrintableLine(sqlite3_errmsg(db_), 300)));
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

namespace {

// Every table and its columns, as SQLite reports them.
std::map<std::string, std::set<std::string>> TableColumns(sqlite3* db) {
  std::map<std::string, std::set<std::string>> out;
  Statement tables(db, "SELECT name FROM sqlite_master WHERE type = 'table'");
  while (tables.Step()) {
    const std::string name = tables.ColumnText(0);
    Statement cols(db, "SELECT name FROM pragma_table_info(?)");
    cols.Bind(1, name);
    auto& set = out[name];
    while (cols.Step()) set.insert(cols.ColumnText(0));
  }
  return out;
}

// What a ciuic file at `version` lacks of the schema the migrations up to that version make ("" if
// nothing): one clear refusal instead of a raw SQL error in the middle of a run. Version 0 is a file
// ciuic has not given a schema yet, which holds no table at all: tables there are someone else's,
// and the migrations (CREATE TABLE IF NOT EXISTS) would build ours around them.
std::string SchemaProblem(sqlite3* db, int version) {
  if (version == 0) {
    const auto actual = TableColumns(db);
    if (!actual.empty())
      return fmt::format("a version 0 file holds no tables, yet table '{}' is there", actual.begin()->first);
    return "";
  }
  sqlite3* ref = nullptr;
  if (sqlite3_open(":memory:", &ref) != SQLITE_OK) {
    sqlite3_close(ref);
    throw RuntimeError("cannot open an in-memory database");
  }
  std::map<std::string, std::set<std::string>> expected;
  try {
    for (int v = 0; v < version; ++v)
      CIUIC_SQLITE_CHECK(ref, sqlite3_exec(ref, kMigrations[v], nullptr, nullptr, nullptr));
    expected = TableColumns(ref);
  } catch (...) {
    sqlite3_close(ref);
    throw;
  }
  sqlite3_close(ref);
  const auto actual = TableColumns(db);
  for (const auto& [table, columns] : expected) {
    const auto it = actual.find(table);
    if (it == actual.end()) return fmt::format("table '{}' is missing", table);
    for (const auto& c : columns)
      if (!it->second.count(c)) return fmt::format("table '{}' has no column '{}'", table, c);
  }
  return "";
}

// fsyncs the folder holding `path`: a name linked there is durable once the folder's entry is (as
// core/files.cc's renames are; a file system without directory fsync keeps the entry anyway, so a
// refusal is no error).
void SyncFolderOf(const std::string& path) {
  const std::string folder = std::filesystem::path(path).parent_path().string();
  const int dir = ::open(folder.empty() ? "." : folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) return;
  (void)::fsync(dir);
  ::close(dir);
}

}  // namespace

Database::Database(const std::string& path, Access access) : path_(path) {
  std::error_code ec;
  const auto st = std::filesystem::status(path, ec);
  if (std::filesystem::exists(st) && !std::filesystem::is_regular_file(st))
    throw InputError(fmt::format("refusing database '{}': not a regular file (left unchanged)", path));
  if (access == Access::kReadOnly && (!std::filesystem::exists(st) || IsEmptyFile(path)))
    throw InputError(fmt::format("no database at '{}'", path));
  if (access == Access::kCheckOnly && (!std::filesystem::exists(st) || IsEmptyFile(path))) return;
  try {
    // Everything that can refuse the file is decided on a read-only connection, so a refused file is
    // left byte-identical (a read-write open may rewrite the header: WAL flag, change counter).
    if (!IsEmptyFile(path)) {
      CheckFileHeader();
      // A read-only connection to a WAL-mode file creates its -wal and -shm files: removed again
      // (when this connection made them and the log is empty) if the file is refused as corrupt or
      // inconsistent, which no other ciuic is using.
      std::vector<std::string> made;
      for (const char* suffix : {"-wal", "-shm"})
        if (!std::filesystem::exists(path + suffix, ec)) made.push_back(path + suffix);
      if (access == Access::kCheckOnly) {
        // Nothing may be written, nor a file another ciuic may be opening removed. A hot rollback
        // journal (a ciuic killed while creating the schema) is the next write's to recover: not
        // judged here. With no -wal and -shm no connection is open and the main file holds every
        // commit: it is read as immutable, which creates no companion. With them, they are reused.
        if (std::filesystem::exists(path + "-journal", ec)) return;
        Open(SQLITE_OPEN_READONLY, /*immutable=*/made.size() == 2);
      } else {
        Open(SQLITE_OPEN_READONLY);
        RollBackHotJournal();
      }
      try {
        Inspect();
        // A trigger that can refuse or skip a row (RAISE) would abandon a write after the read-write
        // open rewrote the header: refused now, while the file is byte-identical. ciuic's schema has
        // no trigger; one without RAISE (an audit log of the user's) is left to work.
        if (access != Access::kReadOnly) {
          Statement t(db_, "SELECT name FROM sqlite_master WHERE type = 'trigger' AND upper(sql) LIKE '%RAISE%'");
          if (t.Step())
            Refuse(
                fmt::format("trigger '{}' can refuse or skip the rows ciuic writes (RAISE); ciuic created no "
                            "trigger",
                            PrintableLine(t.ColumnText(0), 200)));
        }
      } catch (const InputError&) {
        sqlite3_close(db_);
        db_ = nullptr;
        if (std::filesystem::file_size(path + "-wal", ec) == 0 && !ec)
          for (const auto& f : made) std::filesystem::remove(f, ec);
        throw;
      }
      if (access == Access::kReadOnly) return;  // the inspected connection is the one to read on
      if (access == Access::kCheckOnly) {
        sqlite3_close(db_);
        db_ = nullptr;
        return;
      }
      sqlite3_close(db_);
      db_ = nullptr;
    }
    Open(SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
    CreateOrMigrate();
    UseWal();
    Exec("PRAGMA foreign_keys=ON");
  } catch (...) {
    sqlite3_close(db_);
    db_ = nullptr;
    throw;
  }
}

Database::~Database() {
  if (db_) sqlite3_close(db_);
}

void Database::Open(int flags, bool immutable) {
  std::string name = path_;
  if (immutable) {  // a URI: '?', '#' and '%' of the path escaped
    name = "file:";
    for (const char c : path_) name += c == '?' || c == '#' || c == '%' ? fmt::format("%{:02X}", c) : std::string(1, c);
    name += "?immutable=1";
    flags |= SQLITE_OPEN_URI;
  }
  if (sqlite3_open_v2(name.c_str(), &db_, flags, nullptr) != SQLITE_OK) {
    const std::string msg = db_ ? sqlite3_errmsg(db_) : "out of memory";
    sqlite3_close(db_);
    db_ = nullptr;
    throw InputError(fmt::format("cannot open database '{}': {}", path_, msg));
  }
  // Before anything else: every later statement may meet another writer's lock.
  sqlite3_busy_timeout(db_, kBusyTimeoutMs);
}

// ciuic writes outside WAL only while giving a new file its schema and switching it to WAL. A ciuic
// killed then leaves a hot rollback journal, which a read-only connection cannot roll back
// (SQLITE_READONLY_ROLLBACK): every later open would fail. The first read on a read-write connection
// restores the file's last committed state (for a new file: empty), as any SQLite opener would; the
// raw header was already checked, so only a file that claims to be ciuic's gets here.
void Database::RollBackHotJournal() {
  if (sqlite3_exec(db_, "SELECT count(*) FROM sqlite_master", nullptr, nullptr, nullptr) == SQLITE_OK ||
      sqlite3_extended_errcode(db_) != SQLITE_READONLY_ROLLBACK)
    return;  // other errors are Inspect's to name
  sqlite3_close(db_);
  db_ = nullptr;
  Open(SQLITE_OPEN_READWRITE);
  Exec("SELECT count(*) FROM sqlite_master");
  sqlite3_close(db_);
  db_ = nullptr;
  Open(SQLITE_OPEN_READONLY);
}

void Database::Refuse(const std::string& why) const {
  throw InputError(fmt::format("refusing database '{}': {} (left unchanged)", path_, why));
}

Database::Header Database::ReadHeader() const {
  Header h;
  Statement q(db_, "PRAGMA application_id");
  if (q.Step()) h.app_id = static_cast<int32_t>(q.ColumnInt(0));
  Statement v(db_, "PRAGMA user_version");
  if (v.Step()) h.version = static_cast<int>(v.ColumnInt(0));
  Statement t(db_, "SELECT count(*) FROM sqlite_master");
  if (t.Step()) h.tables = t.ColumnInt(0);
  return h;
}

void Database::CheckHeader(const Header& h) const {
  if (h.app_id != kDatabaseApplicationId && !(h.app_id == 0 && h.tables == 0)) Refuse("it was not written by ciuic");
  // ciuic writes versions 1..kDatabaseSchemaVersion; a negative one was written by someone else.
  if (h.version < 0) Refuse(fmt::format("schema version {} is not one ciuic writes", h.version));
  if (h.version > kDatabaseSchemaVersion) {
    Refuse(fmt::format("schema version {} is newer than this ciuic ({})", h.version, kDatabaseSchemaVersion));
  }
  if (h.app_id == kDatabaseApplicationId) {
    const std::string problem = SchemaProblem(db_, h.version);
    if (!problem.empty()) Refuse(fmt::format("its schema does not match version {}: {}", h.version, problem));
  }
}

// The SQLite header (sqlite.org/fileformat.html, "The Database Header") read as bytes: a file that is
// not SQLite or that another application marked as its own is refused before SQLite opens it, since
// even a read-only connection creates -wal/-shm files beside a WAL-mode file. ciuic writes its
// application_id with the schema, before switching a new file to WAL, so it is in the main file.
void Database::CheckFileHeader() const {
  unsigned char h[108] = {};
  size_t got = 0;
  std::FILE* f = std::fopen(path_.c_str(), "rb");
  if (!f) throw InputError(fmt::format("cannot open database '{}': {}", path_, std::strerror(errno)));
  got = std::fread(h, 1, sizeof h, f);
  std::fclose(f);
  if (got < 100 || std::memcmp(h, "SQLite format 3", 16) != 0)
    throw InputError(fmt::format("'{}' is not a SQLite database (left unchanged)", path_));
  auto be32 = [&](int at) {
    return static_cast<int32_t>(uint32_t{h[at]} << 24 | uint32_t{h[at + 1]} << 16 | uint32_t{h[at + 2]} << 8 |
                                h[at + 3]);
  };
  const int32_t app_id = be32(68), version = be32(60);
  // Page 1's b-tree header follows at byte 100: an interior page (5) or a leaf with cells means the
  // schema holds tables, which a file ciuic may adopt (application_id 0) must not.
  const bool has_tables = got == sizeof h && (h[100] == 0x05 || (h[103] | h[104]) != 0);
  if (app_id != kDatabaseApplicationId && (app_id != 0 || has_tables)) Refuse("it was not written by ciuic");
  // A newer ciuic may be using the file right now: its -wal and -shm are left alone.
  if (app_id == kDatabaseApplicationId && version > kDatabaseSchemaVersion)
    Refuse(fmt::format("schema version {} is newer than this ciuic ({})", version, kDatabaseSchemaVersion));
  if (version < 0) Refuse(fmt::format("schema version {} is not one ciuic writes", version));
}

void Database::Inspect() {
  Header h;
  std::string integrity;
  try {
    h = ReadHeader();
    CheckHeader(h);
    Statement check(db_, "PRAGMA quick_check");
    if (check.Step()) integrity = check.ColumnText(0);
  } catch (const InputError&) {
    throw;
  } catch (const Error& e) {
    // The code is read from the message too: statements finalized while unwinding reset errcode.
    const std::string what = e.what();
    const int rc = sqlite3_errcode(db_);
    auto said = [&](int code) { return rc == code || what.find(sqlite3_errstr(code)) != std::string::npos; };
    if (said(SQLITE_NOTADB)) throw InputError(fmt::format("'{}' is not a SQLite database (left unchanged)", path_));
    if (said(SQLITE_CORRUPT)) Refuse(fmt::format("it is corrupt: {}", sqlite3_errstr(SQLITE_CORRUPT)));
    throw RuntimeError(fmt::format("cannot read database '{}': {}", path_, e.what()));
  }
  if (integrity != "ok") {
    integrity = integrity.substr(0, 200);
    for (char& c : integrity)
      if (c == '\n') c = ' ';
    Refuse(fmt::format("it fails PRAGMA quick_check ({})", integrity));
  }
}

void Database::CreateOrMigrate() {
  // A file made by an older ciuic is copied first (outside the transaction: a checkpoint cannot run
  // inside one); the copy is kept only if this connection is the one that migrates.
  std::string copy;
  {
    const Header h = ReadHeader();
    if (h.app_id == kDatabaseApplicationId && h.version > 0 && h.version < kDatabaseSchemaVersion) {
      try {
        Exec("PRAGMA wal_checkpoint(TRUNCATE)");
      } catch (const Error&) {  // another connection is reading: the backup below is consistent anyway
      }
      copy = fmt::format("{}.v{}.bak.tmp.{}", path_, h.version, getpid());
      BackupTo(copy);
    }
  }
  // The version is read and the schema created in one write transaction: concurrent openers of a new
  // file wait here, and all but the first find the schema in place.
  Transaction tx(*this);
  const Header h = ReadHeader();
  CheckHeader(h);
  if (h.version < kDatabaseSchemaVersion) {
    if (h.version > 0) {
      if (copy.empty()) throw RuntimeError(fmt::format("cannot back up '{}' before migrating it", path_));
      backup_ = KeepBackup(copy, fmt::format("{}.v{}.bak", path_, h.version));
      copy.clear();
    }
    for (int v = h.version; v < kDatabaseSchemaVersion; ++v) Exec(kMigrations[v]);
    Exec(fmt::format("PRAGMA application_id={}", kDatabaseApplicationId));
    Exec(fmt::format("PRAGMA user_version={}", kDatabaseSchemaVersion));
  }
  tx.Commit();
  if (!copy.empty()) std::remove(copy.c_str());
  if (!backup_.empty())
    LogInfo("migrated '{}' to schema {}; the file as it was is kept as '{}'", PrintableLine(path_, 300),
            kDatabaseSchemaVersion, PrintableLine(backup_, 300));
}

// Gives `copy` the name `wanted`, or `wanted.1`, `wanted.2`, ... where that is taken: a hard link never
// replaces a file (a backup of an earlier migration, or anything else the user keeps there). The folder
// is fsync'd before the migration goes on, so a crash after it commits cannot lose the backup's name
// (the copy's data SQLite synced when the backup committed). Returns the name; throws InputError when
// none of 100 names is free or the folder refuses a link.
std::string Database::KeepBackup(const std::string& copy, const std::string& wanted) {
  for (int i = 0; i < 100; ++i) {
    const std::string name = i == 0 ? wanted : fmt::format("{}.{}", wanted, i);
    if (link(copy.c_str(), name.c_str()) == 0) {
      std::remove(copy.c_str());
      SyncFolderOf(name);
      return name;
    }
    if (errno != EEXIST) {
      const std::string why = std::strerror(errno);
      std::remove(copy.c_str());
      throw InputError(fmt::format("cannot keep a backup of '{}' as '{}' before migrating it: {}", path_, name, why));
    }
  }
  std::remove(copy.c_str());
  throw InputError(
      fmt::format("cannot back up '{}' before migrating it: '{}' and its 99 numbered names are taken", path_, wanted));
}

// A page-by-page copy through SQLite, consistent even while other connections write.
void Database::BackupTo(const std::string& file) {
  sqlite3* dst = nullptr;
  if (sqlite3_open_v2(file.c_str(), &dst, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr) != SQLITE_OK) {
    sqlite3_close(dst);
    throw RuntimeError(fmt::format("cannot back up '{}' to '{}'", path_, file));
  }
  sqlite3_backup* b = sqlite3_backup_init(dst, "main", db_, "main");
  const int rc = b ? sqlite3_backup_step(b, -1) : SQLITE_ERROR;
  if (b) sqlite3_backup_finish(b);
  const std::string msg = sqlite3_errmsg(dst);
  sqlite3_close(dst);
  if (rc != SQLITE_DONE) {
    std::remove(file.c_str());
    throw RuntimeError(fmt::format("cannot back up '{}' to '{}': {}", path_, file, msg));
  }
}

// WAL lets readers run beside the one writer. Changing the mode needs the file to itself for a moment,
// and SQLite may answer "database is locked" without waiting when other connections hold it, so the
// change is retried until the busy timeout; once a file is in WAL it stays there.
void Database::UseWal() {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kBusyTimeoutMs);
  std::string last;
  for (;;) {
    try {
      Statement mode(db_, "PRAGMA journal_mode=WAL");
      if (mode.Step() && mode.ColumnText(0) == "wal") return;
      last = "journal_mode stayed " + mode.ColumnText(0);
    } catch (const RuntimeError& e) {
      const int rc = sqlite3_errcode(db_);
      if (rc != SQLITE_BUSY && rc != SQLITE_LOCKED) throw;
      last = e.what();
    }
    if (std::chrono::steady_clock::now() > deadline)
      throw RuntimeError(fmt::format("database '{}': cannot switch to WAL: {}", path_, last));
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
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

bool Database::NothingStored(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return true;
  return std::filesystem::is_regular_file(path, ec) && std::filesystem::file_size(path, ec) == 0;
}

}  // namespace ciuic
