#pragma once
// Element types and exact host conversions between fp32 and the narrow float formats.
// Narrow formats round to nearest, ties to even. Saturation::kFinite clamps overflow (and ±Inf) to
// ±max finite, as CUDA's __NV_SATFINITE does; Saturation::kNone gives ±Inf where the format has it
// (fp16, bf16, e5m2) and NaN where it does not (e4m3, the OCP "FN" variant: no Inf, max 448).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ciuic {

enum class DType : uint8_t {
  kFloat32,
  kFloat64,
  kFloat16,
  kBFloat16,
  kFloat8E4M3,
  kFloat8E5M2,
  kInt8,
  kUInt8,
  kInt32,
  kInt64,
};

enum class Saturation { kNone, kFinite };

// Parses "fp32"/"float", "fp16"/"half", "bf16", "fp8e4m3", ... (case-insensitive). Throws UsageError.
DType ParseDType(std::string_view name);
// Short name used on the command line and in JSON ("fp32", "bf16", "fp8e4m3", "int8").
const char* DTypeName(DType t);
// nccl-tests' column name ("float", "half", "bfloat16", "f8e4m3", "int8").
const char* DTypeTableName(DType t);
size_t DTypeSize(DType t);
bool DTypeIsFloat(DType t);
bool DTypeIsSigned(DType t);
// Significand bits including the implicit one (fp32: 24, e4m3: 4); for integers, value bits.
int DTypeSignificandBits(DType t);
const std::vector<DType>& AllDTypes();

// Layout of a narrow binary float format.
struct MiniFloatFormat {
  int exp_bits;
  int man_bits;
  int bias;
  bool ieee_specials;   // all-ones exponent holds Inf/NaN (fp16, bf16, e5m2); else only S.1111.111 is NaN
  uint32_t max_finite;  // bit pattern (without sign) of the largest finite value
  uint32_t nan;         // canonical NaN bit pattern (without sign)
};
extern const MiniFloatFormat kHalfFormat;
extern const MiniFloatFormat kBFloat16Format;
extern const MiniFloatFormat kE4M3Format;
extern const MiniFloatFormat kE5M2Format;

uint32_t EncodeMiniFloat(float x, const MiniFloatFormat& f, Saturation sat);
float DecodeMiniFloat(uint32_t bits, const MiniFloatFormat& f);

inline uint16_t FloatToHalf(float x, Saturation s = Saturation::kNone) {
  return static_cast<uint16_t>(EncodeMiniFloat(x, kHalfFormat, s));
}
inline float HalfToFloat(uint16_t h) { return DecodeMiniFloat(h, kHalfFormat); }
uint16_t FloatToBFloat16(float x, Saturation s = Saturation::kNone);
float BFloat16ToFloat(uint16_t b);
inline uint8_t FloatToE4M3(float x, Saturation s = Saturation::kFinite) {
  return static_cast<uint8_t>(EncodeMiniFloat(x, kE4M3Format, s));
}
inline float E4M3ToFloat(uint8_t b) { return DecodeMiniFloat(b, kE4M3Format); }
inline uint8_t FloatToE5M2(float x, Saturation s = Saturation::kNone) {
  return static_cast<uint8_t>(EncodeMiniFloat(x, kE5M2Format, s));
}
inline float E5M2ToFloat(uint8_t b) { return DecodeMiniFloat(b, kE5M2Format); }

// Storage types for the narrow formats, so host loops can be written once per element type.
struct Half {
  uint16_t bits;
  float ToFloat() const { return HalfToFloat(bits); }
  static Half FromFloat(float x) { return {FloatToHalf(x)}; }
};
struct BFloat16 {
  uint16_t bits;
  float ToFloat() const { return BFloat16ToFloat(bits); }
  static BFloat16 FromFloat(float x) { return {FloatToBFloat16(x)}; }
};
struct Float8E4M3 {
  uint8_t bits;
  float ToFloat() const { return E4M3ToFloat(bits); }
  // Saturating, as CUDA's __nv_fp8_e4m3(float) constructor that device reductions use.
  static Float8E4M3 FromFloat(float x) { return {FloatToE4M3(x, Saturation::kFinite)}; }
};
struct Float8E5M2 {
  uint8_t bits;
  float ToFloat() const { return E5M2ToFloat(bits); }
  static Float8E5M2 FromFloat(float x) { return {FloatToE5M2(x, Saturation::kFinite)}; }
};

template <class T>
struct IsMiniFloat : std::false_type {};
template <>
struct IsMiniFloat<Half> : std::true_type {};
template <>
struct IsMiniFloat<BFloat16> : std::true_type {};
template <>
struct IsMiniFloat<Float8E4M3> : std::true_type {};
template <>
struct IsMiniFloat<Float8E5M2> : std::true_type {};

// Calls fn(T{}) with the storage type of t.
template <class Fn>
decltype(auto) VisitDType(DType t, Fn&& fn) {
  switch (t) {
    case DType::kFloat32:
      return fn(float{});
    case DType::kFloat64:
      return fn(double{});
    case DType::kFloat16:
      return fn(Half{});
    case DType::kBFloat16:
      return fn(BFloat16{});
    case DType::kFloat8E4M3:
      return fn(Float8E4M3{});
    case DType::kFloat8E5M2:
      return fn(Float8E5M2{});
    case DType::kInt8:
      return fn(int8_t{});
    case DType::kUInt8:
      return fn(uint8_t{});
    case DType::kInt32:
      return fn(int32_t{});
    case DType::kInt64:
      break;
  }
  return fn(int64_t{});
}

// Element value as double / element from double (narrow floats go through fp32: exact for every
// value the formats hold; a double that is not an fp32 value may round twice).
template <class T>
inline double ElementToDouble(T v) {
  if constexpr (IsMiniFloat<T>::value) {
    return v.ToFloat();
  } else {
    return static_cast<double>(v);
  }
}
template <class T>
inline T ElementFromDouble(double v) {
  if constexpr (IsMiniFloat<T>::value) {
    return T::FromFloat(static_cast<float>(v));
  } else {
    return static_cast<T>(v);
  }
}

// Raw bits of an element, for ulp distances and bitwise comparison.
template <class T>
inline uint64_t ElementBits(T v) {
  if constexpr (IsMiniFloat<T>::value) {
    return v.bits;
  } else if constexpr (sizeof(T) == 8) {
    uint64_t u;
    __builtin_memcpy(&u, &v, 8);
    return u;
  } else if constexpr (sizeof(T) == 4) {
    uint32_t u;
    __builtin_memcpy(&u, &v, 4);
    return u;
  } else {
    uint8_t u;
    __builtin_memcpy(&u, &v, 1);
    return u;
  }
}

// Distance in units in the last place between two values of a float type (bits as ElementBits),
// counting across zero; 0 for equal bits; UINT64_MAX when either is NaN.
uint64_t UlpDistance(DType t, uint64_t a_bits, uint64_t b_bits);

}  // namespace ciuic
