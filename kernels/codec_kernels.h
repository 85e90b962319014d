#pragma once
// The codec and fused-kernel entry points. Each exists three times with this one signature:
// ciuic::cpu:: (plain C++, the fallback and the test oracle), ciuic::cuda:: (the twin, in kernels/cuda/)
// and ciuic:: (kernels/dispatch.cc: picks by where the buffers live). Pointers passed together live in
// the same memory (host, or the current CUDA device); `stream` is a cudaStream_t (nullptr: default).
//
// Wire layouts (n elements, B = block, nb = ceil(n / B)):
//   cast fp16/bf16     n × 2 B
//   fp8 / int8         nb fp32 scales, then n × 1 B
//   int4               nb fp32 scales, then ceil(n / 2) B (element 2j in the low nibble of byte j)
//   sign1              nb fp32 scales, then ceil(n / 8) B (element 8j+b in bit b of byte j; 1 = negative)
//   topk               k fp32 values, then k int32 indices (ascending; -1 = unused slot)
//   randomk            k fp32 values (indices derive from seed and step)
//   powersgd           P (rows × r fp32), then Q (cols × r fp32), column-major
// A block whose input holds NaN/Inf is written with a NaN scale (it decodes to NaN, never to finite
// garbage), its residual is left as it was, and *nonfinite becomes non-zero.
#include <cstddef>
#include <cstdint>

#include "kernels/codec_spec.h"

namespace ciuic {

// Parameters every per-element codec kernel needs.
struct QuantArgs {
  CodecKind kind = CodecKind::kInt8;
  uint32_t block = 256;
  bool stochastic = false;
  uint64_t seed = 0;
  uint64_t step = 0;      // stochastic rounding and randomk draw fresh numbers per step
  float prescale = 1.0f;  // casts: encode x × prescale, decode ÷ prescale
};

size_t ScaleBlocks(size_t n, uint32_t block);
// Wire bytes of the element codecs (casts, block-scaled, sign1).
size_t QuantWireBytes(const QuantArgs& a, size_t n);
// Element count k kept by topk/randomk at this ratio (at least 1 for n > 0).
size_t SparseCount(size_t n, double ratio);
// PowerSGD's matrix view of a flat bucket: cols = ceil(sqrt(n)), rows = ceil(n / cols), zero-padded.
struct MatrixView {
  size_t rows, cols;
};
MatrixView PowerSgdView(size_t n);

struct TensorRef {
  float* data;
  size_t count;
};

#define CIUIC_KERNEL_API                                                                                               \
  /* (a) e = in (+ residual); quantise + pack e; residual = e - decode(e). residual may be null. */                    \
  void QuantEncode(const QuantArgs& a, const float* in, float* residual, size_t n, uint8_t* wire, uint32_t* nonfinite, \
                   void* stream);                                                                                      \
  /* (b) out = decode(wire), or out += decode(wire) when accumulate. */                                                \
  void QuantDecode(const QuantArgs& a, const uint8_t* wire, size_t n, float* out, bool accumulate, void* stream);      \
  /* (c) wire_out = encode(decode(wire_in) + local): one hop of a compressed reduce-scatter. */                        \
  void QuantDecodeAddEncode(const QuantArgs& a, const uint8_t* wire_in, const float* local, size_t n,                  \
                            uint8_t* wire_out, uint32_t* nonfinite, void* stream);                                     \
  /* topk: the k largest |e| (ties: lower index), or with `sampled` those above a threshold estimated from */          \
  /* a strided sample (first k in index order). workspace: TopKWorkspaceBytes(n) bytes. */                             \
  void TopKEncode(const float* in, float* residual, size_t n, size_t k, bool sampled, uint8_t* wire, void* workspace,  \
                  uint32_t* nonfinite, void* stream);                                                                  \
  void SparseDecode(const uint8_t* wire, size_t k, size_t n, float* out, bool accumulate, void* stream);               \
  void RandomKEncode(const QuantArgs& a, const float* in, float* residual, size_t n, size_t k, uint8_t* wire,          \
                     uint32_t* nonfinite, void* stream);                                                               \
  void RandomKDecode(const QuantArgs& a, const uint8_t* wire, size_t k, size_t n, float* out, bool accumulate,         \
                     void* stream);                                                                                    \
  /* PowerSGD primitives over the matrix view M (rows × cols, row-major, zero-padded past n). */                      \
  /* p = M q (q: cols × r); q = Mᵀ p; Orthonormalise p's r columns (modified Gram-Schmidt); */                      \
  /* out (+)= p qᵀ restricted to n elements. */                                                                      \
  void PowerSgdMulQ(const float* m, size_t n, const float* q, int r, float* p, void* stream);                          \
  void PowerSgdMulP(const float* m, size_t n, const float* p, int r, float* q, void* stream);                          \
  void PowerSgdOrthonormalize(float* p, size_t rows, int r, void* stream);                                             \
  void PowerSgdReconstruct(const float* p, const float* q, size_t n, int r, float* out, bool accumulate,               \
                           void* stream);                                                                              \
  /* (d) copy `count` tensors into one bucket back to back, or the bucket back into them: one launch. */               \
  void FlattenTensors(const TensorRef* tensors, int count, float* bucket, void* stream);                               \
  void UnflattenTensors(const float* bucket, const TensorRef* tensors, int count, void* stream);                       \
  /* (e) g *= inv_scale; *nonfinite set on NaN/Inf; *norm_sq = Σ g² (fp64, after unscaling). */                      \
  void UnscaleCheckNorm(float* g, size_t n, float inv_scale, uint32_t* nonfinite, double* norm_sq, void* stream);      \
  void ScaleInPlace(float* g, size_t n, float factor, void* stream);                                                   \
  void AddInPlace(float* acc, const float* x, size_t n, void* stream);                                                 \
  /* out = a + x: AddInPlace out of place (the same sums, bit for bit), one pass. */                                   \
  void AddTo(float* out, const float* a, const float* x, size_t n, void* stream);                                      \
  /* AddTo (the same bits) whose stores bypass the caches (streaming stores; on a GPU AddTo itself): */                \
  /* for a result larger than the caches that nothing reads soon, it saves reading `out` before writing it. */         \
  void AddToUncached(float* out, const float* a, const float* x, size_t n, void* stream);

size_t TopKWorkspaceBytes(size_t n);

namespace cpu {
CIUIC_KERNEL_API
}
namespace cuda {
CIUIC_KERNEL_API
// True when a CUDA device is usable in this process (false in builds without CUDA).
bool Available();
}  // namespace cuda
CIUIC_KERNEL_API

// Where a pointer lives: true for CUDA device (or managed) memory.
bool IsDevicePointer(const void* p);

}  // namespace ciuic
