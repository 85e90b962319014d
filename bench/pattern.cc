#include "bench/pattern.h"

#include <algorithm>
#include <atomic>
#include <cmath>

#include "core/parallel.h"

namespace ciuic {

namespace {

// Cap on B: keeps every partial sum an exact double and int64 arithmetic away from overflow.
constexpr int64_t kMaxBound = int64_t{1} << 40;

inline uint64_t Mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

int64_t BoundOf(DType t) {
  if (DTypeIsFloat(t)) return std::min(kMaxBound, int64_t{1} << DTypeSignificandBits(t));
  const int bits = DTypeSignificandBits(t);
  return std::min(kMaxBound, bits >= 63 ? INT64_MAX : (int64_t{1} << bits) - 1);
}

// Maps a 64-bit hash onto [0, range) with a multiply instead of a (slow) 64-bit division.
inline uint64_t Below(uint64_t h, uint64_t range) {
  return static_cast<uint64_t>((static_cast<unsigned __int128>(h) * range) >> 64);
}

}  // namespace

InputPattern::InputPattern(uint64_t seed, DType type, PatternKind kind, ReduceOp op, int nranks)
    : seed_(Mix(seed)), type_(type), kind_(kind), op_(op), nranks_(nranks), is_signed_(DTypeIsSigned(type)) {
  bound_ = BoundOf(type);
  contributors_ = static_cast<int>(std::min<int64_t>(nranks, bound_));
  magnitude_ = kind == PatternKind::kSum ? bound_ / contributors_ : bound_;
}

double InputPattern::Value(int rank, uint64_t index) const {
  const uint64_t h = Mix(seed_ ^ (index * 0xD1B54A32D192ED03ull) ^ (static_cast<uint64_t>(rank) << 48));
  switch (kind_) {
    case PatternKind::kProd: {
      const double mag = (index % static_cast<uint64_t>(nranks_)) == static_cast<uint64_t>(rank) ? 2.0 : 1.0;
      return (is_signed_ && (h & 1)) ? -mag : mag;
    }
    case PatternKind::kSum: {
      if (contributors_ == nranks_) break;  // every rank contributes (the common case)
      const uint64_t n = static_cast<uint64_t>(nranks_);
      const uint64_t slot = (static_cast<uint64_t>(rank) + n - index % n) % n;
      if (slot >= static_cast<uint64_t>(contributors_)) return 0.0;
      break;
    }
    case PatternKind::kAny:
      break;
  }
  // avg: non-negative, so a library that pre-multiplies by 1/n (NCCL for floats) stays within
  // rounding of the quotient instead of losing it to cancellation.
  if (!is_signed_ || (op_ == ReduceOp::kAvg && kind_ == PatternKind::kSum)) {
    return static_cast<double>(Below(h, static_cast<uint64_t>(magnitude_) + 1));
  }
  return static_cast<double>(static_cast<int64_t>(Below(h, 2 * static_cast<uint64_t>(magnitude_) + 1)) - magnitude_);
}

double InputPattern::Reduced(uint64_t index) const {
  double acc = Value(0, index);
  for (int r = 1; r < nranks_; ++r) {
    const double v = Value(r, index);
    switch (op_) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg:
        acc += v;
        break;
      case ReduceOp::kProd:
        acc *= v;
        break;
      case ReduceOp::kMin:
        acc = std::min(acc, v);
        break;
      case ReduceOp::kMax:
        acc = std::max(acc, v);
        break;
    }
  }
  if (op_ == ReduceOp::kAvg) {
    if (!DTypeIsFloat(type_)) return std::trunc(acc / nranks_);
    return acc / nranks_;
  }
  return acc;
}

void FillPattern(const InputPattern& p, int rank, uint64_t first, void* host, size_t count) {
  VisitDType(p.type(), [&](auto tag) {
    using T = decltype(tag);
    T* out = static_cast<T*>(host);
    ParallelFor(count, [&](size_t b, size_t e) {
      for (size_t i = b; i < e; ++i) out[i] = ElementFromDouble<T>(p.Value(rank, first + i));
    });
  });
}

int64_t CountWrong(DType type, ReduceOp op, const void* host, size_t count, ExpectFn fn, const void* ctx,
                   uint64_t* first_wrong) {
  std::atomic<int64_t> wrong{0};
  std::atomic<uint64_t> first{UINT64_MAX};
  const uint64_t tolerance = op == ReduceOp::kAvg ? 2 : 0;
  VisitDType(type, [&](auto tag) {
    using T = decltype(tag);
    const T* in = static_cast<const T*>(host);
    ParallelFor(count, [&](size_t b, size_t e) {
      int64_t local = 0;
      uint64_t local_first = UINT64_MAX;
      for (size_t i = b; i < e; ++i) {
        double want;
        if (!fn(ctx, i, &want)) continue;
        const uint64_t got_bits = ElementBits(in[i]);
        const uint64_t want_bits = ElementBits(ElementFromDouble<T>(want));
        const bool ok = tolerance == 0 ? (got_bits == want_bits && !std::isnan(ElementToDouble(in[i])))
                                       : UlpDistance(type, got_bits, want_bits) <= tolerance;
        if (!ok) {
          ++local;
          local_first = std::min<uint64_t>(local_first, i);
        }
      }
      wrong += local;
      uint64_t cur = first.load();
      while (local_first < cur && !first.compare_exchange_weak(cur, local_first)) {
      }
    });
  });
  if (first_wrong) *first_wrong = first.load();
  return wrong.load();
}

}  // namespace ciuic
