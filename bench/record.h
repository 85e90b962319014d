#pragma once
// One flat record per (size, placement) row, the run's context, and the reporters that read only
// these (table, CSV, JSON, SQLite: one file each in bench/reporters/).
#include <cstdint>
#include <map>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

namespace ciuic {

struct BenchContext {
  std::string tool_version;
  std::string git_commit;
  std::string collective;
  std::string backend;
  std::string device;       // cpu | cuda
  std::string device_name;  // GPU name or CPU model
  int world_size = 1;
  // A sweep over several dtypes or ops (-d all, -o all) names them all, comma-separated; each row
  // carries its own.
  std::string dtype;
  std::string dtype_table;  // nccl-tests' name, for the table's type column
  std::string redop;        // "-" for collectives that do not reduce
  int root = -1;            // -1 for unrooted collectives
  std::string codec = "none";
  std::string algo = "native";
  double busbw_factor = 1.0;
  std::string busbw_formula;  // "2(n-1)/n"
  std::vector<std::string> hostnames;
  std::vector<int> pids;  // each rank's process id (ranks-as-threads share one)
  std::map<std::string, std::string> library_versions;
  std::string start_time;  // ISO 8601 UTC
  std::string command_line;
  int warmup = -1;  // -1: auto
  int iters = -1;   // -1: auto
  int check = 1;
  std::string average = "max";  // how a row's time combines the ranks (bench/runner.h Average)
  std::string average_description = "max over ranks of each rank's mean";
  std::string timing = "host";       // host (wall clock, barrier-aligned) | cuda-events
  std::string buffers;               // "registered" (--register yes: shared windows); "" for the bench's own
  int blocking = -1;                 // nccl-tests' -z as given (-1: not given); every op is timed alone here
  std::string baseline;              // --baseline: the reference's name ("" without one)
  std::string baseline_description;  // what it is and where its figures come from
};

struct BenchRow {
  uint64_t size_bytes = 0;
  uint64_t count = 0;
  bool inplace = false;
  int root = -1;
  // This row's dtype and op (a sweep may hold several: -d all, -o all); empty: the context's.
  std::string dtype;
  std::string dtype_table;
  std::string redop;
  int iters = 0;
  double time_us = 0;
  // Over the timed iterations, each iteration's time first combined across ranks as --average says.
  double time_p50_us = 0;
  double time_p99_us = 0;
  double time_min_us = 0;
  double time_max_us = 0;
  double time_stddev_us = 0;  // sample standard deviation (0 with one iteration)
  double algbw_gbps = 0;
  double busbw_gbps = 0;
  // False for a row whose collective moves no bytes (one rank, in place): its bandwidths are not
  // numbers ("n/a" in the table, null in JSON) and it never counts for the peaks.
  bool moves_bytes = true;
  int64_t wrong = 0;
  double rel_l2_error = -1;  // lossy codecs: ||result - exact|| / ||exact|| (max over ranks); -1: exact run
  double max_abs_error = -1;
  double baseline_busbw_gbps = -1;  // --baseline's published busbw at this size; -1: none
  // --per-iter (nccl-tests' -I 1): each rank's own time of every timed iteration, rank-major, before
  // any combining; empty otherwise.
  std::vector<std::vector<double>> rank_iter_times_us;
  std::string error;     // non-empty: the row failed or was skipped and its numbers mean nothing
  bool skipped = false;  // not run by design (unsupported combination, size too small), not a failure
  bool ok() const { return error.empty(); }
};

struct BenchSummary {
  double peak_busbw_gbps = 0;
  uint64_t peak_size_bytes = 0;
  bool peak_inplace = false;
  double peak_algbw_gbps = 0;  // with one rank busbw is 0 by definition; algbw still tells the speed
  uint64_t peak_algbw_size_bytes = 0;
  int64_t total_wrong = 0;
  // nccl-tests' "Avg bus bandwidth": the mean busbw of every row that moved bytes (both placements,
  // every size, dtype and op); 0 with none.
  double avg_busbw_gbps = 0;
  // --baseline's highest figure, for the peak's share of it (0: no baseline).
  double baseline_best_gbps = 0;
  uint64_t baseline_best_size_bytes = 0;
  std::string baseline_best_source;
  int rows = 0;
  int failed_rows = 0;   // rows that hit a runtime error
  int skipped_rows = 0;  // unsupported combinations and sizes too small for the world
  std::string end_time;
  std::vector<BenchRow> all_rows;
};

class Reporter {
 public:
  virtual ~Reporter() = default;
  virtual void Begin(const BenchContext&) {}
  // The rows of one size (out-of-place then in-place), as soon as they are measured.
  virtual void Size(const std::vector<BenchRow>& rows) = 0;
  virtual void End(const BenchSummary&) {}
};

std::unique_ptr<Reporter> MakeTableReporter(std::ostream& out);
std::unique_ptr<Reporter> MakeCsvReporter(std::ostream& out);
std::unique_ptr<Reporter> MakeJsonReporter(std::ostream& out);
// nccl-tests' -J layout (its JSON file version 3), for nccl-tests' own analysis tools; ciuic.bench/1
// stays the full record.
struct NcclTestsJsonOptions {
  std::vector<std::string> args;  // the command line, program name first
  std::vector<std::string> env;   // NAME=VALUE lines to record (nccl-tests' "env")
  bool per_iter = false;          // -I 1: per-iteration records (rows carry rank_iter_times_us)
};
std::unique_ptr<Reporter> MakeNcclTestsJsonReporter(std::ostream& out, NcclTestsJsonOptions options);
// Appends the run and its rows to a SQLite database (core/database.h schema).
std::unique_ptr<Reporter> MakeSqliteReporter(const std::string& path);

// Forwards every call to several reporters.
class MultiReporter : public Reporter {
 public:
  void Add(std::unique_ptr<Reporter> r) { reporters_.push_back(std::move(r)); }
  void Begin(const BenchContext& c) override {
    for (auto& r : reporters_) r->Begin(c);
  }
  void Size(const std::vector<BenchRow>& rows) override {
    for (auto& r : reporters_) r->Size(rows);
  }
  void End(const BenchSummary& s) override {
    for (auto& r : reporters_) r->End(s);
  }

 private:
  std::vector<std::unique_ptr<Reporter>> reporters_;
};

}  // namespace ciuic
