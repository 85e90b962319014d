#pragma once
// One-line diagnostics on stderr, prefixed with the tool name.
#include <cstdio>
#include <string>

#include <fmt/format.h>

namespace ciuic {

void SetLogPrefix(std::string prefix);
const std::string& LogPrefix();

template <class... Args>
void LogInfo(fmt::format_string<Args...> f, Args&&... args) {
  std::string line = LogPrefix() + ": " + fmt::format(f, std::forward<Args>(args)...) + "\n";
  std::fputs(line.c_str(), stderr);
}

}  // namespace ciuic
