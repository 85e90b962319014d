// reduce: the root ends with the reduction of all ranks' buffers; other receive buffers are
// undefined and not checked. busbw factor 1.
#include "bench/coll_spec.h"

namespace ciuic {

namespace {

CollCounts ReduceCounts(uint64_t bytes, size_t es, const CollArgs&) {
  CollCounts c;
  c.send = c.recv = bytes / es;
  return c;
}

void ReduceLaunch(Communicator& comm, const void* send, void* recv, const CollCounts& c, const CollArgs& a) {
  comm.Reduce(send, recv, c.recv, a.type, a.op, a.root);
}

bool ReduceExpected(const void* ctx, uint64_t k, double* out) {
  const auto& x = *static_cast<const ExpectContext*>(ctx);
  if (x.args.rank != x.args.root) return false;
  *out = x.pattern->Reduced(k);
  return true;
}

}  // namespace

const CollSpec kReduceSpec{Collective::kReduce,
                           "reduce",
                           "reduce across ranks, result on the root",
                           true,
                           true,
                           [](int) { return 1.0; },
                           ReduceCounts,
                           ReduceLaunch,
                           ReduceExpected};

}  // namespace ciuic
