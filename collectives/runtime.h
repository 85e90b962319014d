#pragma once
// ciuic::Runtime: the compressed allreduce that tuned profiles drive. It takes a Communicator and a
// config (algorithm, codec, bucket bytes), allreduces a flat buffer or a list of tensors (assembled
// into buckets in list order with one flatten launch per bucket), keeps error-feedback state per
// (tensor id, bucket) with save/load, refuses NaN/Inf on every rank at once, and counts bytes on the
// wire and time per phase. Every failure one rank can see before the exchange (NaN/Inf, a codec state
// of another size, a call or configuration that differs from the other ranks', a bad state file) is
// agreed over the control plane first, so all ranks throw it together, naming the ranks at fault.
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "collectives/algorithms/allreduce.h"
#include "collectives/communicator.h"
#include "core/trace.h"
#include "core/watchdog.h"
#include "kernels/codec.h"

namespace ciuic {

struct RuntimeConfig {
  AlgoConfig algo;
  size_t bucket_bytes = 25u << 20;  // DDP's default bucket_cap_mb
  // One fused NaN/Inf pass + a three-word host allreduce per bucket that also agrees on the call
  // (sequence number, tensor id, bucket, count, codec) and the state's shape. Off: neither; a state
  // of another size then throws on every rank alike only if the ranks make the same calls.
  bool check_finite = true;
  // Seconds an allreduce, Load or Save may go without progress (no bucket finished) before the
  // runtime prints one line naming the stuck call and the peers that went silent, and ends the
  // process with exit 2 (a rank blocked inside MPI cannot be unblocked otherwise; PyTorch's NCCL
  // watchdog does the same). Negative: $CIUIC_TIMEOUT or 60 s; 0: off.
  double timeout_s = -1;
};

class Runtime {
 public:
  Runtime(Communicator& comm, const RuntimeConfig& config);
  // With a trace set, writes it first (FlushTrace: collective, so every rank destroys its runtime).
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  // data: n fp32 in the communicator's memory, reduced in place (sum, or average).
  void AllReduce(float* data, size_t n, uint64_t tensor_id, bool average = false);
  // Tensors (ids[i] for tensors[i]) packed into buckets of at most bucket_bytes in list order.
  void AllReduceTensors(const std::vector<TensorRef>& tensors, const std::vector<uint64_t>& ids,
                        bool average = false);

  // Error-feedback state (residuals, PowerSGD Q, steps) to a file and back, one file per rank.
  // Load is collective: every rank reads its own file, holds each length to the bytes left and to
  // this runtime's shape (world size, rank, codec, counts within a bucket, buffer sizes the codec
  // keeps, finite values) before allocating, and the ranks then agree that all files were good and
  // hold the same tensors, counts and steps. Otherwise every rank throws InputError naming the
  // failing ranks (RuntimeError for a failure that was not the file's) and no rank's state changes.
  void Save(const std::string& path) const;
  void Load(const std::string& path);

  // Records this rank's phases (bucket, finite check and agreement, encode, send, recv, reduce, decode,
  // ...; on a device with CUPTI also the GPU's kernels and copies) for one Chrome trace-event file at
  // `path`, written by rank 0 at FlushTrace and on destruction; "" stops recording. Every rank calls
  // it alike. Throws InputError when `path` cannot be written.
  void SetTrace(const std::string& path);
  // Collective: every rank's events so far to rank 0, which writes the file and prints a few summary
  // lines on stderr (per rank: share of time in kernels, communication, waiting). Recording goes on;
  // a later flush rewrites the file with everything. Nothing without a trace.
  void FlushTrace();

  // Changes the deadline (seconds without progress; 0 turns it off).
  void SetTimeout(double seconds);
  double timeout() const { return watchdog_ ? watchdog_->timeout() : 0.0; }

  const Counters& counters() const { return engine_.counters(); }
  const AllReduceEngine& engine() const { return engine_; }
  size_t StateCount() const { return states_.size(); }

 private:
  void Reduce(float* data, size_t n, uint64_t key_id, uint64_t key_bucket, bool average);
  [[noreturn]] void FailTogether(uint32_t bad, size_t n, uint64_t key_id, uint64_t key_bucket, uint64_t seq,
                                 bool average, const CodecState* state);
  Communicator& comm_;
  RuntimeConfig config_;
  AllReduceEngine engine_;
  uint64_t config_digest_ = 0;  // codec, algorithm and bucket size: the same on every rank
  uint64_t calls_ = 0;          // Reduce calls so far: the sequence number the ranks agree on
  std::map<std::pair<uint64_t, uint64_t>, CodecState> states_;
  Buffer flag_, bucket_;
  std::unique_ptr<Watchdog> watchdog_;  // null when the deadline is off
  std::unique_ptr<trace::Recorder> trace_;  // null: not tracing
  std::string trace_path_;
  bool gpu_trace_ = false;      // this runtime joined the CUPTI collector
  size_t trace_written_ = 0;    // events in the last file written (a flush with nothing new is skipped)
};

}  // namespace ciuic
