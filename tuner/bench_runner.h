#pragma once
// Runs this build's ciuic-bench (next to the running executable) as a child process and returns its
// JSON document (`--format json --out FILE`). Used by --mode measure, calibrate (the link) and validate.
#include <string>

#include <nlohmann/json.hpp>

namespace ciuic {

// The ciuic-bench beside the running executable; RuntimeError when it is missing.
std::string BenchExecutable();
// Runs `ciuic-bench ARGS --format json --out TMP` (its table and log discarded). RuntimeError with the
// command and exit status when it fails or writes no document.
nlohmann::json RunBenchJson(const std::string& args);
// Median time (µs, the p50 column) of the row of `bytes` in a ciuic-bench document; +inf when absent.
double BenchP50Us(const nlohmann::json& doc, double bytes);

}  // namespace ciuic
