// Crash safety of the results database under concurrency (issue 13, item 7): 8 writer processes
// each store runs through the reporter ciuic-bench uses for --db (one open, one run, one close per
// run, as 8 ciuic-bench processes would), into a database that does not exist yet and into one
// holding earlier runs. A few writers, chosen by a seeded RNG, are SIGKILLed at a random moment;
// the others finish. Afterwards integrity_check says ok, ciuic opens the file, and every run a
// writer reported as stored (after End() returned) is there with all its rows; no run is
// half-stored, no writer failed. CIUIC_DB_WRITERS_RUNS (default 1000 runs per writer; ctest's
// fault.db_writers sets 100, see tests/CMakeLists.txt) and CIUIC_DB_WRITERS_SEED (default 13)
// change the count and the draw. One case more is not left to chance: a writer stopped while it holds
// the WAL write lock, three others waiting on it, then the stopped one killed inside its transaction.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "bench/record.h"
#include "core/database.h"
#include "core/error.h"

namespace ciuic {
namespace {

constexpr int kWriters = 8;
constexpr int kKilledPerCase = 3;
constexpr int kEarlierRuns = 40;
// A ciuic-bench allreduce sweep in small: four sizes, out-of-place and in-place each.
constexpr uint64_t kSizes[] = {1024, 32768, 1048576, 33554432};
// SQLite's lock bytes (os_unix.c): RESERVED in the database file (PENDING_BYTE + 1), the WAL
// writer's in the -shm file (WALINDEX_LOCK_OFFSET + WAL_WRITE_LOCK).
constexpr off_t kReservedLock = 0x40000001;
constexpr off_t kWalWriteLock = 120;
// A report line is "%06d\n": the report file's size tells the parent a writer's progress.
constexpr int kReportLine = 7;

int EnvInt(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : fallback;
}

// The run's identity is (hostnames, start_time): writer w's host and the k-th second of its day.
std::string Host(int w) { return w < 0 ? "earlier-node" : fmt::format("node{:02}", w); }
std::string StartTime(int k) {
  return fmt::format("2025-06-{:02}T{:02}:{:02}:{:02}Z", 1 + k / 86400, k / 3600 % 24, k / 60 % 60, k % 60);
}

BenchContext Context(int w, int k) {
  BenchContext c;
  c.tool_version = "1.0.0";
  c.git_commit = "012c647";
  c.collective = "allreduce";
  c.backend = "mpi";
  c.device = "cpu";
  c.device_name = "AMD EPYC 7763 64-Core Processor";
  c.world_size = 2 + (w + k) % 7;
  c.dtype = "float32";
  c.redop = "sum";
  c.hostnames = {Host(w)};
  c.library_versions = {{"mpi", "Open MPI v4.1.4"}};
  c.start_time = StartTime(k);
  c.command_line = fmt::format("ciuic-bench allreduce --sizes 1K:32M:x32 --db results/ciuic.db  # w{} r{}", w, k);
  c.warmup = 5;
  c.iters = 20;
  return c;
}

// Row values are a function of (writer, run, size, placement), so the reader can tell a row apart.
BenchRow Row(int w, int k, uint64_t size, bool inplace) {
  BenchRow r;
  r.size_bytes = size;
  r.count = size / 4;
  r.inplace = inplace;
  r.iters = 20;
  r.time_us = 10.0 + static_cast<double>(size) / 1e4 + w * 0.125 + k * 0.001 + (inplace ? 0.5 : 0.0);
  r.time_p50_us = r.time_us * 0.98;
  r.time_p99_us = r.time_us * 1.3;
  r.algbw_gbps = static_cast<double>(size) / r.time_us / 1e3;
  r.busbw_gbps = r.algbw_gbps;
  return r;
}

// Stores run k of writer w exactly as ciuic-bench --db does: the reporter opens the database, is
// fed the run, writes it in End() and closes the database when destroyed.
void StoreRun(const std::string& db, int w, int k) {
  auto reporter = MakeSqliteReporter(db);
  reporter->Begin(Context(w, k));
  BenchSummary s;
  for (uint64_t size : kSizes) {
    std::vector<BenchRow> rows = {Row(w, k, size, false), Row(w, k, size, true)};
    for (const auto& r : rows) {
      if (r.busbw_gbps > s.peak_busbw_gbps) s.peak_busbw_gbps = r.busbw_gbps, s.peak_size_bytes = r.size_bytes;
    }
    reporter->Size(rows);
  }
  reporter->End(s);
}

[[noreturn]] void Writer(const std::string& db, int w, int runs, int go, const std::string& report,
                         const std::string& err) {
  char c;
  (void)!::read(go, &c, 1);  // all start together when the parent closes the pipe
  ::close(go);
  int code = 0;
  try {
    const int fd = ::open(report.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd < 0) throw RuntimeError("cannot open " + report);
    for (int k = 0; k < runs; ++k) {
      StoreRun(db, w, k);
      // Reported as stored only now. SIGKILL ends the process, not the kernel: a write() that
      // returned is in the file for the parent to read, so no fsync is needed for that.
      const std::string line = fmt::format("{:06}\n", k);
      if (::write(fd, line.data(), line.size()) != static_cast<ssize_t>(line.size()))
        throw RuntimeError("cannot write " + report);
    }
    ::close(fd);
  } catch (const std::exception& e) {
    std::ofstream(err) << e.what() << "\n";
    code = 2;
  }
  ::_exit(code);
}

struct Outcome {
  int killed = 0;
  std::vector<std::string> failures;  // writers that exited with an error: its message
  std::vector<std::set<int>> reported = std::vector<std::set<int>>(kWriters);
  std::vector<bool> was_killed = std::vector<bool>(kWriters, false);
  int creator_killed = -1;  // the writer killed while creating the file, or -1
  int killed_writing = 0;   // victims that held the WAL write lock when killed
  double seconds = 0;
};

off_t FileSize(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 ? st.st_size : 0;
}

std::string Slurp(const std::string& p) {
  std::ifstream f(p);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

class DatabaseWritersTest : public testing::Test {
 protected:
  void SetUp() override {
    runs_ = EnvInt("CIUIC_DB_WRITERS_RUNS", 1000);
    seed_ = static_cast<uint32_t>(EnvInt("CIUIC_DB_WRITERS_SEED", 13));
    dir_ = std::filesystem::temp_directory_path() / ("ciuic_dbw_" + std::to_string(::getpid()) + "_" +
                                                     testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override {
    if (HasFailure()) {
      std::printf("kept %s (the database, each writer's report and error)\n", dir_.c_str());
    } else {
      std::filesystem::remove_all(dir_);
    }
  }
  std::string Path(const std::string& name) const { return (dir_ / name).string(); }

  // Starts the writers together and SIGKILLs the chosen ones once each has reported a random number
  // of runs: the first victim, and every second one, inside a transaction (BEGIN IMMEDIATE..COMMIT):
  // once it holds the WAL write lock, a random 0-1 ms later it is stopped (SIGSTOP) and asked again
  // (fcntl F_GETLK), and killed only if it still holds the lock, else let go and caught again; the
  // others a random 0-3 ms later, wherever that lands (opening, inspecting, writing, closing). With
  // `creator`, the writer giving the fresh file its schema dies too, while its rollback journal is hot
  // (the file has pages and -journal exists): the one moment ciuic writes outside WAL.
  Outcome RunWriters(const std::string& db, std::mt19937& rng, bool creator) {
    Outcome out;
    std::vector<int> order(kWriters);
    for (int w = 0; w < kWriters; ++w) order[w] = w;
    std::shuffle(order.begin(), order.end(), rng);
    struct Victim {
      int w;
      int after_runs;
      bool in_transaction;
      std::chrono::microseconds delay;
      std::chrono::steady_clock::time_point due{};
      bool armed = false;
    };
    std::vector<Victim> victims;
    for (int i = 0; i < kKilledPerCase - (creator ? 1 : 0); ++i) {
      const bool in_transaction = i % 2 == 0;
      // In the first half of its runs, so it is caught holding the lock before it has stored them all.
      victims.push_back(
          {order[i], std::uniform_int_distribution<int>(0, in_transaction ? (runs_ - 1) / 2 : runs_ - 1)(rng),
           in_transaction,
           std::chrono::microseconds(std::uniform_int_distribution<int>(0, in_transaction ? 1000 : 3000)(rng))});
    }
    const auto creator_delay = std::chrono::microseconds(std::uniform_int_distribution<int>(0, 1000)(rng));
    int go[2];
    EXPECT_EQ(::pipe(go), 0);
    std::vector<pid_t> pids(kWriters);
    for (int w = 0; w < kWriters; ++w) {
      pids[w] = ::fork();
      if (pids[w] == 0) {
        ::close(go[1]);
        Writer(db, w, runs_, go[0], Report(w), Err(w));
      }
      EXPECT_GT(pids[w], 0);
    }
    ::close(go[0]);
    const auto t0 = std::chrono::steady_clock::now();
    ::close(go[1]);
    if (creator) out.creator_killed = KillCreator(db, pids, creator_delay);
    // The writer killed while creating the file cannot also be a victim: its place goes to a writer no
    // victim has yet (else a case could end with no in-transaction kill to assert).
    for (auto& v : victims) {
      if (v.w != out.creator_killed) continue;
      for (int k = static_cast<int>(victims.size()); k < kWriters; ++k) {
        if (order[k] == out.creator_killed) continue;
        v.w = order[k];
        break;
      }
    }
    int alive = kWriters;
    std::vector<bool> done(kWriters, false);
    auto ended = [&](pid_t pid, int status) {
      const int w = static_cast<int>(std::find(pids.begin(), pids.end(), pid) - pids.begin());
      if (w == kWriters) return;
      done[w] = true;
      --alive;
      if (WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) {
        out.was_killed[w] = true;
        ++out.killed;
      } else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        out.failures.push_back(fmt::format("writer {} (status {:#x}): {}", w, status, Slurp(Err(w))));
      }
    };
    while (alive > 0) {
      const auto now = std::chrono::steady_clock::now();
      for (auto& v : victims) {
        if (done[v.w] || v.after_runs < 0) continue;
        if (!v.armed && FileSize(Report(v.w)) >= off_t{v.after_runs} * kReportLine) {
          v.armed = !v.in_transaction || LockHolder(db + "-shm", kWalWriteLock) == pids[v.w];
          v.due = now + v.delay;
        }
        if (!v.armed || now < v.due) continue;
        if (v.in_transaction) {
          ::kill(pids[v.w], SIGSTOP);
          int status = 0;
          if (::waitpid(pids[v.w], &status, WUNTRACED) == pids[v.w] && !WIFSTOPPED(status)) {
            ended(pids[v.w], status);  // it ended before the stop landed
            continue;
          }
          if (LockHolder(db + "-shm", kWalWriteLock) != pids[v.w]) {
            ::kill(pids[v.w], SIGCONT);
            v.armed = false;  // caught between transactions: again at its next hold of the lock
            continue;
          }
          ++out.killed_writing;
        }
        ::kill(pids[v.w], SIGKILL);
        v.after_runs = -1;
      }
      int status = 0;
      const pid_t pid = ::waitpid(-1, &status, WNOHANG);
      if (pid > 0) {
        ended(pid, status);
        continue;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    for (int w = 0; w < kWriters; ++w) {
      const std::string text = Slurp(Report(w));
      EXPECT_EQ(text.size() % kReportLine, 0u) << "writer " << w << ": a torn report line";
      for (size_t at = 0; at + kReportLine <= text.size(); at += kReportLine)
        out.reported[w].insert(std::stoi(text.substr(at, kReportLine - 1)));
    }
    return out;
  }

  // The process holding an fcntl lock on byte `at` of `file`, or -1.
  static pid_t LockHolder(const std::string& file, off_t at) {
    const int fd = ::open(file.c_str(), O_RDONLY);
    if (fd < 0) return -1;
    struct flock lk {};
    lk.l_type = F_WRLCK;
    lk.l_whence = SEEK_SET;
    lk.l_start = at;
    lk.l_len = 1;
    const bool held = ::fcntl(fd, F_GETLK, &lk) == 0 && lk.l_type != F_UNLCK;
    ::close(fd);  // this process holds no locks on the file: closing releases none of theirs
    return held ? lk.l_pid : -1;
  }

  // Waits for the fresh file to have pages while its -journal exists, then after `delay` SIGKILLs
  // the writer holding the RESERVED lock (fcntl F_GETLK names it). Returns that writer, or -1 once
  // the file is in WAL (or after 3 s) without having seen the moment.
  static int KillCreator(const std::string& db, const std::vector<pid_t>& pids, std::chrono::microseconds delay) {
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(3);
    while (std::chrono::steady_clock::now() < give_up && !std::filesystem::exists(db + "-wal")) {
      if (FileSize(db) == 0 || !std::filesystem::exists(db + "-journal")) continue;
      const auto it = std::find(pids.begin(), pids.end(), LockHolder(db, kReservedLock));
      if (it == pids.end()) continue;
      const auto due = std::chrono::steady_clock::now() + delay;
      while (std::chrono::steady_clock::now() < due) {
      }
      ::kill(*it, SIGKILL);
      return static_cast<int>(it - pids.begin());
    }
    return -1;
  }

  std::string Report(int w) const { return Path(fmt::format("w{}.report", w)); }
  std::string Err(int w) const { return Path(fmt::format("w{}.err", w)); }

  // What the store promises, checked on the file as the writers left it.
  void Verify(const std::string& db, const Outcome& out, bool with_earlier, const char* name, int writers = kWriters) {
    for (const auto& f : out.failures) ADD_FAILURE() << f;
    EXPECT_GE(out.killed, 1) << "no writer was killed: the case tested nothing";
    // First SQLite itself, before ciuic's open path (which would checkpoint) touches the file.
    std::string integrity;
    {
      sqlite3* raw = nullptr;
      ASSERT_EQ(sqlite3_open_v2(db.c_str(), &raw, SQLITE_OPEN_READWRITE, nullptr), SQLITE_OK);
      sqlite3_stmt* st = nullptr;
      ASSERT_EQ(sqlite3_prepare_v2(raw, "PRAGMA integrity_check", -1, &st, nullptr), SQLITE_OK);
      while (sqlite3_step(st) == SQLITE_ROW) {
        integrity +=
            (integrity.empty() ? "" : "; ") + std::string(reinterpret_cast<const char*>(sqlite3_column_text(st, 0)));
      }
      sqlite3_finalize(st);
      sqlite3_close(raw);
    }
    EXPECT_EQ(integrity, "ok");
    std::unique_ptr<Database> opened;
    try {  // ciuic's own open refuses a foreign, corrupt, inconsistent or newer file
      opened = std::make_unique<Database>(db);
    } catch (const std::exception& e) {
      FAIL() << "ciuic refuses the database: " << e.what();
    }
    Database& d = *opened;
    EXPECT_EQ(d.SchemaVersion(), kDatabaseSchemaVersion);
    {
      Statement id(d.handle(), "PRAGMA application_id");
      ASSERT_TRUE(id.Step());
      EXPECT_EQ(id.ColumnInt(0), kDatabaseApplicationId);
      Statement mode(d.handle(), "PRAGMA journal_mode");
      ASSERT_TRUE(mode.Step());
      EXPECT_EQ(mode.ColumnText(0), "wal");
      Statement orphans(d.handle(), "SELECT count(*) FROM bench_rows WHERE run_id NOT IN (SELECT id FROM bench_runs)");
      ASSERT_TRUE(orphans.Step());
      EXPECT_EQ(orphans.ColumnInt(0), 0) << "rows without their run";
    }
    // Every stored run with its rows, checked against the values its writer stored.
    std::map<std::pair<std::string, std::string>, int64_t> run_ids;
    std::map<int64_t, std::vector<std::tuple<int64_t, int64_t, int64_t, double, double, double>>> rows;
    {
      Statement q(d.handle(), "SELECT id, hostnames, start_time FROM bench_runs");
      while (q.Step()) {
        const bool fresh = run_ids.emplace(std::make_pair(q.ColumnText(1), q.ColumnText(2)), q.ColumnInt(0)).second;
        EXPECT_TRUE(fresh) << "stored twice: " << q.ColumnText(1) << " " << q.ColumnText(2);
      }
      Statement r(d.handle(),
                  "SELECT run_id, size_bytes, inplace, count, time_us, time_p99_us, busbw_gbps "
                  "FROM bench_rows ORDER BY run_id, size_bytes, inplace");
      while (r.Step()) {
        rows[r.ColumnInt(0)].emplace_back(r.ColumnInt(1), r.ColumnInt(2), r.ColumnInt(3), r.ColumnDouble(4),
                                          r.ColumnDouble(5), r.ColumnDouble(6));
      }
    }
    auto intact = [&](int w, int k) {
      const auto it = run_ids.find({Host(w), StartTime(k)});
      if (it == run_ids.end()) return false;
      std::vector<std::tuple<int64_t, int64_t, int64_t, double, double, double>> want;
      for (uint64_t size : kSizes) {
        for (bool inplace : {false, true}) {
          const BenchRow b = Row(w, k, size, inplace);
          want.emplace_back(b.size_bytes, b.inplace, b.count, b.time_us, b.time_p99_us, b.busbw_gbps);
        }
      }
      EXPECT_EQ(rows[it->second], want) << "run " << w << "/" << k << " is not whole";
      return true;
    };
    size_t expected_total = 0;
    int earlier_found = 0;
    if (with_earlier) {
      for (int k = 0; k < kEarlierRuns; ++k) earlier_found += intact(-1, k);
      EXPECT_EQ(earlier_found, kEarlierRuns) << "earlier runs lost";
      expected_total += kEarlierRuns;
    }
    size_t reported = 0, found = 0, unreported = 0;
    for (int w = 0; w < writers; ++w) {
      const auto& rep = out.reported[w];
      reported += rep.size();
      for (int k : rep) {
        const bool there = intact(w, k);
        found += there;
        EXPECT_TRUE(there) << "writer " << w << " reported run " << k << ", not in the database";
      }
      // A writer stores its runs in order, so it has a prefix 0..m-1; a killed one may have stored
      // one run more than it reported (killed between COMMIT and its report line), never fewer.
      int m = 0;
      while ((out.was_killed[w] || m < runs_) && intact(w, m)) ++m;
      expected_total += m;
      const int n = static_cast<int>(rep.size());
      EXPECT_TRUE(rep.empty() || *rep.rbegin() == n - 1) << "writer " << w << " reported out of order";
      if (!out.was_killed[w]) {
        EXPECT_EQ(n, runs_) << "writer " << w << " finished but reported " << n;
        EXPECT_EQ(m, runs_) << "writer " << w << " finished but stored " << m;
      } else {
        EXPECT_TRUE(m == n || m == n + 1) << "writer " << w << " reported " << n << " runs, stored " << m;
        unreported += m - n;
      }
    }
    EXPECT_EQ(run_ids.size(), expected_total) << "runs stored that no writer made, or out of order";
    std::printf(
        "%s: %d writers x %d runs in %.2f s, %d killed (%d holding the write lock), %zu runs "
        "reported, %zu found (+%zu stored "
        "but killed before reporting), %d/%d earlier runs, integrity_check %s, %zu failed "
        "writers%s\n",
        name, writers, runs_, out.seconds, out.killed, out.killed_writing, reported, found, unreported, earlier_found,
        with_earlier ? kEarlierRuns : 0, integrity.c_str(), out.failures.size(),
        out.creator_killed >= 0 ? fmt::format(", writer {} killed while creating the file", out.creator_killed).c_str()
                                : "");
    std::fflush(stdout);
  }

  int runs_ = 0;
  uint32_t seed_ = 0;
  std::filesystem::path dir_;
};

TEST_F(DatabaseWritersTest, FreshDatabaseSurvivesKilledWriters) {
  std::mt19937 rng(seed_);
  const std::string db = Path("fresh.db");
  ASSERT_FALSE(std::filesystem::exists(db));
  const Outcome out = RunWriters(db, rng, /*creator=*/true);
  EXPECT_GE(out.killed_writing, 1) << "no writer was killed holding the WAL write lock";
  Verify(db, out, /*with_earlier=*/false, "fresh");
}

TEST_F(DatabaseWritersTest, ExistingDatabaseSurvivesKilledWriters) {
  std::mt19937 rng(seed_ + 1);
  const std::string db = Path("existing.db");
  for (int k = 0; k < kEarlierRuns; ++k) StoreRun(db, -1, k);
  const Outcome out = RunWriters(db, rng, /*creator=*/false);
  EXPECT_GE(out.killed_writing, 2) << "the two in-transaction victims were not both killed holding the write lock";
  Verify(db, out, /*with_earlier=*/true, "existing");
}

// A writer stopped (SIGSTOP) while it holds the WAL write lock: the other writers wait for the lock
// (SQLite's busy timeout, 30 s) instead of failing or writing beside it; killed there (SIGKILL while
// stopped), the run it was writing is absent or whole (SQLite holds the lock through the commit's
// sync, so the stop may land after its last frame: the test says which), the waiting writers go on
// and store every run, and the file is whole. The moment is found, not hoped for: the writer is
// stopped, then the lock's holder is asked (fcntl F_GETLK); a writer caught without the lock is let
// go and tried again.
TEST_F(DatabaseWritersTest, AWriterStoppedHoldingTheLockMakesOthersWaitAndKilledThereLosesOnlyItsRun) {
  const std::string db = Path("stopped.db");
  for (int k = 0; k < kEarlierRuns; ++k) StoreRun(db, -1, k);
  // Every child is killed and reaped on the way out, also when an assertion returns early (a victim
  // left stopped would hold the lock, and the waiting writers, for good).
  struct Reaper {
    std::vector<pid_t> pids;
    ~Reaper() {
      for (pid_t p : pids) {
        ::kill(p, SIGKILL);
        ::waitpid(p, nullptr, 0);
      }
    }
    void Reaped(pid_t p) { pids.erase(std::remove(pids.begin(), pids.end(), p), pids.end()); }
  } reaper;
  int go[2];
  ASSERT_EQ(::pipe(go), 0);
  const pid_t victim = ::fork();
  ASSERT_GE(victim, 0);
  if (victim == 0) {
    ::close(go[1]);
    Writer(db, 0, 1000000, go[0], Report(0), Err(0));
  }
  reaper.pids.push_back(victim);
  ::close(go[0]);
  ::close(go[1]);
  // A few runs first, so the stored runs before the stopped one are checked too.
  for (int i = 0; i < 10000 && FileSize(Report(0)) < 3 * kReportLine; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  bool caught = false;
  for (int attempt = 0; attempt < 20000 && !caught; ++attempt) {
    if (LockHolder(db + "-shm", kWalWriteLock) != victim) continue;
    ::kill(victim, SIGSTOP);
    int status = 0;
    ASSERT_EQ(::waitpid(victim, &status, WUNTRACED), victim);
    ASSERT_TRUE(WIFSTOPPED(status));
    caught = LockHolder(db + "-shm", kWalWriteLock) == victim;
    if (!caught) ::kill(victim, SIGCONT);
  }
  if (!caught) FAIL() << "never stopped the writer while it held the WAL write lock";
  const int stored_before = static_cast<int>(FileSize(Report(0)) / kReportLine);
  // Three writers start while it holds the lock: none may store a run, fail or end while it does.
  constexpr int kRuns = 5;
  int go2[2];
  ASSERT_EQ(::pipe(go2), 0);
  std::vector<pid_t> others;
  for (int w = 1; w <= 3; ++w) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ::close(go2[1]);
      Writer(db, w, kRuns, go2[0], Report(w), Err(w));
    }
    others.push_back(pid);
    reaper.pids.push_back(pid);
  }
  ::close(go2[0]);
  ::close(go2[1]);
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  for (int w = 1; w <= 3; ++w) {
    EXPECT_EQ(::waitpid(others[w - 1], nullptr, WNOHANG), 0) << "writer " << w << " ended while the lock was held";
    EXPECT_EQ(FileSize(Report(w)), 0) << "writer " << w << " stored a run while another held the write lock";
  }
  EXPECT_EQ(LockHolder(db + "-shm", kWalWriteLock), victim);
  // Killed inside its transaction: the lock goes with the process, the others go on.
  ::kill(victim, SIGKILL);
  int status = 0;
  ASSERT_EQ(::waitpid(victim, &status, 0), victim);
  reaper.Reaped(victim);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  Outcome out;
  out.killed = 1;
  out.killed_writing = 1;
  out.was_killed[0] = true;
  for (int w = 1; w <= 3; ++w) {
    ASSERT_EQ(::waitpid(others[w - 1], &status, 0), others[w - 1]);
    reaper.Reaped(others[w - 1]);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
      out.failures.push_back(fmt::format("writer {} (status {:#x}): {}", w, status, Slurp(Err(w))));
  }
  for (int w = 0; w <= 3; ++w) {
    const std::string text = Slurp(Report(w));
    for (size_t at = 0; at + kReportLine <= text.size(); at += kReportLine)
      out.reported[w].insert(std::stoi(text.substr(at, kReportLine - 1)));
  }
  EXPECT_EQ(static_cast<int>(out.reported[0].size()), stored_before);
  for (int w = 1; w <= 3; ++w) EXPECT_EQ(out.reported[w].size(), static_cast<size_t>(kRuns)) << "writer " << w;
  // Verify: integrity, ciuic opens it, every reported run whole, the victim's stored runs a prefix of
  // what it reported plus at most the one it was writing, and that one whole if there.
  runs_ = kRuns;
  Verify(db, out, /*with_earlier=*/true, "stopped", 4);
  Database d(db);
  Statement q(d.handle(), "SELECT count(*) FROM bench_runs WHERE hostnames = ? AND start_time = ?");
  q.Bind(1, Host(0)).Bind(2, StartTime(stored_before));
  ASSERT_TRUE(q.Step());
  std::printf(
      "stopped writer 0 holding the write lock after %d runs (%s); 3 writers waited, then stored %d runs "
      "each\n",
      stored_before, q.ColumnInt(0) ? "its run committed: stopped in the commit's sync" : "its open run rolled back",
      kRuns);
}

// ciuic writes outside WAL only while it gives a new file its schema and switches it to WAL. A
// writer killed then leaves a hot rollback journal; the next ciuic to open the file (alone, no
// other writer around to roll it back) must recover it, not fail its read-only inspection for good.
TEST_F(DatabaseWritersTest, WriterKilledWhileCreatingTheFileLeavesItOpenable) {
  for (int attempt = 0; attempt < 50; ++attempt) {
    const std::string db = Path(fmt::format("created{}.db", attempt));
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      int code = 0;
      try {
        StoreRun(db, 0, 0);
      } catch (...) {
        code = 2;
      }
      ::_exit(code);
    }
    const int killed = KillCreator(db, {pid}, std::chrono::microseconds(0));
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    // The moment was missed (the writer finished first, or was killed before its journal was hot).
    if (killed < 0 || !std::filesystem::exists(db + "-journal") || FileSize(db) == 0) continue;
    ASSERT_TRUE(WIFSIGNALED(status));
    try {
      StoreRun(db, 1, 0);
    } catch (const std::exception& e) {
      FAIL() << "after a writer was killed while creating it (attempt " << attempt << "): " << e.what();
    }
    Database d(db);
    EXPECT_EQ(d.SchemaVersion(), kDatabaseSchemaVersion);
    Statement runs(d.handle(), "SELECT hostnames FROM bench_runs");
    ASSERT_TRUE(runs.Step());
    EXPECT_EQ(runs.ColumnText(0), Host(1));
    EXPECT_FALSE(runs.Step());
    Statement check(d.handle(), "PRAGMA integrity_check");
    ASSERT_TRUE(check.Step());
    EXPECT_EQ(check.ColumnText(0), "ok");
    std::printf("killed the creator with its journal hot on attempt %d\n", attempt + 1);
    return;
  }
  FAIL() << "never caught a writer with its rollback journal hot in 50 attempts";
}

}  // namespace
}  // namespace ciuic
