// The console table, column-compatible with nccl-tests: `size count type redop root`, then `time algbw
// busbw #wrong` out-of-place and in-place, in nccl-tests' widths, so a script written for nccl-tests'
// output reads ours unchanged (tests/scripts/nccl_tests_parser_test.py). Our own columns come after
// them: the algorithm, the error of a lossy codec, the share of a --baseline. The footer carries
// nccl-tests' two closing lines (out-of-bounds values, average bus bandwidth) and then ours (peak busbw
// and its size, how time and busbw are defined); a failed or skipped row shows "n/a" and its reason.
#include <fmt/format.h>

#include <ostream>

#include "bench/record.h"
#include "core/sizes.h"

namespace ciuic {

namespace {

// `v` in at most `width` characters, right-aligned: two decimals when they fit, then one, then none,
// then an exponent (nccl-tests' cells: a 7-character time, 6-character bandwidths).
std::string Fit(double v, int width) {
  for (int decimals : {2, 1, 0}) {
    std::string s = fmt::format("{:>{}.{}f}", v, width, decimals);
    if (static_cast<int>(s.size()) <= width) return s;
  }
  return fmt::format("{:>{}.{}e}", v, width, width >= 7 ? 1 : 0);
}

constexpr int kTimeWidth = 7, kBwWidth = 6, kAlgoWidth = 8, kErrorWidth = 10, kRefWidth = 6;

class TableReporter : public Reporter {
 public:
  explicit TableReporter(std::ostream& out) : out_(out) {}

  void Begin(const BenchContext& c) override {
    ctx_ = c;
    out_ << fmt::format("# ciuic-bench {}  backend {}  device {}  ranks {}  dtype {}  op {}  algo {}  codec {}{}\n",
                        c.collective, c.backend, c.device, c.world_size, c.dtype, c.redop, c.algo, c.codec,
                        c.buffers.empty() ? "" : "  buffers " + c.buffers);
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
    if (c.timing == "batch")
      out_ << "# timing batch: the timed iterations back to back, one wait, wall clock / iterations (nccl-tests' -z "
              "0)\n";
    else if (c.timing == "host" && (c.blocking >= 0 || c.library_versions.count("cuda")))
      out_ << "# timing host: each op alone (barrier, op, wait for it), wall clock (nccl-tests' -z 1)\n";
    if (!c.baseline.empty())
      out_ << fmt::format("# baseline {}: {}; %ref = out-of-place busbw / its busbw at the same size\n", c.baseline,
                          c.baseline_description);
    out_ << "#\n";
    lossy_ = c.codec != "none";
    baseline_ = !c.baseline.empty();
    if (lossy_)
      out_ << "# lossy codec: #wrong counts ranks whose bits differ from rank 0; error columns are of the out-of-place "
              "run\n";
    out_ << fmt::format("# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}           out-of-place                       in-place\n",
                        "", "", "", "", "");
    out_ << fmt::format("# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>6}",
                        "size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw",
                        "busbw", "#wrong") +
                Extras("algo", "rel_l2", "max_abs", "%ref") + "\n";
    std::string units =
        fmt::format("# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>6}",
                    "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "") +
        Extras("", "(error)", "(error)", "(%)");
    while (units.back() == ' ') units.pop_back();
    out_ << units << "\n";
    out_.flush();
  }

  void Size(const std::vector<BenchRow>& rows) override {
    if (rows.empty()) return;
    const BenchRow& first = rows.front();
    const std::string& type = first.dtype_table.empty() ? ctx_.dtype_table : first.dtype_table;
    const std::string& redop = first.redop.empty() ? ctx_.redop : first.redop;
    std::string line =
        fmt::format("{:>12}  {:>12}  {:>8}  {:>6}  {:>6}", first.size_bytes, first.count, type, redop, first.root);
    const BenchRow* oop = nullptr;
    const BenchRow* ip = nullptr;
    for (const auto& r : rows) (r.inplace ? ip : oop) = &r;
    for (const BenchRow* r : {oop, ip}) {
      if (!r || !r->ok()) {
        line += fmt::format("  {:>7}  {:>6}  {:>6}  {:>6}", "n/a", "n/a", "n/a", "n/a");
        if (r)
          notes_.push_back(fmt::format("{}{} {}: {}", FormatSize(r->size_bytes), Combination(*r),
                                       r->inplace ? "in-place" : "out-of-place", r->error));
        continue;
      }
      const std::string time = Fit(r->time_us, kTimeWidth);
      if (!r->moves_bytes) {
        line += fmt::format("  {}  {:>6}  {:>6}  {:>6}", time, "n/a", "n/a", r->wrong);
        continue;
      }
      line += fmt::format("  {}  {}  {}  {:>6}", time, Fit(r->algbw_gbps, kBwWidth), Fit(r->busbw_gbps, kBwWidth),
                          r->wrong);
    }
    line += fmt::format("  {:>{}}", ctx_.algo, kAlgoWidth);
    if (lossy_) {
      const BenchRow* e = oop && oop->ok() ? oop : ip;
      line += e && e->rel_l2_error >= 0 ? fmt::format(" {:>10.3e} {:>10.3e}", e->rel_l2_error, e->max_abs_error)
                                        : fmt::format(" {:>10} {:>10}", "-", "-");
    }
    if (baseline_) {
      const auto usable = [](const BenchRow* r) {
        return r && r->ok() && r->moves_bytes && r->baseline_busbw_gbps > 0;
      };
      const BenchRow* b = usable(oop) ? oop : (usable(ip) && !oop ? ip : nullptr);
      line += b ? fmt::format(" {}", Fit(100.0 * b->busbw_gbps / b->baseline_busbw_gbps, kRefWidth))
                : fmt::format(" {:>6}", "-");
    }
    out_ << line << "\n";
    out_.flush();
  }

  void End(const BenchSummary& s) override {
    for (const auto& n : notes_) out_ << "# n/a " << n << "\n";
    // nccl-tests' closing lines, in its format ("# %-20s : %d %s", "# %-20s : %g "), for the scripts that read them.
    out_ << fmt::format("# {:<20} : {} {}\n", "Out of bounds values", s.total_wrong,
                        s.total_wrong == 0 ? "OK" : "FAILED");
    out_ << fmt::format("# {:<20} : {:g} \n", "Avg bus bandwidth", s.avg_busbw_gbps);
    out_ << "#\n";
    if (s.peak_size_bytes > 0) {
      out_ << fmt::format("# peak busbw: {:.2f} GB/s at {} B ({}, {}{})\n", s.peak_busbw_gbps, s.peak_size_bytes,
                          FormatSize(s.peak_size_bytes), s.peak_inplace ? "in-place" : "out-of-place",
                          PeakCombination(s));
    } else {
      out_ << "# peak busbw: n/a (no row moved bytes between ranks)\n";
    }
    if (s.peak_algbw_size_bytes > 0) {
      out_ << fmt::format("# peak algbw: {:.2f} GB/s at {} B ({})\n", s.peak_algbw_gbps, s.peak_algbw_size_bytes,
                          FormatSize(s.peak_algbw_size_bytes));
    }
    if (baseline_ && s.baseline_best_gbps > 0 && s.peak_size_bytes > 0) {
      out_ << fmt::format("# peak busbw vs baseline {}: {:.1f}% of its highest figure, {:g} GB/s at {} ({})\n",
                          ctx_.baseline, 100.0 * s.peak_busbw_gbps / s.baseline_best_gbps, s.baseline_best_gbps,
                          FormatSize(s.baseline_best_size_bytes), s.baseline_best_source);
    }
    out_ << fmt::format(
        "# time: {}; algbw = size / time (GB = 1e9 B); busbw = algbw x {} = "
        "algbw x {:.4f} (n = {}); avg bus bandwidth: mean busbw of every row that moved bytes\n",
        ctx_.average_description, ctx_.busbw_formula, ctx_.busbw_factor, ctx_.world_size);
    out_.flush();
  }

 private:
  // The extra columns' cells after nccl-tests' (header text, or a row's values).
  std::string Extras(const char* algo, const char* rel_l2, const char* max_abs, const char* ref) const {
    std::string s = fmt::format("  {:>{}}", algo, kAlgoWidth);
    if (lossy_) s += fmt::format(" {:>{}} {:>{}}", rel_l2, kErrorWidth, max_abs, kErrorWidth);
    if (baseline_) s += fmt::format(" {:>{}}", ref, kRefWidth);
    return s;
  }
  // " fp16 max" for a row of a sweep over several dtypes or ops; "" otherwise.
  std::string Combination(const BenchRow& r) const {
    if (ctx_.dtype.find(',') == std::string::npos && ctx_.redop.find(',') == std::string::npos) return "";
    return fmt::format(" {} {}", r.dtype, r.redop);
  }
  std::string PeakCombination(const BenchSummary& s) const {
    for (const auto& r : s.all_rows) {
      if (r.ok() && r.moves_bytes && r.size_bytes == s.peak_size_bytes && r.inplace == s.peak_inplace &&
          r.busbw_gbps == s.peak_busbw_gbps) {
        const std::string c = Combination(r);
        return c.empty() ? "" : "," + c;
      }
    }
    return "";
  }

  std::ostream& out_;
  bool lossy_ = false;
  bool baseline_ = false;
  BenchContext ctx_;
  std::vector<std::string> notes_;
};

}  // namespace

std::unique_ptr<Reporter> MakeTableReporter(std::ostream& out) { return std::make_unique<TableReporter>(out); }

}  // namespace ciuic
