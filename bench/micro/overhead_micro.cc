// Google Benchmark of the runtime's fixed cost per call (issue "The runtime at every size", item 2):
// the same 8 B / 1 KiB fp32 allreduce on a one-rank world (the transport's call is then a copy, so
// what is left is the layers above it), through each layer in turn:
//   Transport      the communicator's own AllReduce
//   EngineNative   AllReduceEngine, algorithm native (the transport's call inside the engine)
//   EngineAuto     AllReduceEngine, auto (the built-in crossover picks native at these sizes)
//   RuntimeComm    what `ciuic-bench --backend ciuic` times: the engine behind a Communicator
//   Runtime        ciuic::Runtime with its safety on: finite check, call agreement, deadline
//   RuntimeBare    ciuic::Runtime with the finite check/agreement and the deadline off
// Each layer's cost is its time minus the one below it, in the same run.
#include <benchmark/benchmark.h>

#include <memory>
#include <vector>

#include "collectives/algorithms/allreduce.h"
#include "collectives/backends/local/communicator.h"
#include "collectives/runtime.h"
#include "collectives/runtime_comm.h"

namespace ciuic {
namespace {

struct World {
  World() : comms(MakeLocalWorld(1)), comm(*comms[0]) {}
  std::vector<std::unique_ptr<Communicator>> comms;
  Communicator& comm;
};

void Transport(benchmark::State& state) {
  World w;
  std::vector<float> x(static_cast<size_t>(state.range(0)) / 4, 1.0f);
  for (auto _ : state) w.comm.AllReduce(x.data(), x.data(), x.size(), DType::kFloat32, ReduceOp::kSum);
}

void Engine(benchmark::State& state, AllReduceAlgo algo) {
  World w;
  AlgoConfig cfg;
  cfg.algo = algo;
  AllReduceEngine engine(w.comm, cfg);
  std::vector<float> x(static_cast<size_t>(state.range(0)) / 4, 1.0f);
  for (auto _ : state) engine.Run(x.data(), x.size(), nullptr, false);
}
void EngineNative(benchmark::State& state) { Engine(state, AllReduceAlgo::kNative); }
void EngineAuto(benchmark::State& state) { Engine(state, AllReduceAlgo::kAuto); }

void RuntimeComm(benchmark::State& state) {
  World w;
  RuntimeCommConfig cfg;
  auto comm = MakeRuntimeCommunicator(w.comm.Split(0, 0), cfg);
  std::vector<float> x(static_cast<size_t>(state.range(0)) / 4, 1.0f);
  for (auto _ : state) comm->AllReduce(x.data(), x.data(), x.size(), DType::kFloat32, ReduceOp::kSum);
}

void RuntimeCall(benchmark::State& state, bool safe) {
  World w;
  RuntimeConfig cfg;
  cfg.check_finite = safe;
  cfg.timeout_s = safe ? 60 : 0;
  Runtime rt(w.comm, cfg);
  std::vector<float> x(static_cast<size_t>(state.range(0)) / 4, 1.0f);
  for (auto _ : state) rt.AllReduce(x.data(), x.size(), 0);
}
void Runtime_(benchmark::State& state) { RuntimeCall(state, true); }
void RuntimeBare(benchmark::State& state) { RuntimeCall(state, false); }

BENCHMARK(Transport)->Arg(8)->Arg(1024);
BENCHMARK(EngineNative)->Arg(8)->Arg(1024);
BENCHMARK(EngineAuto)->Arg(8)->Arg(1024);
BENCHMARK(RuntimeComm)->Arg(8)->Arg(1024);
BENCHMARK(Runtime_)->Name("Runtime")->Arg(8)->Arg(1024);
BENCHMARK(RuntimeBare)->Arg(8)->Arg(1024);

}  // namespace
}  // namespace ciuic
