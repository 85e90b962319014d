// The CUPTI collector (core/cupti.h): the CUDA seam of traces. Compiled to stubs without CUPTI.
#include "core/cupti.h"

#include "core/config.h"

#if CIUIC_HAVE_CUPTI
#include <cupti.h>
#include <cxxabi.h>

#include <atomic>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "core/buffer.h"
#include "core/error.h"
#endif

namespace ciuic::trace {

#if CIUIC_HAVE_CUPTI

namespace {

// One CUPTI activity buffer: CUPTI's samples use 8 MiB; a flush hands over partly filled ones.
constexpr size_t kBufferBytes = 8u << 20;
// External correlation ids: recorder serial in the top 24 bits, span id in the low 40.
constexpr int kSpanBits = 40;
constexpr uint64_t kSpanMask = (uint64_t{1} << kSpanBits) - 1;

struct GpuRecord {
  std::string name;
  Category cat;
  uint64_t start, end;
  uint32_t stream, correlation;
  int64_t bytes;
};

std::mutex g_mu;
int g_users = 0;
std::atomic<bool> g_active{false};
int64_t g_offset = 0;  // added to CUPTI's timestamps when our clock could not be registered
std::vector<GpuRecord> g_records;
std::unordered_map<uint32_t, uint64_t> g_external;  // CUPTI correlation id -> our external id

std::string Failure(const char* call, CUptiResult status) {
  const char* text = nullptr;
  cuptiGetResultString(status, &text);
  return fmt::format("{} failed: {}", call, text ? text : "unknown CUPTI error");
}

#define CIUIC_CUPTI_TRY(call)                                                             \
  do {                                                                                    \
    const CUptiResult ciuic_cupti_status_ = (call);                                       \
    if (ciuic_cupti_status_ != CUPTI_SUCCESS) return Failure(#call, ciuic_cupti_status_); \
  } while (0)

uint64_t CUPTIAPI HostClock() { return static_cast<uint64_t>(NowNs()); }

// "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)" -> the part before "(".
std::string KernelName(const char* mangled) {
  if (!mangled) return "kernel";
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> plain(abi::__cxa_demangle(mangled, nullptr, nullptr, &status), std::free);
  std::string name = status == 0 && plain ? plain.get() : mangled;
  const size_t paren = name.find('(');
  if (paren != std::string::npos && paren > 0) name.resize(paren);
  return name;
}

void CUPTIAPI BufferRequested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = *buffer ? kBufferBytes : 0;
  *max_records = 0;
}

void CUPTIAPI BufferCompleted(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  std::lock_guard lock(g_mu);
  CUpti_Activity* rec = nullptr;
  while (cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
    switch (rec->kind) {
      case CUPTI_ACTIVITY_KIND_KERNEL:
      case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
        const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(rec);
        std::string name = KernelName(k->name);
        const Category cat = name.find("nccl") != std::string::npos ? Category::kGpuComm : Category::kGpuKernel;
        g_records.push_back({std::move(name), cat, k->start, k->end, k->streamId, k->correlationId, -1});
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMCPY: {
        const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(rec);
        static constexpr const char* kKinds[] = {"memcpy",      "memcpy HtoD", "memcpy DtoH", "memcpy HtoA",
                                                 "memcpy AtoH", "memcpy AtoA", "memcpy AtoD", "memcpy DtoA",
                                                 "memcpy DtoD", "memcpy HtoH", "memcpy PtoP"};
        const char* name = m->copyKind < std::size(kKinds) ? kKinds[m->copyKind] : "memcpy";
        g_records.push_back({name, Category::kGpuMemcpy, m->start, m->end, m->streamId, m->correlationId,
                             static_cast<int64_t>(m->bytes)});
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMSET: {
        const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(rec);
        g_records.push_back({"memset", Category::kGpuMemset, m->start, m->end, m->streamId, m->correlationId,
                             static_cast<int64_t>(m->bytes)});
        break;
      }
      case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION: {
        const auto* x = reinterpret_cast<const CUpti_ActivityExternalCorrelation*>(rec);
        if (x->externalKind == CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0) g_external[x->correlationId] = x->externalId;
        break;
      }
      default:
        break;
    }
  }
  std::free(buffer);
}

// CUPTI writes an external-correlation record only for an API call it records itself: without the
// runtime and driver API kinds (our kernels launch through the runtime, NCCL's through the driver)
// no GPU record could be tied to its span (seen on an H200, 2026-11-26). Their records are dropped.
constexpr CUpti_ActivityKind kKinds[] = {
    CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY, CUPTI_ACTIVITY_KIND_MEMSET,
    CUPTI_ACTIVITY_KIND_RUNTIME,           CUPTI_ACTIVITY_KIND_DRIVER, CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION};

std::string Enable() {
  // Our clock first: records made after this carry NowNs() times (CUPTI converts GPU timestamps with it).
  if (cuptiActivityRegisterTimestampCallback(HostClock) == CUPTI_SUCCESS) {
    g_offset = 0;
  } else {
    uint64_t cupti_now = 0;
    CIUIC_CUPTI_TRY(cuptiGetTimestamp(&cupti_now));
    g_offset = NowNs() - static_cast<int64_t>(cupti_now);
  }
  CIUIC_CUPTI_TRY(cuptiActivityRegisterCallbacks(BufferRequested, BufferCompleted));
  for (CUpti_ActivityKind k : kKinds) CIUIC_CUPTI_TRY(cuptiActivityEnable(k));
  return "";
}

}  // namespace

namespace detail {
bool GpuCorrelation() { return g_active.load(std::memory_order_relaxed); }
void PushCorrelation(const Recorder& r, uint64_t id) {
  cuptiActivityPushExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0,
                                         (static_cast<uint64_t>(r.serial()) << kSpanBits) | (id & kSpanMask));
}
void PopCorrelation() {
  uint64_t last = 0;
  cuptiActivityPopExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, &last);
}
}  // namespace detail

std::string StartGpuCollection() {
  std::lock_guard lock(g_mu);
  if (g_users > 0) {
    ++g_users;
    return "";
  }
  if (CudaDeviceCount() == 0) return "no CUDA device";
  std::string why = Enable();
  if (!why.empty()) {
    for (CUpti_ActivityKind k : kKinds) cuptiActivityDisable(k);
    return why;
  }
  ++g_users;
  g_active = true;
  return "";
}

void FlushGpuCollection(Recorder& r, bool take_unclaimed) {
  if (!g_active) return;
  cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);  // BufferCompleted runs (and takes g_mu) inside
  std::lock_guard lock(g_mu);
  std::vector<GpuRecord> kept;
  for (GpuRecord& g : g_records) {
    if (g.start == 0 || g.end < g.start) continue;  // CUPTI could not stamp it: no place on a timeline
    const auto it = g_external.find(g.correlation);
    const uint64_t ext = it == g_external.end() ? 0 : it->second;
    const bool mine = ext ? (ext >> kSpanBits) == r.serial() : take_unclaimed;
    if (!mine) {
      kept.push_back(std::move(g));
      continue;
    }
    const int64_t start = static_cast<int64_t>(g.start) + g_offset;
    r.AddGpu(g.name, g.cat, start, static_cast<int64_t>(g.end) - static_cast<int64_t>(g.start), g.stream,
             ext & kSpanMask, g.bytes);
  }
  g_records = std::move(kept);
}

void StopGpuCollection() {
  {
    std::lock_guard lock(g_mu);
    if (g_users == 0 || --g_users > 0) return;
    g_active = false;
  }
  // Outside the lock: CUPTI may be handing a buffer to BufferCompleted, which takes it.
  for (CUpti_ActivityKind k : kKinds) cuptiActivityDisable(k);
  cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  std::lock_guard lock(g_mu);
  if (g_users > 0) return;  // a new user started meanwhile
  g_records.clear();
  g_external.clear();
}

#else  // no CUPTI in this build

namespace detail {
bool GpuCorrelation() { return false; }
void PushCorrelation(const Recorder&, uint64_t) {}
void PopCorrelation() {}
}  // namespace detail

std::string StartGpuCollection() { return "this build has no CUPTI"; }
void FlushGpuCollection(Recorder&, bool) {}
void StopGpuCollection() {}

#endif

}  // namespace ciuic::trace
