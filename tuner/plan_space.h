#pragma once
// The tuner's search space for gradient allreduce and the modelled objective: a point (codec, bucket
// bytes, streams, algorithm, reduction precision, and where they apply the codec's parameter and
// hier's depth) becomes a CommPlan whose training step time on a topology and workload is predicted
// by the cost model and the overlap schedule.
//
// Conditional axes (search.h Dimension::active): `ratio` (0.1 0.05 0.01 0.001, the fraction of
// elements kept) applies to topk and randomk, `rank` (1 2 4 8 16 32) to powersgd, `depth` (2 3) to
// hier on a topology with a spine (tuner/topology.h; depth 3 groups the nodes as its spine does).
// The ratios run from 10% of the elements down to the 0.1% of Deep Gradient Compression (Lin et al.,
// ICLR 2018); the accuracy gate decides per ratio which of them a study may use.
//
// Reduction precision is the dtype partial sums are formed and moved in. The runtime's own algorithms
// accumulate in fp32 (their 16-bit wires are the fp16/bf16 codecs, re-rounded once per hop); a 16-bit
// reduction (bf16, fp16) is the library's allreduce run in that dtype (algo nccl with codec none), as
// PyTorch's fp16/bf16 compress hooks, DeepSpeed's communication_data_type and Horovod's fp16
// compression do.
#include <string>

#include "tuner/calibrate.h"
#include "tuner/search.h"
#include "tuner/workload.h"

namespace ciuic {

// The dimensions of AllReducePlanSpace, in order.
enum PlanDim { kCodecDim, kBucketDim, kStreamsDim, kAlgoDim, kPrecisionDim, kRatioDim, kRankDim, kDepthDim };

struct PlanChoice {
  std::string codec;  // codec spelling with its parameter (kernels/codec_spec.h): topk:0.01, powersgd:4
  double bucket_bytes = 0;
  int streams = 1;
  std::string algo;                // ring rd hier nccl (nccl: the library's own, uncompressed)
  std::string precision = "fp32";  // fp32 bf16 fp16 (16-bit: algo nccl with codec none only)
  int hierarchy_depth = 2;         // hier: 2 (node, network) or 3 (node, group, spine); other algorithms ignore it
  int nodes_per_group = 0;         // hier depth 3: the topology's spine fan-in (ChoiceOf with a topology)
};
// The profile rule's hierarchy_depth of a choice: hier's depth, 1 for every other algorithm.
int RuleDepth(const PlanChoice& c);
// The accuracy gate's name for a choice's numerics: the codec, or "none@bf16" for a 16-bit reduction.
std::string GateName(const PlanChoice& c);

// Every combination of the dimensions; with a topology, conditional on what the runtime offers there
// (Offered): the search never proposes a combination that cannot run.
SearchSpace AllReducePlanSpace();
SearchSpace AllReducePlanSpace(const Topology& t);
// Every codec spelling the space holds (each family with each of its parameters): what a study
// gates and a calibration times.
std::vector<std::string> PlanSpaceCodecs();
// The runtime algorithm a choice runs (ring with topk/sign1/powersgd means their dedicated algorithm).
std::string RuntimeAlgo(const PlanChoice& c);
PlanChoice ChoiceOf(const SearchSpace& space, const Point& p);
// With the topology: a depth-3 choice takes its group size from the topology's spine.
PlanChoice ChoiceOf(const SearchSpace& space, const Point& p, const Topology& t);
// The plan of a choice on a topology; `feasible` false for combinations the runtime does not offer
// (a codec on rd or on NCCL's own allreduce, a dedicated-algorithm codec under hier, hier depth 3
// without a spine, a 16-bit precision anywhere but the library's uncompressed allreduce).
// With a calibration of the topology's device (a GPU's for a GPU topology, this CPU's for cpu_local)
// the codec kernels cost what was measured (CodecKernelUs) instead of the bandwidth estimate; with this
// machine's link calibrated too (cpu_local, at its rank count) the whole bucket time comes from the
// calibrated local model (error feedback on, as in training). Else alpha-beta.
CommPlan PlanOf(const PlanChoice& c, const Topology& t, bool* feasible, const Calibration* cal = nullptr);
// Whether the runtime offers a choice on a topology (PlanOf's `feasible`).
bool Offered(const PlanChoice& c, const Topology& t);
// The score of a step: backward + exposed communication, plus 1% of the total communication time so
// that configurations whose communication hides completely still prefer the one that moves less.
inline double StepScore(const StepTiming& s) { return s.backward_us + s.exposed_us + 0.01 * s.comm_us; }
// Device memory (bytes per rank) the runtime keeps for a choice over a workload, from what
// Codec::Prepare and the runtime allocate: per gradient bucket an error-feedback residual (4 B per
// element, lossy codecs), PowerSGD's matrix scratch (4 B per element) and warm-start Q (cols × rank),
// sign2's server residual (1/P of the bucket), topk's device workspace, plus one bucket buffer and
// its send/receive wires.
double CommStateBytes(const PlanChoice& c, const Workload& w, int ranks);
// Modelled step score (µs, StepScore); +inf when infeasible.
double ModelStepUs(const PlanChoice& c, const Topology& t, const Workload& w, int batch,
                   const Calibration* cal = nullptr);

// Consumers a study can tune for (ciuic-tune run --target): the configurations each can run.
//   ciuic      the ciuic runtime: everything the topology offers
//   ddp        PyTorch DDP with ciuic's comm hook (python/ciuic): any codec over the process group
//              (the library's allreduce, or the ring pattern of encoded payloads), one stream
//   nccl       NCCL alone (environment, tuner plugin): its own uncompressed allreduce at fp32
//   deepspeed  its allreduce with communication_data_type fp32/fp16/bf16, or 1-bit Adam (sign1 with
//              the two-phase error-compensated exchange), one stream
//   horovod    its allreduce at fp32, or fp16 (hvd.Compression.fp16), one stream
std::vector<std::string> TuneTargets();
bool TargetRuns(const std::string& target, const PlanChoice& c);

}  // namespace ciuic
