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
  // db | builtin | measure | a file written by --crossover-out. db: the newest crossover the
  // calibration database holds for this machine, transport and world size (`ciuic-tune calibrate
  // --ranks P` stores one); with none stored, the built-in table when db is the default, a refusal
  // when it was asked for.
  std::string source = "db";
  bool source_given = false;  // --crossover given (db then must find a calibration)
  std::string db_path;        // --db; empty: the data folder's ciuic.db
  std::string out_path;       // measure: where rank 0 writes the table (JSON)
  bool table = false;         // --crossover-table: print the table instead of the sweep
  int rounds = 3;             // measure and --crossover-table: alternating rounds, median per point
  double slot_s = 0.004;      // ... timed seconds per candidate, size and round
  bool registered = false;    // --register yes: measure on buffers in a shared window
  // --crossover-table's placements (--inplace yes | no | both): one table each, in place first.
  bool in_place = true;
  bool out_of_place = true;
};

// Checks the options (UsageError / InputError) and reads a file or an asked-for database once, before
// any rank starts.
void CheckCrossoverOptions(const CrossoverCli& c);

// Auto's table on `transport` (collective when measuring: every rank calls it); rank 0 logs its source
// and bands, and writes --crossover-out.
std::shared_ptr<const Crossover> ResolveCrossover(Communicator& transport, const CrossoverCli& c);

// The crossover table over `sizes` with auto choosing from `table` (collective; c's rounds, slot and
// placements): one table per placement, rank 0 printing each on `out`. With `runtime` (the runtime
// communicator over `transport`, as `--backend ciuic` calls it) unregistered tables also time its
// AllReduce: the columns runtime and rt/lib. Returns the points of the first (in place where c asks
// for it).
std::vector<CrossoverPoint> RunCrossoverTable(Communicator& transport, std::shared_ptr<const Crossover> table,
                                              const std::vector<uint64_t>& sizes, const CrossoverCli& c,
                                              std::ostream& out, Communicator* runtime = nullptr);

}  // namespace ciuic
