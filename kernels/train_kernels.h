#pragma once
// Training-side kernels: LayerNorm + activation + dropout, bias + activation (a linear layer's
// epilogue) and residual add + LayerNorm, each fused into one pass, forward and backward, beside the
// single-op kernels an unfused framework runs in their place (so `ciuic-bench kernel` can time both).
// Same pattern as codec_kernels.h: ciuic::cpu:: (plain C++, fallback and oracle, kernels/cpu/train.cc),
// ciuic::cuda:: (the twin, kernels/cuda/train.cu) and ciuic:: (kernels/dispatch.cc picks by where x lives).
//
// Tensors are row-major rows × cols (tokens × hidden). x, y, dy, dx, residual and sum are `dtype`
// (kFloat32, kFloat16 or kBFloat16); gamma, beta, bias, their gradients, mean and rstd are fp32; all
// arithmetic is fp32 (element math: kernels/train_math.h). LayerNorm: y = (x - mean) · rstd · gamma +
// beta, rstd = 1 / sqrt(var + eps), var the biased (1/cols) variance, both from two passes over the row.
//
// Fixed summation orders, so the twins agree bit for bit and a result never depends on the thread
// count: a row sum adds element j into lane j % 32 in index order, then combines the lanes as
// qm::CombineLanes (a CUDA warp per row does exactly this with shuffles); a column gradient (dgamma,
// dbeta, dbias) adds rows in chunks of kGradRowChunk in row order, then the chunk partials in chunk order.
//
// Fused LnActDropout is y = dropout(act(LayerNorm(x))): LayerNorm, then the activation, then dropout,
// the order of a transformer's activation dropout. Its backward rebuilds LayerNorm's output from x,
// mean and rstd, and the dropout mask from (seed, offset): nothing but mean and rstd is kept between.
// Unfused, the same sequence is LayerNormForward, BiasActForward (bias null), Dropout, each writing its
// result in `dtype`; in fp32 the two give identical bits (tests assert it).
#include <cstddef>
#include <cstdint>

#include "core/buffer.h"
#include "core/dtype.h"
#include "kernels/train_math.h"

namespace ciuic {

using Activation = tm::Act;
using DropoutArgs = tm::DropoutArgs;

// Rows per column-gradient chunk (see above).
constexpr size_t kGradRowChunk = 32;
// Bytes of the workspace the backward kernels take where the tensors live: two fp32 partial rows (cols
// each) per chunk; on a device then rows × cols fp32 and two fp32 per row (the CUDA LayerNorm backward
// with an activation or dropout keeps dz there instead of computing it in each of its passes; a CUDA
// backward given no workspace, no dgamma/dbeta asked for, recomputes dz per pass). The CPU kernels use
// the partials only. A device backward given a host-sized workspace writes past it: size for kDevice.
size_t TrainWorkspaceBytes(size_t rows, size_t cols, MemoryKind where);

// "none", "relu", "gelu" (erf form, PyTorch's default), "gelu-tanh". Throws UsageError.
Activation ParseActivation(const char* name);
const char* ActivationName(Activation a);

#define CIUIC_TRAIN_KERNEL_API                                                                                         \
  /* ---- single ops ---- */                                                                                           \
  /* y = LayerNorm(x); mean, rstd: one fp32 per row (kept for the backward). */                                        \
  void LayerNormForward(DType t, size_t rows, size_t cols, const void* x, const float* gamma, const float* beta,       \
                        float eps, void* y, float* mean, float* rstd, void* stream);                                   \
  /* dx, dgamma, dbeta from dy and x. dgamma/dbeta may be null together (frozen affine). */                            \
  void LayerNormBackward(DType t, size_t rows, size_t cols, const void* dy, const void* x, const float* gamma,         \
                         const float* mean, const float* rstd, void* dx, float* dgamma, float* dbeta,                  \
                         float* workspace, void* stream);                                                              \
  /* y = act(x + bias); bias null: y = act(x). */                                                                      \
  void BiasActForward(DType t, size_t rows, size_t cols, Activation act, const void* x, const float* bias, void* y,    \
                      void* stream);                                                                                   \
  /* dx = dy · act'(x + bias); dbias (may be null) = column sums of dx (as fp32, before rounding). */                 \
  void BiasActBackward(DType t, size_t rows, size_t cols, Activation act, const void* dy, const void* x,               \
                       const float* bias, void* dx, float* dbias, float* workspace, void* stream);                     \
  /* y = x · mask · 1/(1-p): the forward, and the backward (dy in, dx out) with the same args. */                    \
  void Dropout(DType t, size_t n, const DropoutArgs& d, const void* x, void* y, void* stream);                         \
  /* out = a + b. */                                                                                                   \
  void AddTensors(DType t, size_t n, const void* a, const void* b, void* out, void* stream);                           \
  /* ---- fused ---- */                                                                                                \
  void LnActDropoutForward(DType t, size_t rows, size_t cols, Activation act, const DropoutArgs& d, const void* x,     \
                           const float* gamma, const float* beta, float eps, void* y, float* mean, float* rstd,        \
                           void* stream);                                                                              \
  void LnActDropoutBackward(DType t, size_t rows, size_t cols, Activation act, const DropoutArgs& d, const void* dy,   \
                            const void* x, const float* gamma, const float* beta, const float* mean,                   \
                            const float* rstd, void* dx, float* dgamma, float* dbeta, float* workspace, void* stream); \
  /* sum = x + residual (stored in dtype: the residual stream the next layer reads); y = LayerNorm(sum). */            \
  void AddLayerNormForward(DType t, size_t rows, size_t cols, const void* x, const void* residual, const float* gamma, \
                           const float* beta, float eps, void* sum, void* y, float* mean, float* rstd, void* stream);  \
  /* dx = LayerNorm's input gradient (+ dsum, the gradient reaching `sum` from later layers; may be null): */          \
  /* the gradient of both x and residual. */                                                                           \
  void AddLayerNormBackward(DType t, size_t rows, size_t cols, const void* dy, const void* dsum, const void* sum,      \
                            const float* gamma, const float* mean, const float* rstd, void* dx, float* dgamma,         \
                            float* dbeta, float* workspace, void* stream);

namespace cpu {
CIUIC_TRAIN_KERNEL_API
}
namespace cuda {
CIUIC_TRAIN_KERNEL_API
}
CIUIC_TRAIN_KERNEL_API

// The keep mask of Dropout over elements [0, n) (1: kept), on the host: for tests and for callers that
// apply the mask with another library's scaling (the PyTorch agreement test does).
void DropoutMask(const DropoutArgs& d, size_t n, uint8_t* keep);

}  // namespace ciuic
