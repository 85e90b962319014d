#pragma once
// Runs this build's ciuic-bench (next to the running executable) as a child process and returns its
// JSON document (`--format json --out FILE`). Used by --mode measure, calibrate (the link) and validate.
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "collectives/bootstrap/job_launch.h"

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
// Runs `ciuic-bench ARGS --format json --out TMP` (its table and log discarded) under LocalMpiSetting
// as a child that dies with a SIGTERM if ciuic-tune itself dies (nothing is left running), and
// returns its JSON. RuntimeError naming the arguments, how the child ended ("exit 2", "killed by
// signal 9 (Killed)") and its last line on stderr when it fails or writes no document; Interrupted
// when ciuic-tune was interrupted meanwhile (the child got the same signal first). Under LeadJobRuns
// every rank of the job starts the same run with it.
nlohmann::json RunBenchJson(const std::string& args);
// Runs `ciuic-bench ARGS --dry-run` here (not on a job's other ranks): the checks a run makes before
// its ranks start, the sizes against this host's memory among them, with nothing measured. Its
// refusal (exit 1) is this tool's InputError naming `option` and `text` (the user's spelling) with
// ciuic-bench's reason, so a value only ciuic-bench can judge is refused before the study measures
// anything, not after minutes with exit 2. RuntimeError when the child fails otherwise.
void CheckBenchAccepts(const std::string& args, const std::string& option, const std::string& text);

// ---- ciuic-tune as the ranks of a job torchrun or srun started (collectives/bootstrap/job_launch.h) --
// A measurement's ciuic-bench runs must form the job's world, so every rank's ciuic-tune starts each
// of them, in the same order. Rank 0 runs the study and leads: LeadJobRuns serves a store on
// JobRunsPort (the port after the one the ciuic-bench runs meet on); from then on RunBenchJson posts
// each run's arguments there before starting it, and EndJobRuns(code) posts the end once (it waits up
// to 10 s for every rank to read it). Every other rank calls FollowJobRuns instead of the study: it
// runs what rank 0 posts, in order (its own ciuic-bench as that rank, output discarded), and returns
// the code rank 0 ended with; RuntimeError when rank 0's store goes away first or nothing comes for
// `timeout_s`. Builds without gloo: UsageError.
int JobRunsPort(const JobRank& job);
void LeadJobRuns(const JobRank& job);
const JobRank* LedJob();  // the job LeadJobRuns leads; null otherwise
void EndJobRuns(int code);
int FollowJobRuns(const JobRank& job, double timeout_s);

// SIGINT, SIGTERM or SIGHUP to ciuic-tune: what `main` reports ("interrupted", exit 128 + signal).
// Not an Error, so no trial's failure handling takes it for a failed measurement.
class Interrupted : public std::runtime_error {
 public:
  explicit Interrupted(int sig);
  int signal() const { return sig_; }

 private:
  int sig_;
};
// Installs ciuic-tune's handlers: a signal while a ciuic-bench child runs goes to that child and is
// raised as Interrupted when it has ended; with no child, one line and exit 128 + signal at once.
void InstallInterruptHandlers();
// How a child ended, from a std::system / waitpid status: "exit N", "killed by signal N (NAME)".
std::string DescribeExit(int status);
// Median time (µs, the p50 column) of the row of `bytes` in a ciuic-bench document; +inf when absent.
double BenchP50Us(const nlohmann::json& doc, double bytes);

}  // namespace ciuic
