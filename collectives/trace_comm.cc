#include "collectives/trace_comm.h"

#include <algorithm>
#include <climits>
#include <cstring>

#include <fmt/format.h>

#include "core/cupti.h"
#include "core/files.h"

namespace ciuic {

namespace {

// Bytes of rendered JSON each rank contributes per gather round: the control plane moves P of these
// to every rank at once, so a round stays small whatever the trace's size.
constexpr size_t kRoundBytes = 1u << 20;

struct RankInfo {
  uint64_t bytes, events, dropped;
};

}  // namespace

std::vector<std::string> WriteTrace(Communicator& comm, trace::Recorder& rec, const std::string& path,
                                    nlohmann::json other, const std::string& within, const std::string& scope) {
  trace::FlushGpuCollection(rec, true);
  const int p = comm.Size();
  const bool lead = comm.Rank() == 0;
  // One origin for all ranks: the earliest event anywhere (ranks of one host share the clock).
  int64_t first = rec.FirstNs();
  std::vector<int64_t> firsts(static_cast<size_t>(p));
  comm.HostAllGather(&first, firsts.data(), sizeof first);
  int64_t origin = *std::min_element(firsts.begin(), firsts.end());
  if (origin == INT64_MAX) origin = 0;
  const std::string text = rec.RenderEvents(origin);
  const RankInfo mine{text.size(), rec.size(), rec.dropped()};
  std::vector<RankInfo> infos(static_cast<size_t>(p));
  comm.HostAllGather(&mine, infos.data(), sizeof mine);
  uint64_t most = 0;
  for (const RankInfo& i : infos) most = std::max(most, i.bytes);
  std::vector<std::string> texts(lead ? static_cast<size_t>(p) : 0);
  std::vector<char> send(kRoundBytes), recv(kRoundBytes * static_cast<size_t>(p));
  for (uint64_t off = 0; off < most; off += kRoundBytes) {
    const size_t n = off < text.size() ? std::min<size_t>(kRoundBytes, text.size() - off) : 0;
    if (n) std::memcpy(send.data(), text.data() + off, n);
    comm.HostAllGather(send.data(), recv.data(), kRoundBytes);
    if (!lead) continue;
    for (int r = 0; r < p; ++r) {
      const uint64_t have = infos[static_cast<size_t>(r)].bytes;
      if (off < have)
        texts[static_cast<size_t>(r)].append(recv.data() + static_cast<size_t>(r) * kRoundBytes,
                                             std::min<uint64_t>(kRoundBytes, have - off));
    }
  }
  if (!lead) return {};
  std::string file = "{\"traceEvents\":[\n";
  bool any = false;
  for (const std::string& t : texts) {
    if (t.empty()) continue;
    if (any) file += ",\n";
    file += t;
    any = true;
  }
  other["schema"] = "ciuic.trace/1";
  other["clock"] = "steady_clock (CLOCK_MONOTONIC), microseconds from the earliest event";
  other["world_size"] = p;
  nlohmann::json dropped = nlohmann::json::array(), events = nlohmann::json::array();
  uint64_t total_dropped = 0;
  for (const RankInfo& i : infos) {
    dropped.push_back(i.dropped);
    events.push_back(i.events);
    total_dropped += i.dropped;
  }
  other["events_per_rank"] = events;
  other["dropped_per_rank"] = dropped;
  file += "\n],\"displayTimeUnit\":\"ms\",\"otherData\":" + other.dump() + "}\n";
  WriteFileAtomically(path, file);
  std::vector<std::string> lines = trace::SummaryLines(trace::Summarize(nlohmann::json::parse(file), within), scope);
  if (total_dropped)
    lines.push_back(fmt::format("{} event(s) were dropped: a rank keeps at most {} (trace a shorter run)",
                                total_dropped, trace::kMaxEvents));
  return lines;
}

}  // namespace ciuic
