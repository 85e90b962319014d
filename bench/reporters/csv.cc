// CSV: one header line, then one line per (size, placement) row with the run's context repeated,
// so each line stands alone (what nccl-tests users asked for).
#include <fmt/format.h>

#include <ostream>

#include "bench/record.h"

namespace ciuic {

namespace {

std::string Quote(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

class CsvReporter : public Reporter {
 public:
  explicit CsvReporter(std::ostream& out) : out_(out) {}
  void Begin(const BenchContext& c) override {
    ctx_ = c;
    out_ << "collective,backend,device,world_size,dtype,redop,algo,codec,size_bytes,count,inplace,root,iters,"
            "time_us,time_p50_us,time_p99_us,time_min_us,time_max_us,time_stddev_us,algbw_gbps,busbw_gbps,wrong,"
            "baseline_busbw_gbps,error\n";
  }
  void Size(const std::vector<BenchRow>& rows) override {
    for (const auto& r : rows) {
      out_ << fmt::format("{},{},{},{},{},{},{},{},{},{},{},{},{},", ctx_.collective, ctx_.backend, ctx_.device,
                          ctx_.world_size, r.dtype.empty() ? ctx_.dtype : r.dtype,
                          r.redop.empty() ? ctx_.redop : r.redop, ctx_.algo, ctx_.codec, r.size_bytes, r.count,
                          r.inplace ? "true" : "false", r.root, r.iters);
      const std::string baseline = r.baseline_busbw_gbps > 0 ? fmt::format("{:g}", r.baseline_busbw_gbps) : "";
      if (r.ok()) {
        out_ << fmt::format("{:.3f},{:.3f},{:.3f},{:.3f},{:.3f},{:.3f},", r.time_us, r.time_p50_us, r.time_p99_us,
                            r.time_min_us, r.time_max_us, r.time_stddev_us);
        // A no-op (one rank, in place) has times but no bandwidths.
        out_ << (r.moves_bytes ? fmt::format("{:.4f},{:.4f},", r.algbw_gbps, r.busbw_gbps) : std::string(",,"));
        out_ << fmt::format("{},{},\n", r.wrong, baseline);
      } else {
        out_ << fmt::format(",,,,,,,,,{},{}\n", baseline, Quote(r.error));
      }
    }
    out_.flush();
  }

 private:
  std::ostream& out_;
  BenchContext ctx_;
};

}  // namespace

std::unique_ptr<Reporter> MakeCsvReporter(std::ostream& out) { return std::make_unique<CsvReporter>(out); }

}  // namespace ciuic
