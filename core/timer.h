#pragma once
// Host wall clock and CUDA-event timing on a stream.
#include <vector>

namespace ciuic {

double NowSeconds();  // steady clock

// Times work enqueued on a CUDA stream with a pair of events. Without CUDA it cannot be built.
class DeviceEventTimer {
 public:
  explicit DeviceEventTimer(void* stream);
  ~DeviceEventTimer();
  DeviceEventTimer(const DeviceEventTimer&) = delete;
  DeviceEventTimer& operator=(const DeviceEventTimer&) = delete;
  void Start();
  void Stop();
  // Waits for the stop event; microseconds between the two events.
  double ElapsedUs();

 private:
  void* stream_;
  void* start_ = nullptr;
  void* stop_ = nullptr;
};

// Linear-interpolated percentile (p in [0, 100]) of unsorted samples; 0 for none.
double Percentile(std::vector<double> samples, double p);

}  // namespace ciuic
