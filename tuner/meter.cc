#include "tuner/meter.h"

#include <cmath>
#include <limits>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tuner/bench_runner.h"

namespace ciuic {

std::pair<int, int> BandIterations(uint64_t bytes) {
  if (bytes < (uint64_t{16} << 20)) return {40, 5};
  if (bytes < (uint64_t{256} << 20)) return {7, 2};
  return {3, 1};
}

BucketMeter::BucketMeter(int ranks, int nodes, const std::string& transport, std::ostream& log)
    : ranks_(ranks), nodes_(nodes), transport_(transport), log_(log) {
  BenchExecutable();
  log_ << fmt::format("measure: the runtime and the library's allreduce over {}\n",
                      transport_ == "gloo" ? "gloo (TCP), as a torch job runs them" : "Open MPI");
  if (const JobRank* job = LedJob()) {
    if (job->size != ranks_)
      throw UsageError(fmt::format("--mode measure under {}: the topology has {} ranks, the job {} (start {} ranks)",
                                   job->launcher, ranks_, job->size, ranks_));
    log_ << fmt::format("measure: ciuic-bench on the {} ranks {} started (rank 0 leads; every rank starts each run)\n",
                        ranks_, job->launcher);
  } else if (nodes_ > 1) {
    log_ << fmt::format("measure: ciuic-bench on {} MPI ranks over {} hosts (the launcher's hostfile)\n", ranks_,
                        nodes_);
  } else {
    log_ << fmt::format("measure: ciuic-bench on {} local MPI ranks ({})\n", ranks_, LocalMpiSetting());
  }
}

double BucketMeter::Us(const PlanChoice& c, uint64_t bytes, std::string* failure) {
  const std::string key =
      fmt::format("{}|{}|{}|{}|{}|{}", c.codec, c.algo, RuleDepth(c), c.streams, c.precision, bytes);
  if (auto it = cache_.find(key); it != cache_.end()) {
    if (failure) *failure = it->second.second;
    return it->second.first;
  }
  std::string args = fmt::format("allreduce --sizes {} --ranks {} --inplace yes --iters 5 --warmup 2", bytes, ranks_);
  if (c.algo == "nccl" && c.precision != "fp32") {
    // casts around the library's sum
    args += fmt::format(" --backend ciuic{} --algo native --precision {}", Over(), c.precision);
  } else if (c.algo == "nccl") {
    args += " --backend " + transport_;  // on a CPU machine the library's own allreduce is MPI's or gloo's
  } else {
    args +=
        fmt::format(" --backend ciuic{} --algo {} --codec {} --streams {}", Over(), RuntimeAlgo(c), c.codec, c.streams);
    args += HierArgs(c);
  }
  return Time(key, args, bytes, "stored as a failed trial; the study goes on", failure);
}

double BucketMeter::RuleUs(const PlanChoice& c, uint64_t bucket, uint64_t bytes, int round) {
  const std::string key = fmt::format("rule|{}|{}|{}|{}|{}|{}|{}|{}", c.codec, c.algo, RuleDepth(c), c.streams,
                                      c.precision, bucket, bytes, round);
  if (auto it = cache_.find(key); it != cache_.end()) return it->second.first;
  const auto [iters, warmup] = BandIterations(bytes);
  std::string args = fmt::format(
      "allreduce --sizes {} --ranks {} --inplace yes --iters {} --warmup {} --backend ciuic"
      "{} --bucket {}",
      bytes, ranks_, iters, warmup, Over(), bucket);
  if (c.algo == "nccl") {
    args += " --algo native";
    if (c.precision != "fp32") args += fmt::format(" --precision {}", c.precision);
  } else {
    args += fmt::format(" --algo {} --codec {} --streams {}", RuntimeAlgo(c), c.codec, c.streams);
    args += HierArgs(c);
  }
  return Time(key, args, bytes, "the band goes on without it");
}

// ciuic-bench ARGS' p50 for `bytes`, cached under `key`; +inf with why (logged, and in `failure`) when
// the child died, exited nonzero or wrote no such row.
double BucketMeter::Time(const std::string& key, const std::string& args, uint64_t bytes, const char* then,
                         std::string* failure) {
  double us = std::numeric_limits<double>::infinity();
  std::string why;
  nlohmann::json doc;
  try {
    doc = RunBenchJson(args);
    us = BenchP50Us(doc, static_cast<double>(bytes));
    if (!std::isfinite(us)) why = fmt::format("ciuic-bench {}: no row of {} bytes in its results", args, bytes);
  } catch (const Error& e) {
    why = e.what();
  }
  if (why.empty() && nodes_ > 1) CheckHosts(doc);
  if (!why.empty()) log_ << fmt::format("measure: {} failed ({}): {}\n", key, then, why);
  cache_[key] = {us, why};
  if (failure) *failure = why;
  return us;
}

// A cluster topology timed on fewer hosts would store one host's numbers as the cluster's.
void BucketMeter::CheckHosts(const nlohmann::json& doc) {
  if (hosts_checked_) return;
  std::set<std::string> hosts;
  if (doc.contains("context") && doc["context"].contains("hostnames"))
    for (const auto& h : doc["context"]["hostnames"])
      if (h.is_string()) hosts.insert(h.get<std::string>());
  if (static_cast<int>(hosts.size()) != nodes_)
    throw UsageError(fmt::format(
        "--mode measure on a {}-node topology: ciuic-bench's {} ranks ran on {} host(s); start ciuic-tune where "
        "mpiexec spans the nodes (scripts/cluster-lab.sh --hosts {} --run -- ciuic-tune ..., or a hostfile)",
        nodes_, ranks_, hosts.size(), nodes_));
  hosts_checked_ = true;
}

// The runtime's transport flag for ciuic-bench --backend ciuic.
std::string BucketMeter::Over() const { return " --transport " + transport_; }

// How hier finds its levels: on one host each rank is a node; on a cluster nodes come from host names,
// and depth 3 groups them as the topology's spine does (R ranks per node, G nodes per group).
std::string BucketMeter::HierArgs(const PlanChoice& c) const {
  if (c.algo != "hier") return "";
  if (nodes_ <= 1) return " --ranks-per-node 1";
  if (RuleDepth(c) == 3) return fmt::format(" --ranks-per-node {},{}", ranks_ / nodes_, c.nodes_per_group);
  return "";
}

}  // namespace ciuic
