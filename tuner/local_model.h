#pragma once
// The cost model of the bundled runtime's allreduce (collectives/algorithms) on this machine's local
// ranks — cpu_local, MPI over shared memory — built only from calibrated primitives (calibrate.h): the
// time of one ring step (sendrecv) at each rank count and message size, and each kernel's time at each
// size under concurrent load. Every algorithm is costed step by step as the runtime executes it:
//
//   ring (none)      (P-1) × [step(c) + add(c)] + (P-1) × step(c)                     c = B/P
//   ring (codec)     encode(c) + (P-1) × [step(w) + hop(c)] + (P-1) × step(w) + decode(B)   w = wire(c)
//   rd               fold + log2 P halving steps (step + add) + doubling steps + unfold
//   randomk          encode(B) + ring(none) of the k values + decode(B)
//   sparse (topk)    encode(B) + (P-1) × step(wire(B)) + decode(B) + (P-1) × decode_acc(B)
//   sign2            encode_ef(B) + (P-1) × step(w) + decode(c) + (P-1) × decode_acc(c) + encode_ef(c)
//                    + (P-1) × step(w) + decode(B)
//   powersgd         encode(B) + ring(none) of P + ring(none) of Q + decode(B)
//   native           the transport's own allreduce as calibrated at this precision (fp32: MPI's; bf16/fp16:
//                    the runtime's cast + MPI's 16-bit sum + cast back, timed as one); kernels alone:
//                    encode(B) + decode(B) of the precision's cast (nothing at fp32)
//
// With error feedback (training, not ciuic-bench) the ring codecs first quantise the rank's own
// contribution: + encode_ef(B) + decode(B). With more ranks than cores the kernels share the cores:
// kernel time × ceil(ranks / copies timed at once). Every step of the ring waits for its slowest rank,
// and a kernel step (100 µs – a few ms) is about a scheduler time slice or shorter, so the ranks that
// find no free core run after the others rather than beside them: 3 ranks on 2 cores take two
// kernel rounds, not 1.5 (measured: with ranks/copies the 3-rank codec rows came out 17–23% low,
// with the ceiling within ±5%). The link curve is measured per rank count, so its contention is in
// the numbers.
#include <string>

#include "kernels/codec_spec.h"
#include "tuner/calibrate.h"

namespace ciuic {

struct LocalAllReduce {
  std::string codec = "none";  // codec spelling (kernels/codec_spec.h)
  std::string algo = "ring";   // ring rd sparse sign2 powersgd native (auto: the codec's default)
  double bytes = 0;            // fp32 bytes per rank
  int ranks = 2;
  bool error_feedback = false;
  std::string precision = "fp32";  // native: the dtype the transport reduces in (fp32 bf16 fp16)
};

// Predicted time (µs). UsageError naming the calibration to run when a needed curve is missing.
double PredictLocalAllReduceUs(const Calibration& cal, const LocalAllReduce& a);
// Whether the calibration has everything PredictLocalAllReduceUs needs for `a`.
bool CanPredictLocal(const Calibration& cal, const LocalAllReduce& a, std::string* missing = nullptr);

// The codec kernels alone of one rank in the same step structure (links and uncompressed adds left
// out, no core sharing: every rank has its own GPU): what a GPU topology's model adds to its
// alpha-beta transfer time when a GPU calibration (calibrate --device cuda) is at hand. hier is costed
// as the ring over all ranks; native at a 16-bit precision is its two casts. False / UsageError when
// nothing is encoded (codec none at fp32) or a kernel is missing from `cal`.
bool HasCodecKernels(const Calibration& cal, const LocalAllReduce& a);
double CodecKernelUs(const Calibration& cal, const LocalAllReduce& a);

// A kernel's work in streaming passes over its fp32 bytes: 1 for the element codecs' kernels; the
// top-k selection and PowerSGD's matrix products are not streaming kernels and count what they cost
// relative to streaming on the H100 (local_model.cc names the measurement).
double KernelWorkFactor(const std::string& kernel, const CodecSpec& spec);

// The same kernel steps as CodecKernelUs counted rather than timed: passes over the fp32 bucket
// (`a.bytes`, each kernel weighted by KernelWorkFactor) and kernel launches. Without a calibration
// the tuner prices them at a streaming rate plus a fixed cost per GPU launch (cost_model.h), so the
// estimate has the calibrated structure: error feedback's encode and decode of the whole bucket,
// the ring's P-1 fused hops on chunks. Sparse codecs' accumulation counts the wire it reads. Zero
// when nothing is encoded.
struct KernelWork {
  double passes = 0;
  double launches = 0;
};
KernelWork CodecKernelWork(const LocalAllReduce& a);

}  // namespace ciuic
