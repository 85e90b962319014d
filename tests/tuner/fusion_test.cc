// ciuic-tune's fusion line (tuner/fusion.h): a transformer workload's shape read from its file, the
// kernels timed at it on this CPU with a saving that is the difference of the two totals, the line
// that declines without a shape or without the study's GPU.
#include <gtest/gtest.h>

#include <regex>
#include <string>

#include "core/error.h"
#include "core/files.h"
#include "kernels/codec_kernels.h"
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
