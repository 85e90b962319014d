// alltoall: block j of rank i's send buffer ends as block i of rank j's receive buffer.
// busbw factor (n-1)/n (one block of n stays local).
#include "bench/coll_spec.h"

namespace ciuic {

namespace {

CollCounts AllToAllCounts(uint64_t bytes, size_t es, const CollArgs& a) {
  CollCounts c;
  const size_t per_peer = bytes / (es * a.nranks);
  c.send = c.recv = per_peer * a.nranks;
  return c;
}

void AllToAllLaunch(Communicator& comm, const void* send, void* recv, const CollCounts& c, const CollArgs& a) {
  comm.AllToAll(send, recv, c.recv / a.nranks, a.type);
}

bool AllToAllExpected(const void* ctx, uint64_t k, double* out) {
  const auto& x = *static_cast<const ExpectContext*>(ctx);
  const uint64_t per_peer = x.counts.recv / x.args.nranks;
  const int src = static_cast<int>(k / per_peer);
  *out = x.pattern->Value(src, x.args.rank * per_peer + k % per_peer);
  return true;
}

}  // namespace

const CollSpec kAllToAllSpec{Collective::kAllToAll,
                             "alltoall",
                             "exchange one block between every pair of ranks",
                             false,
                             false,
                             [](int n) { return (n - 1.0) / n; },
                             AllToAllCounts,
                             AllToAllLaunch,
                             AllToAllExpected};

}  // namespace ciuic
