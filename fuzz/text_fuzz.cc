// libFuzzer harness for the text inputs users hand to ciuic: the size grammar (--sizes) and the
// strict JSON readers of profiles, topologies and workloads. Built once per reader (CIUIC_FUZZ_TARGET
// names it). A refusal must be a ciuic::Error (one clear message); any other exception (a JSON
// library's own, std::out_of_range...), a crash or a sanitizer report is a finding. Run with its seed
// corpus: scripts/fuzz.sh SECONDS, or build-fuzz/fuzz/profile_fuzz fuzz/corpus/profile -max_total_time=60
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/error.h"
#include "core/sizes.h"
#if CIUIC_FUZZ_TARGET != 0
#include "collectives/profile.h"
#include "tuner/topology.h"
#include "tuner/workload.h"
#endif

// 0 sizes, 1 profile, 2 topology, 3 workload
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
#if CIUIC_FUZZ_TARGET == 0
    for (uint64_t s : ciuic::ParseSizeList(text)) {
      if (s == 0) __builtin_trap();  // the grammar promises positive sizes
    }
#elif CIUIC_FUZZ_TARGET == 1
    (void)ciuic::ParseProfile(text, "fuzz.json");
#elif CIUIC_FUZZ_TARGET == 2
    (void)ciuic::ParseTopology(text, "fuzz.json");
#elif CIUIC_FUZZ_TARGET == 3
    (void)ciuic::ParseWorkload(text, "fuzz.json");
#endif
  } catch (const ciuic::Error&) {
    // refused with a message: what bad input must get
  }
  return 0;
}
