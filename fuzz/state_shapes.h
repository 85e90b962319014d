#pragma once
// The 1-rank runtimes the state-file fuzzer loads into and its seed corpus is saved from: one per
// kind of buffer a state file can hold (residual; residual and Q; residual and server residual;
// topk over a tensor list, whose bucket keys carry the top bit).
#include <memory>

#include "collectives/runtime.h"
#include "collectives/runtime_rules.h"

namespace ciuic::fuzz {

struct StateShape {
  const char* name;
  const char* algo;
  const char* codec;
};

inline constexpr StateShape kStateShapes[] = {
    {"int8", "ring", "int8"},
    {"powersgd", "powersgd", "powersgd:2"},
    {"sign2", "sign2", "sign1"},
    {"topk", "sparse", "topk:0.1"},
};

inline constexpr size_t kBucketFloats = 100;  // the corpus tensor of 250 spans buckets of 100, 100, 50
inline constexpr size_t kTensorFloats = 250;
inline constexpr uint64_t kTensorId = 7;

// The codec of a shape as the runtime and the C API make it (blocks of 32).
inline Codec CodecOf(const StateShape& s) {
  CodecSpec spec = ParseCodec(s.codec);
  spec.block = 32;
  return Codec(spec);
}

inline RuntimeConfig ConfigOf(const StateShape& s) {
  RuntimeConfig c;
  c.algo.algo = ParseAlgo(s.algo);
  c.algo.codec = ParseCodec(s.codec);
  c.algo.codec.block = 32;
  c.bucket_bytes = kBucketFloats * 4;
  return c;
}

// The profile runtime's file (several configurations in one): a tensor of kBucketFloats floats (400 B)
// takes int8 on the ring, one of kTensorFloats (1000 B) powersgd, both in buckets of kBucketFloats.
inline RuleRuntimeConfig RuleConfig() {
  auto p = std::make_shared<Profile>();
  p->topology = "cpu_local";
  p->fingerprint = "fuzz";
  const auto rule = [](uint64_t lo, uint64_t hi, const char* algo, const char* codec) {
    ProfileRule r;
    r.min_bytes = lo;
    r.max_bytes = hi;
    r.algo = algo;
    r.codec = codec;
    r.bucket_bytes = kBucketFloats * 4;
    return r;
  };
  p->rules = {rule(0, 600, "ring", "int8"), rule(600, 0, "powersgd", "powersgd:2")};
  RuleRuntimeConfig c;
  c.profile = p;
  c.fixed.algo.codec.block = 32;
  return c;
}

}  // namespace ciuic::fuzz
