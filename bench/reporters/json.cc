// JSON: one object, "schema": "ciuic.bench/1", the run's context, "results" (one entry per row, each
// with its dtype and op; real booleans and numbers; null numbers and an "error" for failed rows) and a
// "summary".
#include <cmath>
#include <nlohmann/json.hpp>

#include <ostream>

#include "bench/record.h"
#include "bench/reporters/context_json.h"

namespace ciuic {

nlohmann::ordered_json RunContextJson(const BenchContext& c) {
  nlohmann::ordered_json x;
  x["tool"] = "ciuic-bench";
  x["tool_version"] = c.tool_version;
  x["git_commit"] = c.git_commit;
  x["collective"] = c.collective;
  x["backend"] = c.backend;
  x["device"] = c.device;
  x["device_name"] = c.device_name;
  x["world_size"] = c.world_size;
  x["dtype"] = c.dtype;
  x["op"] = c.redop;
  x["root"] = c.root;
  x["codec"] = c.codec;
  x["algo"] = c.algo;
  x["hostnames"] = c.hostnames;
  x["library_versions"] = c.library_versions;
  x["start_time"] = c.start_time;
  x["command_line"] = c.command_line;
  x["warmup"] = c.warmup < 0 ? nlohmann::ordered_json("auto") : nlohmann::ordered_json(c.warmup);
  x["iters"] = c.iters < 0 ? nlohmann::ordered_json("auto") : nlohmann::ordered_json(c.iters);
  x["check"] = c.check;
  x["timing"] = c.timing;
  x["average"] = c.average;
  x["busbw_factor"] = c.busbw_factor;
  x["busbw_formula"] = c.busbw_formula;
  if (c.blocking >= 0) x["blocking"] = c.blocking;
  if (!c.buffers.empty()) x["buffers"] = c.buffers;
  if (!c.baseline.empty()) {
    x["baseline"] = c.baseline;
    x["baseline_description"] = c.baseline_description;
  }
  return x;
}

namespace {

class JsonReporter : public Reporter {
 public:
  explicit JsonReporter(std::ostream& out) : out_(out) {}

  void Begin(const BenchContext& c) override {
    doc_ = nlohmann::ordered_json::object();
    doc_["schema"] = "ciuic.bench/1";
    doc_["context"] = RunContextJson(c);
    ctx_ = c;
    doc_["results"] = nlohmann::ordered_json::array();
  }

  void Size(const std::vector<BenchRow>& rows) override {
    for (const auto& r : rows) {
      nlohmann::ordered_json j;
      j["size_bytes"] = r.size_bytes;
      j["count"] = r.count;
      j["inplace"] = r.inplace;
      j["dtype"] = r.dtype.empty() ? ctx_.dtype : r.dtype;
      j["op"] = r.redop.empty() ? ctx_.redop : r.redop;
      j["root"] = r.root;
      j["iters"] = r.iters;
      if (r.ok()) {
        j["time_us"] = r.time_us;
        j["time_p50_us"] = r.time_p50_us;
        j["time_p99_us"] = r.time_p99_us;
        j["time_min_us"] = r.time_min_us;
        j["time_max_us"] = r.time_max_us;
        j["time_stddev_us"] = r.time_stddev_us;
        j["algbw_gbps"] = r.moves_bytes ? nlohmann::json(r.algbw_gbps) : nlohmann::json(nullptr);
        j["busbw_gbps"] = r.moves_bytes ? nlohmann::json(r.busbw_gbps) : nlohmann::json(nullptr);
        if (!r.moves_bytes) j["moves_bytes"] = false;
        j["wrong"] = r.wrong;
        if (r.rel_l2_error >= 0) {
          j["rel_l2_error"] = r.rel_l2_error;
          j["max_abs_error"] =
              std::isfinite(r.max_abs_error) ? nlohmann::json(r.max_abs_error) : nlohmann::json(nullptr);
        }
      } else {
        for (const char* k : {"time_us", "time_p50_us", "time_p99_us", "time_min_us", "time_max_us", "time_stddev_us",
                              "algbw_gbps", "busbw_gbps", "wrong"}) {
          j[k] = nullptr;
        }
        j["error"] = r.error;
        j["skipped"] = r.skipped;
      }
      if (!ctx_.baseline.empty()) {
        // The published busbw at this size and this row's share of it; null where there is none.
        const bool has = r.baseline_busbw_gbps > 0;
        j["baseline_busbw_gbps"] = has ? nlohmann::json(r.baseline_busbw_gbps) : nlohmann::json(nullptr);
        j["pct_of_baseline"] = has && r.ok() && r.moves_bytes
                                   ? nlohmann::json(100.0 * r.busbw_gbps / r.baseline_busbw_gbps)
                                   : nlohmann::json(nullptr);
      }
      doc_["results"].push_back(std::move(j));
    }
  }

  void End(const BenchSummary& s) override {
    auto& x = doc_["summary"];
    // No row moved bytes (one rank, in place only; or every factor 0): no peak, null.
    x["peak_busbw_gbps"] = s.peak_size_bytes > 0 ? nlohmann::json(s.peak_busbw_gbps) : nlohmann::json(nullptr);
    x["peak_size_bytes"] = s.peak_size_bytes;
    x["peak_inplace"] = s.peak_inplace;
    x["peak_algbw_gbps"] = s.peak_algbw_gbps;
    x["peak_algbw_size_bytes"] = s.peak_algbw_size_bytes;
    x["avg_busbw_gbps"] = s.avg_busbw_gbps;  // nccl-tests' "Avg bus bandwidth"
    if (!ctx_.baseline.empty() && s.baseline_best_gbps > 0) {
      x["baseline_best_busbw_gbps"] = s.baseline_best_gbps;
      x["baseline_best_size_bytes"] = s.baseline_best_size_bytes;
      x["peak_pct_of_baseline_best"] = s.peak_size_bytes > 0
                                           ? nlohmann::json(100.0 * s.peak_busbw_gbps / s.baseline_best_gbps)
                                           : nlohmann::json(nullptr);
    }
    x["total_wrong"] = s.total_wrong;
    x["rows"] = s.rows;
    x["failed_rows"] = s.failed_rows;
    x["skipped_rows"] = s.skipped_rows;
    x["end_time"] = s.end_time;
    out_ << doc_.dump(2) << "\n";
    out_.flush();
  }

 private:
  std::ostream& out_;
  nlohmann::ordered_json doc_;
  BenchContext ctx_;
};

}  // namespace

std::unique_ptr<Reporter> MakeJsonReporter(std::ostream& out) { return std::make_unique<JsonReporter>(out); }

}  // namespace ciuic
