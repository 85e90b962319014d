#pragma once
// The accuracy gate: a convergence proxy that trains a small MLP data-parallel over thread ranks with
// the candidate codec in the bundled runtime (gradients averaged by ciuic::Runtime, error feedback as
// the codec keeps it) and compares its final loss with the same run uncompressed. The data is
// synthetic but not trivial: 20-dimensional Gaussian inputs labelled into 8 classes by a fixed random
// two-layer teacher network, so the task needs the hidden layer and does not saturate at zero loss.
#include <string>

namespace ciuic {

struct GateOptions {
  int ranks = 4;
  int steps = 300;
  int batch_per_rank = 32;
  double tolerance = 0.01;  // pass when final loss <= uncompressed final loss × (1 + tolerance)
  unsigned seed = 7;
};

struct GateResult {
  std::string codec;
  double final_loss = 0;
  double baseline_loss = 0;
  bool passed = false;
};

// Trains with `codec` (and once with "none" for the baseline). Deterministic for given options.
// "none@bf16" / "none@fp16": uncompressed, the gradients averaged by the transport's own allreduce in
// that 16-bit precision (the runtime's native algorithm).
GateResult RunAccuracyGate(const std::string& codec, const GateOptions& options = {});

}  // namespace ciuic
