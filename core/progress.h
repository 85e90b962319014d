#pragma once
// A live progress line on a terminal for long work (bench sweeps, ciuic-tune run/calibrate/validate):
// "ciuic-tune: study 37/100 (37%)  trial 37: codec=int8 ...  12 s, ETA 20 s". One per process. It is
// drawn on stderr only when the tool enabled it (EnableProgress) and stderr is a terminal; anything
// the tool prints meanwhile (std::cout, std::cerr, LogInfo) first clears the line, which is drawn
// again after that output's line ends, so the two never mix. A ticker redraws it once a second, so
// the elapsed time moves during a long item. With progress off (the default; stderr not a terminal;
// CIUIC_PROGRESS=0) nothing is written and every call is a cheap no-op.
#include <string>
#include <string_view>

namespace ciuic {

// Turns the live line on for this process when `wanted`, stderr is a terminal and CIUIC_PROGRESS is
// not "0". CIUIC_PROGRESS=1 forces it on without a terminal, and CIUIC_PROGRESS=stdout forces it on
// drawn on stdout: the ranks a launcher started from a terminal, whose stdout and stderr reach it
// through separate pipes (on stdout, the line stays in order with the table). Returns whether it is on.
bool EnableProgress(bool wanted);
// Refuses a CIUIC_PROGRESS other than unset, empty, 0, 1 or stdout (UsageError naming it): the tools
// call it with their options, so a mistyped value is not silently read as "draw on a terminal".
void CheckProgressSetting();
bool ProgressEnabled();

// One phase of work with a known number of items. Items may carry weights (e.g. a sweep's bytes) so
// the ETA follows the work, not the count. The line disappears when the phase ends. A phase started
// while another runs (validate calibrating first) leaves the outer line as it is.
class Progress {
 public:
  Progress(std::string_view what, double total_weight, int total_items);
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  // Starts an item: `label` says what runs now; `weight` is its share of total_weight.
  void Begin(std::string_view label, double weight = 1);
  // The current item is done.
  void Done();

 private:
  bool on_;
};

// Clears the live line if it is drawn (before writing to a terminal by other means). Cheap when off.
void ClearProgressLine();

}  // namespace ciuic
