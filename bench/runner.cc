#include "bench/runner.h"

#include "core/files.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>
#include <numeric>
#include <optional>

#include <unistd.h>

#include "collectives/shared_window.h"
#include "core/buffer.h"
#include "core/config.h"
#include "core/error.h"
#include "core/fault.h"
#include "core/log.h"
#include "core/progress.h"
#include "core/sizes.h"
#include "core/timer.h"
#include "core/trace.h"

namespace ciuic {

const char* AverageName(Average a) {
  switch (a) {
    case Average::kAvg:
      return "avg";
    case Average::kMax:
      return "max";
    case Average::kMin:
      return "min";
    case Average::kRank0:
      return "rank0";
  }
  return "?";
}

Average ParseAverage(std::string_view text) {
  for (Average a : {Average::kAvg, Average::kMax, Average::kMin, Average::kRank0})
    if (text == AverageName(a)) return a;
  throw UsageError("expected avg, max, min or rank0");  // the caller names the option and the value
}

std::string AverageDescription(Average a) {
  switch (a) {
    case Average::kAvg:
      return "average over ranks of each rank's mean";
    case Average::kMax:
      return "max over ranks of each rank's mean";
    case Average::kMin:
      return "min over ranks of each rank's mean";
    case Average::kRank0:
      return "rank 0's mean";
  }
  return "?";
}

void CombineRanks(Communicator& comm, Average a, double* v, size_t n) {
  switch (a) {
    case Average::kMax:
      comm.HostAllReduce(v, n, ReduceOp::kMax);
      return;
    case Average::kMin:
      comm.HostAllReduce(v, n, ReduceOp::kMin);
      return;
    case Average::kAvg:
      comm.HostAllReduce(v, n, ReduceOp::kSum);
      for (size_t i = 0; i < n; ++i) v[i] /= comm.Size();
      return;
    case Average::kRank0:
      if (comm.Rank() != 0) std::fill(v, v + n, 0.0);
      comm.HostAllReduce(v, n, ReduceOp::kSum);
      return;
  }
}

namespace {

// Auto iteration counts by message size: OSU runs 1000 iterations (200 warm-up) below 8 KiB, where
// a handful of samples is noise; nccl-tests runs 20 at every size, enough where one op is long.
// All of it within row_budget_s per row; rows slower than row_budget_s / 3 per op get the minimum
// (1 GiB over Open MPI here: ~2 s/op).
constexpr int kMinAutoIters = 3;
struct AutoCounts {
  uint64_t below_bytes;
  int max_iters;
  int max_warmup;
};
constexpr AutoCounts kAutoCounts[] = {{8 << 10, 1000, 200}, {1 << 20, 200, 20}, {UINT64_MAX, 20, 5}};
AutoCounts AutoCountsFor(uint64_t size) {
  for (const AutoCounts& c : kAutoCounts)
    if (size < c.below_bytes) return c;
  return kAutoCounts[std::size(kAutoCounts) - 1];
}
// Sample standard deviation (n - 1), 0 for fewer than two values.
double SampleStddev(const std::vector<double>& v) {
  if (v.size() < 2) return 0;
  const double mean = std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
  double ss = 0;
  for (double x : v) ss += (x - mean) * (x - mean);
  return std::sqrt(ss / static_cast<double>(v.size() - 1));
}

// Refuse sizes that need more than this share of available memory.
constexpr double kMemoryHeadroom = 0.9;

struct Placement {
  CollCounts counts;
  size_t elem = 0;
  int slots = 1;
  bool inplace = false;
  uint8_t* send_region = nullptr;  // out-of-place
  uint8_t* recv_region = nullptr;
  uint8_t* region = nullptr;  // in-place
  size_t SendBytes() const { return counts.send * elem; }
  size_t RecvBytes() const { return counts.recv * elem; }
  size_t SlotBytes() const { return counts.Larger() * elem; }
  const void* Send(int slot) const {
    if (inplace) return region + slot * SlotBytes() + counts.inplace_send_offset * elem;
    return send_region + slot * SendBytes();
  }
  void* Recv(int slot) const {
    if (inplace) return region + slot * SlotBytes() + counts.inplace_recv_offset * elem;
    return recv_region + slot * RecvBytes();
  }
};

int SlotsFor(uint64_t bytes_per_slot) {
  if (bytes_per_slot == 0) return 1;
  return static_cast<int>(std::clamp<uint64_t>(kRotateBytes / bytes_per_slot, 1, kMaxRotateSlots));
}

// Bytes of the buffer arena one size needs: the larger of its out-of-place (send + receive) and
// in-place regions, times the rotation slots.
uint64_t ArenaBytes(const CollSpec& spec, uint64_t size, DType t, int nranks) {
  CollArgs a;
  a.nranks = nranks;
  a.type = t;
  const CollCounts c = spec.counts(size, DTypeSize(t), a);
  const uint64_t es = DTypeSize(t);
  const uint64_t oop = (c.send + c.recv) * es;
  const uint64_t ip = c.Larger() * es;
  return std::max(SlotsFor(oop) * oop, SlotsFor(ip) * ip);
}

// Largest buffer (elements x size) of any size in the sweep: host staging and read-back.
uint64_t LargestBufferBytes(const BenchOptions& o, int nranks) {
  uint64_t most = 0;
  for (uint64_t s : o.sizes) {
    CollArgs a;
    a.nranks = nranks;
    a.type = o.type;
    most = std::max<uint64_t>(most, o.spec->counts(s, DTypeSize(o.type), a).Larger() * DTypeSize(o.type));
  }
  return most;
}

class Runner {
 public:
  Runner(Communicator& comm, const BenchOptions& o, const BenchContext& context) : comm_(comm), o_(o) {
    setup_hash_ = Fnv({context.codec, context.algo, context.dtype, context.redop});
    timing_hash_ = Fnv({std::to_string(o.iters), std::to_string(o.warmup), std::to_string(o.check),
                        AverageName(o.average), std::to_string(o.seed), std::to_string(o.row_budget_s),
                        std::to_string(o.lossy), std::to_string(o.per_iter)});
    args_.rank = comm.Rank();
    args_.nranks = comm.Size();
    args_.root = o.spec->rooted ? o.root : -1;
    args_.type = o.type;
    args_.op = o.op;
    if (!o.spec->rooted) args_.root = 0;
    device_ = comm.Device() == DeviceKind::kCuda;
    // One arena for the whole sweep (as nccl-tests allocates max bytes once): faulting fresh pages
    // for every size cost more than the collectives themselves on this project's VMs.
    uint64_t arena = 0;
    for (uint64_t s : o.sizes) arena = std::max(arena, ArenaBytes(*o.spec, s, o.type, comm.Size()));
    AgreeOnRegister(comm, o.shared);  // every rank makes its window, or none (AllocShared is collective)
    if (o.shared) {
      window_ = comm.AllocShared(arena);
      if (!window_)
        throw UsageError(fmt::format("--register: the {} backend takes no shared windows", comm.BackendName()));
      arena_base_ = static_cast<uint8_t*>(window_->data());
    } else {
      arena_ = Buffer(arena, comm.BufferKind());
      arena_base_ = arena_.as<uint8_t>();
    }
    if (device_) {
      const uint64_t largest = LargestBufferBytes(o, comm.Size());
      staging_ = Buffer(largest, MemoryKind::kHost);
      readback_ = Buffer(largest, MemoryKind::kHost);
    }
  }

  // Before each row every rank checks that all ranks are about to run the same thing: a rank
  // launched with other options (an MPMD launch, a mixed installation) would otherwise hang in a
  // mismatched collective or report a meaningless row. A mismatch is the same UsageError on every
  // rank (each sees the whole table), naming the ranks and the field.
  void Agree(uint64_t seq, uint64_t size, bool inplace) {
    const size_t es = DTypeSize(o_.type);
    const CollCounts counts = o_.spec->counts(size, es, args_);
    const uint64_t mine[kAgreed] = {seq,
                                    o_.sizes.size(),
                                    Fnv({o_.spec->name}),
                                    static_cast<uint64_t>(o_.type),
                                    static_cast<uint64_t>(o_.op),
                                    counts.Larger(),
                                    static_cast<uint64_t>(args_.root + 1),
                                    inplace ? 1u : 0u,
                                    setup_hash_,
                                    timing_hash_};
    std::vector<uint64_t> all(static_cast<size_t>(kAgreed) * comm_.Size());
    Arm("the agreement before", size, inplace);
    FaultPoint("control", comm_.Rank());
    comm_.HostAllGather(mine, all.data(), sizeof(mine));
    Disarm();
    static constexpr const char* kNames[kAgreed] = {"row number",
                                                    "number of sizes",
                                                    "collective",
                                                    "dtype",
                                                    "op",
                                                    "element count",
                                                    "root",
                                                    "in-place choice",
                                                    "backend setup (algorithm, codec, dtype, op)",
                                                    "timing options (iters, warmup, check, average, seed)"};
    for (int f = 0; f < kAgreed; ++f) {
      std::string differ;
      for (int r = 1; r < comm_.Size(); ++r) {
        if (all[static_cast<size_t>(r) * kAgreed + f] != all[f])
          differ += (differ.empty() ? "" : ", ") + std::to_string(r);
      }
      if (differ.empty()) continue;
      const bool shown = f == 1 || f == 5 || f == 6;  // plain numbers; the rest are codes or hashes
      const auto value = [&](int r) {
        const uint64_t v = all[static_cast<size_t>(r) * kAgreed + f];
        return f == 6 ? std::to_string(static_cast<int64_t>(v) - 1) : std::to_string(v);
      };
      throw UsageError(fmt::format(
          "the ranks disagree before row {}: rank(s) {} have another {}{} than rank 0{}; launch every rank with "
          "the same options",
          seq + 1, differ, kNames[f],
          shown ? fmt::format(" ({})", value(std::stoi(differ.substr(0, differ.find(','))))) : "",
          shown ? fmt::format(" ({})", value(0)) : ""));
    }
  }

  BenchRow Measure(uint64_t size, bool inplace) {
    trace::Span span("row", trace::Category::kPhase);
    span.With("size", static_cast<int64_t>(size)).With("inplace", inplace ? 1 : 0);
    BenchRow row;
    row.inplace = inplace;
    row.root = o_.spec->rooted ? o_.root : -1;
    const size_t es = DTypeSize(o_.type);
    const CollCounts counts = o_.spec->counts(size, es, args_);
    row.size_bytes = counts.Larger() * es;
    row.count = counts.Larger();
    if (counts.send == 0 || counts.recv == 0) {
      row.size_bytes = size;
      row.error = fmt::format("size below {} rank(s) x {} B", comm_.Size(), es);
      row.skipped = true;
      return row;
    }
    if (!comm_.Supports(o_.spec->kind, o_.type, o_.op, inplace)) {
      row.error = fmt::format("{} {} {} not supported by the {} backend", inplace ? "in-place" : "out-of-place",
                              o_.spec->name, DTypeName(o_.type), comm_.BackendName());
      row.skipped = true;
      return row;
    }
    // What a rank prepares alone (buffers, inputs) may fail on one rank: every rank says whether it
    // is ready before the row's first collective, so the row is skipped by all together. A failure
    // once the row's collectives began is not caught: the ranks are no longer in the same call (the
    // one that failed would meet its peers' collective with another one), so the run ends there
    // (exit 2; over the local backend the peers' calls fail naming the rank).
    Placement p;
    try {
      p = Prepare(counts, inplace);
    } catch (const Error& e) {
      if (e.code() == ExitCode::kUsage) throw;
      row.error = e.what();
    }
    Arm("the readiness exchange before", row.size_bytes, inplace);
    double unready = row.ok() ? 0 : 1;
    comm_.HostAllReduce(&unready, 1, ReduceOp::kMax);
    Disarm();
    if (unready > 0) {
      if (row.ok()) row.error = "failed on another rank";
      return row;
    }
    MeasureInto(row, p);
    // A row is good only if every rank says so.
    Arm("the verdict exchange after", row.size_bytes, inplace);
    double bad = row.ok() ? 0 : 1;
    comm_.HostAllReduce(&bad, 1, ReduceOp::kMax);
    Disarm();
    if (bad > 0 && row.ok()) row.error = "failed on another rank";
    return row;
  }

 private:
  void Arm(const char* phase, uint64_t size, bool inplace) {
    if (o_.watchdog) {
      o_.watchdog->Arm(fmt::format("{} {} {} ({}) on rank {}", phase, o_.spec->name, FormatSize(size),
                                   inplace ? "in-place" : "out-of-place", comm_.Rank()));
    }
  }
  void Disarm() {
    if (o_.watchdog) o_.watchdog->Disarm();
  }

  void Launch(const Placement& p, int slot) { o_.spec->launch(comm_, p.Send(slot), p.Recv(slot), p.counts, args_); }
  // One collective call as a trace span (the library's call is communication; the bundled runtime's
  // phases nest inside it).
  void TracedLaunch(const Placement& p, int slot) {
    trace::Span span(o_.spec->name, trace::Category::kComm);
    span.With("bytes", static_cast<int64_t>(p.counts.Larger() * p.elem)).With("inplace", p.inplace ? 1 : 0);
    Launch(p, slot);
  }
  void Barrier() {
    trace::Span span("barrier", trace::Category::kWait);
    comm_.Barrier();
  }

  // Every rank's per-iteration times, rank-major (every rank ran the same count).
  std::vector<std::vector<double>> GatherRankTimes(const std::vector<double>& mine) {
    std::vector<double> all(mine.size() * static_cast<size_t>(comm_.Size()));
    comm_.HostAllGather(mine.data(), all.data(), mine.size() * sizeof(double));
    std::vector<std::vector<double>> out;
    for (int r = 0; r < comm_.Size(); ++r)
      out.emplace_back(all.begin() + static_cast<ptrdiff_t>(r * mine.size()),
                       all.begin() + static_cast<ptrdiff_t>((r + 1) * mine.size()));
    return out;
  }

  // Fills every slot's send view with the pattern (through a host staging buffer on a device).
  void FillInputs(Placement& p, const InputPattern& pattern, int slots) {
    const MemoryKind kind = comm_.BufferKind();
    if (kind == MemoryKind::kHost) {
      FillPattern(pattern, comm_.Rank(), 0, const_cast<void*>(p.Send(0)), p.counts.send);
      for (int s = 1; s < slots; ++s) CopyBytes(const_cast<void*>(p.Send(s)), kind, p.Send(0), kind, p.SendBytes());
      return;
    }
    FillPattern(pattern, comm_.Rank(), 0, staging_.data(), p.counts.send);
    for (int s = 0; s < slots; ++s) {
      CopyBytes(const_cast<void*>(p.Send(s)), kind, staging_.data(), MemoryKind::kHost, p.SendBytes());
    }
  }

  // One timed op; each completed op counts as progress for the watchdog (its deadline is time
  // without progress, so a long healthy row never expires).
  double TimeOne(const Placement& p, int slot) {
    double us = 0;
    if (device_ && o_.timing != Timing::kEvents) {
      Barrier();
      const double t0 = NowSeconds();
      TracedLaunch(p, slot);
      {
        trace::Span span("synchronize", trace::Category::kWait);
        comm_.Synchronize();
      }
      us = (NowSeconds() - t0) * 1e6;
    } else if (device_) {
      Barrier();
      timer_->Start();
      TracedLaunch(p, slot);
      timer_->Stop();
      {
        trace::Span span("synchronize", trace::Category::kWait);
        comm_.Synchronize();
      }
      us = timer_->ElapsedUs();
    } else {
      FaultPoint("collective", comm_.Rank());
      Barrier();
      const double t0 = NowSeconds();
      TracedLaunch(p, slot);
      us = (NowSeconds() - t0) * 1e6;
    }
    if (o_.watchdog) o_.watchdog->Progress();
    return us;
  }

  // The row's buffers and inputs, on this rank alone (no communication).
  Placement Prepare(const CollCounts& counts, bool inplace) {
    const MemoryKind kind = comm_.BufferKind();
    Placement p;
    p.counts = counts;
    p.elem = DTypeSize(o_.type);
    p.inplace = inplace;
    p.slots = SlotsFor(inplace ? p.SlotBytes() : p.SendBytes() + p.RecvBytes());
    uint8_t* arena = arena_base_;
    if (inplace) {
      p.region = arena;
    } else {
      p.send_region = arena;
      p.recv_region = arena + p.slots * p.SendBytes();
    }
    if (device_ && !timer_) timer_ = std::make_unique<DeviceEventTimer>(comm_.Stream());

    const PatternKind pk = PatternFor(*o_.spec, o_.op);
    if (inplace && !DTypeIsFloat(o_.type)) {
      // In place each timed call reduces the last one's result, so integer sums and products would
      // grow past the type, and signed overflow is undefined in the libraries' reductions (gloo's
      // templates): integer rows time zeros, which every op keeps. Floats reach Inf at worst.
      SetBytes(p.region, kind, 0, p.slots * p.SlotBytes());
    } else {
      InputPattern timing_inputs(o_.seed ^ 0xA5A5, o_.type, pk, o_.op, comm_.Size());
      FillInputs(p, timing_inputs, p.slots);
      // Receive buffers are touched (resident, not zero) before timing.
      if (!inplace) SetBytes(p.recv_region, kind, 0xA5, p.slots * p.RecvBytes());
    }
    return p;
  }

  void MeasureInto(BenchRow& row, Placement& p) {
    const MemoryKind kind = comm_.BufferKind();
    const bool inplace = p.inplace;
    const PatternKind pk = PatternFor(*o_.spec, o_.op);

    // Warm-up. The first run sizes the warm-up; the warm-up's median (the first op pays for cold
    // caches and connection set-up) sizes the timed iterations. Every rank takes the same counts.
    Arm("warm-up", row.size_bytes, inplace);
    std::optional<trace::Span> phase(std::in_place, "warmup", trace::Category::kPhase);
    const AutoCounts auto_counts = AutoCountsFor(row.size_bytes);
    double first = TimeOne(p, 0);
    comm_.HostAllReduce(&first, 1, ReduceOp::kMax);
    const int warmup = o_.warmup >= 0 ? std::max(0, o_.warmup - 1)
                                      : std::clamp(static_cast<int>(o_.row_budget_s / 4 / std::max(first * 1e-6, 1e-7)),
                                                   0, auto_counts.max_warmup - 1);
    std::vector<double> warm(warmup);
    for (int i = 0; i < warmup; ++i) warm[i] = TimeOne(p, (i + 1) % p.slots);
    double per_op = warm.empty() ? first : Percentile(warm, 50);
    comm_.HostAllReduce(&per_op, 1, ReduceOp::kMax);
    const int iters = o_.iters > 0 ? o_.iters
                                   : std::clamp(static_cast<int>(o_.row_budget_s / std::max(per_op * 1e-6, 1e-7)),
                                                kMinAutoIters, auto_counts.max_iters);

    Arm("timed iterations of", row.size_bytes, inplace);
    phase.emplace("timed", trace::Category::kPhase);
    phase->With("iters", iters);
    std::vector<double> times(iters);
    if (o_.timing == Timing::kBatch) {
      Barrier();
      const double t0 = NowSeconds();
      for (int i = 0; i < iters; ++i) {
        if (!device_) FaultPoint("collective", comm_.Rank());
        TracedLaunch(p, i % p.slots);
      }
      {
        trace::Span span("synchronize", trace::Category::kWait);
        comm_.Synchronize();
      }
      std::fill(times.begin(), times.end(), (NowSeconds() - t0) * 1e6 / iters);
      if (o_.watchdog) o_.watchdog->Progress();
    } else {
      for (int i = 0; i < iters; ++i) times[i] = TimeOne(p, i % p.slots);
    }
    if (!device_) Barrier();
    phase.emplace("results", trace::Category::kPhase);
    // The control plane (results, verification, verdicts) stays under the deadline, outside the
    // timed window.
    Arm("the results exchange of", row.size_bytes, inplace);

    if (o_.per_iter) row.rank_iter_times_us = GatherRankTimes(times);
    // The row's time combines each rank's mean as --average says; its p50/p99 are over the
    // iterations' times combined across ranks the same way.
    double mean = std::accumulate(times.begin(), times.end(), 0.0) / iters;
    CombineRanks(comm_, o_.average, &mean, 1);
    CombineRanks(comm_, o_.average, times.data(), times.size());
    row.iters = iters;
    row.time_us = mean;
    row.time_p50_us = Percentile(times, 50);
    row.time_p99_us = Percentile(times, 99);
    const auto [lo, hi] = std::minmax_element(times.begin(), times.end());
    row.time_min_us = *lo;
    row.time_max_us = *hi;
    row.time_stddev_us = SampleStddev(times);
    // A row that moves no bytes (one rank, in place: the collective is a no-op) has no bandwidth.
    row.moves_bytes = !(inplace && comm_.Size() == 1);
    if (row.moves_bytes) {
      row.algbw_gbps = static_cast<double>(row.size_bytes) / (mean * 1e-6) / 1e9;
      row.busbw_gbps = row.algbw_gbps * o_.spec->busbw_factor(comm_.Size());
    }

    // Exact verification with fresh inputs each check iteration.
    phase.emplace("check", trace::Category::kPhase);
    phase->With("iters", o_.check);
    int64_t wrong = 0;
    void* host_out = readback_.data();
    for (int c = 0; c < o_.check; ++c) {
      InputPattern pattern(o_.seed + 7919ull * static_cast<uint64_t>(c + 1) + row.size_bytes, o_.type, pk, o_.op,
                           comm_.Size());
      FillInputs(p, pattern, 1);
      // Poison receive buffers so an element nobody wrote cannot pass.
      if (!inplace) SetBytes(p.Recv(0), kind, 0xA5, p.RecvBytes());
      Arm("verification of", row.size_bytes, inplace);
      Barrier();
      TracedLaunch(p, 0);
      comm_.Synchronize();
      Arm("the check exchange of", row.size_bytes, inplace);
      if (kind == MemoryKind::kHost) {
        host_out = p.Recv(0);
      } else {
        CopyBytes(host_out, MemoryKind::kHost, p.Recv(0), kind, p.RecvBytes());
      }
      if (comm_.Rank() == o_.corrupt_rank) Corrupt(host_out, p.counts.recv);
      ExpectContext ctx{&pattern, args_, p.counts};
      if (o_.lossy) {
        wrong += LossyCheck(row, host_out, p.counts.recv, ctx);
        continue;
      }
      uint64_t first = 0;
      const int64_t bad = CountWrong(o_.type, o_.op, host_out, p.counts.recv, o_.spec->expected, &ctx, &first);
      if (bad > 0) ReportFirstWrong(row, inplace, bad, first, host_out, ctx);
      wrong += bad;
    }
    double w = static_cast<double>(wrong);
    comm_.HostAllReduce(&w, 1, ReduceOp::kSum);
    row.wrong = static_cast<int64_t>(w);
    if (o_.watchdog) o_.watchdog->Progress();
  }

  // Lossy codecs: error against the exact result (fp32 data), max over ranks; returns on rank 0 the
  // number of ranks whose result bits differ from rank 0's (the runtime promises identical bits).
  int64_t LossyCheck(BenchRow& row, const void* host, size_t count, const ExpectContext& ctx) {
    const float* got = static_cast<const float*>(host);
    double num = 0, den = 0, max_abs = 0;
    uint64_t hash = 1469598103934665603ull;
    for (size_t i = 0; i < count; ++i) {
      double want = 0;
      o_.spec->expected(&ctx, i, &want);
      const double d = static_cast<double>(got[i]) - want;
      num += d * d;
      den += want * want;
      max_abs = std::max(max_abs, std::isnan(d) ? INFINITY : std::fabs(d));
      uint32_t bits;
      std::memcpy(&bits, got + i, 4);
      hash = (hash ^ bits) * 1099511628211ull;
    }
    double err[2] = {den > 0 ? std::sqrt(num / den) : std::sqrt(num), max_abs};
    comm_.HostAllReduce(err, 2, ReduceOp::kMax);
    row.rel_l2_error = std::max(row.rel_l2_error, err[0]);
    row.max_abs_error = std::max(row.max_abs_error, err[1]);
    std::vector<uint64_t> all(comm_.Size());
    comm_.HostAllGather(&hash, all.data(), sizeof(hash));
    int64_t differ = 0;
    for (uint64_t h : all) differ += h != all[0];
    if (differ && comm_.Rank() == 0)
      LogInfo("{} rank(s) ended with bits different from rank 0's ({} B)", differ, FormatSize(row.size_bytes));
    return comm_.Rank() == 0 ? differ : 0;
  }

  // One line per rank and row with wrong elements: where the first one is, what it holds and what
  // was expected, so a corrupted link or a bad GPU can be found without rerunning.
  void ReportFirstWrong(const BenchRow& row, bool inplace, int64_t bad, uint64_t index, const void* host,
                        const ExpectContext& ctx) {
    double want = 0;
    o_.spec->expected(&ctx, index, &want);
    const double got = VisitDType(o_.type, [&](auto tag) {
      using T = decltype(tag);
      return ElementToDouble(static_cast<const T*>(host)[index]);
    });
    LogInfo("rank {}: {} {} {} {}: {} wrong element(s), first at {}: got {} expected {}", comm_.Rank(), o_.spec->name,
            DTypeName(o_.type), FormatSize(row.size_bytes), inplace ? "in-place" : "out-of-place", bad, index, got,
            want);
  }

  // Flips the top exponent (or value) bit of one element: far outside any tolerance.
  void Corrupt(void* host, size_t count) {
    const size_t es = DTypeSize(o_.type);
    uint8_t* e = static_cast<uint8_t*>(host) + (o_.corrupt_index % count) * es;
    e[es - 1] ^= 0x40;
  }

  static constexpr int kAgreed = 10;
  static uint64_t Fnv(std::initializer_list<std::string> parts) {
    uint64_t h = 1469598103934665603ull;
    for (const auto& p : parts) {
      for (unsigned char c : p) h = (h ^ c) * 1099511628211ull;
      h = (h ^ 0xFF) * 1099511628211ull;  // a separator, so ("ab","c") differs from ("a","bc")
    }
    return h;
  }

  Communicator& comm_;
  const BenchOptions& o_;
  uint64_t setup_hash_ = 0, timing_hash_ = 0;
  CollArgs args_;
  bool device_ = false;
  std::unique_ptr<DeviceEventTimer> timer_;
  Buffer arena_;                          // send/receive buffers of every size (device memory on a device)
  std::shared_ptr<SharedWindow> window_;  // instead of arena_ with --register
  uint8_t* arena_base_ = nullptr;         // arena_'s or window_'s bytes
  Buffer staging_;                        // host staging of inputs for device buffers
  Buffer readback_;                       // host copy of device results for verification
};

std::string FormulaOf(const CollSpec& spec) {
  switch (spec.kind) {
    case Collective::kAllReduce:
      return "2(n-1)/n";
    case Collective::kAllGather:
    case Collective::kReduceScatter:
    case Collective::kAllToAll:
      return "(n-1)/n";
    default:
      return "1";
  }
}

void CheckSizesFitOne(const BenchOptions& o, int nranks, MemoryKind kind) {
  uint64_t worst = 0, worst_size = 0;
  for (uint64_t s : o.sizes) {
    const uint64_t need = ArenaBytes(*o.spec, s, o.type, nranks);
    if (need > worst) {
      worst = need;
      worst_size = s;
    }
  }
  const uint64_t host_avail = HostMemoryAvailable();
  // Per rank: the arena; on a device, the arena is device memory and the host holds staging and
  // read-back buffers.
  const uint64_t host_need =
      (kind == MemoryKind::kDevice ? 2 * LargestBufferBytes(o, nranks) : worst) * static_cast<uint64_t>(o.local_ranks);
  if (host_avail > 0 && static_cast<double>(host_need) > kMemoryHeadroom * static_cast<double>(host_avail)) {
    throw InputError(fmt::format(
        "size {} does not fit: {} {} needs about {:.1f} GiB of host memory for {} local rank(s), {:.1f} GiB available",
        FormatSize(worst_size), o.spec->name, DTypeName(o.type), host_need / 1073741824.0, o.local_ranks,
        host_avail / 1073741824.0));
  }
  if (kind == MemoryKind::kDevice) {
    const uint64_t dev_avail = DeviceMemoryAvailable();
    if (static_cast<double>(worst) > kMemoryHeadroom * static_cast<double>(dev_avail)) {
      throw InputError(fmt::format("size {} does not fit: {} needs about {:.1f} GiB of device memory, {:.1f} GiB free",
                                   FormatSize(worst_size), o.spec->name, worst / 1073741824.0,
                                   dev_avail / 1073741824.0));
    }
  }
}

}  // namespace

std::vector<std::pair<DType, ReduceOp>> SweepCombinations(const BenchOptions& o) {
  const std::vector<DType> types = o.types.empty() ? std::vector<DType>{o.type} : o.types;
  std::vector<ReduceOp> ops = o.ops.empty() ? std::vector<ReduceOp>{o.op} : o.ops;
  if (!o.spec->reduces) ops = {ops.front()};
  std::vector<std::pair<DType, ReduceOp>> out;
  for (DType t : types)
    for (ReduceOp op : ops) out.emplace_back(t, op);
  return out;
}

void CheckSizesFit(const BenchOptions& options, int nranks, MemoryKind kind) {
  // Each dtype of the sweep runs alone (its own buffers): each must fit.
  std::vector<DType> seen;
  for (const auto& [t, op] : SweepCombinations(options)) {
    if (std::find(seen.begin(), seen.end(), t) != seen.end()) continue;
    seen.push_back(t);
    BenchOptions o = options;
    o.type = t;
    CheckSizesFitOne(o, nranks, kind);
  }
}

namespace {

// A size that is not a whole number of elements (or, for the collectives that split a buffer, of
// elements per rank) runs as the bytes below it; the size column shows what ran, as nccl-tests does.
// One line says so, so no requested size changes unannounced.
void NoteRoundedSizes(const BenchOptions& o, int nranks) {
  std::vector<DType> seen;
  for (const auto& [t, op] : SweepCombinations(o))
    if (std::find(seen.begin(), seen.end(), t) == seen.end()) seen.push_back(t);
  std::string items;
  int n = 0;
  bool split = false;  // some size is whole elements but not a whole count per rank
  for (DType t : seen) {
    CollArgs a;
    a.nranks = nranks;
    a.type = t;
    const uint64_t es = DTypeSize(t);
    for (uint64_t size : o.sizes) {
      const CollCounts c = o.spec->counts(size, es, a);
      if (c.send == 0 || c.recv == 0 || c.Larger() * es == size) continue;
      split = split || size % es == 0;
      if (++n > 4) continue;
      items += fmt::format("{}{} B as {} B", items.empty() ? "" : ", ", size, c.Larger() * es);
      if (seen.size() > 1) items += fmt::format(" ({})", DTypeName(t));
    }
  }
  if (n == 0) return;
  LogInfo(
      "note: {} size(s) are not a whole number of {} elements{} and run as fewer bytes (the size column shows "
      "what ran): {}{}",
      n, seen.size() == 1 ? DTypeName(seen.front()) : "their", split ? fmt::format(" per rank of {}", nranks) : "",
      items, n > 4 ? fmt::format(" and {} more", n - 4) : "");
}

}  // namespace

void AgreeOnRegister(Communicator& comm, bool shared) {
  const uint64_t mine = shared ? 1 : 0;
  std::vector<uint64_t> all(comm.Size());
  comm.HostAllGather(&mine, all.data(), sizeof mine);
  for (int r = 0; r < comm.Size(); ++r)
    if (all[r] != mine)
      throw UsageError(fmt::format(
          "the ranks disagree on --register: rank {} has {}, rank {} has {}; launch every rank with the same options",
          comm.Rank(), shared ? "yes" : "no", r, all[r] ? "yes" : "no"));
}

BenchContext MakeContext(Communicator& comm, const BenchOptions& o) {
  BenchContext c;
  c.tool_version = CIUIC_VERSION;
  c.git_commit = CIUIC_GIT_COMMIT;
  c.collective = o.spec->name;
  c.backend = comm.BackendName();
  c.device = DeviceKindName(comm.Device());
  if (comm.Device() == DeviceKind::kCuda) c.device_name = CudaDeviceName();
  c.world_size = comm.Size();
  // A sweep over several dtypes or ops names each once, in sweep order.
  const auto add = [](std::string& list, const std::string& name) {
    if (("," + list + ",").find("," + name + ",") == std::string::npos) list += (list.empty() ? "" : ",") + name;
  };
  for (const auto& [t, op] : SweepCombinations(o)) {
    add(c.dtype, DTypeName(t));
    add(c.dtype_table, DTypeTableName(t));
    add(c.redop, o.spec->reduces ? ReduceOpName(op) : "-");
  }
  c.root = o.spec->rooted ? o.root : -1;
  c.busbw_factor = o.spec->busbw_factor(comm.Size());
  c.busbw_formula = FormulaOf(*o.spec);
  c.hostnames = GatherHostnames(comm);
  {
    const int mine = static_cast<int>(getpid());
    c.pids.resize(static_cast<size_t>(comm.Size()));
    comm.HostAllGather(&mine, c.pids.data(), sizeof mine);
  }
  const std::string lib = comm.LibraryVersion();
  if (!lib.empty()) c.library_versions[comm.BackendName()] = lib;
  if (comm.Device() == DeviceKind::kCuda) c.library_versions["cuda"] = CudaVersionString();
  c.start_time = IsoNow();
  c.warmup = o.warmup;
  c.iters = o.iters;
  c.check = o.check;
  c.average = AverageName(o.average);
  c.average_description = AverageDescription(o.average);
  c.timing = TimingName(o.timing, comm.Device() == DeviceKind::kCuda);
  return c;
}

const char* TimingName(Timing t, bool device) {
  switch (t) {
    case Timing::kBatch:
      return "batch";
    case Timing::kHost:
      return "host";
    default:
      return device ? "cuda-events" : "host";
  }
}

BenchSummary RunBench(Communicator& comm, const BenchOptions& o, Reporter* reporter, const BenchContext& context) {
  if (o.spec->rooted && (o.root < 0 || o.root >= comm.Size())) {
    throw UsageError(fmt::format("--root {} is out of range for {} ranks", o.root, comm.Size()));
  }
  CheckSizesFit(o, comm.Size(), comm.BufferKind());
  const auto combos = SweepCombinations(o);
  if (reporter) reporter->Begin(context);
  if (reporter) NoteRoundedSizes(o, comm.Size());
  if (reporter && o.shared)
    if (const std::string note = SharedWindow::HugePageNote(); !note.empty()) LogInfo("note: --register: {}", note);
  BenchSummary summary;
  uint64_t seq = 0;
  double busbw_sum = 0;
  int busbw_rows = 0;
  // The live line (drawn only where the tool enabled it: rank 0 on a terminal). A row's time grows
  // with its bytes above a latency floor, so the ETA weighs sizes by that.
  const auto weight = [](uint64_t size) { return static_cast<double>(size) + (1 << 20); };
  double total = 0;
  for (uint64_t size : o.sizes) total += weight(size);
  Progress progress("sweep", total * static_cast<double>(combos.size()),
                    static_cast<int>(o.sizes.size() * combos.size()));
  for (const auto& [type, op] : combos) {
    // Each (dtype, op) is its own pass with its own buffers, as nccl-tests runs -d all -o all.
    BenchOptions oc = o;
    oc.type = type;
    oc.op = op;
    BenchContext cc = context;
    cc.dtype = DTypeName(type);
    cc.dtype_table = DTypeTableName(type);
    cc.redop = o.spec->reduces ? ReduceOpName(op) : "-";
    Runner runner(comm, oc, cc);
    const std::string label =
        combos.size() > 1 ? fmt::format("{} {} {}", context.collective, cc.dtype, cc.redop) : context.collective;
    for (uint64_t size : o.sizes) {
      progress.Begin(fmt::format("{} {}", label, FormatSize(size)), weight(size));
      std::vector<BenchRow> rows;
      for (const bool inplace : {false, true}) {
        if (!(inplace ? o.in_place : o.out_of_place)) continue;
        runner.Agree(seq++, size, inplace);
        rows.push_back(runner.Measure(size, inplace));
        BenchRow& r = rows.back();
        r.dtype = cc.dtype;
        r.dtype_table = cc.dtype_table;
        r.redop = cc.redop;
        if (o.baseline) r.baseline_busbw_gbps = o.baseline->BusbwAt(size);
      }
      for (const auto& r : rows) {
        ++summary.rows;
        summary.all_rows.push_back(r);
        if (!r.ok()) {
          ++(r.skipped ? summary.skipped_rows : summary.failed_rows);
          continue;
        }
        summary.total_wrong += r.wrong;
        if (!r.moves_bytes) continue;  // a no-op has no bandwidth to count for the peaks
        busbw_sum += r.busbw_gbps;
        ++busbw_rows;
        if (r.algbw_gbps > summary.peak_algbw_gbps) {
          summary.peak_algbw_gbps = r.algbw_gbps;
          summary.peak_algbw_size_bytes = r.size_bytes;
        }
        if (r.busbw_gbps > summary.peak_busbw_gbps) {
          summary.peak_busbw_gbps = r.busbw_gbps;
          summary.peak_size_bytes = r.size_bytes;
          summary.peak_inplace = r.inplace;
        }
      }
      if (reporter) reporter->Size(rows);
      progress.Done();
    }
  }
  summary.avg_busbw_gbps = busbw_rows > 0 ? busbw_sum / busbw_rows : 0;
  if (o.baseline) {
    for (const auto& p : o.baseline->points) {
      if (p.busbw_gbps <= summary.baseline_best_gbps) continue;
      summary.baseline_best_gbps = p.busbw_gbps;
      summary.baseline_best_size_bytes = p.bytes;
      summary.baseline_best_source = p.source;
    }
  }
  summary.end_time = IsoNow();
  if (reporter) reporter->End(summary);
  return summary;
}

}  // namespace ciuic
