// The CUDA training kernels (kernels/cuda/train.cu) against their CPU oracle (kernels/cpu/train.cc), bit
// for bit: every output (y, sum, mean, rstd, dx, dgamma, dbeta, dbias) of every kernel in fp32, fp16 and
// bf16, every activation, dropout off and at p = 0.1, on fresh random inputs. The CUDA side is reached
// through the dispatcher with device buffers, as callers reach it. Outputs and workspaces start as NaN
// bytes so a missed write shows. Skips cleanly without a CUDA device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "core/buffer.h"
#include "core/error.h"
#include "kernels/codec_kernels.h"
#include "kernels/train_kernels.h"

namespace ciuic {
namespace {

struct Shape {
  size_t rows, cols;
};
// An odd width under one warp, two whole chunks of rows, and ten chunks (the last one short) of rows
// 1600 wide (not a multiple of 128: dropout's Philox tiles straddle rows); 5 and 33 columns put the
// rows off the 4-element Philox groups.
constexpr Shape kShapes[] = {{7, 33}, {33, 5}, {64, 1024}, {300, 1600}};
constexpr DType kTypes[] = {DType::kFloat32, DType::kFloat16, DType::kBFloat16};
constexpr Activation kActs[] = {Activation::kNone, Activation::kRelu, Activation::kGeluTanh, Activation::kGeluErf};
constexpr float kDropPs[] = {0.0f, 0.1f};
constexpr float kEps = 1e-5f;
constexpr uint8_t kNanByte = 0xff;  // 0xffffffff / 0xffff: a NaN in every dtype

// Host bytes of n values of dtype t drawn from N(mean, sd) and rounded to t.
std::vector<uint8_t> Draw(DType t, size_t n, float mean, float sd, std::mt19937_64& rng) {
  std::normal_distribution<float> dist(mean, sd);
  std::vector<uint8_t> out(n * DTypeSize(t));
  for (size_t i = 0; i < n; ++i) {
    const float v = dist(rng);
    if (t == DType::kFloat32) {
      std::memcpy(out.data() + 4 * i, &v, 4);
    } else {
      const uint16_t b = t == DType::kFloat16 ? tm::Store<tm::F16>(v).bits : tm::Store<tm::BF16>(v).bits;
      std::memcpy(out.data() + 2 * i, &b, 2);
    }
  }
  return out;
}

std::vector<float> DrawF(size_t n, float mean, float sd, std::mt19937_64& rng) {
  std::normal_distribution<float> dist(mean, sd);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

Buffer Up(const void* p, size_t bytes) {
  Buffer b(std::max<size_t>(bytes, 1), MemoryKind::kDevice);
  if (bytes) CopyBytes(b.data(), MemoryKind::kDevice, p, MemoryKind::kHost, bytes);
  return b;
}
template <class V>
Buffer Up(const std::vector<V>& v) {
  return Up(v.data(), v.size() * sizeof(V));
}
Buffer Nans(size_t bytes) {
  Buffer b(std::max<size_t>(bytes, 1), MemoryKind::kDevice);
  SetBytes(b.data(), MemoryKind::kDevice, kNanByte, b.bytes());
  return b;
}

// The device buffer's first bytes equal `want`; otherwise where they first differ.
::testing::AssertionResult SameBits(const Buffer& got, const void* want, size_t bytes, size_t elem, const char* what) {
  std::vector<uint8_t> host(bytes);
  if (bytes) CopyBytes(host.data(), MemoryKind::kHost, got.data(), MemoryKind::kDevice, bytes);
  if (bytes == 0 || std::memcmp(host.data(), want, bytes) == 0) return ::testing::AssertionSuccess();
  const auto* w = static_cast<const uint8_t*>(want);
  size_t i = 0, diffs = 0;
  for (size_t k = 0; k < bytes / elem; ++k) {
    if (std::memcmp(host.data() + k * elem, w + k * elem, elem) != 0 && diffs++ == 0) i = k;
  }
  uint32_t g = 0, x = 0;
  std::memcpy(&g, host.data() + i * elem, elem);
  std::memcpy(&x, w + i * elem, elem);
  std::ostringstream m;
  m << what << ": " << diffs << " of " << bytes / elem << " elements differ, first at " << i << " (cuda 0x" << std::hex
    << g << ", cpu 0x" << x << ")";
  return ::testing::AssertionFailure() << m.str();
}
template <class V>
::testing::AssertionResult SameBits(const Buffer& got, const std::vector<V>& want, const char* what) {
  return SameBits(got, want.data(), want.size() * sizeof(V), sizeof(V), what);
}
::testing::AssertionResult SameBits(const Buffer& got, const std::vector<uint8_t>& want, DType t, const char* what) {
  return SameBits(got, want.data(), want.size(), DTypeSize(t), what);
}

std::string Describe(DType t, Shape s, Activation a, float p) {
  std::ostringstream o;
  o << DTypeName(t) << " " << s.rows << "x" << s.cols << " act " << ActivationName(a) << " p " << p;
  return o.str();
}

// One case's random inputs, on the host; the oracle's outputs are computed from these.
struct Inputs {
  std::vector<uint8_t> x, dy, other;  // other: residual, dsum or the second addend
  std::vector<float> gamma, beta, bias;
  Inputs(DType t, Shape s, std::mt19937_64& rng)
      : x(Draw(t, s.rows * s.cols, 0.3f, 2.0f, rng)),
        dy(Draw(t, s.rows * s.cols, 0.0f, 1.0f, rng)),
        other(Draw(t, s.rows * s.cols, -0.2f, 1.5f, rng)),
        gamma(DrawF(s.cols, 1.0f, 0.5f, rng)),
        beta(DrawF(s.cols, 0.0f, 0.5f, rng)),
        bias(DrawF(s.cols, 0.1f, 0.7f, rng)) {}
};

TEST(TrainTwin, LayerNormForwardBackward) {
  if (!cuda::Available()) GTEST_SKIP() << "no CUDA device";
  std::mt19937_64 rng(11);
  for (const DType t : kTypes) {
    for (const Shape s : kShapes) {
      SCOPED_TRACE(Describe(t, s, Activation::kNone, 0.0f));
      const size_t n = s.rows * s.cols, bytes = n * DTypeSize(t);
      const Inputs in(t, s, rng);
      std::vector<uint8_t> y(bytes), dx(bytes);
      std::vector<float> mean(s.rows), rstd(s.rows), dgamma(s.cols), dbeta(s.cols);
      std::vector<float> ws(TrainWorkspaceBytes(s.rows, s.cols, MemoryKind::kHost) / 4);
      cpu::LayerNormForward(t, s.rows, s.cols, in.x.data(), in.gamma.data(), in.beta.data(), kEps, y.data(),
                            mean.data(), rstd.data(), nullptr);
      cpu::LayerNormBackward(t, s.rows, s.cols, in.dy.data(), in.x.data(), in.gamma.data(), mean.data(), rstd.data(),
                             dx.data(), dgamma.data(), dbeta.data(), ws.data(), nullptr);

      Buffer dev_x = Up(in.x), dev_dy = Up(in.dy), dev_gamma = Up(in.gamma), dev_beta = Up(in.beta);
      Buffer dev_y = Nans(bytes), dev_mean = Nans(s.rows * 4), dev_rstd = Nans(s.rows * 4);
      LayerNormForward(t, s.rows, s.cols, dev_x.data(), dev_gamma.as<float>(), dev_beta.as<float>(), kEps, dev_y.data(),
                       dev_mean.as<float>(), dev_rstd.as<float>(), nullptr);
      EXPECT_TRUE(SameBits(dev_y, y, t, "y"));
      EXPECT_TRUE(SameBits(dev_mean, mean, "mean"));
      EXPECT_TRUE(SameBits(dev_rstd, rstd, "rstd"));

      // The backward from the oracle's statistics, so a forward difference does not repeat here.
      Buffer mean_in = Up(mean), rstd_in = Up(rstd);
      Buffer dev_dx = Nans(bytes), dev_dgamma = Nans(s.cols * 4), dev_dbeta = Nans(s.cols * 4);
      Buffer dev_ws = Nans(TrainWorkspaceBytes(s.rows, s.cols, MemoryKind::kDevice));
      LayerNormBackward(t, s.rows, s.cols, dev_dy.data(), dev_x.data(), dev_gamma.as<float>(), mean_in.as<float>(),
                        rstd_in.as<float>(), dev_dx.data(), dev_dgamma.as<float>(), dev_dbeta.as<float>(),
                        dev_ws.as<float>(), nullptr);
      EXPECT_TRUE(SameBits(dev_dx, dx, t, "dx"));
      EXPECT_TRUE(SameBits(dev_dgamma, dgamma, "dgamma"));
      EXPECT_TRUE(SameBits(dev_dbeta, dbeta, "dbeta"));
      // A frozen affine: dx alone, no workspace.
      Buffer dev_dx2 = Nans(bytes);
      LayerNormBackward(t, s.rows, s.cols, dev_dy.data(), dev_x.data(), dev_gamma.as<float>(), mean_in.as<float>(),
                        rstd_in.as<float>(), dev_dx2.data(), nullptr, nullptr, nullptr, nullptr);
      EXPECT_TRUE(SameBits(dev_dx2, dx, t, "dx without dgamma/dbeta"));
    }
  }
}

TEST(TrainTwin, BiasActForwardBackward) {
  if (!cuda::Available()) GTEST_SKIP() << "no CUDA device";
  std::mt19937_64 rng(12);
  for (const DType t : kTypes) {
    for (const Shape s : kShapes) {
      const size_t n = s.rows * s.cols, bytes = n * DTypeSize(t);
      const Inputs in(t, s, rng);
      Buffer dev_x = Up(in.x), dev_dy = Up(in.dy), dev_bias = Up(in.bias);
      for (const Activation a : kActs) {
        for (const bool with_bias : {true, false}) {
          SCOPED_TRACE(Describe(t, s, a, 0.0f) + (with_bias ? " bias" : " no bias"));
          const float* bias = with_bias ? in.bias.data() : nullptr;
          const float* dev_b = with_bias ? dev_bias.as<float>() : nullptr;
          std::vector<uint8_t> y(bytes), dx(bytes);
          std::vector<float> dbias(s.cols), ws(TrainWorkspaceBytes(s.rows, s.cols, MemoryKind::kHost) / 4);
          cpu::BiasActForward(t, s.rows, s.cols, a, in.x.data(), bias, y.data(), nullptr);
          cpu::BiasActBackward(t, s.rows, s.cols, a, in.dy.data(), in.x.data(), bias, dx.data(), dbias.data(),
                               ws.data(), nullptr);

          Buffer dev_y = Nans(bytes), dev_dx = Nans(bytes), dev_dbias = Nans(s.cols * 4);
          Buffer dev_ws = Nans(TrainWorkspaceBytes(s.rows, s.cols, MemoryKind::kDevice));
          BiasActForward(t, s.rows, s.cols, a, dev_x.data(), dev_b, dev_y.data(), nullptr);
          EXPECT_TRUE(SameBits(dev_y, y, t, "y"));
          BiasActBackward(t, s.rows, s.cols, a, dev_dy.data(), dev_x.data(), dev_b, dev_dx.data(),
                          dev_dbias.as<float>(), dev_ws.as<float>(), nullptr);
          EXPECT_TRUE(SameBits(dev_dx, dx, t, "dx"));
          EXPECT_TRUE(SameBits(dev_dbias, dbias, "dbias"));
          Buffer dev_dx2 = Nans(bytes);
          BiasActBackward(t, s.rows, s.cols, a, dev_dy.data(), dev_x.data(), dev_b, dev_dx2.data(), nullptr, nullptr,
                          nullptr);
          EXPECT_TRUE(SameBits(dev_dx2, dx, t, "dx without dbias"));
        }
      }
    }
  }
}

TEST(TrainTwin, DropoutAndAdd) {
  if (!cuda::Available()) GTEST_SKIP() << "no CUDA device";
  std::mt19937_64 rng(13);
  for (const DType t : kTypes) {
    for (const size_t n : {size_t{1}, size_t{7}, size_t{231}, size_t{65539}, size_t{480000}}) {
      const size_t bytes = n * DTypeSize(t);
      const std::vector<uint8_t> x = Draw(t, n, 0.3f, 2.0f, rng), b = Draw(t, n, -0.2f, 1.5f, rng);
      Buffer dev_x = Up(x), dev_b = Up(b);
      for (const float p : kDropPs) {
        SCOPED_TRACE(std::string(DTypeName(t)) + " n " + std::to_string(n) + " p " + std::to_string(p));
        const DropoutArgs d{p, rng(), rng() % 1000};
        std::vector<uint8_t> y(bytes);
        cpu::Dropout(t, n, d, x.data(), y.data(), nullptr);
        Buffer dev_y = Nans(bytes);
        Dropout(t, n, d, dev_x.data(), dev_y.data(), nullptr);
        EXPECT_TRUE(SameBits(dev_y, y, t, "dropout"));
        if (n == 480000) {
          // Equal bits could still be equally wrong: the outputs (x has no zeros) drop about p.
          const size_t width = DTypeSize(t);
          const std::vector<uint8_t> zero(width, 0);
          size_t dropped = 0;
          for (size_t i = 0; i < n; ++i) dropped += std::memcmp(y.data() + i * width, zero.data(), width) == 0;
          EXPECT_NEAR(static_cast<double>(dropped) / n, p, 0.005);
        }
      }
      std::vector<uint8_t> sum(bytes);
      cpu::AddTensors(t, n, x.data(), b.data(), sum.data(), nullptr);
      Buffer dev_sum = Nans(bytes);
      AddTensors(t, n, dev_x.data(), dev_b.data(), dev_sum.data(), nullptr);
      EXPECT_TRUE(SameBits(dev_sum, sum, t, "add")) << DTypeName(t) << " n " << n;
    }
  }
}

TEST(TrainTwin, LnActDropoutForwardBackward) {
  if (!cuda::Available()) GTEST_SKIP() << "no CUDA device";
  std::mt19937_64 rng(14);
  for (const DType t : kTypes) {
    for (const Shape s : kShapes) {
      const size_t n = s.rows * s.cols, bytes = n * DTypeSize(t);
      const Inputs in(t, s, rng);
      Buffer dev_x = Up(in.x), dev_dy = Up(in.dy), dev_gamma = Up(in.gamma), dev_beta = Up(in.beta);
      for (const Activation a : kActs) {
        for (const float p : kDropPs) {
          SCOPED_TRACE(Describe(t, s, a, p));
          const DropoutArgs d{p, rng(), rng() % 1000};
          std::vector<uint8_t> y(bytes), dx(bytes);
          std::vector<float> mean(s.rows), rstd(s.rows), dgamma(s.cols), dbeta(s.cols);
          std::vector<float> ws(TrainWorkspaceBytes(s.rows, s.cols, MemoryKind::kHost) / 4);
          cpu::LnActDropoutForward(t, s.rows, s.cols, a, d, in.x.data(), in.gamma.data(), in.beta.data(), kEps,
                                   y.data(), mean.data(), rstd.data(), nullptr);
          cpu::LnActDropoutBackward(t, s.rows, s.cols, a, d, in.dy.data(), in.x.data(), in.gamma.data(), in.beta.data(),
                                    mean.data(), rstd.data(), dx.data(), dgamma.data(), dbeta.data(), ws.data(),
                                    nullptr);

          Buffer dev_y = Nans(bytes), dev_mean = Nans(s.rows * 4), dev_rstd = Nans(s.rows * 4);
          LnActDropoutForward(t, s.rows, s.cols, a, d, dev_x.data(), dev_gamma.as<float>(), dev_beta.as<float>(), kEps,
                              dev_y.data(), dev_mean.as<float>(), dev_rstd.as<float>(), nullptr);
          EXPECT_TRUE(SameBits(dev_y, y, t, "y"));
          EXPECT_TRUE(SameBits(dev_mean, mean, "mean"));
          EXPECT_TRUE(SameBits(dev_rstd, rstd, "rstd"));
          if (t == DType::kFloat32) {
            // Unfused on the device, LayerNorm, activation, dropout: the same bits in fp32 (train_kernels.h).
            Buffer ln = Nans(bytes), act = Nans(bytes), out = Nans(bytes), m = Nans(s.rows * 4), r = Nans(s.rows * 4);
            LayerNormForward(t, s.rows, s.cols, dev_x.data(), dev_gamma.as<float>(), dev_beta.as<float>(), kEps,
                             ln.data(), m.as<float>(), r.as<float>(), nullptr);
            BiasActForward(t, s.rows, s.cols, a, ln.data(), nullptr, act.data(), nullptr);
            Dropout(t, n, d, act.data(), out.data(), nullptr);
            EXPECT_TRUE(SameBits(out, y, t, "unfused sequence"));
          }

          Buffer mean_in = Up(mean), rstd_in = Up(rstd);
          Buffer dev_dx = Nans(bytes), dev_dgamma = Nans(s.cols * 4), dev_dbeta = Nans(s.cols * 4);
          Buffer dev_ws = Nans(TrainWorkspaceBytes(s.rows, s.cols, MemoryKind::kDevice));
          LnActDropoutBackward(t, s.rows, s.cols, a, d, dev_dy.data(), dev_x.data(), dev_gamma.as<float>(),
                               dev_beta.as<float>(), mean_in.as<float>(), rstd_in.as<float>(), dev_dx.data(),
                               dev_dgamma.as<float>(), dev_dbeta.as<float>(), dev_ws.as<float>(), nullptr);
          EXPECT_TRUE(SameBits(dev_dx, dx, t, "dx"));
          EXPECT_TRUE(SameBits(dev_dgamma, dgamma, "dgamma"));
          EXPECT_TRUE(SameBits(dev_dbeta, dbeta, "dbeta"));
          // Both device paths: no workspace (dz recomputed in each pass), and a workspace without column
          // gradients with dx written over dy (dz kept; dy read by its first kernel only).
          Buffer dev_dx2 = Nans(bytes);
          LnActDropoutBackward(t, s.rows, s.cols, a, d, dev_dy.data(), dev_x.data(), dev_gamma.as<float>(),
                               dev_beta.as<float>(), mean_in.as<float>(), rstd_in.as<float>(), dev_dx2.data(), nullptr,
                               nullptr, nullptr, nullptr);
          EXPECT_TRUE(SameBits(dev_dx2, dx, t, "dx without a workspace"));
          Buffer dev_inplace = Up(in.dy), dev_ws2 = Nans(TrainWorkspaceBytes(s.rows, s.cols, MemoryKind::kDevice));
          LnActDropoutBackward(t, s.rows, s.cols, a, d, dev_inplace.data(), dev_x.data(), dev_gamma.as<float>(),
                               dev_beta.as<float>(), mean_in.as<float>(), rstd_in.as<float>(), dev_inplace.data(),
                               nullptr, nullptr, dev_ws2.as<float>(), nullptr);
          EXPECT_TRUE(SameBits(dev_inplace, dx, t, "dx over dy, workspace, no dgamma/dbeta"));
        }
      }
    }
  }
}

TEST(TrainTwin, AddLayerNormForwardBackward) {
  if (!cuda::Available()) GTEST_SKIP() << "no CUDA device";
  std::mt19937_64 rng(15);
  for (const DType t : kTypes) {
    for (const Shape s : kShapes) {
      SCOPED_TRACE(Describe(t, s, Activation::kNone, 0.0f));
      const size_t n = s.rows * s.cols, bytes = n * DTypeSize(t);
      const Inputs in(t, s, rng);
      const std::vector<uint8_t> dsum = Draw(t, n, 0.0f, 0.5f, rng);
      std::vector<uint8_t> sum(bytes), y(bytes), dx(bytes), dx_no_dsum(bytes);
      std::vector<float> mean(s.rows), rstd(s.rows), dgamma(s.cols), dbeta(s.cols);
      std::vector<float> ws(TrainWorkspaceBytes(s.rows, s.cols, MemoryKind::kHost) / 4);
      cpu::AddLayerNormForward(t, s.rows, s.cols, in.x.data(), in.other.data(), in.gamma.data(), in.beta.data(), kEps,
                               sum.data(), y.data(), mean.data(), rstd.data(), nullptr);
      cpu::AddLayerNormBackward(t, s.rows, s.cols, in.dy.data(), dsum.data(), sum.data(), in.gamma.data(), mean.data(),
                                rstd.data(), dx.data(), dgamma.data(), dbeta.data(), ws.data(), nullptr);
      cpu::AddLayerNormBackward(t, s.rows, s.cols, in.dy.data(), nullptr, sum.data(), in.gamma.data(), mean.data(),
                                rstd.data(), dx_no_dsum.data(), nullptr, nullptr, nullptr, nullptr);

      Buffer dev_x = Up(in.x), dev_res = Up(in.other), dev_gamma = Up(in.gamma), dev_beta = Up(in.beta);
      Buffer dev_sum = Nans(bytes), dev_y = Nans(bytes), dev_mean = Nans(s.rows * 4), dev_rstd = Nans(s.rows * 4);
      AddLayerNormForward(t, s.rows, s.cols, dev_x.data(), dev_res.data(), dev_gamma.as<float>(), dev_beta.as<float>(),
                          kEps, dev_sum.data(), dev_y.data(), dev_mean.as<float>(), dev_rstd.as<float>(), nullptr);
      EXPECT_TRUE(SameBits(dev_sum, sum, t, "sum"));
      EXPECT_TRUE(SameBits(dev_y, y, t, "y"));
      EXPECT_TRUE(SameBits(dev_mean, mean, "mean"));
      EXPECT_TRUE(SameBits(dev_rstd, rstd, "rstd"));

      Buffer sum_in = Up(sum), mean_in = Up(mean), rstd_in = Up(rstd), dev_dy = Up(in.dy), dev_dsum = Up(dsum);
      Buffer dev_dx = Nans(bytes), dev_dgamma = Nans(s.cols * 4), dev_dbeta = Nans(s.cols * 4);
      Buffer dev_ws = Nans(TrainWorkspaceBytes(s.rows, s.cols, MemoryKind::kDevice));
      AddLayerNormBackward(t, s.rows, s.cols, dev_dy.data(), dev_dsum.data(), sum_in.data(), dev_gamma.as<float>(),
                           mean_in.as<float>(), rstd_in.as<float>(), dev_dx.data(), dev_dgamma.as<float>(),
                           dev_dbeta.as<float>(), dev_ws.as<float>(), nullptr);
      EXPECT_TRUE(SameBits(dev_dx, dx, t, "dx"));
      EXPECT_TRUE(SameBits(dev_dgamma, dgamma, "dgamma"));
      EXPECT_TRUE(SameBits(dev_dbeta, dbeta, "dbeta"));
      Buffer dev_dx2 = Nans(bytes);
      AddLayerNormBackward(t, s.rows, s.cols, dev_dy.data(), nullptr, sum_in.data(), dev_gamma.as<float>(),
                           mean_in.as<float>(), rstd_in.as<float>(), dev_dx2.data(), nullptr, nullptr, nullptr,
                           nullptr);
      EXPECT_TRUE(SameBits(dev_dx2, dx_no_dsum, t, "dx without dsum"));
    }
  }
}

// No rows: column gradients are zeros (as the oracle's), nothing else is touched; no columns or no
// elements: nothing happens.
TEST(TrainTwin, EmptyShapes) {
  if (!cuda::Available()) GTEST_SKIP() << "no CUDA device";
  constexpr size_t kCols = 40;
  const std::vector<float> zeros(kCols, 0.0f);
  std::mt19937_64 rng(16);
  const std::vector<float> gamma = DrawF(kCols, 1.0f, 0.5f, rng), beta = DrawF(kCols, 0.0f, 0.5f, rng);
  Buffer dev_gamma = Up(gamma), dev_beta = Up(beta), any = Nans(64);
  for (const DType t : kTypes) {
    SCOPED_TRACE(DTypeName(t));
    Buffer dgamma = Nans(kCols * 4), dbeta = Nans(kCols * 4), dbias = Nans(kCols * 4);
    LayerNormBackward(t, 0, kCols, any.data(), any.data(), dev_gamma.as<float>(), any.as<float>(), any.as<float>(),
                      any.data(), dgamma.as<float>(), dbeta.as<float>(), nullptr, nullptr);
    EXPECT_TRUE(SameBits(dgamma, zeros, "dgamma"));
    EXPECT_TRUE(SameBits(dbeta, zeros, "dbeta"));
    BiasActBackward(t, 0, kCols, Activation::kGeluErf, any.data(), any.data(), dev_beta.as<float>(), any.data(),
                    dbias.as<float>(), nullptr, nullptr);
    EXPECT_TRUE(SameBits(dbias, zeros, "dbias"));
    Buffer untouched = Nans(64);
    std::vector<uint8_t> nan_bytes(64, kNanByte);
    const DropoutArgs d{0.1f, 1, 2};
    LnActDropoutForward(t, 0, kCols, Activation::kRelu, d, any.data(), dev_gamma.as<float>(), dev_beta.as<float>(),
                        kEps, untouched.data(), untouched.as<float>(), untouched.as<float>(), nullptr);
    LayerNormForward(t, 5, 0, any.data(), dev_gamma.as<float>(), dev_beta.as<float>(), kEps, untouched.data(),
                     untouched.as<float>(), untouched.as<float>(), nullptr);
    AddLayerNormForward(t, 0, kCols, any.data(), any.data(), dev_gamma.as<float>(), dev_beta.as<float>(), kEps,
                        untouched.data(), untouched.data(), untouched.as<float>(), untouched.as<float>(), nullptr);
    BiasActForward(t, 5, 0, Activation::kRelu, any.data(), nullptr, untouched.data(), nullptr);
    Dropout(t, 0, d, any.data(), untouched.data(), nullptr);
    AddTensors(t, 0, any.data(), any.data(), untouched.data(), nullptr);
    EXPECT_TRUE(SameBits(untouched, nan_bytes, DType::kFloat32, "outputs of empty calls"));
  }
}

TEST(TrainTwin, RefusesOtherDtypes) {
  if (!cuda::Available()) GTEST_SKIP() << "no CUDA device";
  Buffer x = Nans(256), y = Nans(256), stats = Nans(64), gamma = Nans(64);
  EXPECT_THROW(LayerNormForward(DType::kFloat64, 2, 8, x.data(), gamma.as<float>(), gamma.as<float>(), kEps, y.data(),
                                stats.as<float>(), stats.as<float>(), nullptr),
               UsageError);
  EXPECT_THROW(AddTensors(DType::kInt8, 8, x.data(), x.data(), y.data(), nullptr), UsageError);
  EXPECT_THROW(Dropout(DType::kFloat8E4M3, 8, DropoutArgs{0.1f, 1, 2}, x.data(), y.data(), nullptr), UsageError);
}

}  // namespace
}  // namespace ciuic
