#include "collectives/backends/local/communicator.h"

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <map>
#include <mutex>
#include <thread>
#include <tuple>

#include "core/error.h"
#include "kernels/reduce.h"

namespace ciuic {

class LocalWorld {
 public:
  explicit LocalWorld(int size) : send_(size), recv_(size), ints_(size), size_(size) {}

  int size() const { return size_; }

  // Generation barrier that can be poisoned.
  void Barrier() {
    std::unique_lock lock(mu_);
    if (poisoned_) throw RuntimeError("local backend: a peer rank failed");
    const uint64_t gen = generation_;
    if (++arrived_ == size_) {
      arrived_ = 0;
      ++generation_;
      cv_.notify_all();
      return;
    }
    cv_.wait(lock, [&] { return generation_ != gen || poisoned_; });
    if (generation_ == gen) throw RuntimeError("local backend: a peer rank failed");
  }

  void Poison() {
    std::vector<std::shared_ptr<LocalWorld>> children;
    {
      std::lock_guard lock(mu_);
      poisoned_ = true;
      cv_.notify_all();
      mail_cv_.notify_all();
      for (auto& w : descendants_) {
        if (auto c = w.lock()) children.push_back(c);
      }
    }
    for (auto& c : children) c->Poison();
  }

  void AddDescendant(const std::shared_ptr<LocalWorld>& child) {
    std::lock_guard lock(mu_);
    descendants_.push_back(child);
  }

  void Post(int src, int dst, int tag, const void* data, size_t bytes) {
    std::vector<uint8_t> msg(static_cast<const uint8_t*>(data), static_cast<const uint8_t*>(data) + bytes);
    std::lock_guard lock(mu_);
    mail_[{src, dst, tag}].push_back(std::move(msg));
    mail_cv_.notify_all();
  }

  std::vector<uint8_t> Take(int src, int dst, int tag) {
    std::unique_lock lock(mu_);
    auto key = std::make_tuple(src, dst, tag);
    mail_cv_.wait(lock, [&] { return poisoned_ || (mail_.count(key) && !mail_[key].empty()); });
    if (poisoned_ && (!mail_.count(key) || mail_[key].empty())) {
      throw RuntimeError("local backend: a peer rank failed");
    }
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
  std::vector<std::weak_ptr<LocalWorld>> descendants_;
  int size_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::condition_variable mail_cv_;
  int arrived_ = 0;
  uint64_t generation_ = 0;
  bool poisoned_ = false;
  std::map<std::tuple<int, int, int>, std::deque<std::vector<uint8_t>>> mail_;
};

namespace {

void PoisonLocalWorldOf(Communicator& comm);

class LocalRequest : public Request {
 public:
  void* recv = nullptr;
  size_t bytes = 0;
  int src = -1, tag = 0;
  bool done = false;
};

class LocalCommunicator : public Communicator {
 public:
  LocalCommunicator(std::shared_ptr<LocalWorld> world, int rank) : world_(std::move(world)), rank_(rank) {}

  int Rank() const override { return rank_; }
  int Size() const override { return world_->size(); }
  DeviceKind Device() const override { return DeviceKind::kCpu; }
  std::string BackendName() const override { return "local"; }
  bool Supports(Collective, DType, ReduceOp, bool) const override { return true; }

  RequestPtr ISend(const void* buf, size_t bytes, int peer, int tag) override {
    CheckPeer(peer);
    world_->Post(rank_, peer, tag, buf, bytes);
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
    if (msg.size() != r.bytes) {
      throw RuntimeError(fmt::format("local backend: rank {} expected {} bytes from rank {}, got {}", rank_,
                                     r.bytes, r.src, msg.size()));
    }
    std::memcpy(r.recv, msg.data(), msg.size());
    r.done = true;
  }

  void AllReduce(const void* send, void* recv, size_t count, DType t, ReduceOp op) override {
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

  void AllGather(const void* send, void* recv, size_t send_count, DType t) override {
    const size_t bytes = send_count * DTypeSize(t);
    Publish(send, recv);
    world_->Barrier();
    for (int q = 0; q < Size(); ++q) {
      uint8_t* dst = static_cast<uint8_t*>(recv) + q * bytes;
      if (dst != world_->send_[q]) std::memcpy(dst, world_->send_[q], bytes);
    }
    world_->Barrier();
  }

  void ReduceScatter(const void* send, void* recv, size_t recv_count, DType t, ReduceOp op) override {
    const size_t es = DTypeSize(t);
    Publish(send, recv);
    world_->Barrier();
    std::vector<uint8_t> tmp(recv_count * es);
    ReduceSlice(tmp.data(), rank_ * recv_count * es, recv_count, t, op);
    world_->Barrier();
    std::memcpy(recv, tmp.data(), tmp.size());
    world_->Barrier();
  }

  void Broadcast(const void* send, void* recv, size_t count, DType t, int root) override {
    CheckPeer(root);
    Publish(send, recv);
    world_->Barrier();
    if (recv != world_->send_[root]) std::memcpy(recv, world_->send_[root], count * DTypeSize(t));
    world_->Barrier();
  }

  void Reduce(const void* send, void* recv, size_t count, DType t, ReduceOp op, int root) override {
    CheckPeer(root);
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

  void AllToAll(const void* send, void* recv, size_t count_per_peer, DType t) override {
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

  void SendRecv(const void* send, int send_peer, void* recv, int recv_peer, size_t count, DType t) override {
    CheckPeer(send_peer);
    CheckPeer(recv_peer);
    const size_t bytes = count * DTypeSize(t);
    Publish(send, recv);
    world_->Barrier();
    std::vector<uint8_t> tmp(static_cast<const uint8_t*>(world_->send_[recv_peer]),
                             static_cast<const uint8_t*>(world_->send_[recv_peer]) + bytes);
    world_->Barrier();
    std::memcpy(recv, tmp.data(), bytes);
    world_->Barrier();
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
    return std::make_unique<LocalCommunicator>(child, new_rank);
  }

  void HostAllReduce(double* values, size_t n, ReduceOp op) override {
    AllReduce(values, values, n, DType::kFloat64, op);
  }
  void HostAllGather(const void* send, void* recv, size_t bytes) override {
    std::vector<uint8_t> copy(static_cast<const uint8_t*>(send), static_cast<const uint8_t*>(send) + bytes);
    AllGather(copy.data(), recv, bytes, DType::kUInt8);
  }

 private:
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

  friend void PoisonLocalWorldOf(Communicator& comm);
};

void PoisonLocalWorldOf(Communicator& comm) { static_cast<LocalCommunicator&>(comm).world_->Poison(); }

}  // namespace

std::vector<std::unique_ptr<Communicator>> MakeLocalWorld(int size) {
  if (size < 1) throw UsageError("local backend: need at least one rank");
  auto world = std::make_shared<LocalWorld>(size);
  std::vector<std::unique_ptr<Communicator>> comms;
  for (int r = 0; r < size; ++r) comms.push_back(std::make_unique<LocalCommunicator>(world, r));
  return comms;
}

void RunLocalRanks(int size, const std::function<void(Communicator&)>& fn) {
  auto comms = MakeLocalWorld(size);
  std::exception_ptr first;
  std::mutex mu;
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      SetErrorRank(r);
      try {
        fn(*comms[r]);
      } catch (...) {
        {
          std::lock_guard lock(mu);
          if (!first) first = std::current_exception();
        }
        PoisonLocalWorldOf(*comms[r]);  // wake peers blocked in this world or its splits
      }
    });
  }
  for (auto& t : threads) t.join();
  if (first) std::rethrow_exception(first);
}

}  // namespace ciuic
