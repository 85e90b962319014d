#pragma once
// GPU activity for traces, through CUPTI (builds with CIUIC_HAVE_CUPTI; elsewhere every call says
// why not). The collector is process-wide and reference-counted (ranks as threads share it): it
// enables CUPTI's activity records for kernels (ours and NCCL's), memcpys and memsets, has CUPTI
// stamp them with the trace clock (core/trace.h NowNs, through cuptiActivityRegisterTimestampCallback;
// an offset taken at start where that is refused), and while it runs every open Span pushes its id as
// an external correlation, so each GPU record names the host span that launched it.
#include <string>

#include "core/trace.h"

namespace ciuic::trace {

// Starts collecting (or joins a running collector). Returns "" when collecting, else why not: "this
// build has no CUPTI", "no CUDA device", or the CUPTI call that failed.
std::string StartGpuCollection();
// Flushes CUPTI's buffers and adds to `r` every record launched under one of its spans; records no
// recorder claims (launched outside any span) go to `r` too when take_unclaimed.
void FlushGpuCollection(Recorder& r, bool take_unclaimed);
// Leaves the collector; the last user's call disables the activity records.
void StopGpuCollection();

}  // namespace ciuic::trace
