#pragma once
// Codec: one gradient compressor behind the interface the runtime and the benchmarks use. It owns
// nothing per tensor; per-tensor state (error-feedback residual, PowerSGD's Q, the step counter) lives
// in a CodecState the caller keeps, keyed as it likes. Buffers passed to one call are all host or all
// device memory of the current GPU; the kernels run where they live (kernels/dispatch.cc).
//
// PowerSGD's view of a flat bucket: cols = ceil(sqrt(n)), rows = ceil(n / cols), row-major, zero
// padded; P = M·Q (rows × r), orthonormalise P, Q = Mᵀ·P (cols × r), M ≈ P·Qᵀ. Q starts from a
// seeded normal draw and is reused (warm start). Encode here does both halves on one rank; the
// runtime allreduces P and Q between the halves through the PowerSgd* kernels directly.
#include <cstddef>
#include <cstdint>

#include "core/buffer.h"
#include "kernels/codec_kernels.h"
#include "kernels/codec_spec.h"

namespace ciuic {

struct CodecState {
  Buffer residual;         // n floats where the codec keeps error feedback
  Buffer q;                // PowerSGD: cols × rank
  Buffer scratch;          // PowerSGD M; topk workspace
  Buffer flag;             // one uint32: non-zero after an input with NaN/Inf
  Buffer server_residual;  // two-phase sign1: the server side's error feedback for its chunk
  uint64_t step = 0;       // advanced by each Encode (stochastic rounding and randomk draw per step)
  size_t count = 0;        // tensor size the state was made for
};

class Codec {
 public:
  explicit Codec(const CodecSpec& spec);  // throws UsageError on a bad parameter

  const CodecSpec& spec() const { return spec_; }
  std::string Name() const { return CodecName(spec_); }
  // Exact bytes on the wire for n elements.
  size_t WireBytes(size_t n) const;
  // Whether payloads of several ranks can be summed as they are (casts; randomk's shared indices).
  bool Summable() const;
  // Whether Encode keeps per-tensor state (error feedback, warm start, a step counter). Without a
  // CodecState such a codec runs without error feedback at step 0.
  bool Stateful() const;
  // Whether DecodeAddEncode (the fused reduce-scatter hop) exists for this codec.
  bool HasDecodeAddEncode() const;

  // Compresses in[0, n) into wire (WireBytes(n) bytes). With a stateful codec `state` must be given;
  // its buffers are made on first use in the memory `in` lives in. Throws InputError when the input
  // (plus residual) holds NaN/Inf: casts and block codecs then leave the residual of the affected
  // elements/blocks as it was; topk, randomk and powersgd carry the NaN into it (reset the state).
  // check_finite = false skips the flag read-back (a device sync): the flag stays set in the state
  // and the next checked call reports it. Benchmarks time the unchecked form.
  void Encode(const float* in, size_t n, void* wire, CodecState* state, void* stream = nullptr,
              bool check_finite = true) const;
  // `step`: the state's step the wire was encoded at (randomk derives its indices from it).
  void Decode(const void* wire, size_t n, float* out, uint64_t step = 0, void* stream = nullptr) const;
  void DecodeAccumulate(const void* wire, size_t n, float* acc, uint64_t step = 0, void* stream = nullptr) const;
  // wire_out = encode(decode(wire_in) + local) in one pass (element codecs only).
  void DecodeAddEncode(const void* wire_in, const float* local, size_t n, void* wire_out, uint64_t step,
                       void* stream = nullptr) const;

  // Arguments of the element kernels for a given step.
  QuantArgs Args(uint64_t step) const;
  size_t SparseK(size_t n) const { return SparseCount(n, spec_.ratio); }

  // Makes the state's buffers for n elements in `kind` memory (first use; later calls check n).
  void Prepare(CodecState& state, size_t n, MemoryKind kind) const;
  // Throws InputError (and clears the flag) when the state's NaN/Inf flag is set.
  void CheckFlag(CodecState& state, void* stream = nullptr) const;

 private:
  CodecSpec spec_;
};

}  // namespace ciuic
