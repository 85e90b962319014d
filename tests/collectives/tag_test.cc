// Message tags stay within what the transport accepts: MPI guarantees only 32767 (MPI_TAG_UB may be
// larger), and the pipelined ring numbers its pieces. A transport that refuses any tag above a small
// MaxTag still completes a ring of thousands of pieces, exactly.
#include <gtest/gtest.h>

#include <random>

#include "collectives/algorithms/allreduce.h"
#include "collectives/backends/local/communicator.h"
#include "core/error.h"

namespace ciuic {
namespace {

// Forwards to a transport and refuses tags above max_tag, as an MPI with a small MPI_TAG_UB would.
class SmallTags : public Communicator {
 public:
  SmallTags(Communicator& t, int max_tag) : t_(t), max_tag_(max_tag) {}
  int Rank() const override { return t_.Rank(); }
  int Size() const override { return t_.Size(); }
  DeviceKind Device() const override { return t_.Device(); }
  std::string BackendName() const override { return "small-tags"; }
  bool Supports(Collective c, DType t, ReduceOp op, bool ip) const override { return t_.Supports(c, t, op, ip); }
  int MaxTag() const override { return max_tag_; }
  RequestPtr ISend(const void* b, size_t n, int peer, int tag) override {
    Check(tag);
    return t_.ISend(b, n, peer, tag);
  }
  RequestPtr IRecv(void* b, size_t n, int peer, int tag) override {
    Check(tag);
    return t_.IRecv(b, n, peer, tag);
  }
  void Wait(Request& r) override { t_.Wait(r); }
  void AllReduce(const void* s, void* r, size_t n, DType t, ReduceOp op) override { t_.AllReduce(s, r, n, t, op); }
  void AllGather(const void* s, void* r, size_t n, DType t) override { t_.AllGather(s, r, n, t); }
  void ReduceScatter(const void* s, void* r, size_t n, DType t, ReduceOp op) override {
    t_.ReduceScatter(s, r, n, t, op);
  }
  void Broadcast(const void* s, void* r, size_t n, DType t, int root) override { t_.Broadcast(s, r, n, t, root); }
  void Reduce(const void* s, void* r, size_t n, DType t, ReduceOp op, int root) override {
    t_.Reduce(s, r, n, t, op, root);
  }
  void AllToAll(const void* s, void* r, size_t n, DType t) override { t_.AllToAll(s, r, n, t); }
  void SendRecv(const void* s, int sp, void* r, int rp, size_t n, DType t) override { t_.SendRecv(s, sp, r, rp, n, t); }
  void Barrier() override { t_.Barrier(); }
  std::unique_ptr<Communicator> Split(int, int) override { throw UsageError("not in this test"); }
  void HostAllReduce(double* v, size_t n, ReduceOp op) override { t_.HostAllReduce(v, n, op); }
  void HostAllGather(const void* s, void* r, size_t n) override { t_.HostAllGather(s, r, n); }

 private:
  void Check(int tag) const {
    if (tag < 0 || tag > max_tag_) throw RuntimeError(fmt::format("tag {} outside 0..{}", tag, max_tag_));
  }
  Communicator& t_;
  int max_tag_;
};

TEST(Tags, ThePipelinedRingWrapsItsPieceTagsAtTheTransportsMaxTag) {
  const size_t n = 3 * 1000 * 1024;  // 4 KiB pieces: ~1000 per chunk and hop, far beyond tag 7
  RunLocalRanks(3, [&](Communicator& base) {
    SmallTags comm(base, 7);
    AlgoConfig cfg;
    cfg.algo = AllReduceAlgo::kRing;
    cfg.piece_bytes = 4096;
    cfg.in_flight = 4;
    AllReduceEngine engine(comm, cfg);
    std::vector<float> x(n);
    for (size_t i = 0; i < n; ++i) x[i] = static_cast<float>((i * 7 + comm.Rank() * 13) % 101);
    engine.Run(x.data(), n, nullptr, false);
    for (size_t i = 0; i < n; ++i) {
      float want = 0;
      for (int r = 0; r < 3; ++r) want += static_cast<float>((i * 7 + r * 13) % 101);
      ASSERT_EQ(x[i], want) << "rank " << comm.Rank() << " element " << i;
    }
  });
}

}  // namespace
}  // namespace ciuic
