// CPU fused kernels (d) multi-tensor flatten/unflatten and (e) unscale + NaN/Inf check + norm.
#include <algorithm>
#include <cstdint>
#include <cstring>
#if defined(__SSE2__)
#include <immintrin.h>
#endif

#include "kernels/codec_kernels.h"
#include "kernels/quant_math.h"

namespace ciuic::cpu {

void FlattenTensors(const TensorRef* tensors, int count, float* bucket, void*) {
  size_t offset = 0;
  for (int t = 0; t < count; ++t) {
    std::memcpy(bucket + offset, tensors[t].data, tensors[t].count * sizeof(float));
    offset += tensors[t].count;
  }
}

void UnflattenTensors(const float* bucket, const TensorRef* tensors, int count, void*) {
  size_t offset = 0;
  for (int t = 0; t < count; ++t) {
    std::memcpy(tensors[t].data, bucket + offset, tensors[t].count * sizeof(float));
    offset += tensors[t].count;
  }
}

void UnscaleCheckNorm(float* g, size_t n, float inv_scale, uint32_t* nonfinite, double* norm_sq, void*) {
  if (inv_scale == 1.0f && !norm_sq) {
    // The check alone (the runtime's, per bucket): a read-only pass, the largest magnitude's bits
    // in vector lanes; nothing is written back.
    if (!nonfinite) return;
    uint32_t lane[8] = {};
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
      for (int l = 0; l < 8; ++l) lane[l] = std::max(lane[l], qm::Bits(g[i + l]) & 0x7fffffffu);
    uint32_t amax = 0;
    for (; i < n; ++i) amax = std::max(amax, qm::Bits(g[i]) & 0x7fffffffu);
    for (uint32_t v : lane) amax = std::max(amax, v);
    if (amax >= 0x7f800000u) *nonfinite = 1;
    return;
  }
  // Eight fp64 accumulators (element i into i % 8) keep the pass memory-bound instead of add-latency-bound.
  double acc[8] = {};
  uint32_t amax = 0;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int l = 0; l < 8; ++l) {
      const float x = g[i + l] * inv_scale;
      g[i + l] = x;
      amax = amax > (qm::Bits(x) & 0x7fffffffu) ? amax : (qm::Bits(x) & 0x7fffffffu);
      acc[l] += static_cast<double>(x) * x;
    }
  }
  for (; i < n; ++i) {
    const float x = g[i] * inv_scale;
    g[i] = x;
    amax = amax > (qm::Bits(x) & 0x7fffffffu) ? amax : (qm::Bits(x) & 0x7fffffffu);
    acc[0] += static_cast<double>(x) * x;
  }
  if (nonfinite && amax >= 0x7f800000u) *nonfinite = 1;
  if (norm_sq) *norm_sq = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

void ScaleInPlace(float* g, size_t n, float factor, void*) {
  for (size_t i = 0; i < n; ++i) g[i] = g[i] * factor;
}

void AddInPlace(float* acc, const float* x, size_t n, void*) {
  for (size_t i = 0; i < n; ++i) acc[i] = acc[i] + x[i];
}

void AddTo(float* out, const float* a, const float* x, size_t n, void*) {
  for (size_t i = 0; i < n; ++i) out[i] = a[i] + x[i];
}

void AddToUncached(float* out, const float* a, const float* x, size_t n, void*) {
  size_t i = 0;
#if defined(__SSE2__)
  // Streaming stores need 16-byte alignment: the head up to it goes through the cache.
  for (; i < n && (reinterpret_cast<uintptr_t>(out + i) & 15) != 0; ++i) out[i] = a[i] + x[i];
  for (; i + 16 <= n; i += 16) {
    _mm_stream_ps(out + i, _mm_add_ps(_mm_loadu_ps(a + i), _mm_loadu_ps(x + i)));
    _mm_stream_ps(out + i + 4, _mm_add_ps(_mm_loadu_ps(a + i + 4), _mm_loadu_ps(x + i + 4)));
    _mm_stream_ps(out + i + 8, _mm_add_ps(_mm_loadu_ps(a + i + 8), _mm_loadu_ps(x + i + 8)));
    _mm_stream_ps(out + i + 12, _mm_add_ps(_mm_loadu_ps(a + i + 12), _mm_loadu_ps(x + i + 12)));
  }
  _mm_sfence();  // the streamed lines are visible before whatever the caller does next (a send)
#endif
  for (; i < n; ++i) out[i] = a[i] + x[i];
}

}  // namespace ciuic::cpu
