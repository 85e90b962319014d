#pragma once
// ciuic-bench's command line: parses options, validates every input before any rank starts,
// re-launches itself under mpiexec when asked for ranks outside a launcher, runs the sweep and maps
// errors to exit codes (0 ok, 1 usage/input, 2 runtime, 3 verification or --expect).
namespace ciuic {

int BenchMain(int argc, char** argv);

}  // namespace ciuic
