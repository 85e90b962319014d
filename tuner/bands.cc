#include "tuner/bands.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include <fmt/format.h>

#include "core/sizes.h"
#include "tuner/cost_model.h"
#include "tuner/workload.h"

namespace ciuic {

namespace {

// --mode measure: a band leaves the baseline only for a configuration this fraction faster than it,
// timed again beside it in kRetimePairs pairs of runs below 256 MiB, in one pair above.
constexpr double kBandMinGain = 0.05;
constexpr int kRetimePairs = 5;

// What the runtime runs for one message of `size` under a rule of `bucket` bytes: whole buckets in
// sequence, then the rest (collectives/runtime_comm.cc).
double RuleModelUs(const Fabric& fabric, const Topology& topo, const CommPlan& plan, double size, double bucket) {
  if (size <= bucket) return BucketUs(fabric, topo, plan, size);
  const double whole = std::floor(size / bucket), rest = size - whole * bucket;
  return whole * BucketUs(fabric, topo, plan, bucket) + (rest > 0 ? BucketUs(fabric, topo, plan, rest) : 0.0);
}

}  // namespace

std::vector<ProfileRule> PickBandRules(const BandInputs& in, const PlanChoice& best, std::ostream& log) {
  std::vector<ProfileRule> rules;
  const Fabric fabric = EffectiveFabric(in.topo);
  // A band may go lossy only when the step does: per message a codec can win while the step,
  // its communication hidden behind compute, gains less than --min-gain from it.
  const bool lossy_allowed = !IsLossless(best);
  if (!lossy_allowed)
    log << "bands: lossless only (the step's best is lossless: no lossy codec pays --min-gain per step)\n";
  const PlanChoice baseline{"none", 25.0 * (1 << 20), 1, "nccl"};
  const double largest_bucket = std::stod(in.space.dims[kBucketDim].values.back()) * (1 << 20);
  for (const auto& [lo, hi] : SizeBands()) {
    double size = hi ? std::sqrt(std::max<double>(lo, 4096) * static_cast<double>(hi)) : 4.0 * static_cast<double>(lo);
    // Measured, a band is timed at no more than the workload's gradients (a job's buckets, and so its
    // messages, are no larger), nor below its own edge: resnet50's 97 MiB times [256M, inf) at 256 MiB,
    // not at 1 GiB (48 of a cpu_local study's 80 s went to that band's 1 GiB runs).
    if (in.meter && in.largest_message > 0)
      size = std::max(static_cast<double>(lo), std::min(size, in.largest_message));
    const std::string band = fmt::format("band [{}, {})", FormatSize(lo), hi ? FormatSize(hi) : "inf");
    // The buckets a band may take: the study's; measured, also the baseline's and the largest the space
    // offers. Buckets at or above the size run it whole: one of them is enough.
    std::vector<double> buckets{std::max(best.bucket_bytes, static_cast<double>(kMinBucketBytes))};
    if (in.meter) buckets.insert(buckets.end(), {baseline.bucket_bytes, largest_bucket});
    std::vector<double> distinct;
    for (double b : buckets) {
      const auto same = [&](double x) { return std::min(x, size) == std::min(b, size); };
      if (std::none_of(distinct.begin(), distinct.end(), same)) distinct.push_back(b);
    }
    struct Candidate {
      PlanChoice c;
      double model_us;
    };
    std::vector<Candidate> candidates;
    // Every configuration of the space (its bucket aside: the band's buckets are `distinct`).
    for (uint64_t i = 0; i < in.space.Size(); ++i) {
      const Point p = in.space.FromIndex(i);
      if (p[kBucketDim] != 0 || !in.space.Valid(p)) continue;
      for (double bucket : distinct) {
        PlanChoice c = ChoiceOf(in.space, p, in.topo);
        c.bucket_bytes = bucket;
        // The runtime runs a library rule in fp32 as the library's calls alone: streams do nothing.
        if (c.algo == "nccl" && c.precision == "fp32" && c.streams != 1) continue;
        if (auto v = in.gate.find(GateName(c)); v == in.gate.end() || !v->second) continue;
        if (!in.state_fits(c) || !TargetRuns(in.target, c)) continue;
        if (!lossy_allowed && !IsLossless(c)) continue;
        bool feasible = false;
        const CommPlan plan = PlanOf(c, in.topo, &feasible, in.calibration);
        if (!feasible) continue;
        candidates.push_back({c, RuleModelUs(fabric, in.topo, plan, size, bucket)});
      }
    }
    std::stable_sort(candidates.begin(), candidates.end(),
                     [](const Candidate& a, const Candidate& b) { return a.model_us < b.model_us; });
    ProfileRule rule;
    rule.min_bytes = lo;
    rule.max_bytes = hi;
    rule.predicted_us = std::numeric_limits<double>::infinity();
    if (candidates.empty()) {  // nothing feasible: an empty rule, as before
      rule.bucket_bytes = static_cast<uint64_t>(distinct.front());
      rules.push_back(rule);
      continue;
    }
    const auto take = [&](const Candidate& x, ProfileRule& r) {
      r.predicted_us = x.model_us;
      r.codec = x.c.codec;
      r.streams = x.c.streams;
      r.algo = RuntimeAlgo(x.c);
      r.hierarchy_depth = RuleDepth(x.c);
      r.nodes_per_group = r.hierarchy_depth == 3 ? x.c.nodes_per_group : 0;
      r.precision = x.c.precision;
      r.bucket_bytes = static_cast<uint64_t>(x.c.bucket_bytes);
      r.gate = IsLossless(x.c) ? "n/a" : "passed";
    };
    // A bucket at or above the size runs the message whole: "whole" names every such bucket, so the
    // baseline at a size below its 25 MiB is the same run as any whole-message candidate.
    const auto label = [&](const Candidate& x) {
      return fmt::format("{} {}{} streams {} bucket {}", GateName(x.c), RuntimeAlgo(x.c),
                         RuleDepth(x.c) == 3 ? " depth 3" : "", x.c.streams,
                         x.c.bucket_bytes >= size ? "whole" : FormatSize(static_cast<uint64_t>(x.c.bucket_bytes)));
    };
    const auto best_of = [&](const std::vector<Candidate>& xs, bool lossless, auto score) -> const Candidate* {
      const Candidate* out = nullptr;
      for (const auto& x : xs)
        if (!lossless || IsLossless(x.c))
          if (std::isfinite(score(x)) && (!out || score(x) < score(*out))) out = &x;
      return out;
    };
    const auto model = [](const Candidate& x) { return x.model_us; };
    if (!in.meter) {
      const Candidate* chosen = best_of(candidates, false, model);
      const Candidate* lossless = best_of(candidates, true, model);
      if (!chosen) {
        rules.push_back(rule);
        continue;
      }
      if (!IsLossless(chosen->c) &&
          !LossyPays(log, in.min_gain, band, label(*chosen), chosen->model_us, lossless ? label(*lossless) : "",
                     lossless ? lossless->model_us : std::numeric_limits<double>::infinity()))
        chosen = lossless;
      // A lossless winner on the model where lossy rules were allowed: say what the best lossy one
      // would have cost (a faster lossy one under --min-gain was logged by LossyPays).
      const auto lossy = std::find_if(candidates.begin(), candidates.end(),
                                      [](const Candidate& x) { return !IsLossless(x.c); });  // sorted: the best
      if (lossy_allowed && IsLossless(chosen->c) && lossy != candidates.end() && lossy->model_us >= chosen->model_us)
        log << fmt::format("{}: lossless {} at {:.1f} us beats the best lossy, {} at {:.1f} us\n", band, label(*chosen),
                           chosen->model_us, label(*lossy), lossy->model_us);
      take(*chosen, rule);
      rules.push_back(rule);
      continue;
    }
    // --mode measure: the model's best --band-candidates (two buckets at most per configuration) and
    // the baseline.
    std::vector<Candidate> timed;
    std::string baseline_label;
    std::map<std::string, int> per_config;
    for (const auto& x : candidates) {
      if (timed.size() >= static_cast<size_t>(in.band_candidates)) break;
      const std::string config =
          fmt::format("{}|{}|{}|{}|{}", x.c.codec, x.c.algo, RuleDepth(x.c), x.c.streams, x.c.precision);
      if (per_config[config]++ < 2) timed.push_back(x);
    }
    {
      bool feasible = false;
      const CommPlan plan = PlanOf(baseline, in.topo, &feasible, in.calibration);
      const Candidate b{baseline, feasible ? RuleModelUs(fabric, in.topo, plan, size, baseline.bucket_bytes)
                                           : std::numeric_limits<double>::infinity()};
      baseline_label = label(b);
      if (std::none_of(timed.begin(), timed.end(), [&](const Candidate& x) { return label(x) == baseline_label; }))
        timed.push_back(b);
    }
    const uint64_t bytes = static_cast<uint64_t>(size / 4) * 4;
    std::map<std::string, double> measured;
    // One message of the band's size as the runtime runs choice `c` (in its bucket); `round` > 0 afresh.
    const auto rule_us = [&](const PlanChoice& c, int round) {
      return in.meter->RuleUs(c, std::min(static_cast<uint64_t>(c.bucket_bytes), bytes), bytes, round);
    };
    for (const auto& x : timed) {
      measured[label(x)] = rule_us(x.c, 0);
      log << fmt::format("{} at {}: {:<40} model {:>12.1f} us, measured {:>12.1f} us\n", band, FormatSize(bytes),
                         label(x), x.model_us, measured[label(x)]);
    }
    const auto time = [&](const Candidate& x) { return measured.at(label(x)); };
    const Candidate* chosen = best_of(timed, false, time);
    const Candidate* lossless = best_of(timed, true, time);
    if (!chosen) {  // every run failed: the model's choice, unmeasured
      take(timed.front(), rule);
      rules.push_back(rule);
      continue;
    }
    if (!IsLossless(chosen->c) &&
        !LossyPays(log, in.min_gain, band, label(*chosen), time(*chosen), lossless ? label(*lossless) : "",
                   lossless ? time(*lossless) : std::numeric_limits<double>::infinity()))
      chosen = lossless;
    const Candidate* base = nullptr;
    for (const auto& x : timed)
      if (label(x) == baseline_label) base = &x;
    double chosen_us = time(*chosen), base_us = measured.at(baseline_label);
    if (chosen != base && std::isfinite(base_us)) {
      // The fastest of several noisy timings is biased low: the choice and the baseline are timed
      // again, in turn, kRetimePairs times below 256 MiB (a library's allreduce can vary from run to
      // run by 1.5x: Open MPI's 4 MiB over the lab's link took 42 or 61 ms), once above. The band keeps
      // the pair whose speed-up is the median of the pairs' (the lower middle of an even count): both
      // of its times come from one stretch of the machine, where the medians of each side taken apart
      // may come from different ones. The choice must beat the baseline by kBandMinGain in that pair.
      const int pairs = bytes < (uint64_t{256} << 20) ? kRetimePairs : 1;
      struct Pair {
        int round;
        double us, base_us;
      };
      std::vector<Pair> again;
      // Each pair in the other order than the one before, so a drift favours neither.
      for (int round = 1; round <= pairs; ++round) {
        double a = 0, b = 0;
        if (round % 2) {
          a = rule_us(chosen->c, round);
          b = rule_us(baseline, round);
        } else {
          b = rule_us(baseline, round);
          a = rule_us(chosen->c, round);
        }
        if (pairs > 1)
          log << fmt::format("{}: pair {}/{}: {} {:.1f} us, the baseline {:.1f} us ({:.2f}x)\n", band, round, pairs,
                             label(*chosen), a, b, b / a);
        if (std::isfinite(a) && std::isfinite(b)) again.push_back({round, a, b});
      }
      if (!again.empty()) {  // else the first timings stand
        std::stable_sort(again.begin(), again.end(),
                         [](const Pair& x, const Pair& y) { return x.base_us / x.us < y.base_us / y.us; });
        const Pair& middle = again[(again.size() - 1) / 2];
        chosen_us = middle.us;
        base_us = middle.base_us;
        if (pairs > 1) log << fmt::format("{}: the median pair of {} timed: {}\n", band, again.size(), middle.round);
      }
      const bool keeps = chosen_us <= (1 - kBandMinGain) * base_us;
      log << fmt::format("{}: timed again: {} {:.1f} us, the baseline {:.1f} us ({:.2f}x): {}\n", band, label(*chosen),
                         chosen_us, base_us, base_us / chosen_us,
                         keeps ? "chosen" : fmt::format("under {:.0f}%, the baseline kept", 100 * kBandMinGain));
      if (!keeps) {
        chosen = base;
        chosen_us = base_us;
      }
    }
    take(*chosen, rule);
    rule.measured_us = chosen_us;
    if (std::isfinite(base_us)) rule.baseline_us = base_us;
    log << fmt::format("{}: {} measured {:.1f} us; the baseline {} {:.1f} us ({:.2f}x)\n", band, label(*chosen),
                       rule.measured_us, baseline_label, base_us, base_us / rule.measured_us);
    rules.push_back(rule);
  }
  return rules;
}

bool IsLossless(const PlanChoice& c) { return GateName(c) == "none"; }

bool LossyPays(std::ostream& log, double min_gain, const std::string& what, const std::string& lossy, double lossy_us,
               const std::string& lossless, double lossless_us) {
  if (!std::isfinite(lossless_us)) {
    log << fmt::format("{}: lossy {} chosen: no lossless configuration is feasible\n", what, lossy);
    return true;
  }
  const double gain = (lossless_us - lossy_us) / lossless_us;
  const bool pays = gain >= min_gain;
  log << fmt::format(
      "{}: lossy {} at {:.1f} us is {:.1f}% faster than lossless {} at {:.1f} us: {} --min-gain "
      "{:.0f}%, {} chosen\n",
      what, lossy, lossy_us, 100 * gain, lossless, lossless_us, pays ? ">=" : "<", 100 * min_gain,
      pays ? "lossy" : "lossless");
  return pays;
}

}  // namespace ciuic
