#include "collectives/backends/gloo/communicator.h"

#include <net/if.h>
#include <unistd.h>

#include <algorithm>

#include "core/config.h"
#include "core/error.h"
#include "core/files.h"

#if CIUIC_HAVE_GLOO
#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/allreduce_halving_doubling.h>
#include <gloo/allreduce_ring_chunked.h>
#include <gloo/alltoall.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/logging.h>
#include <gloo/config.h>
#include <gloo/math.h>
#include <gloo/reduce.h>
#include <gloo/reduce_scatter.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/context.h>
#include <gloo/transport/tcp/address.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cctype>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <map>
#include <mutex>
#include <random>

#include "collectives/backends/gloo/tcp_store.h"
#include "collectives/bootstrap/store.h"
#include "kernels/reduce.h"

// Gloo reports a dead peer, a timeout or a misuse by exception (IoException, EnforceNotMet, ...):
// inside the communicator each becomes a RuntimeError naming the call, the rank and file:line, the
// peer whose connection failed or whom a receive waits for (FailedPeers: gloo itself names only a
// socket), and the rank that is gone where the job's store knows (GoneNote).
#define CIUIC_GLOO_CHECK(call)                                                                                   \
  do {                                                                                                           \
    try {                                                                                                        \
      call;                                                                                                      \
    } catch (const ::ciuic::Error&) {                                                                            \
      throw;                                                                                                     \
    } catch (const std::exception& ciuic_gloo_e_) {                                                              \
      throw GlooFailure(#call, ciuic_gloo_e_, __FILE__, __LINE__, Rank(), *shared_, sub_world_, context_.get()); \
    }                                                                                                            \
  } while (0)
#endif

namespace ciuic {

namespace {
struct AlgoName {
  GlooAlgo algo;
  const char* name;
};
constexpr AlgoName kAlgoNames[] = {{GlooAlgo::kAuto, "auto"},
                                   {GlooAlgo::kRing, "ring"},
                                   {GlooAlgo::kRingChunked, "ring-chunked"},
                                   {GlooAlgo::kHalvingDoubling, "halving-doubling"},
                                   {GlooAlgo::kBcube, "bcube"}};
}  // namespace

GlooAlgo ParseGlooAlgo(std::string_view name) {
  for (const auto& a : kAlgoNames)
    if (name == a.name) return a.algo;
  throw UsageError(
      fmt::format("unknown gloo allreduce algorithm '{}' (known: ring, ring-chunked, "
                  "halving-doubling, bcube, auto)",
                  PrintableLine(name)));
}

const char* GlooAlgoName(GlooAlgo a) {
  if (a == GlooAlgo::kAuto) return "ring";  // gloo::allreduce with no algorithm set runs its ring
  for (const auto& n : kAlgoNames)
    if (n.algo == a) return n.name;
  return "?";
}

void CheckGlooInterface(const std::string& iface, const std::string& option) {
  if (if_nametoindex(iface.c_str()) != 0) return;
  std::string known;
  if (struct if_nameindex* list = if_nameindex()) {
    for (auto* p = list; p->if_index != 0; ++p) known += fmt::format("{}{}", known.empty() ? "" : ", ", p->if_name);
    if_freenameindex(list);
  }
  throw UsageError(fmt::format("{} {}: no such network interface on this host (it has: {})", option,
                               iface.empty() ? "''" : PrintableLine(iface), known));
}

#if CIUIC_HAVE_GLOO
namespace {

using Clock = std::chrono::steady_clock;
using gloo::transport::UnboundBuffer;

// Slot prefixes of our point-to-point messages, above gloo's own (0x01..0x08 for its collectives,
// small counters for its algorithm classes).
constexpr uint8_t kPointToPointPrefix = 0x40;
constexpr uint8_t kSendRecvPrefix = 0x41;
// The algorithm classes built and kept per buffer (see Legacy below).
constexpr size_t kMaxKept = 16;

std::chrono::milliseconds TimeoutOf(double seconds) {
  // "No timeout" as a week: gloo adds its timeout to the clock's now.
  if (seconds <= 0) return std::chrono::hours(24 * 7);
  return std::chrono::milliseconds(std::max<int64_t>(1, static_cast<int64_t>(seconds * 1000)));
}

bool GlooReduces(DType t) {
  switch (t) {
    case DType::kFloat32:
    case DType::kFloat64:
    case DType::kFloat16:
    case DType::kInt8:
    case DType::kUInt8:
    case DType::kInt32:
    case DType::kInt64:
      return true;
    default:
      return false;
  }
}

// Calls f(T{}) with the C++ type gloo reduces `t` as.
template <class F>
void WithGlooType(DType t, F&& f) {
  switch (t) {
    case DType::kFloat32:
      return f(float{});
    case DType::kFloat64:
      return f(double{});
    case DType::kFloat16:
      return f(gloo::float16{});
    case DType::kInt8:
      return f(int8_t{});
    case DType::kUInt8:
      return f(uint8_t{});
    case DType::kInt32:
      return f(int32_t{});
    case DType::kInt64:
      return f(int64_t{});
    default:
      throw UsageError(fmt::format("gloo backend: gloo does not reduce {}", DTypeName(t)));
  }
}

// Calls f(E{}) with an unsigned type of `size` bytes: gloo's byte-moving collectives take their
// element size from a typed setter, and only move the bytes.
template <class F>
void WithElementType(size_t size, F&& f) {
  switch (size) {
    case 1:
      return f(uint8_t{});
    case 2:
      return f(uint16_t{});
    case 4:
      return f(uint32_t{});
    default:
      return f(uint64_t{});
  }
}

template <class T>
void (*GlooFunction(ReduceOp op))(void*, const void*, const void*, size_t) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      return &gloo::sum<T>;
    case ReduceOp::kProd:
      return &gloo::product<T>;
    case ReduceOp::kMin:
      return &gloo::min<T>;
    case ReduceOp::kMax:
      return &gloo::max<T>;
  }
  return &gloo::sum<T>;
}

template <class T>
const gloo::ReductionFunction<T>* GlooReduction(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      return gloo::ReductionFunction<T>::sum;
    case ReduceOp::kProd:
      return gloo::ReductionFunction<T>::product;
    case ReduceOp::kMin:
      return gloo::ReductionFunction<T>::min;
    case ReduceOp::kMax:
      return gloo::ReductionFunction<T>::max;
  }
  return gloo::ReductionFunction<T>::sum;
}

int CheckedGlooCount(size_t count, const char* what) {
  if (count > static_cast<size_t>(INT_MAX))
    throw InputError(fmt::format("gloo backend: {} of {} elements exceeds gloo's 2^31-1 per call", what, count));
  return static_cast<int>(count);
}

class GlooRequest : public Request {
 public:
  std::unique_ptr<UnboundBuffer> buffer;
  bool send = false;
  int peer = -1;  // whom a failure names
  // A message to this rank itself: copied when both sides are posted.
  bool self = false;
  bool done = false;
};

// A message to this rank itself (a one-rank sub-world of a hierarchy): the send and the receive meet
// here, in order per tag.
struct SelfMailbox {
  struct Posted {
    void* buf;
    size_t bytes;
    GlooRequest* request;
  };
  std::map<int, std::deque<std::vector<char>>> sent;
  std::map<int, std::deque<Posted>> receives;
};

// What every communicator of one world shares: the device, the store and, on world rank 0, its server.
struct Shared {
  std::shared_ptr<gloo::transport::Device> device;
  std::shared_ptr<TcpStoreServer> server;
  std::shared_ptr<gloo::rendezvous::Store> store;
  gloo::rendezvous::FileStore* file_store = nullptr;  // inside `store` with --gloo-store
  // This rank's connection to rank 0's TCP store, identified as this rank: who is gone after a
  // failure (null with --gloo-store or a store of the user's).
  std::shared_ptr<TcpStore> presence;
  int world_rank = 0;  // this rank in the world (rank 0 serves the store), whatever sub-world fails
  GlooOptions options;
  std::string device_text;
};

// On rank 0, which serves the store, before it ends over a failure (its error or its deadline): the
// others ask the store about the failure when their own calls fail or their deadlines pass, a moment
// later. It waits, up to 2 s, while a rank that still beats (its watchdog's pulses, under a job
// launcher) has not said that it saw the failure too.
void LingerForPeers(TcpStore& presence, int rank) {
  if (rank != 0) return;
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (std::chrono::steady_clock::now() < end) {
    const auto silent = presence.Silences(std::chrono::seconds(1));
    if (!silent) return;
    bool waiting = false;
    for (const auto& entry : *silent) waiting |= entry.first != rank && entry.second < 1.0;
    if (!waiting) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

// What the others say when rank 0, which serves the job's store, is gone.
constexpr const char* kStoreEnded =
    "rank 0, which served the job's store, has ended (killed, crashed, or over an error or a deadline of its own)";

// "rank 1 silent for 3.1 s; rank 2 silent for 1.2 s (stopped or stuck: ...)": the ranks other than
// `rank` whose last sign of life in the store is a second old or more, longest first (the beats of a
// watchdog come every 0.1 s). "" when none is, and when this rank does not beat itself (no watchdog:
// then nobody in the job beats, and silence names nobody).
std::string SilentPeers(const std::vector<std::pair<int, double>>& silent, int rank, bool beats) {
  std::vector<std::pair<double, int>> quiet;
  for (const auto& entry : silent)
    if (entry.first != rank && entry.second >= 1.0) quiet.emplace_back(entry.second, entry.first);
  if (!beats || quiet.empty()) return "";
  std::sort(quiet.rbegin(), quiet.rend());
  std::string out;
  for (const auto& q : quiet)
    out += fmt::format("{}rank {} silent for {:.1f} s", out.empty() ? "" : "; ", q.second, q.first);
  return out + " (stopped or stuck: its connection to the job's store is open)";
}

// For the error of a failed gloo call: "; rank 2 is gone: ..." naming the first rank whose
// connection to the job's store closed without a word (killed, crashed); when none did, the ranks
// silent in the store (stopped or stuck: SilentPeers, where the ranks beat); "" when neither or when
// the world has no such store; what became of rank 0 when its store is gone or silent. A dead peer's connections all
// close at once, but the store may see it a moment after this rank's gloo did: asked again for up to 0.3 s. Then this
// rank says that it saw an error, so that when it ends over it the others do not take it for the one gone (and rank 0
// lingers for the others to ask). Rank 0 first closes the connections of `failing`, the context whose call failed: a
// peer that waits on rank 0 in that call, and not on the rank that failed, fails at once and asks too, instead of
// waiting out the linger (and then being ended by a job launcher before it could say what it saw).
std::string GoneNote(Shared& shared, int rank, gloo::Context* failing) {
  if (!shared.presence) return "";
  TcpStore& presence = *shared.presence;
  std::string note;
  try {
    std::optional<std::vector<int>> gone;
    for (int i = 0; i < 10; ++i) {
      if (i > 0) std::this_thread::sleep_for(std::chrono::milliseconds(30));
      gone = presence.Departed(std::chrono::milliseconds(500));
      if (!gone || !gone->empty()) break;
    }
    if (!gone) return "; rank 0's store did not answer within 0.5 s (rank 0 stopped or stuck?)";
    if (!gone->empty()) {
      std::string then;
      for (size_t i = 1; i < gone->size() && i < 4; ++i) then += fmt::format(", then rank {}", (*gone)[i]);
      note = fmt::format(
          "; rank {} is gone: its connection to the job's store closed without a word (killed, crashed or exited "
          "mid-run){}",
          gone->front(), then);
    } else if (const auto silent = presence.Silences(std::chrono::milliseconds(500)); silent) {
      if (std::string quiet = SilentPeers(*silent, rank, presence.Beating()); !quiet.empty()) note = "; " + quiet;
    }
    if (presence.Erred(std::chrono::milliseconds(500)) && rank == 0) {
      if (failing) {
        try {
          failing->closeConnections();
        } catch (const std::exception&) {
          // Closing a pair that already failed: the peers see it closed either way.
        }
      }
      LingerForPeers(presence, rank);
    }
  } catch (const std::exception&) {
    if (note.empty()) note = std::string("; ") + kStoreEnded;
  }
  return note;
}

// " (a receive from rank 2)": the peer of the point-to-point transfer this thread waits on, in the
// failing communicator's ranks (PeerScope); "" outside one.
thread_local std::string t_transfer_peer;

class PeerScope {
 public:
  PeerScope(bool send, int peer) {
    t_transfer_peer = fmt::format(" (a {} rank {})", send ? "send to" : "receive from", peer);
  }
  ~PeerScope() { t_transfer_peer.clear(); }
  PeerScope(const PeerScope&) = delete;
  PeerScope& operator=(const PeerScope&) = delete;
};

// Gloo names a failed connection by an address ("Connection closed by peer [127.0.0.1]:41234") and
// a timed-out receive by nothing. A MeshContext keeps, per rank, the addresses gloo may give for that
// rank's connection: the connection's far end (read from this process's socket whose near end is the
// pair's public address) and the address the peer published for it, which gloo keeps instead when the
// peer connected before this side read it. The ranks a receive still waits to hear from lie in
// protected members of gloo's transport context, read through a derived class that is never made (a
// gloo whose members differ fails to compile here rather than misname a rank).
class MeshContext : public gloo::rendezvous::Context {
 public:
  using gloo::rendezvous::Context::Context;

  // connectFullMesh through `store`, keeping each rank's addresses.
  void Connect(gloo::rendezvous::Store& store, std::shared_ptr<gloo::transport::Device>& device) {
    Recorder recorder(store);
    connectFullMesh(recorder, device);
    ends_.assign(static_cast<size_t>(size), {});
    std::map<std::string, int> near;  // this process's sockets by near end; -1 where several share one
    std::error_code ec;
    for (std::filesystem::directory_iterator it("/proc/self/fd", ec), end; !ec && it != end; it.increment(ec)) {
      const int fd = std::atoi(it->path().filename().c_str());
      sockaddr_storage ss{};
      socklen_t len = sizeof(ss);
      if (getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) continue;
      if (ss.ss_family != AF_INET && ss.ss_family != AF_INET6) continue;
      const auto [at, fresh] = near.emplace(Printed(ss, len), fd);
      if (!fresh) at->second = -1;
    }
    for (int r = 0; r < size; ++r) {
      if (r == rank) continue;
      auto& ends = ends_[static_cast<size_t>(r)];
      const auto socket = near.find(getPair(r)->address().str());
      sockaddr_storage ss{};
      socklen_t len = sizeof(ss);
      if (socket != near.end() && socket->second >= 0 &&
          getpeername(socket->second, reinterpret_cast<sockaddr*>(&ss), &len) == 0)
        ends.push_back(Printed(ss, len));
      if (const auto published = recorder.read.find(std::to_string(r)); published != recorder.read.end()) {
        try {
          std::vector<char> all = published->second;
          ends.push_back(gloo::transport::tcp::Address(extractAddress(all, r)).str());
        } catch (const std::exception&) {  // not an address: this rank goes unnamed
        }
      }
    }
  }

  // The rank whose connection gloo's error `what` names by its address; -1 when none is.
  int RankNamedIn(const std::string& what) const {
    for (size_t r = 0; r < ends_.size(); ++r)
      for (const std::string& end : ends_[r])
        for (size_t at = what.find(end); !end.empty() && at != std::string::npos; at = what.find(end, at + 1)) {
          const size_t after = at + end.size();
          if (after == what.size() || !std::isdigit(static_cast<unsigned char>(what[after])))
            return static_cast<int>(r);
        }
    return -1;
  }

  // The ranks whose word that they are sending a posted receive still waits for (sorted, once each).
  std::vector<int> AwaitedSenders() {
    struct Peek : gloo::transport::Context {
      static std::vector<int> Senders(gloo::transport::Context& context) {
        std::lock_guard lock(context.*(&Peek::mutex_));
        std::vector<int> ranks;
        for (const Tally& tally : context.*(&Peek::expectedNotifications_))
          ranks.insert(ranks.end(), tally.getSendList().begin(), tally.getSendList().end());
        return ranks;
      }
    };
    std::vector<int> ranks = transportContext_ ? Peek::Senders(*transportContext_) : std::vector<int>{};
    std::sort(ranks.begin(), ranks.end());
    ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
    return ranks;
  }

 private:
  // A store that forwards and keeps what was read (connectFullMesh reads each rank's pair addresses).
  class Recorder : public gloo::rendezvous::Store {
   public:
    explicit Recorder(gloo::rendezvous::Store& inner) : inner_(inner) {}
    void set(const std::string& key, const std::vector<char>& data) override { inner_.set(key, data); }
    std::vector<char> get(const std::string& key) override { return read[key] = inner_.get(key); }
    void wait(const std::vector<std::string>& keys) override { inner_.wait(keys); }
    void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
      inner_.wait(keys, timeout);
    }
    std::map<std::string, std::vector<char>> read;

   private:
    gloo::rendezvous::Store& inner_;
  };

  static std::string Printed(const sockaddr_storage& ss, socklen_t len) {
    return gloo::transport::tcp::Address(reinterpret_cast<const sockaddr*>(&ss), len).str();
  }

  std::vector<std::vector<std::string>> ends_;  // per rank: the addresses gloo may name its connection by
};

// " (the connection to rank 1)": the rank whose connection gloo's error names by address; else
// " (waiting for rank 1)": the ranks the failing context's receives still wait to hear from; "" when
// neither is known. In the failing communicator's ranks.
std::string FailedPeers(const std::string& what, gloo::Context* failing) {
  auto* mesh = dynamic_cast<MeshContext*>(failing);
  if (!mesh) return "";
  if (const int r = mesh->RankNamedIn(what); r >= 0) return fmt::format(" (the connection to rank {})", r);
  std::string waiting;
  for (const int r : mesh->AwaitedSenders()) waiting += fmt::format("{}rank {}", waiting.empty() ? "" : ", ", r);
  return waiting.empty() ? "" : " (waiting for " + waiting + ")";
}

// The failed call in the failing communicator's ranks, the transfer's peer (else FailedPeers), then
// what the job's store says in the world's ranks (a sub-world of Split says so: its rank 1 need not be
// the world's).
RuntimeError GlooFailure(const char* call, const std::exception& e, const char* file, int line, int rank,
                         Shared& shared, bool sub_world, gloo::Context* failing) {
  const std::string peer = t_transfer_peer.empty() ? FailedPeers(e.what(), failing) : t_transfer_peer;
  std::string note = GoneNote(shared, shared.world_rank, failing);
  if (sub_world && !note.empty()) note = "; in the job's world: " + note.substr(2);
  return RuntimeError(FormatCallFailure(call, e.what(), file, line, rank) + peer + note);
}

// Liveness through the job's store (none without one): beats are pulses; at a deadline the report
// names the ranks gone and the silent ones, then says that this rank is about to end over its
// deadline (Erred; rank 0 lingers for the others to ask).
Liveness PresenceLiveness(std::shared_ptr<TcpStore> presence, int rank) {
  if (!presence) return {};
  Liveness live;
  live.beat = [presence] { presence->Pulse(); };
  live.report = [presence, rank]() -> std::string {
    try {
      const auto gone = presence->Departed(std::chrono::seconds(1));
      const auto silent = gone ? presence->Silences(std::chrono::seconds(1)) : std::nullopt;
      if (!gone || !silent) return "rank 0's store did not answer within 1 s (rank 0 stopped or stuck?)";
      std::string out;
      for (const int r : *gone) out += fmt::format("{}rank {} is gone", out.empty() ? "" : "; ", r);
      if (std::string quiet = SilentPeers(*silent, rank, presence->Beating()); !quiet.empty())
        out += (out.empty() ? "" : "; ") + quiet;
      if (presence->Erred(std::chrono::seconds(1))) LingerForPeers(*presence, rank);
      return out;
    } catch (const std::exception&) {
      return kStoreEnded;
    }
  };
  return live;
}

// Connects a full mesh of `control`'s ranks under `prefix` of the store; a control-plane barrier
// after it, so no rank leaves (and rank 0 stops serving) while another still reads the store.
std::shared_ptr<gloo::Context> Rendezvous(Communicator& control, Shared& shared, const std::string& prefix) {
  auto context = std::make_shared<MeshContext>(control.Rank(), control.Size());
  context->setTimeout(TimeoutOf(shared.options.timeout_s));
  std::string why;
  try {
    gloo::rendezvous::PrefixStore store(prefix, *shared.store);
    context->Connect(store, shared.device);
  } catch (const std::exception& e) {
    why = e.what();
  }
  double failed = why.empty() ? 0 : 1;
  control.HostAllReduce(&failed, 1, ReduceOp::kMax);
  if (shared.file_store) {
    // Every rank has read every address: this rank's files go (a later run must not read them).
    for (const auto& path : shared.file_store->getAllKeyFilePaths()) std::remove(path.c_str());
  }
  if (!why.empty())
    throw RuntimeError(fmt::format("rank {}: gloo rendezvous over {} failed: {}", control.Rank(), shared.device_text,
                                   PrintableLine(why, 1000)));
  if (failed > 0) throw RuntimeError(fmt::format("rank {}: gloo rendezvous failed on another rank", control.Rank()));
  return context;
}

class GlooCommunicator : public Communicator {
 public:
  GlooCommunicator(std::unique_ptr<Communicator> control, std::shared_ptr<Shared> shared,
                   std::shared_ptr<gloo::Context> context, std::string prefix, bool sub_world = false)
      : control_(std::move(control)),
        shared_(std::move(shared)),
        context_(std::move(context)),
        prefix_(std::move(prefix)),
        sub_world_(sub_world) {}
  ~GlooCommunicator() override {
    kept_.clear();
    context_.reset();
  }

  int Rank() const override { return control_->Rank(); }
  int Size() const override { return control_->Size(); }
  DeviceKind Device() const override { return DeviceKind::kCpu; }
  std::string BackendName() const override { return "gloo"; }
  std::string LibraryVersion() const override { return GlooVersion(); }
  int MaxTag() const override { return INT_MAX; }
  Liveness PeerLiveness() override { return PresenceLiveness(shared_->presence, shared_->world_rank); }

  bool Supports(Collective c, DType t, ReduceOp, bool inplace) const override {
    if (inplace && (c == Collective::kAllToAll || c == Collective::kSendRecv)) return false;
    const bool reduces = c == Collective::kAllReduce || c == Collective::kReduceScatter || c == Collective::kReduce;
    return !reduces || GlooReduces(t);
  }

  RequestPtr ISend(const void* buf, size_t bytes, int peer, int tag) override {
    auto r = std::make_unique<GlooRequest>();
    r->send = true;
    if (peer == Rank()) {
      SelfSend(buf, bytes, tag, *r);
      return r;
    }
    r->buffer = context_->createUnboundBuffer(const_cast<void*>(buf), bytes);
    r->peer = peer;
    NamingPeer(*r, [&] {
      CIUIC_GLOO_CHECK(r->buffer->send(peer, gloo::Slot::build(kPointToPointPrefix, static_cast<uint32_t>(tag))));
    });
    return r;
  }
  RequestPtr IRecv(void* buf, size_t bytes, int peer, int tag) override {
    auto r = std::make_unique<GlooRequest>();
    if (peer == Rank()) {
      SelfRecv(buf, bytes, tag, *r);
      return r;
    }
    r->buffer = context_->createUnboundBuffer(buf, bytes);
    r->peer = peer;
    NamingPeer(*r, [&] {
      CIUIC_GLOO_CHECK(r->buffer->recv(peer, gloo::Slot::build(kPointToPointPrefix, static_cast<uint32_t>(tag))));
    });
    return r;
  }
  void Wait(Request& request) override {
    auto& r = static_cast<GlooRequest&>(request);
    if (r.self) {
      if (!r.done) throw RuntimeError(fmt::format("rank {}: a receive from itself that no send matched", Rank()));
      return;
    }
    bool completed = true;
    NamingPeer(r, [&] { CIUIC_GLOO_CHECK(completed = r.send ? r.buffer->waitSend() : r.buffer->waitRecv()); });
    if (!completed)
      throw RuntimeError(
          fmt::format("rank {}: gloo aborted a {} rank {}", Rank(), r.send ? "send to" : "receive from", r.peer));
  }
  // Runs f; a RuntimeError out of it names the transfer's peer: gloo's own message gives only an
  // address (the connection's, which for an accepted one is the peer's ephemeral port).
  template <class F>
  void NamingPeer(const GlooRequest& r, F&& f) {
    PeerScope scope(r.send, r.peer);
    f();
  }

  void AllReduce(const void* send, void* recv, size_t count, DType t, ReduceOp op) override {
    if (count == 0) return;
    const GlooAlgo algo = shared_->options.algo;
    WithGlooType(t, [&](auto tag) {
      using T = decltype(tag);
      if (algo == GlooAlgo::kRingChunked || algo == GlooAlgo::kHalvingDoubling) {
        if (send != recv) std::memcpy(recv, send, count * sizeof(T));
        T* ptr = static_cast<T*>(recv);
        gloo::Algorithm& a = Legacy(static_cast<int>(algo), ptr, count, t, op, [&] {
          const int n = CheckedGlooCount(count, "allreduce");
          std::unique_ptr<gloo::Algorithm> made;
          if (algo == GlooAlgo::kRingChunked)
            made = std::make_unique<gloo::AllreduceRingChunked<T>>(context_, std::vector<T*>{ptr}, n,
                                                                   GlooReduction<T>(op));
          else
            made = std::make_unique<gloo::AllreduceHalvingDoubling<T>>(context_, std::vector<T*>{ptr}, n,
                                                                       GlooReduction<T>(op));
          return made;
        });
        CIUIC_GLOO_CHECK(a.run());
      } else {
        gloo::AllreduceOptions o(context_);
        if (algo == GlooAlgo::kRing) o.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
        if (algo == GlooAlgo::kBcube) o.setAlgorithm(gloo::AllreduceOptions::Algorithm::BCUBE);
        if (send != recv) o.setInput(const_cast<T*>(static_cast<const T*>(send)), count);
        o.setOutput(static_cast<T*>(recv), count);
        o.setReduceFunction(GlooFunction<T>(op));
        CIUIC_GLOO_CHECK(gloo::allreduce(o));
      }
    });
    if (op == ReduceOp::kAvg) DivideBy(recv, count, t, Size());
  }

  void AllGather(const void* send, void* recv, size_t send_count, DType t) override {
    if (send_count == 0) return;
    const size_t es = DTypeSize(t);
    const bool inplace = send == static_cast<uint8_t*>(recv) + Rank() * send_count * es;
    WithElementType(es, [&](auto tag) {
      using E = decltype(tag);
      gloo::AllgatherOptions o(context_);
      if (!inplace) o.setInput(static_cast<E*>(const_cast<void*>(send)), send_count);
      o.setOutput(static_cast<E*>(recv), send_count * Size());
      CIUIC_GLOO_CHECK(gloo::allgather(o));
    });
  }

  // Gloo's reduce-scatter (ReduceScatterHalvingDoubling) works in place on the whole buffer and
  // leaves this rank's block at its start. In place: over the caller's buffer, the block then moved
  // to this rank's slot (as the MPI backend). Out of place: over a copy the communicator keeps.
  void ReduceScatter(const void* send, void* recv, size_t recv_count, DType t, ReduceOp op) override {
    if (recv_count == 0) return;
    const size_t es = DTypeSize(t);
    const size_t bytes = recv_count * es;
    const bool inplace = recv == static_cast<const uint8_t*>(send) + Rank() * bytes;
    const size_t count = recv_count * Size();
    WithGlooType(t, [&](auto tag) {
      using T = decltype(tag);
      const int n = CheckedGlooCount(count, "reducescatter");
      std::vector<char>* scratch = nullptr;
      T* base = inplace ? static_cast<T*>(const_cast<void*>(send)) : nullptr;
      gloo::Algorithm& a = Legacy(
          kReduceScatterKind, base, count, t, op,
          [&] {
            Kept& k = kept_.back();
            if (!base) k.scratch.resize(count * sizeof(T));
            T* ptr = base ? base : reinterpret_cast<T*>(k.scratch.data());
            return std::make_unique<gloo::ReduceScatterHalvingDoubling<T>>(
                context_, std::vector<T*>{ptr}, n, std::vector<int>(Size(), static_cast<int>(recv_count)),
                GlooReduction<T>(op));
          },
          &scratch);
      if (!inplace) std::memcpy(scratch->data(), send, count * es);
      CIUIC_GLOO_CHECK(a.run());
      const void* block = inplace ? static_cast<const void*>(send) : scratch->data();
      if (block != recv) std::memmove(recv, block, bytes);
    });
    if (op == ReduceOp::kAvg) DivideBy(recv, recv_count, t, Size());
  }

  void Broadcast(const void* send, void* recv, size_t count, DType t, int root) override {
    if (count == 0) return;
    WithElementType(DTypeSize(t), [&](auto tag) {
      using E = decltype(tag);
      gloo::BroadcastOptions o(context_);
      o.setRoot(root);
      if (Rank() == root && send != recv) o.setInput(static_cast<E*>(const_cast<void*>(send)), count);
      o.setOutput(static_cast<E*>(recv), count);
      CIUIC_GLOO_CHECK(gloo::broadcast(o));
    });
  }

  void Reduce(const void* send, void* recv, size_t count, DType t, ReduceOp op, int root) override {
    if (count == 0) return;
    WithGlooType(t, [&](auto tag) {
      using T = decltype(tag);
      gloo::ReduceOptions o(context_);
      o.setRoot(root);
      if (send != recv) o.setInput(const_cast<T*>(static_cast<const T*>(send)), count);
      o.setOutput(static_cast<T*>(recv), count);
      o.setReduceFunction(GlooFunction<T>(op));
      CIUIC_GLOO_CHECK(gloo::reduce(o));
    });
    if (op == ReduceOp::kAvg && Rank() == root) DivideBy(recv, count, t, Size());
  }

  void AllToAll(const void* send, void* recv, size_t count_per_peer, DType t) override {
    if (count_per_peer == 0) return;
    if (send == recv) throw UsageError("gloo backend: in-place alltoall is not offered");
    const size_t count = count_per_peer * Size();
    WithElementType(DTypeSize(t), [&](auto tag) {
      using E = decltype(tag);
      gloo::AlltoallOptions o(context_);
      o.setInput(static_cast<E*>(const_cast<void*>(send)), count);
      o.setOutput(static_cast<E*>(recv), count);
      CIUIC_GLOO_CHECK(gloo::alltoall(o));
    });
  }

  void SendRecv(const void* send, int send_peer, void* recv, int recv_peer, size_t count, DType t) override {
    if (count == 0) return;
    if (send == recv) throw UsageError("gloo backend: in-place sendrecv is not offered");
    const size_t bytes = count * DTypeSize(t);
    if (send_peer == Rank() && recv_peer == Rank()) {
      std::memcpy(recv, send, bytes);
      return;
    }
    const auto slot = gloo::Slot::build(kSendRecvPrefix, 0);
    auto out = context_->createUnboundBuffer(const_cast<void*>(send), bytes);
    auto in = context_->createUnboundBuffer(recv, bytes);
    CIUIC_GLOO_CHECK(in->recv(recv_peer, slot));
    CIUIC_GLOO_CHECK(out->send(send_peer, slot));
    CIUIC_GLOO_CHECK(out->waitSend());
    CIUIC_GLOO_CHECK(in->waitRecv());
  }

  void Barrier() override {
    gloo::BarrierOptions o(context_);
    CIUIC_GLOO_CHECK(gloo::barrier(o));
  }

  std::unique_ptr<Communicator> Split(int color, int key) override {
    auto control = control_->Split(color, key);
    const std::string prefix = fmt::format("{}/split{}/color{}", prefix_, splits_++, color);
    auto context = Rendezvous(*control, *shared_, prefix);
    return std::make_unique<GlooCommunicator>(std::move(control), shared_, std::move(context), prefix, true);
  }

  void HostAllReduce(double* values, size_t n, ReduceOp op) override { control_->HostAllReduce(values, n, op); }
  void HostAllGather(const void* send, void* recv, size_t bytes) override {
    control_->HostAllGather(send, recv, bytes);
  }

 private:
  static constexpr int kReduceScatterKind = 100;

  // Gloo's algorithm classes are built over one buffer (their pairs' buffers, slots and scratch made
  // once) and meant to run many times: one is kept per (kind, buffer) and rebuilt when the buffer's
  // count, type or op change, at most kMaxKept, the least recently used dropped. Building one takes
  // slots from the context's counter, so every rank must build and drop in the same order: it does
  // when every rank passes its buffers in the same pattern (the same buffer on one rank is the same
  // buffer on all, as ciuic-bench's arena and the runtime's buffers are).
  struct Kept {
    int kind;
    const void* ptr;  // nullptr: over `scratch`
    size_t count;
    DType type;
    ReduceOp op;
    uint64_t used;
    std::vector<char> scratch;
    std::unique_ptr<gloo::Algorithm> algo;
  };
  template <class Make>
  gloo::Algorithm& Legacy(int kind, const void* ptr, size_t count, DType t, ReduceOp op, Make make,
                          std::vector<char>** scratch = nullptr) {
    ++uses_;
    auto it = std::find_if(kept_.begin(), kept_.end(), [&](const Kept& k) {
      return k.kind == kind && k.ptr == ptr && (ptr != nullptr || (k.count == count && k.type == t && k.op == op));
    });
    // Reuse only where every rank reuses: buffers sit at different addresses on different ranks, so
    // one rank may find its instance while a peer builds a new one, whose set-up the first never
    // answers (a closed connection under test_gloo at 4 ranks). Building is collective; so is this.
    double hit = it != kept_.end() && it->count == count && it->type == t && it->op == op ? 1.0 : 0.0;
    control_->HostAllReduce(&hit, 1, ReduceOp::kMin);
    if (hit > 0) {
      it->used = uses_;
      if (scratch) *scratch = &it->scratch;
      return *it->algo;
    }
    if (it != kept_.end()) kept_.erase(it);
    if (kept_.size() >= kMaxKept) {
      kept_.erase(
          std::min_element(kept_.begin(), kept_.end(), [](const Kept& a, const Kept& b) { return a.used < b.used; }));
    }
    kept_.push_back(Kept{kind, ptr, count, t, op, uses_, {}, nullptr});
    try {
      CIUIC_GLOO_CHECK(kept_.back().algo = make());
    } catch (...) {
      kept_.pop_back();
      throw;
    }
    if (scratch) *scratch = &kept_.back().scratch;
    return *kept_.back().algo;
  }

  void SelfSend(const void* buf, size_t bytes, int tag, GlooRequest& r) {
    r.self = true;
    r.done = true;
    auto& waiting = self_.receives[tag];
    if (!waiting.empty()) {
      const auto p = waiting.front();
      waiting.pop_front();
      if (p.bytes != bytes)
        throw RuntimeError(fmt::format("rank {}: a message to itself of {} B into {} B", Rank(), bytes, p.bytes));
      if (bytes) std::memcpy(p.buf, buf, bytes);
      p.request->done = true;
      return;
    }
    const char* b = static_cast<const char*>(buf);
    self_.sent[tag].emplace_back(b, b + bytes);
  }
  void SelfRecv(void* buf, size_t bytes, int tag, GlooRequest& r) {
    r.self = true;
    auto& sent = self_.sent[tag];
    if (!sent.empty()) {
      const auto msg = std::move(sent.front());
      sent.pop_front();
      if (msg.size() != bytes)
        throw RuntimeError(fmt::format("rank {}: a message to itself of {} B into {} B", Rank(), msg.size(), bytes));
      if (bytes) std::memcpy(buf, msg.data(), bytes);
      r.done = true;
      return;
    }
    self_.receives[tag].push_back({buf, bytes, &r});
  }

  std::unique_ptr<Communicator> control_;
  std::shared_ptr<Shared> shared_;
  std::shared_ptr<gloo::Context> context_;
  std::string prefix_;
  bool sub_world_ = false;  // made by Split: its ranks are not the world's
  int splits_ = 0;
  uint64_t uses_ = 0;
  std::vector<Kept> kept_;
  SelfMailbox self_;
};

// Gloo's store interface over the job's store.
class StoreAdapter : public gloo::rendezvous::Store {
 public:
  explicit StoreAdapter(std::shared_ptr<KeyValueStore> kv) : kv_(std::move(kv)) {}
  void set(const std::string& key, const std::vector<char>& data) override { kv_->Set(key, data); }
  std::vector<char> get(const std::string& key) override { return kv_->Get(key); }
  void wait(const std::vector<std::string>& keys) override {
    for (const auto& k : keys) kv_->Get(k);
  }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds&) override { wait(keys); }

 private:
  std::shared_ptr<KeyValueStore> kv_;
};

// The control plane of a store-made world: small host collectives over a gloo context of its own
// (the data context's slots and tags stay the algorithms'). Point-to-point and the data collectives
// are not offered.
class GlooControl : public Communicator {
 public:
  GlooControl(std::shared_ptr<Shared> shared, std::shared_ptr<gloo::Context> context, std::string prefix,
              bool sub_world = false)
      : shared_(std::move(shared)), context_(std::move(context)), prefix_(std::move(prefix)), sub_world_(sub_world) {}

  int Rank() const override { return context_->rank; }
  int Size() const override { return context_->size; }
  DeviceKind Device() const override { return DeviceKind::kCpu; }
  std::string BackendName() const override { return "gloo control"; }
  bool Supports(Collective, DType, ReduceOp, bool) const override { return false; }
  RequestPtr ISend(const void*, size_t, int, int) override { throw Refused(); }
  RequestPtr IRecv(void*, size_t, int, int) override { throw Refused(); }
  void Wait(Request&) override { throw Refused(); }
  void AllReduce(const void*, void*, size_t, DType, ReduceOp) override { throw Refused(); }
  void AllGather(const void*, void*, size_t, DType) override { throw Refused(); }
  void ReduceScatter(const void*, void*, size_t, DType, ReduceOp) override { throw Refused(); }
  void Broadcast(const void*, void*, size_t, DType, int) override { throw Refused(); }
  void Reduce(const void*, void*, size_t, DType, ReduceOp, int) override { throw Refused(); }
  void AllToAll(const void*, void*, size_t, DType) override { throw Refused(); }
  void SendRecv(const void*, int, void*, int, size_t, DType) override { throw Refused(); }

  void Barrier() override {
    gloo::BarrierOptions o(context_);
    CIUIC_GLOO_CHECK(gloo::barrier(o));
  }
  void HostAllReduce(double* values, size_t n, ReduceOp op) override {
    if (n == 0) return;
    gloo::AllreduceOptions o(context_);
    o.setOutput(values, n);
    o.setReduceFunction(GlooFunction<double>(op));
    CIUIC_GLOO_CHECK(gloo::allreduce(o));
    if (op == ReduceOp::kAvg)
      for (size_t i = 0; i < n; ++i) values[i] /= Size();
  }
  void HostAllGather(const void* send, void* recv, size_t bytes) override {
    if (bytes == 0) return;
    gloo::AllgatherOptions o(context_);
    o.setInput(static_cast<uint8_t*>(const_cast<void*>(send)), bytes);
    o.setOutput(static_cast<uint8_t*>(recv), bytes * static_cast<size_t>(Size()));
    CIUIC_GLOO_CHECK(gloo::allgather(o));
  }

  // Collective over this world: the members of `color` connect a context of their own under a new
  // prefix; every rank learns whether every rank connected.
  std::unique_ptr<Communicator> Split(int color, int key) override {
    const int mine[2] = {color, key};
    std::vector<int> all(2 * static_cast<size_t>(Size()));
    HostAllGather(mine, all.data(), sizeof mine);
    std::vector<std::pair<int, int>> members;  // (key, rank) of this color
    for (int r = 0; r < Size(); ++r)
      if (all[2 * r] == color) members.push_back({all[2 * r + 1], r});
    std::sort(members.begin(), members.end());
    int sub_rank = 0;
    while (members[static_cast<size_t>(sub_rank)].second != Rank()) ++sub_rank;
    const std::string prefix = fmt::format("{}/split{}/color{}", prefix_, splits_++, color);
    std::string why;
    std::shared_ptr<gloo::Context> context;
    try {
      auto c = std::make_shared<MeshContext>(sub_rank, static_cast<int>(members.size()));
      c->setTimeout(TimeoutOf(shared_->options.timeout_s));
      gloo::rendezvous::PrefixStore store(prefix, *shared_->store);
      c->Connect(store, shared_->device);
      context = c;
    } catch (const std::exception& e) {
      why = e.what();
    }
    double failed = why.empty() ? 0 : 1;
    HostAllReduce(&failed, 1, ReduceOp::kMax);
    if (!why.empty())
      throw RuntimeError(fmt::format("rank {}: gloo control rendezvous failed: {}", Rank(), PrintableLine(why, 1000)));
    if (failed > 0) throw RuntimeError(fmt::format("rank {}: gloo control rendezvous failed on another rank", Rank()));
    return std::make_unique<GlooControl>(shared_, std::move(context), prefix, true);
  }

 private:
  UsageError Refused() const { return UsageError("the gloo control plane carries host collectives only"); }
  std::shared_ptr<Shared> shared_;
  std::shared_ptr<gloo::Context> context_;
  std::string prefix_;
  int splits_ = 0;
  bool sub_world_ = false;  // made by Split: its ranks are not the world's
};

std::string NumericHost(const sockaddr_storage& addr, socklen_t len) {
  char host[NI_MAXHOST] = {};
  if (getnameinfo(reinterpret_cast<const sockaddr*>(&addr), len, host, sizeof(host), nullptr, 0, NI_NUMERICHOST) != 0)
    return "";
  return host;
}

bool IsLoopback(const sockaddr* a) {
  if (a->sa_family == AF_INET) return (ntohl(reinterpret_cast<const sockaddr_in*>(a)->sin_addr.s_addr) >> 24) == 127;
  if (a->sa_family == AF_INET6) return IN6_IS_ADDR_LOOPBACK(&reinterpret_cast<const sockaddr_in6*>(a)->sin6_addr);
  return false;
}

// The first address `name` resolves to that this host can bind, or "" (why in `why`).
std::string BindableAddress(const std::string& name, bool* loopback, std::string* why) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* list = nullptr;
  if (const int rc = getaddrinfo(name.c_str(), nullptr, &hints, &list); rc != 0) {
    *why = gai_strerror(rc);
    return "";
  }
  std::string found;
  for (addrinfo* a = list; a && found.empty(); a = a->ai_next) {
    const int fd = socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    if (bind(fd, a->ai_addr, a->ai_addrlen) == 0) {
      sockaddr_storage s{};
      std::memcpy(&s, a->ai_addr, a->ai_addrlen);
      found = NumericHost(s, a->ai_addrlen);
      *loopback = IsLoopback(a->ai_addr);
    } else {
      *why = fmt::format("{} is not an address of this host",
                         NumericHost(*reinterpret_cast<sockaddr_storage*>(a->ai_addr), a->ai_addrlen));
    }
    close(fd);
  }
  freeaddrinfo(list);
  return found;
}

// The device's attributes: --gloo-iface, $GLOO_SOCKET_IFNAME, else the host name (PyTorch's order);
// loopback when the host name does not resolve here and every rank is on this host.
gloo::transport::tcp::attr DeviceAttr(const GlooOptions& options, const std::vector<std::string>& hosts, int rank) {
  gloo::transport::tcp::attr attr;
  std::string iface = options.iface;
  const char* from = "--gloo-iface";
  if (iface.empty()) {
    if (const char* env = std::getenv("GLOO_SOCKET_IFNAME"); env && *env) {
      iface = env;
      from = "GLOO_SOCKET_IFNAME";
    }
  }
  if (!iface.empty()) {
    CheckGlooInterface(iface, from);
    attr.iface = iface;
    return attr;
  }
  const bool one_host = std::all_of(hosts.begin(), hosts.end(), [&](const std::string& h) { return h == hosts[0]; });
  const std::string& name = hosts[static_cast<size_t>(rank)];
  bool loopback = false;
  std::string why;
  const std::string address = BindableAddress(name, &loopback, &why);
  if (!address.empty() && (one_host || !loopback)) {
    attr.hostname = address;
    return attr;
  }
  if (one_host) {
    attr.hostname = "127.0.0.1";
    return attr;
  }
  throw RuntimeError(
      fmt::format("gloo backend: the host name '{}' {} and the ranks are on several hosts: set --gloo-iface IFACE or "
                  "GLOO_SOCKET_IFNAME to the interface the hosts reach each other on",
                  name,
                  address.empty() ? fmt::format("does not resolve to an address of this host ({})", why)
                                  : fmt::format("resolves to the loopback address {}", address)));
}

// Raises on every rank when any rank failed: its own message there, the failing rank named elsewhere.
void AgreeOrThrow(Communicator& control, const std::string& why, const char* what) {
  double failed = why.empty() ? 0 : control.Rank() + 1;
  std::vector<double> all(1, failed);
  control.HostAllReduce(all.data(), 1, ReduceOp::kMax);
  if (!why.empty()) throw RuntimeError(fmt::format("rank {}: {}", control.Rank(), PrintableLine(why, 1000)));
  if (all[0] > 0)
    throw RuntimeError(
        fmt::format("rank {}: {} failed on rank {}", control.Rank(), what, static_cast<int>(all[0]) - 1));
}

}  // namespace

std::unique_ptr<Communicator> MakeGlooWorld(std::unique_ptr<Communicator> control, const GlooOptions& options) {
  const int rank = control->Rank();
  const auto hosts = GatherHostnames(*control);
  auto shared = std::make_shared<Shared>();
  shared->options = options;
  shared->world_rank = rank;
  // Rank 0's store endpoint (or nothing with --gloo-store) and a run id naming this world's keys,
  // so files a killed run left in a --gloo-store folder are never read.
  constexpr size_t kLen = 256;
  char mine[kLen] = {};
  std::string why;
  try {
    const auto attr = DeviceAttr(options, hosts, rank);
    shared->device = gloo::transport::tcp::CreateDevice(attr);
    shared->device_text = shared->device->str();
    if (rank == 0) {
      std::string endpoint;
      if (options.store_dir.empty()) {
        const auto resolved = gloo::transport::tcp::CreateDeviceAttr(attr);
        shared->server = std::make_shared<TcpStoreServer>(NumericHost(resolved.ai_addr, resolved.ai_addrlen));
        endpoint = shared->server->Endpoint();
      }
      std::random_device rd;
      const std::string text = fmt::format("{:08x}{:08x} {}", rd(), rd(), endpoint);
      std::snprintf(mine, kLen, "%s", text.c_str());
    }
  } catch (const std::exception& e) {
    why = e.what();
  }
  AgreeOrThrow(*control, why, "making the gloo device");
  std::vector<char> all(kLen * static_cast<size_t>(control->Size()));
  control->HostAllGather(mine, all.data(), kLen);
  const std::string root_text(all.data(), strnlen(all.data(), kLen));
  const std::string run_id = root_text.substr(0, root_text.find(' '));
  const std::string endpoint = root_text.substr(root_text.find(' ') + 1);
  try {
    if (options.store_dir.empty()) {
      auto tcp = std::make_shared<TcpStore>(endpoint, TimeoutOf(options.timeout_s));
      // Across hosts the store tells who is gone. On one host the launcher's heartbeat files do
      // (core/watchdog.h), and read at once: mpiexec ends the job a moment after a rank fails, and
      // a stopped rank it has killed since would be named as dead.
      const bool one_host =
          std::all_of(hosts.begin(), hosts.end(), [&](const std::string& h) { return h == hosts[0]; });
      if (!one_host) {
        tcp->Identify(rank);
        shared->presence = tcp;
      }
      shared->store = tcp;
    } else {
      auto file = std::make_shared<gloo::rendezvous::FileStore>(options.store_dir);
      shared->file_store = file.get();
      shared->store = file;
    }
    why.clear();
  } catch (const std::exception& e) {
    why = fmt::format("gloo store {}: {}", options.store_dir.empty() ? endpoint : options.store_dir, e.what());
  }
  AgreeOrThrow(*control, why, "opening the gloo store");
  const std::string prefix = "ciuic-" + run_id;
  auto context = Rendezvous(*control, *shared, prefix);
  auto comm = std::make_unique<GlooCommunicator>(std::move(control), std::move(shared), std::move(context), prefix);
  SetErrorRank(rank);
  return comm;
}

namespace {

// For a world made through a store of the user's (torch.distributed's, which cannot tell who is
// gone): rank 0 serves a TCP store of its own on its gloo address for that alone, its endpoint
// passed through the user's store, and every rank's identified connection to it. A help for error
// messages, never a reason to fail: no presence where rank 0 cannot serve or a rank cannot connect.
std::shared_ptr<TcpStore> ServePresence(KeyValueStore& kv, int rank, const std::string& prefix,
                                        const gloo::transport::tcp::attr& attr, Shared& shared) {
  const std::string key = prefix + "/presence";
  if (rank == 0) {
    std::string endpoint;
    try {
      const auto resolved = gloo::transport::tcp::CreateDeviceAttr(attr);
      shared.server = std::make_shared<TcpStoreServer>(NumericHost(resolved.ai_addr, resolved.ai_addrlen));
      endpoint = shared.server->Endpoint();
    } catch (const std::exception&) {
      shared.server.reset();
    }
    kv.Set(key, std::vector<char>(endpoint.begin(), endpoint.end()));  // "" when it cannot serve
  }
  const auto v = kv.Get(key);
  if (v.empty()) return nullptr;
  try {
    auto presence = std::make_shared<TcpStore>(std::string(v.begin(), v.end()), std::chrono::seconds(10));
    presence->Identify(rank);
    return presence;
  } catch (const std::exception&) {
    return nullptr;
  }
}

// MakeGlooStoreWorld; `presence`: this rank's identified connection to the job's TCP store, if any
// (none: one of its own, ServePresence).
std::unique_ptr<Communicator> StoreWorld(std::shared_ptr<KeyValueStore> kv, int rank, int size,
                                         const std::string& prefix, const GlooOptions& options,
                                         std::shared_ptr<TcpStore> presence) {
  if (!kv) throw UsageError("gloo store world: no store");
  if (size < 1 || rank < 0 || rank >= size)
    throw UsageError(fmt::format("gloo store world: rank {} of {} is not a rank of the world", rank, size));
  auto shared = std::make_shared<Shared>();
  shared->options = options;
  shared->world_rank = rank;
  shared->store = std::make_shared<StoreAdapter>(kv);
  shared->presence = std::move(presence);
  // Host names first: the device binds the address the others can reach (DeviceAttr).
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  kv->Set(fmt::format("{}/host/{}", prefix, rank), std::vector<char>(host, host + strnlen(host, sizeof host)));
  std::vector<std::string> hosts;
  for (int r = 0; r < size; ++r) {
    const auto v = kv->Get(fmt::format("{}/host/{}", prefix, r));
    hosts.emplace_back(v.begin(), v.end());
  }
  const auto attr = DeviceAttr(options, hosts, rank);
  shared->device = gloo::transport::tcp::CreateDevice(attr);
  shared->device_text = shared->device->str();
  if (!shared->presence) shared->presence = ServePresence(*kv, rank, prefix, attr, *shared);
  std::shared_ptr<gloo::Context> control_context;
  try {
    auto c = std::make_shared<MeshContext>(rank, size);
    c->setTimeout(TimeoutOf(options.timeout_s));
    gloo::rendezvous::PrefixStore store(prefix + "/control", *shared->store);
    c->Connect(store, shared->device);
    control_context = c;
  } catch (const std::exception& e) {
    throw RuntimeError(fmt::format("rank {}: gloo rendezvous over {} through the job's store failed: {}", rank,
                                   shared->device_text, PrintableLine(e.what(), 1000)));
  }
  auto control = std::make_unique<GlooControl>(shared, std::move(control_context), prefix + "/control");
  auto context = Rendezvous(*control, *shared, prefix + "/data");
  auto comm =
      std::make_unique<GlooCommunicator>(std::move(control), std::move(shared), std::move(context), prefix + "/data");
  SetErrorRank(rank);
  return comm;
}

// The job's TCP store as a KeyValueStore (Get waits for its key: TcpStore::get).
class TcpKeyValueStore : public KeyValueStore {
 public:
  explicit TcpKeyValueStore(std::shared_ptr<TcpStore> s) : s_(std::move(s)) {}
  void Set(const std::string& key, const std::vector<char>& value) override { s_->set(key, value); }
  std::vector<char> Get(const std::string& key) override { return s_->get(key); }

 private:
  std::shared_ptr<TcpStore> s_;
};

}  // namespace

std::unique_ptr<Communicator> MakeGlooStoreWorld(std::shared_ptr<KeyValueStore> kv, int rank, int size,
                                                 const std::string& prefix, const GlooOptions& options) {
  return StoreWorld(std::move(kv), rank, size, prefix, options, nullptr);
}

std::string NumericAddress(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* list = nullptr;
  int rc = getaddrinfo(host.c_str(), nullptr, &hints, &list);
  if (rc != 0) {
    hints.ai_family = AF_UNSPEC;
    rc = getaddrinfo(host.c_str(), nullptr, &hints, &list);
  }
  if (rc != 0 || !list) throw RuntimeError(fmt::format("the job's store host '{}': {}", host, gai_strerror(rc)));
  char text[NI_MAXHOST] = {};
  rc = getnameinfo(list->ai_addr, list->ai_addrlen, text, sizeof text, nullptr, 0, NI_NUMERICHOST);
  const int family = list->ai_family;
  freeaddrinfo(list);
  if (rc != 0) throw RuntimeError(fmt::format("the job's store host '{}': {}", host, gai_strerror(rc)));
  return family == AF_INET6 ? fmt::format("[{}]", text) : std::string(text);
}

std::unique_ptr<Communicator> MakeGlooTcpJobWorld(int rank, int size, const std::string& host, int port,
                                                  const GlooOptions& options) {
  if (port < 1 || port > 65535) throw UsageError(fmt::format("the job's store port {}: expected 1..65535", port));
  const std::string address = NumericAddress(host);
  // Rank 0's server lives until the process ends: the world may make contexts through it later.
  static std::unique_ptr<TcpStoreServer> server;
  if (rank == 0 && !server) {
    const bool v6 = address.front() == '[';
    server = std::make_unique<TcpStoreServer>(v6 ? "::" : "0.0.0.0", port);
  }
  const auto timeout = std::chrono::milliseconds(options.timeout_s > 0 ? static_cast<int64_t>(options.timeout_s * 1000)
                                                                       : int64_t{3600} * 1000);
  auto store = std::make_shared<TcpStore>(fmt::format("{}:{}", address, port), timeout, /*wait_for_server=*/true);
  store->Identify(rank);
  return StoreWorld(std::make_shared<TcpKeyValueStore>(store), rank, size, "ciuic-job", options, store);
}

JobRollCall MakeJobRollCall(const std::string& host, int port, int rank, int size, const std::string& point) {
  auto store =
      std::make_shared<TcpStore>(fmt::format("{}:{}", NumericAddress(host), port), std::chrono::milliseconds(10000));
  auto key = [point](int r) { return fmt::format("ciuic-roll/{}/{}", point, r); };
  JobRollCall roll;
  roll.arrive = [store, key, rank] { store->set(key(rank), {'1'}); };
  roll.absent = [store, key, size] {
    std::string out;
    for (int r = 0; r < size; ++r) {
      try {
        store->wait({key(r)}, std::chrono::milliseconds(r == 0 ? 200 : 1));
      } catch (const std::exception&) {
        out += fmt::format("{}rank {}", out.empty() ? "" : ", ", r);
      }
    }
    return out;
  };
  return roll;
}

std::string GlooVersion() {
  return fmt::format("Gloo {}.{}.{}", GLOO_VERSION_MAJOR, GLOO_VERSION_MINOR, GLOO_VERSION_PATCH);
}

#else
std::unique_ptr<Communicator> MakeGlooTcpJobWorld(int, int, const std::string&, int, const GlooOptions&) {
  throw RuntimeError("gloo backend: this build has no Gloo (install libgloo-dev and configure again)");
}
std::unique_ptr<Communicator> MakeGlooWorld(std::unique_ptr<Communicator>, const GlooOptions&) {
  throw RuntimeError("gloo backend: this build has no Gloo (install libgloo-dev and configure again)");
}
std::unique_ptr<Communicator> MakeGlooStoreWorld(std::shared_ptr<KeyValueStore>, int, int, const std::string&,
                                                 const GlooOptions&) {
  throw RuntimeError("gloo backend: this build has no Gloo (install libgloo-dev and configure again)");
}
JobRollCall MakeJobRollCall(const std::string&, int, int, int, const std::string&) {
  throw RuntimeError("gloo backend: this build has no Gloo (install libgloo-dev and configure again)");
}
std::string GlooVersion() { return ""; }
#endif

}  // namespace ciuic
