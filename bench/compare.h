#pragma once
// `ciuic-bench compare A B`: two runs of one collective and dtype (run ids in a --db database, or
// ciuic.bench/1 JSON files) matched row by row on (size, in-place), with a verdict per row on the
// median time, usable as a CI regression gate: exit 3 when a row of B is slower than A's by more than
// --threshold plus the noise the two rows show, 0 otherwise, 1 on bad input.
//
// d = B p50 / A p50 - 1; noise = max over the two rows of (p99 - p50) / p50 (or --noise PCT);
//   regressed  d >  threshold + noise      (fails the gate)
//   slower     d >  threshold              (within the noise: reported, not failed)
//   faster     A p50 / B p50 - 1 > threshold + noise   (the same margin, seen from B)
//   same       otherwise
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ciuic {

enum class CompareVerdict { kFaster, kSame, kSlower, kRegressed };
const char* CompareVerdictName(CompareVerdict v);

// The verdict on a ratio of median times (B / A) given the threshold and noise band (fractions).
CompareVerdict JudgeRatio(double time_ratio, double threshold, double noise);

// --threshold / --noise text: a percentage, "5%" or "5" (0..1000); returns the fraction.
double ParsePercentOption(const char* option, const std::string& text);

// Returns the exit code; argv[1] is "compare". Throws ciuic::Error on bad input (BenchMain maps it).
int CompareMain(int argc, char** argv);

}  // namespace ciuic
