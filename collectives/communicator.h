#pragma once
// The transport every algorithm is written against. A backend (local threads, Open MPI, NCCL) gives
// point-to-point messages, its own native collectives (so `--backend mpi|nccl` measures the library
// itself), a barrier, Split, and a small host-memory control plane for timings and error counts.
//
// Buffer layout follows NCCL: counts are elements per rank buffer; in-place AllGather passes
// send == recv + rank * count, in-place ReduceScatter passes recv == send + rank * recv_count.
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/buffer.h"
#include "core/dtype.h"
#include "core/reduce_op.h"

namespace ciuic {

class SharedWindow;

enum class DeviceKind { kCpu, kCuda };
const char* DeviceKindName(DeviceKind d);

enum class Collective { kAllReduce, kAllGather, kReduceScatter, kBroadcast, kReduce, kAllToAll, kSendRecv };

// What a transport knows of its ranks' signs of life (a gloo world whose ranks share a TCP store:
// MakeGlooTcpJobWorld's, a store world's, MakeGlooWorld's across hosts): `beat` for a watchdog's
// thread (Watchdog::SetBeat: this rank's sign of life, never blocks) and `report` for its expiry
// (Watchdog::SetPeerReport): "rank 1 silent for 3.1 s (stopped or stuck ...)", the ranks gone, or what
// became of rank 0's store. Both empty where the transport has no such store. They keep the store's
// connection, not the communicator.
struct Liveness {
  std::function<void()> beat;
  std::function<std::string()> report;
};

class Request {
 public:
  virtual ~Request() = default;
};
using RequestPtr = std::unique_ptr<Request>;

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int Rank() const = 0;
  virtual int Size() const = 0;
  virtual DeviceKind Device() const = 0;
  MemoryKind BufferKind() const { return Device() == DeviceKind::kCuda ? MemoryKind::kDevice : MemoryKind::kHost; }
  virtual std::string BackendName() const = 0;
  // Library versions ("Open MPI 4.1.4", "NCCL 2.28.9") for run context; empty for none.
  virtual std::string LibraryVersion() const { return ""; }

  // Whether the backend implements this combination natively; the runner skips others with a reason.
  virtual bool Supports(Collective c, DType t, ReduceOp op, bool inplace) const = 0;

  // The largest tag ISend/IRecv accept (MPI guarantees 32767; MPI_TAG_UB may be larger).
  virtual int MaxTag() const { return 32767; }

  // Point-to-point (asynchronous; Wait completes it). 0 <= tag <= MaxTag().
  virtual RequestPtr ISend(const void* buf, size_t bytes, int peer, int tag) = 0;
  virtual RequestPtr IRecv(void* buf, size_t bytes, int peer, int tag) = 0;
  virtual void Wait(Request& request) = 0;

  // Native collectives. On a device backend they are enqueued on Stream(); Synchronize() waits.
  virtual void AllReduce(const void* send, void* recv, size_t count, DType t, ReduceOp op) = 0;
  virtual void AllGather(const void* send, void* recv, size_t send_count, DType t) = 0;
  virtual void ReduceScatter(const void* send, void* recv, size_t recv_count, DType t, ReduceOp op) = 0;
  virtual void Broadcast(const void* send, void* recv, size_t count, DType t, int root) = 0;
  virtual void Reduce(const void* send, void* recv, size_t count, DType t, ReduceOp op, int root) = 0;
  virtual void AllToAll(const void* send, void* recv, size_t count_per_peer, DType t) = 0;
  // Sends count elements to send_peer and receives count elements from recv_peer.
  virtual void SendRecv(const void* send, int send_peer, void* recv, int recv_peer, size_t count, DType t) = 0;

  virtual void Barrier() = 0;
  virtual void Synchronize() {}
  // Device backends whose point-to-point calls and kernels are ordered on Stream() (NCCL): a send and
  // a receive posted between GroupStart and GroupEnd run together, and work enqueued after them waits
  // for them without the host waiting. Host backends: no-ops, false.
  virtual bool StreamOrdered() const { return false; }
  virtual void GroupStart() {}
  virtual void GroupEnd() {}
  virtual void* Stream() const { return nullptr; }

  // Ranks with the same color form a new communicator, ordered by (key, rank).
  virtual std::unique_ptr<Communicator> Split(int color, int key) = 0;

  // Control plane on host memory (small messages, blocking).
  virtual void HostAllReduce(double* values, size_t n, ReduceOp op) = 0;
  virtual void HostAllGather(const void* send, void* recv, size_t bytes) = 0;

  // See Liveness; a communicator over another transport forwards that transport's.
  virtual Liveness PeerLiveness() { return {}; }

  // Collective: `bytes` of host memory that this communicator's collectives may read and write in
  // every rank's process (collectives/shared_window.h), for buffers the caller places in it (as
  // NCCL's registered buffers). Null where the communicator has no use for it: every transport; the
  // runtime's communicator (runtime_comm.h) makes one and its ring reads and writes peers there.
  virtual std::shared_ptr<SharedWindow> AllocShared(size_t /*bytes*/) { return nullptr; }
};

// All ranks' host names, gathered over the control plane.
std::vector<std::string> GatherHostnames(Communicator& comm);

}  // namespace ciuic
