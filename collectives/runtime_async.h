#pragma once
// ciuic::AsyncRuntime: a RuleRuntime on a thread of its own, so a training job's backward pass hands
// a bucket over and goes on. Work runs in submission order (every rank submits the same buckets in
// the same order, as DDP does), each allreduce a Request to test, wait on, or be called back from.
// Everything that touches the communicator (reductions, save/load, residuals) runs on that thread,
// so a transport that is not thread-safe (gloo, MPI below MULTIPLE) is used by one thread only.
//
// Device buffers: Enqueue records an event on the caller's stream; the runtime's stream waits for it
// (no host wait) before the reduction, and records a completion event that StreamWait puts in front
// of the caller's later work. The runtime's own finite check reads one word back per bucket on its
// stream, on this thread, never on the caller's.
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "collectives/runtime_rules.h"

namespace ciuic {

// Status of a finished request: the C API's codes (0 ok, 1 usage, 2 runtime, 3 input).
enum class WorkStatus { kOk = 0, kUsage = 1, kRuntime = 2, kInput = 3 };

class AsyncRequest {
 public:
  ~AsyncRequest();
  bool Done() const;
  // Blocks until the reduction ended; its status and message.
  WorkStatus Wait(std::string* error = nullptr) const;
  // Device buffers: `stream`'s later work waits for the reduction (no host wait once the runtime
  // thread has enqueued it). Host buffers: Wait.
  WorkStatus StreamWait(void* stream, std::string* error = nullptr) const;

 private:
  friend class AsyncRuntime;
  mutable std::mutex m_;
  mutable std::condition_variable cv_;
  bool done_ = false;
  WorkStatus status_ = WorkStatus::kOk;
  std::string error_;
  void* ready_event_ = nullptr;  // recorded on the caller's stream at Enqueue
  void* done_event_ = nullptr;   // recorded on the runtime's stream after the reduction
};

class AsyncRuntime {
 public:
  // Called on the runtime thread once a request ended (after it reports done), with its status. It may
  // call Call (run inline) but must not destroy the runtime.
  using Completion = std::function<void(WorkStatus, const std::string& error)>;

  // The RuleRuntime is made on the runtime thread (a device backend's current device there is the
  // caller's); its construction error is thrown here.
  AsyncRuntime(Communicator& comm, RuleRuntimeConfig config);
  // Ends after the queued work.
  ~AsyncRuntime();
  AsyncRuntime(const AsyncRuntime&) = delete;
  AsyncRuntime& operator=(const AsyncRuntime&) = delete;

  // Queues an allreduce of data[0, n) (type fp32/fp16/bf16, in the communicator's memory) and returns
  // at once. `stream`: the caller's CUDA stream for device buffers (null: the legacy default stream).
  std::shared_ptr<AsyncRequest> Enqueue(void* data, size_t n, DType type, uint64_t tensor_id, bool average,
                                        void* stream, Completion done);
  // Runs f(runtime) on the runtime thread after the work queued before it; waits; rethrows its error.
  void Call(const std::function<void(RuleRuntime&)>& f);

  Communicator& comm() const { return comm_; }

 private:
  struct Work {
    std::function<void(RuleRuntime&)> run;
  };
  void Loop();
  void Push(std::function<void(RuleRuntime&)> f);

  Communicator& comm_;
  int device_ = 0;
  std::mutex m_;
  std::condition_variable cv_;
  std::deque<Work> queue_;
  bool stop_ = false;
  std::unique_ptr<RuleRuntime> rt_;
  std::thread thread_;
};

}  // namespace ciuic
