// The verification inputs really are exact in any reduction order: reduce sampled elements in the
// element type's own arithmetic in forward, reverse and shuffled rank order and compare bits with
// the expected value.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>

#include "bench/pattern.h"
#include "kernels/reduce.h"

namespace ciuic {
namespace {

TEST(Pattern, ExactInAnyOrder) {
  std::mt19937 rng(3);
  for (DType t : AllDTypes()) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin, ReduceOp::kMax}) {
      const PatternKind kind = op == ReduceOp::kProd  ? PatternKind::kProd
                               : op == ReduceOp::kSum ? PatternKind::kSum
                                                      : PatternKind::kAny;
      for (int n : {1, 2, 3, 7, 16, 33}) {
        InputPattern p(n * 31 + static_cast<int>(t), t, kind, op, n);
        std::vector<int> order(n);
        for (uint64_t idx = 0; idx < 300; ++idx) {
          const double want = p.Reduced(idx);
          for (int variant = 0; variant < 3; ++variant) {
            std::iota(order.begin(), order.end(), 0);
            if (variant == 1) std::reverse(order.begin(), order.end());
            if (variant == 2) std::shuffle(order.begin(), order.end(), rng);
            VisitDType(t, [&](auto tag) {
              using T = decltype(tag);
              T acc = ElementFromDouble<T>(p.Value(order[0], idx));
              for (int q = 1; q < n; ++q) {
                T v = ElementFromDouble<T>(p.Value(order[q], idx));
                ReduceInto(&acc, &v, 1, t, op);
              }
              ASSERT_EQ(ElementBits(acc), ElementBits(ElementFromDouble<T>(want)))
                  << DTypeName(t) << " " << ReduceOpName(op) << " n=" << n << " idx=" << idx;
            });
          }
        }
      }
    }
  }
}

TEST(Pattern, ValuesAreRepresentableAndNotAllZero) {
  for (DType t : AllDTypes()) {
    InputPattern p(5, t, PatternKind::kSum, ReduceOp::kSum, 4);
    int nonzero = 0;
    for (uint64_t i = 0; i < 1000; ++i) {
      const double v = p.Value(1, i);
      nonzero += v != 0;
      VisitDType(t, [&](auto tag) {
        using T = decltype(tag);
        ASSERT_EQ(ElementToDouble(ElementFromDouble<T>(v)), v) << DTypeName(t);
      });
    }
    // e5m2 with 4 ranks draws from {-2..2}: 80% non-zero; wider types far more.
    EXPECT_GT(nonzero, 700) << DTypeName(t);
  }
}

TEST(Pattern, CountWrongSeesEveryDifference) {
  InputPattern p(9, DType::kBFloat16, PatternKind::kSum, ReduceOp::kSum, 3);
  struct Ctx {
    const InputPattern* p;
  } ctx{&p};
  auto fn = [](const void* c, uint64_t k, double* out) {
    *out = static_cast<const Ctx*>(c)->p->Reduced(k);
    return true;
  };
  std::vector<BFloat16> v(5000);
  for (size_t i = 0; i < v.size(); ++i) v[i] = ElementFromDouble<BFloat16>(p.Reduced(i));
  EXPECT_EQ(CountWrong(DType::kBFloat16, ReduceOp::kSum, v.data(), v.size(), fn, &ctx), 0);
  v[17].bits ^= 1;
  v[4000].bits = 0x7FC0;  // NaN
  uint64_t first = 0;
  EXPECT_EQ(CountWrong(DType::kBFloat16, ReduceOp::kSum, v.data(), v.size(), fn, &ctx, &first), 2);
  EXPECT_EQ(first, 17u);
  // avg tolerates 2 ulp, not 3.
  std::vector<float> f(1, 1.0f);
  auto one = [](const void*, uint64_t, double* out) {
    *out = 1.0;
    return true;
  };
  f[0] = std::nextafter(std::nextafter(1.0f, 2.0f), 2.0f);
  EXPECT_EQ(CountWrong(DType::kFloat32, ReduceOp::kAvg, f.data(), 1, one, nullptr), 0);
  f[0] = std::nextafter(f[0], 2.0f);
  EXPECT_EQ(CountWrong(DType::kFloat32, ReduceOp::kAvg, f.data(), 1, one, nullptr), 1);
}

}  // namespace
}  // namespace ciuic
