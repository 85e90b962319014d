#pragma once
// What a codec is: its kind and parameters, parsed from the CLI/profile spelling
// (`int8`, `fp8e4m3`, `topk:0.01`, `powersgd:4`, …) plus the options that apply to several kinds.
// The wire layouts live in codec.h next to WireBytes.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ciuic {

enum class CodecKind : uint8_t {
  kNone,  // fp32 as is
  kFp16,  // cast (optional pre-scale)
  kBf16,
  kFp8E4M3,  // block-scaled
  kFp8E5M2,
  kInt8,
  kInt4,
  kSign1,     // 1 bit/element, RMS scale per block, error feedback
  kTopK,      // values + int32 indices, error feedback
  kRandomK,   // values only; indices from a seed every rank shares; error feedback
  kPowerSgd,  // low rank P·Qᵀ, warm start, error feedback
};

enum class Rounding : uint8_t { kNearest, kStochastic };
enum class TopKSelect : uint8_t { kExact, kSampled };

struct CodecSpec {
  CodecKind kind = CodecKind::kNone;
  uint32_t block = 256;  // elements per scale block (fp8/int8/int4/sign1)
  Rounding rounding = Rounding::kNearest;
  double ratio = 0.01;    // topk / randomk: fraction of elements kept
  int rank = 4;           // powersgd
  float prescale = 1.0f;  // fp16/bf16: multiply before the cast (e.g. 1/world) so sums cannot overflow
  TopKSelect select = TopKSelect::kSampled;
  bool error_feedback = true;  // sign1/topk/randomk/powersgd keep a residual; block codecs may too
  uint64_t seed = 0x5eed;      // stochastic rounding, randomk indices, powersgd initial Q
};

// `name[:param]` with the options above left at their defaults; throws UsageError on a bad spelling.
CodecSpec ParseCodec(std::string_view text);
// Canonical spelling: parses back to the same spec (`topk:0.01`, `int8`).
std::string CodecName(const CodecSpec& spec);
// Every codec name the parser accepts (for help texts).
std::vector<std::string> CodecNames();
const char* RoundingName(Rounding r);
Rounding ParseRounding(std::string_view text);

// Properties that follow from the kind alone.
bool CodecIsBlockScaled(CodecKind k);  // fp8e4m3 fp8e5m2 int8 int4
bool CodecIsLossless(CodecKind k);     // none
bool CodecHasResidual(const CodecSpec& s);

}  // namespace ciuic
