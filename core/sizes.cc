#include "core/sizes.h"

#include <algorithm>
#include <cctype>
#include <limits>

#include "core/error.h"

namespace ciuic {

namespace {

// A list longer than this is almost certainly a mistake (1:1T:+1 would never finish).
constexpr size_t kMaxSizes = 4096;

std::string Lower(std::string_view s) {
  std::string out(s);
  for (auto& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

uint64_t ParseUnsigned(std::string_view digits, std::string_view whole) {
  if (digits.empty()) throw InputError(fmt::format("bad size '{}': expected a number", whole));
  uint64_t v = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') throw InputError(fmt::format("bad size '{}': expected a number", whole));
    const uint64_t d = static_cast<uint64_t>(c - '0');
    if (v > (std::numeric_limits<uint64_t>::max() - d) / 10) {
      throw InputError(fmt::format("bad size '{}': too large", whole));
    }
    v = v * 10 + d;
  }
  return v;
}

}  // namespace

uint64_t ParseSize(std::string_view text) {
  if (text.empty()) throw InputError("bad size '': empty");
  if (text.front() == '-') throw InputError(fmt::format("bad size '{}': negative", text));
  size_t i = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) ++i;
  if (i == 0) throw InputError(fmt::format("bad size '{}': expected a number", text));
  const uint64_t n = ParseUnsigned(text.substr(0, i), text);
  const std::string unit = Lower(text.substr(i));
  struct Unit {
    const char* name;
    uint64_t mult;
  };
  static const Unit kUnits[] = {
      {"", 1},
      {"b", 1},
      {"k", 1ull << 10},
      {"kib", 1ull << 10},
      {"m", 1ull << 20},
      {"mib", 1ull << 20},
      {"g", 1ull << 30},
      {"gib", 1ull << 30},
      {"t", 1ull << 40},
      {"tib", 1ull << 40},
      {"kb", 1000ull},
      {"mb", 1000ull * 1000},
      {"gb", 1000ull * 1000 * 1000},
      {"tb", 1000ull * 1000 * 1000 * 1000},
  };
  for (const auto& u : kUnits) {
    if (unit == u.name) {
      if (n == 0) throw InputError(fmt::format("bad size '{}': must be positive", text));
      if (n > std::numeric_limits<uint64_t>::max() / u.mult) {
        throw InputError(fmt::format("bad size '{}': too large", text));
      }
      return n * u.mult;
    }
  }
  throw InputError(
      fmt::format("bad size '{}': unknown unit '{}' (use K, M, G, T, KiB.. or KB..)", text, text.substr(i)));
}

std::vector<uint64_t> ParseSizeList(std::string_view spec) {
  if (spec.empty()) throw InputError("bad size list '': empty");
  std::vector<uint64_t> out;
  if (spec.find(',') != std::string_view::npos) {
    if (spec.find(':') != std::string_view::npos) {
      throw InputError(fmt::format("bad size list '{}': mix of ',' and ':'", spec));
    }
    size_t start = 0;
    while (true) {
      const size_t comma = spec.find(',', start);
      const std::string_view item = spec.substr(start, comma == std::string_view::npos ? spec.npos : comma - start);
      if (item.empty()) throw InputError(fmt::format("bad size list '{}': empty item", spec));
      out.push_back(ParseSize(item));
      if (out.size() > kMaxSizes) {
        throw InputError(fmt::format("bad size list '{}': more than {} sizes", spec, kMaxSizes));
      }
      if (comma == std::string_view::npos) break;
      start = comma + 1;
    }
    return out;
  }
  std::vector<std::string_view> parts;
  size_t start = 0;
  while (true) {
    const size_t colon = spec.find(':', start);
    parts.push_back(spec.substr(start, colon == std::string_view::npos ? spec.npos : colon - start));
    if (colon == std::string_view::npos) break;
    start = colon + 1;
  }
  if (parts.size() == 1) return {ParseSize(parts[0])};
  if (parts.size() > 3) throw InputError(fmt::format("bad size range '{}': expected MIN:MAX[:STEP]", spec));
  const uint64_t lo = ParseSize(parts[0]);
  const uint64_t hi = ParseSize(parts[1]);
  if (lo > hi) throw InputError(fmt::format("bad size range '{}': MIN is larger than MAX", spec));
  bool multiply = true;
  uint64_t step = 2;
  if (parts.size() == 3) {
    const std::string_view s = parts[2];
    if (s.size() < 2 || (s[0] != 'x' && s[0] != 'X' && s[0] != '+')) {
      throw InputError(fmt::format("bad size step '{}' in '{}': use xFACTOR or +SIZE", s, spec));
    }
    if (s[0] == '+') {
      multiply = false;
      step = ParseSize(s.substr(1));
    } else {
      step = ParseUnsigned(s.substr(1), s);
      if (step < 2) throw InputError(fmt::format("bad size step '{}' in '{}': the factor must be at least 2", s, spec));
    }
  }
  for (uint64_t v = lo; v <= hi;) {
    out.push_back(v);
    if (out.size() > kMaxSizes) {
      throw InputError(fmt::format("bad size range '{}': more than {} sizes", spec, kMaxSizes));
    }
    if (multiply) {
      if (v > std::numeric_limits<uint64_t>::max() / step) break;
      v *= step;
    } else {
      if (v > std::numeric_limits<uint64_t>::max() - step) break;
      v += step;
    }
  }
  return out;
}

std::string FormatSize(uint64_t bytes) {
  static const char* kSuffix[] = {"", "K", "M", "G", "T"};
  int i = 0;
  while (i < 4 && bytes >= 1024 && bytes % 1024 == 0) {
    bytes /= 1024;
    ++i;
  }
  return fmt::format("{}{}", bytes, kSuffix[i]);
}

}  // namespace ciuic
