#pragma once
// Published allreduce figures (`ciuic.published/1`, profiles/published/nccl_tests.json): nccl-tests
// busbw and small-message times on named systems, each with its source. They are the model's
// validation data and the only place its fitted constants come from: every figure is either "fit"
// (names the constant it determines) or "held_out" (only compared). FitModelConstants fits on the
// fit figures alone; ComparePublished predicts every figure so fitted and held-out errors are
// reported apart (`ciuic-tune topologies`).
//
// A system is a built-in topology plus overrides of the few numbers the model reads, each override
// with its source. Loaded strictly: unknown keys, unknown systems, constants, algorithms or
// metrics, a fit figure without a constant, a figure without a source URL and a newer schema are
// InputError.
#include <map>
#include <string>
#include <vector>

#include "tuner/cost_model.h"
#include "tuner/topology.h"

namespace ciuic {

struct PublishedSystem {
  std::string name;
  std::string topology;  // built-in topology it derives from
  // intra.bw_gbps_per_device, nics.count, nics.gbps, intra.nvls (0/1)
  std::map<std::string, double> overrides;
  std::map<std::string, std::string> sources;  // override key -> source
  std::string description;
};

enum class FigureRole { kFit, kHeldOut };
enum class FigureMetric { kBusBwGbps, kTimeUs };

struct PublishedFigure {
  std::string id;
  std::string system;
  int nodes = 1;
  int gpus_per_node = 1;
  // nccl (NCCL's choice), nccl-ring, nccl-tree, nccl-nvls, nccl-nvlstree (forced or stated)
  ModelAlgo algo = ModelAlgo::kNcclBest;
  double bytes = 0;
  FigureMetric metric = FigureMetric::kBusBwGbps;
  double value = 0;
  FigureRole role = FigureRole::kHeldOut;
  std::string fits;    // fit figures: the ModelConstants member it determines
  std::string source;  // URL
  std::string note;
};

struct PublishedSet {
  std::map<std::string, PublishedSystem> systems;
  std::vector<PublishedFigure> figures;
  std::map<std::string, Topology> topologies;  // system -> its built-in topology, as loaded
  std::string origin;
};

// profiles/published/nccl_tests.json under ProfilesDir().
std::string DefaultPublishedPath();
PublishedSet LoadPublished(const std::string& path = DefaultPublishedPath());
PublishedSet ParsePublished(const std::string& json_text, const std::string& origin);

// The topology a figure was measured on: its system's topology with the overrides, the figure's
// node count and GPUs per node.
Topology FigureTopology(const PublishedSet& set, const PublishedFigure& f);
// The model's value for a figure (busbw in GB/s or time in µs) with the given constants.
double PredictFigure(const PublishedSet& set, const PublishedFigure& f, const ModelConstants& c);

// The constants, each fitted on the fit figures that name it: the value for which the geometric
// mean of predicted / published over those figures is 1 (bisection; the model is monotone in each),
// starting from `start`. A constant no fit figure names is an InputError (it would not be fitted).
// Two rounds, so each constant sees the others' fitted values.
ModelConstants FitModelConstants(const PublishedSet& set, const ModelConstants& start = kFittedConstants);

struct FigureComparison {
  const PublishedFigure* figure = nullptr;
  double predicted = 0;
  double error = 0;       // predicted / published - 1
  std::string nccl_algo;  // the algorithm the prediction used
};
std::vector<FigureComparison> ComparePublished(const PublishedSet& set, const ModelConstants& c);
// Median |error| of the comparisons of one role (NaN when none).
double MedianAbsError(const std::vector<FigureComparison>& rows, FigureRole role);

}  // namespace ciuic
