// ciuic-tune's fusion line (tuner/fusion.h): a transformer workload's shape read from its file, the
// kernels timed at it on this CPU with a saving that is the difference of the two totals, the line
// that declines without a shape or without the study's GPU.
#include <gtest/gtest.h>

#include <regex>
#include <string>

#include "core/error.h"
#include "core/files.h"
#include "kernels/codec_kernels.h"
#include "tuner/calibrate.h"
#include "tuner/fusion.h"
#include "tuner/workload.h"

namespace ciuic {
namespace {

std::string TinyTransformer(const std::string& extra) {
  return R"({"schema": "ciuic.workload/1", "name": "tiny_tf", "dtype": "fp32", "parameters": 96,
             "default_batch_per_device": 4, "order": "backward",)" +
         extra + R"("tensors": [{"name": "w", "shape": [8, 12], "forward_flops": 192}]})";
}

TEST(Fusion, TimesTheTransformerShapeAndSubtracts) {
  const Workload w = ParseWorkload(
      TinyTransformer(R"("transformer": {"hidden": 96, "sequence": 16, "layers": 3, "ffn": 384},)"), "t.json");
  ASSERT_EQ(w.transformer.hidden, 96);
  ASSERT_EQ(w.transformer.ffn, 384);
  const std::string line = FusionAdvice(w, w.default_batch, /*gpu_study=*/false, "");
  // "... x6 + bias-gelu x3 per step (64 tokens x 96/384, ...): F ms vs U ms unfused: saves S ms per step (R x)"
  const std::regex re(R"(add-ln x6 \+ bias-gelu x3 per step \(64 tokens x 96/384.*: ([0-9.]+) ms vs ([0-9.]+) ms )"
                      R"(unfused: saves (-?[0-9.]+) ms per step \(([0-9.]+)x\))");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(line, m, re)) << line;
  const double fused = std::stod(m[1]), unfused = std::stod(m[2]), saved = std::stod(m[3]);
  EXPECT_GT(fused, 0.0);
  EXPECT_GT(unfused, 0.0);
  EXPECT_NEAR(saved, unfused - fused, 0.11);                  // one decimal each
  EXPECT_EQ(line.find("scaled"), std::string::npos) << line;  // 64 tokens: timed as they are
  // The device it was timed on, by name.
  EXPECT_NE(line.find("timed now on " + CpuModelName() + ", "), std::string::npos) << line;
}

TEST(Fusion, ScalesFromTheTimedTokensToTheMicroBatch) {
  // 2048 x 4 = 8192 tokens: timed at 4096, reported x2.
  const Workload w = ParseWorkload(
      TinyTransformer(R"("transformer": {"hidden": 32, "sequence": 2048, "layers": 2, "ffn": 64},)"), "t.json");
  const std::string line = FusionAdvice(w, 4, false, "");
  EXPECT_NE(line.find("add-ln x4 + bias-gelu x2 per step (8192 tokens x 32/64"), std::string::npos) << line;
  EXPECT_NE(line.find("at 4096 tokens, scaled x2)"), std::string::npos) << line;
}

// A calibration of the study's device (ciuic-tune calibrate there, rows "train:<kernel>:<cols>") gives the
// line without timing anything: the planted times, summed per layer and scaled to the micro-batch.
TEST(Fusion, ACalibrationOfTheStudysDeviceGivesTheLine) {
  // 2048 x 4 = 8192 tokens: read at 4096 rows, x2.
  const Workload w = ParseWorkload(
      TinyTransformer(R"("transformer": {"hidden": 256, "sequence": 2048, "layers": 3, "ffn": 1024},)"), "t.json");
  const std::vector<FusionShape> shapes = FusionShapes(w, 4);
  ASSERT_EQ(shapes.size(), 2u);
  EXPECT_EQ(shapes[0].kernel, "add-ln");
  EXPECT_EQ(shapes[0].rows, 4096u);
  EXPECT_EQ(shapes[0].cols, 256u);
  EXPECT_EQ(shapes[1].kernel, "bias-gelu");
  EXPECT_EQ(shapes[1].cols, 1024u);
  Calibration cal;
  cal.device = "cuda:NVIDIA H100 80GB HBM3";
  // Points at the line's own shapes (and one other size each, so that the curve is a curve).
  const double ln_bytes = 4096.0 * 256 * 4, gelu_bytes = 4096.0 * 1024 * 4;
  cal.train[{"train:add-ln:256", "fused"}].Add(ln_bytes, 100);
  cal.train[{"train:add-ln:256", "fused"}].Add(4 * ln_bytes, 400);
  cal.train[{"train:add-ln:256", "unfused"}].Add(ln_bytes, 250);
  cal.train[{"train:add-ln:256", "unfused"}].Add(4 * ln_bytes, 1000);
  cal.train[{"train:bias-gelu:1024", "fused"}].Add(gelu_bytes, 300);
  cal.train[{"train:bias-gelu:1024", "fused"}].Add(ln_bytes, 75);
  // One variant missing: neither kernel is read from the calibration.
  const std::string partial = FusionAdvice(w, 4, true, "NVIDIA H100 80GB HBM3 (SXM5)", &cal);
  EXPECT_EQ(partial.find("calibrated"), std::string::npos) << partial;
  if (!cuda::Available()) {
    EXPECT_NE(partial.find("not estimated for NVIDIA H100 80GB HBM3 (SXM5) (no calibration"), std::string::npos)
        << partial;
  }
  cal.train[{"train:bias-gelu:1024", "unfused"}].Add(gelu_bytes, 330);
  const std::string line = FusionAdvice(w, 4, true, "NVIDIA H100 80GB HBM3 (SXM5)", &cal);
  // Per layer 2 x add-ln + bias-gelu: fused 2 x 100 + 300 = 500 us, unfused 2 x 250 + 330 = 830; x 3 layers
  // x 2 (8192 tokens read at 4096): 3.0 ms against 4.98 ms.
  EXPECT_NE(line.find("add-ln x6 + bias-gelu x3 per step (8192 tokens x 256/1024, fp32, forward + backward, "
                      "calibrated on cuda:NVIDIA H100 80GB HBM3; at 4096 tokens, scaled x2): 3.0 ms vs 5.0 ms "
                      "unfused: saves 2.0 ms per step (1.66x)"),
            std::string::npos)
      << line;
  EXPECT_EQ(line.find("timed now"), std::string::npos) << line;
  // A curve of another width is not this workload's: not read.
  Calibration wider = cal;
  wider.train.erase({"train:bias-gelu:1024", "unfused"});
  wider.train[{"train:bias-gelu:2048", "unfused"}].Add(gelu_bytes, 330);
  EXPECT_EQ(FusionAdvice(w, 4, true, "NVIDIA H100 80GB HBM3 (SXM5)", &wider).find("calibrated"), std::string::npos);
}

TEST(Fusion, DeclinesWithoutAShapeOrTheStudysDevice) {
  const Workload plain = ParseWorkload(TinyTransformer(""), "t.json");
  EXPECT_NE(FusionAdvice(plain, 4, false, "").find("not estimated (tiny_tf has no transformer shape)"),
            std::string::npos);
  if (!cuda::Available()) {
    const Workload w = ParseWorkload(
        TinyTransformer(R"("transformer": {"hidden": 8, "sequence": 4, "layers": 1, "ffn": 32},)"), "t.json");
    EXPECT_NE(FusionAdvice(w, 4, true, "NVIDIA A100").find("not estimated for NVIDIA A100"), std::string::npos);
  }
  EXPECT_THROW(ParseWorkload(TinyTransformer(R"("transformer": {"hidden": 8, "sequence": 4, "layers": 1},)"), "t.json"),
               InputError);
}

}  // namespace
}  // namespace ciuic
