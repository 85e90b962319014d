#pragma once
// Test helper for the strict-loader tests: a copy of a good file with one piece of text replaced.
#include <gtest/gtest.h>

#include <string>

namespace ciuic {

// `text` with the first `from` replaced by `to`; a `from` that is not there fails the test (a bad
// case that silently equals the good file would pass for the wrong reason).
inline std::string ReplaceOnce(std::string text, const std::string& from, const std::string& to) {
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at == std::string::npos) return text;
  return text.replace(at, from.size(), to);
}

}  // namespace ciuic
