// The one place that chooses between the CPU kernels and their CUDA twins: by where the buffers
// live. A build without CUDA has only the CPU side; device pointers cannot exist there.
#include "core/config.h"
#include "core/error.h"
#include "kernels/codec_kernels.h"
#include "kernels/train_kernels.h"

#if CIUIC_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace ciuic {

bool IsDevicePointer(const void* p) {
#if CIUIC_HAVE_CUDA
  if (p == nullptr) return false;
  // Without a visible device no pointer is one: asked once, not on every kernel call (a CPU job's
  // runtime dispatches several kernels per bucket).
  static const bool any_device = [] {
    int count = 0;
    const bool ok = cudaGetDeviceCount(&count) == cudaSuccess;
    if (!ok) cudaGetLastError();
    return ok && count > 0;
  }();
  if (!any_device) return false;
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
    cudaGetLastError();  // a host pointer unknown to CUDA: clear the sticky error, it is not one
    return false;
  }
  return attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged;
#else
  (void)p;
  return false;
#endif
}

#if CIUIC_HAVE_CUDA
#define CIUIC_DISPATCH(ptr, call) \
  do {                            \
    if (IsDevicePointer(ptr)) {   \
      cuda::call;                 \
    } else {                      \
      cpu::call;                  \
    }                             \
  } while (0)
#else
namespace cuda {
bool Available() { return false; }
}  // namespace cuda
#define CIUIC_DISPATCH(ptr, call) cpu::call
#endif

void QuantEncode(const QuantArgs& a, const float* in, float* residual, size_t n, uint8_t* wire, uint32_t* nonfinite,
                 void* stream) {
  CIUIC_DISPATCH(in, QuantEncode(a, in, residual, n, wire, nonfinite, stream));
}
void QuantDecode(const QuantArgs& a, const uint8_t* wire, size_t n, float* out, bool accumulate, void* stream) {
  CIUIC_DISPATCH(out, QuantDecode(a, wire, n, out, accumulate, stream));
}
void QuantDecodeAddEncode(const QuantArgs& a, const uint8_t* wire_in, const float* local, size_t n, uint8_t* wire_out,
                          uint32_t* nonfinite, void* stream) {
  CIUIC_DISPATCH(local, QuantDecodeAddEncode(a, wire_in, local, n, wire_out, nonfinite, stream));
}
void TopKEncode(const float* in, float* residual, size_t n, size_t k, bool sampled, uint8_t* wire, void* workspace,
                uint32_t* nonfinite, void* stream) {
  CIUIC_DISPATCH(in, TopKEncode(in, residual, n, k, sampled, wire, workspace, nonfinite, stream));
}
void SparseDecode(const uint8_t* wire, size_t k, size_t n, float* out, bool accumulate, void* stream) {
  CIUIC_DISPATCH(out, SparseDecode(wire, k, n, out, accumulate, stream));
}
void RandomKEncode(const QuantArgs& a, const float* in, float* residual, size_t n, size_t k, uint8_t* wire,
                   uint32_t* nonfinite, void* stream) {
  CIUIC_DISPATCH(in, RandomKEncode(a, in, residual, n, k, wire, nonfinite, stream));
}
void RandomKDecode(const QuantArgs& a, const uint8_t* wire, size_t k, size_t n, float* out, bool accumulate,
                   void* stream) {
  CIUIC_DISPATCH(out, RandomKDecode(a, wire, k, n, out, accumulate, stream));
}
void PowerSgdMulQ(const float* m, size_t n, const float* q, int r, float* p, void* stream) {
  CIUIC_DISPATCH(m, PowerSgdMulQ(m, n, q, r, p, stream));
}
void PowerSgdMulP(const float* m, size_t n, const float* p, int r, float* q, void* stream) {
  CIUIC_DISPATCH(m, PowerSgdMulP(m, n, p, r, q, stream));
}
void PowerSgdOrthonormalize(float* p, size_t rows, int r, void* stream) {
  CIUIC_DISPATCH(p, PowerSgdOrthonormalize(p, rows, r, stream));
}
void PowerSgdReconstruct(const float* p, const float* q, size_t n, int r, float* out, bool accumulate, void* stream) {
  CIUIC_DISPATCH(out, PowerSgdReconstruct(p, q, n, r, out, accumulate, stream));
}
void FlattenTensors(const TensorRef* tensors, int count, float* bucket, void* stream) {
  CIUIC_DISPATCH(bucket, FlattenTensors(tensors, count, bucket, stream));
}
void UnflattenTensors(const float* bucket, const TensorRef* tensors, int count, void* stream) {
  CIUIC_DISPATCH(bucket, UnflattenTensors(bucket, tensors, count, stream));
}
void UnscaleCheckNorm(float* g, size_t n, float inv_scale, uint32_t* nonfinite, double* norm_sq, void* stream) {
  CIUIC_DISPATCH(g, UnscaleCheckNorm(g, n, inv_scale, nonfinite, norm_sq, stream));
}
void ScaleInPlace(float* g, size_t n, float factor, void* stream) {
  CIUIC_DISPATCH(g, ScaleInPlace(g, n, factor, stream));
}
void AddInPlace(float* acc, const float* x, size_t n, void* stream) {
  CIUIC_DISPATCH(acc, AddInPlace(acc, x, n, stream));
}
void AddTo(float* out, const float* a, const float* x, size_t n, void* stream) {
  CIUIC_DISPATCH(out, AddTo(out, a, x, n, stream));
}
void AddToUncached(float* out, const float* a, const float* x, size_t n, void* stream) {
  CIUIC_DISPATCH(out, AddToUncached(out, a, x, n, stream));
}

}  // namespace ciuic

// ---- training kernels (kernels/train_kernels.h): by where x (forward) or dy (backward) lives ----
namespace ciuic {

namespace {
// p outside [0, 1] (or NaN) would scale by 1/(1-p) in one path and mean "no dropout" in another.
const DropoutArgs& CheckDropout(const DropoutArgs& d) {
  if (!(d.p >= 0.0f && d.p <= 1.0f)) throw UsageError("dropout p " + std::to_string(d.p) + " must be in [0, 1]");
  return d;
}
}  // namespace

void LayerNormForward(DType t, size_t rows, size_t cols, const void* x, const float* gamma, const float* beta,
                      float eps, void* y, float* mean, float* rstd, void* stream) {
  CIUIC_DISPATCH(x, LayerNormForward(t, rows, cols, x, gamma, beta, eps, y, mean, rstd, stream));
}
void LayerNormBackward(DType t, size_t rows, size_t cols, const void* dy, const void* x, const float* gamma,
                       const float* mean, const float* rstd, void* dx, float* dgamma, float* dbeta, float* workspace,
                       void* stream) {
  CIUIC_DISPATCH(dy, LayerNormBackward(t, rows, cols, dy, x, gamma, mean, rstd, dx, dgamma, dbeta, workspace, stream));
}
void BiasActForward(DType t, size_t rows, size_t cols, Activation act, const void* x, const float* bias, void* y,
                    void* stream) {
  CIUIC_DISPATCH(x, BiasActForward(t, rows, cols, act, x, bias, y, stream));
}
void BiasActBackward(DType t, size_t rows, size_t cols, Activation act, const void* dy, const void* x,
                     const float* bias, void* dx, float* dbias, float* workspace, void* stream) {
  CIUIC_DISPATCH(dy, BiasActBackward(t, rows, cols, act, dy, x, bias, dx, dbias, workspace, stream));
}
void Dropout(DType t, size_t n, const DropoutArgs& d, const void* x, void* y, void* stream) {
  CIUIC_DISPATCH(x, Dropout(t, n, CheckDropout(d), x, y, stream));
}
void AddTensors(DType t, size_t n, const void* a, const void* b, void* out, void* stream) {
  CIUIC_DISPATCH(a, AddTensors(t, n, a, b, out, stream));
}
void LnActDropoutForward(DType t, size_t rows, size_t cols, Activation act, const DropoutArgs& d, const void* x,
                         const float* gamma, const float* beta, float eps, void* y, float* mean, float* rstd,
                         void* stream) {
  CIUIC_DISPATCH(x,
                 LnActDropoutForward(t, rows, cols, act, CheckDropout(d), x, gamma, beta, eps, y, mean, rstd, stream));
}
void LnActDropoutBackward(DType t, size_t rows, size_t cols, Activation act, const DropoutArgs& d, const void* dy,
                          const void* x, const float* gamma, const float* beta, const float* mean, const float* rstd,
                          void* dx, float* dgamma, float* dbeta, float* workspace, void* stream) {
  CIUIC_DISPATCH(dy, LnActDropoutBackward(t, rows, cols, act, CheckDropout(d), dy, x, gamma, beta, mean, rstd, dx,
                                          dgamma, dbeta, workspace, stream));
}
void AddLayerNormForward(DType t, size_t rows, size_t cols, const void* x, const void* residual, const float* gamma,
                         const float* beta, float eps, void* sum, void* y, float* mean, float* rstd, void* stream) {
  CIUIC_DISPATCH(x, AddLayerNormForward(t, rows, cols, x, residual, gamma, beta, eps, sum, y, mean, rstd, stream));
}
void AddLayerNormBackward(DType t, size_t rows, size_t cols, const void* dy, const void* dsum, const void* sum,
                          const float* gamma, const float* mean, const float* rstd, void* dx, float* dgamma,
                          float* dbeta, float* workspace, void* stream) {
  CIUIC_DISPATCH(
      dy, AddLayerNormBackward(t, rows, cols, dy, dsum, sum, gamma, mean, rstd, dx, dgamma, dbeta, workspace, stream));
}

}  // namespace ciuic
