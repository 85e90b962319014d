#include "collectives/runtime_comm.h"

#include <algorithm>
#include <map>
#include <tuple>

#include "collectives/shared_window.h"
#include "core/error.h"
#include "core/trace.h"

namespace ciuic {

namespace {

class RuntimeCommunicator : public Communicator {
 public:
  // Over `t`, owning it when `owned` holds it.
  RuntimeCommunicator(std::unique_ptr<Communicator> owned, Communicator& t, const RuntimeCommConfig& c)
      : owned_(std::move(owned)), t_(&t), cfg_(c), engine_(*t_, c.algo) {}

  int Rank() const override { return t_->Rank(); }
  int Size() const override { return t_->Size(); }
  DeviceKind Device() const override { return t_->Device(); }
  std::string BackendName() const override { return "ciuic"; }
  std::string LibraryVersion() const override { return t_->BackendName() + " " + t_->LibraryVersion(); }
  bool Supports(Collective c, DType t, ReduceOp op, bool inplace) const override {
    if (c == Collective::kAllReduce) return t == DType::kFloat32 && (op == ReduceOp::kSum || op == ReduceOp::kAvg);
    return t_->Supports(c, t, op, inplace);
  }
  RequestPtr ISend(const void* b, size_t n, int peer, int tag) override { return t_->ISend(b, n, peer, tag); }
  RequestPtr IRecv(void* b, size_t n, int peer, int tag) override { return t_->IRecv(b, n, peer, tag); }
  int MaxTag() const override { return t_->MaxTag(); }
  void Wait(Request& r) override { t_->Wait(r); }

  void AllReduce(const void* send, void* recv, size_t count, DType t, ReduceOp op) override {
    if (t != DType::kFloat32 || (op != ReduceOp::kSum && op != ReduceOp::kAvg))
      throw UsageError("the ciuic runtime reduces fp32 with sum or avg");
    trace::Span call("ciuic allreduce", trace::Category::kPhase);
    call.With("bytes", static_cast<int64_t>(count * 4));
    AllReduceEngine* engine = &engine_;
    size_t bucket_bytes = cfg_.bucket_bytes;
    int rule_index = -1;
    if (cfg_.profile) {
      const ProfileRule& rule = cfg_.profile->RuleFor(count * 4);
      if (rule.algo == "nccl" && rule.precision == "fp32") {  // the library's own allreduce, in the rule's buckets
        const size_t bucket = rule.bucket_bytes ? std::max<size_t>(rule.bucket_bytes / 4, 1) : count;
        const auto* in = static_cast<const float*>(send);
        auto* out = static_cast<float*>(recv);
        for (size_t b = 0; b < count; b += bucket) {
          const size_t n = std::min(bucket, count - b);
          trace::Span span("native allreduce", trace::Category::kComm);
          span.With("bytes", static_cast<int64_t>(n * 4));
          t_->AllReduce(in + b, out + b, n, t, op);
        }
        return;
      }
      rule_index = static_cast<int>(&rule - cfg_.profile->rules.data());
      auto& slot = rule_engines_[rule_index];
      if (!slot) {
        AlgoConfig a = cfg_.algo;
        // "nccl" in a profile: the transport's own allreduce (here in a 16-bit precision).
        a.algo = rule.algo == "nccl" ? AllReduceAlgo::kNative : ParseAlgo(rule.algo);
        a.precision = ParsePrecision(rule.precision);
        a.codec = ParseCodec(rule.codec);
        a.codec.block = cfg_.algo.codec.block;
        a.codec.error_feedback = cfg_.algo.codec.error_feedback;
        a.in_flight = rule.streams;
        slot = std::make_unique<AllReduceEngine>(*t_, a);
        for (const auto& w : windows_) slot->Register(w);
      }
      engine = slot.get();
      bucket_bytes = rule.bucket_bytes;  // 0: the whole buffer at once
    }
    // Out of place: each bucket reduced from send into recv (the ring and native read send directly).
    const auto* in = static_cast<const float*>(send);
    auto* data = static_cast<float*>(recv);
    const size_t bucket = bucket_bytes ? std::max<size_t>(bucket_bytes / 4, 1) : count;
    for (size_t b = 0, i = 0; b < count; b += bucket, ++i) {
      const size_t n = std::min(bucket, count - b);
      // Error-feedback state per (rule, bucket index, size): repeated calls on the same shape continue it.
      CodecState& st = states_[{rule_index, i, n}];
      trace::Span span("bucket", trace::Category::kPhase);
      span.With("bucket", static_cast<int64_t>(i)).With("bytes", static_cast<int64_t>(n * 4));
      engine->Run(in + b, data + b, n, &st, op == ReduceOp::kAvg);
    }
  }
  void AllGather(const void* s, void* r, size_t n, DType t) override { t_->AllGather(s, r, n, t); }
  void ReduceScatter(const void* s, void* r, size_t n, DType t, ReduceOp op) override {
    t_->ReduceScatter(s, r, n, t, op);
  }
  void Broadcast(const void* s, void* r, size_t n, DType t, int root) override { t_->Broadcast(s, r, n, t, root); }
  void Reduce(const void* s, void* r, size_t n, DType t, ReduceOp op, int root) override {
    t_->Reduce(s, r, n, t, op, root);
  }
  void AllToAll(const void* s, void* r, size_t n, DType t) override { t_->AllToAll(s, r, n, t); }
  void SendRecv(const void* s, int sp, void* r, int rp, size_t n, DType t) override {
    t_->SendRecv(s, sp, r, rp, n, t);
  }
  void Barrier() override { t_->Barrier(); }
  bool StreamOrdered() const override { return t_->StreamOrdered(); }
  void GroupStart() override { t_->GroupStart(); }
  void GroupEnd() override { t_->GroupEnd(); }
  void Synchronize() override { t_->Synchronize(); }
  void* Stream() const override { return t_->Stream(); }
  std::unique_ptr<Communicator> Split(int color, int key) override {
    return MakeRuntimeCommunicator(t_->Split(color, key), cfg_);
  }
  void HostAllReduce(double* v, size_t n, ReduceOp op) override { t_->HostAllReduce(v, n, op); }
  void HostAllGather(const void* s, void* r, size_t bytes) override { t_->HostAllGather(s, r, bytes); }
  Liveness PeerLiveness() override { return t_->PeerLiveness(); }
  std::shared_ptr<SharedWindow> AllocShared(size_t bytes) override {
    std::shared_ptr<SharedWindow> w = SharedWindow::Create(*t_, bytes);
    windows_.erase(std::remove_if(windows_.begin(), windows_.end(), [](const auto& x) { return x.expired(); }),
                   windows_.end());
    windows_.push_back(w);
    engine_.Register(w);
    for (auto& [index, e] : rule_engines_) e->Register(w);
    return w;
  }

 private:
  std::unique_ptr<Communicator> owned_;
  Communicator* t_;
  RuntimeCommConfig cfg_;
  AllReduceEngine engine_;
  std::map<std::tuple<int, size_t, size_t>, CodecState> states_;
  std::map<int, std::unique_ptr<AllReduceEngine>> rule_engines_;
  // AllocShared's (their callers own them), registered with every engine, also those made later.
  std::vector<std::weak_ptr<const SharedWindow>> windows_;
};

}  // namespace

std::unique_ptr<Communicator> MakeRuntimeCommunicator(std::unique_ptr<Communicator> transport,
                                                      const RuntimeCommConfig& config) {
  Communicator& t = *transport;
  return std::make_unique<RuntimeCommunicator>(std::move(transport), t, config);
}

std::unique_ptr<Communicator> MakeRuntimeCommunicatorOver(Communicator& transport, const RuntimeCommConfig& config) {
  return std::make_unique<RuntimeCommunicator>(nullptr, transport, config);
}

}  // namespace ciuic
