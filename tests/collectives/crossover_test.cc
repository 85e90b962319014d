// auto's crossover: the table follows planted measurements (each algorithm best in turn), the engine
// runs what the table names at each size (seen in its trace) and stays exact, ranks with different
// tables fail together, the file format is strict, a real measurement agrees on every rank, and
// out-of-place runs give the in-place bits with the source untouched.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <unistd.h>

#include "collectives/backends/local/communicator.h"
#include "collectives/crossover.h"
#include "collectives/runtime.h"
#include "core/error.h"
#include "core/files.h"
#include "core/trace.h"
#include "tests/traced_ranks.h"

namespace ciuic {
namespace {

constexpr uint64_t kLast = std::numeric_limits<uint64_t>::max();
using A = AllReduceAlgo;

CrossoverPoint Point(uint64_t bytes, double native, double rd, double ring, double hier = -1) {
  CrossoverPoint p;
  p.bytes = bytes;
  p.library_us = native;
  p.us[A::kNative] = native;
  p.us[A::kRecursiveDoubling] = rd;
  p.us[A::kRing] = ring;
  if (hier >= 0) p.us[A::kHierarchical] = hier;
  return p;
}

// A planted calibration that makes each algorithm best in turn: native at 1-4 KiB, rd at 16 KiB, ring
// at 64 KiB-1 MiB, hier from 4 MiB.
std::vector<CrossoverPoint> Planted() {
  return {Point(1024, 1, 2, 3, 4),
          Point(4096, 2, 3, 4, 5),
          Point(16384, 10, 5, 8, 9),
          Point(65536, 40, 30, 20, 25),
          Point(262144, 100, 90, 60, 70),
          Point(1048576, 400, 380, 200, 260),
          Point(4194304, 1600, 1500, 900, 500),
          Point(16777216, 6000, 6000, 3500, 2000)};
}

TEST(Crossover, TableFollowsAPlantedCalibrationEachAlgorithmBestInTurn) {
  const Crossover c = CrossoverFromPoints(Planted());
  ASSERT_EQ(c.bands.size(), 4u) << c.Describe();
  // Boundaries at the geometric mean of the two sizes around each change.
  EXPECT_EQ(c.bands[0].algo, A::kNative);
  EXPECT_EQ(c.bands[0].below_bytes, 8192u);  // sqrt(4 KiB x 16 KiB)
  EXPECT_EQ(c.bands[1].algo, A::kRecursiveDoubling);
  EXPECT_EQ(c.bands[1].below_bytes, 32768u);
  EXPECT_EQ(c.bands[2].algo, A::kRing);
  EXPECT_EQ(c.bands[2].below_bytes, 2097152u);
  EXPECT_EQ(c.bands[3].algo, A::kHierarchical);
  EXPECT_EQ(c.bands[3].below_bytes, kLast);
  for (const auto& p : Planted()) {
    A best = A::kNative;
    for (const auto& [a, us] : p.us)
      if (us < p.us.at(best)) best = a;
    EXPECT_EQ(c.Choose(p.bytes), best) << p.bytes;
  }
  EXPECT_EQ(c.Choose(4), A::kNative);                 // below the first point: its choice
  EXPECT_EQ(c.Choose(1ull << 30), A::kHierarchical);  // above the last: the last's
  EXPECT_EQ(c.Choose(8191), A::kNative);
  EXPECT_EQ(c.Choose(8192), A::kRecursiveDoubling);
}

TEST(Crossover, NativeKeepsATieWithinTheMargin) {
  // ring 2% faster than native: within the 3% margin, the library stays; 10% faster: ring.
  const Crossover tie = CrossoverFromPoints({Point(1 << 20, 100, 150, 98)});
  EXPECT_EQ(tie.Choose(1 << 20), A::kNative);
  const Crossover win = CrossoverFromPoints({Point(1 << 20, 100, 150, 90)});
  EXPECT_EQ(win.Choose(1 << 20), A::kRing);
  EXPECT_EQ(CrossoverFromPoints({Point(1 << 20, 100, 150, 98)}, 0.0).Choose(1 << 20), A::kRing);
}

TEST(Crossover, BuiltinTablePerTransport) {
  EXPECT_EQ(BuiltinCrossover("nccl").Choose(1ull << 30), A::kNative);
  const Crossover mpi = BuiltinCrossover("mpi");
  EXPECT_EQ(mpi.Choose(8), A::kNative);
  EXPECT_EQ(mpi.Choose((8u << 20) - 4), A::kNative);
  EXPECT_EQ(mpi.Choose(8u << 20), A::kRing);
  EXPECT_EQ(mpi.staged_below, 0u);
  // Known to run on one host: the ring (staged) from 2 to 512 KiB; across hosts as without a count.
  const Crossover one = BuiltinCrossover("mpi", 1);
  EXPECT_EQ(one.Choose(1024), A::kNative);
  EXPECT_EQ(one.Choose(2048), A::kRing);
  EXPECT_EQ(one.Choose((512u << 10) - 4), A::kRing);
  EXPECT_EQ(one.Choose(512u << 10), A::kNative);
  EXPECT_EQ(one.Choose(8u << 20), A::kRing);
  EXPECT_EQ(one.staged_below, 512u << 10);
  EXPECT_NE(one.Digest(), mpi.Digest());
  EXPECT_EQ(one.Describe(), "native <2K, ring <512K, native <8M, ring; out of place: native <2K, ring");
  EXPECT_EQ(BuiltinCrossover("mpi", 2).Digest(), mpi.Digest());
  EXPECT_EQ(BuiltinCrossover("nccl", 1).Choose(4096), A::kNative);
}

// Rank r's planted value at element i (small integers: every summation order gives the same bits),
// and how many elements of a result differ from the sum of `ranks` ranks' values.
float RankValue(size_t i, int r) { return static_cast<float>((i * 7 + static_cast<size_t>(r) * 13) % 101); }
int WrongSums(const std::vector<float>& data, int ranks) {
  int bad = 0;
  for (size_t i = 0; i < data.size(); ++i) {
    float want = 0;
    for (int r = 0; r < ranks; ++r) want += RankValue(i, r);
    bad += data[i] != want;
  }
  return bad;
}

// One call of n floats on `ranks` local ranks, each engine with `table` and `staged_bytes`, whose
// table names the ring for n: each rank's trace, how many of its sums are wrong, its staged calls.
struct RingBandCall {
  std::vector<std::string> events;
  std::vector<int> wrong;
  std::vector<uint64_t> staged;
};
RingBandCall RunRingBandCall(int ranks, const std::shared_ptr<Crossover>& table, size_t staged_bytes, size_t n) {
  RingBandCall out{
      {}, std::vector<int>(static_cast<size_t>(ranks), -1), std::vector<uint64_t>(static_cast<size_t>(ranks))};
  out.events = testing_trace::TracedRanks(ranks, [&](Communicator& comm) {
    AlgoConfig cfg;
    cfg.crossover = table;
    cfg.staged_bytes = staged_bytes;
    AllReduceEngine engine(comm, cfg);
    EXPECT_EQ(engine.AlgoFor(n), A::kRing);
    std::vector<float> data(n);
    for (size_t i = 0; i < n; ++i) data[i] = RankValue(i, comm.Rank());
    engine.Run(data.data(), n, nullptr, false);
    out.wrong[static_cast<size_t>(comm.Rank())] = WrongSums(data, ranks);
    out.staged[static_cast<size_t>(comm.Rank())] = engine.counters().staged_calls;
  });
  return out;
}

// The one-host built-in table's ring is the staged ring: where the engine stages a call it runs
// it (exact, staged_calls); where it cannot (staged_bytes 0, or above staged_bytes but below the
// table's staged_below) every rank runs native instead of the ring over the transport, exactly.
TEST(Crossover, TheOneHostBuiltinRingIsStagedOrNative) {
  auto table = std::make_shared<Crossover>(BuiltinCrossover("local", 1));
  for (size_t staged_bytes : {size_t{1} << 20, size_t{64} << 10, size_t{0}}) {
    for (size_t n : {size_t{4096}, size_t{32768}}) {  // 16 KiB; 128 KiB (above a 64 KiB staged_bytes)
      const bool stages = staged_bytes > 0 && n * 4 <= staged_bytes;
      const RingBandCall call = RunRingBandCall(3, table, staged_bytes, n);
      for (int r = 0; r < 3; ++r) {
        const std::string what = fmt::format("staged_bytes {} n {} rank {}", staged_bytes, n, r);
        const auto rr = static_cast<size_t>(r);
        EXPECT_EQ(call.wrong[rr], 0) << what;
        EXPECT_EQ(call.staged[rr], stages ? 1u : 0u) << what;
        EXPECT_EQ(testing_trace::HasSpan(call.events[rr], "staged ring"), stages) << what;
        EXPECT_EQ(testing_trace::HasSpan(call.events[rr], "native"), !stages) << what;
        EXPECT_FALSE(testing_trace::HasSpan(call.events[rr], "recv")) << what;  // no ring hop
      }
    }
  }
}

// A measured table is marked staged only where its ring column timed the staged ring: one host,
// unregistered host buffers. Marked, a ring band below the measuring engine's staged_bytes that a run
// cannot stage runs native; unmarked it runs the ring over the transport; either way exact.
TEST(Crossover, AMeasuredOneHostTablesRingIsStagedOrNative) {
  const Crossover measured = CrossoverFromPoints(Planted());  // the ring from 64 KiB to 1 MiB, hier above
  const size_t staged_default = AlgoConfig{}.staged_bytes;
  for (const auto& [hosts, registered, device, marks] :
       std::vector<std::tuple<int, bool, DeviceKind, bool>>{{1, false, DeviceKind::kCpu, true},
                                                            {0, false, DeviceKind::kCpu, false},
                                                            {2, false, DeviceKind::kCpu, false},
                                                            {1, true, DeviceKind::kCpu, false},
                                                            {1, false, DeviceKind::kCuda, false}}) {
    Crossover t = measured;
    MarkStagedRing(t, hosts, registered, device);
    EXPECT_EQ(t.staged_below, marks ? staged_default + 1 : 0u) << hosts << " " << registered;
    EXPECT_EQ(t.Digest() != measured.Digest(), marks) << hosts << " " << registered;
  }
  for (const bool marked : {true, false}) {
    auto table = std::make_shared<Crossover>(measured);
    if (marked) MarkStagedRing(*table, 1, false, DeviceKind::kCpu);
    for (size_t staged_bytes : {staged_default, size_t{0}}) {
      // 64 KiB, and 1 MiB: the largest call the measuring engine staged.
      for (size_t n : {size_t{16384}, staged_default / 4}) {
        const bool stages = staged_bytes > 0;
        const bool native = !stages && marked;
        const RingBandCall call = RunRingBandCall(2, table, staged_bytes, n);
        for (size_t r = 0; r < 2; ++r) {
          const std::string what = fmt::format("marked {} staged_bytes {} n {} rank {}", marked, staged_bytes, n, r);
          EXPECT_EQ(call.wrong[r], 0) << what;
          EXPECT_EQ(call.staged[r], stages ? 1u : 0u) << what;
          EXPECT_EQ(testing_trace::HasSpan(call.events[r], "staged ring"), stages) << what;
          EXPECT_EQ(testing_trace::HasSpan(call.events[r], "native"), native) << what;
          EXPECT_EQ(testing_trace::HasSpan(call.events[r], "recv"), !stages && !native) << what;  // the ring's hops
        }
      }
    }
  }
}

// Which algorithm spans the engine recorded under one call.
std::string AlgoSpans(const trace::Recorder& r) {
  const std::string ev = r.RenderEvents(0);
  std::string seen;
  for (const char* name : {"native", "rd", "ring", "hier"})
    if (ev.find(std::string("\"name\":\"") + name + "\"") != std::string::npos)
      seen += std::string(seen.empty() ? "" : ",") + name;
  return seen;
}

TEST(Crossover, EngineRunsWhatThePlantedTableNamesAndStaysExact) {
  auto table = std::make_shared<Crossover>(CrossoverFromPoints(Planted()));
  AlgoConfig cfg;
  cfg.crossover = table;
  cfg.ranks_per_node = 2;  // hier: 2 "nodes" of 2 ranks in one process
  for (uint64_t bytes : {1024ull, 16384ull, 262144ull, 4194304ull}) {
    const size_t n = bytes / 4;
    std::vector<std::string> seen(4);
    std::vector<int> wrong(4, -1);
    RunLocalRanks(4, [&](Communicator& comm) {
      AllReduceEngine engine(comm, cfg);
      EXPECT_EQ(engine.algo(), A::kAuto);
      EXPECT_EQ(engine.AlgoFor(n), table->Choose(bytes));
      std::vector<float> data(n);
      for (size_t i = 0; i < n; ++i) data[i] = RankValue(i, comm.Rank());
      trace::Recorder rec(comm.Rank(), "test");
      {
        const trace::Bind bind(&rec);
        engine.Run(data.data(), n, nullptr, false);
      }
      seen[comm.Rank()] = AlgoSpans(rec);
      wrong[comm.Rank()] = WrongSums(data, 4);
    });
    for (int r = 0; r < 4; ++r) {
      EXPECT_EQ(seen[r], AlgoName(table->Choose(bytes))) << bytes << " B, rank " << r;
      EXPECT_EQ(wrong[r], 0) << bytes << " B, rank " << r;
    }
  }
}

TEST(Crossover, AutoWithoutATableUsesTheTransportsBuiltinOne) {
  RunLocalRanks(2, [&](Communicator& comm) {
    AllReduceEngine engine(comm, AlgoConfig{});
    ASSERT_NE(engine.crossover(), nullptr);
    EXPECT_EQ(engine.crossover()->Digest(), BuiltinCrossover("local").Digest());
    EXPECT_EQ(engine.AlgoFor(16), A::kNative);
    EXPECT_EQ(engine.AlgoFor(4u << 20), A::kRing);
    AlgoConfig lossy;
    lossy.codec = ParseCodec("int8");
    AllReduceEngine q(comm, lossy);
    EXPECT_EQ(q.crossover(), nullptr);
    EXPECT_EQ(q.AlgoFor(16), A::kRing);
    AlgoConfig half;
    half.precision = DType::kBFloat16;
    AllReduceEngine h(comm, half);
    EXPECT_EQ(h.AlgoFor(1u << 30), A::kNative);
  });
}

TEST(Crossover, RanksRunningDifferentTablesFailTogether) {
  std::vector<std::string> errors(2);
  RunLocalRanks(2, [&](Communicator& comm) {
    RuntimeConfig rc;
    rc.timeout_s = 0;
    auto t = std::make_shared<Crossover>(BuiltinCrossover("mpi"));
    if (comm.Rank() == 1) t->bands[0].below_bytes = 4096;  // rank 1 read another table
    rc.algo.crossover = t;
    Runtime rt(comm, rc);
    std::vector<float> data(256, 1.0f);
    try {
      rt.AllReduce(data.data(), data.size(), 0);
    } catch (const UsageError& e) {
      errors[comm.Rank()] = e.what();
    }
  });
  for (const auto& e : errors)
    EXPECT_NE(e.find("rank 1 run another codec, algorithm, precision or bucket size"), std::string::npos) << e;
}

TEST(Crossover, FileRoundTripAndRefusals) {
  const Crossover c = CrossoverFromPoints(Planted());
  int ranks = 0;
  std::string over;
  const Crossover back = ParseCrossover(CrossoverJson(c, Planted(), 4, "mpi"), "t", &ranks, &over);
  EXPECT_EQ(back.Digest(), c.Digest());
  EXPECT_EQ(ranks, 4);
  EXPECT_EQ(over, "mpi");
  const std::string head = R"({"format":"ciuic-crossover","version":1,"ranks":2,"transport":"mpi",)";
  const std::pair<std::string, std::string> bad[] = {
      {"{", "not JSON"},
      {head + R"("bands":[{"below_bytes":null,"algo":"ring"}],"ranks":7})", "crossover.ranks: given twice"},
      {R"({"format":"other"})", "not a ciuic crossover"},
      {R"({"format":"ciuic-crossover","version":2})", "version"},
      {head + R"("bands":[]})", "bands: expected a list"},
      {head + R"("bands":[{"below_bytes":null,"algo":"sparse"}]})", "bands[0].algo"},
      {head + R"("bands":[{"below_bytes":null,"algo":"ringg"}]})", "unknown algorithm"},
      {head + R"("bands":[{"below_bytes":100,"algo":"ring"}]})", "the last band is null"},
      {head +
           R"("bands":[{"below_bytes":100,"algo":"ring"},{"below_bytes":50,"algo":"rd"},{"below_bytes":null,"algo":"native"}]})",
       "bands[1].below_bytes"},
      {head + R"("bands":[{"below_bytes":-1,"algo":"ring"},{"below_bytes":null,"algo":"native"}]})",
       "bands[0].below_bytes"},
      {head + R"("bands":[{"algo":"ring"}]})", "bands[0]"},
  };
  for (const auto& [text, want] : bad) {
    try {
      ParseCrossover(text, "t");
      ADD_FAILURE() << "accepted: " << text;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos);
    }
  }
  EXPECT_THROW(ReadCrossoverFile("/nonexistent/crossover.json"), InputError);
}

// A table measured on registered buffers says so ("buffers": "registered"), and only that value is read.
TEST(Crossover, AFileSaysWhetherItWasMeasuredOnRegisteredBuffers) {
  const Crossover c = CrossoverFromPoints(Planted());
  for (bool registered : {false, true}) {
    const std::string text = CrossoverJson(c, Planted(), 2, "local", registered);
    EXPECT_EQ(text.find("\"buffers\"") != std::string::npos, registered) << text;
    bool back = !registered;
    const Crossover read = ParseCrossover(text, "t", nullptr, nullptr, nullptr, &back);
    EXPECT_EQ(back, registered);
    EXPECT_EQ(read.Digest(), c.Digest());
  }
  const std::string head = R"({"format":"ciuic-crossover","version":1,"ranks":2,"transport":"mpi",)";
  for (const char* value : {R"("pinned")", "true", "null", R"("")"}) {
    const std::string text = head + R"("buffers":)" + value + R"(,"bands":[{"below_bytes":null,"algo":"ring"}]})";
    try {
      ParseCrossover(text, "t");
      ADD_FAILURE() << "accepted: " << text;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("crossover t: buffers: expected \"registered\""), std::string::npos)
          << e.what();
    }
  }
}

// A file says how many hosts its world spanned ("hosts", up to ranks), and a calibration is keyed by
// it: a table measured on one host (where the ring stages small calls through a window) is never
// read for a world across hosts, nor the other way round.
TEST(Crossover, AFileSaysHowManyHostsItsWorldSpannedAndCalibrationsAreKeyedByIt) {
  const Crossover c = CrossoverFromPoints(Planted());
  for (int hosts : {0, 1, 2}) {
    const std::string text = CrossoverJson(c, Planted(), 2, "mpi", false, hosts);
    EXPECT_EQ(text.find("\"hosts\"") != std::string::npos, hosts > 0) << text;
    int back = -1;
    ParseCrossover(text, "t", nullptr, nullptr, nullptr, nullptr, &back);
    EXPECT_EQ(back, hosts);
  }
  const std::string head = R"({"format":"ciuic-crossover","version":1,"ranks":2,"transport":"mpi",)";
  for (const char* value : {"0", "-1", "3", "1.5", R"("2")", "null"}) {
    const std::string text = head + R"("hosts":)" + value + R"(,"bands":[{"below_bytes":null,"algo":"ring"}]})";
    try {
      ParseCrossover(text, "t");
      ADD_FAILURE() << "accepted: " << text;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("crossover t: hosts: expected a positive integer up to ranks"),
                std::string::npos)
          << e.what();
    }
  }
  EXPECT_EQ(CrossoverDeviceKey("cpu:x", 0), "cpu:x");
  EXPECT_EQ(CrossoverDeviceKey("cpu:x", 1), "cpu:x");
  EXPECT_EQ(CrossoverDeviceKey("cpu:x", 3), "cpu:x (3 hosts)");
  const std::string dir = testing::TempDir() + "/crossover_hosts_" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  const std::string db = dir + "/c.db";
  StoreCrossoverPoints(db, CrossoverDeviceKey("cpu:x", 2), "mpi", 4, Planted());
  EXPECT_TRUE(LoadCrossoverPoints(db, CrossoverDeviceKey("cpu:x", 1), "mpi", 4).empty());
  EXPECT_EQ(LoadCrossoverPoints(db, CrossoverDeviceKey("cpu:x", 2), "mpi", 4).size(), Planted().size());
  std::filesystem::remove_all(dir);
}

TEST(Crossover, FileCarriesItsMeasuredPointsAndRefusesBadOnes) {
  std::vector<CrossoverPoint> back;
  ParseCrossover(CrossoverJson(CrossoverFromPoints(Planted()), Planted(), 4, "mpi"), "t", nullptr, nullptr, &back);
  ASSERT_EQ(back.size(), Planted().size());
  for (size_t i = 0; i < back.size(); ++i) {
    EXPECT_EQ(back[i].bytes, Planted()[i].bytes);
    EXPECT_EQ(back[i].library_us, Planted()[i].library_us);
    EXPECT_EQ(back[i].us, Planted()[i].us);
  }
  const std::string head = R"({"format":"ciuic-crossover","version":1,"ranks":2,"transport":"mpi",)"
                           R"("bands":[{"below_bytes":null,"algo":"native"}])";
  const std::pair<std::string, std::string> bad[] = {
      {head + "}", "points: expected"},
      {head + R"(,"points":[]})", "points: expected"},
      {head + R"(,"points":[{"bytes":6,"library_us":1,"us":{"ring":1}}]})", "points[0].bytes"},
      {head + R"(,"points":[{"bytes":8,"library_us":1,"us":{"ring":1}},{"bytes":8,"library_us":1,"us":{"ring":1}}]})",
       "points[1].bytes"},
      {head + R"(,"points":[{"bytes":8,"library_us":0,"us":{"ring":1}}]})", "points[0].library_us"},
      {head + R"(,"points":[{"bytes":8,"library_us":1,"us":{"ring":-2}}]})", "points[0].us.ring"},
      {head + R"(,"points":[{"bytes":8,"library_us":1,"us":{"sparse":1}}]})", "points[0].us.sparse"},
      {head + R"(,"points":[{"bytes":8,"library_us":1,"us":{}}]})", "points[0].us"},
      {head + R"(,"points":[{"bytes":8,"library_us":1}]})", "points[0]"},
  };
  for (const auto& [text, want] : bad) {
    std::vector<CrossoverPoint> points;
    try {
      ParseCrossover(text, "t", nullptr, nullptr, &points);
      ADD_FAILURE() << "accepted: " << text;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
    EXPECT_NO_THROW(ParseCrossover(text, "t"));  // the table alone needs no points
  }
}

// `ciuic-tune calibrate --ranks P` stores auto's crossover; `--crossover db` reads the newest one of
// its own machine, transport and world size, never mixed with an older calibration or another world's.
TEST(Crossover, CalibrationDatabaseGivesTheNewestCalibrationOfThisWorld) {
  const std::string dir = testing::TempDir() + "/crossover_db_" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string db = dir + "/c.db";
  EXPECT_TRUE(LoadCrossoverPoints(db, "cpu:x", "mpi", 4).empty());  // no file yet: nothing stored
  std::ofstream(dir + "/empty.db").close();
  EXPECT_TRUE(LoadCrossoverPoints(dir + "/empty.db", "cpu:x", "mpi", 4).empty());
  std::ofstream(dir + "/junk.db") << "not a database, long enough to be looked at by sqlite's header check....";
  EXPECT_THROW(LoadCrossoverPoints(dir + "/junk.db", "cpu:x", "mpi", 4), InputError);

  // Newer: native everywhere, at three sizes only (an older calibration's other sizes must not leak in).
  const std::vector<CrossoverPoint> newer = {Point(1024, 1, 9, 9), Point(65536, 10, 90, 90),
                                             Point(4194304, 100, 900, 900)};
  StoreCrossoverPoints(db, "cpu:x", "mpi", 4, Planted());
  std::this_thread::sleep_for(std::chrono::milliseconds(3));
  StoreCrossoverPoints(db, "cpu:x", "mpi", 4, newer);
  StoreCrossoverPoints(db, "cpu:x", "gloo", 4, Planted());
  StoreCrossoverPoints(db, "cpu:y", "mpi", 4, Planted());
  StoreCrossoverPoints(db, "cpu:x", "mpi", 2, Planted());
  std::string created;
  const auto got = LoadCrossoverPoints(db, "cpu:x", "mpi", 4, &created);
  EXPECT_FALSE(created.empty());
  ASSERT_EQ(got.size(), newer.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].bytes, newer[i].bytes);
    EXPECT_NEAR(got[i].library_us, newer[i].library_us, 1e-9 * newer[i].library_us);
    ASSERT_EQ(got[i].us.size(), 3u);
    for (const auto& [a, us] : newer[i].us) EXPECT_NEAR(got[i].us.at(a), us, 1e-9 * us) << AlgoName(a);
  }
  EXPECT_EQ(CrossoverFromStoredPoints(got, {A::kNative, A::kRecursiveDoubling, A::kRing}).Describe(), "native");
  EXPECT_TRUE(LoadCrossoverPoints(db, "cpu:x", "mpi", 8).empty());
  const auto other = LoadCrossoverPoints(db, "cpu:x", "gloo", 4);
  EXPECT_EQ(other.size(), Planted().size());
  // Read where hier cannot run (one host), the planted hier bands fall to the best of the others.
  EXPECT_EQ(CrossoverFromStoredPoints(other, {A::kNative, A::kRecursiveDoubling, A::kRing, A::kHierarchical}).Digest(),
            CrossoverFromPoints(Planted()).Digest());
  const Crossover flat = CrossoverFromStoredPoints(other, {A::kNative, A::kRecursiveDoubling, A::kRing});
  for (const auto& b : flat.bands) EXPECT_NE(b.algo, A::kHierarchical) << flat.Describe();
  EXPECT_EQ(flat.Choose(16 << 20), A::kRing);
  EXPECT_TRUE(CrossoverFromStoredPoints(other, {A::kSparse}).bands.empty());
  std::filesystem::remove_all(dir);
}

// A runtime made outside ciuic-bench (the C API) reads auto's table from $CIUIC_CROSSOVER: by default
// the data folder's calibration for this machine and world, each planted algorithm best in turn and
// the sums exact; the built-in table where nothing is stored; a file; an explicit database that holds
// nothing, an unreadable one on one rank and ranks that read different tables fail every rank with
// the same line.
TEST(Crossover, RuntimeReadsTheCalibrationDatabaseAFileOrTheBuiltinAndRanksAgree) {
  const std::string dir = testing::TempDir() + "/crossover_rt_" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir + "/data");
  const char* old_data = std::getenv("CIUIC_DATA_DIR");
  const std::string keep_data = old_data ? old_data : "";
  const char* old_source = std::getenv("CIUIC_CROSSOVER");
  const std::string keep_source = old_source ? old_source : "";
  ::setenv("CIUIC_DATA_DIR", (dir + "/data").c_str(), 1);
  ::unsetenv("CIUIC_CROSSOVER");
  const std::string device = "cpu:" + CpuModelName();
  const std::vector<AllReduceAlgo> flat = {A::kNative, A::kRecursiveDoubling, A::kRing};

  // What every rank's RuntimeCrossover (or its error) gave.
  auto read = [&](const std::string& source) {
    if (source.empty())
      ::unsetenv("CIUIC_CROSSOVER");
    else
      ::setenv("CIUIC_CROSSOVER", source.c_str(), 1);
    std::vector<std::pair<std::shared_ptr<const Crossover>, std::string>> got(2);
    RunLocalRanks(2, [&](Communicator& comm) {
      try {
        got[comm.Rank()].first = RuntimeCrossover(comm);
      } catch (const InputError& e) {
        got[comm.Rank()].second = e.what();
      }
    });
    return got;
  };

  auto none = read("");
  for (const auto& [t, e] : none) {
    ASSERT_TRUE(t) << e;
    EXPECT_EQ(t->Digest(), BuiltinCrossover("local", 1).Digest());  // the thread ranks share one host
    EXPECT_NE(t->source.find("built-in (local, one host): nothing calibrated for 2 ranks over local"),
              std::string::npos)
        << t->source;
  }
  for (const auto& [t, e] : read("db")) {
    EXPECT_FALSE(t);
    EXPECT_NE(e.find("$CIUIC_CROSSOVER=db: '" + dir + "/data/ciuic.db' holds no crossover for 2 ranks over local"),
              std::string::npos)
        << e;
  }
  EXPECT_EQ(read("db")[0].second, read("db")[1].second);

  StoreCrossoverPoints(dir + "/data/ciuic.db", device, "local", 2, Planted());
  StoreCrossoverPoints(dir + "/data/ciuic.db", device, "local", 3, {Point(1024, 9, 9, 1)});  // another world's
  // Read on one host (the thread ranks), a calibration's ring column was the staged ring.
  Crossover planted_table = CrossoverFromStoredPoints(Planted(), flat);
  MarkStagedRing(planted_table, 1, false, DeviceKind::kCpu);
  const uint64_t planted = planted_table.Digest();
  ::unsetenv("CIUIC_CROSSOVER");
  std::vector<std::vector<A>> chose(2);
  RunLocalRanks(2, [&](Communicator& comm) {
    RuntimeConfig rc;
    rc.timeout_s = 0;
    rc.algo.crossover = RuntimeCrossover(comm);
    Runtime rt(comm, rc);
    for (size_t n : {256u, 4096u, 262144u, 4194304u}) {  // 1 KiB, 16 KiB, 1 MiB, 16 MiB
      chose[comm.Rank()].push_back(rt.engine().AlgoFor(n));
      std::vector<float> data(n);
      for (size_t i = 0; i < n; ++i) data[i] = static_cast<float>((i * 7 + comm.Rank() * 13) % 101) - 50.0f;
      rt.AllReduce(data.data(), n, n);
      for (size_t i = 0; i < n; ++i) {
        const float want = static_cast<float>((i * 7) % 101) - 50.0f + static_cast<float>((i * 7 + 13) % 101) - 50.0f;
        if (data[i] != want) {
          ADD_FAILURE() << "n " << n << " element " << i << ": " << data[i] << " != " << want;
          break;
        }
      }
    }
  });
  const std::vector<A> want = {A::kNative, A::kRecursiveDoubling, A::kRing, A::kRing};
  EXPECT_EQ(chose[0], want);
  EXPECT_EQ(chose[1], want);
  for (const std::string& source : std::vector<std::string>{"", "db", "db:" + dir + "/data/ciuic.db"}) {
    for (const auto& [t, e] : read(source)) {
      ASSERT_TRUE(t) << source << ": " << e;
      EXPECT_EQ(t->Digest(), planted) << source << ": " << t->Describe();
      EXPECT_EQ(t->staged_below, AlgoConfig{}.staged_bytes + 1) << source;
      EXPECT_NE(t->source.find("for 2 ranks over local, " + dir + "/data/ciuic.db"), std::string::npos) << t->source;
    }
  }
  for (const auto& [t, e] : read("builtin")) EXPECT_EQ(t->Digest(), BuiltinCrossover("local").Digest());

  const Crossover file_table = CrossoverFromPoints({Point(1024, 9, 1, 9), Point(65536, 90, 90, 10)});
  { std::ofstream(dir + "/t.json") << CrossoverJson(file_table, {}, 2, "local"); }
  for (const auto& [t, e] : read(dir + "/t.json")) {
    ASSERT_TRUE(t) << e;
    EXPECT_EQ(t->Digest(), file_table.Digest());  // no host count: not marked
  }
  { std::ofstream(dir + "/one-host.json") << CrossoverJson(file_table, {}, 2, "local", false, 1); }
  for (const auto& [t, e] : read(dir + "/one-host.json")) {
    ASSERT_TRUE(t) << e;
    EXPECT_EQ(t->staged_below, AlgoConfig{}.staged_bytes + 1);
  }
  for (const auto& [t, e] : read(dir + "/missing.json")) {
    EXPECT_FALSE(t);
    EXPECT_NE(e.find("$CIUIC_CROSSOVER=" + dir + "/missing.json: rank 0: "), std::string::npos) << e;
  }
  for (const auto& [t, e] : read("db:")) EXPECT_NE(e.find("db: names no database"), std::string::npos) << e;

  // Per rank: rank 1 cannot read its database; rank 1's holds another table.
  std::ofstream(dir + "/junk.db") << "not a database, long enough to be looked at by sqlite's header check....";
  StoreCrossoverPoints(dir + "/other.db", device, "local", 2, {Point(1024, 9, 9, 1)});
  for (const std::string& other : std::vector<std::string>{dir + "/junk.db", dir + "/other.db", dir + "/nothing.db"}) {
    std::vector<std::string> errors(2);
    RunLocalRanks(2, [&](Communicator& comm) {
      try {
        CalibratedCrossover(comm, comm.Rank() == 1 ? other : dir + "/data/ciuic.db", false);
      } catch (const InputError& e) {
        errors[comm.Rank()] = e.what();
      }
    });
    EXPECT_EQ(errors[0], errors[1]) << other;
    const std::string want_error =
        other == dir + "/junk.db" ? "rank 1: " : "the ranks read different crossovers for 2 ranks over local";
    EXPECT_NE(errors[0].find(want_error), std::string::npos) << other << ": " << errors[0];
  }

  if (old_data)
    ::setenv("CIUIC_DATA_DIR", keep_data.c_str(), 1);
  else
    ::unsetenv("CIUIC_DATA_DIR");
  if (old_source)
    ::setenv("CIUIC_CROSSOVER", keep_source.c_str(), 1);
  else
    ::unsetenv("CIUIC_CROSSOVER");
  std::filesystem::remove_all(dir);
}

TEST(Crossover, AMeasurementAgreesOnEveryRankAndNamesOnlyCandidates) {
  std::vector<std::vector<CrossoverPoint>> got(3);
  RunLocalRanks(3, [&](Communicator& comm) {
    CrossoverOptions o;
    o.sizes = {64, 4096, 65536};
    o.rounds = 2;
    o.target_s = 0.0005;
    o.with_auto = std::make_shared<Crossover>(BuiltinCrossover("local"));
    got[comm.Rank()] = MeasureCrossover(comm, {A::kNative, A::kRecursiveDoubling, A::kRing}, o);
  });
  ASSERT_EQ(got[0].size(), 3u);
  for (int r = 1; r < 3; ++r) {
    for (size_t i = 0; i < 3; ++i) {
      EXPECT_EQ(got[r][i].library_us, got[0][i].library_us);
      EXPECT_EQ(got[r][i].us, got[0][i].us);
      EXPECT_EQ(got[r][i].auto_us, got[0][i].auto_us);
    }
  }
  for (const auto& p : got[0]) {
    EXPECT_GT(p.library_us, 0);
    EXPECT_GT(p.auto_us, 0);
    EXPECT_EQ(p.auto_algo, A::kNative);
    for (const auto& [a, us] : p.us) EXPECT_GT(us, 0) << AlgoName(a);
  }
  const Crossover c = CrossoverFromPoints(got[0]);
  for (const auto& b : c.bands)
    EXPECT_TRUE(b.algo == A::kNative || b.algo == A::kRecursiveDoubling || b.algo == A::kRing);
  EXPECT_THROW(MeasureCrossover(*MakeLocalWorld(1)[0], {A::kSparse}), UsageError);
}

// The measurement says what auto ran, not only what its table names: a ring band the table meant staged
// (staged_below) at a size the engine cannot stage (above its staged_bytes, 1 MiB) ran native; at a size
// it stages, the ring ran. The runtime's inline small calls count as native too.
TEST(Crossover, AMeasurementSaysWhenAutosRingRanNative) {
  auto ring = std::make_shared<Crossover>();
  ring->bands = {{std::numeric_limits<uint64_t>::max(), A::kRing}};
  ring->staged_below = 8u << 20;
  std::vector<std::vector<CrossoverPoint>> got(2);
  RunLocalRanks(2, [&](Communicator& comm) {
    CrossoverOptions o;
    o.sizes = {65536, 2u << 20};
    o.rounds = 2;
    o.target_s = 0.0005;
    o.with_auto = ring;
    got[comm.Rank()] = MeasureCrossover(comm, {A::kNative}, o);
  });
  for (const auto& points : got) {
    ASSERT_EQ(points.size(), 2u);
    EXPECT_EQ(points[0].auto_algo, A::kRing);
    EXPECT_FALSE(points[0].auto_ran_native);  // 64 KiB: staged
    EXPECT_EQ(points[1].auto_algo, A::kRing);
    EXPECT_TRUE(points[1].auto_ran_native);  // 2 MiB: cannot be staged, native ran
  }
  auto world = MakeLocalWorld(1);
  AllReduceEngine engine(*world[0], AlgoConfig{});
  engine.CountNative(4, 1e-6);
  EXPECT_EQ(engine.counters().native_calls, 1u);
}

// Registered, every call is timed on buffers in one shared window: the ring candidate's calls run over
// it (their "mapped ring" span), and so do auto's where its table names the ring (the second case has
// no ring candidate: any such span is auto's). Unregistered, nothing runs over a window.
TEST(Crossover, ARegisteredMeasurementTimesTheRingOverTheWindow) {
  const auto ring_everywhere = std::make_shared<Crossover>(CrossoverFromPoints({Point(4096, 9, 8, 1)}));
  for (bool by_auto : {false, true}) {
    for (bool registered : {false, true}) {
      const auto events = testing_trace::TracedRanks(2, [&](Communicator& comm) {
        CrossoverOptions o;
        o.sizes = {4096, 65536};
        o.rounds = 1;
        o.target_s = 0.0005;
        o.registered = registered;
        if (by_auto) o.with_auto = ring_everywhere;
        const auto candidates = by_auto ? std::vector<A>{A::kNative} : std::vector<A>{A::kNative, A::kRing};
        EXPECT_EQ(MeasureCrossover(comm, candidates, o).size(), 2u);
      });
      for (int r = 0; r < 2; ++r)
        EXPECT_EQ(testing_trace::HasSpan(events[r], "mapped ring"), registered)
            << (by_auto ? "auto" : "the ring candidate") << ", registered " << registered << ", rank " << r;
    }
  }
}

}  // namespace
}  // namespace ciuic

namespace ciuic {
namespace {

// Out of place (the ring and native read the source directly; the others copy first): the same bits
// as in place, on every rank, and the source untouched.
TEST(OutOfPlace, MatchesInPlaceBitForBitAndLeavesTheSourceAlone) {
  struct Case {
    const char* algo;
    const char* codec;
  };
  const Case cases[] = {{"ring", "none"}, {"native", "none"}, {"rd", "none"},
                        {"auto", "none"}, {"ring", "int8"},   {"hier", "none"}};
  for (int ranks : {1, 2, 3, 4}) {
    for (const Case& c : cases) {
      if (std::string(c.algo) == "hier" && ranks % 2) continue;
      for (size_t n : {size_t{1}, size_t{1000}, size_t{300001}}) {
        AlgoConfig cfg;
        cfg.algo = ParseAlgo(c.algo);
        cfg.codec = ParseCodec(c.codec);
        cfg.codec.error_feedback = false;
        cfg.ranks_per_node = std::string(c.algo) == "hier" ? 2 : 0;
        cfg.piece_bytes = 256 << 10;  // several pieces per chunk at the largest size
        if (std::string(c.algo) == "ring" && std::string(c.codec) == "none") {
          // The pieces rotate through two slots, and the results stream past the caches.
          cfg.in_flight = 1;
          cfg.uncached_bytes = 4096;
        }
        std::vector<int> bad(static_cast<size_t>(ranks), -1);
        RunLocalRanks(ranks, [&](Communicator& comm) {
          std::vector<float> src(n);
          for (size_t i = 0; i < n; ++i)
            src[i] = static_cast<float>(std::sin(0.37 * static_cast<double>(i) + comm.Rank())) * 1e-3f;
          const std::vector<float> kept = src;
          std::vector<float> in_place = src, out(n, -7.0f);
          AllReduceEngine a(comm, cfg), b(comm, cfg);
          CodecState sa, sb;
          a.Run(in_place.data(), n, &sa, true);
          b.Run(src.data(), out.data(), n, &sb, true);
          bad[static_cast<size_t>(comm.Rank())] =
              static_cast<int>(std::memcmp(out.data(), in_place.data(), n * 4) != 0) +
              2 * static_cast<int>(std::memcmp(src.data(), kept.data(), n * 4) != 0);
        });
        for (int r = 0; r < ranks; ++r)
          EXPECT_EQ(bad[static_cast<size_t>(r)], 0)
              << c.algo << " " << c.codec << " ranks " << ranks << " n " << n << " rank " << r
              << " (1: result differs from in place, 2: source changed)";
      }
    }
  }
}

// Out of place a table may choose otherwise (the library and the ring pay differently there): the
// engine runs the out-of-place bands for a call whose source lies apart from its result and the
// in-place bands otherwise, exactly; the one-host built-in table's ring from 2 KiB out of place.
TEST(Crossover, OutOfPlaceCallsRunTheOutOfPlaceBands) {
  auto table = std::make_shared<Crossover>();
  table->source = "test";
  table->bands = {{kLast, A::kNative}};
  table->out_of_place = {{4096, A::kNative}, {kLast, A::kRing}};
  EXPECT_EQ(table->Choose(1 << 20), A::kNative);
  EXPECT_EQ(table->Choose(1 << 20, true), A::kRing);
  EXPECT_EQ(table->Choose(1024, true), A::kNative);
  EXPECT_EQ(table->Describe(), "native; out of place: native <4K, ring");
  Crossover in_place_only = *table;
  in_place_only.out_of_place.clear();
  EXPECT_NE(table->Digest(), in_place_only.Digest());
  EXPECT_EQ(in_place_only.Choose(1 << 20, true), A::kNative);  // no out-of-place bands: the in-place ones
  AlgoConfig cfg;
  cfg.crossover = table;
  for (const bool out_of_place : {false, true}) {
    for (const size_t n : {size_t{256}, size_t{65536}}) {  // 1 KiB, 256 KiB
      std::vector<std::string> seen(3);
      std::vector<int> wrong(3, -1), touched(3, -1);
      RunLocalRanks(3, [&](Communicator& comm) {
        AllReduceEngine engine(comm, cfg);
        EXPECT_EQ(engine.AlgoFor(n, out_of_place), table->Choose(n * 4, out_of_place));
        std::vector<float> src(n), data(n, -1.0f);
        for (size_t i = 0; i < n; ++i) src[i] = RankValue(i, comm.Rank());
        const std::vector<float> kept = src;
        if (!out_of_place) data = src;
        trace::Recorder rec(comm.Rank(), "test");
        {
          const trace::Bind bind(&rec);
          engine.Run(out_of_place ? src.data() : data.data(), data.data(), n, nullptr, false);
        }
        seen[comm.Rank()] = AlgoSpans(rec);
        wrong[comm.Rank()] = WrongSums(data, 3);
        touched[comm.Rank()] = src != kept;
      });
      const std::string what = std::to_string(n * 4) + " B" + (out_of_place ? " out of place" : " in place");
      for (int r = 0; r < 3; ++r) {
        EXPECT_EQ(seen[r], AlgoName(table->Choose(n * 4, out_of_place))) << what << ", rank " << r;
        EXPECT_EQ(wrong[r], 0) << what << ", rank " << r;
        EXPECT_EQ(touched[r], 0) << what << ", rank " << r;
      }
    }
  }
  const Crossover one = BuiltinCrossover("mpi", 1);
  EXPECT_EQ(one.Choose(1u << 20, true), A::kRing);
  EXPECT_EQ(one.Choose(4u << 20, true), A::kRing);
  EXPECT_EQ(one.Choose(4u << 20), A::kNative);
  EXPECT_EQ(one.Choose(1024, true), A::kNative);
  EXPECT_TRUE(BuiltinCrossover("mpi").out_of_place.empty());
  EXPECT_TRUE(BuiltinCrossover("nccl", 1).out_of_place.empty());
}

// A file keeps the out-of-place bands and points (round trip), refuses bad ones naming the key, and
// without them reads as before; a table whose out-of-place measurement chose the same bands carries
// none (OutOfPlaceBands).
TEST(Crossover, AFileCarriesTheOutOfPlaceBandsAndPoints) {
  Crossover c = CrossoverFromPoints(Planted());
  std::vector<CrossoverPoint> oop = Planted();
  for (auto& p : oop) p.us[A::kRing] = p.library_us / 2;  // the ring twice the library's speed
  c.out_of_place = OutOfPlaceBands(c, CrossoverFromPoints(oop));
  ASSERT_FALSE(c.out_of_place.empty());
  EXPECT_TRUE(OutOfPlaceBands(c, CrossoverFromPoints(Planted())).empty());
  std::vector<CrossoverPoint> points, points_oop;
  const Crossover back = ParseCrossover(CrossoverJson(c, Planted(), 2, "mpi", false, 1, oop), "t", nullptr, nullptr,
                                        &points, nullptr, nullptr, &points_oop);
  EXPECT_EQ(back.Digest(), c.Digest());
  EXPECT_EQ(back.Describe(), c.Describe());
  EXPECT_EQ(points.size(), Planted().size());
  ASSERT_EQ(points_oop.size(), oop.size());
  EXPECT_DOUBLE_EQ(points_oop[2].us.at(A::kRing), oop[2].us.at(A::kRing));
  const Crossover plain = ParseCrossover(CrossoverJson(CrossoverFromPoints(Planted()), Planted(), 2, "mpi"), "t",
                                         nullptr, nullptr, nullptr, nullptr, nullptr, &points_oop);
  EXPECT_TRUE(plain.out_of_place.empty());
  EXPECT_TRUE(points_oop.empty());
  const std::string head =
      R"({"format":"ciuic-crossover","version":1,"ranks":2,"transport":"mpi","bands":[{"below_bytes":null,"algo":"ring"}],)";
  const std::pair<std::string, std::string> bad[] = {
      {head + R"("bands_out_of_place":[]})", "bands_out_of_place: expected a list"},
      {head + R"("bands_out_of_place":[{"below_bytes":10,"algo":"ring"}]})",
       "bands_out_of_place[0].below_bytes: the last band is null"},
      {head + R"("bands_out_of_place":[{"below_bytes":null,"algo":"sparse"}]})", "bands_out_of_place[0].algo"},
      {head + R"("points":[{"bytes":4,"library_us":1,"us":{"ring":1}}],"points_out_of_place":{}})",
       "points_out_of_place: expected the measured points"},
      {head +
           R"("points":[{"bytes":4,"library_us":1,"us":{"ring":1}}],"points_out_of_place":[{"bytes":4,"library_us":0,"us":{"ring":1}}]})",
       "points_out_of_place[0].library_us"},
  };
  for (const auto& [text, want] : bad) {
    try {
      std::vector<CrossoverPoint> p, q;
      ParseCrossover(text, "t", nullptr, nullptr, &p, nullptr, nullptr, &q);
      ADD_FAILURE() << "accepted: " << text;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
  }
}

// The calibration database keeps a calibration's out-of-place points beside its in-place ones, and a
// world reads the out-of-place bands only from the same calibration.
TEST(Crossover, ACalibrationsOutOfPlacePointsGiveItsOutOfPlaceBands) {
  const std::string dir = testing::TempDir() + "/crossover_oop_" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string db = dir + "/c.db";
  std::vector<CrossoverPoint> oop = Planted();
  for (auto& p : oop) p.us[A::kRing] = p.library_us / 2;
  const std::string device = CrossoverDeviceKey("cpu:" + CpuModelName(), 1);
  StoreCrossoverPoints(db, device, "local", 2, Planted(), oop);
  std::string a, b;
  EXPECT_EQ(LoadCrossoverPoints(db, device, "local", 2, &a).size(), Planted().size());
  EXPECT_EQ(LoadCrossoverPoints(db, device, "local", 2, &b, true).size(), oop.size());
  EXPECT_EQ(a, b);
  auto read = [&] {
    std::vector<std::string> described(2);
    RunLocalRanks(
        2, [&](Communicator& comm) { described[comm.Rank()] = CalibratedCrossover(comm, db, true)->Describe(); });
    EXPECT_EQ(described[0], described[1]);
    return described[0];
  };
  Crossover want = CrossoverFromStoredPoints(Planted(), {A::kNative, A::kRecursiveDoubling, A::kRing});
  want.out_of_place =
      OutOfPlaceBands(want, CrossoverFromStoredPoints(oop, {A::kNative, A::kRecursiveDoubling, A::kRing}));
  ASSERT_FALSE(want.out_of_place.empty());
  EXPECT_EQ(read(), want.Describe());
  // A newer calibration without out-of-place points: the older one's never mix in.
  std::this_thread::sleep_for(std::chrono::milliseconds(3));
  StoreCrossoverPoints(db, device, "local", 2, Planted());
  EXPECT_EQ(read(), CrossoverFromStoredPoints(Planted(), {A::kNative, A::kRecursiveDoubling, A::kRing}).Describe());
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace ciuic
