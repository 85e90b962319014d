// The fused and unfused sequences of kernels/train_sequences.h.
#include "kernels/train_sequences.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/config.h"
#include "core/error.h"
#include "core/parallel.h"
#include "core/timer.h"
#include "kernels/quant_math.h"

#if CIUIC_HAVE_CUDA
#include <cuda_runtime.h>

#include "core/cuda_check.h"
#endif

namespace ciuic {

namespace {

MemoryKind Kind(bool device) { return device ? MemoryKind::kDevice : MemoryKind::kHost; }

// n values of dtype t, normal(mean, sd) by Box-Muller on the Philox stream keyed by seed: element i from
// counter i, so the tensor is the same whatever the thread count.
Buffer RandomTensor(DType t, size_t n, float mean, float sd, uint64_t seed, bool device) {
  std::vector<uint8_t> host(n * DTypeSize(t));
  ParallelFor(n, [&](size_t b, size_t e) {
    for (size_t i = b; i < e; ++i) {
      const double u1 = (qm::Uniform32(seed, 1, 2 * i) + 0.5) / 4294967296.0;
      const double u2 = qm::Uniform32(seed, 1, 2 * i + 1) / 4294967296.0;
      const float v = mean + sd * static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
      if (t == DType::kFloat32) {
        std::memcpy(host.data() + 4 * i, &v, 4);
      } else {
        const uint16_t bits = t == DType::kFloat16 ? tm::Store<tm::F16>(v).bits : tm::Store<tm::BF16>(v).bits;
        std::memcpy(host.data() + 2 * i, &bits, 2);
      }
    }
  });
  Buffer b(std::max<size_t>(host.size(), 4), Kind(device));
  CopyBytes(b.data(), Kind(device), host.data(), MemoryKind::kHost, host.size());
  return b;
}

Buffer Zeros(size_t bytes, bool device) {
  Buffer b(std::max<size_t>(bytes, 4), Kind(device));
  const std::vector<uint8_t> zero(bytes, 0);
  CopyBytes(b.data(), Kind(device), zero.data(), MemoryKind::kHost, bytes);
  return b;
}

std::vector<float> HostFloats(const Buffer& b, DType t, size_t n, bool device) {
  std::vector<uint8_t> bytes(n * DTypeSize(t));
  CopyBytes(bytes.data(), MemoryKind::kHost, b.data(), Kind(device), bytes.size());
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i) {
    if (t == DType::kFloat32) {
      std::memcpy(&out[i], bytes.data() + 4 * i, 4);
    } else {
      uint16_t bits;
      std::memcpy(&bits, bytes.data() + 2 * i, 2);
      out[i] = t == DType::kFloat16 ? tm::Load(tm::F16{bits}) : tm::Load(tm::BF16{bits});
    }
  }
  return out;
}

double RelativeDiff(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, static_cast<double>(std::fabs(a[i] - b[i])));
    scale = std::max(scale, static_cast<double>(std::fabs(b[i])));
  }
  return scale > 0 ? diff / scale : diff;
}

float* F(Buffer& b) { return static_cast<float*>(b.data()); }

}  // namespace

void WaitForDevice(bool device) {
#if CIUIC_HAVE_CUDA
  if (device) CIUIC_CUDA_CHECK(cudaDeviceSynchronize());
#else
  (void)device;
#endif
}

double MedianRunUs(bool device, int iters, const std::function<void()>& fn) {
  for (int i = 0; i < 2; ++i) fn();
  WaitForDevice(device);
  auto one = [&] {
    if (device) {
      DeviceEventTimer timer(nullptr);
      timer.Start();
      fn();
      timer.Stop();
      return timer.ElapsedUs();
    }
    const double t0 = NowSeconds();
    fn();
    return (NowSeconds() - t0) * 1e6;
  };
  std::vector<double> samples{one()};
  const int n = iters > 0 ? iters : static_cast<int>(std::clamp(3e5 / std::max(samples[0], 1.0), 3.0, 50.0));
  while (static_cast<int>(samples.size()) < n) samples.push_back(one());
  return Percentile(samples, 50);
}

const std::vector<TrainKernelName>& TrainKernelNames() {
  static const std::vector<TrainKernelName> names = {
      {"ln-dropout-gelu", TrainFamily::kLnActDropout, Activation::kGeluErf, "LayerNorm, GELU (erf), dropout"},
      {"ln-dropout-gelu-tanh", TrainFamily::kLnActDropout, Activation::kGeluTanh, "LayerNorm, GELU (tanh), dropout"},
      {"ln-dropout-relu", TrainFamily::kLnActDropout, Activation::kRelu, "LayerNorm, ReLU, dropout"},
      {"bias-gelu", TrainFamily::kBiasAct, Activation::kGeluErf, "bias + GELU (erf): a linear layer's epilogue"},
      {"bias-gelu-tanh", TrainFamily::kBiasAct, Activation::kGeluTanh, "bias + GELU (tanh)"},
      {"bias-relu", TrainFamily::kBiasAct, Activation::kRelu, "bias + ReLU"},
      {"add-ln", TrainFamily::kAddLn, Activation::kNone, "residual add + LayerNorm"},
  };
  return names;
}

const TrainKernelName& FindTrainKernel(const std::string& name) {
  std::string known;
  for (const auto& k : TrainKernelNames()) {
    if (name == k.name) return k;
    known += std::string(known.empty() ? "" : ", ") + k.name;
  }
  throw UsageError("unknown training kernel '" + name + "' (known: " + known + ")");
}

TrainSequence::TrainSequence(const TrainKernelName& k, size_t rows, size_t cols, DType dtype, bool device, float p,
                             uint64_t seed)
    : k_(k), rows_(rows), cols_(cols), dtype_(dtype), device_(device), drop_{p, seed, 1} {
  const size_t n = rows * cols, bytes = TensorBytes();
  x_ = RandomTensor(dtype, n, 0.5f, 2.0f, seed + 1, device);
  dy_ = RandomTensor(dtype, n, 0.0f, 1.0f, seed + 2, device);
  residual_ = RandomTensor(dtype, n, 0.0f, 1.0f, seed + 3, device);
  dsum_ = RandomTensor(dtype, n, 0.0f, 0.5f, seed + 4, device);
  gamma_ = RandomTensor(DType::kFloat32, cols, 1.0f, 0.2f, seed + 5, device);
  beta_ = RandomTensor(DType::kFloat32, cols, 0.0f, 0.2f, seed + 6, device);
  for (Buffer* b : {&y_, &y_u_, &t1_, &t2_, &t3_, &dx_, &dx_u_, &sum_}) *b = Zeros(bytes, device);
  mean_ = Zeros(rows * 4, device);
  rstd_ = Zeros(rows * 4, device);
  dgamma_ = Zeros(cols * 4, device);
  dbeta_ = Zeros(cols * 4, device);
  ws_ = Zeros(TrainWorkspaceBytes(rows, cols, device ? MemoryKind::kDevice : MemoryKind::kHost), device);
}

void TrainSequence::FusedForward() {
  switch (k_.family) {
    case TrainFamily::kLnActDropout:
      LnActDropoutForward(dtype_, rows_, cols_, k_.act, drop_, x_.data(), F(gamma_), F(beta_), 1e-5f, y_.data(),
                          F(mean_), F(rstd_), nullptr);
      return;
    case TrainFamily::kBiasAct:  // beta serves as the bias
      BiasActForward(dtype_, rows_, cols_, k_.act, x_.data(), F(beta_), y_.data(), nullptr);
      return;
    case TrainFamily::kAddLn:
      AddLayerNormForward(dtype_, rows_, cols_, x_.data(), residual_.data(), F(gamma_), F(beta_), 1e-5f, sum_.data(),
                          y_.data(), F(mean_), F(rstd_), nullptr);
      return;
  }
}

void TrainSequence::UnfusedForward() {
  const size_t n = rows_ * cols_;
  switch (k_.family) {
    case TrainFamily::kLnActDropout:  // t1 keeps LayerNorm's output for the activation's backward
      LayerNormForward(dtype_, rows_, cols_, x_.data(), F(gamma_), F(beta_), 1e-5f, t1_.data(), F(mean_), F(rstd_),
                       nullptr);
      BiasActForward(dtype_, rows_, cols_, k_.act, t1_.data(), nullptr, t2_.data(), nullptr);
      Dropout(dtype_, n, drop_, t2_.data(), y_u_.data(), nullptr);
      return;
    case TrainFamily::kBiasAct:  // t1 keeps x + bias, as autograd does
      BiasActForward(dtype_, rows_, cols_, Activation::kNone, x_.data(), F(beta_), t1_.data(), nullptr);
      BiasActForward(dtype_, rows_, cols_, k_.act, t1_.data(), nullptr, y_u_.data(), nullptr);
      return;
    case TrainFamily::kAddLn:  // t1 keeps the sum
      AddTensors(dtype_, n, x_.data(), residual_.data(), t1_.data(), nullptr);
      LayerNormForward(dtype_, rows_, cols_, t1_.data(), F(gamma_), F(beta_), 1e-5f, y_u_.data(), F(mean_), F(rstd_),
                       nullptr);
      return;
  }
}

void TrainSequence::FusedBackward() {
  switch (k_.family) {
    case TrainFamily::kLnActDropout:
      LnActDropoutBackward(dtype_, rows_, cols_, k_.act, drop_, dy_.data(), x_.data(), F(gamma_), F(beta_), F(mean_),
                           F(rstd_), dx_.data(), F(dgamma_), F(dbeta_), F(ws_), nullptr);
      return;
    case TrainFamily::kBiasAct:
      BiasActBackward(dtype_, rows_, cols_, k_.act, dy_.data(), x_.data(), F(beta_), dx_.data(), F(dbeta_), F(ws_),
                      nullptr);
      return;
    case TrainFamily::kAddLn:
      AddLayerNormBackward(dtype_, rows_, cols_, dy_.data(), dsum_.data(), sum_.data(), F(gamma_), F(mean_), F(rstd_),
                           dx_.data(), F(dgamma_), F(dbeta_), F(ws_), nullptr);
      return;
  }
}

void TrainSequence::UnfusedBackward() {
  const size_t n = rows_ * cols_;
  switch (k_.family) {
    case TrainFamily::kLnActDropout:
      Dropout(dtype_, n, drop_, dy_.data(), t2_.data(), nullptr);
      BiasActBackward(dtype_, rows_, cols_, k_.act, t2_.data(), t1_.data(), nullptr, t3_.data(), nullptr, nullptr,
                      nullptr);
      LayerNormBackward(dtype_, rows_, cols_, t3_.data(), x_.data(), F(gamma_), F(mean_), F(rstd_), dx_u_.data(),
                        F(dgamma_), F(dbeta_), F(ws_), nullptr);
      return;
    case TrainFamily::kBiasAct:  // the activation's backward, then the bias's column sums (written through)
      BiasActBackward(dtype_, rows_, cols_, k_.act, dy_.data(), t1_.data(), nullptr, t2_.data(), nullptr, nullptr,
                      nullptr);
      BiasActBackward(dtype_, rows_, cols_, Activation::kNone, t2_.data(), t1_.data(), nullptr, dx_u_.data(), F(dbeta_),
                      F(ws_), nullptr);
      return;
    case TrainFamily::kAddLn:
      LayerNormBackward(dtype_, rows_, cols_, dy_.data(), t1_.data(), F(gamma_), F(mean_), F(rstd_), t2_.data(),
                        F(dgamma_), F(dbeta_), F(ws_), nullptr);
      AddTensors(dtype_, n, t2_.data(), dsum_.data(), dx_u_.data(), nullptr);
      return;
  }
}

double TrainSequence::ForwardDiff() const {
  const size_t n = rows_ * cols_;
  return RelativeDiff(HostFloats(y_, dtype_, n, device_), HostFloats(y_u_, dtype_, n, device_));
}

double TrainSequence::BackwardDiff() const {
  const size_t n = rows_ * cols_;
  return RelativeDiff(HostFloats(dx_, dtype_, n, device_), HostFloats(dx_u_, dtype_, n, device_));
}

double TrainSequence::MustMoveBytes(bool backward) const {
  const double e = static_cast<double>(TensorBytes()), rows = 4.0 * rows_, cols = 4.0 * cols_;
  switch (k_.family) {
    case TrainFamily::kLnActDropout:  // fwd: x -> y, mean, rstd; bwd: dy, x, mean, rstd -> dx, dgamma, dbeta
      return backward ? 3 * e + 2 * rows + 4 * cols : 2 * e + 2 * rows + 2 * cols;
    case TrainFamily::kBiasAct:  // fwd: x, bias -> y; bwd: dy, x, bias -> dx, dbias
      return backward ? 3 * e + 2 * cols : 2 * e + cols;
    case TrainFamily::kAddLn:  // fwd: x, residual -> sum, y, mean, rstd; bwd: dy, dsum, sum, mean, rstd -> dx, dg, db
      return backward ? 4 * e + 2 * rows + 3 * cols : 4 * e + 2 * rows + 2 * cols;
  }
  return 0;
}

}  // namespace ciuic
