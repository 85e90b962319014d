#include "bench/plot.h"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/files.h"
#include "core/log.h"

namespace ciuic {

namespace {
// Debian's interpreter: python3-matplotlib and python3-numpy are installed for it alone.
constexpr const char* kPython = "/usr/bin/python3";
}  // namespace

std::string ScriptsDir() {
  if (std::string dir = FolderFromEnvironment("CIUIC_SCRIPTS_DIR"); !dir.empty()) return dir;
  return ShareDir() + "/scripts";
}

int PlotMain(const char* tool, int argc, char** argv) {
  const std::string script = ScriptsDir() + "/plot.py";
  if (access(kPython, X_OK) != 0) {
    LogInfo("plot: needs {} with matplotlib (Debian: apt-get install python3-matplotlib): {}", kPython,
            std::strerror(errno));
    return 1;
  }
  if (access(script.c_str(), R_OK) != 0) {
    LogInfo("plot: cannot read '{}': {} (set CIUIC_SCRIPTS_DIR to the folder holding plot.py)", PrintableLine(script),
            std::strerror(errno));
    return 1;
  }
  std::vector<std::string> args = {kPython, script, "--tool", tool};
  for (int i = 1; i < argc; ++i) args.emplace_back(argv[i]);
  std::vector<char*> cargs;
  for (auto& a : args) cargs.push_back(a.data());
  cargs.push_back(nullptr);
  execv(kPython, cargs.data());
  LogInfo("plot: cannot start {}: {}", kPython, std::strerror(errno));
  return 1;
}

}  // namespace ciuic
