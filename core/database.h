#pragma once
// The project's SQLite database (results/ciuic.db by default): one versioned schema shared by
// ciuic-bench (runs, rows) and ciuic-tune. Opening checks PRAGMA application_id and user_version:
// a foreign or corrupt file and a newer schema are refused without writing to them; an older schema
// is migrated after a byte copy of the file is kept beside it. WAL, busy_timeout, BEGIN IMMEDIATE.
#include <cstdint>
#include <string>
#include <string_view>

struct sqlite3;
struct sqlite3_stmt;

namespace ciuic {

constexpr int32_t kDatabaseApplicationId = 0x43495543;  // "CIUC"
constexpr int kDatabaseSchemaVersion = 3;  // 1: bench runs; 2: tuner studies; 3: sized calibrations, validations

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
};

class Database {
 public:
  // Opens or creates path. Throws InputError for files that are not ciuic databases or are newer.
  explicit Database(const std::string& path);
  ~Database();
  Database(const Database&) = delete;
  Database& operator=(const Database&) = delete;

  void Exec(std::string_view sql);
  int64_t LastInsertId() const;
  sqlite3* handle() const { return db_; }
  const std::string& path() const { return path_; }
  int SchemaVersion() const;

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
  void Migrate(int from_version);
  sqlite3* db_ = nullptr;
  std::string path_;
};

}  // namespace ciuic
