#include "tuner/published.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_reader.h"
#include "core/timer.h"

namespace ciuic {

namespace {

using nlohmann::json;

constexpr const char* kPublishedSchema = "ciuic.published/1";

// The fitted constants by name: what a fit figure's "fits" may say, the member it sets, and the
// bracket the bisection searches.
struct ConstantSpec {
  const char* name;
  double ModelConstants::*member;
  double lo, hi;
};
constexpr ConstantSpec kConstants[] = {
    {"nvlink_efficiency", &ModelConstants::nvlink_efficiency, 0.05, 1.5},
    {"nvls_efficiency", &ModelConstants::nvls_efficiency, 0.05, 1.5},
    {"nccl_launch_us", &ModelConstants::nccl_launch_us, 0.0, 1000.0},
};

const std::map<std::string, ModelAlgo>& Algos() {
  static const std::map<std::string, ModelAlgo> m = {{"nccl", ModelAlgo::kNcclBest},
                                                     {"nccl-ring", ModelAlgo::kNcclRing},
                                                     {"nccl-tree", ModelAlgo::kNcclTree},
                                                     {"nccl-nvls", ModelAlgo::kNcclNvls},
                                                     {"nccl-nvlstree", ModelAlgo::kNcclNvlsTree}};
  return m;
}

class Reader {
 public:
  explicit Reader(std::string origin) : origin_(std::move(origin)) {}

  static std::string Join(const std::string& path, const std::string& key) {
    return path.empty() ? key : path + "." + key;
  }
  [[noreturn]] void Fail(const std::string& path, const std::string& what) const {
    throw InputError(fmt::format("{}: '{}' {}", origin_, path, what));
  }
  void OnlyKeys(const json& j, const std::set<std::string>& allowed, const std::string& path) const {
    if (!j.is_object()) Fail(path, "must be an object");
    for (const auto& [k, v] : j.items())
      if (!allowed.count(k)) Fail(Join(path, k), "is not a known key");
  }
  const json& Field(const json& j, const std::string& key, const std::string& path) const {
    if (!j.contains(key)) Fail(Join(path, key), "is missing");
    return j.at(key);
  }
  std::string String(const json& j, const std::string& key, const std::string& path) const {
    const json& v = Field(j, key, path);
    if (!v.is_string() || v.get<std::string>().empty()) Fail(Join(path, key), "must be a non-empty string");
    return v.get<std::string>();
  }
  double Number(const json& j, const std::string& key, const std::string& path, double lo, double hi) const {
    const json& v = Field(j, key, path);
    if (!v.is_number()) Fail(Join(path, key), "must be a number");
    const double x = v.get<double>();
    if (!std::isfinite(x) || x < lo || x > hi) Fail(Join(path, key), fmt::format("= {} is outside {}..{}", x, lo, hi));
    return x;
  }
  int Integer(const json& j, const std::string& key, const std::string& path, int lo, int hi) const {
    const json& v = Field(j, key, path);
    if (!v.is_number_integer()) Fail(Join(path, key), "must be an integer");
    const int64_t x = v.get<int64_t>();
    if (x < lo || x > hi) Fail(Join(path, key), fmt::format("= {} is outside {}..{}", x, lo, hi));
    return static_cast<int>(x);
  }

 private:
  std::string origin_;
};

PublishedSystem ParseSystem(const Reader& r, const std::string& name, const json& j) {
  const std::string path = "systems." + name;
  r.OnlyKeys(j, {"topology", "description", "overrides", "sources"}, path);
  PublishedSystem s;
  s.name = name;
  s.topology = r.String(j, "topology", path);
  s.description = r.String(j, "description", path);
  if (j.contains("overrides")) {
    const json& o = j.at("overrides");
    r.OnlyKeys(o, {"intra.bw_gbps_per_device", "intra.nvls", "nics.count", "nics.gbps"}, path + ".overrides");
    for (const auto& [k, v] : o.items()) {
      if (k == "intra.nvls") {
        if (!v.is_boolean()) r.Fail(path + ".overrides." + k, "must be true or false");
        s.overrides[k] = v.get<bool>() ? 1.0 : 0.0;
      } else {
        s.overrides[k] = r.Number(o, k, path + ".overrides", k == "nics.count" ? 0 : 1e-3, 1e5);
      }
    }
  }
  if (j.contains("sources")) {
    const json& src = j.at("sources");
    if (!src.is_object()) r.Fail(path + ".sources", "must be an object");
    for (const auto& [k, v] : src.items()) {
      if (!s.overrides.count(k)) r.Fail(path + ".sources." + k, "names no override");
      s.sources[k] = r.String(src, k, path + ".sources");
    }
  }
  for (const auto& [k, v] : s.overrides)
    if (!s.sources.count(k)) r.Fail(path + ".sources." + k, "is missing: every override names its source");
  return s;
}

PublishedFigure ParseFigure(const Reader& r, const json& j, size_t index) {
  const std::string path = fmt::format("figures[{}]", index);
  r.OnlyKeys(
      j,
      {"id", "system", "nodes", "gpus_per_node", "algo", "bytes", "metric", "value", "role", "fits", "source", "note"},
      path);
  PublishedFigure f;
  f.id = r.String(j, "id", path);
  f.system = r.String(j, "system", path);
  f.nodes = r.Integer(j, "nodes", path, 1, 100000);
  f.gpus_per_node = r.Integer(j, "gpus_per_node", path, 1, 4096);
  const std::string algo = r.String(j, "algo", path);
  const auto a = Algos().find(algo);
  if (a == Algos().end())
    r.Fail(path + ".algo", fmt::format("'{}' is not one of nccl nccl-ring nccl-tree nccl-nvls nccl-nvlstree", algo));
  f.algo = a->second;
  f.bytes = r.Number(j, "bytes", path, 1, 1e13);
  const std::string metric = r.String(j, "metric", path);
  if (metric == "busbw_gbps") {
    f.metric = FigureMetric::kBusBwGbps;
  } else if (metric == "time_us") {
    f.metric = FigureMetric::kTimeUs;
  } else {
    r.Fail(path + ".metric", fmt::format("'{}' is not busbw_gbps or time_us", metric));
  }
  f.value = r.Number(j, "value", path, 1e-6, 1e9);
  const std::string role = r.String(j, "role", path);
  if (role == "fit") {
    f.role = FigureRole::kFit;
    f.fits = r.String(j, "fits", path);
    const bool known = std::any_of(std::begin(kConstants), std::end(kConstants),
                                   [&](const ConstantSpec& c) { return f.fits == c.name; });
    if (!known) r.Fail(path + ".fits", fmt::format("'{}' is not a fitted constant of the model", f.fits));
  } else if (role == "held_out") {
    f.role = FigureRole::kHeldOut;
    if (j.contains("fits")) r.Fail(path + ".fits", "is for fit figures only: a held-out figure determines nothing");
  } else {
    r.Fail(path + ".role", fmt::format("'{}' is not fit or held_out", role));
  }
  f.source = r.String(j, "source", path);
  if (f.source.rfind("https://", 0) != 0) r.Fail(path + ".source", "must be the https:// address of the figure");
  f.note = r.String(j, "note", path);
  if (f.nodes * f.gpus_per_node < 2) r.Fail(path, "an allreduce needs at least 2 GPUs");
  return f;
}

std::string ReadFile(const std::string& path) { return ReadTextFile(path, "published figures"); }

}  // namespace

std::string DefaultPublishedPath() {
  return (std::filesystem::path(ProfilesDir()) / "published" / "nccl_tests.json").string();
}

PublishedSet LoadPublished(const std::string& path) { return ParsePublished(ReadFile(path), path); }

PublishedSet ParsePublished(const std::string& text, const std::string& origin) {
  // Syntax, a key given twice (the last would win silently) and nesting, as every reader of ours.
  const JsonDocument checked(text, "published", origin);
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    throw InputError(fmt::format("{}: not valid JSON ({})", origin, e.what()));
  }
  const Reader r(origin);
  r.OnlyKeys(j, {"schema", "description", "systems", "figures"}, "");
  const std::string schema = r.String(j, "schema", "");
  if (schema != kPublishedSchema) {
    throw InputError(
        schema.rfind("ciuic.published/", 0) == 0
            ? fmt::format("{}: schema '{}' is newer than this build reads ({})", origin, schema, kPublishedSchema)
            : fmt::format("{}: schema '{}' is not a ciuic published-figures file ({})", origin, schema,
                          kPublishedSchema));
  }
  r.String(j, "description", "");
  PublishedSet set;
  set.origin = origin;
  const json& systems = r.Field(j, "systems", "");
  if (!systems.is_object() || systems.empty()) r.Fail("systems", "must be a non-empty object");
  for (const auto& [name, s] : systems.items()) set.systems[name] = ParseSystem(r, name, s);
  const json& figures = r.Field(j, "figures", "");
  if (!figures.is_array() || figures.empty()) r.Fail("figures", "must be a non-empty array");
  std::set<std::string> ids;
  for (size_t i = 0; i < figures.size(); ++i) {
    PublishedFigure f = ParseFigure(r, figures[i], i);
    if (!set.systems.count(f.system))
      r.Fail(fmt::format("figures[{}].system", i), fmt::format("'{}' is not in systems", f.system));
    if (!ids.insert(f.id).second) r.Fail(fmt::format("figures[{}].id", i), fmt::format("'{}' appears twice", f.id));
    set.figures.push_back(std::move(f));
  }
  // Every system makes a topology the model can read: its built-in exists (loaded once here), and
  // it has NICs where a figure spans nodes.
  for (const auto& [name, s] : set.systems) set.topologies[name] = LoadTopology(s.topology);
  for (const auto& f : set.figures) FigureTopology(set, f);
  return set;
}

Topology FigureTopology(const PublishedSet& set, const PublishedFigure& f) {
  const PublishedSystem& s = set.systems.at(f.system);
  Topology t = set.topologies.at(f.system);
  for (const auto& [k, v] : s.overrides) {
    if (k == "intra.bw_gbps_per_device") t.intra.bw_gbps = v;
    if (k == "intra.nvls") t.intra.nvls = v != 0;
    if (k == "nics.count") t.nics.count = static_cast<int>(v);
    if (k == "nics.gbps") t.nics.gbps = v;
  }
  if (f.nodes > 1 && t.nics.count == 0)
    throw InputError(
        fmt::format("{}: figure '{}' spans {} nodes but system '{}' has no NICs", set.origin, f.id, f.nodes, f.system));
  t.name = f.system;
  t.nodes = f.nodes;
  t.devices_per_node = f.gpus_per_node;
  return t;
}

double PredictFigure(const PublishedSet& set, const PublishedFigure& f, const ModelConstants& c) {
  const Topology t = FigureTopology(set, f);
  const double us = PredictAllReduceUs(EffectiveFabric(t, c), f.algo, f.bytes);
  return f.metric == FigureMetric::kTimeUs ? us : BusBwGbps(f.bytes, t.ranks(), us);
}

ModelConstants FitModelConstants(const PublishedSet& set, const ModelConstants& start) {
  ModelConstants c = start;
  for (int round = 0; round < 2; ++round) {
    for (const ConstantSpec& k : kConstants) {
      std::vector<const PublishedFigure*> fit;
      for (const auto& f : set.figures)
        if (f.role == FigureRole::kFit && f.fits == k.name) fit.push_back(&f);
      if (fit.empty())
        throw InputError(
            fmt::format("{}: no fit figure names '{}': the constant would not be fitted", set.origin, k.name));
      // Mean log(predicted / published): zero at the fit.
      auto gap = [&](double x) {
        ModelConstants trial = c;
        trial.*k.member = x;
        double sum = 0;
        for (const PublishedFigure* f : fit) sum += std::log(PredictFigure(set, *f, trial) / f->value);
        return sum / static_cast<double>(fit.size());
      };
      double lo = k.lo, hi = k.hi, glo = gap(lo), ghi = gap(hi);
      if (!(glo * ghi <= 0))
        throw InputError(fmt::format("{}: the fit figures of '{}' cannot be met for any value in {}..{}", set.origin,
                                     k.name, k.lo, k.hi));
      for (int i = 0; i < 100; ++i) {
        const double mid = 0.5 * (lo + hi), g = gap(mid);
        if ((g <= 0) == (glo <= 0)) {
          lo = mid;
          glo = g;
        } else {
          hi = mid;
        }
      }
      c.*k.member = 0.5 * (lo + hi);
    }
  }
  return c;
}

std::vector<FigureComparison> ComparePublished(const PublishedSet& set, const ModelConstants& c) {
  std::vector<FigureComparison> rows;
  for (const auto& f : set.figures) {
    FigureComparison row;
    row.figure = &f;
    row.predicted = PredictFigure(set, f, c);
    row.error = row.predicted / f.value - 1;
    const Fabric fabric = EffectiveFabric(FigureTopology(set, f), c);
    row.nccl_algo = ModelAlgoName(f.algo == ModelAlgo::kNcclBest ? NcclChoice(fabric, f.bytes) : f.algo);
    rows.push_back(row);
  }
  return rows;
}

double MedianAbsError(const std::vector<FigureComparison>& rows, FigureRole role) {
  std::vector<double> e;
  for (const auto& r : rows)
    if (r.figure->role == role) e.push_back(std::fabs(r.error));
  return e.empty() ? std::numeric_limits<double>::quiet_NaN() : Percentile(std::move(e), 50);
}

}  // namespace ciuic
