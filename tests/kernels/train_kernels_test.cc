// The CPU training kernels (kernels/cpu/train.cc) against an fp64 oracle written here from the
// textbook formulas (std::erf, std::tanh, two-pass statistics in double), fused against the unfused
// sequence of our own single-op kernels (identical bits in fp32), thread-count independence, and the
// dropout mask: one stream from (seed, offset), the same in forward and backward. The CUDA twin is
// compared with these kernels in tests/gpu/train_kernels_test.cc; PyTorch in tests/python.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/error.h"
#include "core/parallel.h"
#include "kernels/train_kernels.h"

namespace ciuic {
namespace {

// A tensor held as fp32 values plus its bytes in the kernel's dtype.
struct Tensor {
  DType t;
  std::vector<uint8_t> bytes;
  Tensor(DType type, size_t n) : t(type), bytes(n * DTypeSize(type)) {}
  void* data() { return bytes.data(); }
  size_t size() const { return bytes.size() / DTypeSize(t); }
  float at(size_t i) const {
    if (t == DType::kFloat32) return reinterpret_cast<const float*>(bytes.data())[i];
    uint16_t b;
    std::memcpy(&b, bytes.data() + 2 * i, 2);
    return t == DType::kFloat16 ? tm::Load(tm::F16{b}) : tm::Load(tm::BF16{b});
  }
  void set(size_t i, float v) {
    if (t == DType::kFloat32) {
      reinterpret_cast<float*>(bytes.data())[i] = v;
      return;
    }
    const uint16_t b = t == DType::kFloat16 ? tm::Store<tm::F16>(v).bits : tm::Store<tm::BF16>(v).bits;
    std::memcpy(bytes.data() + 2 * i, &b, 2);
  }
};

Tensor Random(DType t, size_t n, std::mt19937_64& rng, float scale = 1.0f, float shift = 0.0f) {
  std::normal_distribution<float> dist(shift, scale);
  Tensor x(t, n);
  for (size_t i = 0; i < n; ++i) x.set(i, dist(rng));
  return x;
}
std::vector<float> RandomF(size_t n, std::mt19937_64& rng, float mean, float sd) {
  std::normal_distribution<float> dist(mean, sd);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

double ActD(Activation a, double x) {
  switch (a) {
    case Activation::kRelu:
      return x > 0 ? x : 0;
    case Activation::kGeluTanh:
      return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
    case Activation::kGeluErf:
      return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
    case Activation::kNone:
      break;
  }
  return x;
}
double ActGradD(Activation a, double x) {
  switch (a) {
    case Activation::kRelu:
      return x > 0 ? 1 : 0;
    case Activation::kGeluTanh: {
      const double k = std::sqrt(2 / M_PI), t = std::tanh(k * (x + 0.044715 * x * x * x));
      return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * k * (1 + 3 * 0.044715 * x * x);
    }
    case Activation::kGeluErf:
      return 0.5 * (1 + std::erf(x / std::sqrt(2.0))) + x * std::exp(-0.5 * x * x) / std::sqrt(2 * M_PI);
    case Activation::kNone:
      break;
  }
  return 1;
}

// fp64 oracle of LnActDropout forward and backward on the (dtype-rounded) inputs.
struct Oracle {
  std::vector<double> y, dx, dgamma, dbeta;
};
Oracle LnActDropoutD(size_t rows, size_t cols, Activation act, const DropoutArgs& d, const Tensor& x,
                     const std::vector<float>& gamma, const std::vector<float>& beta, float eps, const Tensor& dy) {
  Oracle o;
  o.y.resize(rows * cols);
  o.dx.resize(rows * cols);
  o.dgamma.assign(cols, 0);
  o.dbeta.assign(cols, 0);
  std::vector<uint8_t> keep(rows * cols);
  DropoutMask(d, rows * cols, keep.data());
  const double scale = d.p > 0 ? 1.0 / (1.0 - d.p) : 1.0;
  for (size_t r = 0; r < rows; ++r) {
    double mean = 0, var = 0;
    for (size_t j = 0; j < cols; ++j) mean += x.at(r * cols + j);
    mean /= cols;
    for (size_t j = 0; j < cols; ++j) var += (x.at(r * cols + j) - mean) * (x.at(r * cols + j) - mean);
    var /= cols;
    const double rstd = 1 / std::sqrt(var + eps);
    std::vector<double> xh(cols), g(cols), dz(cols);
    double sg = 0, sgx = 0;
    for (size_t j = 0; j < cols; ++j) {
      const size_t e = r * cols + j;
      xh[j] = (x.at(e) - mean) * rstd;
      const double z = xh[j] * gamma[j] + beta[j];
      o.y[e] = keep[e] ? ActD(act, z) * scale : 0;
      dz[j] = (keep[e] ? dy.at(e) * scale : 0) * ActGradD(act, z);
      g[j] = dz[j] * gamma[j];
      sg += g[j];
      sgx += g[j] * xh[j];
      o.dgamma[j] += dz[j] * xh[j];
      o.dbeta[j] += dz[j];
    }
    for (size_t j = 0; j < cols; ++j) o.dx[r * cols + j] = rstd * (g[j] - sg / cols - xh[j] * sgx / cols);
  }
  return o;
}

// Relative unit of a 16-bit result: half an ulp of its format at 1 (the one rounding of the output).
double StorageUnit(DType t) {
  return t == DType::kFloat16 ? std::ldexp(1.0, -11) : t == DType::kBFloat16 ? std::ldexp(1.0, -8) : 0.0;
}

// max |got - want| / (abs + rel · |want| + unit · |want|): at most 1 passes.
double WorstRatio(const Tensor& got, const std::vector<double>& want, double abs, double rel) {
  double worst = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double tol = std::max(abs + (rel + StorageUnit(got.t)) * std::fabs(want[i]), 1e-30);
    worst = std::max(worst, std::fabs(got.at(i) - want[i]) / tol);
  }
  return worst;
}
double WorstRatio(const std::vector<float>& got, const std::vector<double>& want, double abs, double rel) {
  double worst = 0;
  for (size_t i = 0; i < want.size(); ++i)
    worst = std::max(worst, std::fabs(got[i] - want[i]) / std::max(abs + rel * std::fabs(want[i]), 1e-30));
  return worst;
}

// Over the reals: |act'| and |act''|. GELU, either form: act' = Φ(x) + xφ(x) peaks at 1.1289 (x = √2),
// act'' = φ(x)(2 − x²) at 2φ(0) = 0.7979 (the tanh form within 1e-4 of both). ReLU: act' is 0 or 1 and
// act'' 0 away from 0 (rounding keeps a sign, so act' of a rounded input is act' of the exact one); none:
// 1 and 0.
double ActGradMax(Activation a) { return a == Activation::kGeluErf || a == Activation::kGeluTanh ? 1.13 : 1.0; }
double ActCurveMax(Activation a) { return a == Activation::kGeluErf || a == Activation::kGeluTanh ? 0.8 : 0.0; }

bool SameBits(const Tensor& a, const Tensor& b) { return a.bytes == b.bytes; }
bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(TrainMath, ExpTanhErfAgainstDouble) {
  double exp_ulp = 0, tanh_abs = 0, erf_abs = 0, erfc_rel = 0;
  for (int i = 0; i <= 200000; ++i) {
    const float x = -87.0f + 175.0f * static_cast<float>(i) / 200000.0f;
    const double e = std::exp(static_cast<double>(x));
    exp_ulp = std::max(exp_ulp, std::fabs(tm::ExpF(x) - e) /
                                    (std::nextafter(static_cast<float>(e), INFINITY) - static_cast<float>(e)));
    const float u = -10.0f + 20.0f * static_cast<float>(i) / 200000.0f;
    tanh_abs = std::max(tanh_abs, std::fabs(tm::TanhF(u) - std::tanh(static_cast<double>(u))));
    erf_abs = std::max(erf_abs, std::fabs(tm::ErfF(u) - std::erf(static_cast<double>(u))));
    const float v = -4.0f + 8.0f * static_cast<float>(i) / 200000.0f;
    erfc_rel =
        std::max(erfc_rel, std::fabs(tm::ErfcF(v) / std::erfc(static_cast<double>(v)) - 1.0) / (4e-7 + 1.2e-7 * v * v));
  }
  // The bounds train_math.h states.
  EXPECT_LE(exp_ulp, 2.0);
  EXPECT_LE(tanh_abs, 4e-7);
  EXPECT_LE(erf_abs, 3e-7);
  EXPECT_LE(erfc_rel, 1.0);  // relative 4e-7 + 1.2e-7·x² (-x² rounds at 2^-24·x²)
  EXPECT_EQ(tm::ExpF(0.0f), 1.0f);
  EXPECT_EQ(tm::TanhF(20.0f), 1.0f);
  EXPECT_EQ(tm::ErfF(-6.0f), -1.0f);
}

struct Case {
  DType t;
  Activation act;
  float p;
  size_t rows, cols;
};

class LnActDropoutTest : public ::testing::TestWithParam<Case> {};

TEST_P(LnActDropoutTest, MatchesFp64OracleAndUnfusedSequence) {
  const Case c = GetParam();
  std::mt19937_64 rng(0x5eed0000 + c.rows * 131 + c.cols + static_cast<int>(c.act) * 7 + static_cast<int>(c.t));
  const size_t n = c.rows * c.cols;
  const Tensor x = Random(c.t, n, rng, 2.0f, 0.5f);
  const Tensor dy = Random(c.t, n, rng, 1.0f);
  const std::vector<float> gamma = RandomF(c.cols, rng, 1.0f, 0.3f), beta = RandomF(c.cols, rng, 0.0f, 0.5f);
  const float eps = 1e-5f;
  const DropoutArgs d{c.p, 1234, 77};

  Tensor y(c.t, n), dx(c.t, n);
  std::vector<float> mean(c.rows), rstd(c.rows), dgamma(c.cols), dbeta(c.cols);
  std::vector<float> ws(TrainWorkspaceBytes(c.rows, c.cols, MemoryKind::kHost) / sizeof(float));
  cpu::LnActDropoutForward(c.t, c.rows, c.cols, c.act, d, x.bytes.data(), gamma.data(), beta.data(), eps, y.data(),
                           mean.data(), rstd.data(), nullptr);
  cpu::LnActDropoutBackward(c.t, c.rows, c.cols, c.act, d, dy.bytes.data(), x.bytes.data(), gamma.data(), beta.data(),
                            mean.data(), rstd.data(), dx.data(), dgamma.data(), dbeta.data(), ws.data(), nullptr);

  // Against fp64. fp32 work: statistics summed over cols terms (relative error ~ cols/32 · 2^-24 at
  // worst in lanes, far less in practice), the exp/erf/tanh bounds of train_math.h (<= 4e-7 absolute,
  // amplified by |x| <= ~8 here), one rounding per op: 2e-5 relative + 2e-6 absolute covers it with room;
  // a wrong formula is off by O(1). dx is a difference of terms ~rstd·|g|: absolute 2e-5 · max|dx|.
  const Oracle o = LnActDropoutD(c.rows, c.cols, c.act, d, x, gamma, beta, eps, dy);
  double dx_scale = 0, dg_scale = 0;
  for (double v : o.dx) dx_scale = std::max(dx_scale, std::fabs(v));
  for (size_t j = 0; j < c.cols; ++j) dg_scale = std::max({dg_scale, std::fabs(o.dgamma[j]), std::fabs(o.dbeta[j])});
  EXPECT_LE(WorstRatio(y, o.y, 2e-6, 2e-5), 1.0);
  EXPECT_LE(WorstRatio(dx, o.dx, 2e-5 * dx_scale, 2e-5), 1.0);
  // Column sums over rows (each term already carries the errors above): relative to the largest.
  EXPECT_LE(WorstRatio(dgamma, o.dgamma, 1e-4 * dg_scale, 1e-4), 1.0);
  EXPECT_LE(WorstRatio(dbeta, o.dbeta, 1e-4 * dg_scale, 1e-4), 1.0);

  // Unfused: LayerNorm, activation, dropout, each stored in dtype; backward in reverse.
  Tensor y1(c.t, n), y2(c.t, n), y3(c.t, n), g1(c.t, n), g2(c.t, n), dx_u(c.t, n);
  std::vector<float> mean_u(c.rows), rstd_u(c.rows), dgamma_u(c.cols), dbeta_u(c.cols);
  cpu::LayerNormForward(c.t, c.rows, c.cols, x.bytes.data(), gamma.data(), beta.data(), eps, y1.data(), mean_u.data(),
                        rstd_u.data(), nullptr);
  cpu::BiasActForward(c.t, c.rows, c.cols, c.act, y1.data(), nullptr, y2.data(), nullptr);
  cpu::Dropout(c.t, n, d, y2.data(), y3.data(), nullptr);
  cpu::Dropout(c.t, n, d, dy.bytes.data(), g1.data(), nullptr);
  cpu::BiasActBackward(c.t, c.rows, c.cols, c.act, g1.data(), y1.data(), nullptr, g2.data(), nullptr, nullptr, nullptr);
  cpu::LayerNormBackward(c.t, c.rows, c.cols, g2.data(), x.bytes.data(), gamma.data(), mean_u.data(), rstd_u.data(),
                         dx_u.data(), dgamma_u.data(), dbeta_u.data(), ws.data(), nullptr);
  EXPECT_TRUE(SameBits(mean, mean_u));
  EXPECT_TRUE(SameBits(rstd, rstd_u));
  if (c.t == DType::kFloat32) {
    EXPECT_TRUE(SameBits(y, y3));
    EXPECT_TRUE(SameBits(dx, dx_u));
    EXPECT_TRUE(SameBits(dgamma, dgamma_u));
    EXPECT_TRUE(SameBits(dbeta, dbeta_u));
  } else {
    // Two extra roundings to dtype in between (LayerNorm's output, the activation's): the first moves
    // z by a half-ulp of |z| (<= ~6 here), which act' (<= 1.13) and the dropout scale (<= 1.34) carry
    // to y: 8 half-ulps absolute, plus the last rounding's.
    EXPECT_LE(WorstRatio(y3, o.y, 8 * StorageUnit(c.t), 2e-5 + 2 * StorageUnit(c.t)), 1.0);
    // Backward, to first order in u (a half-ulp, relative): g1 = dropout(dy) rounded (|Δ| <= u·|g1|),
    // g2 = act'(z rounded) · g1 rounded, then rounded: |Δg2| <= e = u·|g1|·(2·|act'|max + |act''|max·|z|).
    // LayerNorm's backward, dx_i = rstd·(γ_i·g2_i − mean_j γ_j·g2_j − x̂_i·mean_j γ_j·g2_j·x̂_j), carries
    // e to dx as rstd·(|γ_i|·e_i + mean_j |γ_j|·e_j + |x̂_i|·mean_j |γ_j|·e_j·|x̂_j|); dβ_j and dγ_j, sums
    // of g2 and g2·x̂ over rows, as Σ_i e_ij and Σ_i e_ij·|x̂_ij|. The fp32 work's own error as above.
    const double u = StorageUnit(c.t), scale = c.p > 0 ? 1.0 / (1.0 - c.p) : 1.0;
    const double a1 = ActGradMax(c.act), a2 = ActCurveMax(c.act);
    double worst_dx = 0, worst_dg = 0, worst_db = 0;
    std::vector<double> sum_dg(c.cols, 0.0), sum_db(c.cols, 0.0);
    for (size_t r = 0; r < c.rows; ++r) {
      std::vector<double> e(c.cols), xh(c.cols);
      double mean_e = 0, mean_ex = 0;
      for (size_t j = 0; j < c.cols; ++j) {
        const size_t at = r * c.cols + j;
        xh[j] = std::fabs((x.at(at) - mean[r]) * static_cast<double>(rstd[r]));
        const double z = std::fabs(xh[j] * gamma[j]) + std::fabs(beta[j]);
        e[j] = u * std::fabs(dy.at(at)) * scale * (2 * a1 + a2 * z) * 1.01;  // 1.01: the second-order terms
        mean_e += std::fabs(gamma[j]) * e[j] / static_cast<double>(c.cols);
        mean_ex += std::fabs(gamma[j]) * e[j] * xh[j] / static_cast<double>(c.cols);
        sum_db[j] += e[j];
        sum_dg[j] += e[j] * xh[j];
      }
      for (size_t j = 0; j < c.cols; ++j) {
        const size_t at = r * c.cols + j;
        const double bound = rstd[r] * (std::fabs(gamma[j]) * e[j] + mean_e + xh[j] * mean_ex);
        const double tol = 2e-5 * dx_scale + (2e-5 + u) * std::fabs(o.dx[at]) + bound;
        worst_dx = std::max(worst_dx, std::fabs(dx_u.at(at) - o.dx[at]) / tol);
      }
    }
    for (size_t j = 0; j < c.cols; ++j) {
      worst_dg = std::max(worst_dg, std::fabs(dgamma_u[j] - o.dgamma[j]) /
                                        (1e-4 * dg_scale + 1e-4 * std::fabs(o.dgamma[j]) + sum_dg[j]));
      worst_db = std::max(
          worst_db, std::fabs(dbeta_u[j] - o.dbeta[j]) / (1e-4 * dg_scale + 1e-4 * std::fabs(o.dbeta[j]) + sum_db[j]));
    }
    EXPECT_LE(worst_dx, 1.0);
    EXPECT_LE(worst_dg, 1.0);
    EXPECT_LE(worst_db, 1.0);
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, LnActDropoutTest,
                         ::testing::Values(Case{DType::kFloat32, Activation::kGeluErf, 0.1f, 7, 33},
                                           Case{DType::kFloat32, Activation::kGeluTanh, 0.0f, 64, 1024},
                                           Case{DType::kFloat32, Activation::kRelu, 0.25f, 70, 1600},
                                           Case{DType::kFloat32, Activation::kNone, 0.1f, 33, 96},
                                           Case{DType::kFloat16, Activation::kGeluErf, 0.1f, 40, 1024},
                                           Case{DType::kFloat16, Activation::kRelu, 0.0f, 9, 1601},
                                           Case{DType::kBFloat16, Activation::kGeluTanh, 0.1f, 65, 768},
                                           Case{DType::kBFloat16, Activation::kNone, 0.0f, 3, 4096},
                                           // Rows shorter than a 32-lane pass and than a Philox group of 4.
                                           Case{DType::kFloat32, Activation::kGeluErf, 0.3f, 5, 3},
                                           Case{DType::kFloat16, Activation::kGeluTanh, 0.1f, 2, 31},
                                           Case{DType::kBFloat16, Activation::kRelu, 0.25f, 9, 2}));

TEST(TrainKernels, EmptyShapesWriteNothingButZeroColumnGradients) {
  std::vector<float> x(8, 1.0f), y(8, 7.0f), mean(4, 7.0f), rstd(4, 7.0f), gamma(4, 1.0f), beta(4, 0.0f);
  std::vector<float> dg(4, 7.0f), db(4, 7.0f), ws(64);
  // cols 0: no element, no statistic written.
  cpu::LnActDropoutForward(DType::kFloat32, 4, 0, Activation::kRelu, {0.1f, 1, 0}, x.data(), gamma.data(), beta.data(),
                           1e-5f, y.data(), mean.data(), rstd.data(), nullptr);
  EXPECT_EQ(mean, std::vector<float>(4, 7.0f));
  EXPECT_EQ(rstd, std::vector<float>(4, 7.0f));
  // rows 0: the column gradients are sums over no rows.
  cpu::LnActDropoutBackward(DType::kFloat32, 0, 4, Activation::kRelu, {0.1f, 1, 0}, x.data(), x.data(), gamma.data(),
                            beta.data(), mean.data(), rstd.data(), y.data(), dg.data(), db.data(), ws.data(), nullptr);
  EXPECT_EQ(dg, std::vector<float>(4, 0.0f));
  EXPECT_EQ(db, std::vector<float>(4, 0.0f));
  std::vector<float> dbias(4, 7.0f);
  cpu::BiasActBackward(DType::kFloat32, 0, 4, Activation::kRelu, x.data(), x.data(), gamma.data(), y.data(),
                       dbias.data(), ws.data(), nullptr);
  EXPECT_EQ(dbias, std::vector<float>(4, 0.0f));
  EXPECT_EQ(y, std::vector<float>(8, 7.0f));
}

TEST(BiasAct, ForwardBackwardAgainstFp64AndSplitSequence) {
  std::mt19937_64 rng(91);
  for (DType t : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
    for (Activation act : {Activation::kRelu, Activation::kGeluErf, Activation::kGeluTanh}) {
      const size_t rows = 77, cols = 1000, n = rows * cols;
      const Tensor x = Random(t, n, rng, 2.0f), dy = Random(t, n, rng, 1.0f);
      const std::vector<float> bias = RandomF(cols, rng, 0.0f, 1.0f);
      Tensor y(t, n), dx(t, n);
      std::vector<float> dbias(cols), ws(TrainWorkspaceBytes(rows, cols, MemoryKind::kHost) / sizeof(float));
      cpu::BiasActForward(t, rows, cols, act, x.bytes.data(), bias.data(), y.data(), nullptr);
      cpu::BiasActBackward(t, rows, cols, act, dy.bytes.data(), x.bytes.data(), bias.data(), dx.data(), dbias.data(),
                           ws.data(), nullptr);
      std::vector<double> y_d(n), dx_d(n), db_d(cols, 0.0);
      for (size_t e = 0; e < n; ++e) {
        const double h = static_cast<double>(static_cast<float>(x.at(e) + bias[e % cols]));  // fp32 add, as ours
        y_d[e] = ActD(act, h);
        dx_d[e] = dy.at(e) * ActGradD(act, h);
        db_d[e % cols] += dx_d[e];
      }
      double db_scale = 0;
      for (double v : db_d) db_scale = std::max(db_scale, std::fabs(v));
      SCOPED_TRACE(std::string(DTypeName(t)) + " " + ActivationName(act));
      EXPECT_LE(WorstRatio(y, y_d, 2e-6, 2e-5), 1.0);
      EXPECT_LE(WorstRatio(dx, dx_d, 2e-6, 2e-5), 1.0);
      EXPECT_LE(WorstRatio(dbias, db_d, 1e-4 * db_scale, 1e-4), 1.0);
      // Unfused: bias add (act none), then the activation; backward: activation, then the bias sums.
      Tensor h(t, n), y_u(t, n), g(t, n), dx_u(t, n);
      std::vector<float> dbias_u(cols);
      cpu::BiasActForward(t, rows, cols, Activation::kNone, x.bytes.data(), bias.data(), h.data(), nullptr);
      cpu::BiasActForward(t, rows, cols, act, h.data(), nullptr, y_u.data(), nullptr);
      cpu::BiasActBackward(t, rows, cols, act, dy.bytes.data(), h.data(), nullptr, g.data(), nullptr, nullptr, nullptr);
      cpu::BiasActBackward(t, rows, cols, Activation::kNone, g.data(), h.data(), bias.data(), dx_u.data(),
                           dbias_u.data(), ws.data(), nullptr);
      if (t == DType::kFloat32) {
        EXPECT_TRUE(SameBits(y, y_u));
        EXPECT_TRUE(SameBits(dx, dx_u));
        EXPECT_TRUE(SameBits(dbias, dbias_u));
      } else {
        // h = x + bias rounded (|Δh| <= u·|h|): y = act(h) rounded is off by |act'|max·u·|h| + u·|y|;
        // g = dy·act'(h) rounded by |dy|·|act''|max·u·|h| + u·|g| (dx is g, stored as is); dbias sums g
        // over rows, those errors with it. The fp32 work's own error as above; 1.01 for second order.
        const double u = StorageUnit(t), a1 = ActGradMax(act), a2 = ActCurveMax(act);
        double worst_y = 0, worst_dx = 0, worst_db = 0;
        std::vector<double> sum_e(cols, 0.0);
        for (size_t e = 0; e < n; ++e) {
          const double h = std::fabs(x.at(e) + bias[e % cols]);
          const double ey = 1.01 * u * (a1 * h + std::fabs(y_d[e]));
          const double eg = 1.01 * u * (std::fabs(dy.at(e)) * a2 * h + std::fabs(dx_d[e]));
          sum_e[e % cols] += eg;
          worst_y = std::max(worst_y, std::fabs(y_u.at(e) - y_d[e]) / (2e-6 + 2e-5 * std::fabs(y_d[e]) + ey));
          worst_dx = std::max(worst_dx, std::fabs(dx_u.at(e) - dx_d[e]) / (2e-6 + 2e-5 * std::fabs(dx_d[e]) + eg));
        }
        for (size_t j = 0; j < cols; ++j)
          worst_db = std::max(
              worst_db, std::fabs(dbias_u[j] - db_d[j]) / (1e-4 * db_scale + 1e-4 * std::fabs(db_d[j]) + sum_e[j]));
        EXPECT_LE(worst_y, 1.0);
        EXPECT_LE(worst_dx, 1.0);
        EXPECT_LE(worst_db, 1.0);
      }
    }
  }
}

TEST(AddLayerNorm, FusedEqualsAddThenLayerNormInEveryDtype) {
  std::mt19937_64 rng(17);
  for (DType t : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
    const size_t rows = 50, cols = 1024, n = rows * cols;
    const Tensor x = Random(t, n, rng, 1.0f), res = Random(t, n, rng, 3.0f, 1.0f), dy = Random(t, n, rng);
    const Tensor dsum = Random(t, n, rng, 0.5f);
    const std::vector<float> gamma = RandomF(cols, rng, 1.0f, 0.2f), beta = RandomF(cols, rng, 0.0f, 0.2f);
    Tensor sum(t, n), y(t, n), dx(t, n), sum_u(t, n), y_u(t, n), dx_u(t, n);
    std::vector<float> mean(rows), rstd(rows), dg(cols), db(cols), mean_u(rows), rstd_u(rows), dg_u(cols), db_u(cols);
    std::vector<float> ws(TrainWorkspaceBytes(rows, cols, MemoryKind::kHost) / sizeof(float));
    cpu::AddLayerNormForward(t, rows, cols, x.bytes.data(), res.bytes.data(), gamma.data(), beta.data(), 1e-5f,
                             sum.data(), y.data(), mean.data(), rstd.data(), nullptr);
    cpu::AddLayerNormBackward(t, rows, cols, dy.bytes.data(), dsum.bytes.data(), sum.data(), gamma.data(), mean.data(),
                              rstd.data(), dx.data(), dg.data(), db.data(), ws.data(), nullptr);
    cpu::AddTensors(t, n, x.bytes.data(), res.bytes.data(), sum_u.data(), nullptr);
    cpu::LayerNormForward(t, rows, cols, sum_u.data(), gamma.data(), beta.data(), 1e-5f, y_u.data(), mean_u.data(),
                          rstd_u.data(), nullptr);
    Tensor dln(t, n);
    std::vector<float> dln32(n);
    cpu::LayerNormBackward(t, rows, cols, dy.bytes.data(), sum_u.data(), gamma.data(), mean_u.data(), rstd_u.data(),
                           dln.data(), dg_u.data(), db_u.data(), ws.data(), nullptr);
    cpu::AddTensors(t, n, dln.data(), dsum.bytes.data(), dx_u.data(), nullptr);
    SCOPED_TRACE(DTypeName(t));
    // The sum is stored in dtype and LayerNorm reads it as stored: forward identical in every dtype.
    EXPECT_TRUE(SameBits(sum, sum_u));
    EXPECT_TRUE(SameBits(y, y_u));
    EXPECT_TRUE(SameBits(mean, mean_u));
    EXPECT_TRUE(SameBits(dg, dg_u));
    EXPECT_TRUE(SameBits(db, db_u));
    if (t == DType::kFloat32) {
      EXPECT_TRUE(SameBits(dx, dx_u));
    } else {
      // Unfused rounds LayerNorm's gradient to dtype before adding dsum: one extra rounding.
      std::vector<double> want(n);
      for (size_t e = 0; e < n; ++e) want[e] = dx_u.at(e);
      EXPECT_LE(WorstRatio(dx, want, 4 * StorageUnit(t) * 4, 2 * StorageUnit(t)), 1.0);
    }
  }
}

TEST(TrainKernels, ResultsDoNotDependOnTheThreadCount) {
  std::mt19937_64 rng(5);
  const size_t rows = 300, cols = 1024, n = rows * cols;  // 10 gradient chunks, rows split among threads
  const Tensor x = Random(DType::kBFloat16, n, rng), dy = Random(DType::kBFloat16, n, rng);
  const std::vector<float> gamma = RandomF(cols, rng, 1.0f, 0.2f), beta = RandomF(cols, rng, 0.0f, 0.2f);
  const DropoutArgs d{0.1f, 9, 3};
  std::vector<std::vector<uint8_t>> outs;
  const int before = ParallelThreads();
  for (int threads : {1, 2, 3}) {
    SetParallelThreads(threads);
    Tensor y(DType::kBFloat16, n), dx(DType::kBFloat16, n);
    std::vector<float> mean(rows), rstd(rows), dg(cols), db(cols),
        ws(TrainWorkspaceBytes(rows, cols, MemoryKind::kHost) / 4);
    cpu::LnActDropoutForward(DType::kBFloat16, rows, cols, Activation::kGeluErf, d, x.bytes.data(), gamma.data(),
                             beta.data(), 1e-5f, y.data(), mean.data(), rstd.data(), nullptr);
    cpu::LnActDropoutBackward(DType::kBFloat16, rows, cols, Activation::kGeluErf, d, dy.bytes.data(), x.bytes.data(),
                              gamma.data(), beta.data(), mean.data(), rstd.data(), dx.data(), dg.data(), db.data(),
                              ws.data(), nullptr);
    std::vector<uint8_t> all = y.bytes;
    all.insert(all.end(), dx.bytes.begin(), dx.bytes.end());
    const auto* g = reinterpret_cast<const uint8_t*>(dg.data());
    all.insert(all.end(), g, g + cols * 4);
    outs.push_back(all);
  }
  SetParallelThreads(before);
  EXPECT_EQ(outs[0], outs[1]);
  EXPECT_EQ(outs[0], outs[2]);
}

// The oracle's bits, pinned: every fused and single-op kernel's outputs (forward, backward with and without
// column gradients) over every dtype, activation and dropout setting, at widths below, at and above a
// 32-lane block, hashed (FNV-1a) into one digest recorded here. The CUDA twin must give these same bits
// (tests/gpu/train_kernels_test.cc), but only a lent GPU runs that: here a change to the CPU kernels that
// moves any bit (a sum reordered, a product contracted, a clone that computes differently) fails. When a
// change means to move them, the GPU comparison has to pass again before the digest is re-recorded.
TEST(TrainKernels, OutputBitsAreTheRecordedOnes) {
  // One digest per kernel and pass (a failure shows which moved), each over every dtype and setting.
  std::map<std::string, uint64_t> digests;
  std::string at;  // the kernel the next mix() belongs to
  auto mix = [&](const void* p, size_t n) {
    uint64_t& h = digests.try_emplace(at, 1469598103934665603ull).first->second;
    for (size_t i = 0; i < n; ++i) {
      h ^= static_cast<const uint8_t*>(p)[i];
      h *= 1099511628211ull;
    }
  };
  // Inputs from integer hashes (no <random> distribution: those differ between standard libraries).
  auto value = [](size_t i, uint64_t salt) {
    const uint64_t k = (i + 1) * 0x9e3779b97f4a7c15ull ^ salt;
    return static_cast<float>(static_cast<int>((k >> 40) % 4001) - 2000) / 1000.0f;
  };
  const size_t rows = 70;  // 3 gradient chunks, the last partial
  for (size_t cols : {7u, 96u, 1030u}) {
    for (DType t : {DType::kFloat32, DType::kBFloat16, DType::kFloat16}) {
      const size_t n = rows * cols;
      Tensor x(t, n), dy(t, n), res(t, n);
      for (size_t i = 0; i < n; ++i) {
        x.set(i, value(i, 1));
        dy.set(i, value(i, 2));
        res.set(i, value(i, 3));
      }
      std::vector<float> gamma(cols), beta(cols);
      for (size_t j = 0; j < cols; ++j) {
        gamma[j] = 1.0f + value(j, 4) / 4;
        beta[j] = value(j, 5) / 4;
      }
      for (Activation act : {Activation::kNone, Activation::kRelu, Activation::kGeluTanh, Activation::kGeluErf}) {
        for (float p : {0.0f, 0.1f}) {
          const DropoutArgs d{p, 1234, 77};
          Tensor y(t, n), sum(t, n), dx(t, n);
          std::vector<float> mean(rows), rstd(rows), dg(cols), db(cols),
              ws(TrainWorkspaceBytes(rows, cols, MemoryKind::kHost) / 4);
          auto mix_grads = [&] {
            mix(dx.data(), dx.bytes.size());
            mix(dg.data(), cols * 4);
            mix(db.data(), cols * 4);
          };
          at = "ln-act-dropout forward";
          cpu::LnActDropoutForward(t, rows, cols, act, d, x.data(), gamma.data(), beta.data(), 1e-5f, y.data(),
                                   mean.data(), rstd.data(), nullptr);
          mix(y.data(), y.bytes.size());
          mix(mean.data(), rows * 4);
          mix(rstd.data(), rows * 4);
          at = "ln-act-dropout backward";
          cpu::LnActDropoutBackward(t, rows, cols, act, d, dy.data(), x.data(), gamma.data(), beta.data(), mean.data(),
                                    rstd.data(), dx.data(), dg.data(), db.data(), ws.data(), nullptr);
          mix_grads();
          at = "ln-act-dropout backward, no column gradients";
          cpu::LnActDropoutBackward(t, rows, cols, act, d, dy.data(), x.data(), gamma.data(), beta.data(), mean.data(),
                                    rstd.data(), dx.data(), nullptr, nullptr, nullptr, nullptr);
          mix(dx.data(), dx.bytes.size());
          at = "bias-act forward";
          cpu::BiasActForward(t, rows, cols, act, x.data(), beta.data(), y.data(), nullptr);
          mix(y.data(), y.bytes.size());
          at = "bias-act backward";
          cpu::BiasActBackward(t, rows, cols, act, dy.data(), x.data(), beta.data(), dx.data(), db.data(), ws.data(),
                               nullptr);
          mix(dx.data(), dx.bytes.size());
          mix(db.data(), cols * 4);
          if (act != Activation::kNone) continue;
          at = "dropout";
          cpu::Dropout(t, n, d, x.data(), y.data(), nullptr);
          mix(y.data(), y.bytes.size());
          if (p != 0.0f) continue;
          at = "add-ln forward";
          cpu::AddLayerNormForward(t, rows, cols, x.data(), res.data(), gamma.data(), beta.data(), 1e-5f, sum.data(),
                                   y.data(), mean.data(), rstd.data(), nullptr);
          mix(sum.data(), sum.bytes.size());
          mix(y.data(), y.bytes.size());
          at = "add-ln backward";
          cpu::AddLayerNormBackward(t, rows, cols, dy.data(), res.data(), sum.data(), gamma.data(), mean.data(),
                                    rstd.data(), dx.data(), dg.data(), db.data(), ws.data(), nullptr);
          mix_grads();
          at = "add-ln backward, no column gradients";
          cpu::AddLayerNormBackward(t, rows, cols, dy.data(), res.data(), sum.data(), gamma.data(), mean.data(),
                                    rstd.data(), dx.data(), nullptr, nullptr, nullptr, nullptr);
          mix(dx.data(), dx.bytes.size());
          at = "layernorm forward";
          cpu::LayerNormForward(t, rows, cols, x.data(), gamma.data(), beta.data(), 1e-5f, y.data(), mean.data(),
                                rstd.data(), nullptr);
          mix(y.data(), y.bytes.size());
          at = "layernorm backward";
          cpu::LayerNormBackward(t, rows, cols, dy.data(), x.data(), gamma.data(), mean.data(), rstd.data(), dx.data(),
                                 dg.data(), db.data(), ws.data(), nullptr);
          mix_grads();
          at = "add";
          cpu::AddTensors(t, n, x.data(), res.data(), y.data(), nullptr);
          mix(y.data(), y.bytes.size());
        }
      }
    }
  }
  std::string got;
  for (const auto& [kernel, h] : digests) got += fmt::format("{}: {:016x}\n", kernel, h);
  EXPECT_EQ(got,
            "add: fd0c39e77fb1569c\n"
            "add-ln backward: 853f9435a1026ac3\n"
            "add-ln backward, no column gradients: 07f17e1c0fb2f1c1\n"
            "add-ln forward: 9f1b6574c5ec22e6\n"
            "bias-act backward: 49b6b3403244e1b7\n"
            "bias-act forward: ebdc5534fe06b3db\n"
            "dropout: 9894c81436ae504e\n"
            "layernorm backward: 026089046cc36266\n"
            "layernorm forward: 91dde3b971fdbe3e\n"
            "ln-act-dropout backward: 8856da964b52a48b\n"
            "ln-act-dropout backward, no column gradients: 9476952716ba8c95\n"
            "ln-act-dropout forward: 032f39843c4761c5\n");
}

TEST(Dropout, OneMaskFromSeedAndOffsetInForwardAndBackward) {
  const size_t rows = 200, cols = 5000, n = rows * cols;
  std::mt19937_64 rng(44);
  const Tensor x = Random(DType::kFloat32, n, rng, 1.0f, 3.0f);  // mean 3: ReLU rarely zeroes
  const std::vector<float> gamma(cols, 1.0f), beta(cols, 5.0f);  // z < 0 (ReLU's zeros) 5 sigma out
  for (float p : {0.1f, 0.5f}) {
    const DropoutArgs d{p, 2024, 5};
    std::vector<uint8_t> keep(n);
    DropoutMask(d, n, keep.data());
    size_t kept = 0;
    for (uint8_t k : keep) kept += k;
    const double expect = (1.0 - p) * n, sigma = std::sqrt(n * p * (1.0 - p));
    EXPECT_LE(std::fabs(kept - expect), 5 * sigma) << "p " << p << " kept " << kept;

    Tensor y(DType::kFloat32, n), ones(DType::kFloat32, n), g(DType::kFloat32, n), dx(DType::kFloat32, n);
    std::vector<float> mean(rows), rstd(rows), dg(cols), db(cols),
        ws(TrainWorkspaceBytes(rows, cols, MemoryKind::kHost) / 4);
    for (size_t e = 0; e < n; ++e) ones.set(e, 1.0f);
    cpu::LnActDropoutForward(DType::kFloat32, rows, cols, Activation::kRelu, d, x.bytes.data(), gamma.data(),
                             beta.data(), 1e-5f, y.data(), mean.data(), rstd.data(), nullptr);
    cpu::Dropout(DType::kFloat32, n, d, ones.data(), g.data(), nullptr);
    const float scale = 1.0f / (1.0f - p);
    size_t forward_mismatch = 0, backward_mismatch = 0, relu_zero = 0;
    for (size_t e = 0; e < n; ++e) {
      if (!keep[e] && y.at(e) != 0.0f) ++forward_mismatch;
      if (keep[e] && y.at(e) == 0.0f) ++relu_zero;
      if (g.at(e) != (keep[e] ? scale : 0.0f)) ++backward_mismatch;
    }
    EXPECT_EQ(forward_mismatch, 0u);
    EXPECT_EQ(backward_mismatch, 0u);
    EXPECT_LT(relu_zero, n / 1000);  // kept elements are (almost all) non-zero: the mask is visible in y
    // The fused backward with act none and a unit upstream gradient: dbeta counts the kept elements.
    cpu::LnActDropoutBackward(DType::kFloat32, rows, cols, Activation::kNone, d, ones.data(), x.bytes.data(),
                              gamma.data(), beta.data(), mean.data(), rstd.data(), dx.data(), dg.data(), db.data(),
                              ws.data(), nullptr);
    for (size_t j = 0; j < cols; j += 997) {
      size_t col_kept = 0;
      for (size_t r = 0; r < rows; ++r) col_kept += keep[r * cols + j];
      EXPECT_NEAR(db[j], col_kept * scale, 1e-3) << "column " << j;
    }
    // Another offset: another mask; the same (seed, offset): the same one whatever the call.
    std::vector<uint8_t> other(n), again(n);
    DropoutMask({p, 2024, 6}, n, other.data());
    DropoutMask(d, n, again.data());
    EXPECT_NE(keep, other);
    EXPECT_EQ(keep, again);
  }
}

TEST(TrainKernels, RefusesOtherDtypesAndActivations) {
  float x = 1, y = 0;
  EXPECT_THROW(cpu::AddTensors(DType::kInt32, 1, &x, &x, &y, nullptr), UsageError);
  EXPECT_THROW(ParseActivation("swish"), UsageError);
  EXPECT_EQ(ParseActivation("gelu"), Activation::kGeluErf);
  EXPECT_STREQ(ActivationName(ParseActivation("gelu-tanh")), "gelu-tanh");
  // On the host the column partials alone; on a device dz and the row means too.
  EXPECT_EQ(TrainWorkspaceBytes(33, 10, MemoryKind::kHost), 2 * 2 * 10 * sizeof(float));
  EXPECT_EQ(TrainWorkspaceBytes(33, 10, MemoryKind::kDevice), (2 * 2 * 10 + 33 * 10 + 2 * 33) * sizeof(float));
  EXPECT_THROW(TrainWorkspaceBytes(SIZE_MAX / 8, 8, MemoryKind::kHost), UsageError);
}

// kernels/cpu/train.cc converts fp16/bf16 rows with its own branch-free (vectorising) code: it must give
// the bits of qm::HalfToFloat / Bf16ToFloat for every 16-bit pattern and of qm::FloatToHalf / FloatToBf16
// for every fp32 class: ±0, subnormals, both sides of fp16's subnormal/normal boundary and of 65520
// (overflow to inf), inf, NaNs with any payload, and every rounding position with its ties (even and
// odd) and their neighbours. Seen through the kernels' outputs, in vectorised loops; the kernels' fp32
// arithmetic quiets a signalling NaN before it is stored, so the stores see quiet ones only.
TEST(TrainMath, BranchFreeConversionsMatchQm) {
  for (DType t : {DType::kFloat16, DType::kBFloat16}) {
    SCOPED_TRACE(DTypeName(t));
    const bool half = t == DType::kFloat16;
    // Loads: dbias of a one-row BiasActBackward (act none) is 0 + 1·load(dy[j]), the loaded value, with
    // -0 coming out +0 (compared by value) and a signalling NaN quieted by the arithmetic (its payload
    // compared with the quiet bit set); dx is the load stored back.
    {
      const size_t cols = 65536;
      Tensor dy(t, cols), x(t, cols), dx(t, cols);
      for (size_t h = 0; h < cols; ++h) std::memcpy(dy.bytes.data() + 2 * h, &h, 2);
      std::vector<float> dbias(cols), workspace(TrainWorkspaceBytes(1, cols, MemoryKind::kHost) / sizeof(float));
      cpu::BiasActBackward(t, 1, cols, Activation::kNone, dy.data(), x.data(), nullptr, dx.data(), dbias.data(),
                           workspace.data(), nullptr);
      size_t bad = 0;
      for (size_t h = 0; h < cols; ++h) {
        const auto b = static_cast<uint16_t>(h);
        const float want = half ? qm::HalfToFloat(b) : qm::Bf16ToFloat(b);
        const uint32_t got = qm::Bits(dbias[h]);
        const bool ok = want == 0.0f ? dbias[h] == 0.0f
                                     : got == qm::Bits(want) || (want != want && got == (qm::Bits(want) | 0x400000u));
        uint16_t back;
        std::memcpy(&back, dx.bytes.data() + 2 * h, 2);
        const uint16_t want_back = half ? qm::FloatToHalf(want) : qm::FloatToBf16(want);
        if ((!ok || back != want_back) && bad++ < 5)
          ADD_FAILURE() << "load 0x" << std::hex << h << ": 0x" << got << ", stored back 0x" << back;
      }
      EXPECT_EQ(bad, 0u);
    }
    // Stores: y = act_none(-0 + bias) is bias itself (-0 is the identity of +, also for -0 and NaN), so
    // y holds the store of every bias value. Every top half of the fp32 pattern (sign, exponent, 7
    // mantissa bits), each with the low halves k·2^12 - 1, k·2^12, k·2^12 + 1 (the ties and neighbours
    // of every rounding position below bit 16; those above are in the top half) and two random ones.
    {
      std::mt19937_64 rng(16);
      std::vector<float> bias;
      for (uint32_t hi = 0; hi < 65536; ++hi) {
        for (uint32_t k = 0; k < 16; ++k)
          for (uint32_t d : {0xffffu, 0u, 1u}) bias.push_back(qm::Float((hi << 16) | ((k * 0x1000u + d) & 0xffffu)));
        for (int r = 0; r < 2; ++r) bias.push_back(qm::Float((hi << 16) | static_cast<uint32_t>(rng() & 0xffffu)));
      }
      const size_t cols = bias.size();
      Tensor x(t, cols), y(t, cols);
      const uint16_t minus_zero = 0x8000;
      for (size_t j = 0; j < cols; ++j) std::memcpy(x.bytes.data() + 2 * j, &minus_zero, 2);
      cpu::BiasActForward(t, 1, cols, Activation::kNone, x.data(), bias.data(), y.data(), nullptr);
      size_t bad = 0;
      for (size_t j = 0; j < cols; ++j) {
        uint16_t got;
        std::memcpy(&got, y.bytes.data() + 2 * j, 2);
        const uint16_t want = half ? qm::FloatToHalf(bias[j]) : qm::FloatToBf16(bias[j]);
        if (got != want && bad++ < 5)
          ADD_FAILURE() << "store 0x" << std::hex << qm::Bits(bias[j]) << ": 0x" << got << ", want 0x" << want;
      }
      EXPECT_EQ(bad, 0u);
    }
  }
}

}  // namespace
}  // namespace ciuic
