// Message tags stay within what the transport accepts: MPI guarantees only 32767 (MPI_TAG_UB may be
// larger), and the pipelined ring numbers its pieces. A transport that refuses any tag above a small
// MaxTag still completes a ring of thousands of pieces, exactly.
#include <gtest/gtest.h>

#include <random>
#include <utility>
#include <vector>

#include "collectives/algorithms/allreduce.h"
#include "collectives/backends/local/communicator.h"
#include "core/error.h"
#include "tests/collectives/forwarding_comm.h"

namespace ciuic {
namespace {

// At every tag limit down to a single tag, in and out of place, 2-4 ranks, ragged ends: exact.
TEST(Tags, ThePipelinedRingWrapsItsPieceTagsAtTheTransportsMaxTag) {
  const size_t n = 3 * 64 * 1024 + 777;  // 4 KiB pieces: 48-96 per chunk and hop, far beyond tag 7; ragged ends
  for (const auto& world : std::vector<std::pair<int, int>>{{3, 7}, {2, 1}, {2, 0}, {4, 1}}) {
    const int ranks = world.first, max_tag = world.second;  // plain variables: lambdas capture them
    for (bool in_place : {true, false}) {
      RunLocalRanks(ranks, [&](Communicator& base) {
        SmallTags comm(base, max_tag);
        AlgoConfig cfg;
        cfg.algo = AllReduceAlgo::kRing;
        cfg.piece_bytes = 4096;
        cfg.in_flight = 4;
        cfg.uncached_bytes = 4096;  // out of place, the streamed results too
        cfg.staged_bytes = 0;       // the ring over the transport (its pieces, their tags)
        AllReduceEngine engine(comm, cfg);
        std::vector<float> x(n), out(n, -1.0f);
        for (size_t i = 0; i < n; ++i) x[i] = static_cast<float>((i * 7 + comm.Rank() * 13) % 101);
        const std::vector<float> mine = x;
        if (in_place) {
          engine.Run(x.data(), n, nullptr, false);
        } else {
          engine.Run(x.data(), out.data(), n, nullptr, false);
          ASSERT_EQ(x, mine) << "the source changed";
          x = out;
        }
        for (size_t i = 0; i < n; ++i) {
          float want = 0;
          for (int r = 0; r < ranks; ++r) want += static_cast<float>((i * 7 + r * 13) % 101);
          ASSERT_EQ(x[i], want) << ranks << " ranks, max tag " << max_tag << (in_place ? ", in place" : "") << ": rank "
                                << comm.Rank() << " element " << i;
        }
        EXPECT_EQ(engine.counters().staged_calls, 0u);
      });
    }
  }
}

}  // namespace
}  // namespace ciuic
