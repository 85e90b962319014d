// The accuracy gate (tuner/gate.h): codecs that train like uncompressed pass, codecs that lose accuracy
// or diverge at the stress learning rate fail, the tolerances decide, and verdicts are deterministic.
// scripts/digits_tta.py checks the same verdicts against real training on scikit-learn's digits.
#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"
#include "tuner/gate.h"

namespace ciuic {
namespace {

GateOptions OneSeed() {
  GateOptions o;
  o.seeds = 1;
  return o;
}

TEST(Gate, CodecsThatTrainLikeUncompressedPass) {
  for (const char* codec : {"none", "int8", "none@bf16"}) {
    const GateResult r = RunAccuracyGate(codec, OneSeed());
    EXPECT_TRUE(r.passed) << codec << ": accuracy " << r.accuracy << " vs " << r.baseline_accuracy;
    ASSERT_EQ(r.seeds.size(), 2u) << "one nominal and one stress run";
    EXPECT_FALSE(r.seeds[0].stress);
    EXPECT_TRUE(r.seeds[1].stress);
    EXPECT_GT(r.seeds[0].baseline_accuracy, 0.9) << "the task is learnable uncompressed";
    EXPECT_GT(r.seeds[1].baseline_accuracy, 0.9) << "uncompressed survives the stress learning rate";
  }
}

TEST(Gate, CodecsThatDivergeOrLoseAccuracyFail) {
  const GateResult sign1 = RunAccuracyGate("sign1", OneSeed());
  EXPECT_FALSE(sign1.passed);
  EXPECT_TRUE(sign1.seeds[0].passed) << "sign1 trains at the nominal learning rate";
  EXPECT_FALSE(sign1.seeds[1].passed) << "and breaks down at the stress one";
  EXPECT_TRUE(sign1.seeds[1].stress);
  const GateResult randomk = RunAccuracyGate("randomk:0.01", OneSeed());
  EXPECT_FALSE(randomk.passed);
  EXPECT_LT(randomk.accuracy, 0.5);
  const GateResult topk = RunAccuracyGate("topk:0.001", OneSeed());
  EXPECT_FALSE(topk.passed);
  EXPECT_TRUE(std::isfinite(topk.final_loss));
  // The tolerances decide: with room for any loss of accuracy and loss, the same run passes.
  GateOptions loose = OneSeed();
  loose.tolerance = loose.stress_tolerance = 1.0;
  loose.loss_tolerance = 1e9;
  EXPECT_TRUE(RunAccuracyGate("topk:0.001", loose).passed);
}

TEST(Gate, VerdictsAreDeterministicAndOptionsChecked) {
  const GateResult a = RunAccuracyGate("int4", OneSeed());
  const GateResult b = RunAccuracyGate("int4", OneSeed());
  ASSERT_EQ(a.seeds.size(), b.seeds.size());
  for (size_t i = 0; i < a.seeds.size(); ++i) {
    EXPECT_EQ(a.seeds[i].accuracy, b.seeds[i].accuracy);
    EXPECT_EQ(a.seeds[i].loss, b.seeds[i].loss);
  }
  GateOptions bad = OneSeed();
  bad.seeds = 0;
  EXPECT_THROW(RunAccuracyGate("int8", bad), UsageError);
  EXPECT_NE(GateConfigKey(OneSeed()), GateConfigKey(GateOptions{})) << "the seeds are part of the stored key";
}

// Accumulation: k micro-batches per allreduce and optimizer step, judged against syncing every
// micro-batch over the same samples. The key of a verdict at 1 is what it was before the option.
TEST(Gate, AccumulationIsJudgedAgainstSyncingEveryMicroBatch) {
  GateOptions one = OneSeed();
  EXPECT_EQ(GateConfigKey(one).find("accum"), std::string::npos) << "verdicts stored before the option stay valid";
  GateOptions k4 = OneSeed();
  k4.accumulation_steps = 4;
  EXPECT_NE(GateConfigKey(k4).find(" accum=4"), std::string::npos);
  // Uncompressed at k = 1 is its own baseline; at k = 4 it trains (a quarter of the optimizer steps)
  // but is compared with the k = 1 run on the same samples.
  const GateResult at1 = RunAccuracyGate("none", one);
  const GateResult at4 = RunAccuracyGate("none", k4);
  EXPECT_EQ(at1.seeds[0].accuracy, at1.seeds[0].baseline_accuracy);
  EXPECT_EQ(at4.seeds[0].baseline_accuracy, at1.seeds[0].baseline_accuracy);
  EXPECT_NE(at4.seeds[0].accuracy, at4.seeds[0].baseline_accuracy) << "accumulation changed the run";
  EXPECT_GT(at4.seeds[0].accuracy, 0.5) << "it still learns";
  // Everything in one optimizer step (300 micro-batches, one update) learns next to nothing.
  GateOptions all = OneSeed();
  all.accumulation_steps = all.steps;
  const GateResult once = RunAccuracyGate("none", all);
  EXPECT_FALSE(once.passed);
  EXPECT_LT(once.seeds[0].accuracy, at4.seeds[0].accuracy);
  GateOptions bad = OneSeed();
  bad.accumulation_steps = 0;
  EXPECT_THROW(RunAccuracyGate("none", bad), UsageError);
  bad.accumulation_steps = bad.steps + 1;
  EXPECT_THROW(RunAccuracyGate("none", bad), UsageError);
}

}  // namespace
}  // namespace ciuic
