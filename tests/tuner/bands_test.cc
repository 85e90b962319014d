// The band choice on its own (tuner/bands.h): every input passed explicitly, no study around it.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <sstream>
#include <string>

#include "collectives/profile.h"
#include "tuner/bands.h"
#include "tuner/plan_space.h"
#include "tuner/topology.h"

namespace ciuic {
namespace {

// The gate verdict of every configuration the space holds: `lossy_pass` for lossy ones.
std::map<std::string, bool> Gate(const SearchSpace& space, const Topology& t, bool lossy_pass) {
  std::map<std::string, bool> gate;
  for (uint64_t i = 0; i < space.Size(); ++i) {
    const PlanChoice c = ChoiceOf(space, space.FromIndex(i), t);
    gate[GateName(c)] = GateName(c) == "none" || lossy_pass;
  }
  return gate;
}

struct Bands : ::testing::Test {
  // A slow PCIe box: on the model a lossy codec wins the large bands by far.
  Topology topo = LoadTopology("pcie_8gpu", 4);
  SearchSpace space = AllReducePlanSpace(topo);
  std::string target = "ciuic";
  PlanChoice lossy_best{"int8", 25.0 * (1 << 20), 1, "ring"};
  std::ostringstream log;

  std::vector<ProfileRule> Pick(
      const std::map<std::string, bool>& gate, const PlanChoice& best, double min_gain,
      std::function<bool(const PlanChoice&)> fits = [](const PlanChoice&) { return true; }) {
    const BandInputs in{topo, space, gate, nullptr, target, min_gain, 3, fits, nullptr};
    return PickBandRules(in, best, log);
  }
};

TEST_F(Bands, EveryBandGetsOneRuleInOrderAndALossyCodecWhereItPays) {
  const auto rules = Pick(Gate(space, topo, true), lossy_best, 0.10);
  const auto bands = SizeBands();
  ASSERT_EQ(rules.size(), bands.size());
  int lossy = 0;
  for (size_t i = 0; i < rules.size(); ++i) {
    EXPECT_EQ(rules[i].min_bytes, bands[i].first) << i;
    EXPECT_EQ(rules[i].max_bytes, bands[i].second) << i;
    EXPECT_TRUE(std::isfinite(rules[i].predicted_us)) << i;
    EXPECT_GE(rules[i].bucket_bytes, kMinBucketBytes) << i;
    if (rules[i].codec != "none") {
      ++lossy;
      EXPECT_EQ(rules[i].gate, "passed") << i;
    }
  }
  EXPECT_GT(lossy, 0) << log.str();
}

TEST_F(Bands, NothingLossyWithoutTheGateAWinningStepOrTheMinimumGain) {
  const auto only_lossless = [&](const std::vector<ProfileRule>& rules, const char* why) {
    ASSERT_FALSE(rules.empty()) << why;
    for (const auto& r : rules) {
      EXPECT_EQ(r.codec, "none") << why << " band " << r.min_bytes;
      EXPECT_EQ(r.gate, "n/a") << why << " band " << r.min_bytes;
    }
  };
  only_lossless(Pick(Gate(space, topo, false), lossy_best, 0.10), "gate failed");
  only_lossless(Pick(Gate(space, topo, true), PlanChoice{"none", 25.0 * (1 << 20), 1, "ring"}, 0.10), "lossless step");
  EXPECT_NE(log.str().find("bands: lossless only"), std::string::npos) << log.str();
  only_lossless(Pick(Gate(space, topo, true), lossy_best, 1e9), "min gain");
  EXPECT_NE(log.str().find("lossless chosen"), std::string::npos) << log.str();
}

TEST_F(Bands, TheStateLimitAndTheTargetAreObeyedAndNothingFeasibleLeavesAnEmptyRule) {
  const auto fits_lossless = [](const PlanChoice& c) { return c.codec == "none"; };
  for (const auto& r : Pick(Gate(space, topo, true), lossy_best, 0.0, fits_lossless)) EXPECT_EQ(r.codec, "none");
  target = "nccl";  // the library's own uncompressed allreduce at fp32, nothing else
  for (const auto& r : Pick(Gate(space, topo, true), lossy_best, 0.0)) {
    EXPECT_EQ(r.codec, "none");
    EXPECT_EQ(r.precision, "fp32");
    EXPECT_EQ(r.algo, "nccl");
  }
  target = "ciuic";
  const auto rules = Pick(Gate(space, topo, true), lossy_best, 0.0, [](const PlanChoice&) { return false; });
  ASSERT_EQ(rules.size(), SizeBands().size());
  for (const auto& r : rules) {
    EXPECT_FALSE(std::isfinite(r.predicted_us));
    EXPECT_TRUE(r.codec.empty()) << r.codec;
  }
}

}  // namespace
}  // namespace ciuic
