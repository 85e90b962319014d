#pragma once
// One-line diagnostics on stderr, prefixed with the tool name.
#include <cstdio>
#include <string>

#include <fmt/format.h>

namespace ciuic {

void SetLogPrefix(std::string prefix);
const std::string& LogPrefix();

namespace detail {
// Writes one finished line to stderr, around the live progress line when one is drawn (core/progress).
void WriteLogLine(const std::string& line);
}  // namespace detail

template <class... Args>
void LogInfo(fmt::format_string<Args...> f, Args&&... args) {
  std::string line = LogPrefix() + ": " + fmt::format(f, std::forward<Args>(args)...) + "\n";
  detail::WriteLogLine(line);
}

}  // namespace ciuic
