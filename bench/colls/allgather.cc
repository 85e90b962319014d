// allgather: every rank ends with all ranks' buffers concatenated in rank order.
// size = the gathered (receive) buffer; busbw factor (n-1)/n.
#include "bench/coll_spec.h"

namespace ciuic {

namespace {

CollCounts AllGatherCounts(uint64_t bytes, size_t es, const CollArgs& a) {
  CollCounts c;
  c.send = bytes / (es * a.nranks);
  c.recv = c.send * a.nranks;
  c.inplace_send_offset = c.send * a.rank;
  return c;
}

void AllGatherLaunch(Communicator& comm, const void* send, void* recv, const CollCounts& c, const CollArgs& a) {
  comm.AllGather(send, recv, c.send, a.type);
}

bool AllGatherExpected(const void* ctx, uint64_t k, double* out) {
  const auto& x = *static_cast<const ExpectContext*>(ctx);
  *out = x.pattern->Value(static_cast<int>(k / x.counts.send), k % x.counts.send);
  return true;
}

}  // namespace

const CollSpec kAllGatherSpec{Collective::kAllGather,
                              "allgather",
                              "gather every rank's buffer on every rank",
                              false,
                              false,
                              [](int n) { return (n - 1.0) / n; },
                              AllGatherCounts,
                              AllGatherLaunch,
                              AllGatherExpected};

}  // namespace ciuic
