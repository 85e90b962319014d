#pragma once
// Traces of where the time goes. A Recorder per rank keeps complete events (name, category, thread,
// start and duration on one monotonic clock, up to four integer arguments such as bucket and bytes);
// RenderEvents turns them into Chrome trace-event JSON (the "traceEvents" format Perfetto and
// chrome://tracing load: "X" complete events in microseconds, "M" metadata naming the rank's process
// and threads, one pid per rank, GPU activity on "gpu stream N" threads with flow arrows from the host
// span that launched it); Summarize reads such a file back into per-rank shares of time in kernels,
// communication and waiting.
//
// Recording is off unless a recorder is bound to the calling thread (Bind): a Span then costs one
// thread-local load and a null check. The runtime and the bench runner emit spans; reporters do not.
// GPU records come from the CUPTI collector (core/cupti.h) and are added by it.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace ciuic::trace {

// What a span's time counts as in the summary. Phases are containers (a bucket, a row, the ring's
// reduce-scatter half): their own time outside any child is "other".
enum class Category : uint8_t { kPhase, kCompute, kComm, kWait, kGpuKernel, kGpuComm, kGpuMemcpy, kGpuMemset };
// "phase" "compute" "comm" "wait" "gpu.kernel" "gpu.nccl" "gpu.memcpy" "gpu.memset"
const char* CategoryName(Category c);

// The trace clock: std::chrono::steady_clock (CLOCK_MONOTONIC on Linux, shared by the processes of
// one host) in nanoseconds.
int64_t NowNs();

struct Arg {
  const char* key;  // a string literal
  int64_t value;
};
constexpr int kMaxArgs = 4;
// Events a recorder keeps; later ones are counted as dropped (the file says how many). About 100
// bytes each: a 1M-event trace holds ~100 MB per rank.
constexpr size_t kMaxEvents = 1'000'000;
// Thread ids in the file: host threads count from 1 in the order they first record; GPU activity of
// CUDA stream S goes to tid kGpuTidBase + S.
constexpr uint32_t kGpuTidBase = 1'000'000;

struct Event {
  const char* name;  // a string literal, or a string the recorder interned
  Category cat;
  int nargs;
  uint32_t tid;
  int64_t ts_ns, dur_ns;
  uint64_t id;  // host spans: their id; GPU records: the id of the host span that launched them (0: none)
  Arg args[kMaxArgs];
};

class Recorder {
 public:
  // `label` names the rank's process track ("rank 0 (host)").
  Recorder(int rank, std::string label);
  ~Recorder();
  Recorder(const Recorder&) = delete;
  Recorder& operator=(const Recorder&) = delete;

  int rank() const { return rank_; }
  // The id the next span gets (also pushed as the CUPTI external correlation while the span is open).
  // Any thread of the rank (the runtime's progress thread too) opens spans: the count is atomic.
  uint64_t NextId() { return next_id_.fetch_add(1, std::memory_order_relaxed) + 1; }
  void Add(const char* name, Category cat, int64_t ts_ns, int64_t dur_ns, uint64_t id, const Arg* args, int nargs);
  // A GPU record (CUPTI): the name is copied; `span` is the host span that launched it (0: unknown).
  void AddGpu(const std::string& name, Category cat, int64_t ts_ns, int64_t dur_ns, uint32_t stream, uint64_t span,
              int64_t bytes);
  // A note for the file's metadata ("gpu": why there are no GPU records).
  void SetNote(const std::string& key, const std::string& value);

  size_t size() const;
  size_t dropped() const;
  int64_t FirstNs() const;  // the earliest event's start (INT64_MAX without events)
  // The rank's events as comma-separated JSON objects (metadata first), timestamps relative to
  // origin_ns; "" without events.
  std::string RenderEvents(int64_t origin_ns) const;
  const std::map<std::string, std::string>& notes() const { return notes_; }
  // Serial of this recorder in the process (the CUPTI collector finds it by this).
  uint32_t serial() const { return serial_; }

 private:
  uint32_t TidOfThisThread();
  int rank_;
  std::string label_;
  uint32_t serial_;
  std::atomic<uint64_t> next_id_{0};
  mutable std::mutex mu_;
  std::vector<Event> events_;
  size_t dropped_ = 0;
  std::map<std::thread::id, uint32_t> tids_;
  std::deque<std::string> names_;  // GPU kernel names
  std::map<std::string, const char*> interned_;
  std::map<std::string, std::string> notes_;
};

namespace detail {
extern thread_local Recorder* tls_recorder;
// True while the CUPTI collector runs: spans push their id as the external correlation.
bool GpuCorrelation();
void PushCorrelation(const Recorder& r, uint64_t id);
void PopCorrelation();
}  // namespace detail

// The recorder bound to this thread (null: tracing off).
inline Recorder* Current() { return detail::tls_recorder; }

// Binds a recorder to this thread for its scope (null: off), restoring the previous one after.
class Bind {
 public:
  explicit Bind(Recorder* r) : prev_(detail::tls_recorder) { detail::tls_recorder = r; }
  ~Bind() { detail::tls_recorder = prev_; }
  Bind(const Bind&) = delete;
  Bind& operator=(const Bind&) = delete;

 private:
  Recorder* prev_;
};

// A complete event from construction to destruction on the thread's recorder; nothing without one.
class Span {
 public:
  Span(const char* name, Category cat) : r_(detail::tls_recorder) {
    if (r_) Open(name, cat);
  }
  ~Span() {
    if (r_) Close();
  }
  Span(const Span&) = delete;
  Span& operator=(const Span&) = delete;
  // Adds an integer argument (up to kMaxArgs; `key` a string literal).
  Span& With(const char* key, int64_t value) {
    if (r_ && nargs_ < kMaxArgs) args_[nargs_++] = Arg{key, value};
    return *this;
  }

 private:
  void Open(const char* name, Category cat);
  void Close();
  Recorder* r_;
  const char* name_;
  Category cat_;
  bool pushed_;
  int nargs_ = 0;
  int64_t t0_;
  uint64_t id_;
  Arg args_[kMaxArgs];
};

// One rank's shares, from a trace file. Host time: each host thread's span from its first event's
// start to its last event's end (or the windows of Summarize's `within`), split by the category of the innermost event
// covering each moment (time inside a phase but outside its children is "other"). GPU time: the GPU tracks' span, each
// moment counted once by the busiest kind (nccl over kernels over memcpy over memset), else idle.
struct RankShare {
  int rank = 0;
  size_t events = 0;
  double host_us = 0, compute_us = 0, comm_us = 0, wait_us = 0, other_us = 0;
  double gpu_us = 0, gpu_kernel_us = 0, gpu_comm_us = 0, gpu_copy_us = 0, gpu_idle_us = 0;
};
// `within`: only the host time inside spans of that name (ciuic-bench: "timed", its timed
// iterations); "" the whole trace. Throws InputError naming the first event that is not trace-event
// JSON this module reads.
std::vector<RankShare> Summarize(const nlohmann::json& trace, const std::string& within = "");
// A few lines, one per rank (and one per rank with GPU records):
// "rank 0: 12.3 ms on the host: kernels 41.2%, communication 30.1%, waiting 20.0%, other 8.7%"
// (`scope` replaces "on the host").
std::vector<std::string> SummaryLines(const std::vector<RankShare>& shares, const std::string& scope = "on the host");

}  // namespace ciuic::trace
