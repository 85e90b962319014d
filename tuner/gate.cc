#include "tuner/gate.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>
#include <random>
#include <tuple>
#include <vector>

#include <fmt/format.h>

#include "collectives/backends/local/communicator.h"
#include "collectives/runtime.h"
#include "core/error.h"

namespace ciuic {

namespace {

// 64 "pixels" -> 96 ReLU -> 48 ReLU -> 10 classes: 11,386 parameters, three 16 KiB buckets, so each
// bucket mixes layers of different gradient scales as a framework's buckets do.
constexpr int kIn = 64, kH1 = 96, kH2 = 48, kClasses = 10, kPrototypes = 3;
constexpr int kTrain = 2048, kTest = 1024;
constexpr size_t kBucketBytes = 16u << 10;

struct Layer {
  int in, out;
  size_t w, b;  // offsets of W (in × out, row-major by input) and b in the flat parameter buffer
};
constexpr Layer kLayers[] = {
    {kIn, kH1, 0, kIn* kH1},
    {kH1, kH2, kIn* kH1 + kH1, kIn* kH1 + kH1 + kH1* kH2},
    {kH2, kClasses, kIn* kH1 + kH1 + kH1* kH2 + kH2, kIn* kH1 + kH1 + kH1* kH2 + kH2 + kH2* kClasses}};
constexpr size_t kParams = kIn * kH1 + kH1 + kH1 * kH2 + kH2 + kH2 * kClasses + kClasses;

struct Dataset {
  std::vector<float> x;  // (kTrain + kTest) × kIn, the test rows last
  std::vector<int> y;
};

// Each class has kPrototypes prototypes: sparse non-negative "strokes" (about a third of the pixels
// on, intensities in (0, 1]). A sample is a prototype with every pixel jittered, some strokes dropped
// and a few stray pixels set, clipped to [0, 1]: separable by a small network, not linearly trivial.
Dataset MakeDataset(unsigned seed) {
  std::mt19937 rng(seed * 7919u + 17u);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  std::normal_distribution<float> noise(0.0f, 0.25f);
  std::vector<float> proto(static_cast<size_t>(kClasses * kPrototypes * kIn));
  for (float& v : proto) v = u(rng) < 0.33f ? 0.4f + 0.6f * u(rng) : 0.0f;
  Dataset d;
  const int n = kTrain + kTest;
  d.x.resize(static_cast<size_t>(n) * kIn);
  d.y.resize(static_cast<size_t>(n));
  for (int s = 0; s < n; ++s) {
    const int c = static_cast<int>(u(rng) * kClasses) % kClasses;
    const int k = static_cast<int>(u(rng) * kPrototypes) % kPrototypes;
    const float* p = &proto[static_cast<size_t>((c * kPrototypes + k) * kIn)];
    float* x = &d.x[static_cast<size_t>(s) * kIn];
    for (int i = 0; i < kIn; ++i) {
      float v = p[i] > 0 && u(rng) < 0.2f ? 0.0f : p[i];  // a dropped stroke pixel
      if (p[i] == 0 && u(rng) < 0.08f) v = u(rng);        // a stray one
      x[i] = std::clamp(v + noise(rng), 0.0f, 1.0f);
    }
    d.y[static_cast<size_t>(s)] = c;
  }
  return d;
}

// Mean cross-entropy (and with `correct`, the count of right answers) over `rows`; with grad != null
// also the mean gradient.
double LossAndGrad(const std::vector<float>& p, const Dataset& d, const std::vector<int>& rows, float* grad,
                   int* correct = nullptr) {
  double loss = 0;
  if (grad) std::fill(grad, grad + kParams, 0.0f);
  if (correct) *correct = 0;
  const float inv = 1.0f / static_cast<float>(rows.size());
  float a0[kIn], a1[kH1], a2[kH2], z[kClasses];
  float* acts[] = {a0, a1, a2, z};
  float d1[kH1], d2[kH2], dz[kClasses];
  float* deltas[] = {d1, d2, dz};
  for (int n : rows) {
    std::copy_n(&d.x[static_cast<size_t>(n) * kIn], kIn, a0);
    for (int l = 0; l < 3; ++l) {
      const Layer& L = kLayers[l];
      const float* in = acts[l];
      float* out = acts[l + 1];
      for (int j = 0; j < L.out; ++j) out[j] = p[L.b + static_cast<size_t>(j)];
      for (int i = 0; i < L.in; ++i) {
        if (in[i] == 0) continue;
        const float* w = &p[L.w + static_cast<size_t>(i) * static_cast<size_t>(L.out)];
        for (int j = 0; j < L.out; ++j) out[j] += in[i] * w[j];
      }
      if (l < 2)
        for (int j = 0; j < L.out; ++j) out[j] = std::max(out[j], 0.0f);
    }
    const float zmax = *std::max_element(z, z + kClasses);
    float e[kClasses], sum = 0;
    for (int c = 0; c < kClasses; ++c) sum += (e[c] = std::exp(z[c] - zmax));
    const int y = d.y[static_cast<size_t>(n)];
    loss -= std::log(std::max(e[y] / sum, 1e-30f));
    if (correct && std::max_element(z, z + kClasses) - z == y) ++*correct;
    if (!grad) continue;
    for (int c = 0; c < kClasses; ++c) dz[c] = (e[c] / sum - (c == y ? 1.0f : 0.0f)) * inv;
    for (int l = 2; l >= 0; --l) {
      const Layer& L = kLayers[l];
      const float* in = acts[l];
      const float* delta = deltas[l];
      float* back = l > 0 ? deltas[l - 1] : nullptr;
      if (back) std::fill(back, back + L.in, 0.0f);
      for (int j = 0; j < L.out; ++j) grad[L.b + static_cast<size_t>(j)] += delta[j];
      for (int i = 0; i < L.in; ++i) {
        const size_t row = L.w + static_cast<size_t>(i) * static_cast<size_t>(L.out);
        float s = 0;
        for (int j = 0; j < L.out; ++j) {
          grad[row + static_cast<size_t>(j)] += in[i] * delta[j];
          s += p[row + static_cast<size_t>(j)] * delta[j];
        }
        if (back) back[i] = in[i] > 0 ? s : 0.0f;  // ReLU'(input of this layer)
      }
    }
  }
  return loss / static_cast<double>(rows.size());
}

struct Outcome {
  double loss = 0, accuracy = 0;
};

Outcome Train(const std::string& name, const GateOptions& o, double learning_rate, unsigned seed, const Dataset& d) {
  // "codec", or "none@bf16": the transport's own allreduce reducing in 16 bits.
  const size_t at = name.find('@');
  const std::string codec = name.substr(0, at);
  Outcome out;
  RunLocalRanks(o.ranks, [&](Communicator& comm) {
    RuntimeConfig cfg;
    if (at != std::string::npos) {
      cfg.algo.algo = AllReduceAlgo::kNative;
      cfg.algo.precision = ParsePrecision(name.substr(at + 1));
    }
    cfg.algo.codec = ParseCodec(codec);  // the codec's own block size, as a profile runs it
    cfg.bucket_bytes = kBucketBytes;
    Runtime rt(comm, cfg);
    std::mt19937 init(seed);  // the same initial weights on every rank: He-normal, zero biases
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> p(kParams, 0.0f), velocity(kParams, 0.0f), grad(kParams);
    for (const Layer& L : kLayers)
      for (size_t i = 0; i < static_cast<size_t>(L.in) * static_cast<size_t>(L.out); ++i)
        p[L.w + i] = normal(init) * std::sqrt(2.0f / static_cast<float>(L.in));
    std::mt19937 sampler(seed * 131u + static_cast<unsigned>(comm.Rank()));
    std::uniform_int_distribution<int> pick(0, kTrain - 1);
    std::vector<int> rows(static_cast<size_t>(o.batch_per_rank));
    const float lr = static_cast<float>(learning_rate);
    bool finite = true;
    // One optimizer step per `k` micro-batches: the gradients of the micro-batches summed, then
    // averaged over them by the scale below and over the ranks by the runtime.
    const int k = o.accumulation_steps;
    std::vector<float> micro(k > 1 ? kParams : 0);
    for (int step = 0; step + k <= o.steps && finite; step += k) {
      for (int m = 0; m < k; ++m) {
        for (int& r : rows) r = pick(sampler);
        LossAndGrad(p, d, rows, k > 1 ? micro.data() : grad.data());
        if (k == 1) break;
        for (size_t i = 0; i < kParams; ++i) grad[i] = (m == 0 ? 0.0f : grad[i]) + micro[i] / static_cast<float>(k);
      }
      try {
        rt.AllReduce(grad.data(), kParams, 0, /*average=*/true);
      } catch (const InputError&) {  // a non-finite gradient, refused on every rank alike: diverged
        finite = false;
        break;
      }
      for (size_t i = 0; i < kParams; ++i) {
        velocity[i] = 0.9f * velocity[i] + grad[i];
        p[i] -= lr * velocity[i];
      }
      // A diverged run stops here (every rank alike: the parameters are identical); the runtime would
      // refuse the next non-finite gradient anyway.
      finite = std::all_of(p.begin(), p.end(), [](float v) { return std::isfinite(v); });
    }
    if (comm.Rank() == 0) {
      if (!finite) {
        out = {INFINITY, 0.0};
        return;
      }
      std::vector<int> test(kTest);
      for (int i = 0; i < kTest; ++i) test[static_cast<size_t>(i)] = kTrain + i;
      int correct = 0;
      out.loss = LossAndGrad(p, d, test, nullptr, &correct);
      out.accuracy = static_cast<double>(correct) / kTest;
    }
  });
  return out;
}

}  // namespace

std::string GateConfigKey(const GateOptions& o) {
  return fmt::format(
      "relu64-96-48-10 ranks={} steps={} batch={} seeds={} lr={} tol={} loss_tol={} stress_lr={} stress_tol={}{}",
      o.ranks, o.steps, o.batch_per_rank, o.seeds, o.learning_rate, o.tolerance, o.loss_tolerance,
      o.stress_learning_rate, o.stress_tolerance,
      o.accumulation_steps == 1 ? "" : fmt::format(" accum={}", o.accumulation_steps));
}

GateResult RunAccuracyGate(const std::string& codec, const GateOptions& o) {
  if (o.ranks < 1 || o.steps < 1 || o.batch_per_rank < 1 || o.seeds < 1 || !(o.learning_rate > 0) ||
      !(o.stress_learning_rate >= 0) || !(o.tolerance >= 0) || !(o.loss_tolerance >= 0) || !(o.stress_tolerance >= 0) ||
      o.accumulation_steps < 1 || o.accumulation_steps > o.steps)
    throw UsageError(
        "accuracy gate: ranks, steps, batch, seeds and learning rate must be positive, the rest >= 0, "
        "accumulation steps from 1 to the steps");
  // The uncompressed runs are the same for every codec: kept per (options, learning rate, seed).
  static std::mutex mu;
  static std::map<std::tuple<std::string, double, unsigned>, Outcome> baselines;
  // The baseline syncs every micro-batch: uncompressed at accumulation 1, the same samples.
  GateOptions every_step = o;
  every_step.accumulation_steps = 1;
  const std::string key = GateConfigKey(every_step);
  auto baseline = [&](double lr, unsigned seed, const Dataset& d) {
    {
      std::lock_guard lock(mu);
      if (auto it = baselines.find({key, lr, seed}); it != baselines.end()) return it->second;
    }
    const Outcome b = Train("none", every_step, lr, seed, d);
    std::lock_guard lock(mu);
    return baselines[{key, lr, seed}] = b;
  };
  GateResult r;
  r.codec = codec;
  r.passed = true;
  double worst_margin = INFINITY;
  bool reported_failure = false;
  for (const bool stress : {false, true}) {
    if (stress && o.stress_learning_rate == 0) break;
    const double lr = stress ? o.stress_learning_rate : o.learning_rate;
    for (unsigned seed = 1; seed <= static_cast<unsigned>(o.seeds); ++seed) {
      const Dataset d = MakeDataset(seed);
      const Outcome base = baseline(lr, seed, d);
      const Outcome run = codec == "none" && o.accumulation_steps == 1 ? base : Train(codec, o, lr, seed, d);
      GateSeed s;
      s.seed = seed;
      s.stress = stress;
      s.accuracy = run.accuracy;
      s.baseline_accuracy = base.accuracy;
      s.loss = run.loss;
      s.baseline_loss = base.loss;
      s.passed = std::isfinite(run.loss) &&
                 run.accuracy >= base.accuracy - (stress ? o.stress_tolerance : o.tolerance) - 1e-12 &&
                 (stress || run.loss <= base.loss * (1 + o.loss_tolerance));
      r.passed = r.passed && s.passed;
      const double margin = run.accuracy - base.accuracy;
      if (!reported_failure && (!s.passed || (!stress && margin < worst_margin))) {
        worst_margin = margin;
        reported_failure = !s.passed;
        r.final_loss = run.loss;
        r.baseline_loss = base.loss;
        r.accuracy = run.accuracy;
        r.baseline_accuracy = base.accuracy;
      }
      r.seeds.push_back(s);
    }
  }
  return r;
}

}  // namespace ciuic
