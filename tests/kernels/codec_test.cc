// Codec and fused-kernel tests on the CPU oracle: conversions against core/dtype's independent
// derivation, stated error bounds, unbiased stochastic rounding, the error-feedback invariant in fp64,
// NaN/Inf reporting, odd sizes and misaligned pointers, and the sparse/low-rank codecs' contracts.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "kernels/codec.h"
#include "kernels/quant_math.h"

namespace ciuic {
namespace {

std::vector<float> Gradients(size_t n, uint64_t seed, bool heavy_tailed = false) {
  std::mt19937_64 rng(seed);
  std::vector<float> g(n);
  if (heavy_tailed) {
    std::student_t_distribution<float> t(3.0f);
    for (float& x : g) x = 1e-3f * t(rng);
  } else {
    std::normal_distribution<float> normal(0.0f, 1e-2f);
    for (float& x : g) x = normal(rng);
  }
  return g;
}

CodecSpec Spec(const char* name, uint32_t block = 256, Rounding r = Rounding::kNearest) {
  CodecSpec s = ParseCodec(name);
  s.block = block;
  s.rounding = r;
  return s;
}

std::vector<uint8_t> Encode(const Codec& c, const std::vector<float>& x, CodecState* st = nullptr) {
  std::vector<uint8_t> wire(c.WireBytes(x.size()) + 16, 0xA5);
  c.Encode(x.data(), x.size(), wire.data(), st);
  for (size_t i = c.WireBytes(x.size()); i < wire.size(); ++i) EXPECT_EQ(wire[i], 0xA5) << "wrote past the wire";
  wire.resize(c.WireBytes(x.size()));
  return wire;
}

std::vector<float> Decode(const Codec& c, const std::vector<uint8_t>& wire, size_t n, uint64_t step = 0) {
  std::vector<float> out(n, -7.0f);
  c.Decode(wire.data(), n, out.data(), step);
  return out;
}

uint32_t Bits(float f) { return qm::Bits(f); }

// ---- conversions: quant_math against core/dtype --------------------------------------------------

TEST(QuantMath, HalfAndBf16DecodeAgreeWithCoreForAllPatterns) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float a = qm::HalfToFloat(static_cast<uint16_t>(h)), b = HalfToFloat(static_cast<uint16_t>(h));
    if (std::isnan(b)) {
      EXPECT_TRUE(std::isnan(a)) << h;
    } else {
      ASSERT_EQ(Bits(a), Bits(b)) << "fp16 " << h;
    }
    ASSERT_EQ(Bits(qm::Bf16ToFloat(static_cast<uint16_t>(h))), h << 16);
  }
}

TEST(QuantMath, Fp8DecodeAgreesWithCoreForAll256Codes) {
  for (uint32_t c = 0; c < 256; ++c) {
    const float a = qm::Fp8ToFloat(static_cast<uint8_t>(c), qm::Fp8::kE4M3), b = E4M3ToFloat(static_cast<uint8_t>(c));
    if (std::isnan(b))
      EXPECT_TRUE(std::isnan(a));
    else
      EXPECT_EQ(Bits(a), Bits(b)) << "e4m3 " << c;
    const float d = qm::Fp8ToFloat(static_cast<uint8_t>(c), qm::Fp8::kE5M2), e = E5M2ToFloat(static_cast<uint8_t>(c));
    if (std::isnan(e))
      EXPECT_TRUE(std::isnan(d));
    else
      EXPECT_EQ(Bits(d), Bits(e)) << "e5m2 " << c;
  }
}

TEST(QuantMath, EncodersMatchCoreOnRandomAndBoundaryValues) {
  std::vector<float> xs = {0.0f,
                           -0.0f,
                           65504.0f,
                           65519.99f,
                           65520.0f,
                           448.0f,
                           464.0f,
                           57344.0f,
                           61440.0f,
                           1e-8f,
                           5.96e-8f,
                           2.98e-8f,
                           2.9802322e-8f,
                           1.5258789e-5f,
                           1.953125e-3f,
                           9.765625e-4f,
                           std::ldexp(1.0f, -10) * 1.5f,
                           std::ldexp(1.0f, -17),
                           std::ldexp(1.0f, -16) * 3,
                           1e-45f,
                           1.1754942e-38f,
                           3.4028235e38f,
                           INFINITY,
                           -INFINITY};
  std::mt19937 rng(11);
  for (int i = 0; i < 1000000; ++i) {
    uint32_t u = rng();
    // Concentrate on the exponents these formats can hold, plus every halfway pattern at 1/8 of draws.
    u = (u & 0x80ffffffu) | (static_cast<uint32_t>(100 + (rng() % 60)) << 23);
    if (i % 8 == 0) u = (u & ~0x1fffu) | 0x1000u;
    float f;
    std::memcpy(&f, &u, 4);
    xs.push_back(f);
  }
  for (float x : xs) {
    ASSERT_EQ(qm::FloatToHalf(x), FloatToHalf(x, Saturation::kNone)) << x;
    ASSERT_EQ(qm::FloatToBf16(x), FloatToBFloat16(x, Saturation::kNone)) << x;
    if (std::isfinite(x)) {
      ASSERT_EQ(qm::FloatToFp8(x, qm::Fp8::kE4M3), FloatToE4M3(x, Saturation::kFinite)) << x;
      ASSERT_EQ(qm::FloatToFp8(x, qm::Fp8::kE5M2), FloatToE5M2(x, Saturation::kFinite)) << x;
      ASSERT_EQ(qm::FloatToFp8Rne(x, qm::Fp8::kE4M3), FloatToE4M3(x, Saturation::kFinite)) << x;
      ASSERT_EQ(qm::FloatToFp8Rne(x, qm::Fp8::kE5M2), FloatToE5M2(x, Saturation::kFinite)) << x;
    }
  }
}

TEST(QuantMath, PhiloxMatchesPublishedKnownAnswer) {
  // Random123's known-answer vector for philox4x32-10 with counter = key = 0.
  const qm::U32x4 r = qm::Philox(0, 0, 0, 0, 0, 0);
  EXPECT_EQ(r.v[0], 0x6627e8d5u);
  EXPECT_EQ(r.v[1], 0xe169c58du);
  EXPECT_EQ(r.v[2], 0xbc57ac4cu);
  EXPECT_EQ(r.v[3], 0x9b00dbd8u);
}

// ---- block codecs -----------------------------------------------------------------------------------

struct BlockCase {
  const char* name;
  double qmax;        // integer formats; 0 = fp8
  double format_max;  // the largest magnitude the format holds: a block's scale is its |max| / this
};

class BlockCodec : public ::testing::TestWithParam<BlockCase> {};

TEST_P(BlockCodec, NearestErrorIsAtMostHalfAStepPerBlock) {
  const uint32_t block = 64;
  const Codec c(Spec(GetParam().name, block));
  for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{block - 1}, size_t{block + 1}, size_t{100003}}) {
    for (bool heavy : {false, true}) {
      const std::vector<float> x = Gradients(n, n + heavy, heavy);
      const std::vector<uint8_t> wire = Encode(c, x);
      const std::vector<float> y = Decode(c, wire, n);
      for (size_t b = 0; b * block < n; ++b) {
        // The step comes from the data (the block's largest magnitude over the format's), not from the
        // scale the codec wrote: a codec writing an oversized scale would loosen its own bound.
        const size_t end = std::min(n, (b + 1) * block);
        float absmax = 0;
        for (size_t i = b * block; i < end; ++i) absmax = std::max(absmax, std::fabs(x[i]));
        const double scale =
            absmax < std::numeric_limits<float>::min() ? 0.0 : static_cast<double>(absmax) / GetParam().format_max;
        float wire_scale;
        std::memcpy(&wire_scale, wire.data() + b * 4, 4);
        ASSERT_NEAR(wire_scale, scale, 1e-6 * scale) << GetParam().name << " n=" << n << " block " << b;
        for (size_t i = b * block; i < end; ++i) {
          double step;
          if (GetParam().qmax > 0) {
            step = scale;
          } else {
            const bool e4 = std::string(GetParam().name) == "fp8e4m3";
            const int mbits = e4 ? 3 : 2, emin = e4 ? -6 : -14;
            const double v = std::fabs(x[i]) / scale;
            const int e = v > 0 ? std::max(static_cast<int>(std::floor(std::log2(v))), emin) : emin;
            step = std::ldexp(1.0, e - mbits) * scale;
          }
          ASSERT_LE(std::fabs(static_cast<double>(x[i]) - y[i]), 0.5 * step * (1 + 1e-5) + 1e-30)
              << GetParam().name << " n=" << n << " i=" << i;
        }
      }
    }
  }
}

TEST_P(BlockCodec, StochasticRoundingIsUnbiased) {
  CodecSpec s = Spec(GetParam().name, 32, Rounding::kStochastic);
  s.error_feedback = false;
  const Codec c(s);
  std::vector<float> x(32, 0.0f);
  x[0] = 1.0f;     // fixes the block scale
  x[5] = 0.3337f;  // lies between grid points of every format
  x[9] = -0.01234f;
  CodecState st;
  std::vector<double> sum(32, 0.0), sum_sq(32, 0.0);
  const int draws = 100000;
  std::vector<uint8_t> wire(c.WireBytes(32));
  std::vector<float> y(32);
  for (int t = 0; t < draws; ++t) {
    c.Encode(x.data(), 32, wire.data(), &st);
    c.Decode(wire.data(), 32, y.data());
    for (int i : {5, 9}) {
      sum[i] += y[i];
      sum_sq[i] += static_cast<double>(y[i]) * y[i];
    }
  }
  for (int i : {5, 9}) {
    const double mean = sum[i] / draws, var = sum_sq[i] / draws - mean * mean;
    const double sigma_mean = std::sqrt(std::max(var, 1e-30) / draws);
    EXPECT_GT(var, 0.0) << "stochastic rounding never moved " << GetParam().name;
    EXPECT_LE(std::fabs(mean - x[i]), 3 * sigma_mean) << GetParam().name << " element " << i;
  }
}

TEST_P(BlockCodec, FusedHopEqualsDecodeAddEncode) {
  const Codec c(Spec(GetParam().name, 128));
  const size_t n = 1000;
  const std::vector<float> a = Gradients(n, 3), local = Gradients(n, 4, true);
  const std::vector<uint8_t> wa = Encode(c, a);
  std::vector<float> sum = Decode(c, wa, n);
  for (size_t i = 0; i < n; ++i) sum[i] = sum[i] + local[i];
  const std::vector<uint8_t> want = Encode(c, sum);
  std::vector<uint8_t> got(c.WireBytes(n));
  c.DecodeAddEncode(wa.data(), local.data(), n, got.data(), 0);
  EXPECT_EQ(got, want);
  // In place (the ring reuses its receive buffer).
  std::vector<uint8_t> inplace = wa;
  c.DecodeAddEncode(inplace.data(), local.data(), n, inplace.data(), 0);
  EXPECT_EQ(inplace, want);
  // Decode-accumulate adds the decoded values to what is there.
  std::vector<float> acc = local;
  c.DecodeAccumulate(wa.data(), n, acc.data());
  const std::vector<float> d = Decode(c, wa, n);
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(Bits(acc[i]), Bits(local[i] + d[i]));
}

TEST_P(BlockCodec, MisalignedPointersGiveTheSameBits) {
  const Codec c(Spec(GetParam().name, 96));
  const size_t n = 777;
  const std::vector<float> x = Gradients(n, 9);
  const std::vector<uint8_t> want = Encode(c, x);
  std::vector<float> shifted(n + 1);
  std::copy(x.begin(), x.end(), shifted.begin() + 1);
  std::vector<uint8_t> odd(c.WireBytes(n) + 1);
  c.Encode(shifted.data() + 1, n, odd.data() + 1, nullptr);
  EXPECT_TRUE(std::equal(want.begin(), want.end(), odd.begin() + 1));
  std::vector<float> out(n + 1);
  c.Decode(odd.data() + 1, n, out.data() + 1);
  const std::vector<float> ref = Decode(c, want, n);
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(Bits(out[i + 1]), Bits(ref[i]));
}

TEST_P(BlockCodec, NanOrInfIsReportedAndNeverEncodedAsFiniteGarbage) {
  const Codec c(Spec(GetParam().name, 64));
  for (float bad : {NAN, INFINITY, -INFINITY}) {
    std::vector<float> x = Gradients(300, 5);
    x[130] = bad;  // block 2
    CodecState st;
    std::vector<uint8_t> wire(c.WireBytes(300));
    EXPECT_THROW(c.Encode(x.data(), 300, wire.data(), &st), InputError);
    const std::vector<float> y = Decode(c, wire, 300);
    for (size_t i = 0; i < 300; ++i) {
      if (i / 64 == 2)
        EXPECT_TRUE(std::isnan(y[i])) << i;
      else
        EXPECT_TRUE(std::isfinite(y[i])) << i;
    }
    // The residual of the bad block was left as it was (zero: first step).
    for (size_t i = 128; i < 192; ++i) ASSERT_EQ(st.residual.as<float>()[i], 0.0f);
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, BlockCodec,
                         ::testing::Values(BlockCase{"int8", 127, 127}, BlockCase{"int4", 7, 7},
                                           BlockCase{"fp8e4m3", 0, 448}, BlockCase{"fp8e5m2", 0, 57344}),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(Codec, WireBytesFollowTheDocumentedLayouts) {
  EXPECT_EQ(Codec(Spec("fp16")).WireBytes(1001), 2002u);
  EXPECT_EQ(Codec(Spec("bf16")).WireBytes(3), 6u);
  EXPECT_EQ(Codec(Spec("int8", 256)).WireBytes(1000), 4 * 4 + 1000u);
  EXPECT_EQ(Codec(Spec("int4", 256)).WireBytes(1001), 4 * 4 + 501u);
  EXPECT_EQ(Codec(Spec("sign1", 256)).WireBytes(1001), 4 * 4 + 126u);
  EXPECT_EQ(Codec(Spec("fp8e5m2", 32)).WireBytes(64), 2 * 4 + 64u);
  EXPECT_EQ(Codec(Spec("topk:0.01")).WireBytes(1000), 10 * 8u);
  EXPECT_EQ(Codec(Spec("randomk:0.5")).WireBytes(9), 5 * 4u);
  EXPECT_EQ(Codec(Spec("powersgd:2")).WireBytes(100), (10 + 10) * 2 * 4u);
  EXPECT_EQ(Codec(Spec("none")).WireBytes(5), 20u);
}

TEST(Codec, BadSpecsAreUsageErrors) {
  for (const char* bad : {"int9", "topk", "topk:0", "topk:1.5", "topk:x", "powersgd:0", "powersgd:1.5", "int8:3", "",
                          "randomk:", "sign1:2"})
    EXPECT_THROW(ParseCodec(bad), UsageError) << bad;
  EXPECT_THROW(Codec(Spec("int8", 48)), UsageError);
  EXPECT_THROW(Codec(Spec("sign1", 16)), UsageError);
  CodecSpec s = Spec("fp16");
  s.prescale = 0;
  EXPECT_THROW(Codec{s}, UsageError);
  EXPECT_EQ(CodecName(ParseCodec("topk:0.01")), "topk:0.01");
  EXPECT_EQ(CodecName(ParseCodec("powersgd:4")), "powersgd:4");
}

// ---- casts --------------------------------------------------------------------------------------------

TEST(CastCodec, EveryElementIsTheRoundedValueAndPrescaleIsUndone) {
  for (const char* name : {"fp16", "bf16"}) {
    for (float prescale : {1.0f, 0.125f}) {
      CodecSpec s = Spec(name);
      s.prescale = prescale;
      const Codec c(s);
      for (size_t n : {1, 7, 15, 16, 17, 4099}) {
        std::vector<float> x = Gradients(n, n, true);
        if (n > 10) x[3] = 7e4f, x[4] = -1e-7f, x[5] = 6.1e-5f;  // overflow to inf (fp16), subnormal, near min normal
        const std::vector<uint8_t> w = Encode(c, x);
        const std::vector<float> y = Decode(c, w, n);
        for (size_t i = 0; i < n; ++i) {
          const float v = x[i] * prescale;
          const float r =
              std::string(name) == "fp16" ? qm::HalfToFloat(qm::FloatToHalf(v)) : qm::Bf16ToFloat(qm::FloatToBf16(v));
          ASSERT_EQ(Bits(y[i]), Bits(prescale == 1.0f ? r : r * (1.0f / prescale))) << name << " " << i;
        }
      }
    }
  }
}

TEST(CastCodec, NanInputIsFlagged) {
  const Codec c(Spec("fp16"));
  std::vector<float> x = Gradients(40, 1);
  x[33] = NAN;
  std::vector<uint8_t> w(c.WireBytes(40));
  EXPECT_THROW(c.Encode(x.data(), 40, w.data(), nullptr), InputError);
  EXPECT_TRUE(std::isnan(Decode(c, w, 40)[33]));
}

// ---- error feedback ----------------------------------------------------------------------------------

class ErrorFeedback : public ::testing::TestWithParam<const char*> {};

TEST_P(ErrorFeedback, SentPlusResidualEqualsSumOfGradientsOver50Steps) {
  CodecSpec s = Spec(GetParam(), 128);
  s.error_feedback = true;
  const Codec c(s);
  const size_t n = 5000;
  CodecState st;
  std::vector<double> sent(n, 0.0), total(n, 0.0);
  double scale = 0;
  for (int t = 0; t < 50; ++t) {
    const std::vector<float> g = Gradients(n, 100 + t, t % 2 == 1);
    const uint64_t step = st.step;
    const std::vector<uint8_t> w = Encode(c, g, &st);
    const std::vector<float> d = Decode(c, w, n, step);
    for (size_t i = 0; i < n; ++i) {
      sent[i] += d[i];
      total[i] += g[i];
      scale = std::max(scale, std::fabs(static_cast<double>(g[i])));
    }
  }
  const float* r = st.residual.as<float>();
  double worst = 0;
  for (size_t i = 0; i < n; ++i) worst = std::max(worst, std::fabs(sent[i] + r[i] - total[i]));
  // Each step rounds e = g + r and e - decode(e) once in fp32: 50 steps stay far below 1e-4 of a gradient.
  EXPECT_LE(worst, 1e-4 * scale) << GetParam();
}

INSTANTIATE_TEST_SUITE_P(Codecs, ErrorFeedback,
                         ::testing::Values("int8", "int4", "fp8e4m3", "fp8e5m2", "sign1", "fp16", "bf16", "topk:0.05",
                                           "randomk:0.05", "powersgd:2"),
                         [](const auto& info) {
                           std::string s = info.param;
                           for (char& ch : s)
                             if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return s;
                         });

// ---- sign1 ---------------------------------------------------------------------------------------------

TEST(Sign1, DecodesToPlusMinusBlockRms) {
  const Codec c(Spec("sign1", 32));
  const std::vector<float> x = Gradients(70, 2);
  const std::vector<uint8_t> w = Encode(c, x);
  const std::vector<float> y = Decode(c, w, 70);
  for (size_t b = 0; b < 3; ++b) {
    const size_t lo = b * 32, hi = std::min<size_t>(70, lo + 32);
    double ss = 0;
    for (size_t i = lo; i < hi; ++i) ss += static_cast<double>(x[i]) * x[i];
    const double rms = std::sqrt(ss / static_cast<double>(hi - lo));
    for (size_t i = lo; i < hi; ++i) {
      EXPECT_NEAR(std::fabs(y[i]), rms, 1e-6 * rms);
      EXPECT_EQ(std::signbit(y[i]), std::signbit(x[i]));
    }
  }
}

// ---- topk / randomk ---------------------------------------------------------------------------------

TEST(TopK, ExactKeepsTheKLargestMagnitudesInIndexOrder) {
  CodecSpec s = Spec("topk:0.01");
  s.select = TopKSelect::kExact;
  s.error_feedback = false;
  const Codec c(s);
  for (size_t n : {1, 7, 100, 12345}) {
    std::vector<float> x = Gradients(n, n, true);
    if (n > 50) x[40] = x[41] = x[42] = 5.0f;  // ties: lower indices win
    const size_t k = c.SparseK(n);
    const std::vector<uint8_t> w = Encode(c, x);
    std::vector<size_t> order(n);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return std::fabs(x[a]) > std::fabs(x[b]); });
    std::set<int32_t> want(order.begin(), order.begin() + static_cast<ptrdiff_t>(k));
    std::vector<int32_t> idx(k);
    std::memcpy(idx.data(), w.data() + k * 4, k * 4);
    EXPECT_TRUE(std::is_sorted(idx.begin(), idx.end()));
    EXPECT_EQ(std::set<int32_t>(idx.begin(), idx.end()), want) << n;
    const std::vector<float> y = Decode(c, w, n);
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(y[i], want.count(static_cast<int32_t>(i)) ? x[i] : 0.0f);
  }
}

TEST(TopK, TensorsBeyondInt32IndicesAreRefusedNotWrapped) {
  const Codec c(Spec("topk:0.01"));
  const size_t limit = static_cast<size_t>(INT32_MAX);
  EXPECT_EQ(c.WireBytes(limit), c.SparseK(limit) * 8);
  EXPECT_THROW(c.WireBytes(limit + 1), InputError);
  CodecState st;
  EXPECT_THROW(c.Prepare(st, limit + 1, MemoryKind::kHost), InputError);  // before any allocation
  // randomk sends values only (its indices derive from the seed): not limited by int32.
  EXPECT_NO_THROW(Codec(Spec("randomk:0.01")).WireBytes(limit + 1));
}

TEST(TopK, SampledSelectsAboutKLargeElements) {
  CodecSpec s = Spec("topk:0.01");
  s.select = TopKSelect::kSampled;
  s.error_feedback = false;
  const Codec c(s);
  const size_t n = 1 << 20, k = c.SparseK(n);
  const std::vector<float> x = Gradients(n, 77);
  const std::vector<uint8_t> w = Encode(c, x);
  std::vector<int32_t> idx(k);
  std::memcpy(idx.data(), w.data() + k * 4, k * 4);
  const size_t used = static_cast<size_t>(std::count_if(idx.begin(), idx.end(), [](int32_t i) { return i >= 0; }));
  EXPECT_GE(used, k * 8 / 10);
  // Every kept element is at least as large as the exact k-th magnitude × 0.8 (the estimate is close).
  std::vector<float> mags(n);
  for (size_t i = 0; i < n; ++i) mags[i] = std::fabs(x[i]);
  std::nth_element(mags.begin(), mags.begin() + static_cast<ptrdiff_t>(k - 1), mags.end(), std::greater<float>());
  for (size_t j = 0; j < used; ++j) ASSERT_GE(std::fabs(x[static_cast<size_t>(idx[j])]), 0.8f * mags[k - 1]);
}

TEST(RandomK, SharedSeedGivesSharedIndicesSoPayloadsSum) {
  CodecSpec s = Spec("randomk:0.1");
  s.error_feedback = false;
  const Codec c(s);
  const size_t n = 1000, k = c.SparseK(n);
  const std::vector<float> a = Gradients(n, 1), b = Gradients(n, 2);
  const std::vector<uint8_t> wa = Encode(c, a), wb = Encode(c, b);
  std::vector<uint8_t> sum(wa.size());
  for (size_t j = 0; j < k; ++j) {
    float x, y;
    std::memcpy(&x, wa.data() + 4 * j, 4);
    std::memcpy(&y, wb.data() + 4 * j, 4);
    const float z = x + y;
    std::memcpy(sum.data() + 4 * j, &z, 4);
  }
  const std::vector<float> d = Decode(c, sum, n);
  size_t kept = 0;
  for (size_t i = 0; i < n; ++i) {
    if (d[i] != 0.0f) {
      ++kept;
      EXPECT_EQ(d[i], a[i] + b[i]);
    }
  }
  EXPECT_EQ(kept, k);
  EXPECT_TRUE(c.Summable());
  // Another step draws other indices.
  std::set<uint64_t> s0, s1;
  for (size_t j = 0; j < k; ++j) {
    s0.insert(qm::RandomKIndex(s.seed, 0, j, n, k));
    s1.insert(qm::RandomKIndex(s.seed, 1, j, n, k));
  }
  EXPECT_EQ(s0.size(), k);
  EXPECT_NE(s0, s1);
}

// ---- powersgd --------------------------------------------------------------------------------------------

TEST(PowerSgd, RecoversALowRankBucketAndKeepsPOrthonormal) {
  CodecSpec s = Spec("powersgd:3");
  s.error_feedback = false;
  const Codec c(s);
  const size_t n = 50 * 50;
  const MatrixView v = PowerSgdView(n);
  ASSERT_EQ(v.rows * v.cols, n);
  // M = A·Bᵀ with rank 2 ≤ 3.
  const std::vector<float> a = Gradients(v.rows * 2, 1), b = Gradients(v.cols * 2, 2);
  std::vector<float> m(n);
  for (size_t i = 0; i < v.rows; ++i)
    for (size_t j = 0; j < v.cols; ++j) m[i * v.cols + j] = a[i] * b[j] + a[i + v.rows] * b[j + v.cols];
  CodecState st;
  std::vector<uint8_t> w;
  for (int it = 0; it < 3; ++it) w = Encode(c, m, &st);  // warm start converges
  const std::vector<float> y = Decode(c, w, n);
  double err = 0, norm = 0;
  for (size_t i = 0; i < n; ++i) {
    err += (y[i] - m[i]) * static_cast<double>(y[i] - m[i]);
    norm += static_cast<double>(m[i]) * m[i];
  }
  EXPECT_LT(std::sqrt(err / norm), 1e-4);
  const float* p = reinterpret_cast<const float*>(w.data());
  for (int x = 0; x < 3; ++x)
    for (int z = 0; z < 3; ++z) {
      double dot = 0;
      for (size_t i = 0; i < v.rows; ++i) dot += static_cast<double>(p[i + v.rows * x]) * p[i + v.rows * z];
      if (x == z && x < 2) {
        EXPECT_NEAR(dot, 1.0, 1e-5);
      } else if (x != z) {
        EXPECT_NEAR(dot, 0.0, 1e-4);
      }
    }
}

// ---- fused kernels ------------------------------------------------------------------------------------

TEST(Fused, FlattenUnflattenRoundTripsManyTensors) {
  std::vector<std::vector<float>> tensors;
  std::vector<TensorRef> refs;
  size_t total = 0;
  for (size_t t = 0; t < 700; ++t) {
    tensors.push_back(Gradients(1 + (t * 37) % 301, t));
    total += tensors.back().size();
  }
  for (auto& t : tensors) refs.push_back({t.data(), t.size()});
  std::vector<float> bucket(total);
  FlattenTensors(refs.data(), static_cast<int>(refs.size()), bucket.data(), nullptr);
  size_t off = 0;
  for (auto& t : tensors) {
    ASSERT_TRUE(std::equal(t.begin(), t.end(), bucket.begin() + static_cast<ptrdiff_t>(off)));
    off += t.size();
  }
  for (float& x : bucket) x = x * 2;
  UnflattenTensors(bucket.data(), refs.data(), static_cast<int>(refs.size()), nullptr);
  EXPECT_EQ(tensors[5][0],
            bucket[tensors[0].size() + tensors[1].size() + tensors[2].size() + tensors[3].size() + tensors[4].size()]);
}

TEST(Fused, UnscaleChecksAndNorms) {
  std::vector<float> g = Gradients(10001, 3, true);
  std::vector<float> orig = g;
  uint32_t flag = 0;
  double norm_sq = -1;
  UnscaleCheckNorm(g.data(), g.size(), 1.0f / 1024, &flag, &norm_sq, nullptr);
  double want = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    ASSERT_EQ(g[i], orig[i] * (1.0f / 1024));
    want += static_cast<double>(g[i]) * g[i];
  }
  EXPECT_EQ(flag, 0u);
  EXPECT_NEAR(norm_sq, want, 1e-12 * want);
  g[777] = INFINITY;
  UnscaleCheckNorm(g.data(), g.size(), 1.0f, &flag, nullptr, nullptr);
  EXPECT_NE(flag, 0u);
}

// AddToUncached gives AddTo's bits at every alignment of the result and every tail length, touches
// nothing outside [out, out + n), and leaves its inputs alone.
TEST(Fused, AddToUncachedIsAddToAtEveryAlignmentAndLength) {
  const std::vector<float> a = Gradients(4200, 5, true), x = Gradients(4200, 6, true);
  for (size_t shift : {0u, 1u, 2u, 3u, 5u}) {
    for (size_t n : {0u, 1u, 3u, 15u, 16u, 17u, 33u, 4095u}) {
      std::vector<float> want(n + 16, -3.0f), got(n + 16, -3.0f);
      AddTo(want.data() + shift, a.data() + 7, x.data() + 11, n, nullptr);
      AddToUncached(got.data() + shift, a.data() + 7, x.data() + 11, n, nullptr);
      ASSERT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * 4)) << "shift " << shift << " n " << n;
      for (size_t i = 0; i < n; ++i) ASSERT_EQ(want[shift + i], a[7 + i] + x[11 + i]);
    }
  }
}

}  // namespace
}  // namespace ciuic
