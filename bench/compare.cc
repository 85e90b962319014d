// ciuic-bench compare: two runs, one verdict per (size, placement) on the median time. See compare.h
// for the rule and docs/ciuic-bench.md ("Compare") for the output.
#include "bench/compare.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <cxxopts.hpp>

#include "bench/cli_args.h"
#include "core/database.h"
#include "core/error.h"
#include "core/files.h"
#include "core/json_reader.h"
#include "core/sizes.h"

namespace ciuic {

namespace {

constexpr const char* kBenchSchema = "ciuic.bench/1";
constexpr const char* kCompareSchema = "ciuic.compare/1";

struct RunRow {
  uint64_t size_bytes = 0;
  bool inplace = false;
  bool ok = false;  // measured (not failed or skipped)
  double time_us = NAN;
  double p50_us = NAN;
  double p99_us = NAN;
  double busbw_gbps = NAN;  // NaN: the row moves no bytes (or failed)
  // Present in runs written since they were added to the JSON and the database.
  std::optional<double> min_us, max_us, stddev_us;
};

struct ComparedRun {
  std::string source;  // "run 3 in FILE" or the file name, for messages and headers
  std::string collective, dtype, op, backend, device, device_name, codec, algo, git_commit, start_time;
  int64_t world_size = 0;
  std::vector<std::string> hostnames;
  std::vector<RunRow> rows;
};

bool AllDigits(const std::string& s) {
  return !s.empty() && s.size() <= 18 &&
         std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isdigit(c); });
}

std::optional<double> OptionalNumber(const JsonValue& row, const char* key) {
  if (!row.Has(key) || row[key].IsNull()) return std::nullopt;
  return row[key].Number(0, 1e18);
}

ComparedRun LoadJsonRun(const std::string& which, const std::string& path) {
  const std::string text = ReadTextFile(path, "run " + which);
  JsonDocument doc(text, "bench", PrintableLine(path, 4096));
  const JsonValue root = doc.Root();
  const std::string schema = root["schema"].String();
  if (schema != kBenchSchema) {
    root["schema"].Fail(
        schema.rfind("ciuic.bench/", 0) == 0
            ? fmt::format("'{}' is newer than this build reads ({})", PrintableLine(schema), kBenchSchema)
            : fmt::format("'{}' is not a ciuic-bench result ({})", PrintableLine(schema), kBenchSchema));
  }
  ComparedRun run;
  run.source = PrintableLine(path);
  const JsonValue c = root["context"];
  run.collective = c["collective"].NonEmptyString();
  run.dtype = c["dtype"].NonEmptyString();
  run.op = c["op"].String();
  run.backend = c["backend"].String();
  run.device = c["device"].String();
  run.device_name = c.Has("device_name") ? c["device_name"].String() : "";
  run.codec = c["codec"].String();
  run.algo = c["algo"].String();
  run.git_commit = c["git_commit"].String();
  run.start_time = c["start_time"].String();
  run.world_size = c["world_size"].Integer(1, 1 << 20);
  for (const JsonValue& h : c["hostnames"].Elements()) run.hostnames.push_back(h.String());
  for (const JsonValue& r : root["results"].Elements()) {
    RunRow row;
    row.size_bytes = r["size_bytes"].Size(1, UINT64_MAX);
    row.inplace = r["inplace"].Bool();
    row.ok = !r.Has("error") && !r["time_us"].IsNull();
    if (row.ok) {
      row.time_us = r["time_us"].Number(0, 1e18);
      row.p50_us = r["time_p50_us"].Number(0, 1e18);
      row.p99_us = r["time_p99_us"].Number(0, 1e18);
      if (!r["busbw_gbps"].IsNull()) row.busbw_gbps = r["busbw_gbps"].Number(0, 1e18);
      row.min_us = OptionalNumber(r, "time_min_us");
      row.max_us = OptionalNumber(r, "time_max_us");
      row.stddev_us = OptionalNumber(r, "time_stddev_us");
    }
    run.rows.push_back(row);
  }
  return run;
}

// The columns bench_rows has in this database (newer ones are read when present).
std::set<std::string> RowColumns(Database& db) {
  std::set<std::string> out;
  Statement s(db.handle(), "PRAGMA table_info(bench_rows)");
  while (s.Step()) out.insert(s.ColumnText(1));
  return out;
}

ComparedRun LoadDbRun(const std::string& db_path, const std::string& id_text) {
  Database db(db_path, Database::Access::kReadOnly);
  const int64_t id = std::stoll(id_text);
  ComparedRun run;
  run.source = fmt::format("run {} in {}", id, PrintableLine(db_path));
  {
    Statement s(db.handle(),
                "SELECT collective, dtype, redop, backend, device, codec, algo, git_commit, start_time, world_size, "
                "hostnames, context_json FROM bench_runs WHERE id = ?");
    s.Bind(1, id);
    if (!s.Step()) {
      Statement range(db.handle(), "SELECT COUNT(*), MIN(id), MAX(id) FROM bench_runs");
      range.Step();
      throw InputError(range.ColumnInt(0) == 0
                           ? fmt::format("--db {}: no run {} (the database holds no runs)", PrintableLine(db_path), id)
                           : fmt::format("--db {}: no run {} (its runs: {} from {} to {})", PrintableLine(db_path), id,
                                         range.ColumnInt(0), range.ColumnInt(1), range.ColumnInt(2)));
    }
    run.collective = s.ColumnText(0);
    run.dtype = s.ColumnText(1);
    run.op = s.ColumnText(2);
    run.backend = s.ColumnText(3);
    run.device = s.ColumnText(4);
    run.codec = s.ColumnText(5);
    run.algo = s.ColumnText(6);
    run.git_commit = s.ColumnText(7);
    run.start_time = s.ColumnText(8);
    run.world_size = s.ColumnInt(9);
    std::stringstream hosts(s.ColumnText(10));
    for (std::string h; std::getline(hosts, h, ',');) run.hostnames.push_back(h);
    const auto context = nlohmann::json::parse(s.ColumnText(11), nullptr, /*allow_exceptions=*/false);
    if (context.is_object() && context.contains("device_name") && context["device_name"].is_string())
      run.device_name = context["device_name"].get<std::string>();
  }
  const std::set<std::string> columns = RowColumns(db);
  const bool spread = columns.count("time_min_us") && columns.count("time_max_us") && columns.count("time_stddev_us");
  Statement s(db.handle(),
              std::string("SELECT size_bytes, inplace, time_us, time_p50_us, time_p99_us, busbw_gbps, error") +
                  (spread ? ", time_min_us, time_max_us, time_stddev_us" : "") +
                  " FROM bench_rows WHERE run_id = ? ORDER BY rowid");
  s.Bind(1, id);
  while (s.Step()) {
    RunRow row;
    row.size_bytes = static_cast<uint64_t>(s.ColumnInt(0));
    row.inplace = s.ColumnInt(1) != 0;
    row.ok = s.ColumnIsNull(6) && !s.ColumnIsNull(2) && !s.ColumnIsNull(3) && !s.ColumnIsNull(4);
    if (row.ok) {
      row.time_us = s.ColumnDouble(2);
      row.p50_us = s.ColumnDouble(3);
      row.p99_us = s.ColumnDouble(4);
      if (!s.ColumnIsNull(5)) row.busbw_gbps = s.ColumnDouble(5);
      if (spread && !s.ColumnIsNull(7)) {
        row.min_us = s.ColumnDouble(7);
        row.max_us = s.ColumnDouble(8);
        row.stddev_us = s.ColumnDouble(9);
      }
    }
    run.rows.push_back(row);
  }
  return run;
}

// A (or B): a run id when --db is given and the text is a number, else a JSON file.
ComparedRun LoadRun(const std::string& which, const std::string& text, const std::string& db) {
  if (AllDigits(text)) {
    if (!db.empty()) return LoadDbRun(db, text);
    std::error_code ec;
    if (!std::filesystem::exists(text, ec))
      throw UsageError(fmt::format("{} '{}': a run id needs --db FILE (no file of that name either)", which, text));
  }
  return LoadJsonRun(which, text);
}

// "(p99 - p50) / p50" of a row, 0 when its p50 is not positive.
double Spread(const RunRow& r) { return r.p50_us > 0 ? std::max(0.0, (r.p99_us - r.p50_us) / r.p50_us) : 0.0; }

struct Compared {
  const RunRow* a = nullptr;
  const RunRow* b = nullptr;
  double time_ratio = NAN;   // B p50 / A p50
  double busbw_ratio = NAN;  // B busbw / A busbw as reported (from the mean time)
  double noise = 0;
  std::optional<CompareVerdict> verdict;  // none: a row failed in one run, or has no time
  std::string why;                        // why there is no verdict
};

std::string Describe(const ComparedRun& r) {
  std::set<std::string> hosts(r.hostnames.begin(), r.hostnames.end());
  std::string host_list;
  for (const auto& h : hosts) host_list += (host_list.empty() ? h : "," + h);
  // Stored text, shown on one line of a terminal: control bytes (an escape sequence, a newline) as '?'.
  return PrintableLine(fmt::format("{} {} codec {}, {} rank(s) {}{} on {}, commit {}, {}", r.backend, r.algo, r.codec,
                                   r.world_size, r.device, r.device_name.empty() ? "" : " (" + r.device_name + ")",
                                   host_list.empty() ? "?" : host_list, r.git_commit, r.start_time),
                       1000);
}

std::string Percent(double f) { return std::isfinite(f) ? fmt::format("{:.1f}%", 100 * f) : "n/a"; }
std::string Ratio(double r) { return std::isfinite(r) ? fmt::format("{:.3f}", r) : "n/a"; }
std::string Number(double v, int decimals) { return std::isfinite(v) ? fmt::format("{:.{}f}", v, decimals) : "n/a"; }

nlohmann::ordered_json JsonNumber(double v) {
  return std::isfinite(v) ? nlohmann::ordered_json(v) : nlohmann::ordered_json(nullptr);
}

nlohmann::ordered_json RunJson(const ComparedRun& r) {
  return {{"source", r.source},
          {"backend", r.backend},
          {"algo", r.algo},
          {"codec", r.codec},
          {"world_size", r.world_size},
          {"device", r.device},
          {"device_name", r.device_name},
          {"hostnames", r.hostnames},
          {"git_commit", r.git_commit},
          {"start_time", r.start_time}};
}

nlohmann::ordered_json SideJson(const RunRow& r) {
  nlohmann::ordered_json j = {{"time_us", JsonNumber(r.time_us)},
                              {"time_p50_us", JsonNumber(r.p50_us)},
                              {"time_p99_us", JsonNumber(r.p99_us)},
                              {"busbw_gbps", JsonNumber(r.busbw_gbps)},
                              {"spread", JsonNumber(Spread(r))}};
  if (r.min_us) j["time_min_us"] = *r.min_us;
  if (r.max_us) j["time_max_us"] = *r.max_us;
  if (r.stddev_us) j["time_stddev_us"] = *r.stddev_us;
  return j;
}

cxxopts::Options MakeCompareOptions() {
  cxxopts::Options o(
      "ciuic-bench compare",
      "Compare two runs of one collective and dtype, row by row (size, in-place), on the median time.\n\n"
      "Usage: ciuic-bench compare A B [--db FILE] [--threshold 5%] [--noise auto|PCT] [--format table|json]\n"
      "A and B: run ids in --db, or ciuic.bench/1 JSON files (ciuic-bench --format json --out FILE).\n"
      "d = B p50 / A p50 - 1; noise = the larger of the two rows' (p99 - p50) / p50.\n"
      "Verdict: regressed when d > threshold + noise (exit 3), slower when d > threshold,\n"
      "faster when A p50 / B p50 - 1 > threshold + noise, same otherwise. Exit 0: nothing regressed; 1: bad input.\n");
  o.add_options()("db", "the SQLite database the run ids are in (ciuic-bench --db)", cxxopts::value<std::string>())(
      "threshold", "percent slower B may be beyond the noise before a row regresses",
      cxxopts::value<std::string>()->default_value("5%"))(
      "noise", "auto (each row's larger (p99 - p50) / p50) | a fixed PCT for every row (0: the threshold alone)",
      cxxopts::value<std::string>()->default_value("auto"))(
      "format", "table | json", cxxopts::value<std::string>()->default_value("table"))("h,help", "this help")(
      "command", "", cxxopts::value<std::string>())("a", "", cxxopts::value<std::string>())(
      "b", "", cxxopts::value<std::string>());
  o.parse_positional({"command", "a", "b"});
  o.positional_help("A B");
  return o;
}

}  // namespace

const char* CompareVerdictName(CompareVerdict v) {
  switch (v) {
    case CompareVerdict::kFaster:
      return "faster";
    case CompareVerdict::kSame:
      return "same";
    case CompareVerdict::kSlower:
      return "slower";
    case CompareVerdict::kRegressed:
      return "regressed";
  }
  return "?";
}

CompareVerdict JudgeRatio(double time_ratio, double threshold, double noise) {
  // A ratio exactly at a bound (1.05 at 5%) is within it, whatever the last bit of its rounding.
  constexpr double kEps = 1e-9;
  const double d = time_ratio - 1;
  if (d > threshold + noise + kEps) return CompareVerdict::kRegressed;
  if (d > threshold + kEps) return CompareVerdict::kSlower;
  // Faster by the same relative margin, seen from B: A / B - 1 (a ratio can fall at most to 0, so
  // -(threshold + noise) would be out of reach for a row whose noise passes 100%).
  if (1 / time_ratio - 1 > threshold + noise + kEps) return CompareVerdict::kFaster;
  return CompareVerdict::kSame;
}

double ParsePercentOption(const char* option, const std::string& text) {
  std::string number = text;
  if (!number.empty() && number.back() == '%') number.pop_back();
  char* end = nullptr;
  const double v = std::strtod(number.c_str(), &end);
  if (number.empty() || end != number.c_str() + number.size() || !std::isfinite(v))
    throw BadOption(option, text, "use a percentage such as 5% (or 5)");
  if (v < 0 || v > 1000) throw BadOption(option, text, "must be in 0%..1000%");
  return v / 100;
}

int CompareMain(int argc, char** argv) {
  cxxopts::Options options = MakeCompareOptions();
  const cxxopts::ParseResult r = ParseOrExit(options, argc, argv, "", "compare: ");
  if (!r.count("a") || !r.count("b"))
    throw UsageError("compare: needs two runs: ciuic-bench compare A B (run ids with --db FILE, or JSON files)");
  const double threshold = ParsePercentOption("threshold", r["threshold"].as<std::string>());
  const std::string noise_text = r["noise"].as<std::string>();
  const bool auto_noise = noise_text == "auto";
  const double fixed_noise = auto_noise ? 0 : ParsePercentOption("noise", noise_text);
  const std::string format = r["format"].as<std::string>();
  if (format != "table" && format != "json") throw BadOption("format", format, "use table or json");
  std::string db;
  if (r.count("db")) {
    db = r["db"].as<std::string>();
    CheckPathGiven("--db", db);
  }
  const ComparedRun a = LoadRun("A", r["a"].as<std::string>(), db);
  const ComparedRun b = LoadRun("B", r["b"].as<std::string>(), db);
  if (a.collective != b.collective)
    throw InputError(fmt::format("compare: A is {} and B is {}: different collectives", a.collective, b.collective));
  if (a.dtype != b.dtype)
    throw InputError(fmt::format("compare: A is {} and B is {}: different dtypes", a.dtype, b.dtype));
  if (a.op != b.op)
    throw InputError(fmt::format("compare: A reduces with {} and B with {}: different ops", a.op, b.op));

  // Rows matched on (size, in-place), in A's order; a row given twice in one run is refused.
  using Key = std::pair<uint64_t, bool>;
  auto index = [](const ComparedRun& run) {
    std::map<Key, const RunRow*> m;
    for (const RunRow& row : run.rows) {
      if (!m.emplace(Key{row.size_bytes, row.inplace}, &row).second)
        throw InputError(fmt::format("compare: {} has two {} rows of {} B", run.source,
                                     row.inplace ? "in-place" : "out-of-place", row.size_bytes));
    }
    return m;
  };
  const auto in_a = index(a), in_b = index(b);
  std::vector<Compared> rows;
  std::set<uint64_t> only_a, only_b;
  for (const auto& [key, ra] : in_a) {
    const auto it = in_b.find(key);
    if (it == in_b.end()) {
      only_a.insert(key.first);
      continue;
    }
    Compared c;
    c.a = ra;
    c.b = it->second;
    if (!ra->ok || !c.b->ok) {
      c.why = !ra->ok && !c.b->ok ? "failed in A and B" : !ra->ok ? "failed in A" : "failed in B";
    } else if (!(ra->p50_us > 0) || !(c.b->p50_us > 0)) {
      c.why = "no median time";
    } else {
      c.time_ratio = c.b->p50_us / ra->p50_us;
      c.busbw_ratio = ra->busbw_gbps > 0 ? c.b->busbw_gbps / ra->busbw_gbps : NAN;
      c.noise = auto_noise ? std::max(Spread(*ra), Spread(*c.b)) : fixed_noise;
      c.verdict = JudgeRatio(c.time_ratio, threshold, c.noise);
    }
    rows.push_back(c);
  }
  for (const auto& [key, rb] : in_b)
    if (!in_a.count(key)) only_b.insert(key.first);
  if (rows.empty())
    throw InputError(fmt::format("compare: {} and {} share no size (and placement)", a.source, b.source));
  // A row is in a run twice at most (out-of-place, in-place): a size only in A is one no row of B has.
  for (const auto& c : rows) {
    only_a.erase(c.a->size_bytes);
    only_b.erase(c.a->size_bytes);
  }

  std::map<CompareVerdict, int> counts;
  std::vector<std::string> regressed, broken;  // broken: B has no time for a row (failed, no median)
  for (const auto& c : rows) {
    if (!c.b->ok || !(c.b->p50_us > 0))
      broken.push_back(fmt::format("{} ({}: {})", FormatSize(c.a->size_bytes),
                                   c.a->inplace ? "in-place" : "out-of-place", !c.b->ok ? "failed" : "no median time"));
    if (!c.verdict) continue;
    ++counts[*c.verdict];
    if (*c.verdict == CompareVerdict::kRegressed)
      regressed.push_back(
          fmt::format("{} ({})", FormatSize(c.a->size_bytes), c.a->inplace ? "in-place" : "out-of-place"));
  }
  const std::string noise_rule = auto_noise ? "the larger of the two rows' (p99 - p50) / p50"
                                            : fmt::format("{} for every row (--noise)", Percent(fixed_noise));
  auto size_list = [](const std::set<uint64_t>& s) {
    std::string out;
    for (uint64_t v : s) {
      if (!out.empty()) out += ',';
      out += FormatSize(v);
    }
    return out.empty() ? "-" : out;
  };

  if (format == "json") {
    nlohmann::ordered_json j;
    j["schema"] = kCompareSchema;
    j["collective"] = a.collective;
    j["dtype"] = a.dtype;
    j["op"] = a.op;
    j["a"] = RunJson(a);
    j["b"] = RunJson(b);
    j["threshold"] = threshold;
    j["noise"] = auto_noise ? nlohmann::ordered_json("auto") : nlohmann::ordered_json(fixed_noise);
    j["rule"] = fmt::format(
        "d = B p50 / A p50 - 1; noise = {}; regressed: d > threshold + noise; slower: d > threshold; "
        "faster: A p50 / B p50 - 1 > threshold + noise; same otherwise",
        noise_rule);
    auto& out = j["rows"] = nlohmann::ordered_json::array();
    for (const auto& c : rows) {
      nlohmann::ordered_json row = {{"size_bytes", c.a->size_bytes},
                                    {"inplace", c.a->inplace},
                                    {"a", SideJson(*c.a)},
                                    {"b", SideJson(*c.b)},
                                    {"time_ratio", JsonNumber(c.time_ratio)},
                                    {"busbw_ratio", JsonNumber(c.busbw_ratio)},
                                    {"noise", c.verdict ? JsonNumber(c.noise) : nlohmann::ordered_json(nullptr)}};
      row["verdict"] =
          c.verdict ? nlohmann::ordered_json(CompareVerdictName(*c.verdict)) : nlohmann::ordered_json(nullptr);
      if (!c.verdict) row["why"] = c.why;
      out.push_back(std::move(row));
    }
    j["summary"] = {{"rows", rows.size()},
                    {"faster", counts[CompareVerdict::kFaster]},
                    {"same", counts[CompareVerdict::kSame]},
                    {"slower", counts[CompareVerdict::kSlower]},
                    {"regressed", counts[CompareVerdict::kRegressed]},
                    {"sizes_only_in_a", std::vector<uint64_t>(only_a.begin(), only_a.end())},
                    {"sizes_only_in_b", std::vector<uint64_t>(only_b.begin(), only_b.end())}};
    std::cout << j.dump(2) << "\n";
  } else {
    std::string t;
    t += fmt::format("# ciuic-bench compare  {}  {}  op {}\n", a.collective, a.dtype, a.op);
    t += fmt::format("# A: {}: {}\n", PrintableLine(a.source, 300), Describe(a));
    t += fmt::format("# B: {}: {}\n", PrintableLine(b.source, 300), Describe(b));
    t += fmt::format(
        "# d = B p50 / A p50 - 1; regressed: d > threshold {} + noise; slower: d > threshold; faster: "
        "A p50 / B p50 - 1 > threshold + noise\n",
        Percent(threshold));
    t += fmt::format("# noise = {}; busbw B/A is the reported busbw (from the mean time)\n#\n", noise_rule);
    t +=
        fmt::format("# {:>7} {:<5} {:>11} {:>11} {:>7} {:>9} {:>9} {:>7} {:>8} {:>8} {:>7}  {}\n", "size", "place",
                    "A p50", "B p50", "p50", "A busbw", "B busbw", "busbw", "A spread", "B spread", "noise", "verdict");
    t += fmt::format("# {:>7} {:<5} {:>11} {:>11} {:>7} {:>9} {:>9} {:>7} {:>8} {:>8} {:>7}\n", "", "", "(us)", "(us)",
                     "B/A", "(GB/s)", "(GB/s)", "B/A", "", "", "");
    for (const auto& c : rows) {
      const bool m = c.a->ok && c.b->ok;
      t += fmt::format("  {:>7} {:<5} {:>11} {:>11} {:>7} {:>9} {:>9} {:>7} {:>8} {:>8} {:>7}  {}\n",
                       FormatSize(c.a->size_bytes), c.a->inplace ? "in" : "out", Number(c.a->p50_us, 2),
                       Number(c.b->p50_us, 2), Ratio(c.time_ratio), Number(c.a->busbw_gbps, 3),
                       Number(c.b->busbw_gbps, 3), Ratio(c.busbw_ratio), m ? Percent(Spread(*c.a)) : "n/a",
                       m ? Percent(Spread(*c.b)) : "n/a", c.verdict ? Percent(c.noise) : "n/a",
                       c.verdict ? CompareVerdictName(*c.verdict) : "n/a (" + c.why + ")");
    }
    t += fmt::format("# {} row(s): {} faster, {} same, {} slower, {} regressed; sizes only in A: {}; only in B: {}\n",
                     rows.size(), counts[CompareVerdict::kFaster], counts[CompareVerdict::kSame],
                     counts[CompareVerdict::kSlower], counts[CompareVerdict::kRegressed], size_list(only_a),
                     size_list(only_b));
    std::cout << t;
  }
  std::cout.flush();
  // A gate on B: a row B could not time is no pass (a failed or empty row in A alone only goes
  // unjudged); it is named with the regressions, in one line.
  std::vector<std::string> why;
  if (!regressed.empty())
    why.push_back(fmt::format("B regressed past {} + noise at {}", Percent(threshold), fmt::join(regressed, ", ")));
  if (!broken.empty()) why.push_back(fmt::format("B has no time at {}", fmt::join(broken, ", ")));
  if (!why.empty()) throw VerificationError(fmt::format("compare: {}", fmt::join(why, "; ")));
  return 0;
}

}  // namespace ciuic
