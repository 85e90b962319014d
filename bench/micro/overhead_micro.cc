// Google Benchmark of the runtime's fixed cost per call (issue "The runtime at every size", item 2):
// the same 8 B / 1 KiB fp32 allreduce through each layer in turn:
//   Transport      the communicator's own AllReduce
//   EngineNative   AllReduceEngine, algorithm native (the transport's call inside the engine)
//   EngineAuto     AllReduceEngine, auto (the built-in crossover picks native at these sizes)
//   RuntimeComm    what `ciuic-bench --backend ciuic` times: the engine behind a Communicator
//   Runtime        ciuic::Runtime with its safety on: finite check, call agreement, deadline
//   RuntimeBare    ciuic::Runtime with the finite check/agreement and the deadline off
// Each layer's cost is its time minus the one below it, in the same run. On its own the world is one
// rank (the transport's call is then a copy, so what is left is the layers above it); started by
// mpiexec on several ranks (`mpiexec -n 2 ciuic-micro --benchmark_filter=Overhead`) the world is
// MPI_COMM_WORLD, every benchmark runs a fixed number of iterations (the ranks must make the same
// calls) and rank 0 reports: the agreement's exchange then costs what it costs between processes.
#include <benchmark/benchmark.h>

#include <memory>
#include <vector>

#include "collectives/algorithms/allreduce.h"
#include "collectives/backends/local/communicator.h"
#include "collectives/runtime.h"
#include "collectives/runtime_comm.h"
#include "core/config.h"
#if CIUIC_HAVE_MPI
#include "collectives/backends/mpi/communicator.h"
#endif

namespace ciuic {

// MPI_COMM_WORLD when the process was started by mpiexec (main.cc sets it), else null.
Communicator* g_mpi_world = nullptr;

namespace {

struct World {
  World()
      : comms(g_mpi_world ? std::vector<std::unique_ptr<Communicator>>{} : MakeLocalWorld(1)),
        comm(g_mpi_world ? *g_mpi_world : *comms[0]) {}
  std::vector<std::unique_ptr<Communicator>> comms;
  Communicator& comm;
};

void Transport(benchmark::State& state) {
  World w;
  std::vector<float> x(static_cast<size_t>(state.range(0)) / 4, 0.0f);  // zeros: sums on several ranks stay finite
  for (auto _ : state) w.comm.AllReduce(x.data(), x.data(), x.size(), DType::kFloat32, ReduceOp::kSum);
}

void Engine(benchmark::State& state, AllReduceAlgo algo) {
  World w;
  AlgoConfig cfg;
  cfg.algo = algo;
  AllReduceEngine engine(w.comm, cfg);
  std::vector<float> x(static_cast<size_t>(state.range(0)) / 4, 0.0f);  // zeros: sums on several ranks stay finite
  for (auto _ : state) engine.Run(x.data(), x.size(), nullptr, false);
}
void EngineNative(benchmark::State& state) { Engine(state, AllReduceAlgo::kNative); }
void EngineAuto(benchmark::State& state) { Engine(state, AllReduceAlgo::kAuto); }

void RuntimeComm(benchmark::State& state) {
  World w;
  RuntimeCommConfig cfg;
  auto comm = MakeRuntimeCommunicator(w.comm.Split(0, 0), cfg);
  std::vector<float> x(static_cast<size_t>(state.range(0)) / 4, 0.0f);  // zeros: sums on several ranks stay finite
  for (auto _ : state) comm->AllReduce(x.data(), x.data(), x.size(), DType::kFloat32, ReduceOp::kSum);
}

void RuntimeCall(benchmark::State& state, bool safe) {
  World w;
  RuntimeConfig cfg;
  cfg.check_finite = safe;
  cfg.timeout_s = safe ? 60 : 0;
  Runtime rt(w.comm, cfg);
  std::vector<float> x(static_cast<size_t>(state.range(0)) / 4, 0.0f);  // zeros: sums on several ranks stay finite
  for (auto _ : state) rt.AllReduce(x.data(), x.size(), 0);
}
void Runtime_(benchmark::State& state) { RuntimeCall(state, true); }
void RuntimeBare(benchmark::State& state) { RuntimeCall(state, false); }

}  // namespace

// Registered by main: with several ranks each benchmark runs a fixed number of iterations.
void RegisterOverhead(bool ranks) {
  const std::pair<const char*, void (*)(benchmark::State&)> all[] = {
      {"Overhead/Transport", Transport},   {"Overhead/EngineNative", EngineNative},
      {"Overhead/EngineAuto", EngineAuto}, {"Overhead/RuntimeComm", RuntimeComm},
      {"Overhead/Runtime", Runtime_},      {"Overhead/RuntimeBare", RuntimeBare}};
  // Alternating, so that a slow spell of the machine does not fall on one layer.
  for (int round = 0; round < (ranks ? 3 : 1); ++round)
    for (const auto& [name, fn] : all) {
      auto* b = benchmark::RegisterBenchmark(name, fn)->Arg(8)->Arg(1024);
      if (ranks) b->Iterations(200000);
    }
}

}  // namespace ciuic
