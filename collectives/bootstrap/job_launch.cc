#include "collectives/bootstrap/job_launch.h"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string_view>

#include <fmt/format.h>

#include "core/error.h"
#include "core/files.h"

namespace ciuic {

namespace {

const char* Env(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;
}

int IntVar(const char* name, int lo, int hi) {
  const char* v = Env(name);
  if (!v) throw UsageError(fmt::format("${} is not set (the launcher's other variables are)", name));
  char* end = nullptr;
  errno = 0;
  const long x = std::strtol(v, &end, 10);
  if (errno || end == v || *end || x < lo || x > hi)
    throw UsageError(fmt::format("${}='{}': expected an integer in {}..{}", name, PrintableLine(v), lo, hi));
  return static_cast<int>(x);
}

// "4(x2),3" -> 4: the first node's task count.
int FirstTaskCount(const char* text) {
  const int n = std::atoi(text);
  return n > 0 ? n : 1;
}

}  // namespace

std::string FirstSlurmHost(const std::string& nodelist) {
  // The first entry, up to a comma outside brackets.
  size_t end = 0;
  int depth = 0;
  for (; end < nodelist.size(); ++end) {
    if (nodelist[end] == '[') ++depth;
    if (nodelist[end] == ']') --depth;
    if (nodelist[end] == ',' && depth == 0) break;
  }
  const std::string first = nodelist.substr(0, end);
  const size_t open = first.find('[');
  if (first.empty() || open == 0)
    throw UsageError(fmt::format("Slurm node list '{}': no host", PrintableLine(nodelist)));
  if (open == std::string::npos) return first;
  const size_t close = first.find(']', open);
  if (close == std::string::npos)
    throw UsageError(fmt::format("Slurm node list '{}': '[' without ']'", PrintableLine(nodelist)));
  // The first number of the range list keeps its leading zeros: "[003-005]" -> "003".
  std::string range = first.substr(open + 1, close - open - 1);
  const size_t stop = range.find_first_of(",-");
  range = range.substr(0, stop);
  if (range.empty() || range.find_first_not_of("0123456789") != std::string::npos)
    throw UsageError(fmt::format("Slurm node list '{}': expected host[N-M,...]", PrintableLine(nodelist)));
  return first.substr(0, open) + range + first.substr(close + 1);
}

bool ParentIsTorchrunAgent(const JobRank& job) {
  if (job.launcher != "torchrun") return false;
  std::ifstream in(fmt::format("/proc/{}/cmdline", getppid()), std::ios::binary);
  const std::string cmdline((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // "python3 -m torch.distributed.run ...", "python3 .../bin/torchrun ...", torch.distributed.launch.
  return cmdline.find("torch.distributed.") != std::string::npos || cmdline.find("torchrun") != std::string::npos;
}

std::optional<JobRank> JobFromEnvironment() {
  constexpr int kMax = 1 << 20;
  JobRank j;
  if (Env("RANK") && Env("WORLD_SIZE") && (Env("MASTER_ADDR") || Env("MASTER_PORT"))) {
    j.launcher = "torchrun";
    j.size = IntVar("WORLD_SIZE", 1, kMax);
    j.rank = IntVar("RANK", 0, j.size - 1);
    j.local_rank = Env("LOCAL_RANK") ? IntVar("LOCAL_RANK", 0, j.size - 1) : 0;
    j.local_size = Env("LOCAL_WORLD_SIZE") ? IntVar("LOCAL_WORLD_SIZE", 1, j.size) : 1;
    if (!Env("MASTER_ADDR")) throw UsageError("$MASTER_ADDR is not set (the launcher's other variables are)");
    j.store_host = Env("MASTER_ADDR");
    j.store_port = Env("CIUIC_STORE_PORT") ? IntVar("CIUIC_STORE_PORT", 1, 65535) : IntVar("MASTER_PORT", 1, 65534) + 1;
    return j;
  }
  if (Env("SLURM_PROCID") && Env("SLURM_NTASKS")) {
    j.launcher = "srun";
    j.size = IntVar("SLURM_NTASKS", 1, kMax);
    j.rank = IntVar("SLURM_PROCID", 0, j.size - 1);
    j.local_rank = Env("SLURM_LOCALID") ? IntVar("SLURM_LOCALID", 0, j.size - 1) : 0;
    j.local_size = Env("SLURM_NTASKS_PER_NODE") ? FirstTaskCount(Env("SLURM_NTASKS_PER_NODE")) : 1;
    const char* nodes = Env("SLURM_STEP_NODELIST") ? Env("SLURM_STEP_NODELIST") : Env("SLURM_NODELIST");
    if (!nodes) throw UsageError("$SLURM_NODELIST is not set (the launcher's other variables are)");
    j.store_host = FirstSlurmHost(nodes);
    if (Env("CIUIC_STORE_PORT")) {
      j.store_port = IntVar("CIUIC_STORE_PORT", 1, 65535);
    } else if (Env("MASTER_PORT")) {
      j.store_port = IntVar("MASTER_PORT", 1, 65535);
    } else {
      j.store_port = 29400 + (Env("SLURM_JOB_ID") ? IntVar("SLURM_JOB_ID", 0, 2147483647) % 1000 : 0);
    }
    return j;
  }
  return std::nullopt;
}

}  // namespace ciuic
