#include "tuner/validate.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "collectives/algorithms/allreduce.h"
#include "core/database.h"
#include "core/error.h"
#include "core/files.h"
#include "core/progress.h"
#include "core/sizes.h"
#include "core/timer.h"
#include "kernels/codec.h"
#include "tuner/bench_runner.h"
#include "tuner/calibrate.h"
#include "tuner/local_model.h"

namespace ciuic {

double MedianAbsError(const std::vector<ValidationRow>& rows) {
  std::vector<double> e;
  for (const auto& r : rows) e.push_back(std::fabs(r.error()));
  return Percentile(e, 50);
}

void CheckValidateOptions(const ValidateOptions& o) {
  if (o.ranks.empty() || o.sizes.empty() || o.codecs.empty())
    throw UsageError("validate: --ranks, --sizes and --codecs must not be empty");
  if (o.repeat < 1 || o.repeat > 20) throw UsageError(fmt::format("validate: --repeat {} must be in 1..20", o.repeat));
  for (int p : o.ranks)
    if (p < 2 || p > 64) throw UsageError(fmt::format("validate: --ranks {} must be in 2..64", p));
}

ValidationResult RunValidation(const ValidateOptions& o, std::ostream& out) {
  CheckValidateOptions(o);
  std::vector<std::string> algos;
  for (const auto& c : o.codecs) {
    const CodecSpec spec = ParseCodec(c);  // UsageError on a bad spelling
    const AllReduceAlgo algo = DefaultAlgo(spec.kind);
    algos.push_back(AlgoName(algo));
  }
  const std::string device = CalibrationDevice(false);
  Calibration cal = LoadCalibration(o.db, device);

  // Calibrate what is missing: the link per rank count; the kernels once when the stored ones are used.
  std::set<int> link;
  bool kernels = false;
  Calibration probe = cal;  // with every link present, what is still missing is a kernel
  for (int p : o.ranks) {
    if (!cal.HasLink(p) && o.stored_kernels) link.insert(p);  // else timed in the passes
    probe.sendrecv[p].Add(1 << 20, 1.0);
  }
  for (int p : o.ranks)
    for (size_t i = 0; i < o.codecs.size(); ++i)
      if (!CanPredictLocal(probe, {o.codecs[i], algos[i], 1 << 20, p, false})) kernels = true;
  if (!o.stored_kernels) kernels = false;  // timed in the passes below
  if (kernels || !link.empty()) {
    CalibrateOptions c;
    if (kernels) c.sizes = ParseSizeList(o.kernel_sizes);
    c.link_ranks.assign(link.begin(), link.end());
    out << "# validate: calibrating what the database lacks first\n";
    RunCalibration(o.db, c, out);
    cal = LoadCalibration(o.db, device);
  }

  // Measure: `repeat` passes over every (ranks, codec), interleaved so slow phases of the machine
  // spread over all rows; each row's value is the median over passes of ciuic-bench's median.
  std::string size_list;
  for (uint64_t s : o.sizes) size_list += (size_list.empty() ? "" : ",") + std::to_string(s);
  std::map<std::tuple<int, size_t, uint64_t>, std::vector<double>> samples;
  out << fmt::format(
      "# validate: ciuic-bench allreduce --backend ciuic over MPI ({}){}\n", LocalMpiSetting(),
      o.stored_kernels ? "; kernels and link as stored" : "; each pass times the kernels and ring steps first");
  CalibrateOptions kc;
  kc.sizes = ParseSizeList(o.kernel_sizes);
  KernelSamples kernel_samples;
  LinkSamples link_samples;
  const int per_pass = static_cast<int>(o.ranks.size() * o.codecs.size()) + (o.stored_kernels ? 0 : 2);
  Progress progress("validation", o.repeat * per_pass, o.repeat * per_pass);
  for (int pass = 0; pass < o.repeat; ++pass) {
    out << fmt::format("# validate: pass {}/{}\n", pass + 1, o.repeat) << std::flush;
    if (!o.stored_kernels) {
      progress.Begin(fmt::format("pass {}/{}: codec kernels", pass + 1, o.repeat));
      SweepKernels(kc, o.codecs, &kernel_samples);
      progress.Done();
      progress.Begin(fmt::format("pass {}/{}: ring steps", pass + 1, o.repeat));
      SweepLink(o.ranks, o.link_sizes, &link_samples);
      progress.Done();
    }
    for (int p : o.ranks)
      for (size_t i = 0; i < o.codecs.size(); ++i) {
        progress.Begin(fmt::format("pass {}/{}: {} on {} ranks", pass + 1, o.repeat, o.codecs[i], p));
        struct ItemDone {
          Progress& p;
          ~ItemDone() { p.Done(); }
        } item_done{progress};
        const auto doc = RunBenchJson(
            fmt::format("allreduce --backend ciuic --codec {} --algo {} --ranks {} --sizes {} --inplace yes --check 0 "
                        "--warmup 2 --iters {}",
                        o.codecs[i], algos[i], p, size_list, o.iters));
        for (uint64_t s : o.sizes) samples[{p, i, s}].push_back(BenchP50Us(doc, static_cast<double>(s)));
      }
  }

  if (!o.stored_kernels) {
    out << fmt::format(
        "# validate: the kernels and ring steps timed in the passes (median of {} sweeps), stored "
        "as a calibration\n",
        o.repeat);
    StoreKernelMedians(o.db, kc, o.codecs, kernel_samples, out);
    StoreLinkMedians(o.db, link_samples);
    cal = LoadCalibration(o.db, device);
  }

  ValidationResult res;
  out << fmt::format("# {:>5} {:<13} {:<8} {:>9} {:>13} {:>13} {:>8}\n", "ranks", "codec", "algo", "size",
                     "measured_us", "predicted_us", "error");
  for (int p : o.ranks)
    for (size_t i = 0; i < o.codecs.size(); ++i)
      for (uint64_t s : o.sizes) {
        ValidationRow r;
        r.ranks = p;
        r.codec = o.codecs[i];
        r.algo = algos[i];
        r.bytes = static_cast<double>(s);
        r.measured_us = Percentile(samples[{p, i, s}], 50);
        if (!std::isfinite(r.measured_us))
          throw RuntimeError(fmt::format("validate: ciuic-bench gave no time for {} on {} ranks at {}", r.codec, p, s));
        r.predicted_us = PredictLocalAllReduceUs(cal, {r.codec, r.algo, r.bytes, p, false});
        res.rows.push_back(r);
        out << fmt::format("  {:>5} {:<13} {:<8} {:>9} {:>13.1f} {:>13.1f} {:>+7.1f}%\n", p, r.codec, r.algo,
                           FormatSize(s), r.measured_us, r.predicted_us, 100 * r.error());
      }
  res.median_abs_error = MedianAbsError(res.rows);
  // Summaries by rank count and by codec.
  for (int p : o.ranks) {
    std::vector<ValidationRow> sub;
    for (const auto& r : res.rows)
      if (r.ranks == p) sub.push_back(r);
    out << fmt::format("# {} ranks: median |error| {:.1f}% over {} rows\n", p, 100 * MedianAbsError(sub), sub.size());
  }
  for (const auto& c : o.codecs) {
    std::vector<ValidationRow> sub;
    for (const auto& r : res.rows)
      if (r.codec == c) sub.push_back(r);
    out << fmt::format("# {}: median |error| {:.1f}%\n", c, 100 * MedianAbsError(sub));
  }
  out << fmt::format(
      "# median |predicted / measured - 1| = {:.1f}% over {} rows (kernels timed {} at once; device {})\n",
      100 * res.median_abs_error, res.rows.size(), cal.concurrency, device);

  Database db(o.db);
  Database::Transaction tx(db);
  const std::string now = IsoNow();
  Statement ins(db.handle(),
                "INSERT INTO validations (created, device, ranks, codec, algo, bytes, measured_us, predicted_us) "
                "VALUES (?,?,?,?,?,?,?,?)");
  for (const auto& r : res.rows) {
    ins.Reset();
    ins.Bind(1, now).Bind(2, device).Bind(3, static_cast<int64_t>(r.ranks)).Bind(4, r.codec).Bind(5, r.algo);
    ins.Bind(6, static_cast<int64_t>(r.bytes)).Bind(7, r.measured_us).Bind(8, r.predicted_us);
    ins.Step();
  }
  tx.Commit();
  out << fmt::format("# stored {} rows in {} (table validations)\n", res.rows.size(), o.db);
  return res;
}

}  // namespace ciuic
