// Per layer of a transformer (pre- or post-LN alike): two residual add + LayerNorm (after attention and
// after the FFN) at tokens x hidden and one bias + GELU (the FFN's first linear) at tokens x ffn, each
// forward and backward. Timed at up to kMaxTokens tokens (and kMaxElements per tensor) and scaled
// linearly to the micro-batch's tokens (these kernels are linear in rows), median of a few runs.
#include "tuner/fusion.h"

#include <algorithm>
#include <vector>

#include <fmt/format.h>

#include "core/buffer.h"
#include "core/files.h"
#include "core/parallel.h"
#include "kernels/codec_kernels.h"
#include "kernels/train_sequences.h"

namespace ciuic {

namespace {

constexpr size_t kMaxTokens = 4096;
constexpr size_t kMaxElements = size_t{1} << 25;
constexpr int kRuns = 5;

double MedianUs(bool device, void (TrainSequence::*pass)(), TrainSequence& seq) {
  return MedianRunUs(device, kRuns, [&] { (seq.*pass)(); });
}

struct Saved {
  double fused_us = 0, unfused_us = 0;  // forward + backward, at the timed tokens
};

Saved TimeKernel(const char* name, size_t tokens, size_t cols, bool device) {
  TrainSequence seq(FindTrainKernel(name), tokens, cols, DType::kFloat32, device, 0.1f, 7);
  seq.FusedForward();
  seq.UnfusedForward();
  Saved s;
  s.fused_us =
      MedianUs(device, &TrainSequence::FusedForward, seq) + MedianUs(device, &TrainSequence::FusedBackward, seq);
  s.unfused_us =
      MedianUs(device, &TrainSequence::UnfusedForward, seq) + MedianUs(device, &TrainSequence::UnfusedBackward, seq);
  return s;
}

}  // namespace

std::string FusionAdvice(const Workload& w, int batch, bool gpu_study, const std::string& device_name) {
  const TransformerShape& t = w.transformer;
  if (t.hidden == 0) return fmt::format("fusion: not estimated ({} has no transformer shape)", w.name);
  const bool device = gpu_study;
  if (gpu_study && !cuda::Available())
    return fmt::format(
        "fusion: not estimated for {} (the kernels are timed on the study's device; this host has "
        "no GPU: run ciuic-tune there, or ciuic-bench kernel add-ln|bias-gelu --device cuda)",
        device_name);
  const size_t tokens = static_cast<size_t>(batch) * t.sequence;
  // At most kMaxTokens rows and kMaxElements per tensor (about 13 fp32 tensors live at once: <= 1.7 GB).
  const size_t widest = static_cast<size_t>(std::max(t.hidden, t.ffn));
  const size_t timed = std::max<size_t>(1, std::min({tokens, kMaxTokens, kMaxElements / widest}));
  const double scale = static_cast<double>(tokens) / timed;
  Saved add_ln, bias_gelu;
  try {
    add_ln = TimeKernel("add-ln", timed, t.hidden, device);
    bias_gelu = TimeKernel("bias-gelu", timed, t.ffn, device);
  } catch (const std::exception& e) {  // out of memory, a device fault: the study goes on without it
    return fmt::format("fusion: not estimated ({})", e.what());
  }
  const double fused_ms = t.layers * scale * (2 * add_ln.fused_us + bias_gelu.fused_us) / 1e3;
  const double unfused_ms = t.layers * scale * (2 * add_ln.unfused_us + bias_gelu.unfused_us) / 1e3;
  // The device the kernels ran on, by name; a GPU other than the study's says so.
  std::string where;
  if (device) {
    const std::string here = CudaDeviceName();
    where = here.empty() ? "this host's GPU" : here;
    if (here != device_name) where += fmt::format("; the study is for {}", device_name);
  } else {
    where = fmt::format("{}, {} threads", CpuModelName(), ParallelThreads());
  }
  return fmt::format(
      "fusion: fused add-ln x{} + bias-gelu x{} per step ({} tokens x {}/{}, fp32, forward + backward, timed now on "
      "{}{}): {:.1f} ms vs {:.1f} ms unfused: saves {:.1f} ms per step ({:.2f}x)",
      2 * t.layers, t.layers, tokens, t.hidden, t.ffn, where,
      timed < tokens ? fmt::format("; at {} tokens, scaled x{:.3g}", timed, scale) : std::string(), fused_ms,
      unfused_ms, unfused_ms - fused_ms, fused_ms > 0 ? unfused_ms / fused_ms : 0.0);
}

}  // namespace ciuic
