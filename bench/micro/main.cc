// ciuic-micro's entry: the kernel benchmarks (codec_micro.cc) and the runtime's fixed cost per call
// (overhead_micro.cc) on one rank; started by mpiexec on several ranks, the overhead benchmarks
// alone, on MPI_COMM_WORLD, rank 0 reporting.
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <vector>

#include "collectives/communicator.h"
#include "core/config.h"
#if CIUIC_HAVE_MPI
#include "collectives/backends/mpi/communicator.h"
#endif

namespace ciuic {
void Register();                    // codec_micro.cc
void RegisterOverhead(bool ranks);  // overhead_micro.cc
extern Communicator* g_mpi_world;   // overhead_micro.cc
}  // namespace ciuic

namespace {

// Rank 0 reports; the others run the same calls and say nothing.
struct Silent : benchmark::BenchmarkReporter {
  bool ReportContext(const Context&) override { return true; }
  void ReportRuns(const std::vector<Run>&) override {}
};

}  // namespace

int main(int argc, char** argv) {
  const char* size = std::getenv("OMPI_COMM_WORLD_SIZE");
  const bool ranks = size && std::atoi(size) > 1;
#if CIUIC_HAVE_MPI
  std::unique_ptr<ciuic::MpiSession> session;
  std::unique_ptr<ciuic::Communicator> world;
  if (ranks) {
    session = std::make_unique<ciuic::MpiSession>(&argc, &argv);
    world = ciuic::MakeMpiWorld();
    ciuic::g_mpi_world = world.get();
  }
#else
  if (ranks) {
    std::fprintf(stderr, "ciuic-micro: several ranks need MPI, and this build has none\n");
    return 1;
  }
#endif
  if (!ranks) ciuic::Register();
  ciuic::RegisterOverhead(ranks);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  Silent silent;
  benchmark::RunSpecifiedBenchmarks(ciuic::g_mpi_world && ciuic::g_mpi_world->Rank() != 0 ? &silent : nullptr);
  benchmark::Shutdown();
  return 0;
}
