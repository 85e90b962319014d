#pragma once
// One trace file from every rank's recorder: the ranks' events are gathered to rank 0 over the
// communicator's control plane (HostAllGather, in fixed-size rounds) and written there as one Chrome
// trace-event JSON file, one pid per rank. Used by ciuic-bench --trace and the runtime's C API.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "collectives/communicator.h"
#include "core/trace.h"

namespace ciuic {

// Collective. Adds this rank's GPU records (core/cupti.h) to `rec`, gathers every rank's events and,
// on rank 0, writes `path` atomically (core/files.h) with `other` as the file's "otherData" (the
// schema "ciuic.trace/1", dropped-event counts and notes are added) and returns the summary lines
// (trace::SummaryLines of the file as written, host time inside spans named `within` when given, see
// trace::Summarize); other ranks return nothing.
std::vector<std::string> WriteTrace(Communicator& comm, trace::Recorder& rec, const std::string& path,
                                    nlohmann::json other, const std::string& within = "",
                                    const std::string& scope = "on the host");

}  // namespace ciuic
