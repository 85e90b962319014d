// Runtime::Load against damaged state files, over the thread backend. Valid states are saved by a
// short run; one rank's file is then mutated thousands of ways (truncation at every offset of the
// header region and sampled beyond, random byte replacements, extreme length and count fields,
// NaN/Inf values, trailing bytes, whole files of another checkpoint). Every load must either succeed
// on every rank with a state that saves back to the same bytes, or throw InputError on every rank
// naming the damaged rank and keep the old state; the allreduce after it must work on every rank
// with bit-identical results or fail on every rank. No crash, no other exception, no hang (a rank
// that throws poisons its peers; a watchdog aborts a case that stalls). CIUIC_FUZZ_SEED replays a run.
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "collectives/backends/local/communicator.h"
#include "collectives/runtime.h"
#include "core/error.h"
#include "kernels/codec_spec.h"

namespace ciuic {
namespace {

using Bytes = std::vector<uint8_t>;

// One runtime shape: every buffer kind a state file can hold is covered by some shape.
struct Shape {
  const char* name;
  const char* algo;
  const char* codec;
  int ranks;
  size_t bucket_floats;
  bool tensor_list;  // AllReduceTensors (bucket keys with the top bit) instead of one flat tensor
};

constexpr Shape kShapes[] = {
    {"int8 ring (residual)", "ring", "int8", 3, 100, false},
    {"powersgd (residual and Q)", "powersgd", "powersgd:2", 3, 100, false},
    {"sign2 (residual and server residual)", "sign2", "sign1", 3, 100, false},
    {"topk over a tensor list", "sparse", "topk:0.1", 2, 100, true},
};

constexpr int kDamaged = 1;  // the rank whose file is mutated

RuntimeConfig ConfigOf(const Shape& s) {
  RuntimeConfig c;
  c.algo.algo = ParseAlgo(s.algo);
  c.algo.codec = ParseCodec(s.codec);
  c.algo.codec.block = 32;  // chunks of several blocks per rank in a bucket of 100 (sign2's server residual)
  c.bucket_bytes = s.bucket_floats * 4;
  return c;
}

// One seed per test process: CIUIC_FUZZ_SEED, else a random one. The fuzz test prints it; the
// gradients and the mutations both follow from it, so a failing case replays with that variable.
uint64_t Seed() {
  static const uint64_t seed = []() -> uint64_t {
    if (const char* s = std::getenv("CIUIC_FUZZ_SEED")) return static_cast<uint64_t>(std::strtoull(s, nullptr, 0));
    return static_cast<uint64_t>(std::random_device{}()) * 0x9e3779b97f4a7c15ull ^
           static_cast<uint64_t>(std::random_device{}());
  }();
  return seed;
}

std::vector<float> StateGradient(int rank, size_t n, uint64_t step) {
  static const uint64_t salt = Seed() * 0xbf58476d1ce4e5b9ull;
  std::mt19937_64 rng(salt + rank * 1000003ull + step * 7919ull + n);
  std::normal_distribution<float> d(0.0f, 1e-2f);
  std::vector<float> g(n);
  for (float& x : g) x = d(rng);
  return g;
}

// Tensor sizes of the list shape for n = 250: a bucket of [30 40 20], a tensor of 150 split into
// buckets of 100 and 50, and one of n - 240 (10) alone.
std::vector<size_t> ListSizes(size_t n) { return {30, 40, 20, 150, n - 240}; }

// One collective step: a flat tensor of n (id 7) or the tensor list of n elements (ids 20..24).
void Step(Runtime& rt, const Shape& s, int rank, size_t n, uint64_t step, std::vector<float>* out) {
  if (!s.tensor_list) {
    std::vector<float> g = StateGradient(rank, n, step);
    rt.AllReduce(g.data(), g.size(), 7);
    if (out) *out = std::move(g);
    return;
  }
  std::vector<std::vector<float>> ts;
  std::vector<TensorRef> refs;
  std::vector<uint64_t> ids;
  for (size_t size : ListSizes(n)) ts.push_back(StateGradient(rank, size, step * 10 + ts.size()));
  for (size_t i = 0; i < ts.size(); ++i) {
    refs.push_back({ts[i].data(), ts[i].size()});
    ids.push_back(20 + i);
  }
  rt.AllReduceTensors(refs, ids);
  if (out) {
    out->clear();
    for (const auto& t : ts) out->insert(out->end(), t.begin(), t.end());
  }
}

Bytes ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(in), {});
}

void WriteAll(const std::string& path, const Bytes& b) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

class TempDir {
 public:
  // In gtest's temporary folder, or under `base`.
  explicit TempDir(const std::string& base = ::testing::TempDir()) {
    static std::atomic<int> next{0};
    path_ = fmt::format("{}/ciuic_state_fuzz_{}_{}", base, getpid(), next++);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  std::string File(const std::string& name, int rank) const { return fmt::format("{}/{}.{}", path_, name, rank); }

 private:
  std::string path_;
};

// Each rank's file after `steps` steps of n elements.
std::vector<Bytes> SaveStates(const Shape& s, size_t n, int steps, const TempDir& dir) {
  std::vector<Bytes> files(static_cast<size_t>(s.ranks));
  RunLocalRanks(s.ranks, [&](Communicator& comm) {
    Runtime rt(comm, ConfigOf(s));
    for (int t = 0; t < steps; ++t) Step(rt, s, comm.Rank(), n, static_cast<uint64_t>(t), nullptr);
    const std::string path = dir.File("saved", comm.Rank());
    rt.Save(path);
    files[static_cast<size_t>(comm.Rank())] = ReadAll(path);
  });
  return files;
}

// The fields of a valid file (the format of collectives/runtime.cc, read independently here).
struct Field {
  size_t offset, size;
  uint64_t value;
  bool length;  // a u64 that sizes something after it (codec name, record count, element count, buffer)
};
struct Layout {
  std::vector<Field> fields;
  std::vector<std::pair<size_t, size_t>> floats;  // (offset, count) of each non-empty buffer
  std::vector<size_t> records;                    // offset of each record
  size_t header_end = 0;                          // after the first record's first buffer length
};

uint64_t Load64(const Bytes& b, size_t at) {
  uint64_t v;
  std::memcpy(&v, b.data() + at, 8);
  return v;
}

Layout LayoutOf(const Bytes& b) {
  Layout l;
  size_t at = 8;
  for (int i = 0; i < 3; ++i, at += 4) {
    uint32_t v;
    std::memcpy(&v, b.data() + at, 4);
    l.fields.push_back({at, 4, v, false});
  }
  const uint64_t len = Load64(b, at);
  l.fields.push_back({at, 8, len, true});
  at += 8 + len;
  const uint64_t records = Load64(b, at);
  l.fields.push_back({at, 8, records, true});
  at += 8;
  for (uint64_t r = 0; r < records; ++r) {
    l.records.push_back(at);
    for (int i = 0; i < 4; ++i, at += 8) l.fields.push_back({at, 8, Load64(b, at), i == 3});
    for (int i = 0; i < 3; ++i) {
      const uint64_t n = Load64(b, at);
      l.fields.push_back({at, 8, n, true});
      at += 8;
      if (!l.header_end) l.header_end = at;
      if (n) l.floats.push_back({at, n});
      at += n * 4;
    }
  }
  uint32_t version;
  std::memcpy(&version, b.data() + 8, 4);
  if (version >= 2) {  // the checksum of everything before it
    l.fields.push_back({at, 8, Load64(b, at), false});
    at += 8;
  }
  EXPECT_EQ(at, b.size()) << "the test's reading of the format is out of date";
  if (!l.header_end) l.header_end = b.size();
  return l;
}

struct Mutation {
  std::string what;
  Bytes file;  // for rank kDamaged; the other ranks load their valid files
};

void Put(Bytes& b, const Field& f, uint64_t v) { std::memcpy(b.data() + f.offset, &v, f.size); }

std::vector<Mutation> Mutations(const Bytes& valid, std::mt19937_64& rng) {
  const Layout l = LayoutOf(valid);
  std::vector<Mutation> m;
  // Truncation: every offset of the header region (through the first buffer length), sampled after.
  for (size_t at = 0; at < valid.size(); at += at < l.header_end + 16 ? 1 : 37)
    m.push_back({fmt::format("truncated to {} bytes", at), Bytes(valid.begin(), valid.begin() + at)});
  m.push_back({"truncated by one byte", Bytes(valid.begin(), valid.end() - 1)});
  // Random byte replacements, one at a time and in small groups.
  std::uniform_int_distribution<size_t> where(0, valid.size() - 1);
  std::uniform_int_distribution<int> byte(0, 255);
  for (int i = 0; i < 400; ++i) {
    Bytes b = valid;
    const int k = i < 250 ? 1 : 2 + i % 7;
    std::string what = "bytes replaced at";
    for (int j = 0; j < k; ++j) {
      const size_t at = where(rng);
      b[at] = static_cast<uint8_t>(b[at] ^ (1 + byte(rng) % 255));
      what += fmt::format(" {}", at);
    }
    m.push_back({what, b});
  }
  // Size and count fields at extreme and off-by-one values.
  for (const Field& f : l.fields) {
    std::vector<uint64_t> values = {0, 1, f.value - 1, f.value + 1, f.value * 2, UINT32_MAX};
    if (f.size == 8)
      values.insert(values.end(), {uint64_t{1} << 31, (uint64_t{1} << 32) + f.value, uint64_t{1} << 62,
                                   uint64_t{1} << 63, UINT64_MAX, UINT64_MAX / 4 + 1});
    for (uint64_t v : values) {
      if (f.size == 4) v &= UINT32_MAX;
      if (v == f.value) continue;
      Bytes b = valid;
      Put(b, f, v);
      m.push_back({fmt::format("field at {} set to {}", f.offset, v), b});
    }
  }
  // Non-finite values (and a huge finite one, which loads) in every buffer: first, middle, last.
  const float specials[] = {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::signaling_NaN(),
                            3e38f};
  for (const auto& [offset, count] : l.floats)
    for (size_t i : {size_t{0}, count / 2, count - 1})
      for (float x : specials) {
        Bytes b = valid;
        std::memcpy(b.data() + offset + i * 4, &x, 4);
        m.push_back({fmt::format("float {} of the buffer at {} set to {}", i, offset, x), b});
      }
  // Trailing bytes; the last record dropped consistently (a valid file the other ranks disagree with).
  for (size_t extra : {1, 8, 56}) {
    Bytes b = valid;
    b.resize(b.size() + extra, 0);
    m.push_back({fmt::format("{} trailing bytes", extra), b});
  }
  if (!l.records.empty()) {
    Bytes b(valid.begin(), valid.begin() + l.records.back());
    Put(b, l.fields[4], l.fields[4].value - 1);
    m.push_back({"last record dropped", b});
  }
  return m;
}

// What one rank saw in one case.
struct Seen {
  bool loaded = false, kept = false, round_trip = false, reduced = false;
  std::string load_error, reduce_error, unexpected;
  std::vector<float> out;
};

// Aborts the process when a case makes no progress for a minute: a hang is a failure, not a wait.
class Watchdog {
 public:
  Watchdog()
      : thread_([this] {
          std::unique_lock<std::mutex> lock(mu_);
          while (!done_) {
            const uint64_t seen = cases_;
            if (!cv_.wait_for(lock, std::chrono::seconds(60), [&] { return done_ || cases_ != seen; })) {
              std::cerr << "runtime_state_test: no progress for 60 s in case '" << current_ << "': a hang\n";
              std::abort();
            }
          }
        }) {}
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void Case(const std::string& what) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      current_ = what;
      ++cases_;
    }
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::string current_;
  uint64_t cases_ = 0;
  bool done_ = false;
  std::thread thread_;
};

// Loads files[r] on rank r of a runtime that already holds a state, then runs one more step.
std::vector<Seen> RunCase(const Shape& s, const std::vector<Bytes>& files, size_t n, const TempDir& dir,
                          const RuntimeConfig* config = nullptr) {
  std::vector<Seen> seen(static_cast<size_t>(s.ranks));
  try {
    RunLocalRanks(s.ranks, [&](Communicator& comm) {
      const int r = comm.Rank();
      Seen& me = seen[static_cast<size_t>(r)];
      const std::string path = dir.File("load", r), before = dir.File("before", r), after = dir.File("after", r);
      WriteAll(path, files[static_cast<size_t>(r)]);
      Runtime rt(comm, config ? *config : ConfigOf(s));
      Step(rt, s, r, n, 100, nullptr);
      rt.Save(before);
      try {
        rt.Load(path);
        me.loaded = true;
      } catch (const InputError& e) {
        me.load_error = e.what();
      } catch (const std::exception& e) {
        me.unexpected = std::string("Load threw a non-InputError: ") + e.what();
      }
      rt.Save(after);
      if (me.loaded) me.round_trip = ReadAll(after) == files[static_cast<size_t>(r)];
      if (!me.loaded) me.kept = ReadAll(after) == ReadAll(before);
      try {
        Step(rt, s, r, n, 101, &me.out);
        me.reduced = true;
      } catch (const std::exception& e) {
        me.reduce_error = e.what();
        throw;  // poisons the world: a peer still waiting fails (and says so) instead of hanging
      }
    });
  } catch (const std::exception&) {
    // Recorded per rank above.
  }
  return seen;
}

// Asserts the all-or-none outcome of one case; returns whether the load succeeded.
bool CheckCase(const std::vector<Seen>& seen, const std::string& what, const char* culprit) {
  SCOPED_TRACE(what);
  bool all_loaded = true, any_loaded = false, all_reduced = true, any_reduced = false;
  for (size_t r = 0; r < seen.size(); ++r) {
    const Seen& s = seen[r];
    EXPECT_EQ(s.unexpected, "") << "rank " << r;
    all_loaded &= s.loaded;
    any_loaded |= s.loaded;
    all_reduced &= s.reduced;
    any_reduced |= s.reduced;
    if (s.loaded) {
      EXPECT_TRUE(s.round_trip) << "rank " << r << ": the loaded state does not save back to its file";
    } else if (s.unexpected.empty()) {
      EXPECT_TRUE(s.kept) << "rank " << r << ": a refused load changed the state";
      if (culprit) {
        EXPECT_NE(s.load_error.find(culprit), std::string::npos) << "rank " << r << ": " << s.load_error;
      }
    }
    EXPECT_EQ(s.reduce_error.find("peer rank failed"), std::string::npos)
        << "rank " << r << " was left waiting by a peer that failed alone";
  }
  EXPECT_EQ(all_loaded, any_loaded) << "the load succeeded on some ranks only";
  EXPECT_EQ(all_reduced, any_reduced) << "the allreduce after the load worked on some ranks only";
  if (all_reduced) {
    for (size_t r = 1; r < seen.size(); ++r)
      EXPECT_EQ(0, std::memcmp(seen[r].out.data(), seen[0].out.data(), seen[0].out.size() * 4))
          << "rank " << r << " ends with other bits than rank 0";
  }
  return all_loaded;
}

// A folder in memory (/dev/shm) where there is one: Save syncs the file and its folder, 2-7 ms each on a
// disk, and the fuzz below saves 12,000 times. It tests what a load accepts, not what a save makes durable
// (ASaveKilledAtAnyMomentLeavesTheOldOrTheNewFile does).
std::string MemoryFolder() {
  std::error_code ec;
  if (std::filesystem::is_directory("/dev/shm", ec) && access("/dev/shm", W_OK) == 0) return "/dev/shm";
  return ::testing::TempDir();
}

TEST(RuntimeState, DamagedFilesLoadOnEveryRankOrFailOnEveryRank) {
  const uint64_t seed = Seed();
  SCOPED_TRACE("CIUIC_FUZZ_SEED=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  Watchdog watchdog;
  size_t cases = 0, loaded = 0;
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(s.name);
    TempDir dir(MemoryFolder());
    const size_t n = 250;  // buckets of 100, 100, 50
    const std::vector<Bytes> valid = SaveStates(s, n, 3, dir);
    for (Mutation& m : Mutations(valid[kDamaged], rng)) {
      watchdog.Case(std::string(s.name) + ": " + m.what);
      std::vector<Bytes> files = valid;
      files[kDamaged] = std::move(m.file);
      loaded += CheckCase(RunCase(s, files, n, dir), m.what, "rank 1");
      ++cases;
      if (::testing::Test::HasFailure()) return;  // one case's story, not thousands
    }
    // Rank 1 holds a good file of another checkpoint (other steps; other counts): all must refuse.
    for (const auto& [steps, other_n] : {std::pair{4, n}, std::pair{3, n + 10}}) {
      std::vector<Bytes> files = valid;
      files[kDamaged] = SaveStates(s, other_n, steps, dir)[kDamaged];
      watchdog.Case(std::string(s.name) + ": another checkpoint");
      EXPECT_FALSE(CheckCase(RunCase(s, files, n, dir), "another checkpoint on rank 1", "rank 1"));
      ++cases;
    }
    // The unmodified files load everywhere.
    EXPECT_TRUE(CheckCase(RunCase(s, valid, n, dir), "valid files", nullptr));
    ++cases;
  }
  std::cout << "[ fuzz     ] " << cases << " cases (" << loaded << " loaded, " << cases - loaded
            << " refused on every rank), seed " << seed << "\n";
  EXPECT_GT(cases, 2000u);
  // Format 2 closes each file with a checksum: a damaged file is refused, never loaded with other
  // values (format 1 loaded about a third of these mutations).
  EXPECT_EQ(loaded, 0u);
}

TEST(RuntimeState, FilesOfAnotherModelLoadButItsFirstAllReduceFailsOnEveryRank) {
  // Saved with 260 elements (last bucket 60) and consistent on every rank: the load is good, the
  // call with 250 finds a state of 60 for a bucket of 50 on every rank and all refuse it together.
  const Shape& s = kShapes[0];
  TempDir dir;
  const std::vector<Bytes> files = SaveStates(s, 260, 2, dir);
  const std::vector<Seen> seen = RunCase(s, files, 250, dir);
  for (const Seen& r : seen) {
    EXPECT_TRUE(r.loaded) << r.load_error;
    EXPECT_FALSE(r.reduced);
    EXPECT_NE(r.reduce_error.find("made for 60 elements, not 50"), std::string::npos) << r.reduce_error;
    EXPECT_NE(r.reduce_error.find("ranks 0, 1, 2"), std::string::npos) << r.reduce_error;
  }
}

TEST(RuntimeState, SmallerBucketsOrAMissingFileAreRefusedOnEveryRank) {
  const Shape& s = kShapes[1];
  TempDir dir;
  const std::vector<Bytes> files = SaveStates(s, 250, 2, dir);
  RuntimeConfig smaller = ConfigOf(s);
  smaller.bucket_bytes = 80 * 4;
  for (const Seen& r : RunCase(s, files, 250, dir, &smaller)) {
    EXPECT_FALSE(r.loaded);
    EXPECT_TRUE(r.kept);
    EXPECT_NE(r.load_error.find("exceeds this runtime's bucket of 80 elements"), std::string::npos) << r.load_error;
    EXPECT_TRUE(r.reduced) << r.reduce_error;
  }
  // Rank 2 has no file: everyone fails, naming rank 2; nobody waits.
  std::vector<Seen> seen(static_cast<size_t>(s.ranks));
  RunLocalRanks(s.ranks, [&](Communicator& comm) {
    Runtime rt(comm, ConfigOf(s));
    const std::string path = comm.Rank() == 2 ? dir.File("missing", 2) : dir.File("given", comm.Rank());
    if (comm.Rank() != 2) WriteAll(path, files[static_cast<size_t>(comm.Rank())]);
    try {
      rt.Load(path);
    } catch (const InputError& e) {
      seen[static_cast<size_t>(comm.Rank())].load_error = e.what();
    }
    EXPECT_EQ(rt.StateCount(), 0u);
  });
  for (const Seen& r : seen) EXPECT_NE(r.load_error.find("failed on rank 2 of 3"), std::string::npos) << r.load_error;
}

// A save killed at any moment (SIGKILL after a random delay; CIUIC_FUZZ_SEED replays the delays, not
// the child's pace)
// leaves the file it replaces whole: before the first save ends, absent or (every odd trial) the earlier
// job's state byte for byte, else byte for byte one of the states saved, and it loads. A kill keeps the page cache, so
// this checks the write aside and the rename, not the fsyncs (unit.save_order checks their order).
TEST(RuntimeState, ASaveKilledAtAnyMomentLeavesTheOldOrTheNewFile) {
  TempDir dir;
  const std::string path = dir.File("killed", 0);
  constexpr int kVersions = 4;
  constexpr size_t kElems = size_t{1} << 20;  // 4 MiB of residual: a save takes milliseconds
  RuntimeConfig config;
  config.algo.codec = ParseCodec("int8");
  const auto step = [](Runtime& rt, int k) {
    std::vector<float> g(kElems);
    for (size_t i = 0; i < g.size(); ++i) g[i] = std::sin(0.001f * static_cast<float>(i) + static_cast<float>(k));
    rt.AllReduce(g.data(), g.size(), 7);
  };
  // The states a run of kVersions steps saves, one after each step, as this process saves them; and
  // how long such a run takes here (the kills spread over 1.5 runs, however slow the build: a
  // sanitizer's, a loaded machine).
  std::vector<Bytes> versions;
  const auto t0 = std::chrono::steady_clock::now();
  {
    auto world = MakeLocalWorld(1);
    Runtime rt(*world[0], config);
    for (int k = 0; k < kVersions; ++k) {
      step(rt, k);
      rt.Save(path);
      versions.push_back(ReadAll(path));
    }
  }
  const auto run_us = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0);
  for (int k = 1; k < kVersions; ++k) ASSERT_NE(versions[static_cast<size_t>(k)], versions[0]);
  // A state an earlier job left (another step): every odd trial starts from it instead of no file.
  Bytes earlier;
  {
    auto world = MakeLocalWorld(1);
    Runtime rt(*world[0], config);
    step(rt, 50);
    rt.Save(path);
    earlier = ReadAll(path);
  }
  for (const Bytes& v : versions) ASSERT_NE(v, earlier);
  std::mt19937_64 rng(Seed());
  int absent = 0, whole = 0, kept = 0;
  std::vector<int> seen(kVersions, 0);
  for (int trial = 0; trial < 40; ++trial) {
    std::filesystem::remove(path);
    if (trial % 2) WriteAll(path, earlier);
    const auto delay = std::chrono::microseconds(rng() % static_cast<uint64_t>(1 + run_us.count() * 3 / 2));
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      // The same runs again and again, each from a fresh runtime, saving after every step.
      try {
        for (;;) {
          auto world = MakeLocalWorld(1);
          Runtime rt(*world[0], config);
          for (int k = 0; k < kVersions; ++k) {
            step(rt, k);
            rt.Save(path);
          }
        }
      } catch (...) {
        _exit(1);  // never back into the test runner
      }
    }
    std::this_thread::sleep_for(delay);
    kill(child, SIGKILL);
    int status = 0;
    ASSERT_EQ(waitpid(child, &status, 0), child);
    if (!std::filesystem::exists(path)) {
      ASSERT_EQ(trial % 2, 0) << "trial " << trial << " (seed " << Seed() << "): the earlier state is gone";
      ++absent;
      continue;
    }
    const Bytes b = ReadAll(path);
    int which = -1;
    for (int k = 0; k < kVersions; ++k)
      if (b == versions[static_cast<size_t>(k)]) which = k;
    if (which < 0 && trial % 2 && b == earlier) {
      ++kept;  // killed before its first save replaced the earlier state
    } else {
      ASSERT_GE(which, 0) << "trial " << trial << " (seed " << Seed() << ", killed after " << delay.count()
                          << " us): a file of " << b.size() << " bytes that no save wrote";
      ++seen[static_cast<size_t>(which)];
      ++whole;
    }
    auto world = MakeLocalWorld(1);
    Runtime loaded(*world[0], config);
    EXPECT_NO_THROW(loaded.Load(path)) << "trial " << trial << " (seed " << Seed() << ")";
  }
  std::printf(
      "killed 40 saving processes (seed %llu): %d before the first save (%d of them over an earlier state, kept "
      "whole), %d whole files (versions %d %d %d %d)\n",
      static_cast<unsigned long long>(Seed()), absent + kept, kept, whole, seen[0], seen[1], seen[2], seen[3]);
  EXPECT_GT(whole, 0) << "no kill came after a save: the delays are too short for this machine";
}

// A file name with a newline or an escape sequence is printed as one line: the refusal stays one
// line on stderr (a tool prints what() as is), with the name's control characters as '?'.
TEST(RuntimeState, AFileNameWithControlCharactersIsRefusedAsOneLine) {
  const Shape& s = kShapes[0];
  TempDir dir;
  const std::string odd = dir.File("new\nline\x1b[2J", 0);
  std::filesystem::create_directories(odd + ".dir");
  WriteAll(odd + ".junk", Bytes(64, 0x42));
  const struct {
    std::string path, says;
  } cases[] = {
      {dir.File("no\nsuch", 0) + "/missing.state", "no?such.0/missing.state"},
      {odd + ".dir", "new?line?[2J.0.dir' is not a regular file"},
      {odd + ".junk", "new?line?[2J.0.junk' is not a ciuic state file"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.says);
    for (const int ranks : {1, 2}) {
      std::vector<std::string> errors(static_cast<size_t>(ranks));
      RunLocalRanks(ranks, [&](Communicator& comm) {
        Runtime rt(comm, ConfigOf(s));
        try {
          rt.Load(c.path);
        } catch (const InputError& e) {
          errors[static_cast<size_t>(comm.Rank())] = e.what();
        }
      });
      for (const std::string& e : errors) {
        EXPECT_NE(e.find(c.says), std::string::npos) << e;
        EXPECT_EQ(e.find_first_of("\n\x1b"), std::string::npos) << e;
      }
    }
  }
}

TEST(RuntimeState, RanksMakingDifferentCallsFailTogetherNamingTheRank) {
  const Shape& s = kShapes[0];
  std::vector<std::string> errors(3);
  std::atomic<int> usage{0};
  RunLocalRanks(3, [&](Communicator& comm) {
    Runtime rt(comm, ConfigOf(s));
    std::vector<float> g = StateGradient(comm.Rank(), 90, 0);
    rt.AllReduce(g.data(), g.size(), 5);
    // Rank 1 reduces a tensor of another size under the same id: a call mismatch and, on rank 1, a
    // state made for 90 elements.
    std::vector<float> h = StateGradient(comm.Rank(), comm.Rank() == 1 ? 80 : 90, 1);
    try {
      rt.AllReduce(h.data(), h.size(), 5);
    } catch (const UsageError& e) {
      ++usage;
      errors[static_cast<size_t>(comm.Rank())] = e.what();
    }
    // The world still works after the refusal.
    std::vector<float> k = StateGradient(comm.Rank(), 90, 2);
    rt.AllReduce(k.data(), k.size(), 5);
  });
  EXPECT_EQ(usage.load(), 3);
  for (const std::string& e : errors) {
    EXPECT_NE(e.find("rank 1 tensor 5 bucket 0 (80 elements)"), std::string::npos) << e;
    EXPECT_NE(e.find("on rank 1 was made for 90 elements, not 80"), std::string::npos) << e;
    EXPECT_EQ(e, errors[0]);
  }
}

TEST(RuntimeState, ANanResidualIsRefusedNamingTheFieldAndTheRank) {
  const Shape& s = kShapes[0];
  TempDir dir;
  std::vector<Bytes> files = SaveStates(s, 250, 2, dir);
  const Layout l = LayoutOf(files[2]);
  ASSERT_FALSE(l.floats.empty());
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::memcpy(files[2].data() + l.floats[0].first + 5 * 4, &nan, 4);
  for (const Seen& r : RunCase(s, files, 250, dir)) {
    EXPECT_FALSE(r.loaded);
    EXPECT_TRUE(r.kept);
    EXPECT_NE(r.load_error.find("failed on rank 2 of 3"), std::string::npos) << r.load_error;
    EXPECT_NE(r.load_error.find("record 0 (tensor 7, bucket 0) residual[5] is nan"), std::string::npos) << r.load_error;
    EXPECT_TRUE(r.reduced) << r.reduce_error;
  }
}

}  // namespace
}  // namespace ciuic
