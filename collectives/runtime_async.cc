#include "collectives/runtime_async.h"

#include <cstdio>
#include <cstdlib>
#include <exception>

#include "core/error.h"

namespace ciuic {

namespace {

WorkStatus StatusOf(const std::exception_ptr& e, std::string* message) {
  try {
    std::rethrow_exception(e);
  } catch (const UsageError& x) {
    *message = x.what();
    return WorkStatus::kUsage;
  } catch (const InputError& x) {
    *message = x.what();
    return WorkStatus::kInput;
  } catch (const std::exception& x) {
    *message = x.what();
    return WorkStatus::kRuntime;
  } catch (...) {
    *message = "unknown failure";
    return WorkStatus::kRuntime;
  }
}

}  // namespace

AsyncRequest::~AsyncRequest() {
  EventDestroy(ready_event_);
  EventDestroy(done_event_);
}

bool AsyncRequest::Done() const {
  std::lock_guard<std::mutex> lock(m_);
  return done_;
}

WorkStatus AsyncRequest::Wait(std::string* error) const {
  std::unique_lock<std::mutex> lock(m_);
  cv_.wait(lock, [&] { return done_; });
  if (error) *error = error_;
  return status_;
}

WorkStatus AsyncRequest::StreamWait(void* stream, std::string* error) const {
  const WorkStatus s = Wait(error);
  if (s == WorkStatus::kOk && done_event_) StreamWaitEvent(stream, done_event_);
  return s;
}

AsyncRuntime::AsyncRuntime(Communicator& comm, RuleRuntimeConfig config) : comm_(comm) {
  if (comm.Device() == DeviceKind::kCuda) device_ = CudaCurrentDevice();
  std::exception_ptr error;
  bool made = false;
  thread_ = std::thread([&, config = std::move(config)]() mutable {
    try {
      if (comm_.Device() == DeviceKind::kCuda) CudaSetDevice(device_);
      rt_ = std::make_unique<RuleRuntime>(comm_, std::move(config));
    } catch (...) {
      error = std::current_exception();
    }
    const bool ok = !error;  // `error` and `made` belong to the constructor: not read after the signal
    {
      std::lock_guard<std::mutex> lock(m_);
      made = true;
      if (!ok) stop_ = true;
      cv_.notify_all();
    }
    if (ok) Loop();
  });
  {
    std::unique_lock<std::mutex> lock(m_);
    cv_.wait(lock, [&] { return made; });
  }
  if (error) {
    thread_.join();
    std::rethrow_exception(error);
  }
}

AsyncRuntime::~AsyncRuntime() {
  if (std::this_thread::get_id() == thread_.get_id()) {
    // Destroyed from one of its own completions: the thread cannot wait for itself.
    std::fprintf(stderr, "ciuic runtime: destroyed from its own completion callback; not supported\n");
    std::abort();
  }
  {
    std::lock_guard<std::mutex> lock(m_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void AsyncRuntime::Push(std::function<void(RuleRuntime&)> f) {
  {
    std::lock_guard<std::mutex> lock(m_);
    if (stop_) throw UsageError("the runtime is shutting down");
    queue_.push_back(Work{std::move(f)});
  }
  cv_.notify_all();
}

void AsyncRuntime::Loop() {
  for (;;) {
    Work w;
    {
      std::unique_lock<std::mutex> lock(m_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) break;  // stopping, nothing left
      w = std::move(queue_.front());
      queue_.pop_front();
    }
    w.run(*rt_);
  }
  rt_.reset();  // on this thread: a device runtime frees its buffers with its device current
}

void AsyncRuntime::Call(const std::function<void(RuleRuntime&)>& f) {
  if (std::this_thread::get_id() == thread_.get_id()) {
    // From a completion, on the runtime's own thread (a torch Future's then-callback): between two
    // requests, so the runtime is free; queueing would wait for itself.
    f(*rt_);
    return;
  }
  std::mutex m;
  std::condition_variable cv;
  bool done = false;
  std::exception_ptr error;
  Push([&](RuleRuntime& rt) {
    try {
      f(rt);
    } catch (...) {
      error = std::current_exception();
    }
    std::lock_guard<std::mutex> lock(m);
    done = true;
    cv.notify_all();
  });
  std::unique_lock<std::mutex> lock(m);
  cv.wait(lock, [&] { return done; });
  if (error) std::rethrow_exception(error);
}

std::shared_ptr<AsyncRequest> AsyncRuntime::Enqueue(void* data, size_t n, DType type, uint64_t tensor_id, bool average,
                                                    void* stream, Completion done) {
  auto req = std::make_shared<AsyncRequest>();
  if (comm_.Device() == DeviceKind::kCuda) {
    req->ready_event_ = EventCreate();
    req->done_event_ = EventCreate();
    EventRecord(req->ready_event_, stream);  // the bucket is ready once the caller's stream gets here
  }
  Push([this, req, data, n, type, tensor_id, average, done = std::move(done)](RuleRuntime& rt) {
    WorkStatus status = WorkStatus::kOk;
    std::string error;
    try {
      if (req->ready_event_) StreamWaitEvent(comm_.Stream(), req->ready_event_);
      rt.AllReduce(data, n, type, tensor_id, average);
      if (req->done_event_) EventRecord(req->done_event_, comm_.Stream());
      // Every path's last kernel (a 16-bit cast back, an uncompressed NaN sum on NCCL) has run before
      // anyone is told: a completion may read the buffer from another stream or the host.
      comm_.Synchronize();
    } catch (...) {
      status = StatusOf(std::current_exception(), &error);
    }
    {
      std::lock_guard<std::mutex> lock(req->m_);
      req->done_ = true;
      req->status_ = status;
      req->error_ = error;
    }
    req->cv_.notify_all();
    if (done) {
      try {
        done(status, error);
      } catch (...) {
        // A completion must not end the runtime thread; the request already reports the reduction.
      }
    }
  });
  return req;
}

}  // namespace ciuic
