#pragma once
// `ciuic-tune calibrate`: times the codec kernels on this machine (CPU, or the current GPU) — encode,
// decode and the fused decode-add-encode hop — and stores their throughput in SQLite (`calibrations`).
// The model then costs codecs from these numbers instead of the topology's memory bandwidth.
#include <map>
#include <ostream>
#include <string>

namespace ciuic {

// GB/s of fp32 gradient bytes per (kernel, codec) for one device.
struct Calibration {
  std::string device;
  std::map<std::pair<std::string, std::string>, double> gbps;  // (encode|decode|hop, codec) -> GB/s
  bool Has(const std::string& codec) const;
  // µs per fp32 byte of one allreduce's codec work on P ranks: one encode, (P-1)/P of a bucket through
  // the hop, one decode. 0 when the codec is not calibrated.
  double UsPerByte(const std::string& codec, int ranks) const;
};

// "cpu:<model>" or "cuda:<name>".
std::string CalibrationDevice(bool cuda);
// Measures every codec of the tuner's space at `bytes` and stores the results; prints a table.
void RunCalibration(const std::string& db_path, bool cuda, size_t bytes, std::ostream& out);
// The newest stored calibration of a device (empty when none).
Calibration LoadCalibration(const std::string& db_path, const std::string& device);

}  // namespace ciuic
