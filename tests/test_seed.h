#pragma once
// Test helper: the seed of a test process's random inputs. CIUIC_TEST_SEED when set, else a fresh one
// from std::random_device; stderr says which on first use ("seed N (CIUIC_TEST_SEED=N replays it)")
// and each test that asks records it (the `seed` property of gtest's XML and JSON output). Inputs must
// follow from the seed and the case alone, not from the order in which cases draw, so that a single
// failing case replays with the variable.
#include <gtest/gtest.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <random>
#include <string>

namespace ciuic::testing_seed {

inline uint32_t TestSeed() {
  static const uint32_t seed = [] {
    const char* text = std::getenv("CIUIC_TEST_SEED");
    if (text != nullptr && *text != '\0') {
      char* end = nullptr;
      errno = 0;
      const unsigned long long value = std::strtoull(text, &end, 0);
      if (errno == 0 && *end == '\0' && value <= UINT32_MAX) {
        std::cerr << "seed " << value << " (from CIUIC_TEST_SEED)\n";
        return static_cast<uint32_t>(value);
      }
      std::cerr << "CIUIC_TEST_SEED='" << text << "' is not a number from 0 to " << UINT32_MAX << "\n";
      std::abort();
    }
    const uint32_t fresh = std::random_device{}();
    std::cerr << "seed " << fresh << " (CIUIC_TEST_SEED=" << fresh << " replays it)\n";
    return fresh;
  }();
  ::testing::Test::RecordProperty("seed", std::to_string(seed));
  return seed;
}

}  // namespace ciuic::testing_seed
