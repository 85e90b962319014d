// --mode measure's clock: allreduces timed by ciuic-bench on real ranks, the way a study's trials and a
// profile's size bands are priced when measured instead of modelled.
#pragma once

#include <cstdint>
#include <map>
#include <ostream>
#include <string>
#include <utility>

#include <nlohmann/json_fwd.hpp>

#include "tuner/plan_space.h"

namespace ciuic {

// Iterations and warm-ups for timing one message of a size band: many below 16 MiB, where one call is
// short and noisy (over a 1 Gbit/s link a 4 MiB allreduce takes 40 ms: 40 of them, 2 s); few from
// 256 MiB up, where one call takes seconds on a slow link.
std::pair<int, int> BandIterations(uint64_t bytes);

// One bucket allreduce timed by ciuic-bench on real local MPI ranks (in-place, median of its
// iterations), cached per configuration. Returns +inf when the run fails, with why in `failure` (the
// child's exit or signal and its last line): the trial is stored as failed and the study goes on.
class BucketMeter {
 public:
  // `nodes` > 1: a CPU cluster reached through the launcher (scripts/cluster-lab.sh --run): the ranks
  // must land on that many hosts, which the first run checks; hier finds them by host name.
  // `transport`: mpi or gloo, for the runtime and the library's allreduce alike.
  BucketMeter(int ranks, int nodes, const std::string& transport, std::ostream& log);

  // One bucket of `bytes` under choice `c`, the way a trial prices it.
  double Us(const PlanChoice& c, uint64_t bytes, std::string* failure = nullptr);

  // A message of `bytes` as the runtime runs a profile rule of choice `c` and bucket `bucket`: through
  // the ciuic backend (the library's allreduce as --algo native), `bucket` bytes at a time in sequence
  // (collectives/runtime_comm.cc). Iterations by size (BandIterations). `round` > 0 times it afresh
  // (a cached timing is returned for the same round). +inf when the run fails.
  double RuleUs(const PlanChoice& c, uint64_t bucket, uint64_t bytes, int round = 0);

 private:
  double Time(const std::string& key, const std::string& args, uint64_t bytes, const char* then,
              std::string* failure = nullptr);
  void CheckHosts(const nlohmann::json& doc);
  std::string Over() const;
  std::string HierArgs(const PlanChoice& c) const;

  int ranks_;
  int nodes_;
  std::string transport_;
  bool hosts_checked_ = false;
  std::ostream& log_;
  std::map<std::string, std::pair<double, std::string>> cache_;  // key -> (us, why it failed)
};

}  // namespace ciuic
