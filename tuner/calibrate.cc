#include "tuner/calibrate.h"

#include <algorithm>
#include <barrier>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <thread>
#include <tuple>

#include <unistd.h>

#include "collectives/crossover.h"
#include "core/buffer.h"
#include "core/database.h"
#include "core/error.h"
#include "core/files.h"
#include "core/progress.h"
#include "core/sizes.h"
#include "core/timer.h"
#include "kernels/codec.h"
#include "kernels/codec_kernels.h"
#include "tuner/bench_runner.h"
#include "tuner/plan_space.h"

namespace ciuic {

void TimeCurve::Add(double bytes, double us) {
  if (!(bytes > 0) || !(us > 0)) return;
  auto it = std::lower_bound(points_.begin(), points_.end(), std::make_pair(bytes, 0.0),
                             [](const auto& a, const auto& b) { return a.first < b.first; });
  if (it != points_.end() && it->first == bytes) {
    it->second = us;
  } else {
    points_.insert(it, {bytes, us});
  }
}

double TimeCurve::Us(double bytes) const {
  if (points_.empty() || !(bytes > 0)) return 0.0;
  if (bytes <= points_.front().first) {
    // Below the smallest point the first segment's log-log slope continues, between 0 (a fixed
    // cost: a GPU kernel at 1 MiB is launch-bound) and 1 (a constant rate).
    double slope = 1.0;
    if (points_.size() > 1) {
      const auto& a = points_[0];
      const auto& b = points_[1];
      slope = std::clamp(std::log(b.second / a.second) / std::log(b.first / a.first), 0.0, 1.0);
    }
    return points_.front().second * std::pow(bytes / points_.front().first, slope);
  }
  if (bytes >= points_.back().first) return points_.back().second * bytes / points_.back().first;
  auto hi = std::lower_bound(points_.begin(), points_.end(), std::make_pair(bytes, 0.0),
                             [](const auto& a, const auto& b) { return a.first < b.first; });
  auto lo = hi - 1;
  const double w = std::log(bytes / lo->first) / std::log(hi->first / lo->first);
  return std::exp(std::log(lo->second) * (1 - w) + std::log(hi->second) * w);
}

bool Calibration::Has(const std::string& codec) const {
  return kernels.count({"encode", codec}) > 0 && kernels.count({"decode", codec}) > 0;
}

double Calibration::KernelUs(const std::string& kernel, const std::string& codec, double bytes) const {
  auto it = kernels.find({kernel, codec});
  return it == kernels.end() ? 0.0 : it->second.Us(bytes);
}

double Calibration::TrainUs(const std::string& kernel, const std::string& variant, double bytes) const {
  auto it = train.find({kernel, variant});
  return it == train.end() || bytes <= 0 ? 0.0 : it->second.Us(bytes);
}

double Calibration::SendRecvUs(int ranks, double bytes) const {
  auto it = sendrecv.find(ranks);
  return it == sendrecv.end() || bytes <= 0 ? 0.0 : it->second.Us(bytes);
}

size_t Calibration::values() const {
  size_t n = 0;
  for (const auto& [k, c] : kernels) n += c.points().size();
  for (const auto& [k, c] : sendrecv) n += c.points().size();
  for (const auto& [k, c] : native_allreduce) n += c.points().size();
  return n;
}

double ConcurrentMedianUs(int threads, const std::function<void(int)>& fn) {
  std::barrier sync(threads);
  auto round = [&](int reps, std::vector<double>* out) {
    std::vector<std::vector<double>> times(static_cast<size_t>(threads));
    auto body = [&](int t) {
      for (int i = 0; i < reps; ++i) {
        sync.arrive_and_wait();
        const double t0 = NowSeconds();
        fn(t);
        times[static_cast<size_t>(t)].push_back((NowSeconds() - t0) * 1e6);
      }
    };
    std::vector<std::thread> pool;
    for (int t = 1; t < threads; ++t) pool.emplace_back(body, t);
    body(0);
    for (auto& th : pool) th.join();
    out->assign(static_cast<size_t>(reps), 0.0);
    for (int i = 0; i < reps; ++i)
      for (int t = 0; t < threads; ++t)
        (*out)[static_cast<size_t>(i)] =
            std::max((*out)[static_cast<size_t>(i)], times[static_cast<size_t>(t)][static_cast<size_t>(i)]);
  };
  std::vector<double> warm, timed;
  round(1, &warm);
  // Enough calls for ~30 ms of timing (short kernels vary most), 3 to 31.
  round(std::clamp(static_cast<int>(3e4 / std::max(warm[0], 1.0)), 3, 31), &timed);
  return Percentile(timed, 50);
}

namespace {

// GPU kernels: CUDA events on the default stream around each call (host clocks would time the launch
// and a synchronising copy), 3 warm-up calls, median of 15.
double DeviceMedianUs(const std::function<void()>& fn) {
  DeviceEventTimer timer(nullptr);
  for (int i = 0; i < 3; ++i) fn();
  std::vector<double> us;
  for (int i = 0; i < 15; ++i) {
    timer.Start();
    fn();
    timer.Stop();
    us.push_back(timer.ElapsedUs());
  }
  return Percentile(us, 50);
}

struct KernelRow {
  std::string kernel, codec;
  double bytes, us;
  int ranks;
};

void Store(Database& db, const std::string& device, const std::vector<KernelRow>& rows) {
  Database::Transaction tx(db);
  const std::string now = IsoNow();
  Statement ins(db.handle(),
                "INSERT INTO calibrations (created, device, kernel, codec, gbps, bytes, ranks) VALUES (?,?,?,?,?,?,?)");
  for (const auto& r : rows) {
    ins.Reset();
    ins.Bind(1, now).Bind(2, device).Bind(3, r.kernel).Bind(4, r.codec).Bind(5, r.bytes / (r.us * 1e3));
    ins.Bind(6, static_cast<int64_t>(r.bytes)).Bind(7, static_cast<int64_t>(r.ranks));
    ins.Step();
  }
  tx.Commit();
}

}  // namespace

std::string CalibrationDevice(bool cuda) {
  return cuda ? std::string("cuda:") + CudaDeviceName() : "cpu:" + CpuModelName();
}

namespace {

int KernelCopies(const CalibrateOptions& o) {
  return o.cuda ? 1
                : (o.concurrency > 0 ? o.concurrency
                                     : static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
}

std::vector<std::string> CalibratedCodecs(const std::vector<std::string>& codecs) {
  return codecs.empty() ? PlanSpaceCodecs() : codecs;
}

}  // namespace

void CheckKernelSizesFit(const CalibrateOptions& o, std::string_view option) {
  if (o.sizes.empty()) return;
  const uint64_t largest = *std::max_element(o.sizes.begin(), o.sizes.end());
  // Per copy: the two operands and the two wires of one slot (a wire is at most the size) and the
  // error-feedback states; plus the one host source the slots are filled from.
  const double copies = KernelCopies(o);
  const double per_copy = 6.0 * static_cast<double>(largest);
  const double host_need = static_cast<double>(largest) + (o.cuda ? 0.0 : copies * per_copy);
  const uint64_t host_avail = HostMemoryAvailable();
  constexpr double kHeadroom = 0.9;  // as ciuic-bench's own check
  if (host_avail > 0 && host_need > kHeadroom * static_cast<double>(host_avail))
    throw InputError(fmt::format(
        "{} {} does not fit: the kernel sweep needs about {:.1f} GiB of host memory ({} cop{} at once), {:.1f} GiB "
        "available",
        option, FormatSize(largest), host_need / 1073741824.0, static_cast<int>(copies), copies == 1 ? "y" : "ies",
        host_avail / 1073741824.0));
  if (o.cuda) {
    const uint64_t dev_avail = DeviceMemoryAvailable();
    if (per_copy > kHeadroom * static_cast<double>(dev_avail))
      throw InputError(
          fmt::format("{} {} does not fit: the kernel sweep needs about {:.1f} GiB of device memory, {:.1f} "
                      "GiB free",
                      option, FormatSize(largest), per_copy / 1073741824.0, dev_avail / 1073741824.0));
  }
}

void SweepKernels(const CalibrateOptions& o, const std::vector<std::string>& only, KernelSamples* samples) {
  const std::vector<std::string> codecs = CalibratedCodecs(only);
  const int threads = KernelCopies(o);
  const MemoryKind kind = o.cuda ? MemoryKind::kDevice : MemoryKind::kHost;
  for (uint64_t bytes : o.sizes) {
    const size_t n = bytes / 4;
    std::vector<float> host(n);
    for (size_t i = 0; i < n; ++i) host[i] = 1e-3f * (static_cast<float>((i * 2654435761u) % 2001) / 1000.0f - 1.0f);
    // Each timed call works on the next of `slots` buffer sets (covering kRotateBytes, as ciuic-bench
    // rotates its rows' buffers), so small sizes are timed from memory the way the ring meets them.
    struct Slot {
      Buffer x, y, wire, wire2;
    };
    struct Bufs {
      std::vector<Slot> s;
      size_t next = 0;
      CodecState st, st_ef;
      Slot& Next() { return s[next++ % s.size()]; }
    };
    const int slots = static_cast<int>(std::clamp<uint64_t>(kRotateBytes / (2 * bytes), 1, kMaxRotateSlots));
    std::vector<Bufs> b(static_cast<size_t>(threads));
    for (auto& t : b) {
      t.s.resize(static_cast<size_t>(slots));
      for (auto& sl : t.s) {
        sl.x = Buffer(n * 4, kind);
        sl.y = Buffer(n * 4, kind);
        CopyBytes(sl.x.data(), kind, host.data(), MemoryKind::kHost, n * 4);
        CopyBytes(sl.y.data(), kind, host.data(), MemoryKind::kHost, n * 4);
      }
    }
    // One copy per thread on the CPU; on the GPU one copy timed with events.
    using Kernel = std::function<void(Bufs&, Slot&)>;
    auto time = [&](const Kernel& k) {
      if (o.cuda) return DeviceMedianUs([&] { k(b[0], b[0].Next()); });
      return ConcurrentMedianUs(threads, [&](int i) {
        Bufs& t = b[static_cast<size_t>(i)];
        k(t, t.Next());
      });
    };
    (*samples)[{bytes, "none", "add"}].push_back(
        time([&](Bufs&, Slot& s) { AddInPlace(s.y.as<float>(), s.x.as<float>(), n, nullptr); }));
    for (const auto& name : codecs) {
      if (name == "none") continue;
      CodecSpec spec = ParseCodec(name);
      spec.error_feedback = false;
      const Codec c(spec);
      CodecSpec spec_ef = spec;
      spec_ef.error_feedback = true;
      const Codec c_ef(spec_ef);
      const size_t wb = std::max<size_t>(c.WireBytes(n), 1);
      for (auto& t : b) {
        t.st = CodecState();
        t.st_ef = CodecState();
        for (auto& sl : t.s) {
          sl.wire = Buffer(wb, kind);
          sl.wire2 = Buffer(wb, kind);
          SetBytes(sl.wire2.data(), kind, 0, wb);  // resident before timing: no page faults in the loop
          c.Encode(sl.x.as<float>(), n, sl.wire.data(), &t.st);
        }
      }
      const uint64_t dec_step = b[0].st.step - 1;  // the step the wires were encoded at (randomk's indices)
      const double enc =
          time([&](Bufs& t, Slot& s) { c.Encode(s.x.as<float>(), n, s.wire2.data(), &t.st, nullptr, false); });
      const double dec = time([&](Bufs&, Slot& s) { c.Decode(s.wire.data(), n, s.y.as<float>(), dec_step); });
      double enc_ef = 0, acc = 0, hop = 0;
      const bool element = c.HasDecodeAddEncode();
      if (element || spec.kind == CodecKind::kTopK || spec.kind == CodecKind::kRandomK)
        enc_ef =
            time([&](Bufs& t, Slot& s) { c_ef.Encode(s.x.as<float>(), n, s.wire2.data(), &t.st_ef, nullptr, false); });
      if (element || spec.kind == CodecKind::kTopK)
        acc = time([&](Bufs&, Slot& s) { c.DecodeAccumulate(s.wire.data(), n, s.y.as<float>(), dec_step); });
      if (element) {
        // As the ring calls it (collectives/algorithms): the kernel alone, no finiteness flag to read
        // back (Codec::DecodeAddEncode adds a state and a synchronising check per call).
        hop = time([&](Bufs&, Slot& s) {
          QuantDecodeAddEncode(c.Args(0), s.wire.as<uint8_t>(), s.x.as<float>(), n, s.wire2.as<uint8_t>(), nullptr,
                               nullptr);
        });
      }
      const std::pair<const char*, double> ks[] = {
          {"encode", enc}, {"encode_ef", enc_ef}, {"decode", dec}, {"decode_acc", acc}, {"hop", hop}};
      for (const auto& [k, us] : ks)
        if (us > 0) (*samples)[{bytes, name, k}].push_back(us);
    }
  }
}

void StoreKernelMedians(const std::string& db_path, const CalibrateOptions& o, const std::vector<std::string>& only,
                        const KernelSamples& samples, std::ostream& out) {
  const std::vector<std::string> codecs = CalibratedCodecs(only);
  const int threads = KernelCopies(o);
  const std::string device = CalibrationDevice(o.cuda);
  out << fmt::format("# {:<13} {:>6} {:>9} {:>9} {:>9} {:>9} {:>9}\n", "codec", "size", "encode", "encode_ef", "decode",
                     "dec_acc", "hop");
  std::vector<KernelRow> rows;
  for (uint64_t bytes : o.sizes) {
    const double bb = static_cast<double>(bytes);
    auto median = [&](const std::string& codec, const char* kernel) {
      auto it = samples.find({bytes, codec, kernel});
      if (it == samples.end()) return 0.0;
      const double us = Percentile(it->second, 50);
      rows.push_back({kernel, codec, bb, us, threads});
      return us;
    };
    const double add = median("none", "add");
    out << fmt::format("  {:<13} {:>6} {:>9} {:>9} {:>9} {:>9} {:>9}   add {:.2f}\n", "none", FormatSize(bytes), "-",
                       "-", "-", "-", "-", bb / (add * 1e3));
    for (const auto& name : codecs) {
      if (name == "none") continue;
      std::string line = fmt::format("  {:<13} {:>6}", name, FormatSize(bytes));
      for (const char* k : {"encode", "encode_ef", "decode", "decode_acc", "hop"}) {
        const double us = median(name, k);
        line += us > 0 ? fmt::format(" {:>9.2f}", bb / (us * 1e3)) : fmt::format(" {:>9}", "-");
      }
      out << line << "\n";
    }
  }
  Database db(db_path);
  Store(db, device, rows);
}

void SweepLink(const std::vector<int>& ranks, const std::string& sizes, LinkSamples* samples) {
  for (int p : ranks) {
    const auto doc = RunBenchJson(fmt::format("sendrecv --backend mpi --ranks {} --inplace no --sizes {}", p, sizes));
    for (uint64_t s : ParseSizeList(sizes)) {
      const double us = BenchP50Us(doc, static_cast<double>(s));
      if (std::isfinite(us) && us > 0) (*samples)[{p, s}].push_back(us);
    }
  }
}

void StoreLinkMedians(const std::string& db_path, const LinkSamples& samples) {
  std::vector<KernelRow> rows;
  for (const auto& [key, values] : samples)
    rows.push_back({"sendrecv", "none", static_cast<double>(key.second), Percentile(values, 50), key.first});
  Database db(db_path);
  Store(db, CalibrationDevice(false), rows);
}

namespace {

// `--algo auto`'s crossover per rank count over MPI (ciuic-bench --crossover measure with o.rounds
// rounds of 20 ms slots: steadier than a run's own 4 ms quick one), stored for `--crossover db`.
void CalibrateCrossovers(const std::string& db_path, const std::string& device, const CalibrateOptions& o,
                         std::ostream& out) {
  const int rounds = std::max(o.rounds, 5);
  out << fmt::format(
      "# calibrate {}: --algo auto's crossover (ciuic-bench --crossover measure, median of {} "
      "alternating rounds of 20 ms per candidate, the slowest rank's us per call)\n",
      device, rounds);
  for (int p : o.link_ranks) {
    const auto file = std::filesystem::temp_directory_path() / fmt::format("ciuic_crossover_{}_{}.json", getpid(), p);
    struct Remove {
      std::filesystem::path f;
      ~Remove() {
        std::error_code ec;
        std::filesystem::remove(f, ec);
      }
    } remove{file};
    RunBenchJson(
        fmt::format("allreduce --backend ciuic --transport mpi --ranks {} --algo auto --crossover measure "
                    "--crossover-rounds {} --crossover-slot-ms 20 --crossover-out {} --sizes 4 --iters 1 "
                    "--warmup 0 --check 0 --inplace yes",
                    p, rounds, file.string()));
    std::vector<CrossoverPoint> points, points_out_of_place;
    int ranks = 0;
    std::string transport;
    int hosts = 0;
    const Crossover table =
        ReadCrossoverFile(file.string(), &ranks, &transport, &points, nullptr, &hosts, &points_out_of_place);
    if (ranks != p || transport != "mpi")
      throw RuntimeError(
          fmt::format("calibrate: the crossover run measured {} ranks over {}, not {} over mpi", ranks, transport, p));
    // Keyed by the hosts the ranks ran on: a one-host table (the ring staged through a window) is
    // never read for a world across hosts.
    StoreCrossoverPoints(db_path, CrossoverDeviceKey(device, hosts), transport, p, points, points_out_of_place);
    out << fmt::format("#   {} ranks{}: auto = {}\n", p, hosts > 1 ? fmt::format(" on {} hosts", hosts) : "",
                       table.Describe());
    for (const bool oop : {false, true}) {
      for (const auto& q : oop ? points_out_of_place : points) {
        std::string line = fmt::format("  {:>10} library {:>10.2f}", FormatSize(q.bytes), q.library_us);
        for (const auto& [a, us] : q.us) line += fmt::format(" {} {:>10.2f}", AlgoName(a), us);
        out << line << (oop ? " (out of place)" : "") << "\n";
      }
    }
  }
}

}  // namespace

void RunCalibration(const std::string& db_path, const CalibrateOptions& o, std::ostream& out) {
  if (o.cuda && CudaDeviceCount() == 0) throw RuntimeError("calibrate --device cuda: no CUDA device is visible");
  if (o.sizes.empty() && o.link_ranks.empty() && o.train.empty())
    throw UsageError("calibrate: nothing to measure (no --sizes, no --ranks, no training kernels)");
  for (uint64_t s : o.sizes)
    if (s < 4096) throw UsageError(fmt::format("calibrate: size {} must be at least 4K", s));
  for (int p : o.link_ranks)
    if (p < 2 || p > 64) throw UsageError(fmt::format("calibrate: --ranks {} must be in 2..64", p));
  const int threads = KernelCopies(o);
  if (threads > 256) throw UsageError("calibrate: --concurrency must be at most 256");
  if (o.rounds < 1) throw UsageError("calibrate: --rounds must be at least 1");
  const std::string device = CalibrationDevice(o.cuda);

  // The training kernels first: their rows (one copy) then precede the codec kernels' in the table, so
  // that a ciuic-tune from before 2026-11-30, which reads every row as a codec kernel and takes the
  // concurrency from the last, still takes the codec kernels'.
  if (!o.train.empty()) {
    out << fmt::format(
        "# calibrate {}: training kernels, one copy, fp32, forward + backward (median of 5 runs per pass), us\n",
        device);
    out << fmt::format("# {:<10} {:>6} {:>6} {:>12} {:>12} {:>8}\n", "kernel", "rows", "cols", "fused", "unfused",
                       "saved");
    std::vector<KernelRow> rows;
    Progress progress("training kernels", static_cast<double>(o.train.size()), static_cast<int>(o.train.size()));
    for (const FusionShape& s : o.train) {
      progress.Begin(fmt::format("{} at {} x {}", s.kernel, s.rows, s.cols));
      FusionTimes t;
      try {
        t = TimeFusion(s, o.cuda);
      } catch (const std::exception& e) {  // out of memory at a large shape: the others are still worth having
        progress.Done();
        out << fmt::format("  {:<10} {:>6} {:>6} not timed: {}\n", s.kernel, s.rows, s.cols, PrintableLine(e.what()));
        continue;
      }
      progress.Done();
      const double bytes = static_cast<double>(s.rows) * static_cast<double>(s.cols) * 4;
      rows.push_back({FusionCurveName(s), "fused", bytes, t.fused_us, 1});
      rows.push_back({FusionCurveName(s), "unfused", bytes, t.unfused_us, 1});
      out << fmt::format("  {:<10} {:>6} {:>6} {:>12.1f} {:>12.1f} {:>7.2f}x\n", s.kernel, s.rows, s.cols, t.fused_us,
                         t.unfused_us, t.unfused_us / t.fused_us);
    }
    Database db(db_path);
    Store(db, device, rows);
  }
  if (!o.sizes.empty()) {
    out << fmt::format(
        "# calibrate {}: codec kernels, {} cop{} at once, median of {} round{} over the whole sweep "
        "(GB/s of fp32 gradient per copy)\n",
        device, threads, threads == 1 ? "y" : "ies", o.rounds, o.rounds == 1 ? "" : "s");
    // Rounds sweep everything in turn, so a point's samples lie minutes apart and a transient
    // slowdown of the machine spoils one of them, not all.
    KernelSamples samples;
    Progress progress("kernel calibration", o.rounds, o.rounds);
    for (int round = 0; round < o.rounds; ++round) {
      progress.Begin(
          fmt::format("round {}/{}: every codec's kernels at {} size(s)", round + 1, o.rounds, o.sizes.size()));
      SweepKernels(o, {}, &samples);
      progress.Done();
    }
    StoreKernelMedians(db_path, o, {}, samples, out);
  }

  if (!o.link_ranks.empty()) {
    if (o.cuda) throw UsageError("calibrate: the link (--ranks) is measured on cpu (MPI ranks) only");
    const auto sizes = ParseSizeList(o.link_sizes);
    out << fmt::format(
        "# calibrate {}: median us of one ring step (ciuic-bench sendrecv) and of MPI's own allreduce "
        "(in-place; in fp32, and in bf16/fp16 with the runtime's casts around it) per message size; {}\n",
        device, LocalMpiSetting());
    static const char* kPrecisions[] = {"fp32", "bf16", "fp16"};
    std::string head = fmt::format("# {:>10}", "size");
    for (int p : o.link_ranks) {
      head += fmt::format(" {:>11}", fmt::format("step@{}", p));
      for (const char* prec : kPrecisions) head += fmt::format(" {:>14}", fmt::format("ar_{}@{}", prec, p));
    }
    out << head << "\n";
    LinkSamples steps;
    const int runs = 4 * static_cast<int>(o.link_ranks.size());  // per rank count: ring step, 3 precisions
    Progress progress("link calibration", runs, runs);
    progress.Begin("ring steps (ciuic-bench sendrecv)", static_cast<double>(o.link_ranks.size()));
    SweepLink(o.link_ranks, o.link_sizes, &steps);
    progress.Done();
    std::map<std::pair<int, std::string>, nlohmann::json> native;
    for (int p : o.link_ranks) {
      progress.Begin(fmt::format("MPI allreduce in fp32 on {} ranks", p));
      native[{p, "fp32"}] = RunBenchJson(
          fmt::format("allreduce --backend mpi --ranks {} --inplace yes --check 0 --sizes {}", p, o.link_sizes));
      progress.Done();
      for (const char* prec : {"bf16", "fp16"}) {
        progress.Begin(fmt::format("MPI allreduce in {} on {} ranks", prec, p));
        native[{p, prec}] = RunBenchJson(fmt::format(
            "allreduce --backend ciuic --algo native --precision {} --ranks {} --inplace yes --check 0 --sizes {}",
            prec, p, o.link_sizes));
        progress.Done();
      }
    }
    std::vector<KernelRow> rows;
    for (uint64_t s : sizes) {
      std::string line = fmt::format("  {:>10}", FormatSize(s));
      for (int p : o.link_ranks) {
        const auto it = steps.find({p, s});
        line += it == steps.end() ? fmt::format(" {:>11}", "-") : fmt::format(" {:>11.2f}", it->second.front());
        for (const char* prec : kPrecisions) {
          const double ar = BenchP50Us(native.at({p, prec}), static_cast<double>(s));
          // Stored as codec "native" (fp32, as before) or "native:<precision>".
          const std::string name = std::string(prec) == "fp32" ? "native" : fmt::format("native:{}", prec);
          if (std::isfinite(ar) && ar > 0) rows.push_back({"allreduce", name, static_cast<double>(s), ar, p});
          line += fmt::format(" {:>14.2f}", ar);
        }
      }
      out << line << "\n";
    }
    StoreLinkMedians(db_path, steps);
    Database db(db_path);
    Store(db, device, rows);
    CalibrateCrossovers(db_path, device, o, out);
  }
  out << fmt::format("# stored in {} (table calibrations, device '{}')\n", db_path, device);
}

std::vector<FusionShape> TransformerFusionShapes() {
  std::vector<FusionShape> all;
  for (const std::string& name : BuiltinWorkloads()) {
    const Workload w = LoadWorkload(name);
    for (const FusionShape& s : FusionShapes(w, w.default_batch)) {
      const bool seen = std::any_of(all.begin(), all.end(), [&](const FusionShape& a) {
        return a.kernel == s.kernel && a.rows == s.rows && a.cols == s.cols;
      });
      if (!seen) all.push_back(s);
    }
  }
  return all;
}

Calibration LoadCalibration(const std::string& db_path, const std::string& device) {
  Calibration c;
  c.device = device;
  if (Database::NothingStored(db_path)) return c;
  // Read as it is: a calibration database made by an older ciuic is not migrated (or backed up) just
  // to be read.
  Database db(db_path, Database::Access::kReadOnly);
  const int version = db.SchemaVersion();
  if (version < 2) return c;  // no calibrations table yet
  // Rows in insertion order: a newer measurement of the same point replaces the older one.
  Statement q(db.handle(),
              version < 3 ? "SELECT kernel, codec, gbps, 0, 1 FROM calibrations WHERE device = ? ORDER BY id"
                          : "SELECT kernel, codec, gbps, bytes, ranks FROM calibrations WHERE device = ? ORDER BY id");
  q.Bind(1, device);
  while (q.Step()) {
    const std::string kernel = q.ColumnText(0), codec = q.ColumnText(1);
    const double gbps = q.ColumnDouble(2);
    // Rows from schema v2 carry no size: a constant rate (one point at 16 MiB).
    const double bytes = q.ColumnInt(3) > 0 ? static_cast<double>(q.ColumnInt(3)) : 16.0 * (1 << 20);
    const int ranks = static_cast<int>(q.ColumnInt(4));
    if (!(gbps > 0)) continue;
    const double us = bytes / (gbps * 1e3);
    if (kernel.rfind("crossover:", 0) == 0) continue;  // auto's crossover (LoadCrossoverPoints), not a model input
    if (kernel.rfind("train:", 0) == 0) {
      c.train[{kernel, codec}].Add(bytes, us);  // one copy: not the codec kernels' concurrency
    } else if (kernel == "sendrecv") {
      c.sendrecv[ranks].Add(bytes, us);
    } else if (kernel == "allreduce") {
      c.native_allreduce[{ranks, codec == "native" ? std::string("fp32") : codec.substr(codec.find(':') + 1)}].Add(
          bytes, us);
    } else {
      c.kernels[{kernel, codec}].Add(bytes, us);
      c.concurrency = std::max(1, ranks);
    }
  }
  return c;
}

Calibration LoadGpuCalibrationFor(const std::string& db_path, const std::string& gpu_name) {
  if (Database::NothingStored(db_path)) return Calibration{};
  std::string best;
  {
    Database db(db_path, Database::Access::kReadOnly);
    if (db.SchemaVersion() < 2) return Calibration{};
    Statement q(db.handle(), "SELECT DISTINCT device FROM calibrations WHERE device LIKE 'cuda:%'");
    while (q.Step()) {
      const std::string d = q.ColumnText(0), name = d.substr(5);
      // The longest calibrated name the topology's device name starts with.
      if (!name.empty() && gpu_name.compare(0, name.size(), name) == 0 && d.size() > best.size()) best = d;
    }
  }
  if (best.empty()) return Calibration{};
  return LoadCalibration(db_path, best);
}

}  // namespace ciuic
