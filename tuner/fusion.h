#pragma once
// What fusing a transformer's LayerNorm/activation epilogues would save per training step: the fused
// training kernels (kernels/train_kernels.h) against their unfused sequences at the workload's
// transformer shape, from a calibration of the study's device (ciuic-tune calibrate, rows
// "train:<kernel>:<cols>") or, without one, timed now where the study's device is this host. Compute, not
// communication: the tuner does not search it, it reports it beside the communication plan.
#include <string>
#include <vector>

#include "tuner/workload.h"

namespace ciuic {

struct Calibration;

// A kernel the line sums, at one shape: "add-ln" at tokens x hidden, "bias-gelu" at tokens x ffn.
struct FusionShape {
  std::string kernel;
  size_t rows = 0, cols = 0;
};
// Forward + backward of one shape, fp32, median of a few runs each pass (µs).
struct FusionTimes {
  double fused_us = 0, unfused_us = 0;
};

// The shapes the line times for `w` at its micro-batch's tokens, at most kMaxTokens rows (and a
// bounded tensor): empty without a transformer shape.
std::vector<FusionShape> FusionShapes(const Workload& w, int batch);
// The calibration rows' kernel name of a shape: "train:<kernel>:<cols>" (a curve per width, over rows).
std::string FusionCurveName(const FusionShape& s);
// Times one shape on this host's CPU or (device) its GPU. Throws on failure (out of memory, a fault).
FusionTimes TimeFusion(const FusionShape& s, bool device);

// One line (no newline). `gpu_study`: the topology's devices are GPUs. With `cal` holding both kernels'
// curves at the workload's widths ("train:add-ln:<hidden>", "train:bias-gelu:<ffn>", fused and unfused,
// read at the timed rows' bytes) the line uses them and names the
// calibrated device; otherwise the kernels are timed now, only where the study's device is here (else
// the line says the estimate needs that device or its calibration). Workloads without a "transformer"
// shape get a line saying so.
std::string FusionAdvice(const Workload& w, int batch, bool gpu_study, const std::string& device_name,
                         const Calibration* cal = nullptr);

}  // namespace ciuic
