#pragma once
// --backend ciuic --algo auto: which crossover table auto chooses from (--crossover), the table a
// measurement writes (--crossover-out), and the crossover table run (--crossover-table): per size, the
// library's own allreduce, each of the runtime's algorithms, what auto chose and its share of the best.
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "collectives/communicator.h"
#include "collectives/crossover.h"

namespace ciuic {

struct CrossoverCli {
  std::string source = "builtin";  // builtin | measure | a file written by --crossover-out
  std::string out_path;            // measure: where rank 0 writes the table (JSON)
  bool table = false;              // --crossover-table: print the table instead of the sweep
};

// Checks the options (UsageError / InputError) and reads a file source once, before any rank starts.
void CheckCrossoverOptions(const CrossoverCli& c);

// Auto's table on `transport` (collective when measuring: every rank calls it); rank 0 logs its source
// and bands, and writes --crossover-out.
std::shared_ptr<const Crossover> ResolveCrossover(Communicator& transport, const CrossoverCli& c);

// The crossover table over `sizes` with auto choosing from `table` (collective). Rank 0 prints it on
// `out`. Returns the points.
std::vector<CrossoverPoint> RunCrossoverTable(Communicator& transport, std::shared_ptr<const Crossover> table,
                                              const std::vector<uint64_t>& sizes, std::ostream& out);

}  // namespace ciuic
