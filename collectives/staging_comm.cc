#include "collectives/staging_comm.h"

#include <vector>

#include "core/error.h"

namespace ciuic {

namespace {

class StagedRequest : public Request {
 public:
  RequestPtr inner;
  std::vector<char> host;
  void* device = nullptr;  // a receive: copied here once it landed
};

class StagingCommunicator : public Communicator {
 public:
  explicit StagingCommunicator(std::unique_ptr<Communicator> host) : host_(std::move(host)) {
    if (CudaDeviceCount() == 0) throw RuntimeError("device buffers over a host transport: no CUDA device is usable");
    stream_ = StreamCreate();
  }
  ~StagingCommunicator() override { StreamDestroy(stream_); }

  int Rank() const override { return host_->Rank(); }
  int Size() const override { return host_->Size(); }
  DeviceKind Device() const override { return DeviceKind::kCuda; }
  std::string BackendName() const override { return host_->BackendName() + "+staging"; }
  std::string LibraryVersion() const override { return host_->LibraryVersion(); }
  bool Supports(Collective c, DType t, ReduceOp op, bool inplace) const override {
    return host_->Supports(c, t, op, inplace);
  }
  int MaxTag() const override { return host_->MaxTag(); }

  RequestPtr ISend(const void* buf, size_t bytes, int peer, int tag) override {
    auto r = std::make_unique<StagedRequest>();
    r->host.resize(bytes);
    if (bytes) CopyBytes(r->host.data(), MemoryKind::kHost, buf, MemoryKind::kDevice, bytes, stream_);
    r->inner = host_->ISend(r->host.data(), bytes, peer, tag);
    return r;
  }
  RequestPtr IRecv(void* buf, size_t bytes, int peer, int tag) override {
    auto r = std::make_unique<StagedRequest>();
    r->host.resize(bytes);
    r->device = buf;
    r->inner = host_->IRecv(r->host.data(), bytes, peer, tag);
    return r;
  }
  void Wait(Request& request) override {
    auto& r = static_cast<StagedRequest&>(request);
    host_->Wait(*r.inner);
    if (r.device && !r.host.empty())
      CopyBytes(r.device, MemoryKind::kDevice, r.host.data(), MemoryKind::kHost, r.host.size(), stream_);
  }

  void AllReduce(const void* send, void* recv, size_t count, DType t, ReduceOp op) override {
    auto h = In(send, count * DTypeSize(t));
    host_->AllReduce(h.data(), h.data(), count, t, op);
    Out(recv, h);
  }
  void AllGather(const void* send, void* recv, size_t send_count, DType t) override {
    const size_t bytes = send_count * DTypeSize(t);
    auto h = In(send, bytes);
    std::vector<char> all(bytes * static_cast<size_t>(Size()));
    host_->AllGather(h.data(), all.data(), send_count, t);
    Out(recv, all);
  }
  void ReduceScatter(const void* send, void* recv, size_t recv_count, DType t, ReduceOp op) override {
    const size_t bytes = recv_count * DTypeSize(t);
    auto h = In(send, bytes * static_cast<size_t>(Size()));
    std::vector<char> mine(bytes);
    host_->ReduceScatter(h.data(), mine.data(), recv_count, t, op);
    Out(recv, mine);
  }
  void Broadcast(const void* send, void* recv, size_t count, DType t, int root) override {
    const size_t bytes = count * DTypeSize(t);
    auto h = Rank() == root ? In(send, bytes) : std::vector<char>(bytes);
    host_->Broadcast(h.data(), h.data(), count, t, root);
    Out(recv, h);
  }
  void Reduce(const void* send, void* recv, size_t count, DType t, ReduceOp op, int root) override {
    const size_t bytes = count * DTypeSize(t);
    auto h = In(send, bytes);
    std::vector<char> out(bytes);
    host_->Reduce(h.data(), out.data(), count, t, op, root);
    if (Rank() == root) Out(recv, out);
  }
  void AllToAll(const void* send, void* recv, size_t count_per_peer, DType t) override {
    const size_t bytes = count_per_peer * DTypeSize(t) * static_cast<size_t>(Size());
    auto h = In(send, bytes);
    std::vector<char> out(bytes);
    host_->AllToAll(h.data(), out.data(), count_per_peer, t);
    Out(recv, out);
  }
  void SendRecv(const void* send, int send_peer, void* recv, int recv_peer, size_t count, DType t) override {
    const size_t bytes = count * DTypeSize(t);
    auto h = In(send, bytes);
    std::vector<char> out(bytes);
    host_->SendRecv(h.data(), send_peer, out.data(), recv_peer, count, t);
    Out(recv, out);
  }

  void Barrier() override { host_->Barrier(); }
  void Synchronize() override { StreamSynchronize(stream_); }
  void* Stream() const override { return stream_; }
  std::unique_ptr<Communicator> Split(int color, int key) override {
    return MakeDeviceStagingCommunicator(host_->Split(color, key));
  }
  void HostAllReduce(double* v, size_t n, ReduceOp op) override { host_->HostAllReduce(v, n, op); }
  void HostAllGather(const void* s, void* r, size_t bytes) override { host_->HostAllGather(s, r, bytes); }
  Liveness PeerLiveness() override { return host_->PeerLiveness(); }

 private:
  // Device bytes to host, after the work queued on the stream (CopyBytes waits for it).
  std::vector<char> In(const void* device, size_t bytes) {
    std::vector<char> h(bytes);
    if (bytes) CopyBytes(h.data(), MemoryKind::kHost, device, MemoryKind::kDevice, bytes, stream_);
    return h;
  }
  void Out(void* device, const std::vector<char>& h) {
    if (!h.empty()) CopyBytes(device, MemoryKind::kDevice, h.data(), MemoryKind::kHost, h.size(), stream_);
  }

  std::unique_ptr<Communicator> host_;
  void* stream_ = nullptr;
};

}  // namespace

std::unique_ptr<Communicator> MakeDeviceStagingCommunicator(std::unique_ptr<Communicator> host) {
  return std::make_unique<StagingCommunicator>(std::move(host));
}

}  // namespace ciuic
