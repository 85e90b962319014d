#include "core/buffer.h"

#include <sys/mman.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#include "core/config.h"
#include "core/error.h"
#if CIUIC_HAVE_CUDA
#include "core/cuda_check.h"
#endif

namespace ciuic {

namespace {
// Page alignment keeps MPI's and the kernels' vector paths aligned.
constexpr size_t kHostAlignment = 4096;
// Large buffers are 2 MiB aligned and advised onto transparent huge pages: first touch of 1 GiB in
// 4 KiB pages cost ~2.7 s on this project's 2-core VM (page-fault bound), against ~0.8 s resident.
constexpr size_t kHugePage = 2u << 20;
}  // namespace

Buffer::Buffer(size_t bytes, MemoryKind kind) : bytes_(bytes), kind_(kind) {
  const size_t alloc = bytes == 0 ? kHostAlignment : bytes;
  if (kind == MemoryKind::kHost) {
    const size_t align = alloc >= kHugePage ? kHugePage : kHostAlignment;
    const size_t rounded = (alloc + align - 1) / align * align;
    data_ = std::aligned_alloc(align, rounded);
    if (!data_) throw RuntimeError(fmt::format("cannot allocate {} bytes of host memory", bytes));
    if (align == kHugePage) madvise(data_, rounded, MADV_HUGEPAGE);
    return;
  }
#if CIUIC_HAVE_CUDA
  CIUIC_CUDA_CHECK(cudaMalloc(&data_, alloc));
#else
  throw RuntimeError("device buffers need a build with CUDA");
#endif
}

Buffer::~Buffer() { Release(); }

Buffer::Buffer(Buffer&& other) noexcept : data_(other.data_), bytes_(other.bytes_), kind_(other.kind_) {
  other.data_ = nullptr;
  other.bytes_ = 0;
}

Buffer& Buffer::operator=(Buffer&& other) noexcept {
  if (this != &other) {
    Release();
    data_ = other.data_;
    bytes_ = other.bytes_;
    kind_ = other.kind_;
    other.data_ = nullptr;
    other.bytes_ = 0;
  }
  return *this;
}

void Buffer::Release() {
  if (!data_) return;
  if (kind_ == MemoryKind::kHost) {
    std::free(data_);
  } else {
#if CIUIC_HAVE_CUDA
    cudaFree(data_);
#endif
  }
  data_ = nullptr;
}

void CopyBytesAsync(void* dst, MemoryKind dst_kind, const void* src, MemoryKind src_kind, size_t bytes, void* stream) {
  if (bytes == 0) return;
  if (dst_kind == MemoryKind::kHost && src_kind == MemoryKind::kHost) {
    std::memcpy(dst, src, bytes);
    return;
  }
#if CIUIC_HAVE_CUDA
  CIUIC_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, static_cast<cudaStream_t>(stream)));
#else
  (void)stream;
  throw RuntimeError("device copies need a build with CUDA");
#endif
}

void SetBytesAsync(void* dst, MemoryKind kind, uint8_t value, size_t bytes, void* stream) {
  if (bytes == 0) return;
  if (kind == MemoryKind::kHost) {
    std::memset(dst, value, bytes);
    return;
  }
#if CIUIC_HAVE_CUDA
  CIUIC_CUDA_CHECK(cudaMemsetAsync(dst, value, bytes, static_cast<cudaStream_t>(stream)));
#else
  (void)stream;
  throw RuntimeError("device buffers need a build with CUDA");
#endif
}

namespace {
#if CIUIC_HAVE_CUDA
// Before a copy on the legacy default stream: wait for every stream (non-blocking ones included).
void WaitBefore(void* stream) {
  if (!stream) CIUIC_CUDA_CHECK(cudaDeviceSynchronize());
}
// After it: the bytes have landed (a pageable-memory copy may return before the DMA ends).
void WaitAfter(void* stream) {
  if (stream) {
    CIUIC_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)));
  } else {
    CIUIC_CUDA_CHECK(cudaDeviceSynchronize());
  }
}
#endif
}  // namespace

void CopyBytes(void* dst, MemoryKind dst_kind, const void* src, MemoryKind src_kind, size_t bytes, void* stream) {
  if (bytes == 0) return;
  if (dst_kind == MemoryKind::kHost && src_kind == MemoryKind::kHost) {
    std::memcpy(dst, src, bytes);
    return;
  }
#if CIUIC_HAVE_CUDA
  WaitBefore(stream);
  CopyBytesAsync(dst, dst_kind, src, src_kind, bytes, stream);
  WaitAfter(stream);
#else
  (void)stream;
  throw RuntimeError("device copies need a build with CUDA");
#endif
}

void SetBytes(void* dst, MemoryKind kind, uint8_t value, size_t bytes, void* stream) {
  if (bytes == 0) return;
  if (kind == MemoryKind::kHost) {
    std::memset(dst, value, bytes);
    return;
  }
#if CIUIC_HAVE_CUDA
  WaitBefore(stream);
  SetBytesAsync(dst, kind, value, bytes, stream);
  WaitAfter(stream);
#else
  (void)stream;
  throw RuntimeError("device buffers need a build with CUDA");
#endif
}

uint64_t HostMemoryAvailable() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  uint64_t value;
  std::string unit;
  while (in >> key >> value >> unit) {
    if (key == "MemAvailable:") return value * 1024;
  }
  return 0;
}

uint64_t DeviceMemoryAvailable() {
#if CIUIC_HAVE_CUDA
  size_t free_bytes = 0, total = 0;
  if (cudaMemGetInfo(&free_bytes, &total) != cudaSuccess) return 0;
  return free_bytes;
#else
  return 0;
#endif
}

int CudaDeviceCount() {
#if CIUIC_HAVE_CUDA
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
#else
  return 0;
#endif
}

void CudaSetDevice(int device) {
#if CIUIC_HAVE_CUDA
  CIUIC_CUDA_CHECK(cudaSetDevice(device));
#else
  (void)device;
  throw RuntimeError("this build has no CUDA");
#endif
}

const char* CudaDeviceName() {
#if CIUIC_HAVE_CUDA
  static thread_local char name[256];
  int dev = 0;
  cudaDeviceProp prop{};
  if (cudaGetDevice(&dev) != cudaSuccess || cudaGetDeviceProperties(&prop, dev) != cudaSuccess) return "";
  std::snprintf(name, sizeof(name), "%s", prop.name);
  return name;
#else
  return "";
#endif
}

const char* CudaVersionString() {
#if CIUIC_HAVE_CUDA
  static thread_local char text[64];
  int runtime = 0, driver = 0;
  cudaRuntimeGetVersion(&runtime);
  cudaDriverGetVersion(&driver);
  std::snprintf(text, sizeof(text), "runtime %d.%d driver %d.%d", runtime / 1000, runtime % 1000 / 10, driver / 1000,
                driver % 1000 / 10);
  return text;
#else
  return "";
#endif
}

#if CIUIC_HAVE_CUDA
int CudaCurrentDevice() {
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return device;
}
void* EventCreate() {
  cudaEvent_t e = nullptr;
  CIUIC_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  return e;
}
void EventDestroy(void* event) {
  if (event) cudaEventDestroy(static_cast<cudaEvent_t>(event));
}
void EventRecord(void* event, void* stream) {
  CIUIC_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(event), static_cast<cudaStream_t>(stream)));
}
void StreamWaitEvent(void* stream, void* event) {
  CIUIC_CUDA_CHECK(cudaStreamWaitEvent(static_cast<cudaStream_t>(stream), static_cast<cudaEvent_t>(event), 0));
}
void EventSynchronize(void* event) { CIUIC_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(event))); }
void* StreamCreate() {
  cudaStream_t s = nullptr;
  CIUIC_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  return s;
}
void StreamDestroy(void* stream) {
  if (stream) cudaStreamDestroy(static_cast<cudaStream_t>(stream));
}
void StreamSynchronize(void* stream) { CIUIC_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(stream))); }
#else
int CudaCurrentDevice() { return 0; }
void* EventCreate() { throw RuntimeError("CUDA events need a build with CUDA"); }
void EventDestroy(void*) {}
void EventRecord(void*, void*) {}
void StreamWaitEvent(void*, void*) {}
void EventSynchronize(void*) {}
void* StreamCreate() { throw RuntimeError("CUDA streams need a build with CUDA"); }
void StreamDestroy(void*) {}
void StreamSynchronize(void*) {}
#endif

}  // namespace ciuic
