#include "collectives/runtime.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <string_view>
#include <vector>

#include <fmt/ranges.h>
#include <unistd.h>

#include "collectives/crossover.h"
#include "collectives/state_format.h"
#include "collectives/state_reader.h"
#include "collectives/trace_comm.h"
#include "core/config.h"
#include "core/cupti.h"
#include "core/error.h"
#include "core/files.h"
#include "core/timer.h"
#include "kernels/reduce.h"

namespace ciuic {

namespace {

// Bits of a rank's verdict on one bucket before the exchange.
constexpr uint32_t kNonFinite = 1, kStateSize = 2;

// The agreement's message, summed over the ranks (doubles): [0] ranks that saw a NaN/Inf, [1] ranks
// whose codec state has another size, then the call's 52-bit fingerprint in four 13-bit pieces and
// their squares (every sum exact below 2^27 ranks), then up to kInlineFloats of the call's own floats
// where it has no more and runs the transport's fp32 allreduce on host memory (zeros otherwise). One
// size for every call, so that ranks disagreeing on the call still exchange alike.
constexpr int kFingerprintPieces = 4;
constexpr size_t kAgreeHead = 2 + 2 * kFingerprintPieces;
constexpr size_t kInlineFloats = 22;
constexpr size_t kAgreeWords = kAgreeHead + kInlineFloats;  // 256 bytes

// FNV-1a: fingerprints of calls and loaded states the ranks compare.
class Digest {
 public:
  Digest& Add(uint64_t v) {
    for (int i = 0; i < 8; ++i) Byte(static_cast<uint8_t>(v >> (8 * i)));
    return *this;
  }
  Digest& Add(std::string_view s) {
    Add(s.size());
    for (char c : s) Byte(static_cast<uint8_t>(c));
    return *this;
  }
  uint64_t value() const { return h_; }

 private:
  void Byte(uint8_t b) { h_ = (h_ ^ b) * 0x100000001b3ull; }
  uint64_t h_ = 0xcbf29ce484222325ull;
};

// A call's fingerprint, compared by every rank on every call: each word folded in with one multiply and
// a shift (splitmix64's constants), then mixed once more. FNV-1a over the same 48 bytes is 48 dependent
// multiplies, about 200 instructions and cycles per call on the project's VM (callgrind,
// bench/results/2026-11-30-runtime-call-profile); this is about a fifth of that.
uint64_t CallFingerprint(std::initializer_list<uint64_t> words) {
  uint64_t h = 0x9e3779b97f4a7c15ull;
  for (uint64_t w : words) {
    h = (h ^ w) * 0xbf58476d1ce4e5b9ull;
    h ^= h >> 31;
  }
  h = (h ^ (h >> 29)) * 0x94d049bb133111ebull;
  return h ^ (h >> 32);
}

std::string RankList(const std::vector<int>& ranks) {
  return fmt::format("rank{} {}", ranks.size() == 1 ? "" : "s", fmt::join(ranks, ", "));
}

// A file name for a one-line message: control characters (a newline) as '?', and whole up to
// PATH_MAX, since the part that names the file is at its end.
std::string ShownPath(const std::string& path) { return PrintableLine(path, 4096); }

// What the ranks must hold alike after a load: keys, counts, steps and which buffers exist (server
// residuals differ in length across ranks by design).
uint64_t StateDigest(const StateMap& states) {
  Digest d;
  d.Add(states.size());
  for (const auto& [key, st] : states)
    d.Add(key.first)
        .Add(key.second)
        .Add(st.step)
        .Add(st.count)
        .Add((st.residual.bytes() ? 1u : 0u) | (st.server_residual.bytes() ? 2u : 0u) | (st.q.bytes() ? 4u : 0u));
  return d.value();
}

// One rank's result of reading its state file, gathered by all (control plane, fixed size).
struct LoadVote {
  uint32_t status;  // 0 ok, 1 a bad file (InputError), 2 another failure (memory, device)
  uint32_t unused;
  uint64_t digest;
  char message[240];  // the start of the failure's message
};

// One rank's view of a bucket, gathered only when some rank refuses it.
struct CallVote {
  uint32_t bad, average;
  uint64_t seq, id, bucket, n, config, state_count;
};

}  // namespace

Runtime::Runtime(Communicator& comm, const RuntimeConfig& config)
    : comm_(comm), config_(config), engine_(comm, config.algo) {
  if (config.bucket_bytes < 4) throw UsageError("bucket bytes must hold at least one fp32 element");
  // With auto choosing per size, the table too: ranks that read different tables fail together. The
  // precision and the buffers' memory decide whether a small call rides in the agreement (Reduce):
  // ranks that differ there fail together too, rather than one summing inline while another calls.
  config_digest_ = Digest()
                       .Add(engine_.codec().Name())
                       .Add(AlgoName(engine_.algo()))
                       .Add(config.bucket_bytes)
                       .Add(config.algo.staged_bytes)
                       .Add(engine_.crossover() ? engine_.crossover()->Digest() : 0)
                       .Add(static_cast<uint64_t>(config.algo.precision))
                       .Add(static_cast<uint64_t>(comm.BufferKind()))
                       .value();
  flag_ = Buffer(4, comm.BufferKind());
  SetBytes(flag_.data(), comm.BufferKind(), 0, 4, comm.Stream());
  SetTimeout(config.timeout_s < 0 ? DefaultTimeoutSeconds() : config.timeout_s);
  describe_in_flight_ = [this] {
    return fmt::format("allreduce call {} (tensor {} {}, {} floats)", in_flight_.seq, in_flight_.id,
                       BucketName(in_flight_.bucket), in_flight_.n);
  };
}

namespace {

// Arms a runtime's watchdog for one collective step (agreement, exchange); leaving the step counts as
// progress. The description is only formatted when there is a watchdog.
class Armed {
 public:
  template <class Describe>
  Armed(Watchdog* w, Describe&& describe) : w_(w) {
    if (w_) w_->Arm(describe());
  }
  ~Armed() {
    if (w_) {
      w_->Progress();
      w_->Disarm();
    }
  }
  Armed(const Armed&) = delete;
  Armed& operator=(const Armed&) = delete;

 private:
  Watchdog* w_;
};

}  // namespace

void Runtime::SetTimeout(double seconds) {
  if (!(seconds >= 0) || !std::isfinite(seconds))
    throw UsageError(fmt::format("runtime timeout {}: expected a non-negative number of seconds", seconds));
  watchdog_.reset();
  if (seconds == 0) return;
  const int rank = comm_.Rank();
  watchdog_ = std::make_unique<Watchdog>(seconds, [rank](const std::string& what, double t) {
    std::fputs(fmt::format("ciuic runtime: rank {}: no progress in {} s: {}; exiting with 2\n", rank, t, what).c_str(),
               stderr);
    std::fflush(stderr);
    std::_Exit(2);
  });
  // Ranks of one host launched by mpiexec name a silent peer in that line (core/watchdog.h).
  watchdog_->SetHeartbeats(Heartbeats::FromEnvironment());
  // Elsewhere the job's store does, where the transport has one (ciuic.torch, launchers): this
  // rank beats there, and its deadline names the ranks gone or silent.
  if (Liveness live = comm_.PeerLiveness(); live.beat) {
    watchdog_->SetBeat(std::move(live.beat));
    watchdog_->SetPeerReport(std::move(live.report));
  }
}

void Runtime::Reduce(float* data, size_t n, uint64_t key_id, uint64_t key_bucket, bool average) {
  const uint64_t seq = calls_++;
  trace::Span span("bucket", trace::Category::kPhase);
  span.With("tensor", static_cast<int64_t>(key_id))
      .With("bucket", static_cast<int64_t>(key_bucket & ~(uint64_t{1} << 63)))
      .With("bytes", static_cast<int64_t>(n * 4))
      .With("call", static_cast<int64_t>(seq));
  // Armed for the whole bucket (agreement and exchange); each finished bucket is progress. The
  // message is formatted only if the deadline expires.
  in_flight_ = {seq, key_id, key_bucket, n};
  struct ArmedCall {
    Watchdog* w;
    ~ArmedCall() {
      if (w) {
        w->Progress();
        w->Disarm();
      }
    }
  } armed{watchdog_.get()};
  if (armed.w) armed.w->Arm(&describe_in_flight_);
  const auto found = states_.find({key_id, key_bucket});
  const CodecState* state = found == states_.end() ? nullptr : &found->second;
  // A state of another size would throw inside the engine, on this rank only, once peers are waiting.
  uint32_t bad = state && state->count != 0 && state->count != n ? kStateSize : 0;
  if (config_.check_finite) {
    {
      trace::Span check("finite check", trace::Category::kCompute);
      check.With("bytes", static_cast<int64_t>(n * 4));
      if (n <= kInlineFloats && comm_.BufferKind() == MemoryKind::kHost) {
        // A few host floats (the agreement carries them): checked here; the kernel's dispatch and its
        // flag's round trip cost about ten times this loop (bench/results/2026-11-30-runtime-call-profile).
        for (size_t i = 0; i < n; ++i)
          if (!std::isfinite(data[i])) bad |= kNonFinite;
      } else {
        UnscaleCheckNorm(data, n, 1.0f, flag_.as<uint32_t>(), nullptr, comm_.Stream());
        uint32_t flag = 0;
        CopyBytes(&flag, MemoryKind::kHost, flag_.data(), flag_.kind(), 4, comm_.Stream());  // after the check kernel
        if (flag) {
          bad |= kNonFinite;
          SetBytes(flag_.data(), flag_.kind(), 0, 4, comm_.Stream());
        }
      }
    }
    // One host allreduce (AgreeWords doubles, summed): how many ranks saw a NaN/Inf or hold a state
    // of another size, and the call's fingerprint, so that ranks making different calls or running
    // another codec are caught too; a small native call carries its floats in the same message.
    const uint64_t call = CallFingerprint({seq, key_id, key_bucket, n, average, config_digest_}) >> 12;
    const bool inline_sum = n <= kInlineFloats && comm_.BufferKind() == MemoryKind::kHost && engine_.RunsNativeFp32(n);
    double agree[kAgreeWords] = {};
    agree[0] = (bad & kNonFinite) ? 1 : 0;
    agree[1] = (bad & kStateSize) ? 1 : 0;
    double piece[kFingerprintPieces];
    for (int k = 0; k < kFingerprintPieces; ++k) {
      piece[k] = static_cast<double>((call >> (13 * k)) & 0x1fff);
      agree[2 + k] = piece[k];
      agree[2 + kFingerprintPieces + k] = piece[k] * piece[k];
    }
    if (inline_sum)
      for (size_t i = 0; i < n; ++i) agree[kAgreeHead + i] = data[i];
    const double t0 = inline_sum ? NowSeconds() : 0;
    {
      // Waits for the slowest rank to reach this bucket.
      trace::Span wait("agree", trace::Category::kWait);
      if (inline_sum) wait.With("inline", static_cast<int64_t>(n));
      comm_.HostAllReduce(agree, kAgreeWords, ReduceOp::kSum);
    }
    // Every rank's pieces equal its own exactly when every rank's do (sums of small integers are
    // exact): a rank passes only where the sum is P x and the sum of squares P x^2, i.e. where the
    // pieces' variance over the ranks is 0. So every rank reaches the same verdict.
    const double ranks = comm_.Size();
    bool same_call = true;
    for (int k = 0; k < kFingerprintPieces; ++k)
      same_call = same_call && agree[2 + k] == ranks * piece[k] &&
                  agree[2 + kFingerprintPieces + k] == ranks * piece[k] * piece[k];
    const bool any_nonfinite = agree[0] > 0, any_state_size = agree[1] > 0;
    const bool plain = config_.propagate_nonfinite && same_call && any_nonfinite && !any_state_size;
    if (plain) ++nonfinite_;
    if (same_call && !any_state_size && (!any_nonfinite || plain) && inline_sum) {
      // The exchange was the call: each float's sum over the ranks, exact in fp64 on 2 ranks and
      // rounded once to fp32 (the bits of an fp32 sum; from 3 ranks one rounding, where the
      // transport rounds once per addition), a NaN/Inf summed as it would be (plain).
      trace::Span sum("inline native", trace::Category::kCompute);
      for (size_t i = 0; i < n; ++i) data[i] = static_cast<float>(agree[kAgreeHead + i]);
      if (average && comm_.Size() > 1) DivideBy(data, n, DType::kFloat32, comm_.Size());
      // Counted as the engine's call (the exchange, its wait for the slowest rank included); a plain
      // NaN/Inf sum is not, as the transport's plain sum below is not.
      if (!plain) engine_.CountNative(n, NowSeconds() - t0);
      return;
    }
    if (plain) {
      // Summed uncompressed: every rank sees the NaN/Inf; no residual or step takes it in.
      trace::Span plain_sum("nonfinite: plain sum", trace::Category::kComm);
      comm_.AllReduce(data, data, n, DType::kFloat32, average ? ReduceOp::kAvg : ReduceOp::kSum);
      return;
    }
    if (any_nonfinite || any_state_size || !same_call) FailTogether(bad, n, key_id, key_bucket, seq, average, state);
  } else if (bad) {
    throw InputError(fmt::format("tensor {} {}: its codec state was made for {} elements, not {} (nothing was reduced)",
                                 key_id, BucketName(key_bucket), state->count, n));
  }
  engine_.Run(data, n, &states_[{key_id, key_bucket}], average);
}

void Runtime::FailTogether(uint32_t bad, size_t n, uint64_t key_id, uint64_t key_bucket, uint64_t seq, bool average,
                           const CodecState* state) {
  // Every rank comes here (the verdict was agreed), so this gather cannot hang; all ranks throw the
  // same message, built from rank 0's view of the call.
  const CallVote mine{bad, average ? 1u : 0u, seq, key_id, key_bucket, n, config_digest_, state ? state->count : 0};
  std::vector<CallVote> all(static_cast<size_t>(comm_.Size()));
  comm_.HostAllGather(&mine, all.data(), sizeof mine);
  const CallVote& ref = all[0];
  std::vector<int> non_finite, state_size, config, call;
  for (int r = 0; r < comm_.Size(); ++r) {
    const CallVote& v = all[static_cast<size_t>(r)];
    if (v.bad & kNonFinite) non_finite.push_back(r);
    if (v.bad & kStateSize) state_size.push_back(r);
    if (v.config != ref.config) config.push_back(r);
    if (v.seq != ref.seq || v.id != ref.id || v.bucket != ref.bucket || v.n != ref.n || v.average != ref.average)
      call.push_back(r);
  }
  const std::string what = fmt::format("tensor {} {}", ref.id, BucketName(ref.bucket));
  std::vector<std::string> parts;
  if (!config.empty())
    parts.push_back(
        fmt::format("{} run another codec, algorithm, precision or bucket size than rank 0", RankList(config)));
  if (!call.empty()) {
    const CallVote& v = all[static_cast<size_t>(call[0])];
    parts.push_back(fmt::format(
        "call {} differs across ranks: rank 0 reduces {} ({} elements{}), rank {} tensor {} {} "
        "({} elements{}) as its call {}{}; every rank must make the same calls in order",
        ref.seq, what, ref.n, ref.average ? ", averaged" : "", call[0], v.id, BucketName(v.bucket), v.n,
        v.average ? ", averaged" : "", v.seq, call.size() > 1 ? fmt::format(" (also {})", RankList(call)) : ""));
  }
  if (!state_size.empty()) {
    const CallVote& v = all[static_cast<size_t>(state_size[0])];
    parts.push_back(
        fmt::format("the codec state of tensor {} {} on {} was made for {} elements, not {} (a state "
                    "file of another model?)",
                    v.id, BucketName(v.bucket), RankList(state_size), v.state_count, v.n));
  }
  if (!non_finite.empty())
    parts.push_back(fmt::format("{}: a gradient holds NaN or Inf on {}", what, RankList(non_finite)));
  const std::string message = fmt::format("{} (nothing was reduced on any rank)", fmt::join(parts, "; "));
  if (!config.empty() || !call.empty()) throw UsageError(message);
  throw InputError(message);
}

void Runtime::AllReduce(float* data, size_t n, uint64_t tensor_id, bool average) {
  const trace::Bind bind(trace_ ? trace_.get() : trace::Current());
  trace::Span span("allreduce", trace::Category::kPhase);
  span.With("tensor", static_cast<int64_t>(tensor_id)).With("bytes", static_cast<int64_t>(n * 4));
  const size_t per = std::max<size_t>(config_.bucket_bytes / 4, 1);
  for (size_t b = 0, i = 0; b < n; b += per, ++i) Reduce(data + b, std::min(per, n - b), tensor_id, i, average);
}

void Runtime::AllReduceTensors(const std::vector<TensorRef>& tensors, const std::vector<uint64_t>& ids, bool average) {
  if (ids.size() != tensors.size()) throw UsageError("AllReduceTensors: one id per tensor");
  const trace::Bind bind(trace_ ? trace_.get() : trace::Current());
  trace::Span span("allreduce tensors", trace::Category::kPhase);
  span.With("tensors", static_cast<int64_t>(tensors.size()));
  const size_t per = std::max<size_t>(config_.bucket_bytes / 4, 1);
  size_t first = 0;
  while (first < tensors.size()) {
    // A bucket: consecutive tensors up to `per` elements (a larger tensor goes alone, split by AllReduce).
    size_t last = first, count = 0;
    while (last < tensors.size() && (last == first || count + tensors[last].count <= per))
      count += tensors[last++].count;
    if (last == first + 1) {
      AllReduce(tensors[first].data, tensors[first].count, ids[first], average);
    } else {
      if (bucket_.bytes() < count * 4 || bucket_.kind() != comm_.BufferKind())
        bucket_ = Buffer(count * 4, comm_.BufferKind());
      {
        trace::Span flatten("flatten", trace::Category::kCompute);
        flatten.With("tensors", static_cast<int64_t>(last - first)).With("bytes", static_cast<int64_t>(count * 4));
        FlattenTensors(tensors.data() + first, static_cast<int>(last - first), bucket_.as<float>(), comm_.Stream());
      }
      // The bucket's state is keyed by its first tensor's id and its composition (tensor count).
      Reduce(bucket_.as<float>(), count, ids[first], (uint64_t{1} << 63) | (last - first), average);
      trace::Span unflatten("unflatten", trace::Category::kCompute);
      unflatten.With("tensors", static_cast<int64_t>(last - first)).With("bytes", static_cast<int64_t>(count * 4));
      UnflattenTensors(bucket_.as<float>(), tensors.data() + first, static_cast<int>(last - first), comm_.Stream());
    }
    first = last;
  }
  trace::Span sync("synchronize", trace::Category::kWait);
  comm_.Synchronize();
}

Runtime::~Runtime() {
  if (!trace_) return;
  try {
    FlushTrace();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ciuic runtime: rank %d: trace not written: %s\n", comm_.Rank(), e.what());
  }
  if (gpu_trace_) trace::StopGpuCollection();
}

void Runtime::SetTrace(const std::string& path) {
  if (trace_ && path == trace_path_) return;
  if (!path.empty()) CheckWritableOutput(path, "trace file");
  if (trace_) FlushTrace();
  if (gpu_trace_) trace::StopGpuCollection();
  gpu_trace_ = false;
  trace_.reset();
  trace_path_.clear();
  trace_written_ = 0;
  if (path.empty()) return;
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  trace_ = std::make_unique<trace::Recorder>(comm_.Rank(), fmt::format("rank {} ({})", comm_.Rank(), host));
  trace_path_ = path;
  if (comm_.Device() == DeviceKind::kCuda) {
    const std::string why = trace::StartGpuCollection();
    gpu_trace_ = why.empty();
    trace_->SetNote("gpu", gpu_trace_ ? "CUPTI activity records" : "not collected: " + why);
  }
}

void Runtime::FlushTrace() {
  if (!trace_ || trace_->size() + trace_->dropped() == trace_written_) return;
  const Armed armed(watchdog_.get(), [&] { return fmt::format("writing the trace '{}'", ShownPath(trace_path_)); });
  nlohmann::json other;
  other["tool"] = "libciuic";
  other["version"] = CIUIC_VERSION;
  other["commit"] = CIUIC_GIT_COMMIT;
  other["codec"] = engine_.codec().Name();
  other["algo"] = AlgoName(engine_.algo());
  other["bucket_bytes"] = config_.bucket_bytes;
  const size_t events = trace_->size() + trace_->dropped();
  const auto lines = WriteTrace(comm_, *trace_, trace_path_, other);
  trace_written_ = events;
  if (comm_.Rank() != 0) return;
  std::fprintf(stderr, "ciuic runtime: wrote trace %s (load it in https://ui.perfetto.dev)\n",
               ShownPath(trace_path_).c_str());
  for (const auto& line : lines) std::fprintf(stderr, "ciuic runtime: trace %s\n", line.c_str());
}

void Runtime::Write(std::ostream& stream) const {
  WriteStateFile(stream, {comm_.Size(), comm_.Rank(), engine_.codec().Name()}, states_);
}

void Runtime::Save(const std::string& path) const {
  const std::string tmp = fmt::format("{}.tmp.{}.{}", path, getpid(), comm_.Rank());
  try {
    std::ofstream out(tmp, std::ios::binary);
    if (!out) throw InputError(fmt::format("cannot write state file '{}'", ShownPath(tmp)));
    Write(out);
    out.close();
    if (!out) throw RuntimeError(fmt::format("cannot write state file '{}'", ShownPath(tmp)));
  } catch (...) {
    std::error_code ignored;
    std::filesystem::remove(tmp, ignored);
    throw;
  }
  // fsync'd, renamed over the old file, the folder fsync'd: a crash keeps the old state or the new one.
  CommitFileDurably(tmp, path, fmt::format("state file '{}'", ShownPath(path)));
}

Runtime::StateMap Runtime::Parse(std::istream& in, uint64_t size, const std::string& name) const {
  BoundedReader reader(in, size, fmt::format("state file '{}'", name));
  const auto shape = [this](uint64_t count) {
    const AllReduceEngine::StateShape s = engine_.ShapeOf(count);
    return StateBufferShape{s.residual, s.server_residual, s.q};
  };
  return ReadStateFile(reader, name,
                       {{comm_.Size(), comm_.Rank(), engine_.codec().Name()},
                        AlgoName(engine_.algo()),
                        BucketElems(),
                        shape,
                        comm_.BufferKind()});
}

uint64_t Runtime::DigestOf(const StateMap& states) { return StateDigest(states); }

void AgreeOnLoad(Communicator& comm, int status, uint64_t digest, const std::string& error,
                 const std::string& shown_path) {
  LoadVote mine{};
  mine.status = static_cast<uint32_t>(status);
  mine.digest = digest;
  error.copy(mine.message, sizeof mine.message - 1);
  // Nobody commits before everybody has read a good file: a rank that refused alone would leave its
  // peers waiting in the next allreduce with a state it does not have.
  std::vector<LoadVote> votes(static_cast<size_t>(comm.Size()));
  comm.HostAllGather(&mine, votes.data(), sizeof mine);
  std::vector<int> failed, differ;
  bool runtime = false;
  for (int r = 0; r < comm.Size(); ++r) {
    const LoadVote& v = votes[static_cast<size_t>(r)];
    if (v.status != 0) failed.push_back(r);
    if (v.status == 2) runtime = true;
    if (v.digest != votes[0].digest) differ.push_back(r);
  }
  if (!failed.empty()) {
    if (comm.Size() == 1) {
      if (runtime) throw RuntimeError(error);
      throw InputError(error);
    }
    std::vector<std::string> details;
    for (int r : failed) {
      if (details.size() == 4) {
        details.push_back(fmt::format("{} more", failed.size() - 4));
        break;
      }
      const char* m = votes[static_cast<size_t>(r)].message;
      details.push_back(
          fmt::format("rank {}: {}", r, r == comm.Rank() ? error : std::string(m, strnlen(m, sizeof mine.message))));
    }
    const std::string message =
        fmt::format("loading error-feedback state failed on {} of {}, so no rank loaded any: {}", RankList(failed),
                    comm.Size(), fmt::join(details, "; "));
    if (runtime) throw RuntimeError(message);
    throw InputError(message);
  }
  if (!differ.empty())
    throw InputError(
        fmt::format("state files disagree across ranks: {} hold other tensors, element counts or steps "
                    "than rank 0 (this rank read '{}'), so no rank loaded any: files of different "
                    "checkpoints?",
                    RankList(differ), ShownPath(shown_path)));
}

void Runtime::Load(const std::string& path) {
  const Armed armed(watchdog_.get(),
                    [&] { return fmt::format("loading state file '{}' (the ranks' agreement)", ShownPath(path)); });
  int status = 0;
  uint64_t digest = 0;
  std::string error;
  StateMap loaded;
  try {
    const std::string shown = ShownPath(path);
    StateFileIn file(path, shown);
    loaded = Parse(file.in, file.size, shown);
    digest = StateDigest(loaded);
  } catch (const InputError& e) {
    status = 1;
    error = e.what();
  } catch (const std::exception& e) {
    status = 2;
    error = fmt::format("state file '{}': {}", ShownPath(path), e.what());
  }
  AgreeOnLoad(comm_, status, digest, error, path);
  states_ = std::move(loaded);
}

std::vector<float> Runtime::Residual(uint64_t tensor_id, size_t n) const {
  std::vector<float> out(n, 0.0f);
  const size_t per = BucketElems();
  for (size_t b = 0, i = 0; b < n; b += per, ++i) {
    const auto it = states_.find({tensor_id, i});
    const size_t m = std::min(per, n - b);
    if (it == states_.end() || it->second.count != m || it->second.residual.bytes() < m * 4) continue;
    CopyBytes(out.data() + b, MemoryKind::kHost, it->second.residual.data(), it->second.residual.kind(), m * 4,
              comm_.Stream());
  }
  return out;
}

bool Runtime::SetResidual(uint64_t tensor_id, size_t n, const float* values) {
  for (size_t i = 0; i < n; ++i)
    if (!std::isfinite(values[i]))
      throw InputError(
          fmt::format("residual[{}] of tensor {} is {}: error feedback must be finite", i, tensor_id, values[i]));
  const size_t per = BucketElems();
  if (n == 0 || engine_.ShapeOf(std::min(per, n)).residual == 0) return false;
  for (size_t b = 0, i = 0; b < n; b += per, ++i) {
    const size_t m = std::min(per, n - b);
    CodecState& st = states_[{tensor_id, i}];
    if (st.count != 0 && st.count != m) st = CodecState();  // a state of another size: replaced
    st.count = m;
    if (st.residual.bytes() < m * 4 || st.residual.kind() != comm_.BufferKind())
      st.residual = Buffer(std::max<size_t>(m, 1) * 4, comm_.BufferKind());
    CopyBytes(st.residual.data(), st.residual.kind(), values + b, MemoryKind::kHost, m * 4, comm_.Stream());
  }
  return true;
}

void Runtime::Forget(uint64_t tensor_id) {
  states_.erase(states_.lower_bound({tensor_id, 0}), states_.upper_bound({tensor_id, UINT64_MAX}));
}

}  // namespace ciuic
