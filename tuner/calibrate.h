#pragma once
// `ciuic-tune calibrate`: measures the primitives the cost model is built from on this machine and
// stores them in SQLite (`calibrations`, one row per kernel, codec, size and rank count):
//   - codec kernels (encode, encode with error feedback, decode, decode-accumulate, the fused
//     decode-add-encode hop) and the uncompressed reduction (add), at several sizes, timed with
//     `concurrency` copies running at once (every rank of a node computes at the same time, so a
//     kernel alone on an idle machine is faster than it is inside a collective);
//   - the link: one ring step (`ciuic-bench sendrecv`, MPI) per rank count and message size, and the
//     transport's own allreduce (what `algo nccl` means on a CPU machine) at the same sizes, in fp32 and
//     in the 16-bit reduction precisions (bf16, fp16: cast + 16-bit sum + cast back, the runtime's native);
//   - the training kernels the study's fusion line sums (residual add + LayerNorm, bias + GELU; fused and
//     unfused, forward + backward, fp32) at the shipped transformer workloads' shapes, one copy.
// The model interpolates between measured sizes (log-log), so cache effects are in the numbers.
#include <cstdint>
#include <functional>
#include <map>
#include <ostream>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "tuner/fusion.h"

namespace ciuic {

// Time as a function of bytes, from measured points: log-log interpolation between them, linear
// scaling (constant rate) above the largest; below the smallest the first segment's log-log slope
// continues, clamped to [0, 1] (a launch-bound GPU kernel keeps its fixed cost; a CPU kernel its rate).
class TimeCurve {
 public:
  void Add(double bytes, double us);
  bool empty() const { return points_.empty(); }
  double Us(double bytes) const;
  const std::vector<std::pair<double, double>>& points() const { return points_; }

 private:
  std::vector<std::pair<double, double>> points_;  // (bytes, us), sorted by bytes
};

struct Calibration {
  std::string device;
  int concurrency = 1;                                               // kernel copies timed at once
  std::map<std::pair<std::string, std::string>, TimeCurve> kernels;  // (kernel, codec) -> fp32 bytes -> us
  std::map<int, TimeCurve> sendrecv;                                 // ranks -> message bytes -> us
  // (ranks, precision) -> the transport's own allreduce (MPI), in-place: fp32 as MPI does it; bf16/fp16
  // through the runtime's native algorithm (cast, 16-bit sum, cast back)
  std::map<std::pair<int, std::string>, TimeCurve> native_allreduce;
  // ("train:<kernel>:<cols>", "fused" | "unfused") -> fp32 tensor bytes (rows x cols x 4) -> µs of
  // forward + backward: the training kernels at the shipped transformer shapes (tuner/fusion.h), one
  // copy; a curve per width, so a study of another width is not read from it.
  std::map<std::pair<std::string, std::string>, TimeCurve> train;

  bool empty() const { return kernels.empty() && sendrecv.empty(); }
  bool Has(const std::string& codec) const;  // encode, decode measured for it
  // Time of a kernel over `bytes` of fp32 gradient (µs); 0 when not calibrated.
  double KernelUs(const std::string& kernel, const std::string& codec, double bytes) const;
  // A training kernel's forward + backward over a tensor of `bytes` (µs); 0 when not calibrated.
  double TrainUs(const std::string& kernel, const std::string& variant, double bytes) const;
  bool HasLink(int ranks) const { return sendrecv.count(ranks) > 0; }
  double SendRecvUs(int ranks, double bytes) const;
  size_t values() const;
};

struct CalibrateOptions {
  bool cuda = false;
  std::vector<uint64_t> sizes;  // kernel sizes (fp32 bytes)
  int concurrency = 0;          // 0: this machine's cores (cpu), 1 (cuda)
  int rounds = 3;               // kernel sweeps; each point stores the median over them
  std::vector<int> link_ranks;  // rank counts whose ring step is measured (empty: none)
  std::string link_sizes = "4K:64M:x2";
  // Training kernels (fused and unfused, forward + backward, fp32) at these shapes, stored as rows
  // "train:<kernel>:<cols>" for the study's fusion line (empty: none; calibrate's CLI: the shipped transformer
  // workloads' shapes, TransformerFusionShapes).
  std::vector<FusionShape> train;
};
// Every shape the fusion line of a shipped transformer workload (at its default batch) times, once each.
std::vector<FusionShape> TransformerFusionShapes();

// "cpu:<model>" or "cuda:<name>".
std::string CalibrationDevice(bool cuda);
// Runs fn(copy) on `threads` threads at once (a barrier before each call): one warm-up round, then timed
// rounds covering ~30 ms (3 to 31). Returns the median over rounds of the slowest copy's time (µs).
double ConcurrentMedianUs(int threads, const std::function<void(int)>& fn);
// Kernel timings: (size, codec, kernel) -> one µs value per sweep.
using KernelSamples = std::map<std::tuple<uint64_t, std::string, std::string>, std::vector<double>>;
// One sweep of every kernel of `codecs` (empty: every codec of the tuner's space) and the add, at
// each of o.sizes, with o.concurrency copies at once (calibrate's rounds; validate interleaves them
// with its passes).
void SweepKernels(const CalibrateOptions& o, const std::vector<std::string>& codecs, KernelSamples* samples);
// Throws InputError naming `option` when the sweep's largest size cannot fit in this machine's
// memory (o.concurrency copies at once; on CUDA, device memory too): before anything is measured.
void CheckKernelSizesFit(const CalibrateOptions& o, std::string_view option);
// One ring step (ciuic-bench sendrecv, MPI) per rank count at each size of `sizes`:
// (ranks, bytes) -> one µs value per sweep.
using LinkSamples = std::map<std::pair<int, uint64_t>, std::vector<double>>;
void SweepLink(const std::vector<int>& ranks, const std::string& sizes, LinkSamples* samples);
// The median over sweeps of each (ranks, size), stored as the link calibration.
void StoreLinkMedians(const std::string& db_path, const LinkSamples& samples);
// The median over sweeps of each point: printed as the calibration table and stored.
void StoreKernelMedians(const std::string& db_path, const CalibrateOptions& o, const std::vector<std::string>& codecs,
                        const KernelSamples& samples, std::ostream& out);
// The kernels every codec of the tuner's space uses, plus add; prints a table; stores the results.
void RunCalibration(const std::string& db_path, const CalibrateOptions& o, std::ostream& out);
// The newest stored value of every (kernel, codec, size, ranks) of a device (empty when none).
Calibration LoadCalibration(const std::string& db_path, const std::string& device);
// The kernels of the GPU a topology names: the calibration "cuda:<name>" whose <name> begins the
// topology's device name ("NVIDIA H100 80GB HBM3" for "NVIDIA H100 80GB HBM3 (SXM5)"); empty if none.
Calibration LoadGpuCalibrationFor(const std::string& db_path, const std::string& gpu_name);
inline bool IsGpuCalibration(const Calibration& c) { return c.device.rfind("cuda:", 0) == 0; }

}  // namespace ciuic
