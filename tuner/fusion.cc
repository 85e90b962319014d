// Per layer of a transformer (pre- or post-LN alike): two residual add + LayerNorm (after attention and
// after the FFN) at tokens x hidden and one bias + GELU (the FFN's first linear) at tokens x ffn, each
// forward and backward. Timed (or read from a calibration) at up to kMaxTokens tokens (and kMaxElements
// per tensor) and scaled linearly to the micro-batch's tokens (these kernels are linear in rows).
#include "tuner/fusion.h"

#include <algorithm>
#include <vector>

#include <fmt/format.h>

#include "core/buffer.h"
#include "core/files.h"
#include "core/parallel.h"
#include "kernels/codec_kernels.h"
#include "kernels/train_sequences.h"
#include "tuner/calibrate.h"

namespace ciuic {

namespace {

constexpr size_t kMaxTokens = 4096;
constexpr size_t kMaxElements = size_t{1} << 25;
constexpr int kRuns = 5;

double MedianUs(bool device, void (TrainSequence::*pass)(), TrainSequence& seq) {
  return MedianRunUs(device, kRuns, [&] { (seq.*pass)(); });
}

// The micro-batch's tokens, and the rows timed for them (the same for every kernel of the line).
size_t Tokens(const Workload& w, int batch) {
  return static_cast<size_t>(std::max(batch, 1)) * static_cast<size_t>(w.transformer.sequence);
}
size_t TimedRows(const Workload& w, int batch) {
  const TransformerShape& t = w.transformer;
  // At most kMaxTokens rows and kMaxElements per tensor (about 13 fp32 tensors live at once: <= 1.7 GB).
  const size_t widest = static_cast<size_t>(std::max(t.hidden, t.ffn));
  return std::max<size_t>(1, std::min({Tokens(w, batch), kMaxTokens, kMaxElements / widest}));
}

// Both kernels' fused and unfused curves in the calibration: the shape's times from them.
bool FromCalibration(const Calibration& cal, const FusionShape& s, FusionTimes* out) {
  const double bytes = static_cast<double>(s.rows) * static_cast<double>(s.cols) * 4;
  out->fused_us = cal.TrainUs(FusionCurveName(s), "fused", bytes);
  out->unfused_us = cal.TrainUs(FusionCurveName(s), "unfused", bytes);
  return out->fused_us > 0 && out->unfused_us > 0;
}

}  // namespace

std::string FusionCurveName(const FusionShape& s) { return fmt::format("train:{}:{}", s.kernel, s.cols); }

std::vector<FusionShape> FusionShapes(const Workload& w, int batch) {
  const TransformerShape& t = w.transformer;
  if (t.hidden == 0) return {};
  const size_t rows = TimedRows(w, batch);
  return {{"add-ln", rows, static_cast<size_t>(t.hidden)}, {"bias-gelu", rows, static_cast<size_t>(t.ffn)}};
}

FusionTimes TimeFusion(const FusionShape& s, bool device) {
  TrainSequence seq(FindTrainKernel(s.kernel), s.rows, s.cols, DType::kFloat32, device, 0.1f, 7);
  seq.FusedForward();
  seq.UnfusedForward();
  FusionTimes f;
  f.fused_us =
      MedianUs(device, &TrainSequence::FusedForward, seq) + MedianUs(device, &TrainSequence::FusedBackward, seq);
  f.unfused_us =
      MedianUs(device, &TrainSequence::UnfusedForward, seq) + MedianUs(device, &TrainSequence::UnfusedBackward, seq);
  return f;
}

std::string FusionAdvice(const Workload& w, int batch, bool gpu_study, const std::string& device_name,
                         const Calibration* cal) {
  const TransformerShape& t = w.transformer;
  if (t.hidden == 0) return fmt::format("fusion: not estimated ({} has no transformer shape)", w.name);
  const std::vector<FusionShape> shapes = FusionShapes(w, batch);
  const size_t tokens = Tokens(w, batch), timed = shapes.front().rows;
  const double scale = static_cast<double>(tokens) / static_cast<double>(timed);
  FusionTimes add_ln, bias_gelu;
  std::string where;
  if (cal && FromCalibration(*cal, shapes[0], &add_ln) && FromCalibration(*cal, shapes[1], &bias_gelu)) {
    where = fmt::format("calibrated on {}", cal->device);
  } else {
    const bool device = gpu_study;
    if (gpu_study && !cuda::Available())
      return fmt::format(
          "fusion: not estimated for {} (no calibration of its training kernels, and this host has no GPU: "
          "ciuic-tune calibrate --device cuda there, then --calibration DB here)",
          device_name);
    try {
      add_ln = TimeFusion(shapes[0], device);
      bias_gelu = TimeFusion(shapes[1], device);
    } catch (const std::exception& e) {  // out of memory, a device fault: the study goes on without it
      return fmt::format("fusion: not estimated ({})", e.what());
    }
    // The device the kernels ran on, by name; a GPU other than the study's says so.
    if (device) {
      const std::string here = CudaDeviceName();
      where = "timed now on " + (here.empty() ? std::string("this host's GPU") : here);
      if (here != device_name) where += fmt::format("; the study is for {}", device_name);
    } else {
      where = fmt::format("timed now on {}, {} threads", CpuModelName(), ParallelThreads());
    }
  }
  const double fused_ms = t.layers * scale * (2 * add_ln.fused_us + bias_gelu.fused_us) / 1e3;
  const double unfused_ms = t.layers * scale * (2 * add_ln.unfused_us + bias_gelu.unfused_us) / 1e3;
  return fmt::format(
      "fusion: fused add-ln x{} + bias-gelu x{} per step ({} tokens x {}/{}, fp32, forward + backward, {}{}): "
      "{:.1f} ms vs {:.1f} ms unfused: saves {:.1f} ms per step ({:.2f}x)",
      2 * t.layers, t.layers, tokens, t.hidden, t.ffn, where,
      timed < tokens ? fmt::format("; at {} tokens, scaled x{:.3g}", timed, scale) : std::string(), fused_ms,
      unfused_ms, unfused_ms - fused_ms, fused_ms > 0 ? unfused_ms / fused_ms : 0.0);
}

}  // namespace ciuic
