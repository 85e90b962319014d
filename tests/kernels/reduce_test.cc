// The CPU reduction reference against element-wise double arithmetic on random data.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/reduce.h"

namespace ciuic {
namespace {

template <class T>
std::vector<T> Random(size_t n, std::mt19937_64& rng, double lo, double hi) {
  std::uniform_real_distribution<double> d(lo, hi);
  std::vector<T> v(n);
  for (auto& x : v) x = ElementFromDouble<T>(std::round(d(rng) * 4) / 4);
  return v;
}

template <class T>
void CheckType(DType t, double lo, double hi) {
  std::mt19937_64 rng(static_cast<uint64_t>(t) + 1);
  for (ReduceOp op : AllReduceOps()) {
    for (size_t n : {0ul, 1ul, 7ul, 33ul, 1000ul}) {
      auto a = Random<T>(n, rng, lo, hi), b = Random<T>(n, rng, lo, hi);
      auto acc = a;
      ReduceInto(acc.data(), b.data(), n, t, op);
      for (size_t i = 0; i < n; ++i) {
        const double x = ElementToDouble(a[i]), y = ElementToDouble(b[i]);
        double want = 0;
        switch (op) {
          case ReduceOp::kSum:
          case ReduceOp::kAvg:
            want = x + y;
            break;
          case ReduceOp::kProd:
            want = x * y;
            break;
          case ReduceOp::kMin:
            want = std::min(x, y);
            break;
          case ReduceOp::kMax:
            want = std::max(x, y);
            break;
        }
        // One rounding of the exact result into T.
        ASSERT_EQ(ElementBits(acc[i]), ElementBits(ElementFromDouble<T>(want)))
            << DTypeName(t) << " " << ReduceOpName(op) << " " << x << " " << y;
      }
    }
  }
  auto v = Random<T>(100, rng, lo, hi);
  auto d = v;
  DivideBy(d.data(), d.size(), t, 3);
  for (size_t i = 0; i < v.size(); ++i) {
    const double x = ElementToDouble(v[i]);
    const double want = DTypeIsFloat(t) ? x / 3 : std::trunc(x / 3);
    EXPECT_EQ(ElementBits(d[i]), ElementBits(ElementFromDouble<T>(want))) << DTypeName(t) << " " << x;
  }
}

TEST(Reduce, MatchesDoubleArithmetic) {
  CheckType<float>(DType::kFloat32, -1000, 1000);
  CheckType<double>(DType::kFloat64, -1e6, 1e6);
  CheckType<Half>(DType::kFloat16, -100, 100);
  CheckType<BFloat16>(DType::kBFloat16, -100, 100);
  CheckType<Float8E4M3>(DType::kFloat8E4M3, -8, 8);
  CheckType<Float8E5M2>(DType::kFloat8E5M2, -8, 8);
  CheckType<int8_t>(DType::kInt8, -10, 10);
  CheckType<uint8_t>(DType::kUInt8, 0, 15);
  CheckType<int32_t>(DType::kInt32, -1e4, 1e4);
  CheckType<int64_t>(DType::kInt64, -1e6, 1e6);
}

TEST(Reduce, NaNPropagatesThroughMinMax) {
  float a[2] = {1.0f, NAN}, b[2] = {NAN, 2.0f};
  ReduceInto(a, b, 2, DType::kFloat32, ReduceOp::kMax);
  EXPECT_TRUE(std::isnan(a[0]));
  EXPECT_TRUE(std::isnan(a[1]));
}

}  // namespace
}  // namespace ciuic
