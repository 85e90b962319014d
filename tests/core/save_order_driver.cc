// Run under tests/core/io_order_shim.c (LD_PRELOAD), from ctest unit.save_order: replaces a file
// (WriteFileAtomically: --out, profiles, crossover files) and saves a runtime's error-feedback state
// (Runtime::Save) in FOLDER, then reads the shim's log and checks, for each, the order a crash-safe
// replace needs: every write goes to a temporary beside the target, that temporary is fsync'd after
// its last write, renamed over the target, and the folder is fsync'd after the rename. A kill test
// cannot see a missing fsync (the page cache survives a killed process); the order of calls can.
// Usage: save_order_driver FOLDER LOG   (exit 0: every order right; 1: the first wrong one printed)
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "collectives/backends/local/communicator.h"
#include "collectives/runtime.h"
#include "core/files.h"
#include "kernels/codec_spec.h"

namespace {

std::vector<std::string> Lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> out;
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

// The order for `target` in the log; "" when right, else what is wrong.
std::string CheckOrder(const std::vector<std::string>& log, const std::string& target, const std::string& folder) {
  std::string tmp;
  size_t rename_at = log.size();
  for (size_t i = 0; i < log.size(); ++i) {
    const std::string tail = " " + target;
    if (log[i].rfind("rename ", 0) == 0 && log[i].size() > tail.size() &&
        log[i].compare(log[i].size() - tail.size(), tail.size(), tail) == 0) {
      tmp = log[i].substr(7, log[i].size() - 7 - tail.size());
      rename_at = i;
    }
  }
  if (tmp.empty()) return "no rename onto " + target + " (written in place?)";
  if (tmp.rfind(folder + "/", 0) != 0) return "the temporary " + tmp + " is not beside " + target;
  size_t last_write = log.size(), sync = log.size(), dir_sync = log.size();
  for (size_t i = 0; i < log.size(); ++i) {
    if (log[i] == "write " + target) return "a write went to " + target + " itself";
    if (log[i] == "write " + tmp) last_write = i;
    if (log[i] == "fsync " + tmp && i < rename_at) sync = i;
    if (log[i] == "fsync " + folder && i > rename_at && dir_sync == log.size()) dir_sync = i;
  }
  if (last_write == log.size()) return "nothing was written to " + tmp;
  if (sync == log.size() || sync < last_write) return tmp + " was not fsync'd after its last write, before the rename";
  if (dir_sync == log.size()) return "the folder " + folder + " was not fsync'd after the rename onto " + target;
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: save_order_driver FOLDER LOG\n");
    return 2;
  }
  const std::string folder = argv[1], log_path = argv[2];
  try {
    const std::string out = folder + "/out.json", state = folder + "/rank0.state";
    ciuic::WriteFileAtomically(out, "{\"first\": true}\n");
    ciuic::WriteFileAtomically(out, "{\"second\": true}\n");  // a replace, not a create
    auto world = ciuic::MakeLocalWorld(1);
    ciuic::RuntimeConfig config;
    config.algo.codec = ciuic::ParseCodec("int8");  // keeps an error-feedback residual to save
    ciuic::Runtime rt(*world[0], config);
    std::vector<float> g(4096, 0.25f);
    rt.AllReduce(g.data(), g.size(), 7);
    rt.Save(state);
    rt.Save(state);
    const auto log = Lines(log_path);
    if (log.empty()) {
      std::fprintf(stderr, "save_order: the shim logged nothing (not preloaded?)\n");
      return 1;
    }
    int bad = 0;
    for (const std::string& target : {out, state}) {
      const std::string why = CheckOrder(log, target, folder);
      std::printf("%-40s %s\n", target.substr(folder.size() + 1).c_str(),
                  why.empty() ? "write, fsync, rename, fsync folder" : why.c_str());
      bad += !why.empty();
    }
    if (bad) {
      std::fprintf(stderr, "save_order: %d file(s) replaced out of order; the log:\n", bad);
      for (const auto& l : log) std::fprintf(stderr, "  %s\n", l.c_str());
    }
    return bad ? 1 : 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "save_order: %s\n", e.what());
    return 1;
  }
}
