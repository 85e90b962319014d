#include "bench/crossover_table.h"

#include <algorithm>
#include <filesystem>

#include <fmt/format.h>

#include "core/error.h"
#include "core/files.h"
#include "core/log.h"
#include "core/timer.h"

namespace ciuic {

namespace {

// The database --crossover db reads: --db, else the data folder's (empty when there is no data folder).
std::string CrossoverDatabase(const CrossoverCli& c) {
  if (!c.db_path.empty()) return c.db_path;
  try {
    return (std::filesystem::path(DataHome(false)) / "ciuic.db").string();
  } catch (const InputError&) {
    if (c.source_given) throw;
    return "";
  }
}

// The calibrated table for this world, or the built-in one when db is the default and nothing is
// stored (collective: CalibratedCrossover agrees on what the ranks read). A failure is one line from
// rank 0, and then all ranks end together (a rank ending first would have the launcher stop the one
// that reports).
std::shared_ptr<Crossover> FromDatabase(Communicator& transport, const CrossoverCli& c) {
  std::string why;
  try {
    return CalibratedCrossover(transport, c.db_path, c.source_given);
  } catch (const InputError& e) {
    why = e.what();
  }
  if (transport.Rank() == 0) LogInfo("--crossover db: {}", PrintableLine(why, 2000));
  double done = 0;
  transport.HostAllReduce(&done, 1, ReduceOp::kMax);
  throw ReportedByLead(ExitCode::kUsage);
}

}  // namespace

void CheckCrossoverOptions(const CrossoverCli& c) {
  if (!c.out_path.empty() && c.source != "measure")
    throw UsageError("--crossover-out: writes a measured table (give --crossover measure)");
  if (c.rounds < 1 || c.rounds > 100)
    throw UsageError(fmt::format("--crossover-rounds {}: expected 1 to 100", c.rounds));
  if (!(c.slot_s >= 0.0005 && c.slot_s <= 10))
    throw UsageError(fmt::format("--crossover-slot-ms {}: expected 0.5 to 10000", c.slot_s * 1e3));
  if (c.source == "db") {
    // An asked-for database is opened once here: a file that is not one is refused before ranks start.
    if (c.source_given) {
      const std::string path = CrossoverDatabase(c);
      if (!std::filesystem::exists(path))
        throw InputError(
            fmt::format("--crossover db: no calibration database at '{}' (`ciuic-tune calibrate --ranks N "
                        "--db {}` writes one)",
                        PrintableLine(path, 4096), PrintableLine(path, 4096)));
      LoadCrossoverPoints(path, "", "", 0);
    }
  } else if (c.source != "builtin" && c.source != "measure") {
    ReadCrossoverFile(c.source);
  }
  if (!c.out_path.empty()) CheckWritableOutput(c.out_path, "crossover file");
}

std::shared_ptr<const Crossover> ResolveCrossover(Communicator& transport, const CrossoverCli& c) {
  std::shared_ptr<Crossover> table;
  if (c.source == "builtin") {
    const int hosts = CrossoverHosts(transport);
    table = std::make_shared<Crossover>(
        BuiltinCrossover(transport.BackendName(), transport.Device() == DeviceKind::kCpu ? hosts : 0));
  } else if (c.source == "db") {
    table = FromDatabase(transport, c);
  } else if (c.source == "measure") {
    int hosts = 0;
    const auto candidates = CrossoverCandidates(transport, &hosts);
    const double t0 = NowSeconds();
    CrossoverOptions o;
    o.rounds = c.rounds;
    o.target_s = c.slot_s;
    o.registered = c.registered;
    const auto points = MeasureCrossover(transport, candidates, o);
    // Out of place too: there the library and the ring pay differently (Crossover::out_of_place).
    o.out_of_place = true;
    const auto points_out_of_place = MeasureCrossover(transport, candidates, o);
    table = std::make_shared<Crossover>(CrossoverFromPoints(points));
    table->out_of_place = OutOfPlaceBands(*table, CrossoverFromPoints(points_out_of_place));
    MarkStagedRing(*table, hosts, c.registered, transport.Device());
    table->source = fmt::format("measured on {} ranks over {}{} in {:.1f} s", transport.Size(), transport.BackendName(),
                                c.registered ? " on registered buffers" : "", NowSeconds() - t0);
    if (transport.Rank() == 0 && !c.out_path.empty()) {
      WriteFileAtomically(c.out_path, CrossoverJson(*table, points, transport.Size(), transport.BackendName(),
                                                    c.registered, hosts, points_out_of_place));
      LogInfo("wrote the crossover to {}", PrintableLine(c.out_path, 4096));
    }
  } else {
    int ranks = 0;
    std::string over;
    bool registered = false;
    int hosts = 0;
    table = std::make_shared<Crossover>(ReadCrossoverFile(c.source, &ranks, &over, nullptr, &registered, &hosts));
    MarkStagedRing(*table, hosts, registered, transport.Device());
    // Collective like the other sources (every rank reads the same file).
    const int here = CrossoverHosts(transport);
    if (hosts > 0 && hosts != here && transport.Rank() == 0)
      LogInfo(
          "note: crossover {} was measured on {} host{}; this run's ranks are on {} (on one host the ring "
          "stages small calls through a shared window, across hosts it cannot)",
          PrintableLine(c.source, 4096), hosts, hosts == 1 ? "" : "s", here);
    if (ranks != transport.Size() || over != transport.BackendName()) {
      if (transport.Rank() == 0)
        LogInfo("note: crossover {} was measured on {} ranks over {}; this run has {} over {}",
                PrintableLine(c.source, 4096), ranks, PrintableLine(over), transport.Size(), transport.BackendName());
    }
    if (registered != c.registered && transport.Rank() == 0)
      LogInfo("note: crossover {} was measured on {}registered buffers; this run's are {}registered",
              PrintableLine(c.source, 4096), registered ? "" : "un", c.registered ? "" : "un");
  }
  // The built-in and calibrated tables were measured on unregistered buffers: with --register auto
  // runs the ring over the windows where such a table names the ring, and may name it too late.
  if (c.registered && (c.source == "builtin" || c.source == "db") && transport.Rank() == 0)
    LogInfo(
        "note: --register: auto's table was measured on unregistered buffers; --crossover measure "
        "measures it on this run's registered ones");
  if (transport.Rank() == 0) LogInfo("auto: {} ({})", table->Describe(), table->source);
  return table;
}

std::vector<CrossoverPoint> RunCrossoverTable(Communicator& transport, std::shared_ptr<const Crossover> table,
                                              const std::vector<uint64_t>& sizes, const CrossoverCli& c,
                                              std::ostream& out, Communicator* runtime) {
  const auto candidates = CrossoverCandidates(transport);
  std::vector<CrossoverPoint> first;
  for (const bool out_of_place : {false, true}) {
    if (out_of_place ? !c.out_of_place : !c.in_place) continue;
    CrossoverOptions o;
    o.sizes = sizes;
    o.rounds = c.rounds;
    o.target_s = c.slot_s;
    o.with_auto = table;
    o.registered = c.registered;
    o.out_of_place = out_of_place;
    if (!c.registered) o.with_runtime = runtime;
    auto points = MeasureCrossover(transport, candidates, o);
    if (transport.Rank() == 0) {
      out << fmt::format(
          "# crossover table: {} ranks over {}; median of {} alternating rounds of the slowest rank's time "
          "per call (us), {}{}\n",
          transport.Size(), transport.BackendName(), o.rounds, out_of_place ? "out of place" : "in place",
          c.registered ? "; buffers registered (the ring over shared windows)" : "");
      out << fmt::format("# auto: {} ({})\n", table->Describe(), table->source);
      out << "# library: the transport's own allreduce called directly; native: the same through the runtime's "
             "engine\n";
      out << "# auto/best = best time / auto's time; auto/lib = library time / auto's time (1 = as fast); chose: "
             "the algorithm that ran (native*: the table's ring, which this run cannot stage, ran native)\n";
      if (o.with_runtime)
        out << "# runtime: the allreduce --backend ciuic calls with this command's options (auto in the runtime, "
               "its fixed costs included); rt/lib = library time / its time\n";
      std::string head = fmt::format("# {:>10} {:>10}", "size", "library");
      for (AllReduceAlgo a : candidates) head += fmt::format(" {:>10}", AlgoName(a));
      head += fmt::format(" {:>10} {:<7} {:>9} {:>9}", "auto", "chose", "auto/best", "auto/lib");
      if (o.with_runtime) head += fmt::format(" {:>10} {:>7}", "runtime", "rt/lib");
      out << head << "\n";
      for (const auto& p : points) {
        std::string line = fmt::format("  {:>10} {:>10.2f}", p.bytes, p.library_us);
        double best = p.library_us;
        for (AllReduceAlgo a : candidates) {
          line += fmt::format(" {:>10.2f}", p.us.at(a));
          best = std::min(best, p.us.at(a));
        }
        // A band the table names another algorithm for that ran native here (a ring band this run cannot
        // stage): what ran, marked.
        const bool fell_back = p.auto_ran_native && p.auto_algo != AllReduceAlgo::kNative;
        const std::string chose = fell_back ? "native*" : AlgoName(p.auto_algo);
        line += fmt::format(" {:>10.2f} {:<7} {:>9.2f} {:>9.2f}", p.auto_us, chose, best / p.auto_us,
                            p.library_us / p.auto_us);
        if (o.with_runtime) line += fmt::format(" {:>10.2f} {:>7.2f}", p.runtime_us, p.library_us / p.runtime_us);
        out << line << "\n";
      }
      out.flush();
    }
    if (first.empty()) first = std::move(points);
  }
  return first;
}

}  // namespace ciuic
