// allreduce: every rank ends with the reduction of all ranks' buffers.
// busbw factor 2(n-1)/n: a ring moves each byte n-1 times in reduce-scatter and n-1 in allgather.
#include "bench/coll_spec.h"

namespace ciuic {

namespace {

CollCounts AllReduceCounts(uint64_t bytes, size_t es, const CollArgs&) {
  CollCounts c;
  c.send = c.recv = bytes / es;
  return c;
}

void AllReduceLaunch(Communicator& comm, const void* send, void* recv, const CollCounts& c, const CollArgs& a) {
  comm.AllReduce(send, recv, c.recv, a.type, a.op);
}

bool AllReduceExpected(const void* ctx, uint64_t k, double* out) {
  const auto& x = *static_cast<const ExpectContext*>(ctx);
  *out = x.pattern->Reduced(k);
  return true;
}

}  // namespace

const CollSpec kAllReduceSpec{Collective::kAllReduce,
                              "allreduce",
                              "reduce across ranks, result on every rank",
                              true,
                              false,
                              [](int n) { return 2.0 * (n - 1) / n; },
                              AllReduceCounts,
                              AllReduceLaunch,
                              AllReduceExpected};

}  // namespace ciuic
