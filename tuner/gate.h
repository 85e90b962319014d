#pragma once
// The accuracy gate: a convergence proxy that trains a small ReLU network data-parallel over thread
// ranks with the candidate codec in the bundled runtime (gradients averaged by ciuic::Runtime per
// bucket, error feedback as the codec keeps it, SGD with momentum at a learning rate near the
// uncompressed run's stability edge) and compares its held-out accuracy and loss with the same run
// uncompressed, over several seeds, twice: at the nominal learning rate (within `tolerance`) and at a
// stress learning rate twice as high that uncompressed training still survives (within the looser
// `stress_tolerance`), since real jobs run near their largest stable learning rate and a codec that
// diverges where uncompressed does not has no margin left. The data is synthetic, shaped like a small image
// classification task (64 non-negative "pixel" features, 10 classes of several prototypes each, noise), separable
// enough that the uncompressed loss keeps falling towards zero: the regime in which gradients become
// sparse and uneven and where sign, top-k, random-k and low-rank compression destabilise real training
// (scripts/digits_tta.py measures that on real data; docs/python.md "Time to accuracy").
#include <string>
#include <vector>

namespace ciuic {

struct GateOptions {
  int ranks = 4;
  int steps = 300;
  int batch_per_rank = 16;
  int seeds = 3;                      // seeds 1..seeds: each its own data, weights and sampling
  double learning_rate = 0.1;         // SGD, momentum 0.9
  double tolerance = 0.01;            // accuracy points (fraction) a seed may lose against uncompressed
  double loss_tolerance = 0.5;        // ... and its held-out loss may exceed uncompressed by this fraction
  double stress_learning_rate = 0.2;  // the stability probe (0: none)
  double stress_tolerance = 0.05;     // accuracy points a seed may lose there (the loss is not compared)
  // Gradient accumulation: each rank sums this many micro-batches of batch_per_rank before one
  // averaged allreduce and one optimizer step, so a run takes steps / accumulation_steps optimizer
  // steps over the same samples. It is judged against the uncompressed run at 1 (same samples, same
  // learning rate): what a job gains by syncing every k micro-batches (DDP's no_sync) and what its
  // accuracy pays for the k-fold effective batch.
  int accumulation_steps = 1;
};

struct GateSeed {
  unsigned seed = 0;
  bool stress = false;                         // a run at stress_learning_rate
  double accuracy = 0, baseline_accuracy = 0;  // held-out, fractions
  double loss = 0, baseline_loss = 0;          // held-out cross-entropy
  bool passed = false;
};

struct GateResult {
  std::string codec;
  std::vector<GateSeed> seeds;  // the nominal runs, then the stress runs
  // The first failing run, else the nominal seed with the lowest accuracy margin (codec - uncompressed).
  double final_loss = 0, baseline_loss = 0, accuracy = 0, baseline_accuracy = 0;
  bool passed = false;  // every seed passed
};

// A codec passes when on every seed its held-out accuracy is at least the uncompressed accuracy minus
// `tolerance`, its held-out loss at most the uncompressed loss × (1 + loss_tolerance), and at the stress
// learning rate its accuracy at least uncompressed minus `stress_tolerance`; every value finite.
// Deterministic for given options.
// "none@bf16" / "none@fp16": uncompressed, the gradients averaged by the transport's own allreduce in
// that 16-bit precision (the runtime's native algorithm).
GateResult RunAccuracyGate(const std::string& codec, const GateOptions& options = {});

// What the verdict depends on, stored with it ("relu64-96-48-10 ranks=4 steps=300 ..."; " accum=K"
// appended when accumulation_steps is not 1, so verdicts stored before the option stay valid).
std::string GateConfigKey(const GateOptions& options);

}  // namespace ciuic
