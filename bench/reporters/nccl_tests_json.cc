// nccl-tests' JSON (-J FILE): the layout of the file nccl-tests itself writes (its JSON version 3:
// the keys, nesting and value types of nccl-tests' src/util.cu), so nccl-tests' own tools, e.g.
// tools/analyze_perf_json.py, read a ciuic-bench run. One result per (size, dtype, op) holds both
// placements; with -I 1 each also holds its per-iteration record. nccl-tests writes its booleans as
// the strings "true"/"false" and a number that is not one as "nan"; so does this file. What ciuic
// cannot say in nccl-tests' terms is null. ciuic.bench/1 (json.cc) stays the full record.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <ostream>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "bench/record.h"

namespace ciuic {

namespace {

using Json = nlohmann::ordered_json;

// nccl-tests' JSON file version whose layout this writes.
constexpr int kNcclTestsJsonVersion = 3;

Json Flag(bool b) { return b ? "true" : "false"; }

Json Number(double v) { return std::isfinite(v) ? Json(v) : Json("nan"); }

// "2026-11-22T12:00:00Z" as nccl-tests' "%Y-%m-%d %H:%M:%S" (still UTC: nccl-tests writes local time).
std::string NcclTestsTime(const std::string& iso) {
  std::string t = iso;
  std::replace(t.begin(), t.end(), 'T', ' ');
  if (!t.empty() && t.back() == 'Z') t.pop_back();
  return t;
}

// NCCL's version code (2.21.5 -> 22105; before 2.9, 2.8.4 -> 2804) from the first "X.Y.Z" in the
// backend's version text; null when the run used no NCCL.
Json NcclVersionCode(const BenchContext& c) {
  for (const char* key : {"nccl", "nccl-build"}) {
    const auto it = c.library_versions.find(key);
    if (it == c.library_versions.end()) continue;
    const std::string& text = it->second;
    for (size_t i = 0; i < text.size(); ++i) {
      int x = 0, y = 0, z = 0, n = 0;
      if (std::isdigit(static_cast<unsigned char>(text[i])) &&
          std::sscanf(text.c_str() + i, "%d.%d.%d%n", &x, &y, &z, &n) == 3)
        return (x > 2 || (x == 2 && y >= 9)) ? x * 10000 + y * 100 + z : x * 1000 + y * 100 + z;
    }
  }
  return nullptr;
}

// nccl-tests' summary of one placement's iterations: the times are each iteration's slowest rank;
// p50 is the middle sample, p95/p99 nearest-rank; the standard deviation is the population one.
Json PerIterRecord(const std::vector<std::vector<double>>& ranks) {
  const size_t n = ranks.empty() ? 0 : ranks.front().size();
  std::vector<double> times(n, 0.0);
  for (const auto& r : ranks)
    for (size_t i = 0; i < n && i < r.size(); ++i) times[i] = std::max(times[i], r[i]);
  std::vector<double> sorted = times;
  std::sort(sorted.begin(), sorted.end());
  const auto nearest_rank = [&](size_t pct) { return sorted[std::min(n - 1, (n * pct + 99) / 100 - 1)]; };
  double sum = 0;
  for (double t : sorted) sum += t;
  const double avg = n ? sum / static_cast<double>(n) : 0;
  double var = 0;
  for (double t : sorted) var += (t - avg) * (t - avg);
  const double stdev = n ? std::sqrt(var / static_cast<double>(n)) : 0;
  Json j;
  j["skipped_iterations"] = 0;
  j["min_us"] = n ? sorted.front() : 0.0;
  j["max_us"] = n ? sorted.back() : 0.0;
  j["avg_us"] = avg;
  j["p50_us"] = n ? sorted[n / 2] : 0.0;
  j["p95_us"] = n ? nearest_rank(95) : 0.0;
  j["p99_us"] = n ? nearest_rank(99) : 0.0;
  j["stdev_us"] = stdev;
  j["cv_pct"] = avg > 0 ? stdev / avg * 100.0 : 0.0;
  j["times_us"] = times;
  // nccl-tests writes the process rows only for more than one; here a row is a rank.
  if (ranks.size() > 1) j["per_process_max_times_us"] = ranks;
  return j;
}

class NcclTestsJsonReporter : public Reporter {
 public:
  NcclTestsJsonReporter(std::ostream& out, NcclTestsJsonOptions options) : out_(out), o_(std::move(options)) {}

  void Begin(const BenchContext& c) override {
    ctx_ = c;
    doc_ = Json::object();
    doc_["version"] = kNcclTestsJsonVersion;
    doc_["start_time"] = NcclTestsTime(c.start_time);
    doc_["args"] = o_.args;
    doc_["env"] = o_.env;
    doc_["nccl_version"] = NcclVersionCode(c);
    auto& x = doc_["config"];
    x["nthreads"] = 1;
    x["ngpus"] = 1;          // every GPU (or CPU rank) is its own rank here
    x["minimum_bytes"] = 0;  // the sizes and iterations are filled in at End, once the rows are known
    x["maximum_bytes"] = 0;
    x["warmup_iters"] = c.warmup >= 0 ? Json(c.warmup) : Json(nullptr);
    x["iterations"] = nullptr;
    x["aggregated_iterations"] = 1;
    x["validation"] = c.check;
    x["graph"] = 0;
    x["blocking_collectives"] = Flag(c.timing != "batch");  // batch: back to back, as nccl-tests' -z 0
    x["per_iter_timing"] = Flag(o_.per_iter);
    x["per_iter_skip"] = 0;
    x["parallel_init"] = Flag(false);
    auto& devices = x["devices"] = Json::array();
    for (int r = 0; r < c.world_size; ++r) {
      const size_t i = static_cast<size_t>(r);
      Json d;
      d["rank"] = r;
      d["group"] = 0;
      d["pid"] = i < c.pids.size() ? Json(c.pids[i]) : Json(nullptr);
      d["hostname"] = i < c.hostnames.size() ? Json(c.hostnames[i]) : Json(nullptr);
      d["device"] = nullptr;  // the ordinal is the backend's business here
      d["device_hex"] = nullptr;
      d["device_info"] = c.device_name.empty() ? c.device : c.device_name;
      devices.push_back(std::move(d));
    }
    doc_["results"] = Json::array();
  }

  void Size(const std::vector<BenchRow>& rows) override {
    // The rows of one size, grouped by (dtype, op, root) in arrival order: each group is one result.
    std::vector<std::pair<const BenchRow*, const BenchRow*>> groups;  // out-of-place, in-place
    const auto key = [this](const BenchRow& r) {
      return (r.dtype.empty() ? ctx_.dtype : r.dtype) + "/" + (r.redop.empty() ? ctx_.redop : r.redop) + "/" +
             std::to_string(r.root);
    };
    for (const auto& r : rows) {
      auto it = std::find_if(groups.begin(), groups.end(), [&](const auto& g) {
        const BenchRow* any = g.first ? g.first : g.second;
        return key(*any) == key(r);
      });
      if (it == groups.end()) it = groups.emplace(groups.end(), nullptr, nullptr);
      (r.inplace ? it->second : it->first) = &r;
    }
    for (const auto& [oop, ip] : groups) doc_["results"].push_back(Result(oop, ip));
  }

  void End(const BenchSummary& s) override {
    auto& x = doc_["config"];
    if (!sizes_.empty()) {
      x["minimum_bytes"] = *std::min_element(sizes_.begin(), sizes_.end());
      x["maximum_bytes"] = *std::max_element(sizes_.begin(), sizes_.end());
    }
    // nccl-tests' sweep is geometric (step_factor) or arithmetic (step_bytes), the key right after
    // maximum_bytes; a list that is neither has no step key.
    Json config;
    for (auto it = x.begin(); it != x.end(); ++it) {
      config[it.key()] = it.value();
      if (it.key() == "maximum_bytes") {
        if (const uint64_t f = StepFactor())
          config["step_factor"] = f;
        else if (const uint64_t b = StepBytes())
          config["step_bytes"] = b;
      }
    }
    // The count every row ran: --iters, or with auto counts the one they share (null when they differ).
    if (ctx_.iters >= 0)
      config["iterations"] = ctx_.iters;
    else if (row_iters_.size() == 1)
      config["iterations"] = *row_iters_.begin();
    x = std::move(config);

    doc_["out_of_bounds"] = {{"count", s.total_wrong}, {"okay", Flag(s.total_wrong == 0)}};
    doc_["average_bus_bandwidth"] = {{"bandwidth", s.avg_busbw_gbps}, {"okay", "unchecked"}};
    doc_["errors"] = errors_;
    doc_["end_time"] = NcclTestsTime(s.end_time);
    out_ << doc_.dump(2) << "\n";
    out_.flush();
  }

 private:
  Json Placement(const BenchRow& r) const {
    Json j;
    j["time"] = r.time_us;
    j["alg_bw"] = r.moves_bytes ? Number(r.algbw_gbps) : Json("nan");
    j["bus_bw"] = r.moves_bytes ? Number(r.busbw_gbps) : Json("nan");
    j["nwrong"] = ctx_.check > 0 ? Json(static_cast<double>(r.wrong)) : Json(nullptr);
    return j;
  }

  Json Result(const BenchRow* oop, const BenchRow* ip) {
    const BenchRow& any = oop ? *oop : *ip;
    if (std::find(sizes_.begin(), sizes_.end(), any.size_bytes) == sizes_.end()) sizes_.push_back(any.size_bytes);
    Json j;
    j["size"] = any.size_bytes;
    j["count"] = any.count;
    j["type"] = any.dtype_table.empty() ? ctx_.dtype_table : any.dtype_table;
    const std::string op = any.redop.empty() ? ctx_.redop : any.redop;
    j["redop"] = op == "-" ? "none" : op;
    char root[16];
    std::snprintf(root, sizeof root, "%6i", any.root);  // nccl-tests writes the root as its column text
    j["root"] = root;
    int iters = 0;
    for (const auto& [row, name] : {std::pair{oop, "out_of_place"}, std::pair{ip, "in_place"}}) {
      if (!row || !row->ok()) {
        j[name] = nullptr;
        if (row)
          errors_.push_back(fmt::format("{} B {} {} {}: {}", row->size_bytes, j["type"].get<std::string>(),
                                        j["redop"].get<std::string>(), row->inplace ? "in-place" : "out-of-place",
                                        row->error));
        continue;
      }
      j[name] = Placement(*row);
      if (o_.per_iter) j[std::string(name) + "_per_iter"] = PerIterRecord(row->rank_iter_times_us);
      iters = std::max(iters, row->iters);
      row_iters_.insert(row->iters);
    }
    j["actual_iterations"] = iters;
    j["experiment_name"] = "";
    return j;
  }

  // F when every size is F times the one before (F >= 2), else 0.
  uint64_t StepFactor() const {
    if (sizes_.size() < 2 || sizes_[0] == 0 || sizes_[1] % sizes_[0] != 0) return 0;
    const uint64_t f = sizes_[1] / sizes_[0];
    for (size_t i = 1; i < sizes_.size(); ++i)
      if (f < 2 || sizes_[i] != sizes_[i - 1] * f) return 0;
    return f;
  }

  // D when every size is D more than the one before, else 0.
  uint64_t StepBytes() const {
    if (sizes_.size() < 2 || sizes_[1] <= sizes_[0]) return 0;
    const uint64_t d = sizes_[1] - sizes_[0];
    for (size_t i = 1; i < sizes_.size(); ++i)
      if (sizes_[i] != sizes_[i - 1] + d) return 0;
    return d;
  }

  std::ostream& out_;
  NcclTestsJsonOptions o_;
  BenchContext ctx_;
  Json doc_;
  std::vector<uint64_t> sizes_;  // in sweep order, each once
  std::set<int> row_iters_;
  std::vector<std::string> errors_;
};

}  // namespace

std::unique_ptr<Reporter> MakeNcclTestsJsonReporter(std::ostream& out, NcclTestsJsonOptions options) {
  return std::make_unique<NcclTestsJsonReporter>(out, std::move(options));
}

}  // namespace ciuic
