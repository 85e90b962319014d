#pragma once
// `ciuic-bench plot KIND ...` and `ciuic-tune plot KIND ...`: PNG plots drawn by scripts/plot.py with
// Debian's matplotlib, which only /usr/bin/python3 sees (not a python3 earlier on PATH). The script is
// found in $CIUIC_SCRIPTS_DIR, else in the source tree's scripts/ (as ciuic-tune finds profiles/).
// A small library of its own (ciuic_plot) so ciuic-tune can call it without the bench layer.
#include <string>

namespace ciuic {

// The folder holding plot.py.
std::string ScriptsDir();

// Replaces this process with `/usr/bin/python3 SCRIPTS/plot.py --tool TOOL ARGS...` (argv[0] is
// "plot"). Returns only after printing one line on stderr, with exit code 1, when the interpreter or
// the script is missing.
int PlotMain(const char* tool, int argc, char** argv);

}  // namespace ciuic
