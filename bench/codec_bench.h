#pragma once
// `ciuic-bench compress` (codec encode / decode / decode-accumulate speed, wire ratio and error on
// realistic gradients) and `ciuic-bench kernel NAME` (the fused kernels (a)–(e)). Each size is
// compared with a copy of the same bytes timed in the same run: single-core memcpy on the CPU,
// cudaMemcpy device-to-device on the GPU.
//
// Throughput columns: GB/s = fp32 gradient bytes (4 × elements) / time, so encode and decode of one
// codec read alike; traffic GB/s = bytes actually read + written / time; %copy = GB/s over the copy's
// bytes/s (the CPU criterion); %traffic = traffic over the copy's read + write bytes/s (the GPU one).
#include <string>

namespace ciuic {

// Returns the process exit code; argv[1] is "compress" or "kernel". Throws ciuic::Error on bad input
// (BenchMain maps it to its exit code).
int CodecBenchMain(int argc, char** argv);

}  // namespace ciuic
