#include "bench/cli.h"

int main(int argc, char** argv) { return ciuic::BenchMain(argc, argv); }
