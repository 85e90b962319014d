#pragma once
// One training kernel's work at one shape, ready to time: its inputs (random, where the kernels run),
// and four calls — the fused kernel forward and backward, and the unfused sequence of single-op kernels
// that does the same work, forward and backward. Shared by `ciuic-bench kernel` (the table) and
// `ciuic-tune` (the step time fusion would save), so both time exactly the same sequences.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/buffer.h"
#include "kernels/train_kernels.h"

namespace ciuic {

enum class TrainFamily { kLnActDropout, kBiasAct, kAddLn };

struct TrainKernelName {
  const char* name;
  TrainFamily family;
  Activation act;
  const char* help;
};
// ln-dropout-gelu, ln-dropout-gelu-tanh, ln-dropout-relu, bias-gelu, bias-gelu-tanh, bias-relu, add-ln.
const std::vector<TrainKernelName>& TrainKernelNames();
// The entry of that name; throws UsageError naming the known ones.
const TrainKernelName& FindTrainKernel(const std::string& name);

// Waits for the current CUDA device's queued work (no-op for host runs).
void WaitForDevice(bool device);
// Median microseconds of fn over `iters` timed runs after two untimed ones (iters 0: about 0.3 s of
// runs, 3..50); CUDA events on the device, the steady clock on the host. ciuic-bench kernel and
// ciuic-tune's fusion line time with it.
double MedianRunUs(bool device, int iters, const std::function<void()>& fn);

class TrainSequence {
 public:
  // rows x cols tensors of `dtype`, on the current CUDA device when `device`; dropout p for ln-dropout-*.
  TrainSequence(const TrainKernelName& k, size_t rows, size_t cols, DType dtype, bool device, float p, uint64_t seed);
  void FusedForward();
  void UnfusedForward();
  // The backward passes read what a forward left (statistics, the residual sum, saved activations):
  // run both forwards once first.
  void FusedBackward();
  void UnfusedBackward();
  // max |fused - unfused| / max |unfused| of the forward output (backward: of dx), on the host.
  double ForwardDiff() const;
  double BackwardDiff() const;
  // Bytes a pass must move once: tensors read or written, plus the per-row and per-column fp32 vectors.
  double MustMoveBytes(bool backward) const;
  size_t TensorBytes() const { return rows_ * cols_ * DTypeSize(dtype_); }

 private:
  const TrainKernelName& k_;
  size_t rows_, cols_;
  DType dtype_;
  bool device_;
  DropoutArgs drop_;
  Buffer x_, dy_, residual_, dsum_, gamma_, beta_;
  Buffer y_, y_u_, t1_, t2_, t3_, dx_, dx_u_, sum_;
  Buffer mean_, rstd_, dgamma_, dbeta_, ws_;
};

}  // namespace ciuic
