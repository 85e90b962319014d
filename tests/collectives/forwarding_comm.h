#pragma once
// A Communicator that forwards every call to another: a test overrides only the calls it alters (the
// tags it accepts, what a posted receive buffer holds before its Wait). SmallTags: a small tag range.
#include <memory>
#include <string>

#include <fmt/format.h>

#include "collectives/communicator.h"
#include "core/error.h"

namespace ciuic {

class ForwardingComm : public Communicator {
 public:
  explicit ForwardingComm(Communicator& inner) : c_(inner) {}
  int Rank() const override { return c_.Rank(); }
  int Size() const override { return c_.Size(); }
  DeviceKind Device() const override { return c_.Device(); }
  std::string BackendName() const override { return c_.BackendName(); }
  std::string LibraryVersion() const override { return c_.LibraryVersion(); }
  bool Supports(Collective k, DType t, ReduceOp op, bool inplace) const override {
    return c_.Supports(k, t, op, inplace);
  }
  int MaxTag() const override { return c_.MaxTag(); }
  RequestPtr ISend(const void* buf, size_t bytes, int peer, int tag) override {
    return c_.ISend(buf, bytes, peer, tag);
  }
  RequestPtr IRecv(void* buf, size_t bytes, int peer, int tag) override { return c_.IRecv(buf, bytes, peer, tag); }
  void Wait(Request& r) override { c_.Wait(r); }
  void AllReduce(const void* s, void* r, size_t n, DType t, ReduceOp op) override { c_.AllReduce(s, r, n, t, op); }
  void AllGather(const void* s, void* r, size_t n, DType t) override { c_.AllGather(s, r, n, t); }
  void ReduceScatter(const void* s, void* r, size_t n, DType t, ReduceOp op) override {
    c_.ReduceScatter(s, r, n, t, op);
  }
  void Broadcast(const void* s, void* r, size_t n, DType t, int root) override { c_.Broadcast(s, r, n, t, root); }
  void Reduce(const void* s, void* r, size_t n, DType t, ReduceOp op, int root) override {
    c_.Reduce(s, r, n, t, op, root);
  }
  void AllToAll(const void* s, void* r, size_t n, DType t) override { c_.AllToAll(s, r, n, t); }
  void SendRecv(const void* s, int sp, void* r, int rp, size_t n, DType t) override { c_.SendRecv(s, sp, r, rp, n, t); }
  void Barrier() override { c_.Barrier(); }
  void Synchronize() override { c_.Synchronize(); }
  bool StreamOrdered() const override { return c_.StreamOrdered(); }
  void GroupStart() override { c_.GroupStart(); }
  void GroupEnd() override { c_.GroupEnd(); }
  void* Stream() const override { return c_.Stream(); }
  std::unique_ptr<Communicator> Split(int color, int key) override { return c_.Split(color, key); }
  void HostAllReduce(double* v, size_t n, ReduceOp op) override { c_.HostAllReduce(v, n, op); }
  void HostAllGather(const void* s, void* r, size_t bytes) override { c_.HostAllGather(s, r, bytes); }
  Liveness PeerLiveness() override { return c_.PeerLiveness(); }

 private:
  Communicator& c_;
};

// Forwards to a transport and refuses tags above max_tag, as an MPI with a small MPI_TAG_UB would.
class SmallTags : public ForwardingComm {
 public:
  SmallTags(Communicator& t, int max_tag) : ForwardingComm(t), max_tag_(max_tag) {}
  std::string BackendName() const override { return "small-tags"; }
  int MaxTag() const override { return max_tag_; }
  RequestPtr ISend(const void* b, size_t n, int peer, int tag) override {
    Check(tag);
    return ForwardingComm::ISend(b, n, peer, tag);
  }
  RequestPtr IRecv(void* b, size_t n, int peer, int tag) override {
    Check(tag);
    return ForwardingComm::IRecv(b, n, peer, tag);
  }

 private:
  void Check(int tag) const {
    if (tag < 0 || tag > max_tag_) throw RuntimeError(fmt::format("tag {} outside 0..{}", tag, max_tag_));
  }
  int max_tag_;
};

}  // namespace ciuic
