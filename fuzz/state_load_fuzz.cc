// libFuzzer harness for the state-file loaders (Runtime::Load, and RuleRuntime::Load for the profile
// runtime's file of several configurations). Each input is written to a temp file and loaded into a
// 1-rank local runtime of every shape in state_shapes.h, and into the profile runtime there. A load must either throw
// InputError or give a state that saves back to the same bytes, after which an allreduce either
// works or throws InputError. A crash, a sanitizer report, another exception or a changed round
// trip is a finding. Build with -DCIUIC_FUZZ=ON and clang; run with the seed corpus:
//   build-fuzz/fuzz/state_load_fuzz fuzz/corpus/state_load -max_total_time=600
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include <unistd.h>

#include "collectives/backends/local/communicator.h"
#include "collectives/runtime.h"
#include "collectives/runtime_rules.h"
#include "core/error.h"
#include "fuzz/state_shapes.h"

namespace {

std::vector<char> ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<char>(std::istreambuf_iterator<char>(in), {});
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string dir = [] {
    const char* tmp = std::getenv("TMPDIR");
    return std::string(tmp && *tmp ? tmp : "/tmp");
  }();
  static const std::string path = dir + "/ciuic_state_fuzz." + std::to_string(getpid());
  static const std::string again = path + ".again";
  static const auto world = ciuic::MakeLocalWorld(1);
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  for (const auto& shape : ciuic::fuzz::kStateShapes) {
    ciuic::Runtime rt(*world[0], ciuic::fuzz::ConfigOf(shape));
    try {
      rt.Load(path);
    } catch (const ciuic::InputError&) {
      continue;
    }
    rt.Save(again);
    if (ReadAll(again) != std::vector<char>(data, data + size)) {
      std::fprintf(stderr, "state_load_fuzz: a file accepted by the %s runtime saves back to other bytes\n",
                   shape.name);
      std::abort();
    }
    std::vector<float> g(ciuic::fuzz::kTensorFloats);
    for (size_t i = 0; i < g.size(); ++i) g[i] = 1e-3f * static_cast<float>(i % 17) - 8e-3f;
    try {
      rt.AllReduce(g.data(), g.size(), ciuic::fuzz::kTensorId);
    } catch (const ciuic::InputError&) {
      // A good file of another model: refused at its first use, as on every rank.
    }
  }
  ciuic::RuleRuntime rules(*world[0], ciuic::fuzz::RuleConfig());
  try {
    rules.Load(path);
  } catch (const ciuic::InputError&) {
    return 0;
  }
  rules.Save(again);
  if (ReadAll(again) != std::vector<char>(data, data + size)) {
    std::fprintf(stderr, "state_load_fuzz: a file accepted by the profile runtime saves back to other bytes\n");
    std::abort();
  }
  for (const size_t n : {ciuic::fuzz::kBucketFloats, ciuic::fuzz::kTensorFloats}) {
    std::vector<float> g(n, 1e-3f);
    try {
      rules.AllReduce(g.data(), n, ciuic::DType::kFloat32, ciuic::fuzz::kTensorId, false);
    } catch (const ciuic::InputError&) {
    }
  }
  return 0;
}
