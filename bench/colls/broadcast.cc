// broadcast: every rank ends with the root's buffer. busbw factor 1.
#include "bench/coll_spec.h"

namespace ciuic {

namespace {

CollCounts BroadcastCounts(uint64_t bytes, size_t es, const CollArgs&) {
  CollCounts c;
  c.send = c.recv = bytes / es;
  return c;
}

void BroadcastLaunch(Communicator& comm, const void* send, void* recv, const CollCounts& c, const CollArgs& a) {
  comm.Broadcast(send, recv, c.recv, a.type, a.root);
}

bool BroadcastExpected(const void* ctx, uint64_t k, double* out) {
  const auto& x = *static_cast<const ExpectContext*>(ctx);
  *out = x.pattern->Value(x.args.root, k);
  return true;
}

}  // namespace

const CollSpec kBroadcastSpec{Collective::kBroadcast,
                              "broadcast",
                              "copy the root's buffer to every rank",
                              false,
                              true,
                              [](int) { return 1.0; },
                              BroadcastCounts,
                              BroadcastLaunch,
                              BroadcastExpected};

}  // namespace ciuic
