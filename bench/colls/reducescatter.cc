// reducescatter: rank r ends with slice r of the reduction of all ranks' buffers.
// size = the full (send) buffer; busbw factor (n-1)/n.
#include "bench/coll_spec.h"

namespace ciuic {

namespace {

CollCounts ReduceScatterCounts(uint64_t bytes, size_t es, const CollArgs& a) {
  CollCounts c;
  c.recv = bytes / (es * a.nranks);
  c.send = c.recv * a.nranks;
  c.inplace_recv_offset = c.recv * a.rank;
  return c;
}

void ReduceScatterLaunch(Communicator& comm, const void* send, void* recv, const CollCounts& c, const CollArgs& a) {
  comm.ReduceScatter(send, recv, c.recv, a.type, a.op);
}

bool ReduceScatterExpected(const void* ctx, uint64_t k, double* out) {
  const auto& x = *static_cast<const ExpectContext*>(ctx);
  *out = x.pattern->Reduced(x.args.rank * x.counts.recv + k);
  return true;
}

}  // namespace

const CollSpec kReduceScatterSpec{Collective::kReduceScatter,
                                  "reducescatter",
                                  "reduce across ranks, slice r of the result on rank r",
                                  true,
                                  false,
                                  [](int n) { return (n - 1.0) / n; },
                                  ReduceScatterCounts,
                                  ReduceScatterLaunch,
                                  ReduceScatterExpected};

}  // namespace ciuic
