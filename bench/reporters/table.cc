// The console table: nccl-tests' columns (size count type redop root, then time algbw busbw #wrong
// out-of-place and in-place) plus the algorithm; a failed or skipped row shows "n/a" and its
// reason below the table. No average over sizes: the footer names the peak busbw and its size.
#include <fmt/format.h>

#include <ostream>

#include "bench/record.h"
#include "core/sizes.h"

namespace ciuic {

namespace {

std::string Time(double us) { return us >= 1e6 ? fmt::format("{:8.0f}", us) : fmt::format("{:8.2f}", us); }
std::string Bw(double gbps) { return fmt::format("{:7.2f}", gbps); }

class TableReporter : public Reporter {
 public:
  explicit TableReporter(std::ostream& out) : out_(out) {}

  void Begin(const BenchContext& c) override {
    ctx_ = c;
    out_ << fmt::format("# ciuic-bench {}  backend {}  device {}  ranks {}  dtype {}  op {}  algo {}  codec {}\n",
                        c.collective, c.backend, c.device, c.world_size, c.dtype, c.redop, c.algo, c.codec);
    out_ << fmt::format("# ciuic {} ({})  started {}", c.tool_version, c.git_commit, c.start_time);
    for (const auto& [k, v] : c.library_versions) out_ << fmt::format("  {} {}", k, v);
    out_ << "\n";
    std::map<std::string, int> hosts;
    for (const auto& h : c.hostnames) ++hosts[h];
    out_ << "# hosts:";
    for (const auto& [h, n] : hosts) out_ << fmt::format(" {} ({} rank{})", h, n, n == 1 ? "" : "s");
    if (!c.device_name.empty()) out_ << fmt::format("  device: {}", c.device_name);
    out_ << "\n";
    out_ << fmt::format("# warmup {}  iters {}  check {}  timing {}  average {} ({})\n",
                        c.warmup < 0 ? "auto" : std::to_string(c.warmup),
                        c.iters < 0 ? "auto" : std::to_string(c.iters), c.check, c.timing, c.average,
                        c.average_description);
    out_ << "#\n";
    lossy_ = c.codec != "none";
    if (lossy_) out_ << "# lossy codec: #wrong counts ranks whose bits differ from rank 0; error columns are of the out-of-place run\n";
    out_ << fmt::format("#{:>70}{:>38}\n", "out-of-place", "in-place");
    out_ << fmt::format("#{:>11} {:>13} {:>9} {:>6} {:>5} {:>8}  {:>8} {:>7} {:>7} {:>6}  {:>8} {:>7} {:>7} {:>6}",
                        "size", "count", "type", "redop", "root", "algo", "time", "algbw", "busbw", "#wrong",
                        "time", "algbw", "busbw", "#wrong") +
                (lossy_ ? fmt::format(" {:>10} {:>10}\n", "rel_l2", "max_abs") : "\n");
    out_ << fmt::format("#{:>11} {:>13} {:>9} {:>6} {:>5} {:>8}  {:>8} {:>7} {:>7} {:>6}  {:>8} {:>7} {:>7} {:>6}",
                        "(B)", "(elements)", "", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)",
                        "(GB/s)", "") +
                (lossy_ ? fmt::format(" {:>10} {:>10}\n", "(error)", "(error)") : "\n");
    out_.flush();
  }

  void Size(const std::vector<BenchRow>& rows) override {
    if (rows.empty()) return;
    const BenchRow& first = rows.front();
    std::string line = fmt::format(" {:>11} {:>13} {:>9} {:>6} {:>5} {:>8}", first.size_bytes, first.count,
                                   ctx_.dtype_table, ctx_.redop, first.root, ctx_.algo);
    const BenchRow* oop = nullptr;
    const BenchRow* ip = nullptr;
    for (const auto& r : rows) (r.inplace ? ip : oop) = &r;
    for (const BenchRow* r : {oop, ip}) {
      if (!r || !r->ok()) {
        line += fmt::format("  {:>8} {:>7} {:>7} {:>6}", "n/a", "n/a", "n/a", "n/a");
        if (r) notes_.push_back(fmt::format("{} {}: {}", FormatSize(r->size_bytes),
                                            r->inplace ? "in-place" : "out-of-place", r->error));
        continue;
      }
      if (!r->moves_bytes) {
        line += fmt::format("  {} {:>7} {:>7} {:>6}", Time(r->time_us), "n/a", "n/a", r->wrong);
        continue;
      }
      line += fmt::format("  {} {} {} {:>6}", Time(r->time_us), Bw(r->algbw_gbps), Bw(r->busbw_gbps), r->wrong);
    }
    if (lossy_) {
      const BenchRow* e = oop && oop->ok() ? oop : ip;
      line += e && e->rel_l2_error >= 0 ? fmt::format(" {:>10.3e} {:>10.3e}", e->rel_l2_error, e->max_abs_error)
                                        : fmt::format(" {:>10} {:>10}", "-", "-");
    }
    out_ << line << "\n";
    out_.flush();
  }

  void End(const BenchSummary& s) override {
    for (const auto& n : notes_) out_ << "# n/a " << n << "\n";
    out_ << fmt::format("# wrong elements: {} {}\n", s.total_wrong, s.total_wrong == 0 ? "OK" : "FAILED");
    if (s.peak_size_bytes > 0) {
      out_ << fmt::format("# peak busbw: {:.2f} GB/s at {} B ({}, {})\n", s.peak_busbw_gbps, s.peak_size_bytes,
                          FormatSize(s.peak_size_bytes), s.peak_inplace ? "in-place" : "out-of-place");
    } else {
      out_ << "# peak busbw: n/a (no row moved bytes between ranks)\n";
    }
    if (s.peak_algbw_size_bytes > 0) {
      out_ << fmt::format("# peak algbw: {:.2f} GB/s at {} B ({})\n", s.peak_algbw_gbps, s.peak_algbw_size_bytes,
                          FormatSize(s.peak_algbw_size_bytes));
    }
    out_ << fmt::format(
        "# time: {}; algbw = size / time (GB = 1e9 B); busbw = algbw x {} = "
        "algbw x {:.4f} (n = {})\n",
        ctx_.average_description, ctx_.busbw_formula, ctx_.busbw_factor, ctx_.world_size);
    out_.flush();
  }

 private:
  std::ostream& out_;
  bool lossy_ = false;
  BenchContext ctx_;
  std::vector<std::string> notes_;
};

}  // namespace

std::unique_ptr<Reporter> MakeTableReporter(std::ostream& out) { return std::make_unique<TableReporter>(out); }

}  // namespace ciuic
