// sendrecv: every rank sends its buffer to rank+1 and receives from rank-1 (a ring shift), so all
// links are busy at once. busbw factor 1.
#include "bench/coll_spec.h"

namespace ciuic {

namespace {

CollCounts SendRecvCounts(uint64_t bytes, size_t es, const CollArgs&) {
  CollCounts c;
  c.send = c.recv = bytes / es;
  return c;
}

void SendRecvLaunch(Communicator& comm, const void* send, void* recv, const CollCounts& c, const CollArgs& a) {
  const int n = a.nranks;
  comm.SendRecv(send, (a.rank + 1) % n, recv, (a.rank + n - 1) % n, c.recv, a.type);
}

bool SendRecvExpected(const void* ctx, uint64_t k, double* out) {
  const auto& x = *static_cast<const ExpectContext*>(ctx);
  *out = x.pattern->Value((x.args.rank + x.args.nranks - 1) % x.args.nranks, k);
  return true;
}

}  // namespace

const CollSpec kSendRecvSpec{Collective::kSendRecv,
                             "sendrecv",
                             "send to rank+1 while receiving from rank-1",
                             false,
                             false,
                             [](int) { return 1.0; },
                             SendRecvCounts,
                             SendRecvLaunch,
                             SendRecvExpected};

}  // namespace ciuic
