#include "kernels/reduce.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

namespace ciuic {

namespace {

template <class T, class Fn>
void Combine(T* __restrict acc, const T* __restrict in, size_t n, Fn fn) {
  for (size_t i = 0; i < n; ++i) acc[i] = fn(acc[i], in[i]);
}

template <class T>
void ReduceTyped(T* acc, const T* in, size_t n, ReduceOp op) {
  if constexpr (IsMiniFloat<T>::value) {
    auto wrap = [&](auto f) {
      Combine(acc, in, n, [&](T a, T b) { return T::FromFloat(f(a.ToFloat(), b.ToFloat())); });
    };
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg:
        wrap([](float a, float b) { return a + b; });
        break;
      case ReduceOp::kProd:
        wrap([](float a, float b) { return a * b; });
        break;
      case ReduceOp::kMin:
        wrap([](float a, float b) { return std::isnan(b) ? b : std::min(a, b); });
        break;
      case ReduceOp::kMax:
        wrap([](float a, float b) { return std::isnan(b) ? b : std::max(a, b); });
        break;
    }
  } else if constexpr (std::is_integral_v<T>) {
    // Wrap-around on overflow, as two's-complement hardware (and NCCL) does.
    using U = std::make_unsigned_t<T>;
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg:
        Combine(acc, in, n, [](T a, T b) { return static_cast<T>(static_cast<U>(a) + static_cast<U>(b)); });
        break;
      case ReduceOp::kProd:
        Combine(acc, in, n, [](T a, T b) { return static_cast<T>(static_cast<U>(a) * static_cast<U>(b)); });
        break;
      case ReduceOp::kMin:
        Combine(acc, in, n, [](T a, T b) { return std::min(a, b); });
        break;
      case ReduceOp::kMax:
        Combine(acc, in, n, [](T a, T b) { return std::max(a, b); });
        break;
    }
  } else {
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg:
        Combine(acc, in, n, [](T a, T b) { return a + b; });
        break;
      case ReduceOp::kProd:
        Combine(acc, in, n, [](T a, T b) { return a * b; });
        break;
      case ReduceOp::kMin:
        Combine(acc, in, n, [](T a, T b) { return std::isnan(b) ? b : std::min(a, b); });
        break;
      case ReduceOp::kMax:
        Combine(acc, in, n, [](T a, T b) { return std::isnan(b) ? b : std::max(a, b); });
        break;
    }
  }
}

}  // namespace

void ReduceInto(void* acc, const void* in, size_t n, DType type, ReduceOp op) {
  VisitDType(type, [&](auto tag) {
    using T = decltype(tag);
    ReduceTyped(static_cast<T*>(acc), static_cast<const T*>(in), n, op);
  });
}

void DivideBy(void* buf, size_t n, DType type, int divisor) {
  VisitDType(type, [&](auto tag) {
    using T = decltype(tag);
    T* p = static_cast<T*>(buf);
    if constexpr (IsMiniFloat<T>::value) {
      const float d = static_cast<float>(divisor);
      for (size_t i = 0; i < n; ++i) p[i] = T::FromFloat(p[i].ToFloat() / d);
    } else {
      if constexpr (std::is_integral_v<T>) {
        for (size_t i = 0; i < n; ++i) p[i] = static_cast<T>(static_cast<int64_t>(p[i]) / divisor);
      } else {
        const T d = static_cast<T>(divisor);
        for (size_t i = 0; i < n; ++i) p[i] = p[i] / d;
      }
    }
  });
}

}  // namespace ciuic
