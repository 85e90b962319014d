// Search strategies on the modelled objective, workloads and the overlap schedule. The strategy-
// quality benchmark (printed): on every built-in topology, bayes (TPE) and coordinate descent reach
// within 2% of the grid optimum with at most 5% of grid's evaluations, median over 10 seeds.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <set>
#include <tuple>

#include <fmt/format.h>

#include "core/error.h"
#include "tuner/plan_space.h"

namespace ciuic {
namespace {

TEST(Workload, BuiltinsLoadWithTheirPublishedParameterCounts) {
  const std::pair<const char*, uint64_t> want[] = {
      {"resnet50", 25557032}, {"bert_large", 335141888}, {"gpt2_xl", 1557611200}, {"llama2_7b", 6738415616}};
  for (const auto& [name, params] : want) {
    const Workload w = LoadWorkload(name);
    EXPECT_EQ(w.parameters, params) << name;
    EXPECT_GT(w.tensors.size(), 100u) << name;
  }
  EXPECT_THROW(LoadWorkload("alexnet"), InputError);
  EXPECT_THROW(ParseWorkload("{\"schema\": \"ciuic.workload/9\"}", "w.json"), InputError);
  EXPECT_THROW(ParseWorkload("[1]", "w.json"), InputError);
}

TEST(Schedule, OverlapHidesCommunicationBehindBackwardAndCompressionShrinksIt) {
  const Workload w = LoadWorkload("bert_large");
  Topology slow = LoadTopology("pcie_8gpu", 4);
  const Fabric f = EffectiveFabric(slow);
  CommPlan plain;
  plain.algo = ModelAlgo::kRing;
  const StepTiming a = ScheduleStep(w, slow, f, plain, w.default_batch);
  EXPECT_GT(a.buckets, 10);
  EXPECT_GT(a.comm_us, 0);
  EXPECT_LE(a.exposed_us, a.comm_us);  // some of it overlaps the backward pass
  CommPlan packed = plain;
  packed.wire_ratio = 4;
  packed.codec_passes = 3.5;
  const StepTiming b = ScheduleStep(w, slow, f, packed, w.default_batch);
  EXPECT_LT(b.exposed_us, a.exposed_us);
  EXPECT_DOUBLE_EQ(a.backward_us, b.backward_us);
}

TEST(Search, StrategiesAreReproducibleAndRespectTheBudget) {
  const Topology t = LoadTopology("dgx_a100", 2);
  const SearchSpace s = AllReducePlanSpace(t);
  const Workload w = LoadWorkload("gpt2_xl");
  const Objective f = [&](const Point& p) { return ModelStepUs(ChoiceOf(s, p), t, w, w.default_batch); };
  for (const auto& strategy : SearchStrategies()) {
    if (strategy == "grid") continue;
    SearchOptions o;
    o.strategy = strategy;
    o.budget = 40;
    o.seed = 7;
    const SearchResult a = Search(s, f, o), b = Search(s, f, o);
    EXPECT_LE(a.trials.size(), 40u) << strategy;
    ASSERT_EQ(a.trials.size(), b.trials.size()) << strategy;
    for (size_t i = 0; i < a.trials.size(); ++i) EXPECT_EQ(a.trials[i].point, b.trials[i].point) << strategy;
    o.patience = 5;
    EXPECT_LE(Search(s, f, o).trials.size(), 40u);
  }
  SearchOptions bad;
  bad.strategy = "annealing";
  EXPECT_THROW(Search(s, f, bad), UsageError);
  bad.strategy = "random";
  bad.budget = 0;
  EXPECT_THROW(Search(s, f, bad), UsageError);
}

TEST(Search, AConditionalSpaceNeverProposesAnInvalidPoint) {
  const Topology t = LoadTopology("dgx_a100", 2);
  const SearchSpace s = AllReducePlanSpace(t);
  const Workload w = LoadWorkload("gpt2_xl");
  uint64_t offered = 0;  // each configuration once: its point with the dimensions it lacks at 0
  for (uint64_t i = 0; i < s.Size(); ++i) {
    const Point p = s.FromIndex(i);
    offered += s.Canonical(p) == p && Offered(ChoiceOf(s, p), t) ? 1 : 0;
  }
  EXPECT_EQ(s.ValidSize(), offered);
  EXPECT_LT(s.ValidSize(), s.Size() / 4);  // most codec × algorithm × precision combinations do not exist
  const Objective f = [&](const Point& p) {
    EXPECT_TRUE(Offered(ChoiceOf(s, p), t)) << s.Describe(p);
    return ModelStepUs(ChoiceOf(s, p), t, w, w.default_batch);
  };
  for (const auto& strategy : SearchStrategies()) {
    SearchOptions o;
    o.strategy = strategy;
    o.budget = 120;
    const SearchResult r = Search(s, f, o);
    if (strategy == "grid") {
      EXPECT_EQ(r.trials.size(), s.ValidSize());
    }
    for (const auto& trial : r.trials)
      EXPECT_TRUE(std::isfinite(trial.score)) << strategy << " " << s.Describe(trial.point);
  }
  SearchSpace none = s;
  none.valid = [](const Point&) { return false; };
  EXPECT_THROW(Search(none, f, SearchOptions{}), UsageError);
}

// The codec's parameter and hier's depth are axes of their own, each where it applies: exactly the
// documented values, no configuration twice, nothing the runtime does not offer.
TEST(PlanSpace, OffersExactlyTheDocumentedRatiosRanksAndDepthsAndEachConfigurationOnce) {
  EXPECT_EQ(
      PlanSpaceCodecs(),
      (std::vector<std::string>{
          "none",        "bf16",         "fp16",         "fp8e4m3",       "int8",       "int4",        "sign1",
          "randomk:0.1", "randomk:0.05", "randomk:0.01", "randomk:0.001", "topk:0.1",   "topk:0.05",   "topk:0.01",
          "topk:0.001",  "powersgd:1",   "powersgd:2",   "powersgd:4",    "powersgd:8", "powersgd:16", "powersgd:32"}));
  for (const auto& [name, nodes, spine] :
       {std::tuple{"cluster_lab_racks", 0, true}, std::tuple{"cluster_lab_racks", 2, false},
        std::tuple{"dgx_a100", 4, false}}) {
    SCOPED_TRACE(fmt::format("{} --nodes {}", name, nodes));
    const Topology t = LoadTopology(name, nodes);
    ASSERT_EQ(t.HasSpine(), spine);
    const SearchSpace s = AllReducePlanSpace(t);
    std::map<std::string, int> seen;  // a configuration -> the valid points that are it
    std::set<std::string> codecs;
    std::set<int> depths;
    for (uint64_t i = 0; i < s.Size(); ++i) {
      const Point p = s.FromIndex(i);
      const PlanChoice c = ChoiceOf(s, p, t);
      if (!s.Valid(p)) {
        // An invalid point is one the runtime does not offer, or a dimension set where it does not apply.
        EXPECT_TRUE(!Offered(c, t) || s.Canonical(p) != p) << s.Describe(p);
        continue;
      }
      EXPECT_TRUE(Offered(c, t)) << s.Describe(p);
      EXPECT_EQ(s.Canonical(p), p);
      ++seen[fmt::format("{} {} {} {} {} {}", c.codec, c.bucket_bytes, c.streams, c.algo, c.precision, RuleDepth(c))];
      codecs.insert(c.codec);
      if (c.algo == "hier") {
        depths.insert(c.hierarchy_depth);
        EXPECT_EQ(c.nodes_per_group, c.hierarchy_depth == 3 ? 2 : 0);
      }
      const std::string d = s.Describe(p);
      // Describe names the parameter and the depth only where they apply.
      EXPECT_EQ(d.find("ratio=") != std::string::npos,
                c.codec.rfind("topk", 0) == 0 || c.codec.rfind("randomk", 0) == 0)
          << d;
      EXPECT_EQ(d.find("rank=") != std::string::npos, c.codec.rfind("powersgd", 0) == 0) << d;
      EXPECT_EQ(d.find("depth=") != std::string::npos, spine && c.algo == "hier") << d;
    }
    for (const auto& [config, n] : seen) EXPECT_EQ(n, 1) << config;
    EXPECT_EQ(seen.size(), s.ValidSize());
    const std::vector<std::string> all = PlanSpaceCodecs();
    EXPECT_EQ(codecs, std::set<std::string>(all.begin(), all.end()));
    EXPECT_EQ(depths, (spine ? std::set<int>{2, 3} : std::set<int>{2}));
  }
  // One machine has no hier at all; depth 3 is never offered without a spine.
  const Topology one = LoadTopology("dgx_a100", 1);
  EXPECT_FALSE(Offered({"none", 1 << 20, 1, "hier", "fp32", 2}, one));
  EXPECT_FALSE(Offered({"none", 1 << 20, 1, "hier", "fp32", 3}, LoadTopology("dgx_a100", 4)));
  EXPECT_TRUE(Offered({"none", 1 << 20, 1, "hier", "fp32", 3}, LoadTopology("cluster_lab_racks")));
  // Only the ciuic runtime groups nodes behind a spine.
  for (const auto& target : TuneTargets())
    EXPECT_EQ(TargetRuns(target, {"none", 1 << 20, 1, "hier", "fp32", 3, 2}), target == "ciuic") << target;
  // PowerSGD's warm-start Q grows with the rank; the ratio leaves top-k's state alone.
  const Workload w = LoadWorkload("resnet50");
  EXPECT_LT(CommStateBytes({"powersgd:1", 1 << 25, 1, "ring"}, w, 8),
            CommStateBytes({"powersgd:32", 1 << 25, 1, "ring"}, w, 8));
  EXPECT_EQ(CommStateBytes({"none", 1 << 25, 1, "hier", "fp32", 3, 2}, w, 8),
            CommStateBytes({"none", 1 << 25, 1, "hier", "fp32", 2}, w, 8));
}

// Every strategy within its budget on the bigger space of a topology with a spine, every trial a
// point the runtime offers; the grid is every valid point.
TEST(Search, EveryStrategyStaysInTheSpaceOfAThreeLevelTopology) {
  const Topology t = LoadTopology("cluster_lab_racks");
  const SearchSpace s = AllReducePlanSpace(t);
  const Workload w = LoadWorkload("gpt2_xl");
  std::printf("cluster_lab_racks: %llu points, %llu valid\n", static_cast<unsigned long long>(s.Size()),
              static_cast<unsigned long long>(s.ValidSize()));
  int deep = 0;
  const Objective f = [&](const Point& p) {
    const PlanChoice c = ChoiceOf(s, p, t);
    EXPECT_TRUE(s.Valid(p) && Offered(c, t)) << s.Describe(p);
    deep += RuleDepth(c) == 3;
    return ModelStepUs(c, t, w, w.default_batch);
  };
  for (const auto& strategy : SearchStrategies()) {
    SearchOptions o;
    o.strategy = strategy;
    o.budget = 100;
    deep = 0;
    const SearchResult r = Search(s, f, o);
    if (strategy == "grid") {
      EXPECT_EQ(r.trials.size(), s.ValidSize());
    } else {
      EXPECT_EQ(r.trials.size(), 100u) << strategy;
    }
    EXPECT_GT(deep, 0) << strategy << " never tried depth 3";
    for (const auto& trial : r.trials)
      EXPECT_TRUE(std::isfinite(trial.score)) << strategy << " " << s.Describe(trial.point);
  }
}

TEST(Search, BayesAndCoordinateDescentReachTheGridOptimumWithFivePercentOfItsEvaluations) {
  std::printf("%-10s %5s %-10s %10s %8s %8s %8s %6s\n", "topology", "nodes", "strategy", "grid_best", "median", "worst",
              "budget", "grid");
  const Workload w = LoadWorkload("gpt2_xl");
  for (const auto& name : BuiltinTopologies()) {
    Topology t = LoadTopology(name);
    if (t.nics.count > 0) t = LoadTopology(name, 4);
    const SearchSpace s = AllReducePlanSpace(t);
    const int budget = static_cast<int>(s.ValidSize() / 20);  // 5% of grid's evaluations
    const Objective f = [&](const Point& p) { return ModelStepUs(ChoiceOf(s, p), t, w, w.default_batch); };
    SearchOptions g;
    g.strategy = "grid";
    const double best = Search(s, f, g).best.score;
    for (const char* strategy : {"bayes", "cd"}) {
      std::vector<double> gaps;
      for (uint64_t seed = 1; seed <= 10; ++seed) {
        SearchOptions o;
        o.strategy = strategy;
        o.budget = budget;
        o.seed = seed;
        const SearchResult r = Search(s, f, o);
        EXPECT_LE(static_cast<int>(r.trials.size()), budget);
        gaps.push_back(r.best.score / best - 1);
      }
      std::sort(gaps.begin(), gaps.end());
      const double median = (gaps[4] + gaps[5]) / 2;
      std::printf("%-10s %5d %-10s %10.0f %7.2f%% %7.2f%% %8d %6llu\n", name.c_str(), t.nodes, strategy, best,
                  100 * median, 100 * gaps.back(), budget, static_cast<unsigned long long>(s.ValidSize()));
      EXPECT_LE(median, 0.02) << name << " " << strategy;
    }
  }
}

}  // namespace
}  // namespace ciuic
