#include "collectives/crossover.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "collectives/shared_window.h"
#include "core/buffer.h"
#include "core/database.h"
#include "core/error.h"
#include "core/files.h"
#include "core/json_reader.h"
#include "core/sizes.h"
#include "core/timer.h"

namespace ciuic {

namespace {

constexpr uint64_t kLast = std::numeric_limits<uint64_t>::max();

bool Allowed(AllReduceAlgo a) {
  return a == AllReduceAlgo::kNative || a == AllReduceAlgo::kRecursiveDoubling || a == AllReduceAlgo::kRing ||
         a == AllReduceAlgo::kHierarchical;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

}  // namespace

AllReduceAlgo Crossover::Choose(uint64_t bytes, bool oop) const {
  const auto& use = oop && !out_of_place.empty() ? out_of_place : bands;
  for (const auto& b : use)
    if (bytes < b.below_bytes) return b.algo;
  return use.empty() ? AllReduceAlgo::kNative : use.back().algo;
}

uint64_t Crossover::Digest() const {
  uint64_t h = 0xcbf29ce484222325ull;
  auto add = [&h](uint64_t v) {
    for (int i = 0; i < 8; ++i) h = (h ^ ((v >> (8 * i)) & 0xff)) * 0x100000001b3ull;
  };
  for (const auto& b : bands) add(b.below_bytes), add(static_cast<uint64_t>(b.algo));
  if (staged_below) add(staged_below);
  if (!out_of_place.empty()) {
    add(0);  // (no band ends below 1 byte: apart from the bands before it)
    for (const auto& b : out_of_place) add(b.below_bytes), add(static_cast<uint64_t>(b.algo));
  }
  return h;
}

namespace {

std::string DescribeBands(const std::vector<CrossoverBand>& bands) {
  std::string out;
  for (const auto& b : bands) {
    if (!out.empty()) out += ", ";
    out += AlgoName(b.algo);
    if (b.below_bytes != kLast) out += fmt::format(" <{}", FormatSize(b.below_bytes));
  }
  return out;
}

}  // namespace

std::string Crossover::Describe() const {
  std::string out = DescribeBands(bands);
  if (!out_of_place.empty()) out += "; out of place: " + DescribeBands(out_of_place);
  return out;
}

Crossover BuiltinCrossover(const std::string& transport, int hosts) {
  Crossover c;
  c.source = fmt::format("built-in ({})", transport);
  if (transport == "nccl") {
    c.bands = {{kLast, AllReduceAlgo::kNative}};
  } else if (hosts == 1) {
    // The ring staged through a window beat MPI's allreduce from 4 to 256 KiB on the project's VM in
    // every round (2 ranks), lost at 1 KiB and split at 1 MiB (0.93-3.14x with the VM's modes); the
    // bounds at the geometric means, as a measured table's: bench/results/2026-11-29-staged-ring.
    c.source = fmt::format("built-in ({}, one host)", transport);
    c.bands = {{2ull << 10, AllReduceAlgo::kNative},
               {512ull << 10, AllReduceAlgo::kRing},
               {8ull << 20, AllReduceAlgo::kNative},
               {kLast, AllReduceAlgo::kRing}};
    c.staged_below = 512ull << 10;
    // Out of place the ring, reading the source where it lies, beat MPI's allreduce from 1 to 16 MiB
    // in all eight tables in both of the VM's speeds (1 MiB 1.06-1.36x, 4 MiB 1.27-1.88x), where in
    // place native won or tied: bench/results/2026-11-29-crossover-placements.
    c.out_of_place = {{2ull << 10, AllReduceAlgo::kNative}, {kLast, AllReduceAlgo::kRing}};
  } else {
    c.bands = {{8ull << 20, AllReduceAlgo::kNative}, {kLast, AllReduceAlgo::kRing}};
  }
  return c;
}

std::vector<AllReduceAlgo> CrossoverCandidates(Communicator& comm, int* hosts_out) {
  std::vector<AllReduceAlgo> c = {AllReduceAlgo::kNative, AllReduceAlgo::kRecursiveDoubling, AllReduceAlgo::kRing};
  const auto hosts = GatherHostnames(comm);
  std::map<std::string, int> per_host;
  for (const auto& h : hosts) per_host[h]++;
  bool equal = per_host.size() > 1;
  for (const auto& [h, n] : per_host) equal = equal && n == per_host.begin()->second && n > 1;
  if (equal) c.push_back(AllReduceAlgo::kHierarchical);
  if (hosts_out) *hosts_out = static_cast<int>(per_host.size());
  return c;
}

std::vector<CrossoverBand> OutOfPlaceBands(const Crossover& in_place, const Crossover& out_of_place) {
  const auto& a = in_place.bands;
  const auto& b = out_of_place.bands;
  const bool same = a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](const auto& x, const auto& y) {
                      return x.below_bytes == y.below_bytes && x.algo == y.algo;
                    });
  return same ? std::vector<CrossoverBand>{} : b;
}

Crossover CrossoverFromPoints(const std::vector<CrossoverPoint>& points, double margin) {
  Crossover c;
  c.source = "measured";
  std::vector<std::pair<uint64_t, AllReduceAlgo>> choice;
  for (const auto& p : points) {
    if (p.us.empty()) continue;
    AllReduceAlgo best = p.us.begin()->first;
    for (const auto& [a, us] : p.us)
      if (us < p.us.at(best)) best = a;
    const auto native = p.us.find(AllReduceAlgo::kNative);
    if (native != p.us.end() && !(p.us.at(best) < native->second * (1.0 - margin))) best = AllReduceAlgo::kNative;
    choice.emplace_back(p.bytes, best);
  }
  std::sort(choice.begin(), choice.end());
  if (choice.empty()) throw InputError("a crossover needs at least one measured size");
  for (size_t i = 0; i + 1 < choice.size(); ++i) {
    if (choice[i].second == choice[i + 1].second) continue;
    // The boundary between two measured sizes: their geometric mean, on a 4-byte element.
    const double mid = std::sqrt(static_cast<double>(choice[i].first) * static_cast<double>(choice[i + 1].first));
    const uint64_t below = std::max<uint64_t>(choice[i].first + 1, static_cast<uint64_t>(mid) / 4 * 4);
    c.bands.push_back({below, choice[i].second});
  }
  c.bands.push_back({kLast, choice.back().second});
  return c;
}

std::vector<CrossoverPoint> MeasureCrossover(Communicator& comm, const std::vector<AllReduceAlgo>& candidates,
                                             const CrossoverOptions& o) {
  std::vector<uint64_t> sizes = o.sizes;
  if (sizes.empty())
    for (uint64_t s = 1024; s <= (64ull << 20); s *= 4) sizes.push_back(s);
  for (uint64_t s : sizes)
    if (s == 0 || s % 4) throw UsageError(fmt::format("crossover size {} B: a positive multiple of 4 (fp32)", s));
  for (AllReduceAlgo a : candidates)
    if (!Allowed(a)) throw UsageError(fmt::format("auto chooses among native, rd, ring, hier (not {})", AlgoName(a)));
  if (o.rounds < 1) throw UsageError("crossover rounds: at least 1");
  if (o.with_runtime && o.registered)
    throw UsageError("crossover: a runtime column is not timed on registered buffers");
  std::map<AllReduceAlgo, std::unique_ptr<AllReduceEngine>> engines;
  for (AllReduceAlgo a : candidates) {
    AlgoConfig cfg;
    cfg.algo = a;
    engines[a] = std::make_unique<AllReduceEngine>(comm, cfg);
  }
  constexpr int kAutoKey = -2, kRuntimeKey = -3;
  if (o.with_auto) {
    AlgoConfig cfg;
    cfg.crossover = o.with_auto;
    engines[AllReduceAlgo::kAuto] = std::make_unique<AllReduceEngine>(comm, cfg);
  }
  const uint64_t largest = *std::max_element(sizes.begin(), sizes.end());
  // Out of place the source lies after the result, on a 64-byte boundary.
  const uint64_t src_at = o.out_of_place ? (largest + 63) / 64 * 64 : 0;
  const uint64_t total = src_at + largest;
  Buffer buf;
  std::shared_ptr<SharedWindow> window;
  float* data = nullptr;
  if (o.registered) {
    window = SharedWindow::Create(comm, total);  // zero-filled (a fresh memfd)
    for (auto& [a, e] : engines) e->Register(window);
    data = static_cast<float*>(window->data());
  } else {
    buf = Buffer(total, comm.BufferKind());
    SetBytes(buf.data(), buf.kind(), 0, total, comm.Stream());
    data = buf.as<float>();
  }
  const float* src =
      o.out_of_place ? reinterpret_cast<const float*>(reinterpret_cast<const char*>(data) + src_at) : data;
  // Key -1: the transport's own call; kAutoKey: auto; kRuntimeKey: the runtime communicator; otherwise the candidate.
  auto call = [&](int key, size_t n) {
    if (key == -1) {
      comm.AllReduce(src, data, n, DType::kFloat32, ReduceOp::kSum);
    } else if (key == kAutoKey) {
      engines.at(AllReduceAlgo::kAuto)->Run(src, data, n, nullptr, false);
    } else if (key == kRuntimeKey) {
      o.with_runtime->AllReduce(src, data, n, DType::kFloat32, ReduceOp::kSum);
    } else {
      engines.at(static_cast<AllReduceAlgo>(key))->Run(src, data, n, nullptr, false);
    }
  };
  // Seconds per call, the slowest rank's, agreed (every rank sees the same value).
  auto timed = [&](int key, size_t n, int calls) {
    double sync = 0;
    comm.HostAllReduce(&sync, 1, ReduceOp::kMax);
    const double t0 = NowSeconds();
    for (int i = 0; i < calls; ++i) call(key, n);
    comm.Synchronize();
    double t = (NowSeconds() - t0) / calls;
    comm.HostAllReduce(&t, 1, ReduceOp::kMax);
    return t;
  };
  std::vector<int> keys = {-1};
  for (AllReduceAlgo a : candidates) keys.push_back(static_cast<int>(a));
  if (o.with_auto) keys.push_back(kAutoKey);
  if (o.with_runtime) keys.push_back(kRuntimeKey);
  std::map<std::pair<uint64_t, int>, int> calls;
  std::map<std::pair<uint64_t, int>, std::vector<double>> samples;
  std::map<uint64_t, bool> auto_native;  // per size: every timed auto call ran native
  for (int round = 0; round < o.rounds; ++round) {
    for (uint64_t s : sizes) {
      const size_t n = s / 4;
      for (size_t k = 0; k < keys.size(); ++k) {
        const int key = keys[(k + static_cast<size_t>(round)) % keys.size()];
        int& c = calls[{s, key}];
        if (c == 0) {
          call(key, n);  // warm-up: first-touch, scratch buffers, a hierarchy's split
          const double one = timed(key, n, 1);
          c = static_cast<int>(std::clamp(o.target_s / std::max(one, 1e-9), 3.0, 2000.0));
        } else {
          // Untimed: the first call after another candidate's pays for what that one left behind (its
          // lines in the caches, the transport's state); measured on the project's VM at 4 MiB, the
          // candidate timed right after the ring ran 8-30% slower without it.
          call(key, n);
        }
        const Counters before = key == kAutoKey ? engines.at(AllReduceAlgo::kAuto)->counters() : Counters{};
        samples[{s, key}].push_back(timed(key, n, c) * 1e6);
        if (key == kAutoKey) {
          const Counters& after = engines.at(AllReduceAlgo::kAuto)->counters();
          const bool all_native = after.native_calls - before.native_calls == after.calls - before.calls;
          auto [it, fresh] = auto_native.emplace(s, all_native);
          if (!fresh) it->second = it->second && all_native;
        }
      }
    }
  }
  std::vector<CrossoverPoint> points;
  for (uint64_t s : sizes) {
    CrossoverPoint p;
    p.bytes = s;
    p.library_us = Median(samples.at({s, -1}));
    for (AllReduceAlgo a : candidates) p.us[a] = Median(samples.at({s, static_cast<int>(a)}));
    if (o.with_auto) {
      p.auto_us = Median(samples.at({s, kAutoKey}));
      p.auto_algo = o.with_auto->Choose(s, o.out_of_place);
      p.auto_ran_native = auto_native.at(s);
    }
    if (o.with_runtime) p.runtime_us = Median(samples.at({s, kRuntimeKey}));
    points.push_back(p);
  }
  return points;
}

void MarkStagedRing(Crossover& table, int hosts, bool registered, DeviceKind device) {
  if (hosts == 1 && !registered && device == DeviceKind::kCpu) table.staged_below = AlgoConfig{}.staged_bytes + 1;
}

int CrossoverHosts(Communicator& comm) {
  const auto names = GatherHostnames(comm);
  return static_cast<int>(std::set<std::string>(names.begin(), names.end()).size());
}

std::string CrossoverDeviceKey(const std::string& device, int hosts) {
  return hosts > 1 ? fmt::format("{} ({} hosts)", device, hosts) : device;
}

std::string CrossoverJson(const Crossover& table, const std::vector<CrossoverPoint>& points, int ranks,
                          const std::string& transport, bool registered, int hosts,
                          const std::vector<CrossoverPoint>& points_out_of_place) {
  nlohmann::json j;
  j["format"] = "ciuic-crossover";
  j["version"] = 1;
  j["ranks"] = ranks;
  j["transport"] = transport;
  if (registered) j["buffers"] = "registered";
  if (hosts > 0) j["hosts"] = hosts;
  auto bands = [](const std::vector<CrossoverBand>& from) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& b : from) {
      nlohmann::json band;
      band["below_bytes"] = b.below_bytes == kLast ? nlohmann::json(nullptr) : nlohmann::json(b.below_bytes);
      band["algo"] = AlgoName(b.algo);
      out.push_back(band);
    }
    return out;
  };
  auto measured = [](const std::vector<CrossoverPoint>& from) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& p : from) {
      nlohmann::json q;
      q["bytes"] = p.bytes;
      q["library_us"] = p.library_us;
      for (const auto& [a, us] : p.us) q["us"][AlgoName(a)] = us;
      out.push_back(q);
    }
    return out;
  };
  j["bands"] = bands(table.bands);
  j["points"] = measured(points);
  if (!table.out_of_place.empty()) j["bands_out_of_place"] = bands(table.out_of_place);
  if (!points_out_of_place.empty()) j["points_out_of_place"] = measured(points_out_of_place);
  return j.dump(1) + "\n";
}

Crossover ParseCrossover(const std::string& text, const std::string& name, int* ranks, std::string* transport,
                         std::vector<CrossoverPoint>* points, bool* registered, int* hosts,
                         std::vector<CrossoverPoint>* points_out_of_place) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw InputError(fmt::format("crossover {}: not JSON ({})", name, PrintableLine(e.what())));
  }
  // A key given twice (the last would win silently) and nesting, as every reader of ours refuses them.
  const JsonDocument checked(text, "crossover", "crossover " + name);
  auto bad = [&](const std::string& what) { return InputError(fmt::format("crossover {}: {}", name, what)); };
  if (!j.is_object() || !j.contains("format") || !j["format"].is_string() || j["format"] != "ciuic-crossover")
    throw bad("not a ciuic crossover (format)");
  if (!j.contains("version") || !j["version"].is_number_integer() || j["version"].get<int64_t>() != 1)
    throw bad("version: expected 1");
  if (!j.contains("ranks") || !j["ranks"].is_number_integer() || j["ranks"].get<int64_t>() < 1 ||
      j["ranks"].get<int64_t>() > 1 << 20)
    throw bad("ranks: expected a positive integer");
  if (!j.contains("transport") || !j["transport"].is_string()) throw bad("transport: expected a string");
  if (j.contains("buffers") && j["buffers"] != "registered")
    throw bad("buffers: expected \"registered\" (or no key: measured on unregistered buffers)");
  if (j.contains("hosts") &&
      (!j["hosts"].is_number_integer() || j["hosts"].get<int64_t>() < 1 || j["hosts"].get<int64_t>() > j["ranks"]))
    throw bad("hosts: expected a positive integer up to ranks (or no key)");
  auto read_bands = [&](const std::string& key) {
    if (!j.contains(key) || !j[key].is_array() || j[key].empty()) throw bad(key + ": expected a list");
    std::vector<CrossoverBand> out;
    uint64_t prev = 0;
    for (size_t i = 0; i < j[key].size(); ++i) {
      const auto& b = j[key][i];
      const bool last = i + 1 == j[key].size();
      if (!b.is_object() || !b.contains("algo") || !b["algo"].is_string() || !b.contains("below_bytes"))
        throw bad(fmt::format("{}[{}]: expected {{\"below_bytes\", \"algo\"}}", key, i));
      AllReduceAlgo a;
      try {
        a = ParseAlgo(b["algo"].get<std::string>());
      } catch (const UsageError& e) {
        throw bad(fmt::format("{}[{}].algo: {}", key, i, e.what()));
      }
      if (!Allowed(a)) throw bad(fmt::format("{}[{}].algo: auto chooses among native, rd, ring, hier", key, i));
      uint64_t below = kLast;
      if (last) {
        if (!b["below_bytes"].is_null()) throw bad(fmt::format("{}[{}].below_bytes: the last band is null", key, i));
      } else {
        // The largest count is the last band's (written as null): a band before it cannot reach it.
        if (!b["below_bytes"].is_number_unsigned() || b["below_bytes"].get<uint64_t>() <= prev ||
            b["below_bytes"].get<uint64_t>() == kLast)
          throw bad(fmt::format(
              "{}[{}].below_bytes: expected a byte count above the previous band's and below 2^64 - 1", key, i));
        below = b["below_bytes"].get<uint64_t>();
      }
      prev = below;
      out.push_back({below, a});
    }
    return out;
  };
  Crossover c;
  c.source = "file " + name;
  c.bands = read_bands("bands");
  if (j.contains("bands_out_of_place")) c.out_of_place = read_bands("bands_out_of_place");
  if (ranks) *ranks = static_cast<int>(j["ranks"].get<int64_t>());
  if (transport) *transport = j["transport"].get<std::string>();
  if (registered) *registered = j.contains("buffers");
  if (hosts) *hosts = j.contains("hosts") ? static_cast<int>(j["hosts"].get<int64_t>()) : 0;
  auto read_points = [&](const std::string& key, std::vector<CrossoverPoint>* out) {
    out->clear();
    auto time = [&](const nlohmann::json& v, const std::string& where) {
      if (!v.is_number() || !std::isfinite(v.get<double>()) || !(v.get<double>() > 0))
        throw bad(fmt::format("{}: expected a positive time in us", where));
      return v.get<double>();
    };
    if (!j.contains(key) || !j[key].is_array() || j[key].empty())
      throw bad(key + ": expected the measured points (a list)");
    uint64_t last = 0;
    for (size_t i = 0; i < j[key].size(); ++i) {
      const auto& q = j[key][i];
      const std::string at = fmt::format("{}[{}]", key, i);
      if (!q.is_object() || !q.contains("bytes") || !q.contains("library_us") || !q.contains("us") ||
          !q["us"].is_object())
        throw bad(at + ": expected {\"bytes\", \"library_us\", \"us\": {algo: us}}");
      if (!q["bytes"].is_number_unsigned() || q["bytes"].get<uint64_t>() == 0 || q["bytes"].get<uint64_t>() % 4 ||
          q["bytes"].get<uint64_t>() <= last)
        throw bad(at + ".bytes: expected a positive multiple of 4 above the previous point's");
      CrossoverPoint p;
      p.bytes = last = q["bytes"].get<uint64_t>();
      p.library_us = time(q["library_us"], at + ".library_us");
      for (const auto& [algo, v] : q["us"].items()) {
        AllReduceAlgo a;
        try {
          a = ParseAlgo(algo);
        } catch (const UsageError& e) {
          throw bad(fmt::format("{}.us.{}: {}", at, PrintableLine(algo), e.what()));
        }
        if (!Allowed(a)) throw bad(fmt::format("{}.us.{}: auto chooses among native, rd, ring, hier", at, algo));
        p.us[a] = time(v, fmt::format("{}.us.{}", at, algo));
      }
      if (p.us.empty()) throw bad(at + ".us: expected at least one algorithm's time");
      out->push_back(p);
    }
  };
  if (points) read_points("points", points);
  if (points_out_of_place) {
    points_out_of_place->clear();
    if (j.contains("points_out_of_place")) read_points("points_out_of_place", points_out_of_place);
  }
  return c;
}

Crossover ReadCrossoverFile(const std::string& path, int* ranks, std::string* transport,
                            std::vector<CrossoverPoint>* points, bool* registered, int* hosts,
                            std::vector<CrossoverPoint>* points_out_of_place) {
  // A regular file only: a folder or a FIFO is refused as such (not read as empty JSON, nor waited on).
  const std::string text = ReadTextFile(path, "crossover");
  if (text.size() > (16u << 20))
    throw InputError(fmt::format("crossover '{}': larger than 16 MiB", PrintableLine(path, 4096)));
  return ParseCrossover(text, "'" + PrintableLine(path, 4096) + "'", ranks, transport, points, registered, hosts,
                        points_out_of_place);
}

namespace {

constexpr const char* kLibraryRow = "library";

std::string CrossoverKernel(const std::string& transport, bool out_of_place = false) {
  return "crossover:" + transport + (out_of_place ? ":out-of-place" : "");
}

}  // namespace

void StoreCrossoverPoints(const std::string& db_path, const std::string& device, const std::string& transport,
                          int ranks, const std::vector<CrossoverPoint>& points,
                          const std::vector<CrossoverPoint>& points_out_of_place) {
  if (points.empty()) throw InputError("a crossover calibration needs at least one measured point");
  Database db(db_path);
  Database::Transaction tx(db);
  const std::string now = IsoNow(/*milliseconds=*/true);  // one calibration's rows share it
  Statement ins(db.handle(),
                "INSERT INTO calibrations (created, device, kernel, codec, gbps, bytes, ranks) VALUES (?,?,?,?,?,?,?)");
  auto row = [&](const std::string& codec, uint64_t bytes, double us, bool out_of_place) {
    ins.Reset();
    ins.Bind(1, now).Bind(2, device).Bind(3, CrossoverKernel(transport, out_of_place)).Bind(4, codec);
    ins.Bind(5, static_cast<double>(bytes) / (us * 1e3)).Bind(6, static_cast<int64_t>(bytes));
    ins.Bind(7, static_cast<int64_t>(ranks));
    ins.Step();
  };
  for (const bool out_of_place : {false, true}) {
    for (const auto& p : out_of_place ? points_out_of_place : points) {
      row(kLibraryRow, p.bytes, p.library_us, out_of_place);
      for (const auto& [a, us] : p.us) row(AlgoName(a), p.bytes, us, out_of_place);
    }
  }
  tx.Commit();
}

std::vector<CrossoverPoint> LoadCrossoverPoints(const std::string& db_path, const std::string& device,
                                                const std::string& transport, int ranks, std::string* created,
                                                bool out_of_place) {
  if (Database::NothingStored(db_path)) return {};
  Database db(db_path, Database::Access::kReadOnly);
  if (db.SchemaVersion() < 3) return {};  // calibrations carry sizes and rank counts from v3
  const std::string kernel = CrossoverKernel(transport, out_of_place);
  std::string newest;
  {
    Statement q(
        db.handle(),
        "SELECT created FROM calibrations WHERE device = ? AND kernel = ? AND ranks = ? ORDER BY id DESC LIMIT 1");
    q.Bind(1, device).Bind(2, kernel).Bind(3, static_cast<int64_t>(ranks));
    if (!q.Step()) return {};
    newest = q.ColumnText(0);
  }
  Statement q(
      db.handle(),
      "SELECT codec, gbps, bytes FROM calibrations WHERE device = ? AND kernel = ? AND ranks = ? AND created = ? "
      "ORDER BY id");
  q.Bind(1, device).Bind(2, kernel).Bind(3, static_cast<int64_t>(ranks)).Bind(4, newest);
  std::map<uint64_t, CrossoverPoint> by_size;
  while (q.Step()) {
    const std::string codec = q.ColumnText(0);
    const double gbps = q.ColumnDouble(1);
    const int64_t bytes = q.ColumnInt(2);
    if (!(gbps > 0) || !std::isfinite(gbps) || bytes <= 0 || bytes % 4)
      throw InputError(fmt::format("calibration database '{}': crossover row {} at {} B is not a measured time",
                                   PrintableLine(db_path, 4096), PrintableLine(codec), bytes));
    CrossoverPoint& p = by_size[static_cast<uint64_t>(bytes)];
    p.bytes = static_cast<uint64_t>(bytes);
    const double us = static_cast<double>(bytes) / (gbps * 1e3);
    if (codec == kLibraryRow) {
      p.library_us = us;
      continue;
    }
    AllReduceAlgo a;
    try {
      a = ParseAlgo(codec);
    } catch (const UsageError&) {
      throw InputError(fmt::format("calibration database '{}': crossover row names '{}', not an algorithm",
                                   PrintableLine(db_path, 4096), PrintableLine(codec)));
    }
    if (!Allowed(a))
      throw InputError(
          fmt::format("calibration database '{}': crossover row names {}: auto chooses among native, rd, "
                      "ring, hier",
                      PrintableLine(db_path, 4096), codec));
    p.us[a] = us;
  }
  if (created) *created = newest;
  std::vector<CrossoverPoint> points;
  for (auto& [bytes, p] : by_size) points.push_back(std::move(p));
  return points;
}

Crossover CrossoverFromStoredPoints(std::vector<CrossoverPoint> points, const std::vector<AllReduceAlgo>& candidates) {
  for (auto& p : points)
    for (auto it = p.us.begin(); it != p.us.end();)
      it = std::find(candidates.begin(), candidates.end(), it->first) == candidates.end() ? p.us.erase(it)
                                                                                          : std::next(it);
  points.erase(std::remove_if(points.begin(), points.end(), [](const CrossoverPoint& p) { return p.us.empty(); }),
               points.end());
  if (points.empty()) return Crossover{};
  return CrossoverFromPoints(points);
}

namespace {

// What one rank read for auto's table: agreed before any rank uses it.
struct TableVote {
  uint32_t failed;  // 1: this rank could not read its source (message says why)
  uint32_t found;   // 1: a table was read (the database held one; a file)
  uint64_t digest;  // of the bands read
  char message[1000];
};

// Every rank's read agreed: the same table everywhere, else the same InputError on every rank.
void AgreeOnTable(Communicator& comm, const Crossover& table, const std::string& error) {
  TableVote mine{};
  mine.failed = error.empty() ? 0 : 1;
  mine.found = table.bands.empty() ? 0 : 1;
  mine.digest = table.bands.empty() ? 0 : table.Digest();
  PrintableLine(error, sizeof mine.message - 1).copy(mine.message, sizeof mine.message - 1);
  std::vector<TableVote> votes(static_cast<size_t>(comm.Size()));
  comm.HostAllGather(&mine, votes.data(), sizeof mine);
  for (int r = 0; r < comm.Size(); ++r) {
    const TableVote& v = votes[static_cast<size_t>(r)];
    if (!v.failed) continue;
    const std::string m(v.message, strnlen(v.message, sizeof v.message));
    throw InputError(comm.Size() > 1 ? fmt::format("rank {}: {}", r, m) : m);
  }
  for (const TableVote& v : votes)
    if (v.found != votes[0].found || v.digest != votes[0].digest)
      throw InputError(
          fmt::format("the ranks read different crossovers for {} ranks over {} (every rank must read "
                      "the same calibration database or file)",
                      comm.Size(), comm.BackendName()));
}

}  // namespace

std::shared_ptr<Crossover> CalibratedCrossover(Communicator& comm, const std::string& db_path, bool required) {
  // Collective on every rank alike (it gathers host names), before anything a rank may fail at alone.
  int hosts = 0;
  const std::vector<AllReduceAlgo> candidates = CrossoverCandidates(comm, &hosts);
  const std::string device = CrossoverDeviceKey("cpu:" + CpuModelName(), hosts);
  std::string error, created, path = db_path;
  Crossover table;
  try {
    if (path.empty()) {
      try {
        path = (std::filesystem::path(DataHome(false)) / "ciuic.db").string();
      } catch (const InputError&) {
        if (required) throw;
      }
    }
    if (!path.empty() && comm.Device() == DeviceKind::kCpu) {
      const auto points = LoadCrossoverPoints(path, device, comm.BackendName(), comm.Size(), &created);
      table = CrossoverFromStoredPoints(points, candidates);
      // Out of place from the same calibration only (an older one's never mixes in).
      std::string created_oop;
      const auto oop =
          LoadCrossoverPoints(path, device, comm.BackendName(), comm.Size(), &created_oop, /*out_of_place=*/true);
      if (!table.bands.empty() && !oop.empty() && created_oop == created)
        table.out_of_place = OutOfPlaceBands(table, CrossoverFromStoredPoints(oop, candidates));
      // Calibrations are measured on unregistered buffers (ciuic-tune calibrate), keyed by host count.
      if (!table.bands.empty()) MarkStagedRing(table, hosts, false, comm.Device());
    }
  } catch (const Error& e) {
    error = e.what();
  }
  AgreeOnTable(comm, table, error);
  const std::string world = fmt::format("{} ranks over {}{}", comm.Size(), comm.BackendName(),
                                        hosts > 1 ? fmt::format(" on {} hosts", hosts) : "");
  if (table.bands.empty()) {
    if (required)
      throw InputError(fmt::format(
          "'{}' holds no crossover for {} on this machine ({}; `ciuic-tune calibrate --ranks {}` measures one)",
          PrintableLine(path, 4096), world, comm.Device() == DeviceKind::kCpu ? device : "a GPU: CPU only",
          comm.Size()));
    // The one-host table's ring is the staged ring: host memory only.
    auto builtin = std::make_shared<Crossover>(
        BuiltinCrossover(comm.BackendName(), comm.Device() == DeviceKind::kCpu ? hosts : 0));
    builtin->source += path.empty()                        ? ": no data folder"
                       : comm.Device() == DeviceKind::kCpu ? ": nothing calibrated for " + world
                                                           : ": calibrations are CPU only";
    return builtin;
  }
  table.source = fmt::format("calibrated {} for {}, {}", created, world, PrintableLine(path, 4096));
  return std::make_shared<Crossover>(table);
}

std::shared_ptr<const Crossover> RuntimeCrossover(Communicator& comm) {
  const char* env = std::getenv("CIUIC_CROSSOVER");
  const std::string v = env ? env : "";
  const std::string shown = PrintableLine(v, 4096);
  try {
    if (v == "builtin") return std::make_shared<Crossover>(BuiltinCrossover(comm.BackendName()));
    if (v.empty()) return CalibratedCrossover(comm, "", false);
    if (v == "db") return CalibratedCrossover(comm, "", true);
    if (v.rfind("db:", 0) == 0) {
      if (v.size() == 3) throw InputError("db: names no database (db:PATH)");
      return CalibratedCrossover(comm, v.substr(3), true);
    }
    // A file: read by every rank, agreed like a database.
    Crossover table;
    std::string error;
    try {
      bool registered = false;
      int hosts = 0;
      table = ReadCrossoverFile(v, nullptr, nullptr, nullptr, &registered, &hosts);
      MarkStagedRing(table, hosts, registered, comm.Device());
    } catch (const Error& e) {
      error = e.what();
    }
    AgreeOnTable(comm, table, error);
    return std::make_shared<Crossover>(table);
  } catch (const InputError& e) {
    throw InputError(
        fmt::format("$CIUIC_CROSSOVER={}: {}", v.empty() ? "(unset: the data folder's database)" : shown, e.what()));
  }
}

}  // namespace ciuic
