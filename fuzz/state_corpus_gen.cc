// Writes the seed corpus of state_load_fuzz: one valid 1-rank state file per shape of
// state_shapes.h after three steps, plus one with no records, plus the profile runtime's file, plus
// the C API's codec-state bytes of each shape's codec over kBucketFloats elements.
// Usage: state_corpus_gen DIR
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "collectives/backends/local/communicator.h"
#include "collectives/runtime.h"
#include "collectives/runtime_rules.h"
#include "collectives/state_format.h"
#include "fuzz/state_shapes.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 1;
  }
  const std::string dir = argv[1];
  ciuic::RunLocalRanks(1, [&](ciuic::Communicator& comm) {
    std::mt19937_64 rng(1);
    std::normal_distribution<float> normal(0.0f, 1e-2f);
    for (const auto& shape : ciuic::fuzz::kStateShapes) {
      ciuic::Runtime rt(comm, ciuic::fuzz::ConfigOf(shape));
      if (shape.codec == std::string("int8")) rt.Save(dir + "/empty.state");
      for (int step = 0; step < 3; ++step) {
        std::vector<float> g(ciuic::fuzz::kTensorFloats);
        for (float& x : g) x = normal(rng);
        rt.AllReduce(g.data(), g.size(), ciuic::fuzz::kTensorId);
      }
      if (shape.codec == std::string("topk:0.1")) {
        // A bucket of several tensors too (its key has the top bit set).
        std::vector<float> a(30, 0.01f), b(40, -0.02f);
        rt.AllReduceTensors({{a.data(), a.size()}, {b.data(), b.size()}}, {20, 21});
      }
      rt.Save(dir + "/" + shape.name + ".state");
    }
    // The profile runtime: int8 and powersgd configurations in one file.
    ciuic::RuleRuntime rules(comm, ciuic::fuzz::RuleConfig());
    for (int step = 0; step < 3; ++step) {
      for (const size_t n : {ciuic::fuzz::kBucketFloats, ciuic::fuzz::kTensorFloats}) {
        std::vector<float> g(n);
        for (float& x : g) x = normal(rng);
        rules.AllReduce(g.data(), n, ciuic::DType::kFloat32, ciuic::fuzz::kTensorId + n, false);
      }
    }
    rules.Save(dir + "/rules.state");
    // Codec-state bytes: each buffer the codec keeps, filled with small values, at step 3.
    for (const auto& shape : ciuic::fuzz::kStateShapes) {
      const ciuic::Codec codec = ciuic::fuzz::CodecOf(shape);
      ciuic::CodecState st;
      codec.Prepare(st, ciuic::fuzz::kBucketFloats, ciuic::MemoryKind::kHost);
      st.step = 3;
      for (ciuic::Buffer* b : {&st.residual, &st.q}) {
        std::vector<float> v(b->bytes() / 4);
        for (float& x : v) x = normal(rng);
        if (!v.empty()) std::memcpy(b->data(), v.data(), b->bytes());
      }
      const auto bytes = ciuic::SaveCodecStateBytes(codec, ciuic::fuzz::kBucketFloats, st);
      std::ofstream(dir + "/" + shape.name + ".codec", std::ios::binary)
          .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    }
  });
  return 0;
}
