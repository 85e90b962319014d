#include "bench/baseline.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>

#include "core/error.h"
#include "core/files.h"
#include "core/json_reader.h"

namespace ciuic {

double Baseline::BusbwAt(uint64_t bytes) const {
  for (const auto& p : points)
    if (p.bytes == bytes) return p.busbw_gbps;
  return -1;
}

std::string BaselinesDir() {
  if (const std::string dir = FolderFromEnvironment("CIUIC_PROFILES_DIR"); !dir.empty())
    return (std::filesystem::path(dir) / "baselines").string();
  return (std::filesystem::path(ShareDir()) / "profiles" / "baselines").string();
}

std::vector<std::string> BaselineNames() {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(BaselinesDir(), ec)) {
    if (e.path().extension() == ".json") names.push_back(e.path().stem().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

Baseline ParseBaseline(const std::string& text, const std::string& origin) {
  JsonDocument doc(text, "baseline", origin);
  const JsonValue root = doc.Root();
  root.OnlyKeys({"schema", "name", "description", "collective", "ranks", "points"});
  const JsonValue schema = root["schema"];
  if (schema.String() != "ciuic.baseline/1")
    schema.Fail(fmt::format("{} is not ciuic.baseline/1 (a newer or foreign file)", schema.Text()));
  Baseline b;
  b.name = root["name"].NonEmptyString();
  b.description = root["description"].NonEmptyString();
  b.collective = root["collective"].OneOf(
      {"allreduce", "allgather", "reducescatter", "broadcast", "reduce", "alltoall", "sendrecv"});
  b.ranks = static_cast<int>(root["ranks"].Integer(1, 1 << 20));
  const auto points = root["points"].Elements();
  if (points.empty()) root["points"].Fail("no figures");
  for (const JsonValue& p : points) {
    p.OnlyKeys({"bytes", "busbw_gbps", "source", "note"});
    BaselinePoint q;
    q.bytes = p["bytes"].Size(1, UINT64_MAX);
    q.busbw_gbps = p["busbw_gbps"].Number(1e-9, 1e9);
    q.source = p["source"].NonEmptyString();
    if (q.source.rfind("https://", 0) != 0)
      p["source"].Fail("not an address (https://...): every figure names where it was read");
    if (p.Has("note")) q.note = p["note"].String();
    if (b.BusbwAt(q.bytes) >= 0) p["bytes"].Fail(fmt::format("{} is given twice", q.bytes));
    b.points.push_back(q);
  }
  std::sort(b.points.begin(), b.points.end(), [](const auto& x, const auto& y) { return x.bytes < y.bytes; });
  return b;
}

Baseline LoadBaseline(const std::string& name_or_path) {
  const bool is_file =
      name_or_path.find('/') != std::string::npos || (name_or_path.size() > 5 && name_or_path.ends_with(".json"));
  std::string path = name_or_path;
  if (!is_file) {
    const auto names = BaselineNames();
    if (std::find(names.begin(), names.end(), name_or_path) == names.end()) {
      std::string known;
      for (const auto& n : names) known += (known.empty() ? "" : ", ") + n;
      throw UsageError(fmt::format("--baseline {}: no such baseline (available: {}; or a ciuic.baseline/1 FILE)",
                                   PrintableLine(name_or_path),
                                   known.empty() ? "none found in " + BaselinesDir() : known));
    }
    path = (std::filesystem::path(BaselinesDir()) / (name_or_path + ".json")).string();
  }
  return ParseBaseline(ReadTextFile(path, "baseline"), path);
}

}  // namespace ciuic
