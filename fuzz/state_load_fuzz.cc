// libFuzzer harness for the state formats (collectives/state_format.h): the state-file loaders
// (Runtime::Load, and RuleRuntime::Load for the profile runtime's file of several configurations) and
// the C API's codec-state bytes (LoadCodecStateBytes, for each shape's codec over kBucketFloats: a
// load either throws InputError or saves back as below). Each input is written to a temp file and loaded into a
// 1-rank local runtime of every shape in state_shapes.h, and into the profile runtime there. A load must either throw
// InputError or give a state that saves back to the same bytes (a file of an older format, format 1
// without a checksum, saves as today's format: that file must load and save back to itself), after
// which an allreduce either works or throws InputError. A crash, a sanitizer report, another exception or a changed
// round trip is a finding. Build with -DCIUIC_FUZZ=ON and clang; run with the seed corpus:
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
#include "collectives/state_format.h"
#include "core/error.h"
#include "fuzz/state_shapes.h"

namespace {

std::vector<char> ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<char>(std::istreambuf_iterator<char>(in), {});
}

std::string Path() {
  static const std::string path = [] {
    const char* tmp = std::getenv("TMPDIR");
    return std::string(tmp && *tmp ? tmp : "/tmp") + "/ciuic_state_fuzz." + std::to_string(getpid());
  }();
  return path;
}

// A state file or codec-state bytes of format 1 (no checksum; today's loaders read it, and save format 2).
bool FormatOne(const uint8_t* data, size_t size) {
  return size >= 12 && data[8] == 1 && data[9] == 0 && data[10] == 0 && data[11] == 0;
}

// Whether what a loader saved (Path() + ".again") gives back the input: its own bytes, or, for an
// input of an older format (`older`), a file of today's format that `fresh` loads and saves back to
// itself.
template <class R>
bool SavesBack(R& fresh, const uint8_t* data, size_t size, bool older) {
  const std::vector<char> first = ReadAll(Path() + ".again");
  if (first == std::vector<char>(data, data + size)) return true;
  if (!older) return false;
  fresh.Load(Path() + ".again");
  fresh.Save(Path() + ".again2");
  return ReadAll(Path() + ".again2") == first;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = Path();
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
    ciuic::Runtime fresh(*world[0], ciuic::fuzz::ConfigOf(shape));
    if (!SavesBack(fresh, data, size, FormatOne(data, size))) {
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
  for (const auto& shape : ciuic::fuzz::kStateShapes) {
    const ciuic::Codec codec = ciuic::fuzz::CodecOf(shape);
    const size_t n = ciuic::fuzz::kBucketFloats;
    ciuic::CodecState st;
    try {
      st = ciuic::LoadCodecStateBytes(codec, n, data, size);
    } catch (const ciuic::InputError&) {
      continue;
    }
    const std::vector<uint8_t> back = ciuic::SaveCodecStateBytes(codec, n, st);
    bool same = back == std::vector<uint8_t>(data, data + size);
    if (!same && FormatOne(data, size)) {  // an older format saves as today's, which must round-trip
      const ciuic::CodecState again = ciuic::LoadCodecStateBytes(codec, n, back.data(), back.size());
      same = ciuic::SaveCodecStateBytes(codec, n, again) == back;
    }
    if (!same) {
      std::fprintf(stderr, "state_load_fuzz: codec-state bytes accepted for %s save back to other bytes\n",
                   shape.codec);
      std::abort();
    }
  }
  ciuic::RuleRuntime rules(*world[0], ciuic::fuzz::RuleConfig());
  try {
    rules.Load(path);
  } catch (const ciuic::InputError&) {
    return 0;
  }
  rules.Save(again);
  ciuic::RuleRuntime fresh_rules(*world[0], ciuic::fuzz::RuleConfig());
  // The profile runtime's file holds runtime parts of either format: an older one is rewritten.
  if (!SavesBack(fresh_rules, data, size, true)) {
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
