#include "core/timer.h"

#include <algorithm>
#include <chrono>

#include "core/config.h"
#include "core/error.h"
#if CIUIC_HAVE_CUDA
#include "core/cuda_check.h"
#endif

namespace ciuic {

double NowSeconds() {
  using Clock = std::chrono::steady_clock;
  return std::chrono::duration<double>(Clock::now().time_since_epoch()).count();
}

#if CIUIC_HAVE_CUDA
DeviceEventTimer::DeviceEventTimer(void* stream) : stream_(stream) {
  cudaEvent_t a, b;
  CIUIC_CUDA_CHECK(cudaEventCreate(&a));
  CIUIC_CUDA_CHECK(cudaEventCreate(&b));
  start_ = a;
  stop_ = b;
}
DeviceEventTimer::~DeviceEventTimer() {
  cudaEventDestroy(static_cast<cudaEvent_t>(start_));
  cudaEventDestroy(static_cast<cudaEvent_t>(stop_));
}
void DeviceEventTimer::Start() {
  CIUIC_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(start_), static_cast<cudaStream_t>(stream_)));
}
void DeviceEventTimer::Stop() {
  CIUIC_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(stop_), static_cast<cudaStream_t>(stream_)));
}
double DeviceEventTimer::ElapsedUs() {
  CIUIC_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(stop_)));
  float ms = 0;
  CIUIC_CUDA_CHECK(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(start_), static_cast<cudaEvent_t>(stop_)));
  return ms * 1000.0;
}
#else
DeviceEventTimer::DeviceEventTimer(void* stream) : stream_(stream) {
  throw RuntimeError("CUDA event timing needs a build with CUDA");
}
DeviceEventTimer::~DeviceEventTimer() = default;
void DeviceEventTimer::Start() {}
void DeviceEventTimer::Stop() {}
double DeviceEventTimer::ElapsedUs() { return 0; }
#endif

double Percentile(std::vector<double> samples, double p) {
  if (samples.empty()) return 0;
  std::sort(samples.begin(), samples.end());
  const double pos = p / 100.0 * static_cast<double>(samples.size() - 1);
  const size_t lo = static_cast<size_t>(pos);
  const size_t hi = std::min(lo + 1, samples.size() - 1);
  const double frac = pos - static_cast<double>(lo);
  return samples[lo] + (samples[hi] - samples[lo]) * frac;
}

}  // namespace ciuic
