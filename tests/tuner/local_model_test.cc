// The calibrated local model: its curves interpolate as documented, every algorithm adds up the steps
// the runtime executes (checked against hand sums on a calibration with power-law curves, where the
// log-log interpolation is exact), ranks beyond the timed concurrency share the cores, and the tuner
// uses it for cpu_local once the link is calibrated.
#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"
#include "kernels/codec.h"
#include "tuner/calibrate.h"
#include "tuner/cost_model.h"
#include "tuner/local_model.h"
#include "tuner/plan_space.h"
#include "tuner/topology.h"
#include "tuner/workload.h"

namespace ciuic {
namespace {

TEST(TimeCurve, InterpolatesLogLogAndScalesLinearlyOutside) {
  TimeCurve c;
  EXPECT_EQ(c.Us(100), 0.0);
  c.Add(1000, 10);
  c.Add(4000, 160);  // t ∝ bytes² between the points
  EXPECT_DOUBLE_EQ(c.Us(1000), 10);
  EXPECT_DOUBLE_EQ(c.Us(4000), 160);
  EXPECT_NEAR(c.Us(2000), 40, 1e-9);
  EXPECT_DOUBLE_EQ(c.Us(500), 5);     // constant rate below the first point
  EXPECT_DOUBLE_EQ(c.Us(8000), 320);  // and above the last
  TimeCurve launch;                   // a launch-bound GPU kernel: its fixed cost stays below the smallest point
  launch.Add(1 << 20, 7.0);
  launch.Add(4 << 20, 7.0);
  EXPECT_DOUBLE_EQ(launch.Us(64 << 10), 7.0);
  c.Add(1000, 20);  // a newer value of a point replaces it
  EXPECT_DOUBLE_EQ(c.Us(1000), 20);
  EXPECT_EQ(c.points().size(), 2u);
}

// Every curve a pure rate (GB/s): log-log interpolation is then exact at every size.
Calibration RateCalibration(int concurrency) {
  Calibration cal;
  cal.concurrency = concurrency;
  auto rate = [](double gbps) {
    TimeCurve t;
    for (double b = 1024; b <= 1e10; b *= 4) t.Add(b, b / (gbps * 1e3));
    return t;
  };
  for (int p = 2; p <= 8; ++p) cal.sendrecv[p] = rate(10.0 / p);
  cal.kernels[{"add", "none"}] = rate(5);
  for (const char* codec : {"int8", "sign1", "topk:0.01", "randomk:0.01", "powersgd:4"}) {
    cal.kernels[{"encode", codec}] = rate(20);
    cal.kernels[{"encode_ef", codec}] = rate(16);
    cal.kernels[{"decode", codec}] = rate(40);
    cal.kernels[{"decode_acc", codec}] = rate(30);
    cal.kernels[{"hop", codec}] = rate(8);
  }
  return cal;
}

double Us(double bytes, double gbps) { return bytes / (gbps * 1e3); }

TEST(LocalModel, RingSumsItsStepsAndAdds) {
  const Calibration cal = RateCalibration(4);
  for (int p : {2, 3, 4}) {
    const double b = 48.0 * (1 << 20), c = b / p, link = 10.0 / p;
    const double want = (p - 1) * (Us(c, link) + Us(c, 5)) + (p - 1) * Us(c, link);
    EXPECT_NEAR(PredictLocalAllReduceUs(cal, {"none", "ring", b, p, false}), want, want * 1e-9) << p;
  }
}

TEST(LocalModel, CompressedRingMovesWireBytesAndPaysItsKernels) {
  const Calibration cal = RateCalibration(4);
  const int p = 4;
  const double b = 64.0 * (1 << 20), c = b / p, link = 10.0 / p;
  const double w = static_cast<double>(Codec(ParseCodec("int8")).WireBytes(static_cast<size_t>(c / 4)));
  const double want = Us(c, 20) + (p - 1) * (Us(w, link) + Us(c, 8)) + (p - 1) * Us(w, link) + Us(b, 40);
  EXPECT_NEAR(PredictLocalAllReduceUs(cal, {"int8", "ring", b, p, false}), want, want * 1e-9);
  // Error feedback first quantises the rank's own contribution: one more encode (with residual) and decode.
  EXPECT_NEAR(PredictLocalAllReduceUs(cal, {"int8", "ring", b, p, true}), want + Us(b, 16) + Us(b, 40), want * 1e-9);
}

TEST(LocalModel, DedicatedAlgorithms) {
  const Calibration cal = RateCalibration(4);
  const int p = 3;
  const double b = 12.0 * (1 << 20), link = 10.0 / p;
  {
    const double w = static_cast<double>(Codec(ParseCodec("topk:0.01")).WireBytes(static_cast<size_t>(b / 4)));
    // Rank 0's wire decoded over the buffer, the other P-1 scattered into it.
    const double want = Us(b, 20) + (p - 1) * Us(w, link) + Us(b, 40) + (p - 1) * Us(b, 30);
    EXPECT_NEAR(PredictLocalAllReduceUs(cal, {"topk:0.01", "auto", b, p, false}), want, want * 1e-9);
  }
  {
    const double c = b / p;
    const double w = static_cast<double>(Codec(ParseCodec("sign1")).WireBytes(static_cast<size_t>(c / 4)));
    const double want = Us(b, 16) + (p - 1) * Us(w, link) + Us(c, 40) + (p - 1) * Us(c, 30) + Us(c, 16) +
                        (p - 1) * Us(w, link) + Us(b, 40);
    EXPECT_NEAR(PredictLocalAllReduceUs(cal, {"sign1", "sign2", b, p, false}), want, want * 1e-9);
  }
  {
    // randomk: encode, the k values through the uncompressed ring, decode.
    const double k = 4.0 * static_cast<double>(SparseCount(static_cast<size_t>(b / 4), 0.01)), c = k / p;
    const double ring = (p - 1) * (Us(c, link) + Us(c, 5)) + (p - 1) * Us(c, link);
    const double want = Us(b, 20) + ring + Us(b, 40);
    EXPECT_NEAR(PredictLocalAllReduceUs(cal, {"randomk:0.01", "ring", b, p, false}), want, want * 1e-9);
  }
  // rd on 3 ranks: fold (two whole-message steps and an add), one halving and one doubling step.
  {
    const double want = 2 * Us(b, link) + Us(b, 5) + Us(b / 2, link) + Us(b / 2, 5) + Us(b / 2, link);
    EXPECT_NEAR(PredictLocalAllReduceUs(cal, {"none", "rd", b, p, false}), want, want * 1e-9);
  }
  EXPECT_GT(PredictLocalAllReduceUs(cal, {"powersgd:4", "powersgd", b, p, false}), Us(b, 20) + Us(b, 40));
}

TEST(LocalModel, MoreRanksThanTimedCopiesShareTheCores) {
  const Calibration two = RateCalibration(2), four = RateCalibration(4);
  const double b = 32.0 * (1 << 20), c = b / 4, link = 10.0 / 4;
  const double link_us = 2 * 3 * Us(c, link), add_us = 3 * Us(c, 5);
  EXPECT_NEAR(PredictLocalAllReduceUs(four, {"none", "ring", b, 4, false}), link_us + add_us, 1e-6);
  EXPECT_NEAR(PredictLocalAllReduceUs(two, {"none", "ring", b, 4, false}), link_us + 2 * add_us, 1e-6);
  // 3 ranks on 2 timed copies: two rounds of kernels (the third rank runs after the others), not 1.5.
  const double c3 = b / 3, link3 = 10.0 / 3;
  EXPECT_NEAR(PredictLocalAllReduceUs(two, {"none", "ring", b, 3, false}), 2 * 2 * Us(c3, link3) + 2 * 2 * Us(c3, 5),
              1e-6);
}

TEST(LocalModel, MissingCurvesAreNamedNotGuessed) {
  Calibration cal = RateCalibration(2);
  std::string missing;
  EXPECT_FALSE(CanPredictLocal(cal, {"none", "ring", 1e6, 16, false}, &missing));
  EXPECT_NE(missing.find("calibrate --ranks 16"), std::string::npos) << missing;
  EXPECT_THROW(PredictLocalAllReduceUs(cal, {"none", "ring", 1e6, 16, false}), UsageError);
  EXPECT_FALSE(CanPredictLocal(cal, {"fp16", "ring", 1e6, 2, false}, &missing));
  EXPECT_NE(missing.find("of fp16"), std::string::npos) << missing;
  EXPECT_FALSE(CanPredictLocal(cal, {"int8", "hier", 1e6, 2, false}, &missing));
  EXPECT_EQ(PredictLocalAllReduceUs(cal, {"int8", "ring", 0, 2, false}), 0.0);
}

TEST(LocalModel, TheTunerUsesItForThisMachineOnceTheLinkIsCalibrated) {
  const Topology t = LoadTopology("cpu_local");
  Calibration cal = RateCalibration(t.ranks());
  TimeCurve mpi;
  mpi.Add(1 << 20, 1234.0);
  cal.native_allreduce[{t.ranks(), "fp32"}] = mpi;
  bool feasible = false;
  const CommPlan plan = PlanOf({"int8", 4 << 20, 1, "ring"}, t, &feasible, &cal);
  ASSERT_TRUE(feasible);
  ASSERT_TRUE(static_cast<bool>(plan.local_us));
  const double want = PredictLocalAllReduceUs(cal, {"int8", "ring", 8 << 20, t.ranks(), true});
  EXPECT_DOUBLE_EQ(BucketUs(EffectiveFabric(t), t, plan, 8 << 20), t.ranks() > 1 ? want : 0.0);
  const CommPlan native = PlanOf({"none", 4 << 20, 1, "nccl"}, t, &feasible, &cal);
  ASSERT_TRUE(static_cast<bool>(native.local_us));
  EXPECT_DOUBLE_EQ(native.local_us(2 << 20), 2468.0);  // MPI's own allreduce, measured
  // Another topology never uses this machine's calibration.
  const CommPlan dgx = PlanOf({"int8", 4 << 20, 1, "ring"}, LoadTopology("dgx_a100"), &feasible, &cal);
  EXPECT_FALSE(static_cast<bool>(dgx.local_us));
  EXPECT_FALSE(static_cast<bool>(dgx.codec_us));
}

TEST(LocalModel, WithoutTheLinkTheKernelsStillCostWhatWasMeasured) {
  const Topology t = LoadTopology("cpu_local");
  Calibration cal = RateCalibration(t.ranks());
  cal.sendrecv.clear();
  bool feasible = false;
  const CommPlan plan = PlanOf({"int8", 4 << 20, 1, "ring"}, t, &feasible, &cal);
  ASSERT_TRUE(feasible);
  EXPECT_FALSE(static_cast<bool>(plan.local_us));
  ASSERT_TRUE(static_cast<bool>(plan.codec_us));
  const double b = 8 << 20;
  EXPECT_DOUBLE_EQ(plan.codec_us(b), CodecKernelUs(cal, {"int8", "ring", b, t.ranks(), true}));
  // A GPU's calibration never prices this machine's kernels.
  cal.device = "cuda:NVIDIA H100 80GB HBM3";
  EXPECT_FALSE(static_cast<bool>(PlanOf({"int8", 4 << 20, 1, "ring"}, t, &feasible, &cal).codec_us));
}

TEST(GpuCodecKernels, TheRingsKernelsAloneNoLinkNoAddsNoSharing) {
  Calibration cal = RateCalibration(1);
  cal.device = "cuda:NVIDIA H100 80GB HBM3";
  const int p = 8;
  const double b = 64.0 * (1 << 20), c = b / p;
  // encode one chunk, P-1 fused hops, decode the whole buffer; with error feedback the rank's own
  // contribution is quantised first.
  const double want = Us(c, 20) + (p - 1) * Us(c, 8) + Us(b, 40);
  EXPECT_NEAR(CodecKernelUs(cal, {"int8", "ring", b, p, false}), want, want * 1e-9);
  EXPECT_NEAR(CodecKernelUs(cal, {"int8", "ring", b, p, true}), want + Us(b, 16) + Us(b, 40), want * 1e-9);
  EXPECT_NEAR(CodecKernelUs(cal, {"int8", "hier", b, p, false}), want, want * 1e-9);  // costed as the ring
  EXPECT_FALSE(HasCodecKernels(cal, {"none", "ring", b, p, false}));
  EXPECT_FALSE(HasCodecKernels(cal, {"fp16", "ring", b, p, false}));  // not calibrated: never guessed
  EXPECT_THROW(CodecKernelUs(cal, {"fp16", "ring", b, p, false}), UsageError);
  // PowerSGD's encode keeps its own residual: "encode" also with error feedback.
  EXPECT_TRUE(HasCodecKernels(cal, {"powersgd:4", "powersgd", b, p, true}));
}

TEST(GpuCodecKernels, AGpuTopologyUsesACalibrationOfItsGpu) {
  Calibration cal = RateCalibration(1);
  cal.device = "cuda:NVIDIA H100 80GB HBM3";
  const Topology t = LoadTopology("dgx_h100");
  bool feasible = false;
  const CommPlan plan = PlanOf({"int8", 64 << 20, 1, "ring"}, t, &feasible, &cal);
  ASSERT_TRUE(feasible);
  ASSERT_TRUE(static_cast<bool>(plan.codec_us));
  EXPECT_FALSE(static_cast<bool>(plan.local_us));
  const double b = 64.0 * (1 << 20);
  EXPECT_DOUBLE_EQ(plan.codec_us(b), CodecKernelUs(cal, {"int8", "ring", b, t.ranks(), true}));
  // The bucket time: transfer, then the kernels as measured (the runtime does not overlap them).
  const CommPlan plain = PlanOf({"int8", 64 << 20, 1, "ring"}, t, &feasible);
  const double comm = PredictAllReduceUs(EffectiveFabric(t), plain.algo, b, plain.wire_ratio, 0.0);
  const double codec = plan.codec_us(b);
  EXPECT_NEAR(BucketUs(EffectiveFabric(t), t, plan, b), comm + codec, 1e-6);
  // Uncompressed: nothing to add.
  EXPECT_FALSE(static_cast<bool>(PlanOf({"none", 64 << 20, 1, "ring"}, t, &feasible, &cal).codec_us));
}

// Reduction precision: a 16-bit reduction is the library's uncompressed allreduce in that dtype, with
// the casts around it; nothing else takes it.
TEST(ReductionPrecision, OnlyTheLibrarysUncompressedAllreduceReducesIn16Bits) {
  const Topology t = LoadTopology("dgx_a100", 2);
  bool feasible = false;
  const CommPlan fp32 = PlanOf({"none", 64 << 20, 1, "nccl"}, t, &feasible);
  ASSERT_TRUE(feasible);
  const CommPlan bf16 = PlanOf({"none", 64 << 20, 1, "nccl", "bf16"}, t, &feasible);
  ASSERT_TRUE(feasible);
  EXPECT_EQ(bf16.algo, ModelAlgo::kNcclBest);
  EXPECT_EQ(bf16.wire_ratio, 2.0);
  EXPECT_EQ(bf16.codec_passes, 2.0);  // the cast down and the cast back
  // Bandwidth-bound: half the bytes plus two passes of casts at the codec kernels' streaming rate.
  const Fabric f = EffectiveFabric(t);
  const double b = 256.0 * (1 << 20);
  const double comm32 = BucketUs(f, t, fp32, b), comm16 = PredictAllReduceUs(f, ModelAlgo::kNcclBest, b, 2.0);
  const double casts = 2 * kGpuKernelLaunchUs + 2 * b / (CodecKernelGbps(t) * 1e3);
  EXPECT_GT(comm16, comm32 / 2);  // the latency terms stay
  EXPECT_LT(comm16, comm32 * 0.55);
  EXPECT_NEAR(BucketUs(f, t, bf16, b), comm16 + casts, 1e-6);
  for (const PlanChoice& c :
       {PlanChoice{"none", 64 << 20, 1, "ring", "bf16"}, PlanChoice{"none", 64 << 20, 1, "hier", "fp16"},
        PlanChoice{"int8", 64 << 20, 1, "ring", "bf16"}, PlanChoice{"none", 64 << 20, 1, "rd", "fp16"}}) {
    PlanOf(c, t, &feasible);
    EXPECT_FALSE(feasible) << c.codec << " " << c.algo << " " << c.precision;
  }
  EXPECT_EQ(GateName({"none", 1, 1, "nccl", "bf16"}), "none@bf16");
  EXPECT_EQ(GateName({"int8", 1, 1, "ring"}), "int8");
}

TEST(ReductionPrecision, CalibratedCastsAndTheMeasured16BitAllreduceCostIt) {
  // A GPU: the casts as calibrated (the fp16/bf16 codecs' encode and decode are the same kernels).
  Calibration gpu = RateCalibration(1);
  gpu.device = "cuda:NVIDIA H100 80GB HBM3";
  TimeCurve enc, dec;
  for (double x = 1024; x <= 1e10; x *= 4) {
    enc.Add(x, Us(x, 1000));
    dec.Add(x, Us(x, 800));
  }
  gpu.kernels[{"encode", "bf16"}] = enc;
  gpu.kernels[{"decode", "bf16"}] = dec;
  const Topology h100 = LoadTopology("dgx_h100");
  bool feasible = false;
  const CommPlan plan = PlanOf({"none", 64 << 20, 1, "nccl", "bf16"}, h100, &feasible, &gpu);
  ASSERT_TRUE(feasible);
  ASSERT_TRUE(static_cast<bool>(plan.codec_us));
  const double b = 64.0 * (1 << 20);
  EXPECT_NEAR(plan.codec_us(b), Us(b, 1000) + Us(b, 800), 1e-6);
  EXPECT_FALSE(static_cast<bool>(PlanOf({"none", 64 << 20, 1, "nccl", "fp16"}, h100, &feasible, &gpu).codec_us))
      << "fp16's casts are not calibrated: never guessed from bf16's";
  EXPECT_FALSE(static_cast<bool>(PlanOf({"none", 64 << 20, 1, "nccl"}, h100, &feasible, &gpu).codec_us));

  // This machine: the 16-bit allreduce measured whole (casts included), per rank count.
  const Topology t = LoadTopology("cpu_local");
  if (t.ranks() < 2) GTEST_SKIP() << "cpu_local has one rank here";
  Calibration cal = RateCalibration(t.ranks());
  std::string missing;
  EXPECT_FALSE(CanPredictLocal(cal, {"none", "native", b, t.ranks(), false, "bf16"}, &missing));
  EXPECT_NE(missing.find("native allreduce in bf16"), std::string::npos) << missing;
  EXPECT_FALSE(static_cast<bool>(PlanOf({"none", 4 << 20, 1, "nccl", "bf16"}, t, &feasible, &cal).local_us));
  TimeCurve mpi16;
  mpi16.Add(1 << 20, 3000.0);
  cal.native_allreduce[{t.ranks(), "bf16"}] = mpi16;
  const CommPlan local = PlanOf({"none", 4 << 20, 1, "nccl", "bf16"}, t, &feasible, &cal);
  ASSERT_TRUE(static_cast<bool>(local.local_us));
  EXPECT_DOUBLE_EQ(local.local_us(2 << 20), 6000.0);
}

}  // namespace
}  // namespace ciuic
