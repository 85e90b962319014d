// nccl-tuner: the environment that makes NCCL load the ciuic tuner plugin (plugins/nccl_tuner, built
// into lib/ beside this tool's bin/) with this profile, and what the plugin does with each band: the
// same NcclTunerChoiceFor the plugin calls, for the world's rules and each communicators entry. Per
// band; only the bands whose choice is more than NCCL's own uncompressed allreduce are lost.
#include <filesystem>

#include <fmt/format.h>

#include "core/sizes.h"
#include "tuner/exports/consumer.h"

namespace ciuic::exports {

namespace {

std::string ShellWord(const std::string& s) {
  if (!s.empty() && s.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_./+,:@%=-") ==
                        std::string::npos)
    return s;
  std::string q = "'";
  for (const char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

std::string NcclTunerBody(const Profile& p, const std::string& head) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path lib = "libnccl-tuner-ciuic.so";
  if (const fs::path self = fs::read_symlink("/proc/self/exe", ec); !ec)
    lib = (self.parent_path() / ".." / "lib" / lib).lexically_normal();
  std::string out = "# " + head + "\n";
  out += "# NCCL (2.19 or later) loads the ciuic tuner plugin, which reads the profile named here:\n";
  out += "export NCCL_TUNER_PLUGIN=" + ShellWord(lib.string()) + "\n";
  if (!fs::exists(lib, ec)) out += "#   (not built yet: cmake --build build --target nccl-tuner-ciuic)\n";
  out += "export CIUIC_PROFILE=" + ShellWord(ProfilePathForExport(p)) + "\n";
  out +=
      "# It needs NCCL 2.22 or later (its cost table; 2.30's v6 interface also takes a measured chunk size;\n"
      "# 2.19-2.21 take an algorithm only with a protocol). It applies only choices measured with NCCL, per\n"
      "# size band; NCCL keeps its own choice everywhere else. Communicators of other sizes are NCCL's.\n";
  auto bands = [&out](const std::vector<ProfileRule>& rules, int ranks, int nodes) {
    out += fmt::format("# communicators of {} ranks on {} node(s):\n", ranks, nodes);
    for (const auto& r : rules) {
      const NcclTunerChoice c = NcclTunerChoiceFor(r);
      out += fmt::format("#   {} [{}, {}) {}, codec {}, {} -> {}: {}\n", r.op, FormatSize(r.min_bytes),
                         r.max_bytes ? FormatSize(r.max_bytes) : "inf", r.algo, r.codec, r.precision,
                         c.apply ? "NCCL " + DescribeNcclSettings(c.choice) : "left to NCCL", c.why);
    }
  };
  bands(p.rules, p.ranks, p.nodes);
  for (const CommunicatorRules& c : p.communicators) bands(c.rules, c.ranks, c.nodes);
  out += "#   allgather, reducescatter, broadcast, reduce -> left to NCCL: the profile has allreduce rules only\n";
  out += "# To see it in NCCL's log: NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,TUNING\n";
  return out;
}

std::vector<std::string> NcclTunerLost(const Profile& p) {
  std::vector<std::string> out;
  for (const auto& r : p.rules) {
    const NcclTunerChoice c = NcclTunerChoiceFor(r);
    if (!c.apply && (r.codec != "none" || r.precision != "fp32" || r.algo != "nccl"))
      out.push_back(fmt::format("{}: {} {} {}: {}", BandName(r), r.algo, r.codec, r.precision, c.why));
  }
  return out;
}

}  // namespace

Consumer NcclTunerConsumer() { return {"nccl-tuner", NcclTunerBody, NcclTunerLost, false}; }

}  // namespace ciuic::exports
