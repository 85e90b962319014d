#pragma once
// Aligned host buffers and CUDA device buffers behind one owner type, plus the memory queries the
// bench runner uses to refuse sizes that cannot fit before it allocates anything.
#include <cstddef>
#include <cstdint>

namespace ciuic {

enum class MemoryKind { kHost, kDevice };

// Timed loops over small buffers rotate through enough copies to cover this many bytes (more than a
// last-level cache), at most kMaxRotateSlots, so that they do not time one cache-hot buffer: the
// bench runner's rows and the tuner's kernel calibration use the same rule.
inline constexpr uint64_t kRotateBytes = 64ull << 20;
inline constexpr int kMaxRotateSlots = 16;

class Buffer {
 public:
  Buffer() = default;
  Buffer(size_t bytes, MemoryKind kind);  // throws RuntimeError when the allocation fails
  ~Buffer();
  Buffer(Buffer&& other) noexcept;
  Buffer& operator=(Buffer&& other) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void* data() const { return data_; }
  template <class T>
  T* as() const {
    return static_cast<T*>(data_);
  }
  size_t bytes() const { return bytes_; }
  MemoryKind kind() const { return kind_; }

 private:
  void Release();
  void* data_ = nullptr;
  size_t bytes_ = 0;
  MemoryKind kind_ = MemoryKind::kHost;
};

// Copies between any two memory kinds and returns when the bytes have landed. `stream` (a
// cudaStream_t) is the stream that owns the device memory: the copy runs on it, after the work
// already enqueued there, and the host then waits for that stream. A null stream waits for every
// stream of the device first (the legacy default stream does not order against non-blocking
// streams such as NCCL's), then copies: correct, but it stalls all device work.
void CopyBytes(void* dst, MemoryKind dst_kind, const void* src, MemoryKind src_kind, size_t bytes,
               void* stream = nullptr);
void SetBytes(void* dst, MemoryKind kind, uint8_t value, size_t bytes, void* stream = nullptr);
// The same, enqueued on `stream` without the host waiting: later work on the stream sees the bytes.
// Host memory on either side must stay valid until the stream reaches the copy; host-to-host (and
// a null stream with host memory only) copies at once.
void CopyBytesAsync(void* dst, MemoryKind dst_kind, const void* src, MemoryKind src_kind, size_t bytes, void* stream);
void SetBytesAsync(void* dst, MemoryKind kind, uint8_t value, size_t bytes, void* stream);

// MemAvailable from /proc/meminfo (bytes).
uint64_t HostMemoryAvailable();
// Free memory on the current CUDA device; 0 without CUDA.
uint64_t DeviceMemoryAvailable();
// Number of CUDA devices visible (0 without CUDA, a driver, or a device).
int CudaDeviceCount();
void CudaSetDevice(int device);
// The calling thread's current CUDA device (0 without CUDA).
int CudaCurrentDevice();
// CUDA events for ordering work across streams without the host waiting (cudaEvent_t as void*,
// made with timing off). Without CUDA: EventCreate throws RuntimeError, the others do nothing.
void* EventCreate();
void EventDestroy(void* event);
void EventRecord(void* event, void* stream);
void StreamWaitEvent(void* stream, void* event);
void EventSynchronize(void* event);
// A non-blocking CUDA stream of the current device (cudaStream_t as void*); StreamCreate throws
// RuntimeError without CUDA, the others do nothing then.
void* StreamCreate();
void StreamDestroy(void* stream);
void StreamSynchronize(void* stream);

// "NVIDIA H100 80GB HBM3" or "" without a device.
const char* CudaDeviceName();
// CUDA runtime and driver versions as "13.0"; "" without CUDA.
const char* CudaVersionString();

}  // namespace ciuic
