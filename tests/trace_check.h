#pragma once
// Test helper: checks a Chrome trace-event JSON document as Perfetto and chrome://tracing read it
// (the "traceEvents" array format) and as ciuic writes it. Returns "" or the first problem found.
#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace ciuic::testing_trace {

inline std::string CheckTraceEvents(const nlohmann::json& t) {
  if (!t.is_object()) return "top level is not an object";
  if (!t.contains("traceEvents") || !t["traceEvents"].is_array()) return "no traceEvents array";
  const auto& events = t["traceEvents"];
  const std::set<std::string> phases = {"X", "M", "s", "f"};
  const std::set<std::string> meta = {"process_name", "process_sort_index", "process_labels", "thread_name",
                                      "thread_sort_index"};
  std::set<int> named_pids;
  std::set<std::pair<int, int>> named_threads;
  std::map<std::pair<int, int>, std::vector<std::pair<double, double>>> spans;
  std::map<long long, int> flow_ends;
  for (size_t i = 0; i < events.size(); ++i) {
    const auto& e = events[i];
    const std::string at = "traceEvents[" + std::to_string(i) + "]: ";
    if (!e.is_object()) return at + "not an object";
    if (!e.contains("name") || !e["name"].is_string()) return at + "no string name";
    if (!e.contains("ph") || !e["ph"].is_string() || !phases.count(e["ph"].get<std::string>()))
      return at + "ph missing or not one of X M s f";
    if (!e.contains("pid") || !e["pid"].is_number_integer()) return at + "no integer pid";
    if (!e.contains("tid") || !e["tid"].is_number_integer()) return at + "no integer tid";
    if (!e.contains("ts") || !e["ts"].is_number()) return at + "no numeric ts";
    const std::string ph = e["ph"];
    const int pid = e["pid"], tid = e["tid"];
    if (ph == "M") {
      const std::string name = e["name"];
      if (!meta.count(name)) return at + "unknown metadata event " + name;
      if (!e.contains("args") || !e["args"].is_object()) return at + "metadata without args";
      const auto& a = e["args"];
      if ((name == "process_name" || name == "thread_name") && !(a.contains("name") && a["name"].is_string()))
        return at + name + " without args.name";
      if (name.find("sort_index") != std::string::npos &&
          !(a.contains("sort_index") && a["sort_index"].is_number_integer()))
        return at + name + " without an integer args.sort_index";
      if (name == "process_labels" && !(a.contains("labels") && a["labels"].is_string()))
        return at + "process_labels without args.labels";
      if (name == "process_name") named_pids.insert(pid);
      if (name == "thread_name") named_threads.insert({pid, tid});
    } else if (ph == "X") {
      if (!e.contains("dur") || !e["dur"].is_number() || e["dur"].get<double>() < 0)
        return at + "X event without a non-negative dur";
      if (!e.contains("cat") || !e["cat"].is_string()) return at + "X event without a cat";
      if (e.contains("args") && !e["args"].is_object()) return at + "args is not an object";
      const double ts = e["ts"], dur = e["dur"];
      spans[{pid, tid}].push_back({ts, ts + dur});
    } else {
      if (!e.contains("id") || !e["id"].is_number_integer()) return at + "flow event without an integer id";
      if (ph == "f" && e.value("bp", "") != "e") return at + "flow end without bp e";
      flow_ends[e["id"].get<long long>()] += ph == "s" ? 1 : -1;
    }
  }
  for (const auto& [id, balance] : flow_ends)
    if (balance != 0) return "flow " + std::to_string(id) + " has no matching start/end";
  for (auto& [key, v] : spans) {
    if (!named_pids.count(key.first)) return "pid " + std::to_string(key.first) + " has no process_name";
    if (!named_threads.count(key))
      return "pid/tid " + std::to_string(key.first) + "/" + std::to_string(key.second) + " has no thread_name";
    if (key.second >= 1000000) continue;  // GPU streams run work concurrently
    std::sort(v.begin(), v.end(),
              [](auto& a, auto& b) { return a.first != b.first ? a.first < b.first : a.second > b.second; });
    std::vector<double> open;
    for (const auto& [s, e] : v) {
      while (!open.empty() && open.back() <= s + 1e-3) open.pop_back();
      if (!open.empty() && e > open.back() + 1e-3)
        return "pid/tid " + std::to_string(key.first) + "/" + std::to_string(key.second) + ": span at " +
               std::to_string(s) + " overlaps its parent without nesting";
      open.push_back(e);
    }
  }
  return "";
}

// The names of the X events of one pid.
inline std::set<std::string> SpanNames(const nlohmann::json& t, int pid) {
  std::set<std::string> names;
  for (const auto& e : t["traceEvents"])
    if (e["ph"] == "X" && e["pid"] == pid) names.insert(e["name"].get<std::string>());
  return names;
}

}  // namespace ciuic::testing_trace
