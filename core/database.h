#pragma once
// The project's SQLite database (results/ciuic.db by default): one versioned schema shared by
// ciuic-bench (runs, rows) and ciuic-tune. An existing file is first inspected read-only
// (application_id, user_version, the tables that version has, PRAGMA quick_check): a foreign, corrupt
// or inconsistent file and a newer schema are refused and left byte-identical. Then, in one BEGIN
// IMMEDIATE transaction, a new file gets its schema and an older one is migrated after a copy of it is
// kept beside it (name.vN.bak), so concurrent first openers wait instead of racing. WAL, busy_timeout.
// A hot rollback journal (a ciuic killed while creating the file) is rolled back before the
// inspection, which a read-only connection cannot do.
#include <cstdint>
#include <string>
#include <string_view>

struct sqlite3;
struct sqlite3_stmt;

namespace ciuic {

constexpr int32_t kDatabaseApplicationId = 0x43495543;  // "CIUC"
// 1: bench runs; 2: tuner studies; 3: sized calibrations, validations; 4: failed trials' reasons;
// 5: bench rows' time min, max and standard deviation
constexpr int kDatabaseSchemaVersion = 5;

class Statement {
 public:
  Statement(sqlite3* db, std::string_view sql);
  ~Statement();
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;

  Statement& Bind(int index, int64_t v);
  Statement& Bind(int index, double v);
  Statement& Bind(int index, const std::string& v);
  Statement& BindNull(int index);
  bool Step();  // true while a row is available
  void Reset();
  int64_t ColumnInt(int col) const;
  double ColumnDouble(int col) const;
  std::string ColumnText(int col) const;
  bool ColumnIsNull(int col) const;

 private:
  sqlite3* db_;
  sqlite3_stmt* stmt_ = nullptr;
  bool one_row_insert_ = false;  // INSERT [OR REPLACE] INTO ... VALUES: Step() checks a row was stored
};

class Database {
 public:
  enum class Access {
    kReadWrite,  // opens or creates path; an older schema is migrated (after a backup)
    kReadOnly,   // reads an existing file as it is: never created, migrated or written; the caller
                 // checks SchemaVersion() before reading tables an older schema lacks
    kCheckOnly,  // every check a read-write open makes before it writes, on a read-only connection:
                 // nothing is created, migrated or written (a missing or empty file passes); then closed
  };
  // Throws InputError for files that are not ciuic databases, are corrupt, or are newer, without
  // writing to them (and, read-only, for a missing or empty file).
  explicit Database(const std::string& path, Access access = Access::kReadWrite);
  // Whether `path` holds nothing yet (absent, or an empty regular file): a reader finds nothing stored
  // there, where opening it read-only would refuse it.
  static bool NothingStored(const std::string& path);
  ~Database();
  Database(const Database&) = delete;
  Database& operator=(const Database&) = delete;

  void Exec(std::string_view sql);
  int64_t LastInsertId() const;
  sqlite3* handle() const { return db_; }
  const std::string& path() const { return path_; }
  int SchemaVersion() const;
  // The file this open kept of an older schema before migrating it ("" when it migrated nothing).
  const std::string& backup() const { return backup_; }

  // BEGIN IMMEDIATE ... COMMIT, rolled back if not committed.
  class Transaction {
   public:
    explicit Transaction(Database& db);
    ~Transaction();
    void Commit();

   private:
    Database& db_;
    bool done_ = false;
  };

 private:
  // Long enough for 8 concurrent writers each storing a run: a wait is a wait, not a lost run.
  static constexpr int kBusyTimeoutMs = 30000;
  struct Header {
    int32_t app_id = 0;
    int version = 0;
    int64_t tables = 0;
  };
  void Open(int flags, bool immutable = false);
  void RollBackHotJournal();
  [[noreturn]] void Refuse(const std::string& why) const;
  Header ReadHeader() const;
  void CheckHeader(const Header& h) const;
  void CheckFileHeader() const;
  void Inspect();
  void CreateOrMigrate();
  void BackupTo(const std::string& file);
  std::string KeepBackup(const std::string& copy, const std::string& wanted);
  void UseWal();
  sqlite3* db_ = nullptr;
  std::string path_;
  std::string backup_;
};

}  // namespace ciuic
