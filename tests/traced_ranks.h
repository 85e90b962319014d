#pragma once
// Test helper: runs a function on thread ranks, each with its own trace recorder bound, and returns
// each rank's recorded events (the JSON objects trace::Recorder renders), to look for a span by name.
#include <functional>
#include <string>
#include <vector>

#include "collectives/backends/local/communicator.h"
#include "core/trace.h"

namespace ciuic::testing_trace {

inline std::vector<std::string> TracedRanks(int ranks, const std::function<void(Communicator&)>& fn) {
  std::vector<std::string> events(static_cast<size_t>(ranks));
  RunLocalRanks(ranks, [&](Communicator& comm) {
    trace::Recorder recorder(comm.Rank(), "test");
    {
      trace::Bind bind(&recorder);
      fn(comm);
    }
    events[static_cast<size_t>(comm.Rank())] = recorder.RenderEvents(0);
  });
  return events;
}

// Whether rendered events hold a span named `name`.
inline bool HasSpan(const std::string& events, const std::string& name) {
  return events.find("\"name\":\"" + name + "\"") != std::string::npos;
}

}  // namespace ciuic::testing_trace
