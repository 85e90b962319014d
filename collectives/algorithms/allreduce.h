#pragma once
// Allreduce algorithms of the bundled runtime, written only against Communicator (point-to-point,
// Split, the host control plane). fp32 data in the communicator's memory (host or device), sum
// (average = sum, then one scaling by 1/P). One file per algorithm in this folder (ring.cc, randomk.cc,
// rd.cc, hier.cc, sparse.cc, sign2.cc, powersgd.cc, native.cc) over the shared hops (hops.h);
// allreduce.cc holds the engine.
//
//   ring     reduce-scatter + allgather; uncompressed, or compressed with the fused per-hop
//            decode-add-encode (the owner encodes its reduced chunk once, every rank decodes the same
//            wires, so all ranks end bit-identical). Large chunks move in pieces, K in flight, the
//            reduction of piece i overlapping the transfer of the next ones.
//   rd       recursive halving (reduce-scatter) + recursive doubling (allgather); non-powers of two
//            fold the extra ranks in first. Uncompressed.
//   hier     depth 2: intra-node reduce-scatter -> inter-node allreduce of the owned chunk (ring,
//            compressed when a codec is set) -> intra-node allgather. Nodes come from host names or
//            `ranks_per_node`. Depth 3 (`nodes_per_group`) repeats the pattern one level up: the
//            inter-node step is itself intra-group reduce-scatter -> inter-group ring -> allgather.
//   sparse   topk: every rank's (values, indices) allgathered and summed in rank order.
//   randomk  shared indices: the k values go through the uncompressed ring.
//   sign2    two-phase sign1: chunk wires all-to-all, the chunk's server sums them and re-encodes with
//            its own error feedback, server wires allgathered.
//   powersgd two allreduces (P, then Q) with orthonormalisation between; warm-started Q.
//   native   the transport's own allreduce (NCCL's, MPI's), uncompressed, in `precision`: fp32, or a
//            16-bit reduction (bf16/fp16: cast with 1/P pre-scaling so sums cannot overflow, the 16-bit
//            sum, cast back; as PyTorch's fp16/bf16 compress hooks and DeepSpeed's
//            communication_data_type do). The other algorithms always accumulate in fp32 (their 16-bit
//            wires are the fp16/bf16 codecs).
//
// Error feedback: a CodecState per tensor. Lossy codecs on the ring quantise the rank's own
// contribution once with its residual (what it sends, summed over steps, plus the residual equals
// its gradients); re-encoding of partial sums on later hops is not fed back.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "collectives/communicator.h"
#include "kernels/codec.h"

namespace ciuic {

enum class AllReduceAlgo {
  kAuto,
  kRing,
  kRecursiveDoubling,
  kHierarchical,
  kSparse,
  kTwoPhaseSign,
  kPowerSgd,
  kNative
};
const char* AlgoName(AllReduceAlgo a);
AllReduceAlgo ParseAlgo(std::string_view text);  // auto ring rd hier sparse sign2 powersgd native
// The algorithm `auto` picks for a lossy codec (the one that takes it). Uncompressed fp32, auto
// chooses per message size from a crossover table (crossover.h); in a 16-bit precision, native.
AllReduceAlgo DefaultAlgo(CodecKind codec);

struct Crossover;
class SharedWindow;

// The largest AlgoConfig::staged_bytes an engine takes (each rank's window holds two such slots).
constexpr size_t kMaxStagedBytes = size_t{1} << 30;

struct AlgoConfig {
  AllReduceAlgo algo = AllReduceAlgo::kAuto;
  CodecSpec codec;               // kind none: uncompressed
  size_t piece_bytes = 1 << 20;  // pipelining unit of the ring
  int in_flight = 4;             // pieces in flight per direction (K)
  // Out of place, a ring whose reduce-scatter writes more result bytes than this streams them past
  // the caches (the same bits); 0: the largest cache a core sees.
  size_t uncached_bytes = 0;
  // Uncompressed ring calls up to this many bytes on a one-host CPU world go through a shared window
  // of the engine's own (two barriers instead of the transport's messages); 0: never.
  size_t staged_bytes = size_t{1} << 20;  // at most kMaxStagedBytes (UsageError)
  int ranks_per_node = 0;                 // hier: 0 = group by host name
  int nodes_per_group = 0;                // hier depth 3: nodes per group (e.g. per rail or NVLink domain); 0 = depth 2
  DType precision = DType::kFloat32;      // native: the dtype the transport reduces in (fp32 bf16 fp16)
  // auto, uncompressed fp32: the table it chooses from per message size; null: the built-in one of
  // the transport (BuiltinCrossover).
  std::shared_ptr<const Crossover> crossover;
};
// Parses a reduction precision: fp32 | bf16 | fp16 (UsageError otherwise).
DType ParsePrecision(std::string_view text);

struct Counters {
  uint64_t calls = 0;
  double raw_bytes = 0;   // fp32 bytes reduced
  double wire_bytes = 0;  // bytes this rank sent
  double encode_s = 0, comm_s = 0, reduce_s = 0, total_s = 0;
  uint64_t mapped_calls = 0;  // calls whose ring read and wrote the peers' buffers in shared windows
  uint64_t staged_calls = 0;  // calls whose ring went through the engine's own window
  uint64_t native_calls = 0;  // calls that ran the transport's own allreduce (native, or a ring band run unstaged)
};

class AllReduceEngine {
 public:
  AllReduceEngine(Communicator& comm, const AlgoConfig& config);
  ~AllReduceEngine();

  // data: n floats in comm.BufferKind() memory, reduced in place. state: the tensor's codec state
  // (required for lossy codecs with error feedback, PowerSGD and two-phase sign1).
  void Run(float* data, size_t n, CodecState* state, bool average) { Run(data, data, n, state, average); }
  // Out of place: src's n floats reduced into data (src unchanged). The uncompressed ring and native
  // fp32 read src directly (no copy pass); the others copy it into data first. Every rank of one call
  // must pass the same placement (as MPI_IN_PLACE must be given on every rank): auto's table may
  // choose another algorithm out of place (Crossover::out_of_place).
  void Run(const float* src, float* data, size_t n, CodecState* state, bool average);

  // The floats of each codec-state buffer this engine keeps for a tensor of n elements on this rank
  // (0: the buffer stays empty). Runtime::Load holds a loaded state to it before allocating.
  struct StateShape {
    size_t residual = 0, server_residual = 0, q = 0;
  };
  StateShape ShapeOf(size_t n) const;

  // A window (made over this engine's communicator, as on every rank, in the same order) whose
  // buffers the uncompressed ring reads and writes in the peers' memory: when every rank's source
  // and result lie in registered windows, each rank sums its chunk from all sources where they lie
  // and writes it into every result (no transfer through the transport), then a barrier. Otherwise, or on a device, the
  // ring runs as before. The engine does not keep the window alive: once its owner releases it (on any rank) the ring
  // no longer uses it.
  void Register(std::weak_ptr<const SharedWindow> window);

  AllReduceAlgo algo() const { return algo_; }  // kAuto when a crossover chooses per size
  // What a message of n floats runs (auto's choice, or the one algorithm), in place or out of place.
  AllReduceAlgo AlgoFor(size_t n, bool out_of_place = false) const;
  const Crossover* crossover() const { return crossover_.get(); }  // null unless auto chooses per size
  const Codec& codec() const { return codec_; }
  const Counters& counters() const { return counters_; }
  // Whether a call of n floats runs the transport's own fp32 allreduce, uncompressed.
  bool RunsNativeFp32(size_t n) const;
  // Counts a call of n floats that its caller reduced as that allreduce would (ciuic::Runtime's
  // small calls, summed inside its agreement), in `seconds`.
  void CountNative(size_t n, double seconds);

 private:
  struct Impl;
  Communicator& comm_;
  AlgoConfig config_;
  AllReduceAlgo algo_;
  std::shared_ptr<const Crossover> crossover_;
  Codec codec_;
  Counters counters_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ciuic
