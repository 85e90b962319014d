// A profile's rules per size band: for each band, the best configuration for one message of the band's
// size, chosen on the cost model or (--mode measure) timed on real ranks against the baseline.
#pragma once

#include <functional>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "collectives/profile.h"
#include "tuner/calibrate.h"
#include "tuner/meter.h"
#include "tuner/plan_space.h"
#include "tuner/topology.h"

namespace ciuic {

// What the band choice reads: the study's inputs, passed explicitly.
struct BandInputs {
  const Topology& topo;
  const SearchSpace& space;
  const std::map<std::string, bool>& gate;            // GateName -> passed the accuracy gate
  const Calibration* calibration;                     // the codec costs the model prices with; null: memory bandwidth
  const std::string& target;                          // --target: a configuration it cannot run is never a rule
  double min_gain;                                    // --min-gain: what a lossy rule must gain over the best lossless
  int band_candidates;                                // --band-candidates: how many the meter times per band
  std::function<bool(const PlanChoice&)> state_fits;  // the state-memory limit
  BucketMeter* meter;                                 // --mode measure; null: the model alone
  double largest_message = 0;                         // the workload's gradients in bytes (fp32); 0: unknown
};

// The best (codec that passed the gate, streams, algorithm) for one message of each band's
// representative size (measured: at most the workload's gradients, never below the band's edge), run in
// the study's bucket size (best.bucket_bytes) as the runtime runs it; lossy
// only when `best`, the step's choice, is lossy. With a meter the model's best `band_candidates`
// (buckets: the study's, the baseline's 25 MiB, the space's largest) and the baseline itself are timed
// at that size the runtime's way; the fastest measured, timed again beside the baseline, is the rule if
// it still wins by 5%. Every choice is said in `log`.
std::vector<ProfileRule> PickBandRules(const BandInputs& in, const PlanChoice& best, std::ostream& log);

// A configuration without a lossy codec or a reduced precision.
bool IsLossless(const PlanChoice& c);

// Whether a lossy plan at lossy_us beats the best lossless one at lossless_us by `min_gain`; says why in
// `log` either way. `what` names the choice (a band, "best").
bool LossyPays(std::ostream& log, double min_gain, const std::string& what, const std::string& lossy, double lossy_us,
               const std::string& lossless, double lossless_us);

}  // namespace ciuic
