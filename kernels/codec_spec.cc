#include "kernels/codec_spec.h"

#include <charconv>
#include <cmath>

#include "core/error.h"

namespace ciuic {

namespace {

struct KindName {
  CodecKind kind;
  const char* name;
  bool has_param;
};
constexpr KindName kKinds[] = {
    {CodecKind::kNone, "none", false},        {CodecKind::kFp16, "fp16", false},
    {CodecKind::kBf16, "bf16", false},        {CodecKind::kFp8E4M3, "fp8e4m3", false},
    {CodecKind::kFp8E5M2, "fp8e5m2", false},  {CodecKind::kInt8, "int8", false},
    {CodecKind::kInt4, "int4", false},        {CodecKind::kSign1, "sign1", false},
    {CodecKind::kTopK, "topk", true},         {CodecKind::kRandomK, "randomk", true},
    {CodecKind::kPowerSgd, "powersgd", true},
};

double ParseRatio(std::string_view text, std::string_view whole) {
  double v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || !std::isfinite(v) || v <= 0 || v > 1)
    throw UsageError(fmt::format("codec '{}': RATIO must be a number in (0, 1], e.g. topk:0.01", whole));
  return v;
}

int ParseRank(std::string_view text, std::string_view whole) {
  int v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || v < 1 || v > 256)
    throw UsageError(fmt::format("codec '{}': RANK must be an integer in 1..256, e.g. powersgd:4", whole));
  return v;
}

}  // namespace

CodecSpec ParseCodec(std::string_view text) {
  const size_t colon = text.find(':');
  const std::string_view name = text.substr(0, colon);
  for (const KindName& k : kKinds) {
    if (name != k.name) continue;
    CodecSpec s;
    s.kind = k.kind;
    if (!k.has_param) {
      if (colon != std::string_view::npos) throw UsageError(fmt::format("codec '{}' takes no parameter", text));
      return s;
    }
    if (colon == std::string_view::npos || colon + 1 == text.size())
      throw UsageError(fmt::format("codec '{}' needs a parameter: {}:{}", text, k.name,
                                   k.kind == CodecKind::kPowerSgd ? "RANK" : "RATIO"));
    const std::string_view param = text.substr(colon + 1);
    if (k.kind == CodecKind::kPowerSgd) {
      s.rank = ParseRank(param, text);
    } else {
      s.ratio = ParseRatio(param, text);
    }
    return s;
  }
  std::string known;
  for (const auto& n : CodecNames()) known += (known.empty() ? "" : " ") + n;
  throw UsageError(fmt::format("unknown codec '{}' (known: {})", text, known));
}

std::string CodecName(const CodecSpec& s) {
  for (const KindName& k : kKinds) {
    if (k.kind != s.kind) continue;
    if (s.kind == CodecKind::kPowerSgd) return fmt::format("powersgd:{}", s.rank);
    if (k.has_param) return fmt::format("{}:{}", k.name, s.ratio);
    return k.name;
  }
  return "?";
}

std::vector<std::string> CodecNames() {
  std::vector<std::string> out;
  for (const KindName& k : kKinds) {
    std::string n = k.name;
    if (k.kind == CodecKind::kPowerSgd)
      n += ":RANK";
    else if (k.has_param)
      n += ":RATIO";
    out.push_back(n);
  }
  return out;
}

const char* RoundingName(Rounding r) { return r == Rounding::kNearest ? "nearest" : "stochastic"; }

Rounding ParseRounding(std::string_view text) {
  if (text == "nearest") return Rounding::kNearest;
  if (text == "stochastic") return Rounding::kStochastic;
  throw UsageError(fmt::format("unknown rounding '{}' (nearest | stochastic)", text));
}

bool CodecIsBlockScaled(CodecKind k) {
  return k == CodecKind::kFp8E4M3 || k == CodecKind::kFp8E5M2 || k == CodecKind::kInt8 || k == CodecKind::kInt4;
}
bool CodecIsLossless(CodecKind k) { return k == CodecKind::kNone; }
bool CodecHasResidual(const CodecSpec& s) { return s.error_feedback && s.kind != CodecKind::kNone; }

}  // namespace ciuic
