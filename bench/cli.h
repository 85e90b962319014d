#pragma once
// ciuic-bench's command line: parses options, validates every input before any rank starts,
// re-launches itself under mpiexec when asked for ranks outside a launcher, runs the sweep and maps
// errors to exit codes (0 ok, 1 usage/input, 2 runtime, 3 verification or --expect).
#include <cstdint>
#include <string>
#include <vector>

namespace ciuic {

int BenchMain(int argc, char** argv);

// What a collective's command line asks for, as parsed and checked (no rank started, no file
// written): the view the tests compare nccl-tests' and OSU's short flags against our long options
// with. Throws the UsageError the tool would print.
struct ParsedSweep {
  std::string collective;
  std::vector<uint64_t> sizes;
  std::vector<std::string> dtypes;  // our names, in sweep order
  std::vector<std::string> ops;
  int iters = -1;  // -1: auto
  int warmup = -1;
  int check = 1;
  std::string average;
  int ranks = 0;  // 0: not fixed
  int blocking = -1;
  std::string baseline;
  std::string nccl_json;  // --nccl-json / -J ("": none)
  bool per_iter = false;  // --per-iter 1 / -I 1
};
ParsedSweep ParseBenchCommandLine(const std::vector<std::string>& args);  // args after the program name

}  // namespace ciuic
