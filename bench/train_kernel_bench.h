#pragma once
// `ciuic-bench kernel ln-dropout-gelu|bias-gelu|add-ln --shape TOKENSxHIDDEN`: a training kernel fused
// (one pass), the unfused sequence of our own single-op kernels, and PyTorch's eager sequence (when
// /usr/bin/python3, or $CIUIC_PYTHON, imports torch), forward and backward, beside a copy of the same
// bytes timed in the same run. GB/s counts the bytes the operation must move once (its inputs read,
// its outputs written); %copy is that over the copy's read + write bytes/s.
#include <string_view>

namespace ciuic {

// True for the names TrainKernelBenchMain takes (so `ciuic-bench kernel NAME` can route).
bool IsTrainKernelName(std::string_view name);
// argv[1] is "kernel". Returns the exit code; throws ciuic::Error on bad input.
int TrainKernelBenchMain(int argc, char** argv);

}  // namespace ciuic
