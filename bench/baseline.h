#pragma once
// Reference baselines (`--baseline NAME|FILE`): published nccl-tests busbw by message size for a known
// system, each figure with its source (profiles/baselines/*.json, `ciuic.baseline/1`). A row whose
// size the baseline has a figure for shows its busbw as a share of that figure; other sizes show none
// (no figure is interpolated or extrapolated: a number here is a number someone published).
#include <cstdint>
#include <string>
#include <vector>

namespace ciuic {

struct BaselinePoint {
  uint64_t bytes = 0;
  double busbw_gbps = 0;
  std::string source;  // the address the figure was read from
  std::string note;
};

struct Baseline {
  std::string name;
  std::string description;
  std::string collective;             // the figures are this collective's (nccl-tests' *_perf)
  int ranks = 0;                      // GPUs the figures were measured on
  std::vector<BaselinePoint> points;  // ascending bytes, one per size
  // The published busbw at exactly `bytes`; -1 when there is none.
  double BusbwAt(uint64_t bytes) const;
};

// Folder of the shipped baselines: $CIUIC_PROFILES_DIR/baselines, else the source tree's.
std::string BaselinesDir();
// Names of the shipped baselines (file stems, sorted).
std::vector<std::string> BaselineNames();
// A shipped name or a file path (one holding '/' or ending in .json). UsageError naming the available
// baselines for an unknown name; InputError "FILE: PATH: problem" for a bad file.
Baseline LoadBaseline(const std::string& name_or_path);
// Parses `text` (origin names it in messages).
Baseline ParseBaseline(const std::string& text, const std::string& origin);

}  // namespace ciuic
