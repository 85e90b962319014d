#include "collectives/backends/nccl/communicator.h"

#include "core/config.h"
#include "core/error.h"

#if CIUIC_HAVE_NCCL
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <limits>
#include <thread>

#include "core/cuda_check.h"
#include "core/fault.h"
#include "core/watchdog.h"

#define CIUIC_NCCL_CHECK(call)                                                                        \
  do {                                                                                                \
    ncclResult_t ciuic_nccl_rc_ = (call);                                                             \
    if (ciuic_nccl_rc_ != ncclSuccess) {                                                              \
      throw ::ciuic::RuntimeError(                                                                    \
          ::ciuic::FormatCallFailure(#call, ncclGetErrorString(ciuic_nccl_rc_), __FILE__, __LINE__)); \
    }                                                                                                 \
  } while (0)
// Inside the communicator (non-blocking, see MakeNcclWorld): a call that returns ncclInProgress is
// waited for before the next one; a failed call also marks the communicator failed, so it is aborted
// rather than destroyed.
#define CIUIC_NCCL_COMM_CHECK(call)                                                                   \
  do {                                                                                                \
    const ncclResult_t ciuic_nccl_rc_ = (call);                                                       \
    if (ciuic_nccl_rc_ == ncclInProgress) {                                                           \
      Await(comm_, #call);                                                                            \
    } else if (ciuic_nccl_rc_ != ncclSuccess) {                                                       \
      failed_ = true;                                                                                 \
      throw ::ciuic::RuntimeError(                                                                    \
          ::ciuic::FormatCallFailure(#call, ncclGetErrorString(ciuic_nccl_rc_), __FILE__, __LINE__)); \
    }                                                                                                 \
  } while (0)
#define CIUIC_CUDA_COMM_CHECK(call) \
  do {                              \
    try {                           \
      CIUIC_CUDA_CHECK(call);       \
    } catch (...) {                 \
      failed_ = true;               \
      throw;                        \
    }                               \
  } while (0)
#endif

namespace ciuic {

#if CIUIC_HAVE_NCCL
namespace {

ncclDataType_t NcclType(DType t) {
  switch (t) {
    case DType::kFloat32:
      return ncclFloat32;
    case DType::kFloat64:
      return ncclFloat64;
    case DType::kFloat16:
      return ncclFloat16;
    case DType::kBFloat16:
      return ncclBfloat16;
    case DType::kFloat8E4M3:
      return ncclFloat8e4m3;
    case DType::kFloat8E5M2:
      return ncclFloat8e5m2;
    case DType::kInt8:
      return ncclInt8;
    case DType::kUInt8:
      return ncclUint8;
    case DType::kInt32:
      return ncclInt32;
    case DType::kInt64:
      return ncclInt64;
  }
  return ncclFloat32;
}

ncclRedOp_t NcclOp(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return ncclSum;
    case ReduceOp::kAvg:
      return ncclAvg;
    case ReduceOp::kMin:
      return ncclMin;
    case ReduceOp::kMax:
      return ncclMax;
    case ReduceOp::kProd:
      return ncclProd;
  }
  return ncclSum;
}

std::string VersionText(int code) {
  // NCCL_VERSION(X,Y,Z) = X*10000 + Y*100 + Z for 2.9 and later.
  return fmt::format("{}.{}.{}", code / 10000, code / 100 % 100, code % 100);
}

// How long a non-blocking NCCL operation (start-up, split, finalize, a call left in progress) may stay
// in progress: $CIUIC_TIMEOUT seconds (ciuic-bench sets it from --timeout), 60 by default; 0: no limit.
double InProgressLimitS() {
  try {
    const double v = DefaultTimeoutSeconds();
    return v > 0 ? v : std::numeric_limits<double>::infinity();
  } catch (const Error&) {
    return 60.0;
  }
}

// Polls a non-blocking communicator until its pending operation ends. Returns its state: ncclSuccess,
// an error, or ncclInProgress when `limit_s` passed first.
ncclResult_t PollUntilDone(ncclComm_t comm, double limit_s) {
  const auto start = std::chrono::steady_clock::now();
  while (true) {
    ncclResult_t state = ncclSuccess;
    const ncclResult_t rc = ncclCommGetAsyncError(comm, &state);
    if (rc != ncclSuccess) return rc;
    if (state != ncclInProgress) return state;
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() > limit_s)
      return ncclInProgress;
    std::this_thread::yield();
  }
}

class NcclRequest : public Request {
 public:
  cudaEvent_t done = nullptr;
  ~NcclRequest() override {
    if (done) cudaEventDestroy(done);
  }
};

class NcclCommunicator : public Communicator {
 public:
  NcclCommunicator(std::unique_ptr<Communicator> control, ncclComm_t comm, cudaStream_t stream, int device)
      : control_(std::move(control)), comm_(comm), stream_(stream), device_(device) {
    cudaDeviceProp prop{};
    CIUIC_CUDA_COMM_CHECK(cudaGetDeviceProperties(&prop, device_));
    sm_major_ = prop.major;
    int v = 0;
    if (ncclGetVersion(&v) == ncclSuccess) nccl_version_ = v;
  }
  // After an error the peers may never arrive, and ncclCommDestroy would wait for them: the
  // communicator is aborted instead (also while an exception unwinds, or when NCCL holds an
  // asynchronous error), which returns without them.
  // A healthy one is finalized (waited for within the in-progress limit), then destroyed.
  ~NcclCommunicator() override {
    ncclResult_t async = ncclSuccess;
    bool broken = failed_ || std::uncaught_exceptions() > 0 || ncclCommGetAsyncError(comm_, &async) != ncclSuccess ||
                  (async != ncclSuccess && async != ncclInProgress);
    if (!broken) {
      const ncclResult_t rc = ncclCommFinalize(comm_);
      broken = (rc != ncclSuccess && rc != ncclInProgress) || PollUntilDone(comm_, InProgressLimitS()) != ncclSuccess;
    }
    if (broken)
      ncclCommAbort(comm_);
    else
      ncclCommDestroy(comm_);
    cudaStreamDestroy(stream_);
  }

  int Rank() const override { return control_->Rank(); }
  int Size() const override { return control_->Size(); }
  DeviceKind Device() const override { return DeviceKind::kCuda; }
  std::string BackendName() const override { return "nccl"; }
  std::string LibraryVersion() const override { return "NCCL " + NcclRuntimeVersion(); }
  void* Stream() const override { return stream_; }

  bool Supports(Collective c, DType t, ReduceOp op, bool inplace) const override {
    const bool fp8 = t == DType::kFloat8E4M3 || t == DType::kFloat8E5M2;
    // fp8 reductions need Hopper or newer (NCCL refuses them below sm_90).
    if (fp8 && sm_major_ < 9) return false;
    // NCCL 2.28.9 on an H100 returned an error for every fp8 avg row: offered as unsupported.
    if (fp8 && op == ReduceOp::kAvg) return false;
    // Grouped send/recv between distinct buffers only.
    if (inplace && (c == Collective::kAllToAll || c == Collective::kSendRecv)) return false;
    return true;
  }

  bool StreamOrdered() const override { return true; }
  void GroupStart() override { CIUIC_NCCL_COMM_CHECK(ncclGroupStart()); }
  void GroupEnd() override { CIUIC_NCCL_COMM_CHECK(ncclGroupEnd()); }

  RequestPtr ISend(const void* buf, size_t bytes, int peer, int) override {
    auto r = std::make_unique<NcclRequest>();
    CIUIC_NCCL_COMM_CHECK(ncclSend(buf, bytes, ncclUint8, peer, comm_, stream_));
    CIUIC_CUDA_COMM_CHECK(cudaEventCreateWithFlags(&r->done, cudaEventDisableTiming));
    CIUIC_CUDA_COMM_CHECK(cudaEventRecord(r->done, stream_));
    return r;
  }
  RequestPtr IRecv(void* buf, size_t bytes, int peer, int) override {
    auto r = std::make_unique<NcclRequest>();
    CIUIC_NCCL_COMM_CHECK(ncclRecv(buf, bytes, ncclUint8, peer, comm_, stream_));
    CIUIC_CUDA_COMM_CHECK(cudaEventCreateWithFlags(&r->done, cudaEventDisableTiming));
    CIUIC_CUDA_COMM_CHECK(cudaEventRecord(r->done, stream_));
    return r;
  }
  void Wait(Request& request) override {
    CIUIC_CUDA_COMM_CHECK(cudaEventSynchronize(static_cast<NcclRequest&>(request).done));
  }

  // NCCL before 2.29.7 leaves the tail of a one-rank avg unwritten when the count is not a multiple
  // of its block split (NVIDIA/nccl issue 1950; our check saw the last 64 bytes of a 4 MiB + 64 B
  // fp32/fp64 out-of-place avg wrong on 2.28.9). The average over one rank is the value itself, so
  // a one-rank avg is issued as a sum there: the same result, bit for bit.
  ncclRedOp_t Op(ReduceOp op) const {
    if (op == ReduceOp::kAvg && Size() == 1 && nccl_version_ < 22907) return ncclSum;
    return NcclOp(op);
  }

  void AllReduce(const void* send, void* recv, size_t count, DType t, ReduceOp op) override {
    CIUIC_NCCL_COMM_CHECK(ncclAllReduce(send, recv, count, NcclType(t), Op(op), comm_, stream_));
  }
  void AllGather(const void* send, void* recv, size_t send_count, DType t) override {
    CIUIC_NCCL_COMM_CHECK(ncclAllGather(send, recv, send_count, NcclType(t), comm_, stream_));
  }
  void ReduceScatter(const void* send, void* recv, size_t recv_count, DType t, ReduceOp op) override {
    CIUIC_NCCL_COMM_CHECK(ncclReduceScatter(send, recv, recv_count, NcclType(t), Op(op), comm_, stream_));
  }
  void Broadcast(const void* send, void* recv, size_t count, DType t, int root) override {
    CIUIC_NCCL_COMM_CHECK(ncclBroadcast(send, recv, count, NcclType(t), root, comm_, stream_));
  }
  void Reduce(const void* send, void* recv, size_t count, DType t, ReduceOp op, int root) override {
    CIUIC_NCCL_COMM_CHECK(ncclReduce(send, recv, count, NcclType(t), Op(op), root, comm_, stream_));
  }
  // Grouped send/recv (as nccl-tests does), so it runs on every NCCL a PyTorch wheel may bring, not
  // only those with ncclAlltoAll (2.28+).
  void AllToAll(const void* send, void* recv, size_t count_per_peer, DType t) override {
    const size_t bytes = count_per_peer * DTypeSize(t);
    CIUIC_NCCL_COMM_CHECK(ncclGroupStart());
    for (int peer = 0; peer < Size(); ++peer) {
      CIUIC_NCCL_COMM_CHECK(ncclSend(static_cast<const uint8_t*>(send) + peer * bytes, count_per_peer, NcclType(t),
                                     peer, comm_, stream_));
      CIUIC_NCCL_COMM_CHECK(
          ncclRecv(static_cast<uint8_t*>(recv) + peer * bytes, count_per_peer, NcclType(t), peer, comm_, stream_));
    }
    CIUIC_NCCL_COMM_CHECK(ncclGroupEnd());
  }
  void SendRecv(const void* send, int send_peer, void* recv, int recv_peer, size_t count, DType t) override {
    CIUIC_NCCL_COMM_CHECK(ncclGroupStart());
    CIUIC_NCCL_COMM_CHECK(ncclSend(send, count, NcclType(t), send_peer, comm_, stream_));
    CIUIC_NCCL_COMM_CHECK(ncclRecv(recv, count, NcclType(t), recv_peer, comm_, stream_));
    CIUIC_NCCL_COMM_CHECK(ncclGroupEnd());
  }

  void Barrier() override {
    Synchronize();
    control_->Barrier();
  }

  // Polls the stream so an asynchronous NCCL error surfaces instead of a silent hang.
  void Synchronize() override {
    while (true) {
      const cudaError_t st = cudaStreamQuery(stream_);
      if (st == cudaSuccess) return;
      if (st != cudaErrorNotReady) CIUIC_CUDA_COMM_CHECK(st);
      ncclResult_t async = ncclSuccess;
      CIUIC_NCCL_COMM_CHECK(ncclCommGetAsyncError(comm_, &async));
      if (async != ncclSuccess && async != ncclInProgress) {
        failed_ = true;
        throw RuntimeError(fmt::format("rank {}: NCCL asynchronous error: {}", Rank(), ncclGetErrorString(async)));
      }
      std::this_thread::yield();
    }
  }

  std::unique_ptr<Communicator> Split(int color, int key) override {
    Synchronize();
    auto control = control_->Split(color, key);
    ncclComm_t out = nullptr;
    // The child inherits the parent's non-blocking config: its start-up is waited for on itself.
    const ncclResult_t rc = ncclCommSplit(comm_, color, key, &out, nullptr);
    if (rc != ncclSuccess && rc != ncclInProgress) {
      failed_ = true;
      throw RuntimeError(FormatCallFailure("ncclCommSplit(comm_, color, key, &out, nullptr)", ncclGetErrorString(rc),
                                           __FILE__, __LINE__));
    }
    if (out) {
      const ncclResult_t state = PollUntilDone(out, InProgressLimitS());
      if (state != ncclSuccess) {
        ncclCommAbort(out);
        failed_ = true;
        throw RuntimeError(fmt::format("rank {}: ncclCommSplit: {}", Rank(),
                                       state == ncclInProgress
                                           ? fmt::format("not done within {:.0f} s", InProgressLimitS())
                                           : std::string(ncclGetErrorString(state))));
      }
    }
    Await(comm_, "ncclCommSplit");
    cudaStream_t stream;
    CIUIC_CUDA_COMM_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    return std::make_unique<NcclCommunicator>(std::move(control), out, stream, device_);
  }

  void HostAllReduce(double* values, size_t n, ReduceOp op) override { control_->HostAllReduce(values, n, op); }
  void HostAllGather(const void* send, void* recv, size_t bytes) override {
    control_->HostAllGather(send, recv, bytes);
  }
  Liveness PeerLiveness() override { return control_->PeerLiveness(); }

 private:
  // Waits for the operation `what` left in progress on `c`; an error or a timeout marks this
  // communicator failed and throws, naming the rank.
  void Await(ncclComm_t c, const char* what) {
    const double limit = InProgressLimitS();
    const ncclResult_t state = PollUntilDone(c, limit);
    if (state == ncclSuccess) return;
    failed_ = true;
    throw RuntimeError(fmt::format("rank {}: {}: {}", Rank(), what,
                                   state == ncclInProgress ? fmt::format("still in progress after {:.0f} s", limit)
                                                           : std::string(ncclGetErrorString(state))));
  }

  std::unique_ptr<Communicator> control_;
  ncclComm_t comm_;
  cudaStream_t stream_;
  int device_;
  int sm_major_ = 0;
  int nccl_version_ = 0;
  bool failed_ = false;  // an NCCL or CUDA call of this communicator failed: abort, never destroy
};

}  // namespace

std::unique_ptr<Communicator> MakeNcclWorld(std::unique_ptr<Communicator> control, int chosen,
                                            const NcclStartupRollCall* roll) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    cudaGetLastError();
    throw RuntimeError("nccl backend: no CUDA device is visible on this machine");
  }
  int local_rank = control->Rank();
  if (const char* lr = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK"))
    local_rank = std::atoi(lr);
  else if (const char* tr = std::getenv("LOCAL_RANK"))
    local_rank = std::atoi(tr);  // torchrun, Slurm wrappers
  if (chosen >= devices) throw RuntimeError(fmt::format("nccl backend: device {} asked, {} visible", chosen, devices));
  const int device = chosen >= 0 ? chosen : local_rank % devices;
  CIUIC_CUDA_CHECK(cudaSetDevice(device));
  ncclUniqueId id;
  if (control->Rank() == 0) CIUIC_NCCL_CHECK(ncclGetUniqueId(&id));
  std::vector<ncclUniqueId> all(control->Size());
  control->HostAllGather(&id, all.data(), sizeof(id));
  id = all[0];
  // Non-blocking: start-up returns at once and is polled, so a peer that never arrives ends in an
  // error after the in-progress limit (ncclCommAbort) instead of a hang inside NCCL; calls that return
  // ncclInProgress later are waited for the same way (CIUIC_NCCL_COMM_CHECK).
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm = nullptr;
  FaultPoint("nccl-startup", control->Rank());
  if (roll && roll->arrived) roll->arrived();
  const ncclResult_t rc = ncclCommInitRankConfig(&comm, control->Size(), id, control->Rank(), &config);
  if (rc != ncclSuccess && rc != ncclInProgress) {
    if (comm) ncclCommAbort(comm);
    throw RuntimeError(FormatCallFailure("ncclCommInitRankConfig(&comm, size, id, rank, &config)",
                                         ncclGetErrorString(rc), __FILE__, __LINE__));
  }
  const double limit = InProgressLimitS();
  const ncclResult_t state = PollUntilDone(comm, limit);
  if (state != ncclSuccess) {
    ncclCommAbort(comm);
    std::string absent;
    if (state == ncclInProgress && roll && roll->absent) {
      try {
        absent = roll->absent();
      } catch (const std::exception& e) {
        absent = std::string("the roll call failed: ") + e.what();
      }
    }
    const std::string why =
        !absent.empty() ? absent + " never arrived" : "a peer did not arrive, or NCCL's own start-up did not finish?";
    throw RuntimeError(fmt::format("rank {}: NCCL start-up: {}", control->Rank(),
                                   state == ncclInProgress
                                       ? fmt::format("not done within {:.0f} s, aborted ({})", limit, why)
                                       : std::string(ncclGetErrorString(state))));
  }
  cudaStream_t stream;
  CIUIC_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  return std::make_unique<NcclCommunicator>(std::move(control), comm, stream, device);
}

std::string NcclRuntimeVersion() {
  int v = 0;
  if (ncclGetVersion(&v) != ncclSuccess) return "";
  return VersionText(v);
}
std::string NcclBuildVersion() { return VersionText(NCCL_VERSION_CODE); }

#else
std::unique_ptr<Communicator> MakeNcclWorld(std::unique_ptr<Communicator>, int, const NcclStartupRollCall*) {
  throw RuntimeError("nccl backend: this build has no NCCL (configure with CUDA and NCCL present)");
}
std::string NcclRuntimeVersion() { return ""; }
std::string NcclBuildVersion() { return ""; }
#endif

}  // namespace ciuic
