// Helpers of the training kernels that are neither CPU nor CUDA: names, workspace size, the host mask.
#include "kernels/train_kernels.h"

#include <cstdint>
#include <string>
#include <string_view>

#include "core/error.h"

namespace ciuic {

size_t TrainWorkspaceBytes(size_t rows, size_t cols, MemoryKind where) {
  const size_t chunks = (rows + kGradRowChunk - 1) / kGradRowChunk;
  // In floats: two partial rows per chunk; on a device also dz (rows × cols) and two row means per row.
  const size_t limit = SIZE_MAX / sizeof(float) / 4;
  if (cols != 0 && (rows > limit / cols || chunks > limit / cols)) {
    throw UsageError("training kernel workspace: rows × cols overflows");
  }
  const size_t partials = 2 * chunks * cols;
  return (where == MemoryKind::kDevice ? partials + rows * cols + 2 * rows : partials) * sizeof(float);
}

Activation ParseActivation(const char* name) {
  const std::string_view n = name ? name : "";
  if (n == "none") return Activation::kNone;
  if (n == "relu") return Activation::kRelu;
  if (n == "gelu") return Activation::kGeluErf;
  if (n == "gelu-tanh") return Activation::kGeluTanh;
  throw UsageError("activation '" + std::string(n) + "': expected none, relu, gelu or gelu-tanh");
}

const char* ActivationName(Activation a) {
  switch (a) {
    case Activation::kNone:
      return "none";
    case Activation::kRelu:
      return "relu";
    case Activation::kGeluErf:
      return "gelu";
    case Activation::kGeluTanh:
      return "gelu-tanh";
  }
  return "?";
}

void DropoutMask(const DropoutArgs& d, size_t n, uint8_t* keep) {
  const uint32_t threshold = tm::DropThreshold(d.p);
  for (size_t e = 0; e < n; ++e) keep[e] = tm::Kept(d, threshold, e) ? 1 : 0;
}

}  // namespace ciuic
