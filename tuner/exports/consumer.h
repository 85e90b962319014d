#pragma once
// What each consumer file of tuner/exports/ provides, and the helpers they share. Internal to the
// exports; callers use exports.h.
#include <functional>
#include <string>
#include <vector>

#include "collectives/profile.h"
#include "tuner/exports/exports.h"

namespace ciuic::exports {

// One consumer: its export text (`head` is the provenance line, without "# ") and the choices of the
// profile it cannot express, beyond the per-band ones every global-settings consumer loses (which
// exports.cc adds when `global_settings` is true).
struct Consumer {
  const char* format;
  std::function<std::string(const Profile& p, const std::string& head)> body;
  std::function<std::vector<std::string>(const Profile& p)> lost;
  bool global_settings;  // one setting for every size: the largest band's choice applies to all
};

Consumer JsonConsumer();
Consumer NcclEnvConsumer();
Consumer NcclTunerConsumer();
Consumer DdpConsumer(const Profile& p);  // ciuic's per-band hook or PyTorch's own, by the profile
Consumer DeepSpeedConsumer(const ExportOptions& o);
Consumer HorovodConsumer();

// "band [16M, 256M)".
std::string BandName(const ProfileRule& r);
// The profile's path, absolute and normalised, for an export to name (PROFILE.json when it has none).
std::string ProfilePathForExport(const Profile& p);
// The largest band: what gradient buckets look like.
const ProfileRule& LargestBand(const Profile& p);
// The profile's gradient-accumulation suggestion in words ("sync every 4 micro-batches: 1.31x per
// micro-batch (model), accuracy gate passed on int8 at 4"); empty when it suggests none (steps 1 or
// not priced). A suggestion only: it changes the effective batch, so no export sets it.
std::string AccumulationSuggestion(const Profile& p);

}  // namespace ciuic::exports
