#pragma once
// The sweep driver: for each size, out-of-place then in-place, it fills real inputs, warms up,
// times iterations, verifies exactly, and hands one BenchRow per placement to the reporter.
// A failing row carries its error and the sweep goes on.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "bench/baseline.h"
#include "bench/coll_spec.h"
#include "bench/record.h"
#include "collectives/communicator.h"
#include "core/watchdog.h"

namespace ciuic {

// How one row's time combines the ranks' times (nccl-tests' -a): each rank's mean over the timed
// iterations, then the average, the slowest or the fastest rank, or rank 0's own.
enum class Average { kAvg, kMax, kMin, kRank0 };

// How a timed op is clocked. kEvents: CUDA events around the op alone (barrier, op, wait): the GPU's
// time, without launch or wait overhead (on CPU: kHost). kHost: the wall clock around the barrier-
// aligned op and the wait for it (nccl-tests' -z 1). kBatch: the timed iterations back to back, one
// wait at the end, the wall clock over the count (nccl-tests' -z 0, its default); every iteration then
// has that mean, so p50/p99 equal it.
enum class Timing { kEvents, kHost, kBatch };
const char* TimingName(Timing t, bool device);
const char* AverageName(Average a);
Average ParseAverage(std::string_view text);  // avg max min rank0 (UsageError saying so, without the value)
// Combines every rank's values element by element as `a` says; every rank gets the result.
void CombineRanks(Communicator& comm, Average a, double* values, size_t n);
// The footer's description of the row statistic ("max over ranks of each rank's mean").
std::string AverageDescription(Average a);

struct BenchOptions {
  const CollSpec* spec = &kAllReduceSpec;
  std::vector<uint64_t> sizes;
  DType type = DType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  // A sweep over several dtypes and ops (-d all, -o all): every (dtype, op) pair in this order, each
  // its own pass over the sizes. Empty: {type} and {op}.
  std::vector<DType> types;
  std::vector<ReduceOp> ops;
  int root = 0;
  // -1: auto, within row_budget_s per row: up to 1000 timed iterations below 8 KiB (OSU's count),
  // 200 below 1 MiB, 20 above (nccl-tests' default); at least 3.
  int iters = -1;
  int warmup = -1;  // -1: auto (up to 200 / 20 / 5 by the same size classes, a quarter of the budget)
  Average average = Average::kMax;
  Timing timing = Timing::kEvents;
  int check = 1;  // verification iterations per row (fresh inputs each)
  // nccl-tests' -I 1: every row also carries each rank's time of every timed iteration (one gather
  // of iters doubles per rank, after the timed window).
  bool per_iter = false;
  bool lossy = false;  // a lossy codec: report the error against the exact result and count ranks whose
                       // bits differ from rank 0's as #wrong instead of exact element checks
  bool out_of_place = true;
  bool in_place = true;
  // --register yes: the buffers lie in a shared window of the communicator (Communicator::AllocShared).
  bool shared = false;
  uint64_t seed = 0x5EEDC1C;
  double row_budget_s = 1.0;
  int local_ranks = 1;  // ranks sharing this host's memory (for the fits-in-memory check)
  // Test hook: after the op of every check iteration, rank corrupt_rank damages element
  // corrupt_index of its receive buffer, which verification must then count.
  int corrupt_rank = -1;
  uint64_t corrupt_index = 0;
  Watchdog* watchdog = nullptr;
  const Baseline* baseline = nullptr;  // --baseline: each row carries its size's published busbw
};

// The (dtype, op) pairs the sweep runs, dtype-major (nccl-tests' order); a collective that does not
// reduce runs each dtype once, with `op`.
std::vector<std::pair<DType, ReduceOp>> SweepCombinations(const BenchOptions& options);

// Throws InputError before anything is allocated when the largest size cannot fit in this host's
// (or this GPU's) free memory for nranks ranks, options.local_ranks of them on this host.
void CheckSizesFit(const BenchOptions& options, int nranks, MemoryKind kind);

// Runs the sweep; `reporter` may be null (ranks other than 0). Collective over comm.
BenchSummary RunBench(Communicator& comm, const BenchOptions& options, Reporter* reporter, const BenchContext& context);

// Fills what the runner knows of the context (sizes, factor, names, hostnames, versions).
BenchContext MakeContext(Communicator& comm, const BenchOptions& options);

// Collective: whether the ranks agree on --register (`shared`); UsageError on every rank naming one
// that differs (making shared windows is collective: a rank without one would wait on the others).
void AgreeOnRegister(Communicator& comm, bool shared);

}  // namespace ciuic
