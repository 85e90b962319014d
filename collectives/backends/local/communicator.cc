#include "collectives/backends/local/communicator.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <map>
#include <mutex>
#include <thread>
#include <tuple>
#include <vector>

#include "core/config.h"
#include "core/error.h"
#include "kernels/reduce.h"
#if CIUIC_HAVE_CUDA
#include <cuda_runtime.h>

#include "core/cuda_check.h"
#endif

namespace ciuic {

namespace {

// What each rank's thread of one RunLocalRanks is doing, for the deadline's message: a rank that is
// neither waiting on a peer inside the backend nor finished while others wait is the one they wait for.
struct LocalRankStates {
  explicit LocalRankStates(int size) : waiting(size), done(size) {}
  std::vector<std::atomic<int>> waiting;  // > 0 while blocked in a barrier or a receive
  std::vector<std::atomic<bool>> done;
};
struct RankSlot {
  LocalRankStates* states = nullptr;
  int rank = -1;
};
thread_local RankSlot t_slot;
std::mutex g_runs_mu;
std::vector<LocalRankStates*> g_runs;  // the RunLocalRanks of this process now running

// Marks this rank's thread as waiting on a peer for its lifetime.
class Waiting {
 public:
  Waiting() {
    if (t_slot.states) t_slot.states->waiting[static_cast<size_t>(t_slot.rank)].fetch_add(1);
  }
  ~Waiting() {
    if (t_slot.states) t_slot.states->waiting[static_cast<size_t>(t_slot.rank)].fetch_sub(1);
  }
  Waiting(const Waiting&) = delete;
  Waiting& operator=(const Waiting&) = delete;
};

}  // namespace

class LocalWorld {
 public:
  explicit LocalWorld(int size) : send_(size), recv_(size), ints_(size), size_(size), mail_cv_(size) {}

  int size() const { return size_; }

  // Generation barrier that can be poisoned.
  void Barrier() {
    std::unique_lock lock(mu_);
    if (poisoned_) throw PeerFailed();
    const uint64_t gen = generation_;
    if (++arrived_ == size_) {
      arrived_ = 0;
      ++generation_;
      cv_.notify_all();
      return;
    }
    {
      Waiting waiting;
      cv_.wait(lock, [&] { return generation_ != gen || poisoned_; });
    }
    if (generation_ == gen) throw PeerFailed();
  }

  // The first failure poisons: `culprit` (the rank of the RunLocalRanks thread, -1 unknown) and its
  // error are what the peers' errors name. The worlds split from this one get the first failure too,
  // not a later caller's (a peer that failed because of it and poisons after it).
  void Poison(int culprit = -1, std::string why = "") {
    std::vector<std::shared_ptr<LocalWorld>> children;
    {
      std::lock_guard lock(mu_);
      if (!poisoned_) {
        culprit_ = culprit;
        why_ = why;
      }
      culprit = culprit_;
      why = why_;
      poisoned_ = true;
      cv_.notify_all();
      for (auto& cv : mail_cv_) cv.notify_all();
      for (auto& w : descendants_) {
        if (auto c = w.lock()) children.push_back(c);
      }
    }
    for (auto& c : children) c->Poison(culprit, why);
  }

  void AddDescendant(const std::shared_ptr<LocalWorld>& child) {
    std::lock_guard lock(mu_);
    descendants_.push_back(child);
  }

  // A message in flight: host bytes, or (device ranks) a device copy the sender enqueued on its
  // stream and an event that completes when the copy has landed.
  struct Message {
    std::vector<uint8_t> host;
    void* device = nullptr;
    void* ready = nullptr;  // cudaEvent_t
    size_t bytes = 0;
  };

  // Each destination rank waits on its own condition variable: a message wakes its receiver only,
  // not every rank of the world (with more ranks than cores, waking all of them per message cost
  // more than the messages).
  void Post(int src, int dst, int tag, Message msg) {
    {
      std::lock_guard lock(mu_);
      mail_[{src, dst, tag}].push_back(std::move(msg));
    }
    mail_cv_[static_cast<size_t>(dst)].notify_all();
  }

  Message Take(int src, int dst, int tag) {
    std::unique_lock lock(mu_);
    auto key = std::make_tuple(src, dst, tag);
    if (!poisoned_ && !(mail_.count(key) && !mail_[key].empty())) {
      Waiting waiting;
      mail_cv_[static_cast<size_t>(dst)].wait(lock,
                                              [&] { return poisoned_ || (mail_.count(key) && !mail_[key].empty()); });
    }
    if (poisoned_ && (!mail_.count(key) || mail_[key].empty())) throw PeerFailed();
    auto msg = std::move(mail_[key].front());
    mail_[key].pop_front();
    return msg;
  }

  std::vector<const void*> send_;
  std::vector<void*> recv_;
  std::vector<int64_t> ints_;
  std::vector<std::shared_ptr<LocalWorld>> children_;
  std::vector<uint8_t> scratch_;

 private:
  // Under mu_.
  RuntimeError PeerFailed() const {
    if (culprit_ < 0) return RuntimeError("local backend: a peer rank failed");
    return RuntimeError(fmt::format("local backend: rank {} failed: {}", culprit_, why_));
  }

  std::vector<std::weak_ptr<LocalWorld>> descendants_;
  int culprit_ = -1;
  std::string why_;
  int size_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::condition_variable> mail_cv_;  // one per destination rank
  int arrived_ = 0;
  uint64_t generation_ = 0;
  bool poisoned_ = false;
  std::map<std::tuple<int, int, int>, std::deque<Message>> mail_;
};

namespace {

void PoisonLocalWorldOf(Communicator& comm, int culprit, const std::string& why);

class LocalRequest : public Request {
 public:
  void* recv = nullptr;
  size_t bytes = 0;
  int src = -1, tag = 0;
  bool done = false;
};

// One CUDA stream per rank (device ranks), shared by the communicators Split from it so that all
// of a rank's kernels and copies stay in one order.
class RankStream {
 public:
  RankStream() {
#if CIUIC_HAVE_CUDA
    cudaStream_t s;
    CIUIC_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    stream_ = s;
#else
    throw RuntimeError("local backend: device buffers need a build with CUDA");
#endif
  }
  ~RankStream() {
#if CIUIC_HAVE_CUDA
    cudaStreamSynchronize(static_cast<cudaStream_t>(stream_));
    cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
#endif
  }
  RankStream(const RankStream&) = delete;
  RankStream& operator=(const RankStream&) = delete;
  void* get() const { return stream_; }

 private:
  void* stream_ = nullptr;
};

class LocalCommunicator : public Communicator {
 public:
  LocalCommunicator(std::shared_ptr<LocalWorld> world, int rank, DeviceKind device, std::shared_ptr<RankStream> stream)
      : world_(std::move(world)), rank_(rank), device_(device), stream_(std::move(stream)) {}

  int Rank() const override { return rank_; }
  int Size() const override { return world_->size(); }
  DeviceKind Device() const override { return device_; }
  std::string BackendName() const override { return "local"; }
  bool Supports(Collective, DType, ReduceOp, bool) const override { return true; }
  void* Stream() const override { return stream_ ? stream_->get() : nullptr; }
  void Synchronize() override {
#if CIUIC_HAVE_CUDA
    if (stream_) CIUIC_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(stream_->get())));
#endif
  }

  // Host ranks copy the bytes into the mailbox at once. Device ranks enqueue a copy into a
  // stream-ordered allocation on their stream (after the kernels that produced the bytes) and post
  // it with an event; the receiver's stream waits for that event, copies out and frees it.
  RequestPtr ISend(const void* buf, size_t bytes, int peer, int tag) override {
    CheckPeer(peer);
    LocalWorld::Message msg;
    msg.bytes = bytes;
    if (device_ == DeviceKind::kCuda && bytes > 0) {
#if CIUIC_HAVE_CUDA
      const auto s = static_cast<cudaStream_t>(Stream());
      CIUIC_CUDA_CHECK(cudaMallocAsync(&msg.device, bytes, s));
      CIUIC_CUDA_CHECK(cudaMemcpyAsync(msg.device, buf, bytes, cudaMemcpyDefault, s));
      cudaEvent_t ev;
      CIUIC_CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
      CIUIC_CUDA_CHECK(cudaEventRecord(ev, s));
      msg.ready = ev;
#endif
    } else {
      msg.host.assign(static_cast<const uint8_t*>(buf), static_cast<const uint8_t*>(buf) + bytes);
    }
    world_->Post(rank_, peer, tag, std::move(msg));
    auto r = std::make_unique<LocalRequest>();
    r->done = true;
    return r;
  }
  RequestPtr IRecv(void* buf, size_t bytes, int peer, int tag) override {
    CheckPeer(peer);
    auto r = std::make_unique<LocalRequest>();
    r->recv = buf;
    r->bytes = bytes;
    r->src = peer;
    r->tag = tag;
    return r;
  }
  void Wait(Request& request) override {
    auto& r = static_cast<LocalRequest&>(request);
    if (r.done) return;
    auto msg = world_->Take(r.src, rank_, r.tag);
    r.done = true;
    if (msg.bytes != r.bytes) {
      ReleaseMessage(msg);
      throw RuntimeError(fmt::format("local backend: rank {} expected {} bytes from rank {}, got {}", rank_, r.bytes,
                                     r.src, msg.bytes));
    }
    if (!msg.device) {
      if (msg.bytes) std::memcpy(r.recv, msg.host.data(), msg.bytes);
      return;
    }
#if CIUIC_HAVE_CUDA
    const auto s = static_cast<cudaStream_t>(Stream());
    CIUIC_CUDA_CHECK(cudaStreamWaitEvent(s, static_cast<cudaEvent_t>(msg.ready), 0));
    CIUIC_CUDA_CHECK(cudaMemcpyAsync(r.recv, msg.device, msg.bytes, cudaMemcpyDefault, s));
    ReleaseMessage(msg);
#endif
  }

  // Native collectives: the host algorithms below over host memory; device ranks stage their
  // buffers through host memory (this backend is a test transport: exact and ordered, not fast).
  void AllReduce(const void* send, void* recv, size_t count, DType t, ReduceOp op) override {
    const size_t b = count * DTypeSize(t);
    Staged(send, b, recv, b, [&](const void* s, void* r) { HostAllReduceImpl(s, r, count, t, op); });
  }
  void AllGather(const void* send, void* recv, size_t send_count, DType t) override {
    const size_t b = send_count * DTypeSize(t);
    Staged(send, b, recv, b * Size(), [&](const void* s, void* r) { HostAllGatherImpl(s, r, send_count, t); });
  }
  void ReduceScatter(const void* send, void* recv, size_t recv_count, DType t, ReduceOp op) override {
    const size_t b = recv_count * DTypeSize(t);
    Staged(send, b * Size(), recv, b, [&](const void* s, void* r) { HostReduceScatterImpl(s, r, recv_count, t, op); });
  }
  void Broadcast(const void* send, void* recv, size_t count, DType t, int root) override {
    CheckPeer(root);
    const size_t b = count * DTypeSize(t);
    Staged(send, b, recv, b, [&](const void* s, void* r) { HostBroadcastImpl(s, r, count, t, root); });
  }
  void Reduce(const void* send, void* recv, size_t count, DType t, ReduceOp op, int root) override {
    CheckPeer(root);
    const size_t b = count * DTypeSize(t);
    Staged(send, b, recv, rank_ == root ? b : 0,
           [&](const void* s, void* r) { HostReduceImpl(s, r, count, t, op, root); });
  }
  void AllToAll(const void* send, void* recv, size_t count_per_peer, DType t) override {
    const size_t b = count_per_peer * DTypeSize(t) * Size();
    Staged(send, b, recv, b, [&](const void* s, void* r) { HostAllToAllImpl(s, r, count_per_peer, t); });
  }
  void SendRecv(const void* send, int send_peer, void* recv, int recv_peer, size_t count, DType t) override {
    CheckPeer(send_peer);
    CheckPeer(recv_peer);
    const size_t b = count * DTypeSize(t);
    Staged(send, b, recv, b, [&](const void* s, void* r) { HostSendRecvImpl(s, send_peer, r, recv_peer, count, t); });
  }

  void Barrier() override { world_->Barrier(); }

  std::unique_ptr<Communicator> Split(int color, int key) override {
    world_->ints_[rank_] = (static_cast<int64_t>(color) << 32) | static_cast<uint32_t>(key);
    if (rank_ == 0) world_->children_.assign(Size(), nullptr);
    world_->Barrier();
    std::vector<std::pair<int64_t, int>> members;  // (key, rank) of my color
    for (int q = 0; q < Size(); ++q) {
      if ((world_->ints_[q] >> 32) == color) members.push_back({static_cast<int32_t>(world_->ints_[q]), q});
    }
    std::sort(members.begin(), members.end());
    const int leader = members.front().second;
    if (rank_ == leader) {
      world_->children_[leader] = std::make_shared<LocalWorld>(static_cast<int>(members.size()));
      world_->AddDescendant(world_->children_[leader]);
    }
    world_->Barrier();
    auto child = world_->children_[leader];
    int new_rank = 0;
    for (size_t i = 0; i < members.size(); ++i) {
      if (members[i].second == rank_) new_rank = static_cast<int>(i);
    }
    world_->Barrier();
    return std::make_unique<LocalCommunicator>(child, new_rank, device_, stream_);
  }

  // The control plane is host memory on every rank.
  void HostAllReduce(double* values, size_t n, ReduceOp op) override {
    HostAllReduceImpl(values, values, n, DType::kFloat64, op);
  }
  void HostAllGather(const void* send, void* recv, size_t bytes) override {
    std::vector<uint8_t> copy(static_cast<const uint8_t*>(send), static_cast<const uint8_t*>(send) + bytes);
    HostAllGatherImpl(copy.data(), recv, bytes, DType::kUInt8);
  }

 private:
  void ReleaseMessage(LocalWorld::Message& msg) {
#if CIUIC_HAVE_CUDA
    if (msg.device) {
      const auto s = static_cast<cudaStream_t>(Stream());
      // Ordered behind the copy out on this stream (or behind the sender's copy in, on a refused message).
      cudaStreamWaitEvent(s, static_cast<cudaEvent_t>(msg.ready), 0);
      cudaFreeAsync(msg.device, s);
      cudaEventDestroy(static_cast<cudaEvent_t>(msg.ready));
      msg.device = nullptr;
    }
#else
    (void)msg;
#endif
  }

  // Runs a host collective: directly on host ranks; device ranks copy `send` to host memory after
  // their stream's work, run it, and copy `recv_bytes` of the result back (then wait for it).
  template <class Fn>
  void Staged(const void* send, size_t send_bytes, void* recv, size_t recv_bytes, Fn&& host) {
    if (device_ != DeviceKind::kCuda) {
      host(send, recv);
      return;
    }
    std::vector<uint8_t> hs(send ? send_bytes : 0), hr(std::max(recv_bytes, send_bytes));
    if (send) CopyBytes(hs.data(), MemoryKind::kHost, send, MemoryKind::kDevice, send_bytes, Stream());
    // In place (recv is send or holds it): the host run reads hs and writes hr; no aliasing remains.
    host(send ? static_cast<const void*>(hs.data()) : nullptr, hr.data());
    if (recv && recv_bytes) CopyBytes(recv, MemoryKind::kDevice, hr.data(), MemoryKind::kHost, recv_bytes, Stream());
  }

  void HostAllReduceImpl(const void* send, void* recv, size_t count, DType t, ReduceOp op) {
    const size_t es = DTypeSize(t);
    Publish(send, recv);
    // Each rank reduces one slice of the result into shared scratch; then all copy it out.
    if (rank_ == 0) world_->scratch_.resize(count * es);
    world_->Barrier();
    uint8_t* scratch = world_->scratch_.data();
    const size_t per = (count + Size() - 1) / Size();
    const size_t lo = std::min(count, per * rank_), hi = std::min(count, lo + per);
    ReduceSlice(scratch + lo * es, lo * es, hi - lo, t, op);
    world_->Barrier();
    std::memcpy(recv, scratch, count * es);
    world_->Barrier();
  }

  void HostAllGatherImpl(const void* send, void* recv, size_t send_count, DType t) {
    const size_t bytes = send_count * DTypeSize(t);
    Publish(send, recv);
    world_->Barrier();
    for (int q = 0; q < Size(); ++q) {
      uint8_t* dst = static_cast<uint8_t*>(recv) + q * bytes;
      if (dst != world_->send_[q]) std::memcpy(dst, world_->send_[q], bytes);
    }
    world_->Barrier();
  }

  void HostReduceScatterImpl(const void* send, void* recv, size_t recv_count, DType t, ReduceOp op) {
    const size_t es = DTypeSize(t);
    Publish(send, recv);
    world_->Barrier();
    std::vector<uint8_t> tmp(recv_count * es);
    ReduceSlice(tmp.data(), rank_ * recv_count * es, recv_count, t, op);
    world_->Barrier();
    std::memcpy(recv, tmp.data(), tmp.size());
    world_->Barrier();
  }

  void HostBroadcastImpl(const void* send, void* recv, size_t count, DType t, int root) {
    Publish(send, recv);
    world_->Barrier();
    if (recv != world_->send_[root]) std::memcpy(recv, world_->send_[root], count * DTypeSize(t));
    world_->Barrier();
  }

  void HostReduceImpl(const void* send, void* recv, size_t count, DType t, ReduceOp op, int root) {
    Publish(send, recv);
    world_->Barrier();
    std::vector<uint8_t> tmp;
    if (rank_ == root) {
      tmp.resize(count * DTypeSize(t));
      ReduceSlice(tmp.data(), 0, count, t, op);
    }
    world_->Barrier();
    if (rank_ == root) std::memcpy(recv, tmp.data(), tmp.size());
    world_->Barrier();
  }

  void HostAllToAllImpl(const void* send, void* recv, size_t count_per_peer, DType t) {
    const size_t bytes = count_per_peer * DTypeSize(t);
    Publish(send, recv);
    world_->Barrier();
    std::vector<uint8_t> tmp(bytes * Size());
    for (int q = 0; q < Size(); ++q) {
      std::memcpy(tmp.data() + q * bytes, static_cast<const uint8_t*>(world_->send_[q]) + rank_ * bytes, bytes);
    }
    world_->Barrier();
    std::memcpy(recv, tmp.data(), tmp.size());
    world_->Barrier();
  }

  void HostSendRecvImpl(const void* send, int send_peer, void* recv, int recv_peer, size_t count, DType t) {
    (void)send_peer;
    const size_t bytes = count * DTypeSize(t);
    Publish(send, recv);
    world_->Barrier();
    std::vector<uint8_t> tmp(static_cast<const uint8_t*>(world_->send_[recv_peer]),
                             static_cast<const uint8_t*>(world_->send_[recv_peer]) + bytes);
    world_->Barrier();
    std::memcpy(recv, tmp.data(), bytes);
    world_->Barrier();
  }

  void CheckPeer(int peer) const {
    if (peer < 0 || peer >= Size()) {
      throw UsageError(fmt::format("local backend: peer {} out of range for {} ranks", peer, Size()));
    }
  }
  void Publish(const void* send, void* recv) {
    world_->send_[rank_] = send;
    world_->recv_[rank_] = recv;
  }
  // out[0..n) = reduce over ranks (in rank order) of send_q[byte_offset .. + n elements).
  void ReduceSlice(void* out, size_t byte_offset, size_t n, DType t, ReduceOp op) {
    if (n == 0) return;
    const size_t bytes = n * DTypeSize(t);
    std::memcpy(out, static_cast<const uint8_t*>(world_->send_[0]) + byte_offset, bytes);
    for (int q = 1; q < Size(); ++q) {
      ReduceInto(out, static_cast<const uint8_t*>(world_->send_[q]) + byte_offset, n, t, op);
    }
    if (op == ReduceOp::kAvg) DivideBy(out, n, t, Size());
  }

  std::shared_ptr<LocalWorld> world_;
  int rank_;
  DeviceKind device_;
  std::shared_ptr<RankStream> stream_;  // device ranks only

  friend void PoisonLocalWorldOf(Communicator& comm, int culprit, const std::string& why);
};

void PoisonLocalWorldOf(Communicator& comm, int culprit, const std::string& why) {
  static_cast<LocalCommunicator&>(comm).world_->Poison(culprit, why);
}

}  // namespace

std::vector<std::unique_ptr<Communicator>> MakeLocalWorld(int size, DeviceKind device) {
  if (size < 1) throw UsageError("local backend: need at least one rank");
  if (device == DeviceKind::kCuda && CudaDeviceCount() == 0)
    throw RuntimeError("local backend: --device cuda but no CUDA device is visible");
  auto world = std::make_shared<LocalWorld>(size);
  std::vector<std::unique_ptr<Communicator>> comms;
  for (int r = 0; r < size; ++r) {
    comms.push_back(std::make_unique<LocalCommunicator>(
        world, r, device, device == DeviceKind::kCuda ? std::make_shared<RankStream>() : nullptr));
  }
  return comms;
}

void RunLocalRanks(int size, const std::function<void(Communicator&)>& fn, DeviceKind device) {
  auto comms = MakeLocalWorld(size, device);
  LocalRankStates states(size);
  {
    std::lock_guard lock(g_runs_mu);
    g_runs.push_back(&states);
  }
  std::exception_ptr first;
  std::mutex mu;
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      SetErrorRank(r);
      t_slot = {&states, r};
      try {
        if (device == DeviceKind::kCuda) CudaSetDevice(0);  // every rank on the one GPU, its own stream
        fn(*comms[r]);
        comms[r]->Synchronize();
      } catch (...) {
        std::string why = "unknown error";
        try {
          throw;
        } catch (const std::exception& e) {
          why = e.what();
        } catch (...) {
        }
        {
          std::lock_guard lock(mu);
          if (!first) first = std::current_exception();
        }
        PoisonLocalWorldOf(*comms[r], r, why);  // wake peers blocked in this world or its splits
      }
      states.done[static_cast<size_t>(r)].store(true);
      t_slot = {};
    });
  }
  for (auto& t : threads) t.join();
  {
    std::lock_guard lock(g_runs_mu);
    g_runs.erase(std::find(g_runs.begin(), g_runs.end(), &states));
  }
  if (first) std::rethrow_exception(first);
}

std::string DescribeLocalRanks() {
  std::lock_guard lock(g_runs_mu);
  std::string out;
  auto add = [&](const std::string& s) { out += (out.empty() ? "" : "; ") + s; };
  for (const LocalRankStates* run : g_runs) {
    std::vector<int> outside;
    int waiting = 0;
    for (size_t r = 0; r < run->waiting.size(); ++r) {
      if (run->done[r].load()) continue;
      if (run->waiting[r].load() > 0) {
        ++waiting;
      } else {
        outside.push_back(static_cast<int>(r));
      }
    }
    if (waiting == 0) continue;  // nobody waits on anybody: slow, not stuck on a peer
    if (outside.empty()) add("every rank waits on a peer");
    for (int r : outside)
      add(fmt::format("rank {} is not waiting on any peer (hung or busy outside the backend; {} rank(s) wait)", r,
                      waiting));
  }
  return out;
}

}  // namespace ciuic
