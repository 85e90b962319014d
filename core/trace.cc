#include "core/trace.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cmath>
#include <unordered_map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace ciuic::trace {

namespace detail {
thread_local Recorder* tls_recorder = nullptr;
}  // namespace detail

namespace {

std::atomic<uint32_t> g_serial{0};

constexpr const char* kCategoryNames[] = {"phase",      "compute",  "comm",       "wait",
                                          "gpu.kernel", "gpu.nccl", "gpu.memcpy", "gpu.memset"};

void AppendEscaped(std::string& out, std::string_view s) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20) {
          out += fmt::format("\\u{:04x}", c);
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
}

// Microseconds with nanosecond digits: exact for any trace shorter than ~100 days.
std::string Us(int64_t ns) {
  const char* sign = ns < 0 ? "-" : "";
  const uint64_t a = ns < 0 ? static_cast<uint64_t>(-ns) : static_cast<uint64_t>(ns);
  return fmt::format("{}{}.{:03}", sign, a / 1000, a % 1000);
}

bool IsGpu(Category c) { return c >= Category::kGpuKernel; }

}  // namespace

const char* CategoryName(Category c) { return kCategoryNames[static_cast<int>(c)]; }

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

Recorder::Recorder(int rank, std::string label) : rank_(rank), label_(std::move(label)), serial_(++g_serial) {
  events_.reserve(4096);
}

Recorder::~Recorder() = default;

uint32_t Recorder::TidOfThisThread() {
  const auto [it, added] = tids_.try_emplace(std::this_thread::get_id(), static_cast<uint32_t>(tids_.size() + 1));
  return it->second;
}

void Recorder::Add(const char* name, Category cat, int64_t ts_ns, int64_t dur_ns, uint64_t id, const Arg* args,
                   int nargs) {
  std::lock_guard lock(mu_);
  if (events_.size() >= kMaxEvents) {
    ++dropped_;
    return;
  }
  Event e{name, cat, nargs, TidOfThisThread(), ts_ns, dur_ns, id, {}};
  std::copy(args, args + nargs, e.args);
  events_.push_back(e);
}

void Recorder::AddGpu(const std::string& name, Category cat, int64_t ts_ns, int64_t dur_ns, uint32_t stream,
                      uint64_t span, int64_t bytes) {
  std::lock_guard lock(mu_);
  if (events_.size() >= kMaxEvents) {
    ++dropped_;
    return;
  }
  auto it = interned_.find(name);
  if (it == interned_.end()) it = interned_.emplace(name, names_.emplace_back(name).c_str()).first;
  Event e{it->second, cat, 0, kGpuTidBase + stream, ts_ns, std::max<int64_t>(dur_ns, 0), span, {}};
  if (bytes >= 0) e.args[e.nargs++] = Arg{"bytes", bytes};
  events_.push_back(e);
}

void Recorder::SetNote(const std::string& key, const std::string& value) {
  std::lock_guard lock(mu_);
  notes_[key] = value;
}

size_t Recorder::size() const {
  std::lock_guard lock(mu_);
  return events_.size();
}

size_t Recorder::dropped() const {
  std::lock_guard lock(mu_);
  return dropped_;
}

int64_t Recorder::FirstNs() const {
  std::lock_guard lock(mu_);
  int64_t first = INT64_MAX;
  for (const Event& e : events_) first = std::min(first, e.ts_ns);
  return first;
}

std::string Recorder::RenderEvents(int64_t origin_ns) const {
  std::lock_guard lock(mu_);
  if (events_.empty()) return "";
  std::string out;
  out.reserve(events_.size() * 140 + 512);
  const int pid = rank_;
  auto meta = [&](const char* what, uint32_t tid, const std::string& key, const std::string& value, bool number) {
    if (!out.empty()) out += ",\n";
    out += fmt::format(R"({{"name":"{}","ph":"M","pid":{},"tid":{},"ts":0,"args":{{"{}":)", what, pid, tid, key);
    if (number) {
      out += value;
    } else {
      AppendEscaped(out, value);
    }
    out += "}}";
  };
  meta("process_name", 0, "name", label_, false);
  meta("process_sort_index", 0, "sort_index", std::to_string(rank_), true);
  if (!notes_.empty()) {
    std::string labels;
    for (const auto& [k, v] : notes_) labels += fmt::format("{}{}: {}", labels.empty() ? "" : "; ", k, v);
    meta("process_labels", 0, "labels", labels, false);
  }
  std::vector<uint32_t> tids;
  for (const Event& e : events_) tids.push_back(e.tid);
  std::sort(tids.begin(), tids.end());
  tids.erase(std::unique(tids.begin(), tids.end()), tids.end());
  for (uint32_t tid : tids) {
    const std::string name = tid >= kGpuTidBase ? fmt::format("gpu stream {}", tid - kGpuTidBase)
                                                : (tid == 1 ? std::string("host") : fmt::format("host thread {}", tid));
    meta("thread_name", tid, "name", name, false);
    meta("thread_sort_index", tid, "sort_index", std::to_string(tid), true);
  }
  // Host spans by id, for the flow arrows from a launching span to its GPU records.
  std::unordered_map<uint64_t, const Event*> spans;
  const bool any_gpu = std::any_of(events_.begin(), events_.end(), [](const Event& e) { return IsGpu(e.cat); });
  if (any_gpu) {
    for (const Event& e : events_)
      if (!IsGpu(e.cat) && e.id) spans.emplace(e.id, &e);
  }
  uint64_t flow = 0;
  for (const Event& e : events_) {
    out += ",\n{\"name\":";
    AppendEscaped(out, e.name);
    out += fmt::format(R"(,"cat":"{}","ph":"X","pid":{},"tid":{},"ts":{},"dur":{})", CategoryName(e.cat), pid, e.tid,
                       Us(e.ts_ns - origin_ns), Us(e.dur_ns));
    const bool gpu = IsGpu(e.cat);
    if (e.nargs > 0 || (gpu && e.id)) {
      out += ",\"args\":{";
      for (int i = 0; i < e.nargs; ++i) out += fmt::format("{}\"{}\":{}", i ? "," : "", e.args[i].key, e.args[i].value);
      if (gpu && e.id) {
        const auto it = spans.find(e.id);
        out += fmt::format("{}\"launched_by\":", e.nargs ? "," : "");
        AppendEscaped(out, it == spans.end() ? std::string("?") : std::string(it->second->name));
      }
      out += "}";
    }
    out += "}";
    if (gpu && e.id) {
      const auto it = spans.find(e.id);
      if (it == spans.end()) continue;
      // A flow arrow (trace-event "s"/"f"): from the launching host span to this GPU record.
      const uint64_t fid = (static_cast<uint64_t>(rank_) << 32) | ++flow;
      out += fmt::format(R"(,
{{"name":"launch","cat":"flow","ph":"s","id":{},"pid":{},"tid":{},"ts":{}}})",
                         fid, pid, it->second->tid, Us(it->second->ts_ns - origin_ns));
      out += fmt::format(R"(,
{{"name":"launch","cat":"flow","ph":"f","bp":"e","id":{},"pid":{},"tid":{},"ts":{}}})",
                         fid, pid, e.tid, Us(e.ts_ns - origin_ns));
    }
  }
  return out;
}

void Span::Open(const char* name, Category cat) {
  name_ = name;
  cat_ = cat;
  id_ = r_->NextId();
  pushed_ = detail::GpuCorrelation();
  if (pushed_) detail::PushCorrelation(*r_, id_);
  t0_ = NowNs();
}

void Span::Close() {
  const int64_t t1 = NowNs();
  if (pushed_) detail::PopCorrelation();
  r_->Add(name_, cat_, t0_, t1 - t0_, id_, args_, nargs_);
}

// ---- summary -----------------------------------------------------------------------------------

namespace {

struct Interval {
  double ts, end;
  Category cat;
};

Category CategoryOf(const std::string& name) {
  for (int i = 0; i < static_cast<int>(std::size(kCategoryNames)); ++i)
    if (name == kCategoryNames[i]) return static_cast<Category>(i);
  return Category::kPhase;  // anything else counts as a container
}

[[noreturn]] void Bad(size_t index, const std::string& what) {
  throw InputError(fmt::format("trace: traceEvents[{}]: {}", index, what));
}

double Number(const nlohmann::json& e, const char* key, size_t index) {
  const auto it = e.find(key);
  if (it == e.end() || !it->is_number()) Bad(index, fmt::format("\"{}\" must be a number", key));
  return it->get<double>();
}

// Self time per category of one host thread's (properly nested) spans: each moment counted for the
// innermost span covering it; with windows (sorted, disjoint), only the moments inside them count.
void HostShares(std::vector<Interval>& v, const std::vector<Interval>& windows, RankShare& s) {
  std::sort(v.begin(), v.end(),
            [](const Interval& a, const Interval& b) { return a.ts != b.ts ? a.ts < b.ts : a.end > b.end; });
  // The self-time segments, in time order.
  std::vector<Interval> segments;
  struct Open {
    double cursor, end;
    Category cat;
  };
  std::vector<Open> stack;
  auto emit = [&](double a, double b, Category c) {
    if (b > a) segments.push_back({a, b, c});
  };
  auto pop_until = [&](double t) {
    while (!stack.empty() && stack.back().end <= t) {
      const Open e = stack.back();
      stack.pop_back();
      emit(e.cursor, e.end, e.cat);
      if (!stack.empty()) stack.back().cursor = std::max(stack.back().cursor, e.end);
    }
  };
  for (const Interval& i : v) {
    pop_until(i.ts);
    if (!stack.empty()) {
      emit(stack.back().cursor, i.ts, stack.back().cat);
      stack.back().cursor = std::max(stack.back().cursor, i.ts);
    }
    stack.push_back({i.ts, i.end, i.cat});
  }
  pop_until(INFINITY);
  double total = 0;
  std::vector<Interval> whole;
  if (windows.empty()) {
    whole.push_back({v.front().ts, v.front().end, Category::kPhase});
    for (const Interval& i : v) {
      whole[0].ts = std::min(whole[0].ts, i.ts);
      whole[0].end = std::max(whole[0].end, i.end);
    }
  }
  const std::vector<Interval>& win = windows.empty() ? whole : windows;
  for (const Interval& w : win) total += w.end - w.ts;
  double counted = 0;
  size_t k = 0;
  for (const Interval& g : segments) {
    while (k < win.size() && win[k].end <= g.ts) ++k;
    for (size_t j = k; j < win.size() && win[j].ts < g.end; ++j) {
      const double t = std::min(g.end, win[j].end) - std::max(g.ts, win[j].ts);
      if (t <= 0) continue;
      switch (g.cat) {
        case Category::kCompute:
          s.compute_us += t;
          counted += t;
          break;
        case Category::kComm:
          s.comm_us += t;
          counted += t;
          break;
        case Category::kWait:
          s.wait_us += t;
          counted += t;
          break;
        default:
          break;
      }
    }
  }
  s.host_us += total;
  s.other_us += std::max(0.0, total - counted);
}

// GPU busy time: each moment once, for the highest-priority kind running (nccl, kernel, memcpy/set).
void GpuShares(const std::vector<Interval>& v, RankShare& s) {
  struct Edge {
    double t;
    int delta;
    int kind;  // 0 nccl, 1 kernel, 2 copy
  };
  std::vector<Edge> edges;
  double first = v.front().ts, last = v.front().end;
  for (const Interval& i : v) {
    const int kind = i.cat == Category::kGpuComm ? 0 : i.cat == Category::kGpuKernel ? 1 : 2;
    edges.push_back({i.ts, +1, kind});
    edges.push_back({i.end, -1, kind});
    first = std::min(first, i.ts);
    last = std::max(last, i.end);
  }
  std::sort(edges.begin(), edges.end(), [](const Edge& a, const Edge& b) { return a.t < b.t; });
  int active[3] = {0, 0, 0};
  double prev = first;
  for (const Edge& e : edges) {
    const double span = e.t - prev;
    if (span > 0) {
      if (active[0] > 0) {
        s.gpu_comm_us += span;
      } else if (active[1] > 0) {
        s.gpu_kernel_us += span;
      } else if (active[2] > 0) {
        s.gpu_copy_us += span;
      }
    }
    active[e.kind] += e.delta;
    prev = e.t;
  }
  s.gpu_us = last - first;
  s.gpu_idle_us = std::max(0.0, s.gpu_us - s.gpu_comm_us - s.gpu_kernel_us - s.gpu_copy_us);
}

std::string Duration(double us) {
  if (us >= 1e6) return fmt::format("{:.2f} s", us / 1e6);
  if (us >= 1e3) return fmt::format("{:.2f} ms", us / 1e3);
  return fmt::format("{:.1f} us", us);
}

double Pct(double part, double whole) { return whole > 0 ? 100.0 * part / whole : 0.0; }

}  // namespace

std::vector<RankShare> Summarize(const nlohmann::json& trace, const std::string& within) {
  if (!trace.is_object()) throw InputError("trace: the top level must be an object with \"traceEvents\"");
  const auto events = trace.find("traceEvents");
  if (events == trace.end() || !events->is_array()) throw InputError("trace: \"traceEvents\" must be an array");
  std::map<int, std::map<int64_t, std::vector<Interval>>> host;  // pid -> tid -> spans
  std::map<int, std::vector<Interval>> gpu;
  std::map<int, std::map<int64_t, std::vector<Interval>>> windows;
  std::map<int, size_t> counts;
  for (size_t i = 0; i < events->size(); ++i) {
    const nlohmann::json& e = (*events)[i];
    if (!e.is_object()) Bad(i, "not an object");
    const auto ph = e.find("ph");
    if (ph == e.end() || !ph->is_string()) Bad(i, "\"ph\" must be a string");
    const auto pid = e.find("pid");
    if (pid == e.end() || !pid->is_number_integer()) Bad(i, "\"pid\" must be an integer");
    if (*ph != "X") continue;
    const auto tid = e.find("tid");
    if (tid == e.end() || !tid->is_number_integer()) Bad(i, "\"tid\" must be an integer");
    const double ts = Number(e, "ts", i), dur = Number(e, "dur", i);
    if (!(dur >= 0)) Bad(i, "\"dur\" must not be negative");
    const auto cat = e.find("cat");
    const Category c = cat != e.end() && cat->is_string() ? CategoryOf(cat->get<std::string>()) : Category::kPhase;
    const int rank = pid->get<int>();
    ++counts[rank];
    if (IsGpu(c)) {
      gpu[rank].push_back({ts, ts + dur, c});
    } else {
      host[rank][tid->get<int64_t>()].push_back({ts, ts + dur, c});
      if (!within.empty()) {
        const auto name = e.find("name");
        if (name != e.end() && name->is_string() && *name == within)
          windows[rank][tid->get<int64_t>()].push_back({ts, ts + dur, c});
      }
    }
  }
  std::vector<RankShare> out;
  for (auto& [rank, n] : counts) {
    RankShare s;
    s.rank = rank;
    s.events = n;
    for (auto& [tid, spans] : host[rank]) {
      if (within.empty()) {
        HostShares(spans, {}, s);
        continue;
      }
      auto& w = windows[rank][tid];
      if (w.empty()) continue;
      std::sort(w.begin(), w.end(), [](const Interval& a, const Interval& b) { return a.ts < b.ts; });
      HostShares(spans, w, s);
    }
    if (!gpu[rank].empty()) GpuShares(gpu[rank], s);
    out.push_back(s);
  }
  return out;
}

std::vector<std::string> SummaryLines(const std::vector<RankShare>& shares, const std::string& scope) {
  std::vector<std::string> lines;
  for (const RankShare& s : shares) {
    if (s.host_us > 0)
      lines.push_back(
          fmt::format("rank {}: {} {}: kernels {:.1f}%, communication {:.1f}%, waiting {:.1f}%, "
                      "other {:.1f}%",
                      s.rank, Duration(s.host_us), scope, Pct(s.compute_us, s.host_us), Pct(s.comm_us, s.host_us),
                      Pct(s.wait_us, s.host_us), Pct(s.other_us, s.host_us)));
    if (s.gpu_us > 0)
      lines.push_back(
          fmt::format("rank {} gpu: {} from first to last record: kernels {:.1f}%, nccl {:.1f}%, "
                      "memcpy/memset {:.1f}%, idle {:.1f}%",
                      s.rank, Duration(s.gpu_us), Pct(s.gpu_kernel_us, s.gpu_us), Pct(s.gpu_comm_us, s.gpu_us),
                      Pct(s.gpu_copy_us, s.gpu_us), Pct(s.gpu_idle_us, s.gpu_us)));
  }
  return lines;
}

}  // namespace ciuic::trace
