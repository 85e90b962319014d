#include "core/dtype.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cctype>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/error.h"

namespace ciuic {

const MiniFloatFormat kHalfFormat{5, 10, 15, true, 0x7BFF, 0x7E00};
const MiniFloatFormat kBFloat16Format{8, 7, 127, true, 0x7F7F, 0x7FC0};
const MiniFloatFormat kE4M3Format{4, 3, 7, false, 0x7E, 0x7F};
const MiniFloatFormat kE5M2Format{5, 2, 15, true, 0x7B, 0x7E};

namespace {

struct DTypeInfo {
  DType type;
  const char* name;
  const char* table_name;
  std::array<const char*, 4> aliases;
  size_t size;
  bool is_float;
  bool is_signed;
  int significand_bits;
};

constexpr DTypeInfo kInfos[] = {
    {DType::kFloat32, "fp32", "float", {"float", "float32", "f32", nullptr}, 4, true, true, 24},
    {DType::kFloat64, "fp64", "double", {"double", "float64", "f64", nullptr}, 8, true, true, 53},
    {DType::kFloat16, "fp16", "half", {"half", "float16", "f16", nullptr}, 2, true, true, 11},
    {DType::kBFloat16, "bf16", "bfloat16", {"bfloat16", nullptr, nullptr, nullptr}, 2, true, true, 8},
    {DType::kFloat8E4M3, "fp8e4m3", "f8e4m3", {"f8e4m3", "e4m3", nullptr, nullptr}, 1, true, true, 4},
    {DType::kFloat8E5M2, "fp8e5m2", "f8e5m2", {"f8e5m2", "e5m2", nullptr, nullptr}, 1, true, true, 3},
    {DType::kInt8, "int8", "int8", {"char", "i8", nullptr, nullptr}, 1, false, true, 7},
    {DType::kUInt8, "uint8", "uint8", {"u8", nullptr, nullptr, nullptr}, 1, false, false, 8},
    {DType::kInt32, "int32", "int32", {"int", "i32", nullptr, nullptr}, 4, false, true, 31},
    {DType::kInt64, "int64", "int64", {"i64", nullptr, nullptr, nullptr}, 8, false, true, 63},
};

const DTypeInfo& Info(DType t) { return kInfos[static_cast<int>(t)]; }

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

uint32_t FloatBits(float x) { return std::bit_cast<uint32_t>(x); }
float BitsFloat(uint32_t u) { return std::bit_cast<float>(u); }

}  // namespace

DType ParseDType(std::string_view name) {
  for (const auto& info : kInfos) {
    if (EqualsIgnoreCase(name, info.name)) return info.type;
    for (const char* alias : info.aliases) {
      if (alias && EqualsIgnoreCase(name, alias)) return info.type;
    }
  }
  std::string known;
  for (const auto& info : kInfos) known += std::string(known.empty() ? "" : ", ") + info.name;
  throw UsageError(fmt::format("unknown dtype '{}' (known: {})", name, known));
}

const char* DTypeName(DType t) { return Info(t).name; }
const char* DTypeTableName(DType t) { return Info(t).table_name; }
size_t DTypeSize(DType t) { return Info(t).size; }
bool DTypeIsFloat(DType t) { return Info(t).is_float; }
bool DTypeIsSigned(DType t) { return Info(t).is_signed; }
int DTypeSignificandBits(DType t) { return Info(t).significand_bits; }

const std::vector<DType>& AllDTypes() {
  static const std::vector<DType> all = [] {
    std::vector<DType> v;
    for (const auto& info : kInfos) v.push_back(info.type);
    return v;
  }();
  return all;
}

// Works on the fp32 bit pattern with integers only: the value is sig * 2^lsb_exp exactly, and the
// result is rounded once to the target quantum 2^(E - man_bits), E = max(floor(log2 |x|), emin).
uint32_t EncodeMiniFloat(float x, const MiniFloatFormat& f, Saturation sat) {
  const uint32_t u = FloatBits(x);
  const uint32_t sign = (u >> 31) << (f.exp_bits + f.man_bits);
  const uint32_t a = u & 0x7FFFFFFFu;
  const uint32_t inf_bits = ((1u << f.exp_bits) - 1) << f.man_bits;
  if (a > 0x7F800000u) return sign | f.nan;
  auto overflow = [&]() -> uint32_t {
    if (sat == Saturation::kFinite) return sign | f.max_finite;
    return sign | (f.ieee_specials ? inf_bits : f.nan);
  };
  if (a == 0x7F800000u) return overflow();
  if (a == 0) return sign;

  const int fexp = static_cast<int>(a >> 23);
  const uint32_t sig = fexp ? ((a & 0x7FFFFFu) | 0x800000u) : (a & 0x7FFFFFu);
  const int lsb_exp = (fexp ? fexp : 1) - 127 - 23;
  const int msb = 31 - __builtin_clz(sig);
  const int emin = 1 - f.bias;
  const int e = std::max(lsb_exp + msb, emin);
  const int qe = e - f.man_bits;  // exponent of the target's least significant bit
  const int shift = qe - lsb_exp;
  uint64_t m;
  if (shift <= 0) {
    if (-shift > 40) return overflow();
    m = static_cast<uint64_t>(sig) << -shift;
  } else if (shift >= 26) {
    m = 0;  // below half the smallest subnormal
  } else {
    m = sig >> shift;
    const uint32_t rem = sig & ((1u << shift) - 1);
    const uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (m & 1))) ++m;
  }
  if (m == 0) return sign;
  int biased = e + f.bias;
  if (m >= (2ull << f.man_bits)) {  // rounding carried into the next binade
    m >>= 1;
    ++biased;
  }
  uint64_t bits;
  if (m < (1ull << f.man_bits)) {
    bits = m;  // subnormal (e == emin)
  } else {
    bits = (static_cast<uint64_t>(biased) << f.man_bits) | (m - (1ull << f.man_bits));
  }
  if (bits > f.max_finite) return overflow();
  return sign | static_cast<uint32_t>(bits);
}

float DecodeMiniFloat(uint32_t bits, const MiniFloatFormat& f) {
  const int total = f.exp_bits + f.man_bits;
  const uint32_t sign = (bits >> total) & 1u;
  const uint32_t exp = (bits >> f.man_bits) & ((1u << f.exp_bits) - 1);
  const uint32_t man = bits & ((1u << f.man_bits) - 1);
  const uint32_t exp_ones = (1u << f.exp_bits) - 1;
  float v;
  if (f.ieee_specials && exp == exp_ones) {
    v = man ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
  } else if (!f.ieee_specials && exp == exp_ones && man == (1u << f.man_bits) - 1) {
    v = std::numeric_limits<float>::quiet_NaN();
  } else if (exp == 0) {
    // man * 2^(1 - bias - man_bits); the power of two is exact in fp32 for every format here
    // except bf16's subnormals, which are fp32 subnormals with the same layout.
    if (f.exp_bits == 8) {
      v = BitsFloat(man << (23 - f.man_bits));
    } else {
      v = static_cast<float>(man) * BitsFloat(static_cast<uint32_t>(127 + 1 - f.bias - f.man_bits) << 23);
    }
  } else {
    v = BitsFloat(((exp - f.bias + 127) << 23) | (man << (23 - f.man_bits)));
  }
  return sign ? -v : v;
}

uint16_t FloatToBFloat16(float x, Saturation s) {
  if (s == Saturation::kFinite) return static_cast<uint16_t>(EncodeMiniFloat(x, kBFloat16Format, s));
  const uint32_t u = FloatBits(x);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
  return static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

float BFloat16ToFloat(uint16_t b) { return BitsFloat(static_cast<uint32_t>(b) << 16); }

uint64_t UlpDistance(DType t, uint64_t a, uint64_t b) {
  if (a == b) return 0;
  const int bits = static_cast<int>(DTypeSize(t) * 8);
  if (!DTypeIsFloat(t)) {
    // Integers: plain difference of the signed/unsigned values.
    auto value = [&](uint64_t v) -> __int128 {
      if (!DTypeIsSigned(t)) return static_cast<__int128>(v);
      const uint64_t sign_bit = 1ull << (bits - 1);
      const uint64_t mask = bits == 64 ? ~0ull : ((1ull << bits) - 1);
      v &= mask;
      return (v & sign_bit) ? static_cast<__int128>(v) - (static_cast<__int128>(1) << bits) : static_cast<__int128>(v);
    };
    __int128 d = value(a) - value(b);
    if (d < 0) d = -d;
    return d > static_cast<__int128>(UINT64_MAX) ? UINT64_MAX : static_cast<uint64_t>(d);
  }
  auto is_nan = [&](uint64_t v) {
    switch (t) {
      case DType::kFloat32:
        return std::isnan(BitsFloat(static_cast<uint32_t>(v)));
      case DType::kFloat64: {
        double d;
        std::memcpy(&d, &v, 8);
        return std::isnan(d);
      }
      case DType::kFloat16:
        return std::isnan(HalfToFloat(static_cast<uint16_t>(v)));
      case DType::kBFloat16:
        return std::isnan(BFloat16ToFloat(static_cast<uint16_t>(v)));
      case DType::kFloat8E4M3:
        return std::isnan(E4M3ToFloat(static_cast<uint8_t>(v)));
      case DType::kFloat8E5M2:
        return std::isnan(E5M2ToFloat(static_cast<uint8_t>(v)));
      default:
        return false;
    }
  };
  if (is_nan(a) || is_nan(b)) return UINT64_MAX;
  // Sign-magnitude to a monotonic signed integer line.
  const uint64_t sign_bit = 1ull << (bits - 1);
  auto ordered = [&](uint64_t v) -> __int128 {
    const uint64_t mag = v & (sign_bit - 1);
    return (v & sign_bit) ? -static_cast<__int128>(mag) : static_cast<__int128>(mag);
  };
  __int128 d = ordered(a) - ordered(b);
  if (d < 0) d = -d;
  return static_cast<uint64_t>(d);
}

}  // namespace ciuic
