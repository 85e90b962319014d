#pragma once
// What fusing a transformer's LayerNorm/activation epilogues would save per training step: the fused
// training kernels (kernels/train_kernels.h) against their unfused sequences, timed now on the device
// the study is for, at the workload's transformer shape. Compute, not communication: the tuner does not
// search it, it reports it beside the communication plan.
#include <string>

#include "tuner/workload.h"

namespace ciuic {

// One line (no newline). `gpu_study`: the topology's devices are GPUs; they are timed only where this
// process has one (else the line says the estimate needs that device). Workloads without a
// "transformer" shape get a line saying so.
std::string FusionAdvice(const Workload& w, int batch, bool gpu_study, const std::string& device_name);

}  // namespace ciuic
