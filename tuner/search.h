#pragma once
// Search over a discrete space of ordered dimensions (codec, bucket bytes, streams, algorithm …).
// Strategies: grid (exhaustive), random, coordinate descent (cyclic line searches with seeded random
// restarts) and bayes (Tree-structured Parzen Estimator, Bergstra et al. 2011: per-dimension
// categorical densities of the best quantile vs the rest, smoothed over ordinal neighbours; the next
// point maximises l(x)/g(x) over sampled candidates). All take a budget of evaluations, optional
// early stopping (patience) and a seed; the same seed gives the same trials.
//
// A space may be conditional: `valid` says which combinations exist (e.g. a 16-bit reduction only for
// the uncompressed allreduce). No strategy proposes another point, so they cost no evaluation; the
// grid is the valid points. A dimension may apply to some points only (`active`: a codec's ratio
// applies to top-k and random-k): where it does not, index 0 is its one valid value (no point twice),
// Describe leaves it out, and coordinate descent and TPE move a point onto it (Canonical) instead of
// discarding the move.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace ciuic {

using Point = std::vector<int>;  // an index into each dimension's values

struct Dimension {
  std::string name;
  std::vector<std::string> values;           // in a meaningful order (neighbours are similar)
  std::function<bool(const Point&)> active;  // unset: every point has this dimension
  bool Active(const Point& p) const { return !active || active(p); }
};

struct SearchSpace {
  std::vector<Dimension> dims;
  std::function<bool(const Point&)> valid;     // unset: every combination is valid
  bool Valid(const Point& p) const;            // every inactive dimension at 0, and `valid`
  Point Canonical(Point p) const;              // p with every inactive dimension at 0
  uint64_t Size() const;                       // every combination
  uint64_t ValidSize() const;                  // the valid ones (enumerated)
  Point FromIndex(uint64_t index) const;       // mixed-radix, last dimension fastest
  std::string Describe(const Point& p) const;  // "name=value ..." of the active dimensions
};

struct SearchOptions {
  std::string strategy = "bayes";  // grid | random | cd | bayes
  int budget = 100;                // evaluations (grid: ignored, it evaluates everything)
  uint64_t seed = 1;
  int patience = 0;  // stop after this many evaluations without improvement (0: off)
};

struct Trial {
  int index = 0;  // evaluation order
  Point point;
  double score = 0;  // lower is better; +inf: infeasible
};

struct SearchResult {
  std::vector<Trial> trials;
  Trial best;
};

using Objective = std::function<double(const Point&)>;

std::vector<std::string> SearchStrategies();
// Throws UsageError for an unknown strategy or a non-positive budget.
SearchResult Search(const SearchSpace& space, const Objective& objective, const SearchOptions& options,
                    const std::function<void(const Trial&)>& on_trial = nullptr);

}  // namespace ciuic
