// SQLite sink: one bench_runs row per run and one bench_rows row per (size, placement), written in
// one BEGIN IMMEDIATE transaction at the end so an interrupted run leaves nothing half-written. A sweep
// over several dtypes or ops (-d all, -o all) is stored as one run per (dtype, op), so every stored run
// keeps one dtype and one op, as `compare` and `plot` read them.
#include <algorithm>
#include <nlohmann/json.hpp>

#include "bench/record.h"
#include "core/database.h"

namespace ciuic {

namespace {

class SqliteReporter : public Reporter {
 public:
  explicit SqliteReporter(const std::string& path) : db_(path) {}

  void Begin(const BenchContext& c) override { ctx_ = c; }
  void Size(const std::vector<BenchRow>& rows) override { rows_.insert(rows_.end(), rows.begin(), rows.end()); }

  void End(const BenchSummary&) override {
    // The rows of each (dtype, op), in sweep order.
    std::vector<std::pair<std::string, std::string>> combos;
    for (const auto& r : rows_) {
      const std::pair<std::string, std::string> c{r.dtype.empty() ? ctx_.dtype : r.dtype,
                                                  r.redop.empty() ? ctx_.redop : r.redop};
      if (std::find(combos.begin(), combos.end(), c) == combos.end()) combos.push_back(c);
    }
    Database::Transaction tx(db_);
    for (const auto& [dtype, redop] : combos) StoreRun(dtype, redop, combos.size() > 1);
    tx.Commit();
  }

 private:
  void StoreRun(const std::string& dtype, const std::string& redop, bool part_of_sweep) {
    std::vector<const BenchRow*> rows;
    double peak = 0;  // as the summary's peak: none (NULL) unless a row's busbw is above 0
    int64_t wrong = 0;
    for (const auto& r : rows_) {
      if ((r.dtype.empty() ? ctx_.dtype : r.dtype) != dtype || (r.redop.empty() ? ctx_.redop : r.redop) != redop)
        continue;
      rows.push_back(&r);
      if (!r.ok()) continue;
      wrong += r.wrong;
      if (r.moves_bytes) peak = std::max(peak, r.busbw_gbps);
    }
    nlohmann::json context = {{"library_versions", ctx_.library_versions},
                              {"device_name", ctx_.device_name},
                              {"command_line", ctx_.command_line},
                              {"warmup", ctx_.warmup},
                              {"iters", ctx_.iters},
                              {"check", ctx_.check},
                              {"timing", ctx_.timing},
                              {"root", ctx_.root},
                              {"average", ctx_.average}};
    // One (dtype, op) of a sweep over several: the sweep's lists.
    if (part_of_sweep) context["sweep"] = {{"dtypes", ctx_.dtype}, {"ops", ctx_.redop}};
    if (ctx_.blocking >= 0) context["blocking"] = ctx_.blocking;
    if (!ctx_.buffers.empty()) context["buffers"] = ctx_.buffers;
    if (!ctx_.baseline.empty()) context["baseline"] = ctx_.baseline;
    std::string hosts;
    for (const auto& h : ctx_.hostnames) hosts += (hosts.empty() ? "" : ",") + h;
    Statement run(db_.handle(),
                  "INSERT INTO bench_runs(start_time, tool_version, git_commit, collective, backend, device, "
                  "world_size, dtype, redop, codec, algo, hostnames, context_json, peak_busbw_gbps, total_wrong) "
                  "VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)");
    run.Bind(1, ctx_.start_time).Bind(2, ctx_.tool_version).Bind(3, ctx_.git_commit).Bind(4, ctx_.collective);
    run.Bind(5, ctx_.backend).Bind(6, ctx_.device).Bind(7, int64_t{ctx_.world_size}).Bind(8, dtype);
    run.Bind(9, redop).Bind(10, ctx_.codec).Bind(11, ctx_.algo).Bind(12, hosts).Bind(13, context.dump());
    if (peak > 0) {
      run.Bind(14, peak);
    } else {
      run.BindNull(14);
    }
    run.Bind(15, wrong);
    run.Step();
    const int64_t run_id = db_.LastInsertId();
    Statement row(db_.handle(),
                  "INSERT INTO bench_rows(run_id, size_bytes, count, inplace, root, iters, time_us, time_p50_us, "
                  "time_p99_us, algbw_gbps, busbw_gbps, wrong, error, time_min_us, time_max_us, time_stddev_us) "
                  "VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)");
    for (const BenchRow* p : rows) {
      const BenchRow& r = *p;
      row.Reset();
      row.Bind(1, run_id).Bind(2, static_cast<int64_t>(r.size_bytes)).Bind(3, static_cast<int64_t>(r.count));
      row.Bind(4, int64_t{r.inplace}).Bind(5, int64_t{r.root}).Bind(6, int64_t{r.iters});
      if (r.ok()) {
        row.Bind(7, r.time_us).Bind(8, r.time_p50_us).Bind(9, r.time_p99_us).Bind(12, r.wrong).BindNull(13);
        row.Bind(14, r.time_min_us).Bind(15, r.time_max_us).Bind(16, r.time_stddev_us);
        if (r.moves_bytes) {
          row.Bind(10, r.algbw_gbps).Bind(11, r.busbw_gbps);
        } else {
          row.BindNull(10).BindNull(11);
        }
      } else {
        for (int i = 7; i <= 12; ++i) row.BindNull(i);
        for (int i = 14; i <= 16; ++i) row.BindNull(i);
        row.Bind(13, r.error);
      }
      row.Step();
    }
  }

  Database db_;
  BenchContext ctx_;
  std::vector<BenchRow> rows_;
};

}  // namespace

std::unique_ptr<Reporter> MakeSqliteReporter(const std::string& path) { return std::make_unique<SqliteReporter>(path); }

}  // namespace ciuic
