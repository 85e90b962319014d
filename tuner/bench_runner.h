#pragma once
// Runs this build's ciuic-bench (next to the running executable) as a child process and returns its
// JSON document (`--format json --out FILE`). Used by --mode measure, calibrate (the link) and validate.
#include <string>

#include <nlohmann/json.hpp>

namespace ciuic {

// The ciuic-bench beside the running executable (or $CIUIC_BENCH_EXE: another build, or a test's
// stand-in); RuntimeError when it is missing.
std::string BenchExecutable();
// The MPI setting the tuner's local runs use, as "NAME=VALUE": Open MPI's shared-memory transport with
// its single-copy mechanism off (copy in, copy out) unless the caller's environment sets it. With the
// single copy (CMA) a peer reading a rank's memory made that rank's own kernels 4-5x slower here (the
// ring's adds: 2 MiB in ~300 us inside the ring vs ~60 us alone) and ring times vary ~1.5x between
// runs; copy-in/copy-out made the 2-rank 4 MiB ring faster (~500 vs 750-1200 us) and steady.
std::string LocalMpiSetting();
// Runs `ciuic-bench ARGS --format json --out TMP` (its table and log discarded) under LocalMpiSetting.
// RuntimeError naming the arguments, how the child ended ("exit 2", "killed by signal 9 (Killed)")
// and its last line on stderr when it fails or writes no document.
nlohmann::json RunBenchJson(const std::string& args);
// How a child ended, from a std::system / waitpid status: "exit N", "killed by signal N (NAME)".
std::string DescribeExit(int status);
// Median time (µs, the p50 column) of the row of `bytes` in a ciuic-bench document; +inf when absent.
double BenchP50Us(const nlohmann::json& doc, double bytes);

}  // namespace ciuic
