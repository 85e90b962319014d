// CPU top-k (exact: nth_element; sampled: strided-sample threshold), randomk and the sparse decode.
// The oracle for kernels/cuda/sparse.cu: same selection rule, same wire, bit for bit.
#include <algorithm>
#include <cstring>
#include <functional>
#include <vector>

#include "kernels/codec_kernels.h"
#include "kernels/quant_math.h"

namespace ciuic::cpu {

namespace {
constexpr uint32_t kAbsMask = 0x7fffffffu;

void StoreValue(uint8_t* wire, size_t slot, float v) { std::memcpy(wire + slot * 4, &v, 4); }
void StoreIndex(uint8_t* wire, size_t k, size_t slot, int32_t i) { std::memcpy(wire + k * 4 + slot * 4, &i, 4); }
}  // namespace

void TopKEncode(const float* in, float* residual, size_t n, size_t k, bool sampled, uint8_t* wire, void*,
                uint32_t* nonfinite, void*) {
  if (n == 0 || k == 0) return;
  k = std::min(k, n);
  std::vector<float> e(in, in + n);
  if (residual)
    for (size_t i = 0; i < n; ++i) e[i] = e[i] + residual[i];
  std::vector<uint32_t> keys(n);
  uint32_t amax = 0;
  for (size_t i = 0; i < n; ++i) {
    keys[i] = qm::Bits(e[i]) & kAbsMask;
    amax = std::max(amax, keys[i]);
  }
  if (amax >= 0x7f800000u && nonfinite) *nonfinite = 1;

  // Threshold T and how many elements equal to T may be taken (lowest indices first).
  uint32_t threshold;
  size_t take_equal;
  if (!sampled) {
    std::vector<uint32_t> sorted = keys;
    std::nth_element(sorted.begin(), sorted.begin() + static_cast<ptrdiff_t>(k - 1), sorted.end(),
                     std::greater<uint32_t>());
    threshold = sorted[k - 1];
    const size_t greater = static_cast<size_t>(std::count_if(keys.begin(), keys.end(), [&](uint32_t x) {
      return x > threshold;
    }));
    take_equal = k - greater;
  } else {
    const uint64_t s = qm::TopKSampleCount(n);
    std::vector<uint32_t> sample(s);
    for (uint64_t j = 0; j < s; ++j) sample[j] = keys[qm::TopKSampleIndex(j, n, s)];
    const uint64_t rank = qm::TopKSampleRank(s, n, k);
    std::nth_element(sample.begin(), sample.begin() + static_cast<ptrdiff_t>(rank - 1), sample.end(),
                     std::greater<uint32_t>());
    threshold = sample[rank - 1];
    take_equal = n;
  }
  size_t slot = 0, equal_taken = 0;
  for (size_t i = 0; i < n; ++i) {
    bool take = keys[i] > threshold;
    if (!take && keys[i] == threshold && equal_taken < take_equal) {
      take = true;
      ++equal_taken;
    }
    if (take && slot < k) {
      StoreValue(wire, slot, e[i]);
      StoreIndex(wire, k, slot, static_cast<int32_t>(i));
      ++slot;
      if (residual) residual[i] = 0.0f;
    } else if (residual) {
      residual[i] = e[i];
    }
  }
  for (; slot < k; ++slot) {
    StoreValue(wire, slot, 0.0f);
    StoreIndex(wire, k, slot, -1);
  }
}

void SparseDecode(const uint8_t* wire, size_t k, size_t n, float* out, bool accumulate, void*) {
  if (!accumulate) std::fill(out, out + n, 0.0f);
  for (size_t s = 0; s < k; ++s) {
    int32_t i;
    float v;
    std::memcpy(&i, wire + k * 4 + s * 4, 4);
    std::memcpy(&v, wire + s * 4, 4);
    if (i >= 0 && static_cast<size_t>(i) < n) out[i] = out[i] + v;
  }
}

void RandomKEncode(const QuantArgs& a, const float* in, float* residual, size_t n, size_t k, uint8_t* wire,
                   uint32_t* nonfinite, void*) {
  if (n == 0 || k == 0) return;
  bool bad = false;
  size_t next = 0;  // slots are ascending: walk the elements once
  for (size_t j = 0; j < k; ++j) {
    const uint64_t idx = qm::RandomKIndex(a.seed, a.step, j, n, k);
    if (residual) {
      for (; next < idx; ++next) residual[next] = in[next] + residual[next];
    }
    const float e = residual ? in[idx] + residual[idx] : in[idx];
    bad |= (qm::Bits(e) & kAbsMask) >= 0x7f800000u;
    StoreValue(wire, j, e);
    if (residual) residual[idx] = 0.0f;
    next = idx + 1;
  }
  if (residual)
    for (; next < n; ++next) residual[next] = in[next] + residual[next];
  if (bad && nonfinite) *nonfinite = 1;
}

void RandomKDecode(const QuantArgs& a, const uint8_t* wire, size_t k, size_t n, float* out, bool accumulate, void*) {
  if (!accumulate) std::fill(out, out + n, 0.0f);
  for (size_t j = 0; j < k; ++j) {
    const uint64_t idx = qm::RandomKIndex(a.seed, a.step, j, n, k);
    float v;
    std::memcpy(&v, wire + j * 4, 4);
    out[idx] = out[idx] + v;
  }
}

}  // namespace ciuic::cpu
