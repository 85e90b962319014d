// Runtime allreduce algorithms over the thread backend, 1..16 ranks: exact sums for lossless runs,
// derived error bands for lossy codecs (a zero or garbage result fails them), identical bits on
// every rank, and error feedback: the per-step invariant and the convergence of the accumulated sum.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <numbers>
#include <random>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <sys/resource.h>

#include "collectives/algorithms/allreduce.h"
#include "collectives/runtime.h"
#include "collectives/shared_window.h"
#include "kernels/codec_kernels.h"

#include <atomic>
#include <cstdio>
#include "collectives/backends/local/communicator.h"
#include "core/error.h"
#include "tests/collectives/forwarding_comm.h"

namespace ciuic {
namespace {

std::vector<float> AllReduceGradient(int rank, size_t n, uint64_t step, bool integers = false) {
  std::mt19937_64 rng(rank * 1000003ull + step * 7919ull + n);
  std::vector<float> g(n);
  if (integers) {
    std::uniform_int_distribution<int> d(-1000, 1000);
    for (float& x : g) x = static_cast<float>(d(rng));
  } else {
    std::normal_distribution<float> d(0.0f, 1e-2f);
    for (float& x : g) x = d(rng);
  }
  return g;
}

struct Outcome {
  std::vector<std::vector<float>> results;  // per rank
};

// Runs one allreduce of per-rank gradients on `ranks` threads.
Outcome RunOnce(int ranks, const AlgoConfig& cfg, size_t n, bool integers) {
  Outcome o;
  o.results.resize(ranks);
  RunLocalRanks(ranks, [&](Communicator& comm) {
    AllReduceEngine engine(comm, cfg);
    std::vector<float> data = AllReduceGradient(comm.Rank(), n, 0, integers);
    CodecState st;
    engine.Run(data.data(), n, &st, false);
    o.results[comm.Rank()] = data;
  });
  return o;
}

std::vector<double> ExactSum(int ranks, size_t n, bool integers) {
  std::vector<double> s(n, 0.0);
  for (int r = 0; r < ranks; ++r) {
    const auto g = AllReduceGradient(r, n, 0, integers);
    for (size_t i = 0; i < n; ++i) s[i] += g[i];
  }
  return s;
}

void ExpectIdenticalOnAllRanks(const Outcome& o, const std::string& what) {
  for (size_t r = 1; r < o.results.size(); ++r)
    ASSERT_EQ(0, std::memcmp(o.results[r].data(), o.results[0].data(), o.results[0].size() * 4))
        << what << ": rank " << r << " differs from rank 0";
}

AlgoConfig Config(AllReduceAlgo algo, const char* codec, size_t piece = 4096, int rpn = 0) {
  AlgoConfig c;
  c.algo = algo;
  c.codec = ParseCodec(codec);
  c.codec.block = 64;
  c.piece_bytes = piece;
  c.in_flight = 3;
  c.ranks_per_node = rpn;
  c.staged_bytes = 0;  // the ring over the transport at every size (StagedRing.* test the other path)
  return c;
}

TEST(AllReduceAlgo, LosslessAlgorithmsAreExactFrom1To16Ranks) {
  for (int ranks : {1, 2, 3, 4, 5, 7, 8, 16}) {
    // 50000: a ring's received pieces wrap around its slots many times at every rank count.
    for (size_t n : {size_t{1}, size_t{13}, size_t{5000}, size_t{50000}}) {
      const auto want = ExactSum(ranks, n, true);
      std::vector<AlgoConfig> cfgs = {Config(AllReduceAlgo::kRing, "none"),
                                      Config(AllReduceAlgo::kRecursiveDoubling, "none")};
      cfgs.push_back(Config(AllReduceAlgo::kRing, "none"));  // staged through the engine's window
      cfgs.back().staged_bytes = size_t{1} << 20;
      if (ranks % 2 == 0) cfgs.push_back(Config(AllReduceAlgo::kHierarchical, "none", 4096, 2));
      if (ranks % 4 == 0) cfgs.push_back(Config(AllReduceAlgo::kHierarchical, "none", 4096, 4));
      if (ranks % 4 == 0) {  // depth 3: pairs of ranks per node, pairs of nodes per group
        cfgs.push_back(Config(AllReduceAlgo::kHierarchical, "none", 4096, 2));
        cfgs.back().nodes_per_group = 2;
      }
      for (const AlgoConfig& cfg : cfgs) {
        const Outcome o = RunOnce(ranks, cfg, n, true);
        const std::string what = fmt::format("{} ranks={} n={}", AlgoName(cfg.algo), ranks, n);
        ExpectIdenticalOnAllRanks(o, what);
        for (size_t i = 0; i < n; ++i) ASSERT_EQ(o.results[0][i], static_cast<float>(want[i])) << what << " i=" << i;
      }
    }
  }
}

// A transport that may write a posted receive buffer at any moment before its Wait, as MPI may: it
// fills the buffer with NaN when the receive is posted (the real bytes land at Wait). An algorithm
// that reads a buffer it has posted a receive into, or reuses one too early, ends with NaN.
class ScribblingComm : public ForwardingComm {
 public:
  using ForwardingComm::ForwardingComm;
  RequestPtr IRecv(void* buf, size_t bytes, int peer, int tag) override {
    std::memset(buf, 0xff, bytes);
    return ForwardingComm::IRecv(buf, bytes, peer, tag);
  }
};

// The ring's received pieces rotate through in_flight + 1 slots and rd reduces from its own
// scratch: over a transport that writes receive buffers early, both stay exact, in and out of place.
TEST(AllReduceAlgo, ReceiveBuffersAreReadOnlyAfterTheirWait) {
  for (int ranks : {2, 3, 4}) {
    const size_t n = 50000;
    const auto want = ExactSum(ranks, n, true);
    for (AllReduceAlgo algo : {AllReduceAlgo::kRing, AllReduceAlgo::kRecursiveDoubling}) {
      for (bool in_place : {true, false}) {
        AlgoConfig cfg = Config(algo, "none");
        cfg.uncached_bytes = 4096;  // out of place, the ring's streamed results too
        std::vector<std::vector<float>> got(static_cast<size_t>(ranks));
        RunLocalRanks(ranks, [&](Communicator& local) {
          ScribblingComm comm(local);
          AllReduceEngine engine(comm, cfg);
          const std::vector<float> src = AllReduceGradient(comm.Rank(), n, 0, true);
          std::vector<float> out = src;
          CodecState st;
          if (in_place) {
            engine.Run(out.data(), n, &st, false);
          } else {
            engine.Run(src.data(), out.data(), n, &st, false);
          }
          got[static_cast<size_t>(comm.Rank())] = out;
        });
        for (int r = 0; r < ranks; ++r)
          for (size_t i = 0; i < n; ++i)
            ASSERT_EQ(got[static_cast<size_t>(r)][i], static_cast<float>(want[i]))
                << AlgoName(algo) << (in_place ? " in place" : " out of place") << " ranks " << ranks << " rank " << r
                << " i " << i;
      }
    }
  }
}

// ---- The ring over shared windows (collectives/algorithms/mapped.cc) ---------------------------

// Every rank's source and result in its shared window: each element is the rank-order sum
// (((g0 + g1) + g2) + ...) of normal floats, the same bits on every rank, in and out of place, over
// several pieces per chunk, and the sources stay as they were; average scales it once. The results
// are written with ordinary stores in place and up to 256 KiB out of place, with streaming ones out
// of place above it (70001 floats).
TEST(MappedRing, RankOrderSumsInAndOutOfPlaceWithTheSourcesUntouched) {
  for (int ranks : {2, 3, 4}) {
    for (size_t n : {size_t{1}, size_t{37}, size_t{50001}, size_t{70001}}) {
      for (bool in_place : {false, true}) {
        for (bool average : {false, true}) {
          std::vector<std::vector<float>> grads(static_cast<size_t>(ranks));
          for (int r = 0; r < ranks; ++r) grads[static_cast<size_t>(r)] = AllReduceGradient(r, n, 3);
          std::vector<float> want(n);
          for (size_t i = 0; i < n; ++i) {
            float sum = grads[0][i];
            for (int r = 1; r < ranks; ++r) sum += grads[static_cast<size_t>(r)][i];
            want[i] = average ? sum * (1.0f / static_cast<float>(ranks)) : sum;
          }
          std::vector<std::vector<float>> got(static_cast<size_t>(ranks)), after(static_cast<size_t>(ranks));
          std::vector<uint64_t> mapped(static_cast<size_t>(ranks));
          RunLocalRanks(ranks, [&](Communicator& comm) {
            const auto window = SharedWindow::Create(comm, 2 * n * sizeof(float) + 64);
            AlgoConfig cfg = Config(AllReduceAlgo::kRing, "none", 4096);
            AllReduceEngine engine(comm, cfg);
            engine.Register(window);
            const auto& g = grads[static_cast<size_t>(comm.Rank())];
            // Offsets that differ between ranks: each rank names its own, and the peers follow it.
            float* src = static_cast<float*>(window->data()) + comm.Rank() * 4;
            float* out = in_place ? src : src + n + 3;
            std::copy(g.begin(), g.end(), src);
            CodecState st;
            engine.Run(src, out, n, &st, average);
            got[static_cast<size_t>(comm.Rank())].assign(out, out + n);
            after[static_cast<size_t>(comm.Rank())].assign(src, src + n);
            mapped[static_cast<size_t>(comm.Rank())] = engine.counters().mapped_calls;
          });
          const std::string what = fmt::format("ranks {} n {} {}{}", ranks, n, in_place ? "in place" : "out of place",
                                               average ? " avg" : "");
          for (int r = 0; r < ranks; ++r) {
            EXPECT_EQ(mapped[static_cast<size_t>(r)], 1u) << what;
            for (size_t i = 0; i < n; ++i) {
              ASSERT_EQ(std::memcmp(&got[static_cast<size_t>(r)][i], &want[i], sizeof(float)), 0)
                  << what << " rank " << r << " i " << i << ": " << got[static_cast<size_t>(r)][i] << " != " << want[i];
              if (!in_place) {
                ASSERT_EQ(after[static_cast<size_t>(r)][i], grads[static_cast<size_t>(r)][i]) << what << " source";
              }
            }
          }
        }
      }
    }
  }
}

// ---- The ring staged through the engine's own window (collectives/algorithms/staged.cc) -----------

// Calls up to staged_bytes: each element is the rank-order sum, the same bits on every rank, in and
// out of place, over 5 calls in a row (the window's two slots taken in turn, each call's gradients
// new), with the sources untouched; sizes from 1 element to most of a slot, and back.
TEST(StagedRing, RankOrderSumsCallAfterCallInAndOutOfPlace) {
  for (int ranks : {2, 3, 4}) {
    for (bool in_place : {false, true}) {
      // 300001 elements: 1.2 MB of the 2 MiB slots.
      const std::vector<size_t> sizes = {1, 37, 50001, 300001, 7};
      std::vector<std::vector<std::vector<float>>> got(static_cast<size_t>(ranks)), after(got.size());
      std::vector<uint64_t> staged(static_cast<size_t>(ranks)), mapped(staged.size());
      RunLocalRanks(ranks, [&](Communicator& comm) {
        AlgoConfig cfg = Config(AllReduceAlgo::kRing, "none", 4096);
        cfg.staged_bytes = size_t{2} << 20;
        AllReduceEngine engine(comm, cfg);
        for (size_t call = 0; call < sizes.size(); ++call) {
          const size_t n = sizes[call];
          std::vector<float> src = AllReduceGradient(comm.Rank(), n, static_cast<int>(call));
          std::vector<float> out(n, -1.0f);
          float* result = in_place ? src.data() : out.data();
          CodecState st;
          engine.Run(src.data(), result, n, &st, false);
          got[static_cast<size_t>(comm.Rank())].emplace_back(result, result + n);
          after[static_cast<size_t>(comm.Rank())].push_back(src);
        }
        staged[static_cast<size_t>(comm.Rank())] = engine.counters().staged_calls;
        mapped[static_cast<size_t>(comm.Rank())] = engine.counters().mapped_calls;
      });
      for (size_t call = 0; call < sizes.size(); ++call) {
        const size_t n = sizes[call];
        const std::string what =
            fmt::format("ranks {} call {} n {} {}", ranks, call, n, in_place ? "in place" : "out of place");
        std::vector<std::vector<float>> grads(static_cast<size_t>(ranks));
        for (int r = 0; r < ranks; ++r) grads[static_cast<size_t>(r)] = AllReduceGradient(r, n, static_cast<int>(call));
        for (size_t i = 0; i < n; ++i) {
          float want = grads[0][i];
          for (int r = 1; r < ranks; ++r) want += grads[static_cast<size_t>(r)][i];
          for (int r = 0; r < ranks; ++r) {
            const float v = got[static_cast<size_t>(r)][call][i];
            ASSERT_EQ(std::memcmp(&v, &want, sizeof v), 0)
                << what << " rank " << r << " i " << i << ": " << v << " != " << want;
            if (!in_place) {
              ASSERT_EQ(after[static_cast<size_t>(r)][call][i], grads[static_cast<size_t>(r)][i]) << what << " source";
            }
          }
        }
      }
      for (int r = 0; r < ranks; ++r) {
        EXPECT_EQ(staged[static_cast<size_t>(r)], sizes.size()) << "ranks " << ranks << " rank " << r;
        EXPECT_EQ(mapped[static_cast<size_t>(r)], 0u);
      }
    }
  }
}

// Above staged_bytes, with staged_bytes 0 and on one rank the ring runs over the transport on every
// rank, exactly; a staged_bytes above kMaxStagedBytes (a window of two such slots per rank) is a
// UsageError when the engine is made.
TEST(StagedRing, WhereItDoesNotApplyEveryRankRunsTheRingOverTheTransport) {
  struct Case {
    const char* what;
    int ranks;
    size_t n;
    std::function<size_t(int rank)> limit;
    uint64_t want_staged;
  };
  const std::vector<Case> cases = {
      {"above the limit", 3, 5000, [](int) { return size_t{4096}; }, 0},
      {"staged_bytes 0", 3, 5000, [](int) { return size_t{0}; }, 0},
      {"one rank", 1, 5000, [](int) { return size_t{1} << 20; }, 0},
      {"the same limit", 2, 300000, [](int) { return size_t{2} << 20; }, 2},
  };
  RunLocalRanks(1, [&](Communicator& comm) {
    for (size_t limit : {kMaxStagedBytes + 1, SIZE_MAX}) {
      AlgoConfig cfg = Config(AllReduceAlgo::kRing, "none", 4096);
      cfg.staged_bytes = limit;
      EXPECT_THROW(AllReduceEngine(comm, cfg), UsageError) << limit;
    }
    AlgoConfig cfg = Config(AllReduceAlgo::kRing, "none", 4096);
    cfg.staged_bytes = kMaxStagedBytes;
    EXPECT_NO_THROW(AllReduceEngine(comm, cfg));
  });
  for (const Case& c : cases) {
    const auto want = ExactSum(c.ranks, c.n, true);
    std::vector<std::vector<float>> got(static_cast<size_t>(c.ranks));
    std::vector<uint64_t> staged(static_cast<size_t>(c.ranks));
    RunLocalRanks(c.ranks, [&](Communicator& comm) {
      AlgoConfig cfg = Config(AllReduceAlgo::kRing, "none", 4096);
      cfg.staged_bytes = c.limit(comm.Rank());
      AllReduceEngine engine(comm, cfg);
      CodecState st;
      for (int call = 0; call < 2; ++call) {
        std::vector<float> data = AllReduceGradient(comm.Rank(), c.n, 0, true);
        engine.Run(data.data(), c.n, &st, false);
        if (call == 1) got[static_cast<size_t>(comm.Rank())] = data;
      }
      staged[static_cast<size_t>(comm.Rank())] = engine.counters().staged_calls;
    });
    for (int r = 0; r < c.ranks; ++r) {
      EXPECT_EQ(staged[static_cast<size_t>(r)], c.want_staged) << c.what << " rank " << r;
      for (size_t i = 0; i < c.n; ++i)
        ASSERT_EQ(got[static_cast<size_t>(r)][i], static_cast<float>(want[i])) << c.what << " rank " << r << " i " << i;
    }
  }
}

// Where the window cannot be made (here: no file descriptor left for its memfd, on every rank) every
// rank learns it from the window's own gathers and runs the ring over the transport, exactly; the
// engine does not try again (with descriptors back, the next call still runs over the transport),
// while a new engine does.
TEST(StagedRing, AWindowThatCannotBeMadeLeavesTheRingOverTheTransport) {
  constexpr int kRanks = 3;
  constexpr size_t n = 5000;
  const auto want = ExactSum(kRanks, n, true);
  rlimit saved{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &saved), 0);
  size_t open_fds = 0;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) open_fds += e.is_symlink() ? 1 : 0;
  std::vector<std::vector<float>> got(kRanks);
  std::vector<uint64_t> staged(kRanks), staged_after(kRanks), staged_new(kRanks);
  std::atomic<int> arrived{0};
  RunLocalRanks(kRanks, [&](Communicator& comm) {
    AlgoConfig cfg = Config(AllReduceAlgo::kRing, "none", 4096);
    cfg.staged_bytes = size_t{1} << 20;
    AllReduceEngine engine(comm, cfg);
    CodecState st;
    // Rank 0 takes the descriptors away once every rank has its engine, before any call.
    comm.Barrier();
    if (comm.Rank() == 0) {
      rlimit tight = saved;
      tight.rlim_cur = open_fds - 1;  // the count saw its own directory descriptor too
      setrlimit(RLIMIT_NOFILE, &tight);
    }
    comm.Barrier();
    std::vector<float> data = AllReduceGradient(comm.Rank(), n, 0, true);
    engine.Run(data.data(), n, &st, false);
    got[static_cast<size_t>(comm.Rank())] = data;
    staged[static_cast<size_t>(comm.Rank())] = engine.counters().staged_calls;
    comm.Barrier();
    if (comm.Rank() == 0) setrlimit(RLIMIT_NOFILE, &saved);
    comm.Barrier();
    data = AllReduceGradient(comm.Rank(), n, 0, true);
    engine.Run(data.data(), n, &st, false);
    staged_after[static_cast<size_t>(comm.Rank())] = engine.counters().staged_calls;
    AllReduceEngine fresh(comm, cfg);
    data = AllReduceGradient(comm.Rank(), n, 0, true);
    fresh.Run(data.data(), n, &st, false);
    staged_new[static_cast<size_t>(comm.Rank())] = fresh.counters().staged_calls;
    arrived++;
  });
  setrlimit(RLIMIT_NOFILE, &saved);
  ASSERT_EQ(arrived.load(), kRanks);
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_EQ(staged[static_cast<size_t>(r)], 0u) << "rank " << r;
    EXPECT_EQ(staged_after[static_cast<size_t>(r)], 0u) << "rank " << r;
    EXPECT_EQ(staged_new[static_cast<size_t>(r)], 1u) << "rank " << r;
    for (size_t i = 0; i < n; ++i)
      ASSERT_EQ(got[static_cast<size_t>(r)][i], static_cast<float>(want[i])) << "rank " << r << " i " << i;
  }
}

// Where rank 1's buffers lie decides for every rank: outside every window, or in another window than
// the others', every rank runs the ring over the transport (deciding alike, so none waits for the
// others); in the same window as theirs, every rank runs over it, whatever was registered and
// released before. The sums stay exact either way.
TEST(MappedRing, OnlyBuffersInOneWindowOnEveryRankRunOverIt) {
  const int ranks = 3;
  const size_t n = 3000;
  const auto want = ExactSum(ranks, n, true);
  std::vector<std::vector<float>> got(ranks);
  std::vector<uint64_t> mapped(ranks);
  enum Placement { kOutside, kOtherWindow, kSameWindow };
  for (Placement place : {kOutside, kOtherWindow, kSameWindow}) {
    RunLocalRanks(ranks, [&](Communicator& comm) {
      AllReduceEngine engine(comm, Config(AllReduceAlgo::kRing, "none", 4096));
      for (int k = 0; k < 3; ++k) engine.Register(SharedWindow::Create(comm, 4096));  // released at once
      const auto first = SharedWindow::Create(comm, n * sizeof(float));
      const auto second = SharedWindow::Create(comm, n * sizeof(float));
      EXPECT_NE(first->id(), second->id());
      engine.Register(first);
      engine.Register(second);
      const std::vector<float> g = AllReduceGradient(comm.Rank(), n, 0, true);
      std::vector<float> own(n);
      float* data = static_cast<float*>(first->data());
      if (comm.Rank() == 1 && place == kOutside) data = own.data();
      if (comm.Rank() == 1 && place == kOtherWindow) data = static_cast<float*>(second->data());
      std::copy(g.begin(), g.end(), data);
      CodecState st;
      engine.Run(data, n, &st, false);
      got[comm.Rank()].assign(data, data + n);
      mapped[comm.Rank()] = engine.counters().mapped_calls;
    });
    for (int r = 0; r < ranks; ++r) {
      EXPECT_EQ(mapped[r], place == kSameWindow ? 1u : 0u) << "rank " << r << " placement " << place;
      for (size_t i = 0; i < n; ++i)
        ASSERT_EQ(got[r][i], static_cast<float>(want[i])) << "rank " << r << " placement " << place << " i " << i;
    }
  }
}

// Windows of different sizes on different ranks would map past a peer's file: refused alike on
// every rank.
TEST(SharedWindowTest, SizesThatDifferBetweenRanksAreRefusedOnEveryRank) {
  std::vector<std::string> errors(2);
  RunLocalRanks(2, [&](Communicator& comm) {
    try {
      SharedWindow::Create(comm, comm.Rank() == 0 ? 4096 : (size_t{3} << 20));
    } catch (const UsageError& e) {
      errors[comm.Rank()] = e.what();
    }
  });
  EXPECT_EQ(errors[0], errors[1]);
  EXPECT_NE(errors[0].find("rank 1 asked for 4194304 bytes, rank 0 for 2097152"), std::string::npos) << errors[0];
}

// A window is memory every rank reaches: what rank q writes in its own window, every rank reads in
// Of(q); what a rank writes in a peer's window, the peer reads in its own.
TEST(SharedWindowTest, EveryRankSeesEveryWindowAndWritesReachTheOwner) {
  const int ranks = 3;
  RunLocalRanks(ranks, [&](Communicator& comm) {
    const auto w = SharedWindow::Create(comm, 100);
    EXPECT_EQ(w->bytes(), size_t{2} << 20);  // whole 2 MiB pages
    EXPECT_EQ(w->ranks(), ranks);
    auto* own = static_cast<int*>(w->data());
    own[0] = 100 + comm.Rank();
    const int next = (comm.Rank() + 1) % ranks;
    comm.Barrier();
    for (int q = 0; q < ranks; ++q) EXPECT_EQ(reinterpret_cast<int*>(w->Of(q))[0], 100 + q);
    reinterpret_cast<int*>(w->Of(next))[1] = comm.Rank();  // into the next rank's window
    comm.Barrier();
    EXPECT_EQ(own[1], (comm.Rank() + ranks - 1) % ranks);
    EXPECT_EQ(w->OffsetOf(own + 4, 16), 16);
    EXPECT_EQ(w->OffsetOf(own, w->bytes() + 1), -1);
    EXPECT_EQ(w->OffsetOf(w->Of(next), 4), -1);  // a peer's window is not this rank's
    comm.Barrier();
  });
}

// ---- Lossy results against derived bands -------------------------------------------------------
//
// A lossy allreduce of i.i.d. N(0, σ²) gradients (σ = 0.01, n = 4099, P ranks, block 64) is
// checked against a band derived for its codec, algorithm and P, on two numbers: the relative L2
// error e = ||y - s|| / ||s|| and the cosine c = <y, s> / (||y|| ||s||) with the exact sum s. Both
// bands are two-sided: an error below the band means the codec did not compress what it claims
// to; the cosine keeps a result that points elsewhere from passing where the error band holds 1
// (ring sign1 at P >= 3 is worse than returning zeros). For any y, e² = r² + 1 - 2rc with
// r = ||y|| / ||s||, and each family's model fixes the pair:
//   rounding noise  y = s + w, w ⊥ s                               c = 1 / sqrt(1 + e²)
//   projection      y = Πs (topk, randomk, powersgd)               c = r = sqrt(1 - e²)
//   sign1           r = 1 (sign × block RMS keeps a block's norm)  e² = 2 - 2c
// Slack, per family below: ~5 standard deviations of e (or c) over 40 input seeds at n = 4099,
// plus the model error named there. The inputs are seeded, so the run is deterministic: the slack
// is for the model, not for flakiness.

constexpr double kPi = std::numbers::pi;

struct LossyCase {
  AllReduceAlgo algo;
  const char* codec;
};

constexpr LossyCase kLossyCases[] = {
    {AllReduceAlgo::kRing, "fp16"},
    {AllReduceAlgo::kRing, "bf16"},
    {AllReduceAlgo::kRing, "int8"},
    {AllReduceAlgo::kRing, "fp8e4m3"},
    {AllReduceAlgo::kRing, "fp8e5m2"},
    {AllReduceAlgo::kRing, "int4"},
    {AllReduceAlgo::kRing, "sign1"},
    {AllReduceAlgo::kHierarchical, "int8"},
    {AllReduceAlgo::kHierarchical, "fp16"},
    {AllReduceAlgo::kHierarchical, "bf16"},
    {AllReduceAlgo::kHierarchical, "fp8e4m3"},
    {AllReduceAlgo::kHierarchical, "fp8e5m2"},
    {AllReduceAlgo::kHierarchical, "int4"},
    {AllReduceAlgo::kHierarchical, "sign1"},
    {AllReduceAlgo::kSparse, "topk:0.3"},
    {AllReduceAlgo::kHierarchical, "topk:0.3"},
    {AllReduceAlgo::kRing, "randomk:0.5"},
    {AllReduceAlgo::kTwoPhaseSign, "sign1"},
    {AllReduceAlgo::kPowerSgd, "powersgd:4"},
};
constexpr size_t kLossyN = 4099;
constexpr size_t kBlock = 64;  // Config()'s codec block

std::vector<int> LossyRankCounts(const LossyCase& c) {
  std::vector<int> out;
  for (int p : {1, 2, 3, 4, 8, 16})
    if (c.algo != AllReduceAlgo::kHierarchical || p % 2 == 0) out.push_back(p);
  // hier topk selects only between nodes/groups: with one group (2 and 4 ranks) nothing is
  // compressed, and the uncompressed sum is what it must give (the exact tests' domain).
  if (c.algo == AllReduceAlgo::kHierarchical && std::string_view(c.codec).starts_with("topk"))
    std::erase_if(out, [](int p) { return p < 8; });
  return out;
}

// hier in these tests: 2 ranks per node; with P % 4 == 0 also 2 nodes per group (depth 3).
AlgoConfig LossyConfig(const LossyCase& c, int ranks) {
  AlgoConfig cfg = Config(c.algo, c.codec);
  if (c.algo == AllReduceAlgo::kHierarchical) {
    cfg.ranks_per_node = 2;
    if (ranks % 4 == 0) cfg.nodes_per_group = 2;
  }
  return cfg;
}

struct Band {
  double err_lo, err_hi;        // ||y - s|| / ||s||
  double cos_lo, cos_hi;        // <y, s> / (||y|| ||s||)
  double err_model, cos_model;  // the model's point (consistent: some y has exactly these)
  std::string model;            // the derivation in one line, printed with every verdict
};

double NormalCdf(double x) { return 0.5 * std::erfc(-x / std::sqrt(2.0)); }
double NormalPdf(double x) { return std::exp(-0.5 * x * x) / std::sqrt(2.0 * kPi); }
double NormalQuantile(double p) {
  double lo = -40, hi = 40;
  for (int i = 0; i < 200; ++i) (NormalCdf(0.5 * (lo + hi)) < p ? lo : hi) = 0.5 * (lo + hi);
  return 0.5 * (lo + hi);
}

// E[max² over m i.i.d. |N(0,1)|] = ∫ 2x (1 - (2Φ(x) - 1)^m) dx: 6.914 for m = 64.
double ExpectedMaxSquare(size_t m) {
  double sum = 0;
  const double h = 1e-3;
  for (double x = h / 2; x < 12; x += h) sum += 2 * x * (1 - std::pow(2 * NormalCdf(x) - 1, double(m))) * h;
  return sum;
}

// Round-to-nearest to a float grid with M mantissa bits leaves an error uniform in ±ulp/2, ulp =
// 2^(e-M) on [2^e, 2^(e+1)): E[err²] / E[x²] = 4^-M E[4^e] / (12 E[x²]). For Gaussian x this is
// (0.2123 · 2^-M)², within ±0.2% at any scale (averaged over the scale's position in its octave).
double FloatGridFactor() {
  double acc = 0;
  for (int j = 0; j < 16; ++j) {
    const double s = std::pow(2.0, j / 16.0);
    double e4 = 0;
    for (int e = -40; e < 8; ++e) {
      const double lo = std::ldexp(1.0, e) / s, hi = 2 * lo;  // P(2^e <= |x| < 2^(e+1))
      e4 += std::ldexp(1.0, 2 * e) * 2 * (NormalCdf(hi) - NormalCdf(lo));
    }
    acc += e4 / (12 * s * s);
  }
  return std::sqrt(acc / 16);
}

// ε1: the relative rms error of ONE nearest rounding of Gaussian data by the codec (block 64).
//   fp16 / bf16: the float grid, 10 / 7 mantissa bits:                       2.07e-4 / 1.66e-3
//   fp8 (block scale absmax/448 or /57344): the float grid with 3 / 2 bits, but each block's
//   absmax lands exactly on the largest code: its share E[max²]/64 of the error energy is gone:
//                                                                            0.0251 / 0.0501
//   int8 / int4 (step absmax/127 or /7): uniform error step²/12, the absmax exact:
//   E[max²]/(12 q²)·63/64:                                                   0.00593 / 0.1076
double OneRounding(CodecKind k) {
  const double grid = FloatGridFactor(), max2 = ExpectedMaxSquare(kBlock), m = kBlock;
  switch (k) {
    case CodecKind::kFp16:
      return grid * std::ldexp(1.0, -10);
    case CodecKind::kBf16:
      return grid * std::ldexp(1.0, -7);
    case CodecKind::kFp8E4M3:
      return grid * std::ldexp(1.0, -3) * std::sqrt(1 - max2 / m);
    case CodecKind::kFp8E5M2:
      return grid * std::ldexp(1.0, -2) * std::sqrt(1 - max2 / m);
    case CodecKind::kInt8:
      return std::sqrt(max2 / (12.0 * 127 * 127) * (m - 1) / m);
    case CodecKind::kInt4:
      return std::sqrt(max2 / (12.0 * 7 * 7) * (m - 1) / m);
    default:
      return 0;
  }
}

// Where the element codecs round on the way to the result. Every rank first quantises its own
// contribution (P roundings of σ² data). Then a ring over `top` members, each holding the fp32 sum
// of `group` contributions: the chunk's first member encodes its part (exact when group = 1: the
// data is already on the grid), and hop j re-rounds the partial sum of j·group contributions.
// ring: group 1, top P. hier: the intra-node/-group steps are fp32; group = 2 (4 at depth 3),
// top = P / group, and a top of one member compresses nothing more.
struct Schedule {
  int ranks, group, top;
};
Schedule ScheduleOf(const LossyCase& c, int ranks) {
  if (c.algo != AllReduceAlgo::kHierarchical) return {ranks, 1, ranks};
  const int group = ranks % 4 == 0 ? 4 : 2;
  return {ranks, group, ranks / group};
}
// Σ over roundings of the rounded vector's energy, in units of one rank's (n σ²).
double RoundingWeight(const Schedule& s) {
  double w = s.ranks;
  if (s.top > 1) {
    if (s.group > 1) w += s.group;
    for (int j = 2; j <= s.top; ++j) w += j * s.group;
  }
  return w;
}

// sign1 (sign × RMS of the block): for a block g of m normals, <y, g> = RMS·||g||₁ and
// ||y|| = ||g||, so c = ||g||₁ / (√m ||g||₂), E[c] = a = sqrt(2/π)(1 + 1/(4m)) = 0.8010 (delta
// method), e = sqrt(2 - 2c) = 0.631.
double SignGain() { return std::sqrt(2 / kPi) * (1 + 1.0 / (4 * kBlock)); }
// When two ±const blocks of different RMS are added, the sum carries the signs of the larger; the
// larger of two block RMS values (each ≈ N(1, 1/(2m))) exceeds the mean by 1/sqrt(2πm) = 0.050.
double TieGain() { return 1 / std::sqrt(2 * kPi * kBlock); }

// Cosine of ring / hier sign1 with the exact sum, following the hops:
//  - top 1 (P = 1, hier P = 2, 4): y = Σ q_i with q_i = sign1(g_i): c = a (each q_i has <q_i, s> =
//    a·nσ², ||Σ q_i||² = Pnσ²), e = sqrt(2 - 2a) = 0.631.
//  - ring (group 1): hop 2 adds two ±const blocks: the larger RMS wins the signs (gain δ); from hop
//    3 on the running sum's magnitude √(j-1)σ exceeds any single q_j's σ, so every later hop keeps
//    the same signs and only rescales. The result is sign(g_w)·RMS(s) for one rank w per block:
//    c = a(1 + δ)/√P (P = 2: 0.595, 3: 0.486, 4: 0.421, 8: 0.297, 16: 0.210), e = sqrt(2 - 2c) > 1
//    from P = 3 on. This is what the code does (re-encoding of partial sums is not fed back).
//  - hier (group g > 1): the members' sums x_j are ≈ N(0, g) with <x_j, s> = g·a. z_1 = sign1(x_1):
//    K_1 = E[sign(z_1)·s] = sqrt(2/π)·a·√g (Bussgang). Hop j adds x_j to a ±√((j-1)g) block:
//    sign(u·σ + x), u = √(j-1): K_j = (2Φ(u) - 1)·K_{j-1} + 2φ(u)·a·√g. c = K_top / √P
//    (P = 8: 0.583, 16: 0.497).
double RingSignCosine(const Schedule& s) {
  const double a = SignGain();
  if (s.top == 1) return a;
  if (s.group == 1) return a * (1 + TieGain()) / std::sqrt(double(s.ranks));
  const double sg = std::sqrt(double(s.group));
  double k = std::sqrt(2 / kPi) * a * sg;
  for (int j = 2; j <= s.top; ++j) {
    const double u = std::sqrt(j - 1.0);
    k = (2 * NormalCdf(u) - 1) * k + 2 * NormalPdf(u) * a * sg;
  }
  return k / std::sqrt(double(s.ranks));
}

// sign2: the chunk's server sums the P worker wires q_i = ±c_i (c_i ≈ σ) and re-encodes once: the
// signs are the (scale-weighted) majority. E[sign(Σ q)·s_i] = C(P-1, ⌊P/2⌋) / 2^(P-1) =: M_P, so
// c = √P·a·M_P (P = 1: 0.801, 2: 0.566, 3: 0.694, 4: 0.601, 8: 0.619, 16: 0.629; → 2/π). For even P
// the ties (probability M_P) go to the larger scale: at most a further factor (1 + δ).
std::pair<double, double> TwoPhaseSignCosine(int p) {
  const double a = SignGain();
  double m = 1;  // C(p-1, p/2) / 2^(p-1)
  for (int i = 1; i <= p / 2; ++i) m *= double(p - 1 - p / 2 + i) / i;
  m /= std::ldexp(1.0, p - 1);
  const double c = std::sqrt(double(p)) * a * m;
  return {c, p % 2 == 0 ? c * (1 + TieGain()) : c};
}

// topk:R per rank keeps the k = ceil(Rn) largest |g| (the sampled threshold sees 4096 of the
// 4099 elements: as good as exact here): the kept energy of N(0,1) above t = Φ⁻¹(1 - R/2) is
// R + 2tφ(t), so e = sqrt(1 - R - 2tφ(t)) (R = 0.3: 0.465) for each rank, and for the sum of
// independent ranks (the kept parts and the dropped parts of different ranks are uncorrelated).
// hier: the same per top member, whose chunk of its group's fp32 sum is Gaussian too (k of each
// chunk: the ratio is the same).
double TopKError(double r) {
  const double t = NormalQuantile(1 - r / 2);
  return std::sqrt(1 - r - 2 * t * NormalPdf(t));
}

// Eigenvalues of a symmetric d × d matrix (cyclic Jacobi in double), largest first.
std::vector<double> SymmetricEigenvalues(std::vector<double> a, size_t d) {
  for (int sweep = 0; sweep < 60; ++sweep) {
    double off = 0, diag = 0;
    for (size_t p = 0; p < d; ++p)
      for (size_t q = 0; q < d; ++q) (p == q ? diag : off) += a[p * d + q] * a[p * d + q];
    if (off <= 1e-28 * diag) break;
    for (size_t p = 0; p < d; ++p)
      for (size_t q = p + 1; q < d; ++q) {
        if (a[p * d + q] == 0) continue;
        const double theta = (a[q * d + q] - a[p * d + p]) / (2 * a[p * d + q]);
        const double t = (theta >= 0 ? 1 : -1) / (std::fabs(theta) + std::sqrt(theta * theta + 1));
        const double c = 1 / std::sqrt(t * t + 1), s = t * c;
        for (size_t k = 0; k < d; ++k) {
          const double kp = a[k * d + p], kq = a[k * d + q];
          a[k * d + p] = c * kp - s * kq;
          a[k * d + q] = s * kp + c * kq;
        }
        for (size_t k = 0; k < d; ++k) {
          const double pk = a[p * d + k], qk = a[q * d + k];
          a[p * d + k] = c * pk - s * qk;
          a[q * d + k] = s * pk + c * qk;
        }
      }
  }
  std::vector<double> ev(d);
  for (size_t i = 0; i < d; ++i) ev[i] = a[i * d + i];
  std::sort(ev.begin(), ev.end(), std::greater<double>());
  return ev;
}

// powersgd:r does one power step on the summed matrix S (PowerSgdView: rows × cols, zero padded)
// from the shared start Q0: y = ΠS, Π the projector on span(S·Q0). So
//   e >= the best rank-r error sqrt(Σ_{i>r} λ_i / Σ λ_i), λ = eig(S·Sᵀ) (Eckart–Young), and
//   e <= sqrt(1 - ||S·Q̃||² / ||S||²), Q̃ an orthonormal basis of Q0: S·Q̃ lies in span(Π), so
//        ||ΠS|| >= ||ΠS·Q̃Q̃ᵀ|| = ||S·Q̃||.
// Q0 is the codec's documented start (codec.h: a normal draw seeded with spec.seed, cols × r,
// column-major; Codec::Prepare). Were the draw to change, the upper bound would still hold in
// expectation: a power step captures ~2× what a random r-subspace does (E||S·Q̃||² = r/cols·||S||²
// for a random start).
std::pair<double, double> PowerSgdBounds(const CodecSpec& spec, const std::vector<double>& s) {
  const MatrixView v = PowerSgdView(s.size());
  const size_t r = static_cast<size_t>(spec.rank);
  auto at = [&](size_t i, size_t j) { return i * v.cols + j < s.size() ? s[i * v.cols + j] : 0.0; };
  std::vector<double> gram(v.rows * v.rows, 0.0);
  double total = 0;
  for (size_t i = 0; i < v.rows; ++i)
    for (size_t k = 0; k < v.rows; ++k)
      for (size_t j = 0; j < v.cols; ++j) gram[i * v.rows + k] += at(i, j) * at(k, j);
  for (double x : s) total += x * x;
  const std::vector<double> ev = SymmetricEigenvalues(gram, v.rows);
  double tail = 0;
  for (size_t i = r; i < ev.size(); ++i) tail += std::max(0.0, ev[i]);
  std::vector<double> q(v.cols * r);
  {
    std::mt19937_64 rng(spec.seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (double& x : q) x = normal(rng);
  }
  double captured = 0;
  for (size_t c = 0; c < r; ++c) {  // modified Gram-Schmidt, then ||S·q̃_c||²
    double* qc = q.data() + v.cols * c;
    for (size_t d = 0; d < c; ++d) {
      const double* qd = q.data() + v.cols * d;
      double dot = 0;
      for (size_t j = 0; j < v.cols; ++j) dot += qc[j] * qd[j];
      for (size_t j = 0; j < v.cols; ++j) qc[j] -= dot * qd[j];
    }
    double norm = 0;
    for (size_t j = 0; j < v.cols; ++j) norm += qc[j] * qc[j];
    for (size_t j = 0; j < v.cols; ++j) qc[j] /= std::sqrt(norm);
    for (size_t i = 0; i < v.rows; ++i) {
      double sq = 0;
      for (size_t j = 0; j < v.cols; ++j) sq += at(i, j) * qc[j];
      captured += sq * sq;
    }
  }
  return {std::sqrt(tail / total), std::sqrt(1 - captured / total)};
}

Band NoiseBand(double eps, std::string model) {
  // Slack ±15%: the spread of e is 1.5-2% (5 sd ≈ 10%); the model is off by up to 5% (casts: a
  // hop adds values already on the grid, so its rounding error is not uniform; int4: the partial
  // sums of coarse values are not Gaussian).
  const double lo = 0.85 * eps, hi = 1.15 * eps;
  return {lo, hi, 1 / std::sqrt(1 + hi * hi), 1.0, eps, 1 / std::sqrt(1 + eps * eps), std::move(model)};
}
Band ProjectionBand(double lo, double hi, double model_err, std::string model) {
  return {lo,
          hi,
          std::sqrt(1 - hi * hi),
          std::sqrt(1 - lo * lo),
          model_err,
          std::sqrt(1 - model_err * model_err),
          std::move(model)};
}
Band SignBand(double c_lo, double c_hi, std::string model) {
  // Slack ±0.05 on c and on e: their spread over seeds is 0.005-0.013; the hier and tie models are
  // off by up to 0.015; ||y|| / ||s|| deviates from 1 by up to 3%, which moves e by up to 0.015.
  const double c = 0.5 * (c_lo + c_hi);
  return {std::sqrt(2 - 2 * c_hi) - 0.05,
          std::sqrt(2 - 2 * c_lo) + 0.05,
          c_lo - 0.05,
          c_hi + 0.05,
          std::sqrt(2 - 2 * c),
          c,
          std::move(model)};
}

Band LossyBand(const LossyCase& c, int ranks, const std::vector<double>& exact) {
  const CodecSpec spec = ParseCodec(c.codec);
  const Schedule sched = ScheduleOf(c, ranks);
  switch (spec.kind) {
    case CodecKind::kSign1: {
      if (c.algo == AllReduceAlgo::kTwoPhaseSign) {
        const auto [lo, hi] = TwoPhaseSignCosine(ranks);
        return SignBand(lo, hi, fmt::format("sign2: c = √P·a·M_P in [{:.3f}, {:.3f}]", lo, hi));
      }
      const double cm = RingSignCosine(sched);
      return SignBand(cm, cm,
                      fmt::format("sign1, ring of {} member(s) of {} rank(s): c = {:.3f}", sched.top, sched.group, cm));
    }
    case CodecKind::kTopK: {
      const double r = double(SparseCount(exact.size(), spec.ratio)) / double(exact.size());
      const double e = TopKError(r);
      // Slack ±0.03: the spread of e is 0.005-0.0075.
      return ProjectionBand(e - 0.03, e + 0.03, e, fmt::format("topk: e = sqrt(1 - R - 2tφ(t)) = {:.4f}", e));
    }
    case CodecKind::kRandomK: {
      // Shared indices, values not rescaled (RandomKDecode writes them as they are): y is s on the
      // k chosen elements, 0 elsewhere: e = sqrt(1 - k/n). Slack ±0.04: the spread of e is 0.008.
      const double k = double(SparseCount(exact.size(), spec.ratio));
      const double e = std::sqrt(1 - k / double(exact.size()));
      return ProjectionBand(e - 0.04, e + 0.04, e, fmt::format("randomk: e = sqrt(1 - k/n) = {:.4f}", e));
    }
    case CodecKind::kPowerSgd: {
      const auto [lo, hi] = PowerSgdBounds(spec, exact);
      // ±0.005: fp32 arithmetic only; the bounds are computed from this very sum.
      return ProjectionBand(lo - 0.005, hi + 0.005, 0.5 * (lo + hi),
                            fmt::format("powersgd: best rank-{} {:.4f} <= e <= start-subspace "
                                        "bound {:.4f}",
                                        spec.rank, lo, hi));
    }
    default: {
      // Independent roundings add in energy: e² = ε1² · W / P, W = Σ over roundings of the rounded
      // vector's energy in units of nσ² (RoundingWeight). ring: W = P + Σ_{k=2..P} k, so at P = 16
      // e = 3.07 ε1; hier: W = P + g(1 + 2 + … + top) when top > 1.
      const double w = RoundingWeight(sched), e1 = OneRounding(spec.kind);
      const double eps = e1 * std::sqrt(w / ranks);
      return NoiseBand(
          eps, fmt::format("{}: e = ε1·sqrt(W/P) = {:.4g}·sqrt({}/{}) = {:.4g}", CodecName(spec), e1, w, ranks, eps));
    }
  }
}

::testing::AssertionResult CheckLossy(const std::vector<float>& y, const std::vector<double>& s, const Band& band) {
  double num = 0, den = 0, dot = 0, yy = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (!std::isfinite(y[i])) return ::testing::AssertionFailure() << "element " << i << " is " << y[i];
    num += (y[i] - s[i]) * (y[i] - s[i]);
    den += s[i] * s[i];
    dot += y[i] * s[i];
    yy += double(y[i]) * y[i];
  }
  const double err = std::sqrt(num / den), cos = yy > 0 ? dot / std::sqrt(yy * den) : 0.0;
  const std::string text = fmt::format(
      "rel. L2 error {:.5g} in [{:.5g}, {:.5g}]? cosine {:.4f} in [{:.4f}, {:.4f}]? "
      "({})",
      err, band.err_lo, band.err_hi, cos, band.cos_lo, band.cos_hi, band.model);
  if (err < band.err_lo || err > band.err_hi || cos < band.cos_lo || cos > band.cos_hi)
    return ::testing::AssertionFailure() << text;
  return ::testing::AssertionSuccess() << text;
}

std::string LossyName(const LossyCase& c) {
  std::string s = std::string(AlgoName(c.algo)) + "_" + c.codec;
  for (char& ch : s)
    if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return s;
}

class LossyAlgo : public ::testing::TestWithParam<LossyCase> {};

TEST_P(LossyAlgo, IdenticalBitsAndWithinTheDerivedBand) {
  const LossyCase c = GetParam();
  for (int ranks : LossyRankCounts(c)) {
    const Outcome o = RunOnce(ranks, LossyConfig(c, ranks), kLossyN, false);
    const std::string what = fmt::format("{} {} ranks={}", AlgoName(c.algo), c.codec, ranks);
    ExpectIdenticalOnAllRanks(o, what);
    const auto want = ExactSum(ranks, kLossyN, false);
    EXPECT_TRUE(CheckLossy(o.results[0], want, LossyBand(c, ranks, want))) << what;
  }
}

INSTANTIATE_TEST_SUITE_P(Codecs, LossyAlgo, ::testing::ValuesIn(kLossyCases),
                         [](const auto& info) { return LossyName(info.param); });

// The check itself, for every case and rank count: an all-zero result, noise of the exact sum's
// norm, ten times the exact sum and the exact sum (nothing compressed) fail; a result built at the
// band's model point passes (the band is not empty).
TEST(LossyCheck, RejectsZerosGarbageAndUncompressedResultsForEveryCase) {
  for (const LossyCase& c : kLossyCases) {
    for (int ranks : LossyRankCounts(c)) {
      const std::string what = fmt::format("{} {} ranks={}", AlgoName(c.algo), c.codec, ranks);
      const auto want = ExactSum(ranks, kLossyN, false);
      const Band band = LossyBand(c, ranks, want);
      double norm = 0;
      for (double x : want) norm += x * x;
      norm = std::sqrt(norm);
      // A unit vector u ⊥ s from seeded noise.
      std::mt19937_64 rng(0xbad5eed + ranks);
      std::normal_distribution<double> normal;
      std::vector<double> u(kLossyN);
      double us = 0, uu = 0;
      for (double& x : u) x = normal(rng);
      for (size_t i = 0; i < kLossyN; ++i) us += u[i] * want[i] / norm;
      for (size_t i = 0; i < kLossyN; ++i) {
        u[i] -= us * want[i] / norm;
        uu += u[i] * u[i];
      }
      std::vector<float> zeros(kLossyN, 0.0f), noise(kLossyN), tenfold(kLossyN), exact(kLossyN), model(kLossyN);
      // The model point: y = r (c ŝ + sqrt(1 - c²) u) ||s||, r from e² = r² + 1 - 2rc.
      const double c0 = band.cos_model, e0 = band.err_model;
      const double r0 = c0 + std::sqrt(std::max(0.0, c0 * c0 - 1 + e0 * e0));
      for (size_t i = 0; i < kLossyN; ++i) {
        const double ui = u[i] / std::sqrt(uu);
        noise[i] = static_cast<float>(ui * norm);
        tenfold[i] = static_cast<float>(10 * want[i]);
        exact[i] = static_cast<float>(want[i]);
        model[i] = static_cast<float>(r0 * (c0 * want[i] + std::sqrt(1 - c0 * c0) * ui * norm));
      }
      EXPECT_FALSE(CheckLossy(zeros, want, band)) << what << ": an all-zero result passes";
      EXPECT_FALSE(CheckLossy(noise, want, band)) << what << ": noise of the right norm passes";
      EXPECT_FALSE(CheckLossy(tenfold, want, band)) << what << ": 10 × the exact sum passes";
      EXPECT_FALSE(CheckLossy(exact, want, band)) << what << ": the uncompressed sum passes";
      EXPECT_TRUE(CheckLossy(model, want, band)) << what << ": the band's own model point fails";
    }
  }
}

// ---- Error feedback over T steps ---------------------------------------------------------------
//
// For the schemes whose result is the sum of what each rank contributed (sparse, randomk, sign2,
// powersgd): per step, result + Σ_r residual_t = Σ_r (g_t + residual_{t-1}) up to the fp32
// rounding of the operations on the way (bounded per element below), so over T steps
// Σ_t result + Σ_r residual_T = Σ_t Σ_r g_t. With the residual bounded, the accumulated result
// converges to the accumulated gradient: its relative error is ||Σ_r residual_T|| / ||Σ_t Σ_r g_t||
// ~ B / √T, B = the residual's rms in units of a rank's gradient rms.
struct FeedbackCase {
  AllReduceAlgo algo;
  const char* codec;
};

struct FeedbackBand {
  double res_lo, res_hi;  // B: rms(residual_T of a rank) / rms(that rank's gradients)
  double acc_lo, acc_hi;  // ||Σ_t y_t - Σ_t s_t|| / ||Σ_t s_t||
  std::string model;
};

// Steady states (n = 2000, P = 4, T = 50):
//  topk:R — an element's residual random-walks (steps σ) until |e| crosses the selection
//    threshold θ and restarts at 0: the stationary density is the triangle (θ - |x|)/θ², whose
//    exit flux σ²/θ² must equal the selection rate R: B² = θ²/(6σ²) = 1/(6R) (R = 0.05: B = 1.826,
//    acc = 0.258). Ranks select independently: acc = B/√T. ±15% (the discrete walk overshoots θ;
//    measured -4.5%).
//  randomk:R — shared per-step indices, each element chosen with probability R per step: the
//    residual is the sum of the last L gradients, E[L] = (1-R)(1 - (1-R)^T)/R = 17.54:
//    B = sqrt(E[L]) = 4.19, acc = sqrt(E[L]/T) = 0.592. ±10% (spread 1-2%).
//  sign2 — the worker compresses e = g + residual with sign1: ||e - sign1(e)||² = κ||e||²,
//    κ = 2 - 2a = 0.398, and g ⊥ residual: B² = κ/(1-κ) = 0.661 (B = 0.813, ±10%). The server
//    adds κ/(1-κ)·(1 + B²) = 1.097 per rank; its residual is anti-correlated with the workers' (it
//    re-compresses their errors), so acc <= sqrt((0.661 + 1.097)/T) = 0.1875 only bounds (+10%).
//  powersgd:r — res = (I - Π)(g + res), Π the rank-r projector of the summed matrix; it captures
//    a fraction f of a rank's energy with r/rows <= f <= r(1 + sqrt(rows/cols))²/rows (a random
//    subspace; the top r directions at the Marchenko-Pastur edge): B² = (1-f)/f in [4.6, 21.5]
//    (±10%). Ranks share Π, so their residuals are anti-correlated: acc <= B_hi/√T.
FeedbackBand FeedbackBandOf(const FeedbackCase& c, size_t n, int steps) {
  const CodecSpec spec = ParseCodec(c.codec);
  const double t = steps;
  switch (spec.kind) {
    case CodecKind::kTopK: {
      const double r = double(SparseCount(n, spec.ratio)) / double(n), b = std::sqrt(1 / (6 * r));
      return {0.85 * b, 1.15 * b, 0.85 * b / std::sqrt(t), 1.15 * b / std::sqrt(t),
              fmt::format("topk: B = sqrt(1/(6R)) = {:.3f}", b)};
    }
    case CodecKind::kRandomK: {
      const double r = double(SparseCount(n, spec.ratio)) / double(n);
      const double age = (1 - r) * (1 - std::pow(1 - r, t)) / r, b = std::sqrt(age);
      return {0.9 * b, 1.1 * b, 0.9 * b / std::sqrt(t), 1.1 * b / std::sqrt(t),
              fmt::format("randomk: B = sqrt(E[L]) = {:.3f}", b)};
    }
    case CodecKind::kSign1: {
      const double kappa = 2 - 2 * SignGain(), w = kappa / (1 - kappa), server = w * (1 + w);
      return {0.9 * std::sqrt(w), 1.1 * std::sqrt(w), 0.0, 1.1 * std::sqrt((w + server) / t),
              fmt::format("sign2: B = sqrt(κ/(1-κ)) = {:.3f}", std::sqrt(w))};
    }
    case CodecKind::kPowerSgd: {
      const MatrixView v = PowerSgdView(n);
      const double r = spec.rank, f_lo = r / v.rows;
      const double f_hi = r * std::pow(1 + std::sqrt(double(v.rows) / v.cols), 2) / v.rows;
      const double b_lo = std::sqrt((1 - f_hi) / f_hi), b_hi = std::sqrt((1 - f_lo) / f_lo);
      return {0.9 * b_lo, 1.1 * b_hi, 0.0, 1.1 * b_hi / std::sqrt(t),
              fmt::format("powersgd: B in [{:.2f}, {:.2f}]", b_lo, b_hi)};
    }
    default:
      return {0, 0, 0, 0, "no error feedback"};
  }
}

// Per-step rounding allowance for element i, u = 2^-24 times (count × magnitude):
//  topk, randomk: e_r = g + res (1 rounding each), the P-1 additions of the result: u·P·Σ_r |e_r|.
//  sign2: worker e_r = g + res and res = e_r - q_r; the server's P-1 additions, e_s = sum + sres
//    and sres = e_s - q_s: u·(P+1)·(Σ_r (|g| + |res_prev| + |res|) + |sres_prev| + |sres|).
//  powersgd (rank r): M_r = g + res; res = M_r - Σ_c p_c q_rc (2r+1 roundings); Q = Σ_r Q_r (P-1)
//    and y = Σ_c p_c Q_c (2r). Every product sum is bounded by Σ_c |p_ic q_rjc| <= ||M_r(:, j)||
//    (rows of an orthonormal P have norm <= 1; Σ_c q_rjc² <= ||M_r(:, j)||², Bessel):
//    u·(4r + P + 2)·Σ_r (|M_r,i| + ||M_r(:, j)||).
class FeedbackInvariant : public ::testing::TestWithParam<FeedbackCase> {};

TEST_P(FeedbackInvariant, HoldsEveryStepAndTheAccumulatedSumConverges) {
  const FeedbackCase c = GetParam();
  const CodecSpec spec = ParseCodec(c.codec);
  const int ranks = 4, steps = 50;
  const size_t n = 2000;
  // Per step: rank 0's result; per rank: the gradient, the residual after, the server residual
  // after (spread over the full length, zero outside the rank's chunk).
  using PerRank = std::vector<std::vector<float>>;
  std::vector<std::vector<float>> result(steps);
  std::vector<PerRank> grad(steps, PerRank(ranks)), res(steps, PerRank(ranks)), sres(steps, PerRank(ranks));
  RunLocalRanks(ranks, [&](Communicator& comm) {
    const int me = comm.Rank();
    AllReduceEngine engine(comm, Config(c.algo, c.codec));
    CodecState st;
    for (int t = 0; t < steps; ++t) {
      std::vector<float> g = AllReduceGradient(me, n, static_cast<uint64_t>(t));
      grad[t][me] = g;
      engine.Run(g.data(), n, &st, false);
      if (me == 0) result[t] = g;
      res[t][me].assign(n, 0.0f);
      if (st.residual.bytes()) std::copy_n(st.residual.as<float>(), n, res[t][me].begin());
      sres[t][me].assign(n, 0.0f);
      if (st.server_residual.bytes()) {
        const size_t units = (n + kBlock - 1) / kBlock, b = units * me / ranks * kBlock;
        const size_t e = std::min(n, units * (me + 1) / ranks * kBlock);
        std::copy_n(st.server_residual.as<float>(), e - b, sres[t][me].begin() + b);
      }
    }
  });
  const double u = std::ldexp(1.0, -24);
  const MatrixView view = PowerSgdView(n);
  std::vector<double> allowed(n, 0.0), acc_y(n, 0.0), acc_s(n, 0.0);
  double worst = 0;  // max over steps and elements of |per-step identity error| / allowance
  for (int t = 0; t < steps; ++t) {
    std::vector<double> m(n, 0.0), delta(n, 0.0);
    // ||M_r(:, j)||² per rank and view column
    std::vector<std::vector<double>> col(ranks, std::vector<double>(view.cols, 0.0));
    for (int r = 0; r < ranks; ++r)
      for (size_t i = 0; i < n; ++i) {
        const double g = grad[t][r][i], prev = t ? res[t - 1][r][i] : 0.0;
        const double sprev = t ? sres[t - 1][r][i] : 0.0;
        delta[i] += res[t][r][i] + sres[t][r][i] - g - prev - sprev;
        switch (spec.kind) {
          case CodecKind::kSign1:
            m[i] +=
                std::fabs(g) + std::fabs(prev) + std::fabs(res[t][r][i]) + std::fabs(sprev) + std::fabs(sres[t][r][i]);
            break;
          case CodecKind::kPowerSgd:
            m[i] += std::fabs(g + prev);
            col[r][i % view.cols] += (g + prev) * (g + prev);
            break;
          default:
            m[i] += std::fabs(g + prev);
        }
      }
    for (size_t i = 0; i < n; ++i) {
      double bound;
      switch (spec.kind) {
        case CodecKind::kSign1:
          bound = u * (ranks + 1) * m[i];
          break;
        case CodecKind::kPowerSgd: {
          double cols = 0;
          for (int r = 0; r < ranks; ++r) cols += std::sqrt(col[r][i % view.cols]);
          bound = u * (4 * spec.rank + ranks + 2) * (m[i] + cols);
          break;
        }
        default:
          bound = u * ranks * m[i];
      }
      delta[i] += result[t][i];
      worst = std::max(worst, std::fabs(delta[i]) / bound);
      allowed[i] += bound;
      acc_y[i] += result[t][i];
      for (int r = 0; r < ranks; ++r) acc_s[i] += grad[t][r][i];
    }
  }
  const std::string what = fmt::format("{} {}", AlgoName(c.algo), c.codec);
  EXPECT_LE(worst, 1.0) << what
                        << ": a step's result + residuals differ from its inputs by more "
                           "than rounding";
  // The invariant over all steps, as the runtime documents it.
  double err = 0, tot = 0;
  for (size_t i = 0; i < n; ++i) {
    double residuals = 0;
    for (int r = 0; r < ranks; ++r) residuals += res[steps - 1][r][i] + sres[steps - 1][r][i];
    ASSERT_LE(std::fabs(acc_y[i] + residuals - acc_s[i]), allowed[i]) << what << " element " << i;
    err += (acc_y[i] - acc_s[i]) * (acc_y[i] - acc_s[i]);
    tot += acc_s[i] * acc_s[i];
  }
  const FeedbackBand band = FeedbackBandOf(c, n, steps);
  for (int r = 0; r < ranks; ++r) {
    double rr = 0, gg = 0;
    for (size_t i = 0; i < n; ++i) rr += double(res[steps - 1][r][i]) * res[steps - 1][r][i];
    for (int t = 0; t < steps; ++t)
      for (size_t i = 0; i < n; ++i) gg += double(grad[t][r][i]) * grad[t][r][i];
    const double b = std::sqrt(rr / n) / std::sqrt(gg / (n * steps));
    EXPECT_GE(b, band.res_lo) << what << " rank " << r << " (" << band.model << ")";
    EXPECT_LE(b, band.res_hi) << what << " rank " << r << " (" << band.model << ")";
  }
  const double acc = std::sqrt(err / tot);
  EXPECT_GE(acc, band.acc_lo) << what << ": accumulated result vs gradient (" << band.model << ")";
  EXPECT_LE(acc, band.acc_hi) << what << ": accumulated result vs gradient (" << band.model << ")";
}

INSTANTIATE_TEST_SUITE_P(LossyFeedback, FeedbackInvariant,
                         ::testing::Values(FeedbackCase{AllReduceAlgo::kSparse, "topk:0.05"},
                                           FeedbackCase{AllReduceAlgo::kRing, "randomk:0.05"},
                                           FeedbackCase{AllReduceAlgo::kTwoPhaseSign, "sign1"},
                                           FeedbackCase{AllReduceAlgo::kPowerSgd, "powersgd:2"}),
                         [](const auto& info) { return std::string(AlgoName(info.param.algo)); });

TEST(AllReduceAlgo, AlgorithmCodecMismatchIsAUsageError) {
  RunLocalRanks(1, [](Communicator& comm) {
    EXPECT_THROW(AllReduceEngine(comm, Config(AllReduceAlgo::kRecursiveDoubling, "int8")), UsageError);
    EXPECT_THROW(AllReduceEngine(comm, Config(AllReduceAlgo::kSparse, "int8")), UsageError);
    EXPECT_THROW(AllReduceEngine(comm, Config(AllReduceAlgo::kRing, "topk:0.1")), UsageError);
    EXPECT_THROW(ParseAlgo("tree"), UsageError);
  });
}

TEST(AllReduceAlgo, NativeInFp32IsTheTransportsExactAllreduce) {
  for (int ranks : {1, 2, 3, 5}) {
    const size_t n = 1001;
    const Outcome o = RunOnce(ranks, Config(AllReduceAlgo::kNative, "none"), n, true);
    const auto want = ExactSum(ranks, n, true);
    ExpectIdenticalOnAllRanks(o, "native fp32");
    for (size_t i = 0; i < n; ++i)
      ASSERT_EQ(o.results[0][i], static_cast<float>(want[i])) << "ranks=" << ranks << " i=" << i;
  }
}

// A 16-bit reduction: identical bits on every rank, within the format's rounding of the exact sum
// (one rounding of the pre-scaled input, one per reduction step), for sums and means, and no
// overflow where the 16-bit sum of the raw values would leave fp16's range.
TEST(AllReduceAlgo, NativeIn16BitsRoundsLikeTheFormatAndCannotOverflow) {
  for (DType prec : {DType::kBFloat16, DType::kFloat16}) {
    const double unit = prec == DType::kBFloat16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11);  // half an ulp
    for (int ranks : {1, 2, 3, 4, 8}) {
      for (bool average : {false, true}) {
        const size_t n = 2049;
        AlgoConfig cfg = Config(AllReduceAlgo::kNative, "none");
        cfg.precision = prec;
        Outcome o;
        o.results.resize(ranks);
        RunLocalRanks(ranks, [&](Communicator& comm) {
          AllReduceEngine engine(comm, cfg);
          std::vector<float> data = AllReduceGradient(comm.Rank(), n, 0, true);  // |x| <= 1000
          for (float& x : data) x *= 50.0f;                                      // up to 50000: sums pass 65504
          engine.Run(data.data(), n, nullptr, average);
          o.results[comm.Rank()] = data;
        });
        const std::string what = fmt::format("{} ranks={} average={}", DTypeName(prec), ranks, average);
        ExpectIdenticalOnAllRanks(o, what);
        const auto sum = ExactSum(ranks, n, true);
        double max_abs = 0;
        for (int r = 0; r < ranks; ++r)
          for (float x : AllReduceGradient(r, n, 0, true)) max_abs = std::max(max_abs, 50.0 * std::fabs(x));
        // Worst case over the pre-scaled addends y = x/P (|y| <= m): P input roundings of u·m and a
        // step rounding of u·k·m after the k-th addend: u·m·(P + P(P+1)/2); a sum is that × P.
        const double p = ranks, m = max_abs / p;
        const double bound = unit * m * (p + p * (p + 1) / 2) * (average ? 1 : p);
        double largest = 0;
        for (size_t i = 0; i < n; ++i) {
          const double want = 50.0 * sum[i] / (average ? ranks : 1);
          largest = std::max(largest, std::fabs(want));
          ASSERT_TRUE(std::isfinite(o.results[0][i])) << what << " i=" << i;
          ASSERT_LE(std::fabs(o.results[0][i] - want), bound) << what << " i=" << i;
        }
        if (!average && ranks >= 2) {
          EXPECT_GT(largest, 65504.0) << what << ": the data must pass fp16's range";
        }
      }
    }
  }
}

TEST(AllReduceAlgo, A16BitPrecisionIsTheNativeAlgorithmsOnly) {
  RunLocalRanks(1, [](Communicator& comm) {
    AlgoConfig ring = Config(AllReduceAlgo::kRing, "none");
    ring.precision = DType::kBFloat16;
    EXPECT_THROW(AllReduceEngine(comm, ring), UsageError);
    AlgoConfig fp8 = Config(AllReduceAlgo::kNative, "none");
    fp8.precision = DType::kFloat8E4M3;
    EXPECT_THROW(AllReduceEngine(comm, fp8), UsageError);
    EXPECT_THROW(AllReduceEngine(comm, Config(AllReduceAlgo::kNative, "int8")), UsageError);
    EXPECT_THROW(ParsePrecision("fp64"), UsageError);
    EXPECT_EQ(ParsePrecision("bf16"), DType::kBFloat16);
  });
}

TEST(AllReduceAlgo, UnequalNodesAreRefused) {
  EXPECT_THROW(RunLocalRanks(3,
                             [](Communicator& comm) {
                               AllReduceEngine e(comm, Config(AllReduceAlgo::kHierarchical, "none", 4096, 2));
                               std::vector<float> d(10, 1.0f);
                               e.Run(d.data(), d.size(), nullptr, false);
                             }),
               UsageError);
}

}  // namespace
}  // namespace ciuic

namespace ciuic {
namespace {

RuntimeConfig RtConfig(const char* codec, size_t bucket_bytes) {
  RuntimeConfig c;
  c.algo.codec = ParseCodec(codec);
  c.algo.codec.block = 64;
  c.bucket_bytes = bucket_bytes;
  return c;
}

TEST(Runtime, SaveThenLoadMidRunContinuesBitIdentically) {
  for (const char* codec : {"int8", "topk:0.05", "sign1", "powersgd:2", "fp8e4m3"}) {
    const int ranks = 3;
    const size_t n = 3000;
    std::vector<std::vector<float>> straight(ranks), resumed(ranks);
    const std::string dir = ::testing::TempDir();
    RunLocalRanks(ranks, [&](Communicator& comm) {
      const std::string path = dir + "/ciuic_state_" + std::to_string(comm.Rank()) + ".bin";
      Runtime rt(comm, RtConfig(codec, 4000));  // 3000 floats: 3 buckets of 1000
      for (int t = 0; t < 20; ++t) {
        if (t == 10) rt.Save(path);
        std::vector<float> g = AllReduceGradient(comm.Rank(), n, static_cast<uint64_t>(t));
        rt.AllReduce(g.data(), n, 42);
        if (t == 19) straight[comm.Rank()] = g;
      }
      Runtime again(comm, RtConfig(codec, 4000));
      again.Load(path);
      for (int t = 10; t < 20; ++t) {
        std::vector<float> g = AllReduceGradient(comm.Rank(), n, static_cast<uint64_t>(t));
        again.AllReduce(g.data(), n, 42);
        if (t == 19) resumed[comm.Rank()] = g;
      }
      std::remove(path.c_str());
    });
    for (int r = 0; r < ranks; ++r)
      ASSERT_EQ(0, std::memcmp(straight[r].data(), resumed[r].data(), n * 4)) << codec << " rank " << r;
  }
}

TEST(Runtime, LoadRefusesAnotherWorldSizeOrCodecAndKeepsItsState) {
  const std::string path = ::testing::TempDir() + "/ciuic_state_world.bin";
  RunLocalRanks(2, [&](Communicator& comm) {
    Runtime rt(comm, RtConfig("int8", 1 << 20));
    std::vector<float> g = AllReduceGradient(comm.Rank(), 100, 0);
    rt.AllReduce(g.data(), g.size(), 1);
    if (comm.Rank() == 0) rt.Save(path);
  });
  RunLocalRanks(3, [&](Communicator& comm) {
    Runtime rt(comm, RtConfig("int8", 1 << 20));
    std::vector<float> g = AllReduceGradient(comm.Rank(), 100, 0);
    rt.AllReduce(g.data(), g.size(), 1);
    EXPECT_THROW(rt.Load(path), InputError);
    EXPECT_EQ(rt.StateCount(), 1u);
  });
  RunLocalRanks(2, [&](Communicator& comm) {
    Runtime rt(comm, RtConfig("fp8e4m3", 1 << 20));
    EXPECT_THROW(rt.Load(path), InputError);  // collective: every rank calls it
  });
  std::remove(path.c_str());
}

TEST(Runtime, TensorListIsBucketedAndExact) {
  const int ranks = 4;
  RunLocalRanks(ranks, [&](Communicator& comm) {
    Runtime rt(comm, RtConfig("none", 1000 * 4));
    std::vector<std::vector<float>> ts;
    std::vector<TensorRef> refs;
    std::vector<uint64_t> ids;
    for (int t = 0; t < 30; ++t) {
      ts.push_back(AllReduceGradient(comm.Rank(), 1 + (t * 97) % 700, static_cast<uint64_t>(t), true));
      ids.push_back(static_cast<uint64_t>(t));
    }
    ts.push_back(AllReduceGradient(comm.Rank(), 2500, 99, true));  // larger than a bucket: split on its own
    ids.push_back(99);
    for (auto& t : ts) refs.push_back({t.data(), t.size()});
    rt.AllReduceTensors(refs, ids);
    for (size_t t = 0; t < ts.size(); ++t) {
      std::vector<double> want(ts[t].size(), 0.0);
      for (int r = 0; r < ranks; ++r) {
        const auto g = AllReduceGradient(r, ts[t].size(), t < 30 ? t : 99, true);
        for (size_t i = 0; i < g.size(); ++i) want[i] += g[i];
      }
      for (size_t i = 0; i < ts[t].size(); ++i)
        ASSERT_EQ(ts[t][i], static_cast<float>(want[i])) << "tensor " << t << " element " << i;
    }
    EXPECT_GT(rt.StateCount(), 1u);
  });
}

TEST(Runtime, NanOnOneRankFailsEveryRankWithoutHanging) {
  std::atomic<int> failed{0};
  RunLocalRanks(3, [&](Communicator& comm) {
    Runtime rt(comm, RtConfig("int8", 1 << 20));
    std::vector<float> g = AllReduceGradient(comm.Rank(), 500, 0);
    if (comm.Rank() == 1) g[77] = NAN;
    try {
      rt.AllReduce(g.data(), g.size(), 5);
    } catch (const InputError&) {
      ++failed;
    }
  });
  EXPECT_EQ(failed.load(), 3);
}

}  // namespace
}  // namespace ciuic
