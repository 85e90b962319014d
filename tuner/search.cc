#include "tuner/search.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <random>

#include "core/error.h"

namespace ciuic {

uint64_t SearchSpace::Size() const {
  uint64_t n = 1;
  for (const auto& d : dims) n *= d.values.size();
  return dims.empty() ? 0 : n;
}

bool SearchSpace::Valid(const Point& p) const {
  for (size_t d = 0; d < dims.size(); ++d)
    if (p[d] != 0 && !dims[d].Active(p)) return false;
  return !valid || valid(p);
}

Point SearchSpace::Canonical(Point p) const {
  // In dimension order, so a dimension that decides whether a later one applies is settled first.
  for (size_t d = 0; d < dims.size(); ++d)
    if (!dims[d].Active(p)) p[d] = 0;
  return p;
}

uint64_t SearchSpace::ValidSize() const {
  const bool conditional = std::any_of(dims.begin(), dims.end(), [](const Dimension& d) { return !!d.active; });
  if (!valid && !conditional) return Size();
  uint64_t n = 0;
  for (uint64_t i = 0; i < Size(); ++i) n += Valid(FromIndex(i)) ? 1 : 0;
  return n;
}

Point SearchSpace::FromIndex(uint64_t index) const {
  Point p(dims.size());
  for (size_t i = dims.size(); i-- > 0;) {
    p[i] = static_cast<int>(index % dims[i].values.size());
    index /= dims[i].values.size();
  }
  return p;
}

std::string SearchSpace::Describe(const Point& p) const {
  std::string s;
  for (size_t i = 0; i < dims.size(); ++i)
    if (dims[i].Active(p))
      s += fmt::format("{}{}={}", s.empty() ? "" : " ", dims[i].name, dims[i].values[static_cast<size_t>(p[i])]);
  return s;
}

std::vector<std::string> SearchStrategies() { return {"grid", "random", "cd", "bayes"}; }

namespace {

// Evaluations with memoisation (a repeated point costs nothing), the budget and early stopping.
class Evaluator {
 public:
  Evaluator(const SearchSpace& s, const Objective& f, const SearchOptions& o,
            const std::function<void(const Trial&)>& cb)
      : space_(s), f_(f), o_(o), cb_(cb), valid_points_(s.ValidSize()) {
    result_.best.score = std::numeric_limits<double>::infinity();
  }
  bool Done() const {
    if (static_cast<int>(result_.trials.size()) >= o_.budget) return true;
    if (seen_.size() >= valid_points_) return true;
    return o_.patience > 0 && since_best_ >= o_.patience;
  }
  bool Seen(const Point& p) const { return seen_.count(p) > 0; }
  double operator()(const Point& p) {
    if (auto it = seen_.find(p); it != seen_.end()) return it->second;
    Trial t;
    t.index = static_cast<int>(result_.trials.size());
    t.point = p;
    t.score = f_(p);
    if (std::isnan(t.score)) t.score = std::numeric_limits<double>::infinity();
    seen_[p] = t.score;
    result_.trials.push_back(t);
    if (t.score < result_.best.score || result_.best.point.empty()) {
      result_.best = t;
      since_best_ = 0;
    } else {
      ++since_best_;
    }
    if (cb_) cb_(t);
    return t.score;
  }
  SearchResult Take() { return std::move(result_); }
  const std::vector<Trial>& trials() const { return result_.trials; }

 private:
  const SearchSpace& space_;
  const Objective& f_;
  const SearchOptions& o_;
  const std::function<void(const Trial&)>& cb_;
  std::map<Point, double> seen_;
  SearchResult result_;
  int since_best_ = 0;
  uint64_t valid_points_;
};

// A uniformly drawn valid point (rejection sampling; Search checks that one exists).
Point RandomPoint(const SearchSpace& s, std::mt19937_64& rng) {
  Point p(s.dims.size());
  do {
    for (size_t i = 0; i < p.size(); ++i)
      p[i] = static_cast<int>(std::uniform_int_distribution<size_t>(0, s.dims[i].values.size() - 1)(rng));
  } while (!s.Valid(p));
  return p;
}

void Grid(const SearchSpace& s, Evaluator& eval) {
  for (uint64_t i = 0; i < s.Size(); ++i)
    if (const Point p = s.FromIndex(i); s.Valid(p)) eval(p);
}

void Random(const SearchSpace& s, Evaluator& eval, std::mt19937_64& rng) {
  int misses = 0;
  while (!eval.Done() && misses < 1000) {
    const Point p = RandomPoint(s, rng);
    if (eval.Seen(p)) {
      ++misses;
      continue;
    }
    eval(p);
  }
}

// Cyclic coordinate descent: full line search along each dimension in turn, moving to the best value;
// a cycle without improvement ends a descent, and a seeded random restart begins the next.
void CoordinateDescent(const SearchSpace& s, Evaluator& eval, std::mt19937_64& rng) {
  while (!eval.Done()) {
    Point x = RandomPoint(s, rng);
    double fx = eval(x);
    bool improved = true;
    while (improved && !eval.Done()) {
      improved = false;
      for (size_t d = 0; d < s.dims.size() && !eval.Done(); ++d) {
        Point best = x;
        double fbest = fx;
        for (int v = 0; v < static_cast<int>(s.dims[d].values.size()) && !eval.Done(); ++v) {
          if (v == x[d]) continue;
          Point y = x;
          y[d] = v;
          y = s.Canonical(y);  // a move that drops a dimension (ratio, leaving top-k) sets it to 0
          if (y == x || !s.Valid(y)) continue;
          const double fy = eval(y);
          if (fy < fbest) {
            fbest = fy;
            best = y;
          }
        }
        if (fbest < fx) {
          x = best;
          fx = fbest;
          improved = true;
        }
      }
    }
  }
}

// TPE over ordered categorical dimensions.
void Tpe(const SearchSpace& s, Evaluator& eval, std::mt19937_64& rng, int budget) {
  const int startup = std::max(5, std::min(20, budget / 4));
  for (int i = 0; i < startup && !eval.Done(); ++i) {
    Point p = RandomPoint(s, rng);
    for (int tries = 0; eval.Seen(p) && tries < 100; ++tries) p = RandomPoint(s, rng);
    eval(p);
  }
  constexpr double kGamma = 0.25;
  constexpr int kCandidates = 64;
  while (!eval.Done()) {
    std::vector<Trial> sorted = eval.trials();
    std::sort(sorted.begin(), sorted.end(), [](const Trial& a, const Trial& b) { return a.score < b.score; });
    const size_t n_good =
        std::max<size_t>(1, static_cast<size_t>(std::ceil(kGamma * static_cast<double>(sorted.size()))));
    // Per dimension: smoothed densities of the good and the bad trials. Each observation spreads over
    // its ordinal neighbours (weights 1, 0.5, 0.25) and a uniform prior keeps every value possible.
    std::vector<std::vector<double>> good(s.dims.size()), bad(s.dims.size());
    for (size_t d = 0; d < s.dims.size(); ++d) {
      const int k = static_cast<int>(s.dims[d].values.size());
      good[d].assign(static_cast<size_t>(k), 1.0 / k);
      bad[d].assign(static_cast<size_t>(k), 1.0 / k);
      for (size_t t = 0; t < sorted.size(); ++t) {
        if (!std::isfinite(sorted[t].score) && t < n_good) continue;
        if (!s.dims[d].Active(sorted[t].point)) continue;  // its 0 there means nothing
        auto& hist = t < n_good ? good[d] : bad[d];
        const int v = sorted[t].point[d];
        for (int off = -2; off <= 2; ++off) {
          const int u = v + off;
          if (u >= 0 && u < k) hist[static_cast<size_t>(u)] += std::ldexp(1.0, -std::abs(off));
        }
      }
      double sg = 0, sb = 0;
      for (int v = 0; v < k; ++v) {
        sg += good[d][static_cast<size_t>(v)];
        sb += bad[d][static_cast<size_t>(v)];
      }
      for (int v = 0; v < k; ++v) {
        good[d][static_cast<size_t>(v)] /= sg;
        bad[d][static_cast<size_t>(v)] /= sb;
      }
    }
    Point best_candidate;
    double best_ratio = -1;
    for (int c = 0; c < kCandidates; ++c) {
      Point p(s.dims.size());
      for (size_t d = 0; d < s.dims.size(); ++d) {
        std::discrete_distribution<int> draw(good[d].begin(), good[d].end());
        p[d] = draw(rng);
      }
      p = s.Canonical(p);
      if (!s.Valid(p) || eval.Seen(p)) continue;
      double log_ratio = 0;
      for (size_t d = 0; d < s.dims.size(); ++d)
        if (s.dims[d].Active(p))
          log_ratio += std::log(good[d][static_cast<size_t>(p[d])]) - std::log(bad[d][static_cast<size_t>(p[d])]);
      if (best_candidate.empty() || log_ratio > best_ratio) {
        best_ratio = log_ratio;
        best_candidate = p;
      }
    }
    if (best_candidate.empty()) {  // every candidate was seen: explore
      best_candidate = RandomPoint(s, rng);
      for (int tries = 0; eval.Seen(best_candidate) && tries < 1000; ++tries) best_candidate = RandomPoint(s, rng);
      if (eval.Seen(best_candidate)) break;
    }
    eval(best_candidate);
  }
}

}  // namespace

SearchResult Search(const SearchSpace& space, const Objective& objective, const SearchOptions& options,
                    const std::function<void(const Trial&)>& on_trial) {
  if (space.ValidSize() == 0) throw UsageError("search space is empty (no valid point)");
  const auto names = SearchStrategies();
  if (std::find(names.begin(), names.end(), options.strategy) == names.end())
    throw UsageError(fmt::format("unknown strategy '{}' (grid random cd bayes)", options.strategy));
  SearchOptions o = options;
  if (o.strategy == "grid") {
    o.budget = static_cast<int>(std::min<uint64_t>(space.ValidSize(), std::numeric_limits<int>::max()));
    o.patience = 0;
  }
  if (o.budget < 1) throw UsageError(fmt::format("--budget {} must be at least 1", o.budget));
  std::mt19937_64 rng(o.seed);
  Evaluator eval(space, objective, o, on_trial);
  if (o.strategy == "grid") {
    Grid(space, eval);
  } else if (o.strategy == "random") {
    Random(space, eval, rng);
  } else if (o.strategy == "cd") {
    CoordinateDescent(space, eval, rng);
  } else {
    Tpe(space, eval, rng, o.budget);
  }
  return eval.Take();
}

}  // namespace ciuic
