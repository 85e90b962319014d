// Exhaustive and randomized checks of the narrow-float conversions against an independent
// derivation: a brute-force nearest search over every finite value a format holds (ties to the
// even code), with the overflow rule stated separately, and the compiler's own _Float16 for fp16.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "core/dtype.h"
#include "core/error.h"

namespace ciuic {
namespace {

float BitsToFloat(uint32_t u) { return std::bit_cast<float>(u); }
uint32_t FloatToBits(float f) { return std::bit_cast<uint32_t>(f); }

struct Format {
  const char* name;
  const MiniFloatFormat* f;
  int bits;
};
const Format kFormats[] = {
    {"fp16", &kHalfFormat, 16}, {"bf16", &kBFloat16Format, 16}, {"e4m3", &kE4M3Format, 8}, {"e5m2", &kE5M2Format, 8}};

// Reference: every non-negative finite value of the format with its code, sorted.
struct Reference {
  std::vector<std::pair<double, uint32_t>> values;
  double max_finite;
  uint32_t max_code;
  double overflow_midpoint;  // halfway between max and the next (virtual) value
  const MiniFloatFormat* f;

  explicit Reference(const MiniFloatFormat& fmt) : f(&fmt) {
    const uint32_t sign_bit = 1u << (fmt.exp_bits + fmt.man_bits);
    for (uint32_t c = 0; c < sign_bit; ++c) {
      // Value from the definition, written independently of DecodeMiniFloat.
      const uint32_t e = c >> fmt.man_bits, m = c & ((1u << fmt.man_bits) - 1);
      const uint32_t ones = (1u << fmt.exp_bits) - 1;
      if (fmt.ieee_specials && e == ones) continue;
      if (!fmt.ieee_specials && e == ones && m == (1u << fmt.man_bits) - 1) continue;
      const double v =
          e == 0 ? std::ldexp(static_cast<double>(m), 1 - fmt.bias - fmt.man_bits)
                 : std::ldexp(1.0 + m / static_cast<double>(1u << fmt.man_bits), static_cast<int>(e) - fmt.bias);
      values.push_back({v, c});
    }
    std::sort(values.begin(), values.end());
    max_finite = values.back().first;
    max_code = values.back().second;
    const double ulp_top = values.back().first - values[values.size() - 2].first;
    overflow_midpoint = max_finite + ulp_top / 2;
  }

  uint32_t Encode(float xf, Saturation sat) const {
    const uint32_t sign = std::signbit(xf) ? 1u << (f->exp_bits + f->man_bits) : 0;
    const uint32_t inf = ((1u << f->exp_bits) - 1) << f->man_bits;
    if (std::isnan(xf)) return sign | f->nan;
    const double x = std::fabs(static_cast<double>(xf));
    const bool max_is_odd = max_code & 1;
    if (std::isinf(xf) || x > overflow_midpoint || (x == overflow_midpoint && max_is_odd)) {
      if (sat == Saturation::kFinite) return sign | max_code;
      return sign | (f->ieee_specials ? inf : f->nan);
    }
    auto hi = std::lower_bound(values.begin(), values.end(), std::make_pair(x, 0u),
                               [](const auto& a, const auto& b) { return a.first < b.first; });
    if (hi == values.end()) return sign | max_code;
    if (hi->first == x || hi == values.begin()) return sign | hi->second;
    auto lo = hi - 1;
    const double dlo = x - lo->first, dhi = hi->first - x;
    if (dlo < dhi) return sign | lo->second;
    if (dhi < dlo) return sign | hi->second;
    return sign | ((lo->second & 1) ? hi->second : lo->second);
  }
};

uint32_t Encode(const Format& fmt, float x, Saturation s) { return EncodeMiniFloat(x, *fmt.f, s); }

bool IsNanCode(const MiniFloatFormat& f, uint32_t code) { return std::isnan(DecodeMiniFloat(code, f)); }

TEST(DType, EveryPatternRoundTrips) {
  for (const auto& fmt : kFormats) {
    for (uint32_t c = 0; c < (1u << fmt.bits); ++c) {
      const float v = DecodeMiniFloat(c, *fmt.f);
      const uint32_t back = Encode(fmt, v, Saturation::kNone);
      if (std::isnan(v)) {
        EXPECT_TRUE(IsNanCode(*fmt.f, back)) << fmt.name << " code " << c;
      } else {
        ASSERT_EQ(back, c) << fmt.name << " code " << c << " value " << v;
      }
    }
  }
}

TEST(DType, DecodeMatchesDefinition) {
  for (const auto& fmt : kFormats) {
    Reference ref(*fmt.f);
    for (const auto& [v, c] : ref.values) {
      ASSERT_EQ(static_cast<double>(DecodeMiniFloat(c, *fmt.f)), v) << fmt.name << " code " << c;
      const uint32_t neg = c | (1u << (fmt.bits - 1));
      ASSERT_EQ(static_cast<double>(DecodeMiniFloat(neg, *fmt.f)), -v) << fmt.name << " code " << neg;
    }
  }
  EXPECT_EQ(E4M3ToFloat(0x7E), 448.0f);
  EXPECT_TRUE(std::isnan(E4M3ToFloat(0x7F)));
  EXPECT_EQ(E5M2ToFloat(0x7B), 57344.0f);
  EXPECT_TRUE(std::isinf(E5M2ToFloat(0x7C)));
  EXPECT_EQ(HalfToFloat(0x7BFF), 65504.0f);
  EXPECT_EQ(HalfToFloat(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(E4M3ToFloat(0x01), std::ldexp(1.0f, -9));
}

// Every code's value, every midpoint between neighbours (exact ties) and one fp32 step either side
// of each midpoint, both signs, both saturation modes.
TEST(DType, BoundariesAndTiesMatchReference) {
  for (const auto& fmt : kFormats) {
    Reference ref(*fmt.f);
    std::vector<float> probes;
    for (size_t i = 0; i < ref.values.size(); ++i) {
      probes.push_back(static_cast<float>(ref.values[i].first));
      const double next =
          i + 1 < ref.values.size() ? ref.values[i + 1].first : ref.overflow_midpoint * 2 - ref.max_finite;
      const float mid = static_cast<float>((ref.values[i].first + next) / 2);
      probes.push_back(mid);
      probes.push_back(std::nextafter(mid, 0.0f));
      probes.push_back(std::nextafter(mid, std::numeric_limits<float>::infinity()));
    }
    probes.push_back(std::numeric_limits<float>::infinity());
    probes.push_back(std::numeric_limits<float>::max());
    probes.push_back(std::numeric_limits<float>::denorm_min());
    probes.push_back(std::numeric_limits<float>::min());
    for (float p : probes) {
      for (float x : {p, -p}) {
        for (Saturation s : {Saturation::kNone, Saturation::kFinite}) {
          ASSERT_EQ(Encode(fmt, x, s), ref.Encode(x, s))
              << fmt.name << " x=" << x << " sat=" << (s == Saturation::kFinite);
        }
      }
    }
    const uint32_t nan = Encode(fmt, std::numeric_limits<float>::quiet_NaN(), Saturation::kFinite);
    EXPECT_TRUE(IsNanCode(*fmt.f, nan)) << fmt.name << ": NaN must stay NaN when saturating";
  }
}

TEST(DType, RandomFloatsMatchReference) {
  std::mt19937_64 rng(20261122);
  for (const auto& fmt : kFormats) {
    Reference ref(*fmt.f);
    const double lo = std::log2(ref.values[1].first) - 3, hi = std::log2(ref.max_finite) + 2;
    std::uniform_real_distribution<double> exp(lo, hi);
    for (int i = 0; i < 400000; ++i) {
      // Half the draws span the format's range; half are arbitrary fp32 bit patterns.
      float x = (i & 1) ? BitsToFloat(static_cast<uint32_t>(rng()))
                        : static_cast<float>(std::exp2(exp(rng)) * ((rng() & 1) ? -1 : 1));
      for (Saturation s : {Saturation::kNone, Saturation::kFinite}) {
        const uint32_t got = Encode(fmt, x, s), want = ref.Encode(x, s);
        if (std::isnan(x)) {
          ASSERT_TRUE(IsNanCode(*fmt.f, got));
        } else {
          ASSERT_EQ(got, want) << fmt.name << " x=" << x << " bits=" << std::hex << FloatToBits(x);
        }
      }
    }
  }
}

// GCC has _Float16 on x86-64; clang 14 (the sanitizer/fuzz build) does not, and the test skips there.
#if defined(__FLT16_MAX__)
TEST(DType, HalfMatchesCompilerFloat16) {
  std::mt19937 rng(7);
  for (int i = 0; i < 1000000; ++i) {
    const float x = BitsToFloat(rng());
    if (std::isnan(x)) continue;
    const _Float16 h = static_cast<_Float16>(x);
    uint16_t want;
    std::memcpy(&want, &h, 2);
    ASSERT_EQ(FloatToHalf(x), want) << x;
  }
  for (uint32_t c = 0; c < 65536; ++c) {
    const uint16_t code = static_cast<uint16_t>(c);
    _Float16 h;
    std::memcpy(&h, &code, 2);
    const float want = static_cast<float>(h);
    const float got = HalfToFloat(code);
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(got));
    } else {
      ASSERT_EQ(FloatToBits(got), FloatToBits(want)) << c;
    }
  }
}
#else
TEST(DType, HalfMatchesCompilerFloat16) { GTEST_SKIP() << "this compiler has no _Float16"; }
#endif

TEST(DType, BFloat16FastPathMatchesGeneric) {
  std::mt19937 rng(11);
  for (int i = 0; i < 1000000; ++i) {
    const float x = BitsToFloat(rng());
    const uint16_t fast = FloatToBFloat16(x);
    const uint32_t generic = EncodeMiniFloat(x, kBFloat16Format, Saturation::kNone);
    if (std::isnan(x)) {
      ASSERT_TRUE(std::isnan(BFloat16ToFloat(fast)));
    } else {
      ASSERT_EQ(fast, generic) << x;
    }
  }
}

TEST(DType, SaturationRules) {
  EXPECT_EQ(FloatToE4M3(1000.0f, Saturation::kFinite), 0x7E);
  EXPECT_EQ(FloatToE4M3(-1000.0f, Saturation::kFinite), 0xFE);
  EXPECT_EQ(FloatToE4M3(1000.0f, Saturation::kNone), 0x7F);  // no Inf in e4m3: NaN
  EXPECT_EQ(FloatToE4M3(464.0f, Saturation::kNone), 0x7E);   // tie goes to the even code 448
  EXPECT_EQ(FloatToE4M3(465.0f, Saturation::kNone), 0x7F);
  EXPECT_EQ(FloatToE5M2(1e6f, Saturation::kNone), 0x7C);
  EXPECT_EQ(FloatToE5M2(1e6f, Saturation::kFinite), 0x7B);
  EXPECT_EQ(FloatToHalf(65520.0f), 0x7C00);  // tie between 65504 (odd) and 65536: overflows
  EXPECT_EQ(FloatToHalf(65519.0f), 0x7BFF);
  EXPECT_EQ(FloatToHalf(std::numeric_limits<float>::infinity(), Saturation::kFinite), 0x7BFF);
  EXPECT_EQ(FloatToHalf(-0.0f), 0x8000);
}

TEST(DType, NamesParseAndRoundTrip) {
  for (DType t : AllDTypes()) EXPECT_EQ(ParseDType(DTypeName(t)), t);
  EXPECT_EQ(ParseDType("float"), DType::kFloat32);
  EXPECT_EQ(ParseDType("BF16"), DType::kBFloat16);
  EXPECT_EQ(ParseDType("half"), DType::kFloat16);
  EXPECT_THROW(ParseDType("fp4"), UsageError);
  EXPECT_THROW(ParseDType(""), UsageError);
}

TEST(DType, UlpDistance) {
  EXPECT_EQ(UlpDistance(DType::kFloat32, FloatToBits(1.0f), FloatToBits(std::nextafter(1.0f, 2.0f))), 1u);
  EXPECT_EQ(UlpDistance(DType::kFloat32, FloatToBits(0.0f), FloatToBits(-0.0f)), 0u);
  EXPECT_EQ(
      UlpDistance(DType::kFloat32, FloatToBits(std::nextafter(0.0f, 1.0f)), FloatToBits(std::nextafter(0.0f, -1.0f))),
      2u);
  EXPECT_EQ(UlpDistance(DType::kFloat16, 0x3C00, 0x3C02), 2u);
  EXPECT_EQ(UlpDistance(DType::kFloat16, 0x7E00, 0x3C00), UINT64_MAX);
  EXPECT_EQ(UlpDistance(DType::kInt8, 0xFF, 0x01), 2u);  // -1 vs 1
  EXPECT_EQ(UlpDistance(DType::kUInt8, 0xFF, 0x01), 254u);
}

}  // namespace
}  // namespace ciuic
