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
  // e and its key |e| are recomputed where needed instead of stored: fresh n-sized arrays cost more in
  // page faults than the arithmetic. One reused buffer holds the keys nth_element partially sorts.
  auto value = [&](size_t i) { return residual ? in[i] + residual[i] : in[i]; };
  auto key = [&](size_t i) { return qm::Bits(value(i)) & kAbsMask; };
  thread_local std::vector<uint32_t> scratch;
  uint32_t threshold;
  size_t take_equal;
  if (!sampled) {
    scratch.resize(n);
    uint32_t amax = 0;
    for (size_t i = 0; i < n; ++i) {
      scratch[i] = key(i);
      amax = std::max(amax, scratch[i]);
    }
    if (amax >= 0x7f800000u && nonfinite) *nonfinite = 1;
    std::nth_element(scratch.begin(), scratch.begin() + static_cast<ptrdiff_t>(k - 1), scratch.begin() + n,
                     std::greater<uint32_t>());
    threshold = scratch[k - 1];
    // Keys above the threshold all lie in front of position k - 1 after nth_element.
    size_t greater = 0;
    for (size_t j = 0; j + 1 < k; ++j) greater += scratch[j] > threshold;
    take_equal = k - greater;
  } else {
    const uint64_t s = qm::TopKSampleCount(n);
    scratch.resize(s);
    for (uint64_t j = 0; j < s; ++j) scratch[j] = key(qm::TopKSampleIndex(j, n, s));
    const uint64_t rank = qm::TopKSampleRank(s, n, k);
    std::nth_element(scratch.begin(), scratch.begin() + static_cast<ptrdiff_t>(rank - 1), scratch.begin() + s,
                     std::greater<uint32_t>());
    threshold = scratch[rank - 1];
    take_equal = n;
  }
  size_t slot = 0, equal_taken = 0;
  uint32_t amax = 0;
  for (size_t i = 0; i < n; ++i) {
    const float e = value(i);
    const uint32_t kbits = qm::Bits(e) & kAbsMask;
    amax = std::max(amax, kbits);
    bool take = kbits > threshold;
    if (!take && kbits == threshold && equal_taken < take_equal) {
      take = true;
      ++equal_taken;
    }
    if (take && slot < k) {
      StoreValue(wire, slot, e);
      StoreIndex(wire, k, slot, static_cast<int32_t>(i));
      ++slot;
      if (residual) residual[i] = 0.0f;
    } else if (residual) {
      residual[i] = e;
    }
  }
  if (amax >= 0x7f800000u && nonfinite) *nonfinite = 1;
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
