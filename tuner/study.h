#pragma once
// A tuning study: accuracy gate for every codec in the space (results stored and reused), the search
// on the modelled objective with every trial stored in SQLite (an interrupted study with the same
// settings resumes from its stored trials), the best configuration per size band, and the profile.
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "collectives/profile.h"
#include "tuner/plan_space.h"

namespace ciuic {

struct TuneOptions {
  std::string topology = "dgx_a100";
  int nodes = 0;
  std::string workload = "gpt2_xl";
  std::string strategy = "bayes";
  int budget = 100;
  uint64_t seed = 1;
  int patience = 0;
  std::string mode = "model";
  std::string db;              // empty: DefaultDatabasePath()
  std::string calibration_db;  // where calibrations are read (empty: db), e.g. one made on a GPU machine
  std::string out;             // profile path; empty: DefaultProfilesDir()/<topology>.profile.json
  double gate_tolerance = 0.01;
  int gate_seeds = 3;  // the accuracy gate's seeds (tuner/gate.h); a verdict is stored per setting
  // > 0: configurations whose CommStateBytes exceed it are infeasible; 0: no limit; kAutoStateMemory:
  // a quarter of the topology's device memory (what a training job can spare beside weights,
  // gradients and optimizer state), no limit where the topology names none.
  double state_memory_gib = kAutoStateMemory;
  static constexpr double kAutoStateMemory = -1;
  // A lossy configuration is chosen over the best lossless one (codec none at fp32) only when its
  // predicted time is lower by at least this fraction: 0.05 = 5% faster.
  double min_gain = 0.05;
  std::string target = "ciuic";  // TuneTargets(): search only what that consumer can run
  // --mode measure: how many of the model's best configurations each size band times beside the
  // baseline (study.cc PickRules).
  int band_candidates = 4;
  // --mode measure: the transport the runtime (and the library baseline) is timed over: "mpi" (Open
  // MPI, as mpiexec jobs run it) or "gloo" (gloo's TCP transport, as a torch job's ciuic.torch hook
  // and DDP's default CPU allreduce run it).
  std::string transport = "mpi";
  // Gradient accumulation steps to price and gate (profile "accumulation", a suggestion the job opts
  // into): 1 first; {1} prices nothing.
  std::vector<int> accumulation{1, 2, 4, 8};
};

struct TuneResult {
  int64_t study_id = 0;
  Profile profile;
  std::string profile_path;
  std::string db_path;  // the database the study is in (TuneOptions::db, or the default)
  int evaluations = 0;
  int reused = 0;  // trials served from a resumed study
};

// The tools' defaults, in the data folder (core/files.h DataHome, created on first use): ciuic.db and
// profiles/. Never the current directory or the source tree.
std::string DefaultDatabasePath();
std::string DefaultProfilesDir();

TuneResult RunStudy(const TuneOptions& options, std::ostream& progress);
// Stored studies and best configurations, newest first.
void ShowStudies(const std::string& db_path, std::ostream& out);

}  // namespace ciuic
