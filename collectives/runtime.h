#pragma once
// ciuic::Runtime: the compressed allreduce that tuned profiles drive. It takes a Communicator and a
// config (algorithm, codec, bucket bytes), allreduces a flat buffer or a list of tensors (assembled
// into buckets in list order with one flatten launch per bucket), keeps error-feedback state per
// (tensor id, bucket) with save/load, refuses NaN/Inf on every rank at once, and counts bytes on the
// wire and time per phase. Every failure one rank can see before the exchange (NaN/Inf, a codec state
// of another size, a call or configuration that differs from the other ranks', a bad state file) is
// agreed over the control plane first, so all ranks throw it together, naming the ranks at fault.
#include <algorithm>
#include <cstdint>
#include <functional>
#include <istream>
#include <map>
#include <ostream>
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
  // One fused NaN/Inf pass + a 256-byte host allreduce per bucket that also agrees on the call
  // (sequence number, tensor id, bucket, count, codec) and the state's shape; a bucket of up to 22
  // floats that runs native in fp32 on host memory travels in that same message (one exchange, not
  // two). Off: neither; a state of another size then throws on every rank alike only if the ranks
  // make the same calls.
  bool check_finite = true;
  // Seconds an allreduce, Load or Save may go without progress (no bucket finished) before the
  // runtime prints one line naming the stuck call and the peers that went silent, and ends the
  // process with exit 2 (a rank blocked inside MPI cannot be unblocked otherwise; PyTorch's NCCL
  // watchdog does the same). Negative: $CIUIC_TIMEOUT or 60 s; 0: off.
  double timeout_s = -1;
  // What an agreed NaN/Inf does (check_finite on). false: every rank throws InputError and nothing is
  // reduced (the C API's ciuic_allreduce). true: the bucket is summed uncompressed over the
  // transport's own allreduce, so the NaN/Inf reaches every rank as an uncompressed sum would (a
  // GradScaler sees it and skips the step), and the codec state stays as it was (DDP's hook).
  bool propagate_nonfinite = false;
};

// Load's agreement, for Runtime::Load and callers that load several runtimes at once: each rank's
// verdict on what it read (status 0 ok, 1 a bad file, 2 another failure; `error` its message) and
// the digest of the states it would commit are gathered; unless every rank read good, equal states,
// every rank throws the same InputError (RuntimeError where a failure was not the file's) naming the
// failing ranks. Collective.
void AgreeOnLoad(Communicator& comm, int status, uint64_t digest, const std::string& error,
                 const std::string& shown_path);

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
  void AllReduceTensors(const std::vector<TensorRef>& tensors, const std::vector<uint64_t>& ids, bool average = false);

  // Error-feedback state (residuals, PowerSGD Q, steps) to a file and back, one file per rank.
  // Load is collective: every rank reads its own file, holds each length to the bytes left and to
  // this runtime's shape (world size, rank, codec, counts within a bucket, buffer sizes the codec
  // keeps, finite values) before allocating, and the ranks then agree that all files were good and
  // hold the same tensors, counts and steps. Otherwise every rank throws InputError naming the
  // failing ranks (RuntimeError for a failure that was not the file's) and no rank's state changes.
  void Save(const std::string& path) const;
  void Load(const std::string& path);

  // The pieces of Load for a caller that keeps several runtimes' states in one file (RuleRuntime):
  // Parse holds `size` bytes of `in` (named `name` in messages) to this runtime as Load does and
  // throws InputError naming the field; nothing changes until Commit. DigestOf fingerprints what
  // the ranks must hold alike. Write is Save's body.
  using StateMap = std::map<std::pair<uint64_t, uint64_t>, CodecState>;
  StateMap Parse(std::istream& in, uint64_t size, const std::string& name) const;
  static uint64_t DigestOf(const StateMap& states);
  void Commit(StateMap states) { states_ = std::move(states); }
  void Write(std::ostream& out) const;

  // Error feedback of one tensor (the buckets AllReduce cuts it into) as n host floats: zeros where
  // no state exists yet or the codec keeps no residual. SetResidual replaces it (finite values;
  // steps and Q stay), making the states if needed; false when the codec keeps no residual (nothing
  // to carry). Forget drops every state of a tensor id. Local: no communication.
  std::vector<float> Residual(uint64_t tensor_id, size_t n) const;
  bool SetResidual(uint64_t tensor_id, size_t n, const float* values);
  void Forget(uint64_t tensor_id);
  // Buckets that met NaN/Inf and were summed uncompressed (propagate_nonfinite).
  uint64_t nonfinite() const { return nonfinite_; }

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
  const RuntimeConfig& config() const { return config_; }
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
  size_t BucketElems() const { return std::max<size_t>(config_.bucket_bytes / 4, 1); }
  StateMap states_;
  uint64_t nonfinite_ = 0;
  Buffer flag_, bucket_;
  std::unique_ptr<Watchdog> watchdog_;  // null when the deadline is off
  // The call the watchdog is armed for, formatted only if it expires.
  struct CallInFlight {
    uint64_t seq = 0, id = 0, bucket = 0;
    size_t n = 0;
  } in_flight_;
  std::function<std::string()> describe_in_flight_;
  std::unique_ptr<trace::Recorder> trace_;  // null: not tracing
  std::string trace_path_;
  bool gpu_trace_ = false;    // this runtime joined the CUPTI collector
  size_t trace_written_ = 0;  // events in the last file written (a flush with nothing new is skipped)
};

}  // namespace ciuic
