#pragma once
// One message format for a bad command-line value, shared by ciuic-bench and ciuic-tune:
// "--OPTION VALUE: PROBLEM" (`--streams -1: must be in 1..64`), exit 1. cxxopts' own refusals are
// turned into it here, so the library's text never reaches the user. The message is one printable
// line whatever the value holds (a newline, a control character); an empty value shows as ''.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <cxxopts.hpp>
#include <iostream>
#include <string>
#include <string_view>

#include "core/error.h"
#include "core/files.h"
#include "core/sizes.h"

namespace ciuic {

inline UsageError BadOption(std::string_view option, std::string_view value, std::string_view problem) {
  return UsageError(
      fmt::format("--{} {}: {}", option, value.empty() ? "''" : PrintableLine(value), PrintableLine(problem, 1000)));
}

// `v` when lo <= v <= hi; else "--OPTION V: must be in LO..HI".
template <class T>
T OptionInRange(std::string_view option, T v, T lo, T hi) {
  if (!(v >= lo && v <= hi)) throw BadOption(option, fmt::format("{}", v), fmt::format("must be in {}..{}", lo, hi));
  return v;
}

// A number option given as text (one with a word alternative, e.g. "auto"): the whole text must be a
// finite number, else "--OPTION TEXT: not a number".
inline double NumberOption(std::string_view option, const std::string& text) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size() || !std::isfinite(v))
    throw BadOption(option, text, "not a number");
  return v;
}

// A size option (core/sizes.h grammar) in lo..hi, naming the option when it is refused.
inline uint64_t SizeOption(std::string_view option, const std::string& text, uint64_t lo, uint64_t hi) {
  uint64_t v = 0;
  try {
    v = ParseSize(text);
  } catch (const Error& e) {
    std::string why = e.what();
    const size_t colon = why.find("': ");
    throw BadOption(option, text, colon == std::string::npos ? why : why.substr(colon + 3));
  }
  if (v < lo || v > hi)
    throw BadOption(option, text, fmt::format("must be in {}..{} bytes", FormatSize(lo), FormatSize(hi)));
  return v;
}

namespace cli_detail {

// The first quoted name in a cxxopts message (‘name’).
inline std::string Quoted(const std::string& what) {
  static const std::string kLeft = "\xE2\x80\x98", kRight = "\xE2\x80\x99";
  const size_t a = what.find(kLeft);
  if (a == std::string::npos) return "";
  const size_t b = what.find(kRight, a + kLeft.size());
  return b == std::string::npos ? "" : what.substr(a + kLeft.size(), b - a - kLeft.size());
}

inline std::string Dashed(const std::string& name) { return (name.size() == 1 ? "-" : "--") + name; }

}  // namespace cli_detail

// cxxopts' exception as one of our lines, naming the option (found in argv for a bad value).
// `options`, when given, tells a flag (which takes no value) from an option that wants a number.
inline UsageError FromCxxopts(const cxxopts::exceptions::exception& e, int argc, char** argv,
                              const cxxopts::Options* options = nullptr) {
  using cli_detail::Dashed;
  const std::string name = cli_detail::Quoted(e.what());
  if (dynamic_cast<const cxxopts::exceptions::no_such_option*>(&e))
    return UsageError(fmt::format("{}: unknown option (try --help)", Dashed(name)));
  if (dynamic_cast<const cxxopts::exceptions::missing_argument*>(&e) ||
      dynamic_cast<const cxxopts::exceptions::option_requires_argument*>(&e))
    return UsageError(fmt::format("{}: needs a value", Dashed(name)));
  if (dynamic_cast<const cxxopts::exceptions::gratuitous_argument_for_option*>(&e))
    return UsageError(fmt::format("{}: takes no value", Dashed(name)));
  if (dynamic_cast<const cxxopts::exceptions::incorrect_argument_type*>(&e)) {
    // The option whose value this is: `--opt value` or `--opt=value`. Several may carry the same text
    // (`--dry-run=true --iters true`): a flag given a value it takes (true, false, 1, 0) or followed by
    // a word it does not take is not the one; a flag given another value after `=` surely is.
    auto is_flag = [&](const std::string& option) {
      if (!options) return false;
      for (const auto& group : options->groups())
        for (const auto& o : options->group_help(group).options)
          if (o.is_boolean && std::find(o.l.begin(), o.l.end(), option) != o.l.end()) return true;
      return false;
    };
    const bool boolean_text = name == "1" || name == "0" || name == "t" || name == "T" || name == "true" ||
                              name == "True" || name == "f" || name == "F" || name == "false" || name == "False";
    std::string option, flag;
    for (int i = 1; i < argc; ++i) {
      const std::string_view a = argv[i];
      if (a.rfind("--", 0) != 0) continue;
      const size_t eq = a.find('=');
      std::string candidate;
      if (eq != std::string_view::npos && a.substr(eq + 1) == name)
        candidate = std::string(a.substr(2, eq - 2));
      else if (eq == std::string_view::npos && i + 1 < argc && name == argv[i + 1])
        candidate = std::string(a.substr(2));
      if (candidate.empty()) continue;
      if (is_flag(candidate)) {
        if (eq != std::string_view::npos && !boolean_text && flag.empty()) flag = candidate;
      } else if (option.empty()) {
        option = candidate;
      }
    }
    if (!flag.empty())
      return BadOption(flag, name, fmt::format("a flag takes no value (--{0}, or --{0}=true|false)", flag));
    char* end = nullptr;
    std::strtod(name.c_str(), &end);
    const bool number = !name.empty() && end && *end == '\0';
    const std::string why = number ? "out of range for this option (see --help)" : "not a number";
    return option.empty() ? UsageError(fmt::format("'{}': {}", name, why)) : BadOption(option, name, why);
  }
  if (dynamic_cast<const cxxopts::exceptions::invalid_option_syntax*>(&e))
    return UsageError(fmt::format("'{}': not an option (options are --NAME VALUE or --NAME=VALUE)", name));
  return UsageError(fmt::format("bad command line ({})", name.empty() ? "see --help" : name));
}

// The one command-line parse of every tool and subcommand: cxxopts' refusals as FromCxxopts' line,
// --help printed (and --version, given `version_line`) with exit 0, nothing left over
// ("{what}unexpected argument 'X'").
inline cxxopts::ParseResult ParseOrExit(cxxopts::Options& options, int argc, char** argv,
                                        const std::string& version_line = "", std::string_view what = "") {
  cxxopts::ParseResult r;
  try {
    r = options.parse(argc, argv);
  } catch (const cxxopts::exceptions::exception& e) {
    throw FromCxxopts(e, argc, argv, &options);
  }
  if (r.count("help")) {
    std::cout << options.help() << "\n";
    std::exit(0);
  }
  if (!version_line.empty() && r.count("version")) {
    std::cout << version_line << "\n";
    std::exit(0);
  }
  if (!r.unmatched().empty())
    throw UsageError(fmt::format("{}unexpected argument '{}'", what, PrintableLine(r.unmatched().front())));
  // No option is a list by repetition: a second value would silently win over the first.
  const auto& given = r.arguments();
  for (size_t i = 0; i < given.size(); ++i) {
    for (size_t j = i + 1; j < given.size(); ++j) {
      if (given[j].key() != given[i].key()) continue;
      const std::string& a = given[i].value();
      const std::string& b = given[j].value();
      throw UsageError(fmt::format("{} given twice ({} and {}): give it once", cli_detail::Dashed(given[i].key()),
                                   a.empty() ? "''" : PrintableLine(a), b.empty() ? "''" : PrintableLine(b)));
    }
  }
  return r;
}

}  // namespace ciuic
