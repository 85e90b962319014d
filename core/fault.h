#pragma once
// Fault injection for the fault tests (tests/scripts/fault_matrix.sh): $CIUIC_FAULT names one rank
// that fails at one point of a run, so every phase (start-up, the control plane, the collective
// itself) can be tested without racing an outside kill against it. Unset, it costs one branch.
//
//   CIUIC_FAULT=PHASE:RANK:ACTION[:AFTER]
//     PHASE   startup (before the launcher's start-up exchanges), control (a control-plane
//             exchange between rows), collective (a timed iteration), report (after the sweep:
//             --db holds the run, rank 0 has yet to write --out), nccl-startup (after the ranks
//             exchanged NCCL's id, before this rank joins NCCL's own start-up)
//     RANK    the world rank that fails (OMPI_COMM_WORLD_RANK under a launcher, else the caller's)
//     ACTION  stop (SIGSTOP to itself), kill (SIGKILL to itself), exit (exit(1) without clean-up
//             of the run: what a library's abort looks like to its peers); for ranks as threads
//             (--backend local), where those end the whole process: hang (the rank's thread blocks
//             for ever, as in a stuck library call) and throw (a RuntimeError from the rank)
//     AFTER   fail at the AFTER-th time the rank reaches the point (default 1)
// A malformed value is a UsageError naming the variable.
#include <string_view>

namespace ciuic {

// Fails here if $CIUIC_FAULT names this phase and rank and this is the AFTER-th visit.
void FaultPoint(std::string_view phase, int rank);

}  // namespace ciuic
