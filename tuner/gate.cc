#include "tuner/gate.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "collectives/backends/local/communicator.h"
#include "collectives/runtime.h"
#include "core/error.h"

namespace ciuic {

namespace {

constexpr int kIn = 20, kHidden = 32, kClasses = 8, kDataset = 4096;

struct Dataset {
  std::vector<float> x;  // kDataset × kIn
  std::vector<int> y;
};

// Inputs from N(0, 1); labels = argmax of a random tanh teacher with 16 hidden units.
Dataset MakeDataset(unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> w1(kIn * 16), w2(16 * kClasses);
  for (float& v : w1) v = normal(rng) / std::sqrt(static_cast<float>(kIn));
  for (float& v : w2) v = normal(rng) / 4.0f;
  Dataset d;
  d.x.resize(static_cast<size_t>(kDataset) * kIn);
  d.y.resize(kDataset);
  for (int n = 0; n < kDataset; ++n) {
    float* x = &d.x[static_cast<size_t>(n) * kIn];
    for (int i = 0; i < kIn; ++i) x[i] = normal(rng);
    float h[16];
    for (int j = 0; j < 16; ++j) {
      float s = 0;
      for (int i = 0; i < kIn; ++i) s += x[i] * w1[static_cast<size_t>(i * 16 + j)];
      h[j] = std::tanh(s);
    }
    int best = 0;
    float best_v = -1e30f;
    for (int c = 0; c < kClasses; ++c) {
      float s = 0;
      for (int j = 0; j < 16; ++j) s += h[j] * w2[static_cast<size_t>(j * kClasses + c)];
      if (s > best_v) {
        best_v = s;
        best = c;
      }
    }
    d.y[static_cast<size_t>(n)] = best;
  }
  return d;
}

// Parameters in one flat buffer: W1 (kIn × kHidden), b1, W2 (kHidden × kClasses), b2.
constexpr size_t kW1 = 0, kB1 = kW1 + kIn * kHidden, kW2 = kB1 + kHidden, kB2 = kW2 + kHidden * kClasses,
                 kParams = kB2 + kClasses;

// Mean cross-entropy over rows [begin, end); with grad != null also accumulates the mean gradient.
double LossAndGrad(const std::vector<float>& p, const Dataset& d, const std::vector<int>& rows, float* grad) {
  double loss = 0;
  if (grad) std::fill(grad, grad + kParams, 0.0f);
  const float inv = 1.0f / static_cast<float>(rows.size());
  for (int n : rows) {
    const float* x = &d.x[static_cast<size_t>(n) * kIn];
    float h[kHidden], z[kClasses];
    for (int j = 0; j < kHidden; ++j) {
      float s = p[kB1 + j];
      for (int i = 0; i < kIn; ++i) s += x[i] * p[kW1 + i * kHidden + j];
      h[j] = std::tanh(s);
    }
    float zmax = -1e30f;
    for (int c = 0; c < kClasses; ++c) {
      float s = p[kB2 + c];
      for (int j = 0; j < kHidden; ++j) s += h[j] * p[kW2 + j * kClasses + c];
      z[c] = s;
      zmax = std::max(zmax, s);
    }
    float sum = 0;
    for (float& v : z) sum += (v = std::exp(v - zmax));
    const int y = d.y[static_cast<size_t>(n)];
    loss -= std::log(std::max(z[y] / sum, 1e-30f));
    if (!grad) continue;
    float dz[kClasses], dh[kHidden] = {};
    for (int c = 0; c < kClasses; ++c) dz[c] = (z[c] / sum - (c == y ? 1.0f : 0.0f)) * inv;
    for (int c = 0; c < kClasses; ++c) {
      grad[kB2 + c] += dz[c];
      for (int j = 0; j < kHidden; ++j) {
        grad[kW2 + j * kClasses + c] += h[j] * dz[c];
        dh[j] += p[kW2 + j * kClasses + c] * dz[c];
      }
    }
    for (int j = 0; j < kHidden; ++j) {
      const float da = dh[j] * (1 - h[j] * h[j]);
      grad[kB1 + j] += da;
      for (int i = 0; i < kIn; ++i) grad[kW1 + i * kHidden + j] += x[i] * da;
    }
  }
  return loss / static_cast<double>(rows.size());
}

double Train(const std::string& name, const GateOptions& o, const Dataset& d) {
  // "codec", or "none@bf16": the transport's own allreduce reducing in 16 bits.
  const size_t at = name.find('@');
  const std::string codec = name.substr(0, at);
  double final_loss = 0;
  RunLocalRanks(o.ranks, [&](Communicator& comm) {
    RuntimeConfig cfg;
    if (at != std::string::npos) {
      cfg.algo.algo = AllReduceAlgo::kNative;
      cfg.algo.precision = ParsePrecision(name.substr(at + 1));
    }
    cfg.algo.codec = ParseCodec(codec);
    cfg.algo.codec.block = 64;
    cfg.bucket_bytes = kParams * 4;
    Runtime rt(comm, cfg);
    std::mt19937 init(o.seed);  // same initial weights on every rank
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> p(kParams), velocity(kParams, 0.0f), grad(kParams);
    for (size_t i = 0; i < kParams; ++i)
      p[i] = (i < kB1) ? normal(init) / std::sqrt(static_cast<float>(kIn))
                       : (i >= kW2 && i < kB2) ? normal(init) / std::sqrt(static_cast<float>(kHidden)) : 0.0f;
    std::mt19937 sampler(o.seed * 131u + static_cast<unsigned>(comm.Rank()));
    std::uniform_int_distribution<int> pick(0, kDataset - 1);
    std::vector<int> rows(static_cast<size_t>(o.batch_per_rank));
    for (int step = 0; step < o.steps; ++step) {
      for (int& r : rows) r = pick(sampler);
      LossAndGrad(p, d, rows, grad.data());
      rt.AllReduce(grad.data(), kParams, 0, /*average=*/true);
      for (size_t i = 0; i < kParams; ++i) {
        velocity[i] = 0.9f * velocity[i] + grad[i];
        p[i] -= 0.05f * velocity[i];
      }
    }
    if (comm.Rank() == 0) {
      std::vector<int> all(kDataset);
      for (int i = 0; i < kDataset; ++i) all[static_cast<size_t>(i)] = i;
      final_loss = LossAndGrad(p, d, all, nullptr);
    }
  });
  return final_loss;
}

}  // namespace

GateResult RunAccuracyGate(const std::string& codec, const GateOptions& o) {
  if (o.ranks < 1 || o.steps < 1 || o.batch_per_rank < 1 || !(o.tolerance >= 0))
    throw UsageError("accuracy gate: ranks, steps and batch must be positive, tolerance >= 0");
  const Dataset d = MakeDataset(o.seed);
  GateResult r;
  r.codec = codec;
  r.baseline_loss = Train("none", o, d);
  r.final_loss = codec == "none" ? r.baseline_loss : Train(codec, o, d);
  r.passed = std::isfinite(r.final_loss) && r.final_loss <= r.baseline_loss * (1 + o.tolerance);
  return r;
}

}  // namespace ciuic
