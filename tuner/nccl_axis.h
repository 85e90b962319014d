#pragma once
// NCCL's own axis for the bands a profile keeps on NCCL's allreduce (algo nccl, codec none): which
// algorithm, protocol and channel count NCCL runs them with.
//   model mode (a study on a GPU topology): the cost model's choice among NCCL's algorithms the
//     fabric offers, recorded as advice (measured false): the tuner plugin never applies it.
//   measured (`ciuic-tune nccl-axis` on the GPUs the profile is for): each band's representative
//     size timed by ciuic-bench --backend nccl under NCCL's default, then every algorithm x protocol
//     NCCL accepts (--nccl-algo/--nccl-proto), then channel counts for the fastest pair; the
//     fastest is recorded as measured when it beats NCCL's default by min_gain, else the band keeps
//     NCCL's own choice. Also for a communicator of another size (a tensor-parallel group): its
//     rules go to the profile's `communicators`.
#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "collectives/profile.h"
#include "tuner/topology.h"

namespace ciuic {

// The message size a band is timed at: the geometric middle of [lo, hi) as a power of two (hi 0:
// twice lo; lo 0: half of hi).
uint64_t NcclAxisBandBytes(uint64_t lo, uint64_t hi);

// Model mode: each band kept on NCCL's allreduce gets the cost model's NCCL algorithm at its
// representative size as advice (measured false); other bands are untouched.
void AdviseNcclAxis(Profile& p, const Topology& t);

// One timing: NCCL's allreduce of `bytes` under `s` (empty: NCCL's default) on `ranks` ranks, in
// us; +inf with why in `failure` when NCCL refused the setting or the run failed.
using NcclTimer = std::function<double(const NcclSettings& s, uint64_t bytes, std::string* failure)>;
// ciuic-bench --backend nccl on local MPI ranks (the GPUs of this machine).
NcclTimer BenchNcclTimer(int ranks);

struct NcclAxisOptions {
  int ranks = 0, nodes = 0;  // the communicator measured; 0: the profile's world
  std::vector<int> channels = {4, 8, 16, 32};
  double min_gain = 0.03;  // the fastest setting must beat NCCL's default by this fraction
};
// Measures NCCL's axis for the communicator's bands kept on NCCL's allreduce (a new communicators
// entry with the profile's size bands when the profile has none for that size) and returns the
// profile with the measured choices (or none, where NCCL's default was as fast).
Profile MeasureNcclAxis(const Profile& p, const NcclAxisOptions& o, const NcclTimer& time, std::ostream& log);

}  // namespace ciuic
