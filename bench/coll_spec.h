#pragma once
// What ciuic-bench needs to know about one collective: how a requested size becomes element
// counts, how to launch it, its busbw factor, and the exact expected contents of every receive
// buffer. One file per collective in bench/colls/, one entry each in bench/colls/registry.cc.
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "bench/pattern.h"
#include "collectives/communicator.h"

namespace ciuic {

// Element counts of one rank's buffers. `size` (bytes of the larger buffer) is what the table's
// size column shows, as nccl-tests; in-place uses one buffer of max(send, recv) elements with the
// send and receive views at the given element offsets.
struct CollCounts {
  size_t send = 0;
  size_t recv = 0;
  size_t inplace_send_offset = 0;
  size_t inplace_recv_offset = 0;
  size_t Larger() const { return send > recv ? send : recv; }
};

struct CollArgs {
  int rank = 0;
  int nranks = 1;
  int root = 0;
  DType type = DType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
};

struct ExpectContext {
  const InputPattern* pattern;
  CollArgs args;
  CollCounts counts;
};

struct CollSpec {
  Collective kind;
  const char* name;
  const char* summary;
  bool reduces;
  bool rooted;
  // busbw = algbw * factor: the bytes each rank must move over the bottleneck link per byte of
  // algorithm bandwidth on a flat topology (nccl-tests' definition).
  double (*busbw_factor)(int nranks);
  // Counts for `bytes` requested (per rank buffer); all zero when the size is too small.
  CollCounts (*counts)(uint64_t bytes, size_t elem_size, const CollArgs& a);
  void (*launch)(Communicator& comm, const void* send, void* recv, const CollCounts& c, const CollArgs& a);
  // Expected recv element k (ctx is an ExpectContext); false where undefined (reduce off root).
  ExpectFn expected;
};

const std::vector<const CollSpec*>& AllCollectives();
const CollSpec* FindCollective(std::string_view name);  // nullptr when unknown

PatternKind PatternFor(const CollSpec& spec, ReduceOp op);

// The specs (defined one per file in bench/colls/).
extern const CollSpec kAllReduceSpec;
extern const CollSpec kAllGatherSpec;
extern const CollSpec kReduceScatterSpec;
extern const CollSpec kBroadcastSpec;
extern const CollSpec kReduceSpec;
extern const CollSpec kAllToAllSpec;
extern const CollSpec kSendRecvSpec;

}  // namespace ciuic
